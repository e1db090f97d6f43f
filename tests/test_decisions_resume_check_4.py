"""check_resume's refusal of a negative tolerance, its failing status for an unloadable checkpoint, its "bit for bit"
wording only for zero tolerances, where a divergence is placed and what a lost entry is named: decisions at their
boundaries, found by mutation testing."""
import pytest

import resume_check as rc
from test_decisions_resume_check_3 import Counter


class CounterHoldingALambda(Counter):
    """A Counter whose state holds a lambda: torch.save cannot pickle it, so no checkpoint can be written."""

    def state_dict(self):
        return {"step": self.step, "hook": lambda: None}


@pytest.mark.parametrize("rtol, atol", [(-1e-6, 0.0), (0.0, -1e-6)])
def test_either_tolerance_alone_below_zero_is_refused(rtol, atol):
    with pytest.raises(rc.CheckError, match="rtol and atol must be >= 0"):
        rc.check_resume(Counter, steps=2, resume_at=(1,), rtol=rtol, atol=atol)


def test_a_checkpoint_that_cannot_be_written_fails_the_check():
    result = rc.check_resume(CounterHoldingALambda, steps=2, resume_at=(1,))
    assert (result.status, result.details["verdict"]) == ("fail", "checkpoint_unloadable")


def test_a_matching_resume_is_bit_for_bit_only_when_both_tolerances_are_zero():
    exact = rc.check_resume(Counter, steps=2, resume_at=(1,), rtol=0.0, atol=0.0)
    assert exact.status == "pass" and "bit for bit" in exact.summary
    # rtol above zero with atol at zero: a match within a tolerance, not bit for bit
    tolerant = rc.check_resume(Counter, steps=2, resume_at=(1,), rtol=1e-3, atol=0.0)
    assert tolerant.status == "pass" and "within rtol 0.001, atol 0.0" in tolerant.summary


def test_a_nondeterministic_run_is_placed_at_the_first_signal_that_differs_at_its_step():
    # the batches agree throughout (None), the loss first differs at step 2: the summary names the loss there, and the
    # details keep every divergence field but "any"
    found = {"any": True, "first_step": 2, "batch": None, "loss": 2, "lr": None, "state": [], "state_max_abs_diff": 0.0}
    runs = {"batch": [0, 0, 0], "loss": [1.0, 0.5, 0.25], "lr": [0.1] * 3}
    other = dict(runs, loss=[1.0, 0.5, 0.3])
    details = {}
    result = rc.nondeterministic(details, found, runs, other, "the straight run repeated")
    assert result.status == "fail" and "at step 2 (loss 0.25 vs 0.3)" in result.summary
    assert details["divergence"] == {k: v for k, v in found.items() if k != "any"}


def test_a_resumed_run_that_first_differs_at_a_resume_point_is_placed_after_that_resume():
    # resumes before steps 3 and 6; step 6 is fed a batch the straight run never fed
    reference = {"batch": list(range(8)), "loss": [1.0] * 8}
    resumed = {"batch": [0, 1, 2, 3, 4, 5, 99, 7], "loss": [1.0] * 8, "resumes": [{"not_restored": [], "entries": {}}]}
    found = {"first_step": 6, "batch": 6, "loss": None, "lr": None}
    verdict, summary, _ = rc.classify(reference, resumed, found, (3, 6))
    assert verdict == "rng_not_restored" and summary.startswith("after the resume before step 6,")


def test_a_data_restart_whose_repeated_steps_lose_nothing_says_all_of_them_and_claims_no_false_improvement():
    # the resume before step 4 restarts the stream: steps 4-7 re-feed batches 0-3, at the straight run's very losses
    reference = {"batch": list(range(8)), "loss": [1.0] * 8}
    resumed = {"batch": [0, 1, 2, 3, 0, 1, 2, 3], "loss": [1.0] * 8, "resumes": [{"not_restored": [], "entries": {}}]}
    found = {"first_step": 4, "batch": 4, "loss": None, "lr": None}
    verdict, summary, _ = rc.classify(reference, resumed, found, (4,))
    assert verdict == "data_restarted" and "(the data stream started over): all 4 steps" in summary
    assert "false improvement" not in summary


def test_an_lr_entry_lost_alone_in_a_load_is_a_lost_lr_schedule():
    reference = {"batch": list(range(4)), "loss": [1.0] * 4, "lr": [0.1] * 4}
    resumed = dict(reference, resumes=[{"not_restored": [{"kind": "lr", "entry": "lr"}], "entries": {("lr",): "lr"}}])
    found = {"first_step": None, "batch": None, "loss": None, "lr": None}
    assert rc.classify(reference, resumed, found, (2,))[0] == "scheduler_state_lost"
