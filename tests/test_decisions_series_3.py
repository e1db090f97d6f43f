"""spikes.py's verdict on a spike whose follow-up is cut short (series.Episode.by_level: the log ends, rolls back or
reaches the horizon), and a waiting recovery due for its check, pinned at their boundaries, found by mutation testing."""
import pytest

from spikelog.detect.thresholds import VERIFY
from test_decisions_series import _spike, _waiting


def test_a_recovery_waiting_for_its_check_when_the_log_ends_is_ended_by_the_log():
    assert _waiting().by_level("log_end") == ("fast_recovery", 1, 1.0, "log_end")


def test_the_level_after_a_cut_short_spike_is_taken_from_the_values_after_its_peak_only():
    episode = _spike()  # peak 3.0 at row 0; band 1.3
    for row, value in ((1, 1.4), (2, 1.45)):
        assert episode.add(row, row, value) is None
    verdict = episode.by_level("log_end")
    assert (verdict[0], verdict[1], verdict[3]) == ("no_recovery", 2, "log_end")
    assert verdict[2] == pytest.approx(1.425)  # the median of 1.4 and 1.45, not of 3.0, 1.4 and 1.45


def test_a_cut_short_spike_whose_level_after_is_exactly_the_band_recovered():
    episode = _spike()
    for row in (1, 2):
        assert episode.add(row, row, episode.band) is None
    assert episode.by_level("log_end") == ("fast_recovery", 1, episode.band, "log_end")


def test_a_waiting_recovery_whose_check_is_due_takes_no_more_values_at_once():
    # the first run fills the values after the recovery up to one before the check (VERIFY - 1): the next takes none
    episode = _waiting()
    values = [1.2] * 200
    first = episode.pending_run(list(range(6, 206)), values, 6, 0, 200)
    assert len(episode.after) == VERIFY - 1
    assert episode.pending_run(list(range(6, 206)), values, 6, first, 200) == first
