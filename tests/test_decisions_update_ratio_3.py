"""update_ratio's decisions at their boundaries, found by mutation testing (third set): the momentum gate at LOW_WARN, the
band's edges, an inf ratio and an inf payoff, the spread's gated weights, and when the overshoot experiment runs and counts."""
import torch

import update_ratio
from test_decisions_log_boundaries import _two_by_one_case
from test_decisions_update_ratio import _check


def test_sgd_moving_a_weight_by_exactly_1e_4_of_its_norm_is_inside_the_band():
    result = _check(_two_by_one_case(1e-4))  # LOW_WARN is 1e-4: the band includes it
    assert result.details["ratios"] == {"weight": 1e-4}
    assert result.status == "pass", result.summary


def test_momentum_sgd_at_exactly_1e_4_is_not_measured_again_at_steady_state():
    # only a first step under LOW_WARN waits for the momentum; 1e-4 itself is judged as it is
    case = _two_by_one_case(1e-4)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    result = _check(case)
    assert result.details["ratios"] == {"weight": 1e-4}
    assert result.details["first_step_ratios"] is None and result.details["warm_steps"] == 0
    assert result.status == "pass", result.summary


def test_momentum_sgd_at_lr_0_is_not_measured_again_at_steady_state():
    # a ratio of 0 is the not-updated finding: no warm-up makes it move
    case = _two_by_one_case(0.0)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.0, momentum=0.9)
    result = _check(case)
    assert result.details["not_updated"] == ["weight"]
    assert result.details["first_step_ratios"] is None and result.details["warm_steps"] == 0
    assert result.status == "fail", result.summary


def test_sgd_moving_a_weight_by_exactly_0_1_of_its_norm_is_above_the_band_but_not_high():
    result = _check(_two_by_one_case(0.1))  # HIGH_FAIL is 0.1: only a ratio above it runs the experiment
    assert result.details["ratios"] == {"weight": 0.1}
    assert result.details["overshoot"] == {}
    assert result.status == "warn", result.summary


def test_an_update_that_overflows_to_inf_is_nonfinite_not_high():
    # a gradient of 1e300 at lr 1e10 steps the float64 weight by 1e310: -inf, so the ratio is inf
    case = _two_by_one_case(1e10)
    case["loss_fn"] = lambda out, targets: out.sum() * 1e300
    result = _check(case)
    assert result.details["nonfinite"] == ["weight"] and result.details["ratios"] == {}
    assert result.details["overshoot"] == {}
    assert result.status == "fail", result.summary


def test_a_step_that_sends_the_loss_to_inf_reports_no_payoff():
    # loss = sum(out ** 4), gradient 4: lr 1e80 takes the weight of ones to about -4e80 (a finite ratio) and the loss to
    # inf; the payoff (-inf) is reported as None
    case = _two_by_one_case(1e80)
    case["loss_fn"] = lambda out, targets: (out ** 4).sum()
    result = _check(case)
    assert result.details["ratios"]["weight"] < float("inf")
    assert result.details["step_payoff"] is None


class _BehindZeroGate(torch.nn.Module):
    """`before`, a (2, 1) float64 weight of ones, feeds `gate`, a zero (1, 2) weight; loss = sum of outputs at input 1.
    SGD at lr 0.01: step 1 moves only the gate (to -0.01), so step 2 moves `before` by 0.01 x 0.01 = 1e-4 of its norm."""

    def __init__(self):
        super().__init__()
        self.before = torch.nn.Parameter(torch.ones(2, 1, dtype=torch.float64))
        self.gate = torch.nn.Parameter(torch.zeros(1, 2, dtype=torch.float64))

    def forward(self, x):
        return x @ self.before.T @ self.gate.T


def test_a_gated_weight_at_exactly_1e_4_is_judged_in_the_spread():
    # gated weights under LOW_WARN are left out of the spread; at LOW_WARN itself it is judged
    case = _two_by_one_case(0.01)
    case["model"] = _BehindZeroGate()
    result = _check(case)
    assert result.details["judged_step"] == 2 and result.details["gated"] == ["before"]
    assert result.details["ratios"] == {"before": 1e-4}
    assert result.status == "pass", result.summary
    assert result.summary.startswith("ratios 0.0001 .. 0.0001 over 1 weight matrices")


class _TwoWeights(torch.nn.Module):
    """Two (2, 1) float64 weights of ones, both added to the output; loss = sum of outputs at input 1."""

    def __init__(self):
        super().__init__()
        self.still = torch.nn.Parameter(torch.ones(2, 1, dtype=torch.float64))
        self.fast = torch.nn.Parameter(torch.ones(2, 1, dtype=torch.float64))

    def forward(self, x):
        return x @ self.still.T + x @ self.fast.T


def test_a_high_ratio_beside_an_unmoved_weight_runs_no_overshoot_experiment():
    # an unmoved weight alone (not NaN, not rounding as well) is enough to skip the experiment
    case = _two_by_one_case(0.5)
    case["model"] = _TwoWeights()
    case["optimizer"] = lambda params: torch.optim.SGD([{"params": params[:1], "lr": 0.0}, {"params": params[1:]}], lr=0.5)
    result = _check(case)
    assert result.details["ratios"] == {"still": 0.0, "fast": 0.5}
    assert result.details["not_updated"] == ["still"] and result.details["overshoot"] == {}
    assert result.status == "fail", result.summary


def test_a_lower_arm_ending_exactly_where_the_judged_lr_ends_is_no_overshoot(monkeypatch):
    # the judged lr jumped to 2x and ended at 0.5; the tenth fell to 0.5 too: not below the judged lr's end
    arms = {1.0: (1.0, 2.0, 0.5, 10), 0.1: (1.0, 0.9, 0.5, 10)}
    monkeypatch.setattr(update_ratio, "_overshoot", lambda *args: arms)
    result = _check(_two_by_one_case(0.5))
    assert result.details["ratios"] == {"weight": 0.5}
    assert result.status == "pass", result.summary
