"""resume_check's decisions at their boundaries (float tensors within tolerance, float leaves against other types, the
largest difference of a float entry, torch.save's refusal with no message): found by mutation testing."""
import pytest
import torch

import resume_check as rc


# --- same_leaf: float tensors compare within tolerance (NaN matching NaN), other leaves exactly ---------------------

def test_float_tensors_within_tolerance_or_both_nan_are_the_same_leaf():
    # torch.equal would call both pairs different: only allclose with equal_nan passes them
    assert rc.same_leaf(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is True
    assert rc.same_leaf(torch.tensor([1.0]), torch.tensor([1.001]), atol=0.01) is True
    assert rc.same_leaf(torch.tensor([1.0]), torch.tensor([1.1]), atol=0.01) is False


def test_a_float_leaf_against_a_leaf_of_another_type_is_compared_by_equality_not_tolerance():
    assert rc.same_leaf(0.5, "0.5") is False  # a float against a str: no difference to take
    assert rc.same_leaf(0.5, 0, atol=1.0) is False  # a float against an int is not within tolerance, only ==


# --- state_difference: the largest difference counts only float entries found on both sides ----------------------

def test_the_largest_difference_ignores_a_float_entry_missing_on_one_side_or_against_an_int():
    assert rc.state_difference({("a",): 0.5}, {}) == ([("a",)], 0.0)
    assert rc.state_difference({("a",): 0.5, ("b",): 1.0}, {("a",): 3, ("b",): 1.25}) == ([("a",), ("b",)], 0.25)


# --- save: torch.save's refusal becomes a CheckpointError, even when its exception has no message -----------------

class Unpicklable:
    def __init__(self, message):
        self.message = message

    def __reduce__(self):
        raise RuntimeError(self.message)


@pytest.mark.parametrize("message, reason", [("", "RuntimeError: "), ("cannot pickle a lock\nmore", "cannot pickle a lock")],
                         ids=["no message", "two lines"])
def test_a_state_torch_save_cannot_pickle_is_a_checkpoint_error_naming_the_first_line(message, reason):
    trainer = {"state_dict": lambda: {"lock": Unpicklable(message)}}
    with pytest.raises(rc.CheckpointError) as raised:
        rc.save(trainer, "resume before step 2")
    assert str(raised.value).endswith(reason)
