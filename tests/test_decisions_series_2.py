"""More decisions of spikes.py's spike follow-up (series.Episode) pinned at their boundaries, found by mutation
testing: the sparse log's fast recovery, the level check after a recovery, settling, divergence and by_level."""
import math

import pytest

from spikelog.detect.series import Episode
from spikelog.detect.thresholds import FALL_PACE
from test_decisions_series import _spike, _waiting


def _recovered_at(baseline, sigma, threshold, values, trend=(0.0, 0, 0.0)):
    """A peak of 3.0 at row 0, then `values` from row 1 (the first five in the band): the verdict of the level
    check, given on the value that makes VERIFY (128) after the recovery, at row 129."""
    episode = Episode(0, 0, 3.0, baseline, sigma, threshold, [], trend)
    verdicts = [episode.add(row, row, x) for row, x in enumerate(values, 1)]
    assert verdicts[:-1] == [None] * (len(values) - 1) and len(values) == 129
    return verdicts[-1]


def test_a_recovery_on_the_second_row_of_a_sparse_log_after_the_peak_is_slow():
    """Logged every 25 steps: back in the band 50 steps (two rows) after the peak is neither within FAST_STEPS nor
    on the very next row: a slow recovery."""
    episode = _spike()
    assert episode.add(25, 1, 2.0) is None
    for k in range(5):
        assert episode.add(50 + 25 * k, 2 + k, 1.0) is None
    assert episode.pending[:2] == ("slow_recovery", 50)


@pytest.mark.parametrize("third, fourth", [(0.0, 0.125), (0.125, 0.0)], ids=["third_zero", "fourth_zero"])
def test_a_loss_at_exactly_zero_after_its_recovery_is_checked_without_a_pace(third, fourth):
    """A loss that can reach 0 (baseline 0): back at 0 from row 1, then one of the later quarters of the values
    checked has a median of exactly 0. No pace is taken from a ratio with 0 in it: the recovery stands."""
    values = [0.0] * 65 + [third] * 32 + [fourth] * 32
    assert _recovered_at(0.0, 0.125, 0.75, values) == ("fast_recovery", 1, 0.0, "recovered")


def test_a_later_fall_at_exactly_half_the_pre_spike_pace_is_a_fast_fall_going_on():
    """Before the spike the loss fell by a factor per row (rate); after it, the later quarters (0.9, then 0.8) fall
    at log(0.8 / 0.9) / 32 per row, exactly FALL_PACE (half) of that rate: the fall goes on, and is judged against
    that pace. There the level (0.85) is far above where the fall would have taken it: a lasting offset, where a
    straight trend would call the loss (below its pre-spike level) back."""
    rate = math.log(0.8 / 0.9) / 16
    assert FALL_PACE * rate == math.log(0.8 / 0.9) / 32  # (exactly: the boundary)
    values = [1.0] * 65 + [0.9] * 32 + [0.8] * 32
    verdict = _recovered_at(1.0, 0.01, 1.1, values, trend=(0.0, 0, rate))
    assert (verdict[0], verdict[1], verdict[3]) == ("no_recovery", 1, "settled")
    assert verdict[2] == pytest.approx(0.85)


def test_a_level_lower_by_exactly_fall_z_sigma_is_not_still_coming_down():
    """Back in the band at 1.3125 (band 1.375, noise 0.125) and then at 1.25: above the trend by more than the
    margin (0.1875), and its later median lower than its early one by exactly FALL_Z (0.5) noise sigma, 0.0625:
    not more, so not still coming down: a lasting offset, no_recovery from row 1."""
    values = [1.3125] * 65 + [1.25] * 64
    assert _recovered_at(1.0, 0.125, 2.0, values) == ("no_recovery", 1, 1.25, "settled")


@pytest.mark.parametrize("low", [1.375, 1.25], ids=["at_band", "under_band"])
def test_a_spike_whose_block_medians_are_in_the_band_is_not_settled(low):
    """Back in the band (edge 1.375) at `low`, but up to 2.5 every sixth row, before each recovery is checked: the
    same spike goes on, its block medians at `low`. Four blocks in, a level at or under the band's edge is on its
    way back (the tail test calls the recovery): no no_recovery verdict while it is followed."""
    episode = Episode(0, 0, 3.0, 1.0, 0.125, 1.75, [])
    verdicts = [episode.add(row, row, 2.5 if row % 6 == 0 else low) for row in range(1, 160)]
    assert [v for v in verdicts if v] == []
    assert len(episode.blocks) == 5 and episode.blocks[-1][1] == low


def test_a_loss_settled_at_one_and_a_half_times_a_baseline_under_one_is_a_divergence():
    """A baseline of 0.5 (positive, under 1): a log that ends at 0.75 after the peak, 1.5x that baseline exactly,
    is judged a divergence by its level."""
    episode = Episode(0, 0, 1.5, 0.5, 0.05, 0.8, [])
    for row in range(1, 11):
        assert episode.add(row, row, 0.75) is None
    assert episode.by_level("end") == ("divergence", None, 0.75, "end")


def test_a_log_ending_a_block_after_a_recovery_is_judged_by_the_level_check():
    """Back in the band at 1.2 (band 1.3, noise 0.1) from row 1, and the log ends with exactly BLOCK (32) values
    after it: enough for the level check, which finds a lasting offset (0.2 above the trend, not coming down)."""
    episode = _spike()
    for row in range(1, 34):
        assert episode.add(row, row, 1.2) is None
    assert len(episode.after) == 32
    assert episode.by_level("end") == ("no_recovery", 1, 1.2, "settled")


def test_a_log_ending_while_a_recovery_waits_for_its_check_ends_it_as_the_recovery():
    """Four values after the recovery (too few for the level check): the recovery stands, ended by the log end."""
    assert _waiting().by_level("end") == ("fast_recovery", 1, 1.0, "end")
