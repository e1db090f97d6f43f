"""resume_check's later decisions (what classify blames when no lost entry names the cause, which cells of the report's
table are starred, a report without a resumed run, the settings main hands the check, where the demo runs, and the exit
code when stdout fails): found by mutation testing."""
import errno
import os
import sys

import pytest

import resume_check as rc
from test_decisions_resume_check_4 import CounterHoldingALambda


# --- classify: an optimizer the checkpoint lacks, an LR that differs, the hint to return batches -------------------

def resumed_like(reference, kinds):
    """The resumed series: the reference's, with one resume whose load lost nothing and whose entries are `kinds`."""
    return dict(reference, resumes=[{"not_restored": [], "entries": kinds}])


def test_a_first_difference_on_the_resumed_step_itself_is_not_blamed_on_a_missing_optimizer():
    # no optimizer in the checkpoint, but step 2 (the first after the resume) already differs with the same batch:
    # its forward pass differed, before any update the optimizer state could change
    reference = {"batch": [0, 1, 2, 3], "loss": [1.0] * 4, "lr": [0.1] * 4}
    found = {"first_step": 2, "batch": None, "loss": 2, "lr": None}
    assert rc.classify(reference, resumed_like(reference, {}), found, (2,))[0] == "rng_not_restored"


def test_an_lr_that_differs_after_the_resume_with_nothing_lost_is_a_lost_lr_schedule():
    reference = {"batch": [0, 1, 2, 3], "loss": [1.0] * 4, "lr": [0.1] * 4}
    found = {"first_step": 3, "batch": None, "loss": None, "lr": 3}
    resumed = resumed_like(dict(reference, lr=[0.1, 0.1, 0.1, 0.2]), {"opt": "optimizer"})
    assert rc.classify(reference, resumed, found, (2,))[0] == "scheduler_state_lost"


@pytest.mark.parametrize("batches, hinted", [([None] * 4, True), ([0, 1, 2, 3], False)],
                         ids=["no batches", "batches"])
def test_an_unnamed_divergence_asks_for_batches_only_when_train_step_returned_none(batches, hinted):
    reference = {"batch": batches, "loss": [1.0] * 4, "lr": [None] * 4}
    found = {"first_step": None, "batch": None, "loss": None, "lr": None, "state": ["w"]}
    summary = rc.classify(reference, resumed_like(reference, {}), found, (2,))[1]
    assert ("return {'loss', 'batch', 'lr'} from train_step()" in summary) is hinted


# --- report: the verdict line alone without a resumed run; a star on exactly the cells that differ -----------------

def test_a_result_without_a_resumed_run_is_reported_as_its_verdict_line_alone():
    result = rc.check_resume(CounterHoldingALambda, steps=2, resume_at=(1,))  # checkpoint_unloadable: no resumed run
    assert rc.report(result) == f"[FAIL] resume_check: {result.summary}"


def table(resumed_changes):
    """The report's rows for a 3-step run resumed before step 1, the resumed run changed by `resumed_changes`:
    each row as (loss starred, LR starred, batch column)."""
    reference = {"loss": [1.0] * 3, "lr": [0.1] * 3, "batch": [10, 11, 12]}
    details = {"steps": 3, "resume_at": [1], "rtol": 0.0, "atol": 0.0, "reference": reference,
               "resumed": dict(reference, **resumed_changes)}
    rows = []
    for row in rc.report(rc.CheckResult("resume_check", "fail", "x", details)).splitlines()[2:]:
        _, _, loss, _, lr, *seen = row.lstrip(" >").split()
        rows.append((loss.endswith("*"), lr.endswith("*"), " ".join(seen)))
    return rows


def test_only_a_resumed_loss_that_differs_is_starred():
    assert [loss for loss, _, _ in table({"loss": [1.0, 1.0, 0.5]})] == [False, False, True]


def test_only_a_resumed_lr_that_differs_is_starred():
    assert [lr for _, lr, _ in table({"lr": [0.1, 0.1, 0.2]})] == [False, False, True]


def test_the_batch_column_says_same_only_for_the_references_batch_at_that_step():
    assert [seen for _, _, seen in table({"batch": [10, 11, 10]})] == ["same", "same", "= step 0*"]


def test_a_step_without_an_lr_shows_a_dash():
    assert rc.lr_text(None) == "-"


# --- main: what it hands check_resume, where the demo runs, the exit code when stdout fails ------------------------

def fake_check(status, calls):
    """A check_resume that records (pid, weights_only) in `calls` and returns a result of `status` without training."""
    def check_resume(factory, steps, resume_at, rtol, atol, weights_only):
        calls.append((os.getpid(), weights_only))
        return rc.CheckResult("resume_check", status, "x", {})
    return check_resume


@pytest.mark.parametrize("flags, weights_only", [((), True), (("--no-weights-only",), False)])
def test_the_checkpoint_is_read_with_weights_only_unless_no_weights_only_is_given(flags, weights_only, monkeypatch):
    calls = []
    monkeypatch.setattr(rc, "check_resume", fake_check("pass", calls))
    rc.main(["--healthy", *flags])
    assert [w for _, w in calls] == [weights_only]


def test_the_embedded_demo_runs_in_this_process_not_a_supervised_child(monkeypatch):
    calls = []  # a child's appends would stay in the child
    monkeypatch.setattr(rc, "check_resume", fake_check("pass", calls))
    rc.main(["--healthy"])
    assert [pid for pid, _ in calls] == [os.getpid()]


class FailingStdout:
    """A stdout whose writes raise `exc`, on a file descriptor of its own for main's redirect to /dev/null."""

    def __init__(self, exc, fd):
        self.exc, self.fd = exc, fd

    def write(self, text):
        raise self.exc

    def flush(self):
        pass

    def fileno(self):
        return self.fd


@pytest.mark.parametrize("exc, status, code", [
    (BrokenPipeError(), "fail", 1),  # a closed pipe: the verdict was reached, its exit code stands
    (BrokenPipeError(), "pass", 0),
    (OSError(errno.ENOSPC, "No space left on device"), "pass", 1),  # the verdict could not be written: an error
], ids=["closed pipe, fail", "closed pipe, pass", "full disk, pass"])
def test_a_stdout_that_fails_gives_the_verdicts_code_for_a_closed_pipe_and_1_otherwise(exc, status, code, monkeypatch,
                                                                                       tmp_path):
    monkeypatch.setattr(rc, "check_resume", fake_check(status, []))
    fd = os.open(tmp_path / "stdout", os.O_WRONLY | os.O_CREAT)
    monkeypatch.setattr(sys, "stdout", FailingStdout(exc, fd))
    try:
        assert rc.main(["--healthy"]) == code
    finally:
        os.close(fd)
