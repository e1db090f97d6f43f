"""Decisions of the spike log's event trackers (spikelog/detect/events.py) pinned at their boundaries, found by
mutation testing: the creep watch's reset, new low and block count; the resume watch's gates, drop and jump back;
grad-norm leads and grad-norm spikes alone; resume spikes; dataset spikes shared, confined and in the main loss."""
import types

import pytest

from spikelog.detect.events import (Creep, ResumeWatch, grad_only_events, link_grad_leads, resume_spike_events,
                                    series_spike_events)


def _creep(levels):
    """A creep watch fed these block medians (32 steps a block, scale 2.0, spread 0), and its events."""
    events = []
    creep = Creep(events)
    for k, level in enumerate(levels):
        creep.add_block(32 * k, 32 * k + 31, 32 * k + 31, level, 2.0, 0.0)
    return creep, events


def _kinds(events):
    return [e["kind"] for e in events]


@pytest.mark.parametrize("why, kept", [(None, True), ("divergence", True), ("repeat_data", False)])
def test_only_a_reset_for_repeated_data_withdraws_the_creep_already_reported(why, kept):
    creep, events = _creep([2.0] * 4 + [2.5] * 4)
    creep.reset(why)
    assert (_kinds(events) == ["non_spike_divergence"]) is kept


def test_a_creep_after_a_new_low_rises_from_the_block_after_the_low():
    """Block medians 10, 1, 2, 10 smooth to 6; a 3 then smooths to 2.5, a new low although that block sits above
    it: the rise that follows begins at the next block (step 160), not at the low's own block (128)."""
    _, events = _creep([10.0, 1.0, 2.0, 10.0, 3.0, 3.0, 3.0])
    assert [e["step"] for e in events] == [160]


@pytest.mark.parametrize("highs, kinds", [(2, []), (3, ["non_spike_divergence"])])
def test_a_creep_is_two_smoothed_levels_above_the_limit(highs, kinds):
    """After four blocks at 2.0, the first block at 2.5 leaves the smoothed level at 2.0; each later one is above
    the 10% limit: CREEP_BLOCKS (2) of those is a creep."""
    assert _kinds(_creep([2.0] * 4 + [2.5] * highs)[1]) == kinds


def _watch(med=10.0):
    """A resume watch after a resume at step 100 from a level of 10.0 (sigma 0.5: a drop needs 1.0)."""
    events = []
    series = types.SimpleNamespace(med=med, sigma=0.5, repeat_ended=lambda gap, row: None)
    return ResumeWatch(100, 100, 10.0, series, events), events


def test_the_resume_watch_ignores_values_while_the_baseline_has_no_median():
    watch, events = _watch(med=None)
    for k in range(32):
        watch.add(100 + k, 100 + k, 8.0)
    assert events == []


@pytest.mark.parametrize("after, kinds", [(9.0, ["resume_drop"]), (9.05, [])])
def test_a_resume_drop_of_exactly_two_sigma_is_a_drop(after, kinds):
    watch, events = _watch()
    for k in range(32):
        watch.add(100 + k, 100 + k, after)
    assert _kinds(events) == kinds


def test_the_value_that_completes_the_drop_block_is_no_part_of_the_jump_back():
    """31 values at 8.0 and a 32nd at 12.0 make a drop to 8.0 (their median); the jump back is the 16 values
    (JUMP_CONFIRM) after that block, from step 132, even though the 32nd was already above the midpoint."""
    watch, events = _watch()
    for k, x in enumerate([8.0] * 31 + [12.0] * 17):
        watch.add(100 + k, 100 + k, x)
    assert [e["step"] for e in events if e["kind"] == "repeat_data"] == [132]


def test_a_jump_back_starts_at_the_first_value_above_the_midpoint_not_one_exactly_at_it():
    """After a drop from 10.0 to 8.0 the midpoint is 11.0: a first value of exactly 11.0 is not the jump's start."""
    watch, events = _watch()
    for k in range(32):
        watch.add(100 + k, 100 + k, 8.0)
    for k, x in enumerate([11.0] + [12.0] * 16):
        watch.add(132 + k, 132 + k, x)
    assert [e["step"] for e in events if e["kind"] == "repeat_data"] == [133]


