"""Decisions of the spike log's report pinned at their boundaries, found by mutation testing: the summary's runs
note, ratio and cut-off; the post-mortem's counts, grad-norm lines, ratios, lost steps, related events and the
cut-off of its event sections. The report is a stand-in with the fields report.py reads."""
from pathlib import Path
from types import SimpleNamespace

from spikelog import report as spike_report
from spikelog.detect.thresholds import JUMP_CONFIRM
from spikelog.read.columns import Columns


def _spike(type="slow_recovery", step=120, start=118, baseline=2.0, peak=5.0, **fields):
    """A finished spike: peak at `step`, started at `start` (rows and steps alike), back 30 steps later."""
    base = dict(step=step, start=start, end=start + 30, type=type, baseline=baseline, peak=peak, recovery_steps=28,
                grad_norm_lead=None, level_after=baseline, ended_by="recovered", grad_norm_peak=None, lr=None,
                start_row=start, peak_row=step, end_row=start + 30)
    return SimpleNamespace(**{**base, **fields})


def _report(spikes=(), events=(), resumes=(), runs=1, grad=False):
    """A 400-value log of steps 0..399, with these spikes, events and resumes."""
    cols = Columns(["step", "loss", *(["grad_norm"] if grad else [])])
    return SimpleNamespace(path=Path("run.csv"), format="csv", columns=cols, values=400, first_step=0, last_step=399,
                           runs=runs, spikes=list(spikes), resumes=list(resumes), nan_step=None,
                           to_json=lambda: {"events": list(events)})


def _line(text, start):
    [line] = [line for line in text.splitlines() if line.startswith(start)]
    return line


def test_the_summary_notes_a_log_of_two_runs():
    """Two runs one after another are said in the summary's first line (more than one run, not more than two)."""
    assert "; 2 runs one after another" in spike_report.summary(_report(runs=2)).splitlines()[0]


def test_the_summary_gives_no_ratio_for_a_spike_over_a_zero_baseline():
    """A baseline of 0 has no 'x base' ratio: the column shows '-'."""
    row = _line(spike_report.summary(_report(spikes=[_spike(baseline=0.0, peak=0.5)])), "         120")
    assert row.split()[4] == "-"


def test_the_summary_hides_no_spike_when_there_are_exactly_as_many_as_its_limit():
    """As many spikes as the limit: all are listed, no 'smaller spikes not shown' line."""
    text = spike_report.summary(_report(spikes=[_spike()]), limit=1)
    assert not any("not shown" in line for line in text.splitlines())


def test_the_postmortem_summary_counts_the_spikes_by_type():
    """The spike count in the post-mortem's summary is broken down by type."""
    text = spike_report.postmortem(_report(spikes=[_spike(type="divergence")]))
    assert _line(text, "- Spikes:") == "- Spikes: 1 (1 divergence)"


def test_the_postmortem_names_a_logged_grad_norm_column():
    """A logged grad norm is named in the post-mortem's summary, not called not logged."""
    assert _line(spike_report.postmortem(_report(grad=True)), "- Grad norm:") == "- Grad norm: `grad_norm`"


def test_the_postmortem_gives_the_peak_ratio_over_a_baseline_under_1():
    """Any positive baseline gets its 'x the baseline' ratio, also one under 1."""
    text = spike_report.postmortem(_report(spikes=[_spike(baseline=0.5, peak=1.0)]))
    assert "(2.00x the baseline)" in _line(text, "- Peak loss:")


def test_the_postmortem_says_how_many_steps_a_grad_norm_spike_led_the_loss_spike():
    """A spike with a grad-norm lead is said to have been led, by that many steps."""
    text = spike_report.postmortem(_report(spikes=[_spike(grad_norm_lead=3, grad_norm_peak=9.0)], grad=True))
    assert "its spike started 3 steps before the loss spike" in _line(text, "- Grad norm peak")


def test_the_postmortem_says_no_grad_norm_spike_led_a_spike_without_a_lead():
    """A spike without a grad-norm lead (grad norm logged) is said to have been led by none."""
    text = spike_report.postmortem(_report(spikes=[_spike(grad_norm_peak=9.0)], grad=True))
    assert _line(text, "- Grad norm peak").endswith("no grad-norm spike led it")


def test_a_resume_at_the_row_a_spike_starts_is_no_rollback_that_ends_its_cost():
    """Steps 0..199, back to 150 at row 200 where the spike starts, on to 399: its cost runs to the end of the log."""
    spike = _spike(type="no_recovery", step=152, start=150, start_row=200, peak_row=202)
    cost = spike_report._lost_steps(spike, _report(spikes=[spike], resumes=[(200, 150, 199)]))
    assert int(cost.split()[0]) == 399 - 150


def _resume_spike(step):
    return {"kind": "resume_spike", "step": step, "resume_step": 100, "rows_after_resume": 18,
            "type": "fast_recovery"}


def test_a_spike_is_related_to_the_resume_spike_event_at_its_own_step():
    """The resume_spike event at the spike's step is noted in its evidence."""
    spike = _spike()
    events = [_resume_spike(120)]
    assert len(spike_report._related(spike, _report(spikes=[spike], events=events), events)) == 1


def test_a_spike_is_not_related_to_the_resume_spike_event_of_another_spike():
    """A resume_spike event at another spike's step is not noted in this spike's evidence."""
    spike = _spike()
    events = [_resume_spike(300)]
    assert spike_report._related(spike, _report(spikes=[spike], events=events), events) == []


def test_a_spike_starting_jump_confirm_steps_from_the_end_of_repeated_data_is_related_to_it():
    """Repeated data that ran out JUMP_CONFIRM steps after the spike started is still noted in its evidence."""
    spike = _spike()
    events = [{"kind": "repeat_data", "step": 118 + JUMP_CONFIRM, "resume_step": 100, "before": 2.0, "low": 1.6,
               "high": 2.0, "expected": 2.0, "spike": True}]
    assert len(spike_report._related(spike, _report(spikes=[spike], events=events), events)) == 1


def test_the_fast_spike_table_gives_the_ratio_over_a_baseline_under_1():
    """A fast spike over a positive baseline under 1 gets its 'x baseline' ratio in the table."""
    text = spike_report.postmortem(_report(spikes=[_spike(type="fast_recovery", baseline=0.5, peak=1.0)]))
    assert _line(text, "| 120 |").split("|")[4].strip() == "2"


def _grad_norm_spikes(n):
    return [{"kind": "grad_norm_spike", "step": 10 * i, "start": 10 * i, "baseline": 1.0, "peak": 3.0,
             "type": "fast_recovery"} for i in range(n)]


def test_an_event_section_of_exactly_20_events_lists_them_all():
    """20 events of a kind are all listed: no '... more in --json' line."""
    lines = spike_report._event_sections(_grad_norm_spikes(20), _report())
    assert not any("more in `--json`" in line for line in lines)


def test_an_event_section_of_21_events_sends_the_21st_to_the_json():
    """The 21st event of a kind is left to --json, and the section says so."""
    lines = spike_report._event_sections(_grad_norm_spikes(21), _report())
    assert "- ... 1 more in `--json`" in lines
