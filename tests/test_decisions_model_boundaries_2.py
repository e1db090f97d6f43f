"""Decisions pinned at their boundaries (mutation testing's survivors): capture's param-group note, loss_surface's
distance rule, NanWatch's abs min of a frame, pinn_check's smallest input span."""
import pytest
import torch

import capture
import loss_surface
import nan_watch
import pinn_check


def _one_step(model, optimizer):
    x = torch.randn(8, 4)
    torch.nn.functional.cross_entropy(model(x), x[:, :3].argmax(1)).backward()
    optimizer.step()


def test_capture_names_the_param_groups_only_from_two_groups():
    model = torch.nn.Linear(4, 3)
    one = capture.capture_case(_one_step, model, torch.optim.SGD(model.parameters(), lr=0.5))["captured"]
    groups = [{"params": [model.weight]}, {"params": [model.bias], "lr": 0.1}]
    two = capture.capture_case(_one_step, model, torch.optim.SGD(groups, lr=0.5))["captured"]
    assert "optimizer SGD lr 0.5, task classification" in one, one  # one group: no count
    assert "optimizer SGD lr 0.1 / 0.5, 2 param groups, task classification" in two, two


def test_loss_surface_fails_a_minimum_a_little_over_two_grid_steps_from_the_target():
    # 41 points on [-1, 1]: a step of 0.05. The minimum (0, 0) is 2.1 steps from the target, whose loss 0.011 is
    # within the basin (1% of the loss range 2): the distance rule alone fails it.
    step = 0.05
    surface = {"loss": lambda a, b: a ** 2 + b ** 2, "x_range": (-1.0, 1.0), "y_range": (-1.0, 1.0),
               "target": (2.1 * step, 0.0)}
    result = loss_surface.check_loss_surface(surface)
    assert result["details"]["min_distance_steps"] == pytest.approx(2.1)
    assert result["details"]["target_loss"] < 0.01 * (result["details"]["max_loss"] - result["details"]["min_loss"])
    assert result["status"] == "fail"


class _Reciprocal(torch.nn.Module):
    def forward(self, x):
        return 1 / (x - x)  # BUG: 1 / 0


def test_nan_watch_abs_min_is_known_for_positive_values_below_one_and_unknown_for_mixed_signs_within_one():
    model = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Sigmoid(), _Reciprocal())
    x = torch.tensor([[-0.5, 0.25]])  # both signs, all within (-1, 1): no abs min from (min, max)
    watch = nan_watch.NanWatch(model)
    loss = model(x).sum()
    report = watch.check(0, loss, replay=lambda: model(x).sum())
    watch.remove()
    identity, sigmoid, _ = report["frames"]
    assert identity["in"][0] is None and identity["out"][0] is None
    assert sigmoid["out"] == [round(torch.sigmoid(torch.tensor(-0.5)).item(), 3),
                              round(torch.sigmoid(torch.tensor(0.25)).item(), 3)]  # in (0, 1): its abs min is its min


def _pinn_problem(span):
    points = torch.linspace(0, span, 200, dtype=torch.float64)[:, None]

    def term(shift):
        return lambda net: (net((points / span).float()) - shift).pow(2).mean()

    return {"model": pinn_check.MLP(), "terms": {"a": term(0.0), "b": term(0.1)}, "collocation": points,
            "domain": [(0.0, span)]}


def test_pinn_inputs_spanning_exactly_the_minimum_span_are_of_order_1():
    assert pinn_check.check_pinn(_pinn_problem(0.01))["status"] == "pass"  # INPUT_MIN_SPAN 0.01 is inclusive
    assert pinn_check.check_pinn(_pinn_problem(0.0099))["status"] == "warn"
