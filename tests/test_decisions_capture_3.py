"""capture's cleared-grads watch pinned at its boundaries (mutation testing's survivors): the least-squares residuals
of the second step, and a residual exactly at the fit limit."""
import pytest
import torch

import capture
from test_decisions_capture import _grads_verdict


def _watched(first_grad):
    """A one-weight model whose first optimizer step has run with .grad == first_grad: the capture now watches it."""
    model = torch.nn.Linear(2, 1, bias=False)
    captured = capture.Capture("test")
    captured.case = {"model": model, "loop": {}}
    model.weight.grad = torch.tensor([first_grad])
    captured._watch_first_step(optimizer=None)  # only compared by identity later; an SGD imports dynamo
    return captured, model


def test_second_step_fits_small_cleared_gradients_up_to_a_clipping_scale():
    # The fresh gradient's squared norm is 0.05, under 1: its fit scale is still computed, not taken as 0.
    captured, model = _watched([0.3, -0.1])
    model.weight.grad = None  # the loop clears .grad
    (model.weight * torch.tensor([[0.1, 0.2]])).sum().backward()
    model.weight.grad.mul_(0.5)  # clipping scales the fresh gradient
    kept, cleared = captured._second_step()
    assert cleared == pytest.approx(0.0, abs=1e-12)
    assert kept > 10 * capture.GRADS_FIT
    captured._end_watch((kept, cleared))
    assert captured.case["loop"]["grads"] == "cleared"


def test_a_second_step_with_no_backward_between_fits_kept_grads_and_misses_cleared_by_all():
    # No fresh gradient since the first step: the "cleared" hypothesis is all zeros, its residual is 1, not 0 / 0.
    captured, _ = _watched([0.3, -0.1])
    kept, cleared = captured._second_step()
    assert (kept, cleared) == (0.0, 1.0)
    captured._end_watch((kept, cleared))
    assert captured.case["loop"]["grads"] == "kept"


def test_a_residual_exactly_at_the_fit_limit_gives_no_grads_verdict():
    assert _grads_verdict(0.5, capture.GRADS_FIT) is None
    assert _grads_verdict(capture.GRADS_FIT, 0.5) is None


def test_kept_grads_need_cleared_to_miss_by_more_than_ten_times_the_fit_limit():
    assert _grads_verdict(0.5e-3, 10 * capture.GRADS_FIT) is None
