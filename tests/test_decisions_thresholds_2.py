"""The spike analyser's thresholds pinned at their values (issue 27): mutation testing's survivors on EARLY_RECENT,
SETTLE_TOL, FALLING_Z and OFFSET_REL, each killed by an input just inside and just past its boundary."""
import pytest

from spikelog.detect.series import Episode
from test_decisions_series_2 import _recovered_at
from test_decisions_series_4 import _fed


@pytest.mark.parametrize("x, spike", [(3.073, False), (3.08, True)])
def test_an_early_falling_line_is_never_under_the_median_of_its_latest_8_values(x, spike):
    # 32 values falling 0.01 a row, the odd ones 0.038 under the line: the early baseline is the line, raised to
    # the middle of the latest 8 values (2.738; the latest 9 would give 2.732, a threshold 0.006 lower), so the
    # threshold is 3.076: a value of 3.073 is healthy and 3.08 opens a spike
    series = _fed([3.0 - 0.01 * i + (-0.038 if i % 2 else 0.038) for i in range(32)])
    series.feed(32, 32, x)
    assert (series.episode is not None) is spike


@pytest.mark.parametrize("high, verdict", [(2.625, "no_recovery"), (2.6328125, "divergence")])
def test_a_level_rising_by_more_than_one_noise_sigma_after_a_spike_is_a_divergence(high, verdict):
    # baseline 2.0, noise 0.125 (band 2.375): above the band at 2.5 for two blocks, then at `high` for two. A rise
    # of exactly SETTLE_TOL (one sigma, 0.125) is level, settled there (no_recovery: 1.31x the baseline, under
    # DIVERGE_RATIO); one of 1.0625 sigma is still climbing, a divergence
    episode = Episode(0, 0, 5.0, 2.0, 0.125, 3.0, [])
    verdicts = [episode.add(row, row, 2.5 if row < 64 else high) for row in range(1, 128)]
    assert verdicts[:-1] == [None] * 126
    assert verdicts[-1][0] == verdict


@pytest.mark.parametrize("step, falling", [(0.022, False), (0.0235, True)])
def test_a_block_median_more_than_3_sigma_under_the_one_two_blocks_earlier_is_a_fast_fall(step, falling):
    # three blocks of 32 values, each `step` lower than the one before, with alternating noise of 0.01 (the last
    # block's robust sigma 0.02 / 1.349 = 0.0148): a drop of 0.044 over two blocks is 2.97 sigma, no fast fall;
    # 0.047 is 3.17 sigma, past FALLING_Z, and the baseline becomes a line through the window
    series = _fed([1.0 - step * (i // 32) + (0.01 if i % 2 else -0.01) for i in range(96)])
    assert series.episode is None
    assert series.falling is falling


@pytest.mark.parametrize("level, verdict", [(1.019, "fast_recovery"), (1.021, "no_recovery")])
def test_a_level_after_a_recovery_more_than_2_percent_above_a_flat_trend_is_a_lasting_offset(level, verdict):
    # baseline 1.0 with noise 0.01 (band 1.03): back in the band at `level` from row 1. OFFSET_Z noise sigma is
    # 0.015, so the margin is OFFSET_REL of the baseline, 0.02: 1.9% above is back on the trend, 2.1% a lasting
    # offset (no_recovery)
    assert _recovered_at(1.0, 0.01, 1.6, [level] * 129)[0] == verdict
