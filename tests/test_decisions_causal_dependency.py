"""Decisions of causal_dependency: which input is the sequence, the least shape of an output it judges; found by
mutation testing."""
import pytest
import torch

import causal_dependency


def test_the_sequence_of_a_dict_is_its_input_ids_wherever_they_stand():
    ids = torch.tensor([[3, 4, 5]])
    assert causal_dependency._sequence({"attention_mask": torch.ones(1, 3), "input_ids": ids}) is ids


class _Causal(torch.nn.Module):
    """A running sum over time: output t reads inputs 0..t only."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return (x * self.scale).cumsum(1)


@pytest.mark.parametrize("shape", [(2, 2), (2, 2, 3)])
def test_a_sequence_of_two_positions_with_an_output_of_two_dims_or_more_is_checked_not_skipped(shape):
    """(batch, time) is the least an output can be shaped like its input: a 2-D output is judged."""
    case = {"model": _Causal(), "batch": (torch.randn(*shape), torch.zeros(*shape)),
            "loss_fn": lambda out, y: (out - y).pow(2).mean(), "task": {"kind": "causal_lm"}}
    assert causal_dependency.check_causal_dependency(case).status == "pass"
