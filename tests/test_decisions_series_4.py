"""spikes.py's rolling baseline (series.Series: the fast-fall test, the pre-spike rate, the threshold, a repeated
step) pinned at its boundaries, found by mutation testing."""
from spikelog.detect.series import Series
from spikelog.detect.thresholds import REFRESH


def _fed(values):
    series = Series("loss")
    for i, x in enumerate(values):
        series.feed(i, i, x)
    return series


def _noise(count):
    """A loss of 1.0 with alternating noise of 0.01: a threshold from row 32 on."""
    return [1.0 + (0.01 if i % 2 else -0.01) for i in range(count)]


def test_a_loss_stuck_at_one_value_is_no_fast_fall():
    # every block median equal and no spread: a drop of 0 against FALLING_Z times a spread of 0 is no fall
    series = _fed([1.0] * 200)
    assert series.falling is False
    assert series.period == REFRESH


def test_an_early_falling_line_that_is_no_fast_fall_gives_a_spike_no_pre_spike_rate():
    # 32 values falling 0.01 a row: the window is not full, so the line is the baseline (slope < 0 < med) but the
    # fast-fall test has not run; the rate a spike's follow-up continues a fall by is only a fast fall's
    series = _fed([3.0 - 0.01 * i + (0.038 if i % 2 else -0.038) for i in range(32)])
    assert series.slope < 0 < series.med and not series.falling
    series.feed(32, 32, 10.0)
    assert series.episode.rate == 0.0


def test_a_spike_after_a_fast_fall_down_to_exactly_zero_opens_without_a_rate():
    # the loss falls to 0.0 and stays there: a fast fall (slope < 0) whose baseline is exactly 0, no factor per row
    series = _fed([max(0.0, 1.0 - i / 96) for i in range(96)] + [0.0] * 8)
    assert series.falling and series.slope < 0 and series.med == 0.0
    series.feed(104, 104, 1.0)
    assert (series.episode.start, series.episode.rate) == (104, 0.0)


def test_a_value_exactly_at_the_threshold_is_healthy():
    series = _fed(_noise(40))
    threshold = series.threshold
    series.feed(40, 40, threshold)
    assert series.episode is None
    assert series.window[-1] == threshold


def test_a_step_logged_again_is_a_rollback_that_ends_the_open_spike():
    series = _fed(_noise(40))
    series.feed(40, 40, 3.0)
    series.feed(40, 41, 3.0)  # the same step again: the log went back to it
    assert [(spike.step, spike.ended_by) for spike in series.spikes] == [(40, "resume")]