def _spike(start_row, start=None, end_row=None, step=None):
    """A loss (or dataset) spike: its first row and step, last row; `step` is its peak's."""
    start = start_row if start is None else start
    return types.SimpleNamespace(start_row=start_row, start=start, end_row=start_row + 5 if end_row is None else end_row,
                                 step=start if step is None else step, type="fast_recovery", grad_norm_lead=None)


def _grad(start_row, start=None, peak=3.0):
    """A grad-norm spike from a baseline of 1.0 to `peak`."""
    start = start_row if start is None else start
    return types.SimpleNamespace(start_row=start_row, start=start, step=start, baseline=1.0, peak=peak,
                                 type="fast_recovery")


def test_a_grad_norm_spike_starting_on_the_resume_row_leads_the_loss_spike_after_the_resume():
    spike = _spike(102)
    link_grad_leads([spike], [_grad(100)], [(100, 100, 150)])
    assert spike.grad_norm_lead == 2


@pytest.mark.parametrize("grad_row, grad_start", [(92, 92), (101, 82)])
def test_a_grad_norm_spike_leads_by_up_to_ten_steps_or_by_one_logged_row(grad_row, grad_start):
    """A loss spike at row 102, step 102 (LEAD_STEPS: 10): a grad-norm spike exactly 10 steps earlier, several rows
    back, leads it; so does one a row earlier that is 20 steps earlier (a log written every 20 steps)."""
    spike = _spike(102, start=102)
    link_grad_leads([spike], [_grad(grad_row, grad_start)], [])
    assert spike.grad_norm_lead == 102 - grad_start


@pytest.mark.parametrize("grad_row, grad_start, alone", [(101, 82, False), (95, 92, False), (100, 80, True)])
def test_a_grad_norm_spike_that_led_a_loss_spike_is_no_event_of_its_own(grad_row, grad_start, alone):
    """A loss spike at row 102, step 102: a grad-norm spike one row before it (20 steps), or exactly LEAD_STEPS (10)
    steps before it, led it; one two rows and 22 steps before it is a spike alone."""
    events = []
    grad_only_events([_spike(102, start=102)], [_grad(grad_row, grad_start)], events)
    assert (_kinds(events) == ["grad_norm_spike"]) is alone


@pytest.mark.parametrize("grad_row", [20, 50])
def test_a_grad_norm_spike_during_a_loss_spike_is_no_event_of_its_own(grad_row):
    """A loss spike over rows 10-50: a grad-norm spike within it, up to its last row, came during it."""
    events = []
    grad_only_events([_spike(10, end_row=50)], [_grad(grad_row)], events)
    assert events == []


def test_a_grad_norm_spike_alone_at_exactly_twice_its_baseline_is_an_event():
    events = []
    grad_only_events([], [_grad(100, peak=2.0)], events)
    assert _kinds(events) == ["grad_norm_spike"]


def test_a_loss_spike_exactly_64_rows_after_a_resume_is_a_resume_spike():
    events = []
    resume_spike_events([_spike(164)], [(100, 100, 150)], events)
    assert _kinds(events) == ["resume_spike"]


def _dataset(name, spikes):
    return types.SimpleNamespace(name=name, med=1.0, spikes=spikes)


def _series_events(a, b, main=()):
    events = []
    series_spike_events(types.SimpleNamespace(spikes=list(main)), [_dataset("a", a), _dataset("b", b)], events)
    return events


@pytest.mark.parametrize("start, scopes", [(23, ["shared"]), (24, ["confined", "confined"])])
def test_dataset_spikes_up_to_three_rows_apart_are_one_shared_event(start, scopes):
    """SHARED_GAP is 3 rows: a spike in b starting 3 rows after a's ended is the same event, 4 rows after is another."""
    events = _series_events([_spike(10, end_row=20)], [_spike(start, end_row=30)])
    assert [e["scope"] for e in events] == scopes


@pytest.mark.parametrize("main_start, main_end", [(33, 40), (1, 7)])
def test_a_main_loss_spike_exactly_three_rows_from_a_dataset_spike_is_in_the_main_loss(main_start, main_end):
    """A dataset spike over rows 10-30: a main loss spike starting 3 rows after it, or ending 3 rows before it."""
    events = _series_events([_spike(10, end_row=30)], [], main=[_spike(main_start, end_row=main_end)])
    assert [e["in_main"] for e in events] == [True]
