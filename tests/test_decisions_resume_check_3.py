"""resume_check's validation of its settings at the boundaries (the fewest steps, the first and last resume points):
found by mutation testing."""
import pytest

import resume_check as rc


class Counter:
    """The smallest trainer: its loss is the step count, its whole state that count (no torch: fast)."""

    def __init__(self):
        self.step = 0

    def train_step(self):
        self.step += 1
        return float(self.step)

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, sd):
        self.step = sd["step"]


# --- check_resume: resume points must lie in 1..steps-1, so two steps with a resume before step 1 is the smallest run --

def test_two_steps_with_a_resume_before_step_one_is_the_smallest_valid_run():
    result = rc.check_resume(Counter, steps=2, resume_at=(1,))
    assert (result.status, result.details["verdict"], result.details["steps"]) == ("pass", "ok", 2)


def test_a_resume_point_equal_to_steps_is_refused():
    # a resume before step 3 of a 3-step run never happens: the run would pass as "ok" without one resume
    for resume_at in ((3,), (1, 3)):
        with pytest.raises(rc.CheckError, match="must lie in 1..2"):
            rc.check_resume(Counter, steps=3, resume_at=resume_at)
