"""Decisions of the in-place-op model check (diagnostics/inplace.py) that no test pinned (issue 27)."""
import torch

import inplace


class _ShiftsItsOutputThenScalesItsInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x):
        h = self.lin(x)
        h.add_(1.0)  # harmless: addmm does not save its output
        x.mul_(2.0)  # the refusal: addmm saved x for the weight's gradient, and x is no op's output
        return h


def test_inplace_blames_no_seen_op_for_a_backward_refusal_that_names_no_op():
    """A backward refusal that names no op gets no culprit, even when harmless in-place ops were seen."""
    torch.manual_seed(0)
    case = {"model": _ShiftsItsOutputThenScalesItsInput(), "batch": (torch.randn(4, 3), torch.randn(4, 1)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = inplace.check_inplace(case)
    assert (result.status, result.details["culprit"]) == ("fail", None)
    # what saved the value, from the anomaly-mode rerun, is what the summary names: addmm, at `h = self.lin(x)`
    line = f"test_decisions_inplace_check.py:{_ShiftsItsOutputThenScalesItsInput.forward.__code__.co_firstlineno + 1}"
    assert (result.details["saved_by_node"], result.details["saved_by_line"]) == ("AddmmBackward0", line)
    assert f"saved for backward by AddmmBackward0 at {line} (torch:" in result.summary
