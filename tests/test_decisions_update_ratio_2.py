"""update_ratio's decisions at their boundaries, found by mutation testing (second set): which tensors are judged, the
warm-up's slices, Adadelta at lr 1, the steady-state gate at HIGH_FAIL, and the overshoot experiment's rise and end."""
import torch

import update_ratio
from test_decisions_log_boundaries import _two_by_one_case
from test_decisions_update_ratio import _check, scripted_overshoot


class _BesideAMatrix(torch.nn.Module):
    """A (2, 1) float64 weight of ones under loss = sum of outputs (SGD moves it by exactly lr of its norm), beside
    `extra`: a parameter the forward adds (its sum) or leaves out."""

    def __init__(self, extra, used):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(2, 1, dtype=torch.float64))
        self.extra, self.used = torch.nn.Parameter(extra), used

    def forward(self, x):
        return x @ self.weight.T + (self.extra.sum() if self.used else 0)


def _beside_case(extra, used):
    case = _two_by_one_case(1e-3)
    case["model"] = _BesideAMatrix(extra, used)
    return case


def test_a_parameter_the_loss_does_not_use_is_left_out_and_not_called_unmoved():
    result = _check(_beside_case(torch.ones(2, 2, dtype=torch.float64), used=False))  # its .grad stays None
    assert result.details["ratios"] == {"weight": 1e-3} and "extra" not in result.details["other"]
    assert result.details["not_updated"] == []
    assert result.status == "pass", result.summary


def test_a_tensor_with_one_row_in_its_first_dimension_is_listed_not_judged():
    # a (1, T, D) position table: 3-D, but its first dimension of 1 makes it no weight matrix (its gradient is 2: both
    # outputs add its sum)
    result = _check(_beside_case(torch.ones(1, 2, 2, dtype=torch.float64), used=True))
    assert result.details["other"] == {"extra": 2e-3} and result.details["ratios"] == {"weight": 1e-3}
    assert result.status == "pass", result.summary


def test_a_batch_of_exactly_four_rows_is_warmed_up_in_four_slices():
    case = _two_by_one_case(1e-6)  # momentum and a ratio under LOW_WARN: measured again after the warm-up
    case["batch"] = (torch.ones(4, 1, dtype=torch.float64), torch.zeros(4))
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=1e-6, momentum=0.9)
    result = _check(case)
    assert result.details["warm_steps"] == 8 and result.details["warm_slices"] == 4  # SLICES is 4


def test_adadelta_at_exactly_lr_1_is_its_designed_scale_and_not_judged_high():
    """Adadelta's first steps move each element by about lr x 3e-3: a weight of 1e-3 moves by more than itself. At lr
    1.0 (ADADELTA_LR) that is its designed scale: listed, a pass, no overshoot experiment."""
    case = _two_by_one_case(1.0)
    torch.nn.init.constant_(case["model"].weight, 1e-3)
    case["optimizer"] = lambda params: torch.optim.Adadelta(params, lr=1.0)
    result = _check(case)
    assert result.details["ratios"]["weight"] > 1.0 and result.details["overshoot"] == {}
    assert result.status == "pass", result.summary


def test_adam_moving_a_weight_by_exactly_0_1_of_its_norm_is_not_measured_again_at_steady_state():
    # Adam's first step moves each element by lr: 0.1 of a weight of ones, HIGH_FAIL itself, not above it
    case = _two_by_one_case(0.1)
    case["optimizer"] = lambda params: torch.optim.Adam(params, lr=0.1)
    result = _check(case)
    assert result.details["ratios"] == {"weight": 0.1}
    assert result.details["first_step_ratios"] is None and result.details["warm_steps"] == 0
    assert result.status == "pass", result.summary


def test_an_arm_whose_loss_reaches_inf_stops_at_that_step():
    inf = float("inf")
    arms = scripted_overshoot([1.0, 0.9, inf, inf] + [1.0] + [0.9] * 10 + [0.5])  # the judged arm, then 0.1x
    assert arms[1.0] == (1.0, inf, inf, 1)  # one step taken: the second forward's inf ends the arm
    assert list(arms) == [1.0, 0.1]


def test_a_loss_exactly_half_again_above_its_start_has_not_jumped():
    # RISE is 1.5: a peak at 1.5x that ends below the start is no rise, so no lower lr is tried
    arms = scripted_overshoot([1.0, 1.0, 1.5] + [0.75] * 8 + [0.75])  # float32 holds 1.5 and 0.75 exactly
    assert arms == {1.0: (1.0, 1.5, 0.75, 10)}
