"""Decisions of spikes.py's spike follow-up (series.Episode) pinned at their boundaries, found by mutation testing:
the recovery's tail at the band, the horizon, and the runs a spike takes at once (pending_run, descent_run)."""
import math

import pytest

from spikelog.detect.series import Episode


def _spike():
    """A peak of 3.0 at row 0 on a baseline of 1.0 (sigma 0.1): band 1.3, threshold 1.6."""
    return Episode(0, 0, 3.0, 1.0, 0.1, 1.6, [])


def _waiting():
    """A spike back at 1.0 from row 1: its recovery (rows 1-5) waits for the level check, with 4 values after it."""
    episode = _spike()
    assert [episode.add(row, row, 1.0) for row in range(1, 6)] == [None] * 5
    assert episode.pending[:2] == ("fast_recovery", 1)
    return episode


@pytest.mark.parametrize("at_band", [(0,), (1, 2, 3)], ids=["first", "median"])
def test_a_tail_exactly_at_the_band_confirms_the_recovery(at_band):
    """The five values after the peak: the first one and their median in the band (<= its edge) confirm the
    recovery from the first. With the first value, or three of five (the median), exactly at the edge it is back
    from row 1, not one row later."""
    episode = _spike()
    for k in range(5):
        assert episode.add(1 + k, 1 + k, episode.band if k in at_band else 1.0) is None
    assert episode.pending is not None and episode.pending[:2] == ("fast_recovery", 1)


def test_a_recovery_confirmed_on_the_row_that_ends_the_fourth_block_waits_for_its_check():
    """At 1.4 (above the band, flat) for rows 1-122, back at 1.0 from row 123: the recovery is confirmed at row
    127, the value that would end the fourth block (when the level is first judged settled). That value waits with
    the recovery for the level check: no block is finished there, and no no_recovery verdict is given."""
    episode = _spike()
    verdicts = {row: episode.add(row, row, 1.4 if row < 123 else 1.0) for row in range(1, 128)}
    assert {row: v for row, v in verdicts.items() if v} == {}
    assert episode.pending[:2] == ("slow_recovery", 123) and len(episode.blocks) == 3


def test_a_spike_still_coming_down_at_the_horizon_is_judged_there_by_its_level():
    """A slow decay, 1 + 300 / (row + 160), stays above the band (2.86 at row 1, 1.07 at row 4095, with a band of
    1.03) and comes down at a pace that keeps it followed. At 4,096 values (MAX_FOLLOW, row 4095) it is
    judged by its level there: no_recovery, ended by the horizon."""
    episode = Episode(0, 0, 3.0, 1.0, 0.01, 1.06, [])
    row, verdict = next((row, v) for row in range(1, 4200) if (v := episode.add(row, row, 1.0 + 300 / (row + 160))))
    assert (row, verdict[0], verdict[1], verdict[3]) == (4095, "no_recovery", 4095, "horizon")
    assert verdict[2] == pytest.approx(1.0 + 300 / 4255, abs=0.002)


@pytest.mark.parametrize("first", [1.0, 1.6], ids=["under", "at_limit"])
def test_a_waiting_recovery_takes_the_values_under_the_new_spike_limit_at_once(first):
    """While the recovery waits for its check, values up to the new-spike limit (the threshold, 1.6, as the loss
    came back to the baseline) are taken as one run: all ten, the first one under or exactly at the limit."""
    episode = _waiting()
    values = [first] + [1.2] * 9
    assert episode.pending_run(list(range(6, 16)), values, 6, 0, 10) == 10
    assert (episode.count, len(episode.after)) == (16, 14)


def test_a_spike_coming_down_takes_no_run_while_a_tail_value_is_in_the_band():
    """After a value exactly at the band's edge (in it), the values above it are not taken at once: the tail may
    confirm a recovery, value by value."""
    episode = _spike()
    assert episode.add(1, 1, episode.band) is None
    assert episode.descent_run(list(range(12)), [2.0] * 12, 0, 2, 12) == 2


@pytest.mark.parametrize("odd", [math.nan, None], ids=["nan", "band"])
def test_a_spike_coming_down_takes_its_run_only_up_to_a_value_not_above_the_band(odd):
    """The values above the band and not over the peak are taken at once, up to the first that is not: a NaN, or
    a value exactly at the band's edge (in the band)."""
    episode = _spike()
    values = [2.0, 2.0, episode.band if odd is None else odd, 2.0, 2.0]
    assert episode.descent_run(list(range(1, 6)), values, 1, 0, 5) == 2
    assert episode.count == 3
