"""The spike analyser's thresholds pinned at their values (issue 27): mutation testing's survivors on EARLY_RECENT,
SETTLE_TOL, FALLING_Z, OFFSET_REL, SPIKE_ABS, CREEP_ABS, CREEP_Z, RESUME_NEAR and LEAD_STEPS, each killed by an input
just inside and just past its boundary."""
import pytest

from spikelog.detect.events import Creep, link_grad_leads, resume_spike_events
from spikelog.detect.series import Episode
from test_decisions_events import _grad, _spike
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


@pytest.mark.parametrize("x, spike", [(0.0119, False), (0.0121, True)])
def test_a_spike_near_zero_is_at_least_0_2_percent_of_the_runs_highest_baseline_above_it(x, spike):
    # a baseline of 1.0 (the run's scale), then 96 values at 0.01 with no spread: 5% of the baseline is 0.0005,
    # under SPIKE_ABS of the scale (0.002), so the threshold is 0.012: 0.0119 is healthy, 0.0121 opens a spike
    series = _fed([1.0] * 32 + [0.01] * 96)
    series.feed(128, 128, x)
    assert (series.episode is not None) is spike


def _creep(levels, scale=2.0, spread=0.0):
    """A creep watch fed these block medians (32 steps a block) at this scale and spread, and its events."""
    events = []
    creep = Creep(events)
    for k, level in enumerate(levels):
        creep.add_block(32 * k, 32 * k + 31, 32 * k + 31, level, scale, spread)
    return events


@pytest.mark.parametrize("high, creep", [(0.119, False), (0.121, True)])
def test_a_creep_near_zero_is_at_least_1_percent_of_the_scale_above_the_low(high, creep):
    # a low of 0.1 at scale 2.0: 10% of the low (0.01) is under CREEP_ABS of the scale (0.02), so block medians
    # must pass 0.12 to creep
    assert bool(_creep([0.1] * 4 + [high] * 4)) is creep


@pytest.mark.parametrize("high, creep", [(1.9, False), (2.0, True)])
def test_a_creep_in_a_spread_loss_is_more_than_3_standard_errors_of_a_block_median_above_the_low(high, creep):
    # a low of 1.0 whose logs spread by 1.0: a block median's noise reaches exp(CREEP_Z * 0.2216) = 1.944x the
    # low (3.3 standard errors would be 2.078x): 1.9 is that noise, 2.0 a creep
    assert bool(_creep([1.0] * 4 + [high] * 4, spread=1.0)) is creep


@pytest.mark.parametrize("start_row, near", [(164, True), (165, False)])
def test_a_loss_spike_up_to_64_rows_after_a_resume_is_a_resume_spike(start_row, near):
    events = []
    resume_spike_events([_spike(start_row)], [(100, 100, 150)], events)
    assert bool(events) is near


@pytest.mark.parametrize("grad_start, lead", [(92, 10), (91, None)])
def test_a_grad_norm_spike_rows_back_leads_a_loss_spike_by_at_most_10_steps(grad_start, lead):
    # a loss spike at row and step 102, a grad-norm spike 7 rows back: 10 steps earlier leads it, 11 does not
    spike = _spike(102, start=102)
    link_grad_leads([spike], [_grad(95, grad_start)], [])
    assert spike.grad_norm_lead == lead
