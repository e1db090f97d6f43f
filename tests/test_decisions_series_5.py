"""series.Series' feed_run, the replay after a recovery, repeat_ended and rollback pinned at their decisions and
boundaries, found by mutation testing."""
import pytest

from spikelog.detect.series import Series
from test_decisions_series_4 import _fed, _noise


def test_a_strict_run_takes_the_healthy_values_before_a_spike_and_stops_there():
    # strict: the value past the threshold is left to the caller, the three healthy ones before it go in at once
    series = _fed(_noise(40))
    values = [1.0, 1.0, 1.0, 5.0, 1.0, 1.0]
    assert series.feed_run(list(range(40, 46)), values, 40, 0, 6, strict=True) == 3
    assert series.episode is None
    assert list(series.at)[-1] == (42, 42) and series.last_step == 42


def test_the_values_after_a_recovery_are_read_again_at_their_own_rows_when_rows_skip():
    # a series logged on every other row of the file (rows 0, 2, 4, ...): back in the band at steps 41-42, then
    # up again at step 43 (row 86), a new spike. The values after the recovery are read again value by value, at
    # their own rows, not as a run of rows in a row
    series = Series("loss")
    for i, x in enumerate(_noise(40)):
        series.feed(i, 2 * i, x)
    for step, x in [(40, 3.0), (41, 1.0), (42, 1.0), (43, 3.0)]:
        series.feed(step, 2 * step, x)
    assert [(spike.step, spike.type) for spike in series.spikes] == [(40, "fast_recovery")]
    assert (series.episode.start, series.episode.start_row) == (43, 86)


def test_a_repeat_ended_with_no_spike_open_rebuilds_nothing_and_says_no_spike_stays():
    calls = []
    series = Series("loss", on_reset=calls.append)
    for i, x in enumerate(_noise(40)):
        series.feed(i, i, x)
    assert series.repeat_ended(0.5, 40) is False
    assert calls == ["repeat_data"]


def test_a_spike_whose_peak_is_exactly_the_threshold_of_the_corrected_level_is_no_spike():
    # the peak is twice the threshold and the gap is the threshold: the corrected threshold is exactly the peak,
    # and a value exactly at the threshold is healthy
    series = _fed(_noise(40))
    threshold = series.threshold
    series.feed(40, 40, 2 * threshold)
    assert series.episode is not None
    assert series.repeat_ended(threshold, 41) is False
    assert series.episode is None


def test_a_rollback_to_exactly_the_start_of_a_spike_that_rebased_the_window_restores_the_pre_spike_baseline():
    # at 1.0 for 64 rows, then at 2.0: a divergence settled at 2.0 re-bases the window there. A resume at the very
    # step the spike started goes back to before it: the pre-spike window (median 1.0) again
    series = _fed(_noise(64) + [2.0 + (0.01 if i % 2 else -0.01) for i in range(200)])
    assert [(spike.start, spike.type, spike.ended_by) for spike in series.spikes] == [(64, "divergence", "settled")]
    assert series.med == pytest.approx(2.0, abs=0.02)
    series.rollback(64, 264)
    assert series.med == pytest.approx(1.0, abs=0.02)
    assert series.snapshot is None
