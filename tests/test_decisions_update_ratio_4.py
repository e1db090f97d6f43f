"""update_ratio's decisions at their boundaries, found by mutation testing (fourth set): the fail's next step, the
payoff note, the high branch's pass at the experiment's edges, and the pass's band, state and zero-init-gate notes."""
import torch

import update_ratio
from test_decisions_log_boundaries import _two_by_one_case
from test_decisions_update_ratio import _check, _quadratic_case


class _DivergingBesideHeavy(torch.nn.Module):
    """`fast`, a (2, 1) float64 weight of ones under sum(out ** 2) (Hessian 2), beside `heavy`, a (2, 1) weight of 1e3
    whose loss term is 1e-10 x its outputs' sum: at lr 2500 `fast` moves 5000x its norm per step (every arm down to
    0.001x, at 5x, diverges) and `heavy` 2.5e-10 of its norm (under LOW_FAIL)."""

    def __init__(self):
        super().__init__()
        self.fast = torch.nn.Parameter(torch.ones(2, 1, dtype=torch.float64))
        self.heavy = torch.nn.Parameter(torch.full((2, 1), 1e3, dtype=torch.float64))

    def forward(self, x):
        return (x @ self.fast.T) ** 2 + 1e-10 * (x @ self.heavy.T)


def test_a_fail_for_a_low_weight_where_no_lower_lr_fell_says_raise_the_lr():
    case = _two_by_one_case(2500.0)
    case["model"] = _DivergingBesideHeavy()
    result = _check(case)
    assert result.details["ratios"] == {"fast": 5000.0, "heavy": 2.5e-10}
    assert list(result.details["overshoot"]) == ["1x", "0.1x", "0.01x", "0.001x"]  # all rose: no multiple to name
    assert result.status == "fail", result.summary
    assert result.details["next"] == "raise the lr; check per-layer lr multipliers"


def test_a_high_ratio_from_no_descent_step_has_no_payoff_and_no_payoff_note():
    case = _two_by_one_case(0.2)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.2, maximize=True)  # climbs the loss: promised < 0
    result = _check(case)
    assert result.details["step_payoff"] is None and result.details["ratios"] == {"weight": 0.2}
    assert result.status == "warn", result.summary
    assert "past the best point" not in result.summary


def test_a_step_exactly_the_weights_size_buying_exactly_half_its_promise_is_a_warn_without_the_payoff_note():
    # lr 0.5 on the quadratic takes the weight of ones to 0 in one step: ratio 1.0 (REPLACES) and payoff 0.5
    # (STEP_PAYOFF); the experiment's arm falls from 2 to 0, yet a step as large as the weight is a warn
    result = _check(_quadratic_case(1.0))
    assert result.details["ratios"] == {"weight": 1.0} and result.details["step_payoff"] == 0.5
    assert result.details["overshoot"] == {"1x": {"before": 2.0, "highest": 0.0, "after": 0.0, "steps": 10}}
    assert result.status == "warn", result.summary
    assert "past the best point" not in result.summary


def test_a_judged_arm_ending_level_with_its_start_is_no_pass_though_a_lower_arm_fell(monkeypatch):
    """The judged arm ends exactly where it started (it rose: it did not end below); the 0.1x arm started higher (its
    own start: a model with state outside its state_dict) and fell, but not below the judged arm's end, so no
    overshoot is shown either: a warn."""
    arms = {1.0: (1.0, 1.0, 1.0, 10), 0.1: (2.0, 2.0, 1.5, 10)}
    monkeypatch.setattr(update_ratio, "_overshoot", lambda *args: arms)
    result = _check(_two_by_one_case(0.2))
    assert result.details["ratios"] == {"weight": 0.2}
    assert result.status == "warn", result.summary


def test_a_plain_sgd_pass_names_the_sgd_band_and_adds_no_note():
    result = _check(_two_by_one_case(1e-3))
    assert result.status == "pass"
    assert result.summary.endswith("all within 0.0001 .. 0.03 (~0.001)"), result.summary


def test_adadelta_at_its_designed_scale_passes_above_the_low_bound_only():
    case = _two_by_one_case(1.0)
    case["optimizer"] = lambda params: torch.optim.Adadelta(params, lr=1.0)
    result = _check(case)
    assert result.status == "pass"
    assert "all above 0.0001 (~0.001) (Adadelta at lr 1 or less, its designed scale" in result.summary, result.summary


def test_a_weight_under_the_band_is_told_it_barely_moves():
    result = _check(_two_by_one_case(5e-5))  # under LOW_WARN, not behind a gate: the band's warn
    assert result.status == "warn" and result.details["gated"] == [], result.summary
    assert result.details["next"] == "that layer barely moves: a higher lr for it, or check its lr multiplier"


def test_a_weight_above_the_band_is_told_its_lr_is_high():
    result = _check(_two_by_one_case(0.031))  # over HIGH_WARN, under HIGH_FAIL: the band's warn
    assert result.status == "warn", result.summary
    assert result.details["next"] == "that layer's lr is high for its weight scale: a lower lr, warmup, or a per-layer lr"


class _BehindAZeroGate(torch.nn.Module):
    """`before` (ones, (2, 1)) feeds `gate`, a zero-initialised (2, 2) weight, beside a plain `side` (ones, (2, 1)),
    float64, loss = sum of outputs at input 1. Step 1 moves the gate to -lr and gives `before` no gradient; on step 2
    its gradient is -2 lr, so it moves 2 lr ** 2 of its norm, while `side` moves lr / (1 - lr)."""

    def __init__(self):
        super().__init__()
        self.before = torch.nn.Linear(1, 2, bias=False, dtype=torch.float64)
        self.gate = torch.nn.Linear(2, 2, bias=False, dtype=torch.float64)
        self.side = torch.nn.Linear(1, 2, bias=False, dtype=torch.float64)
        torch.nn.init.ones_(self.before.weight)
        torch.nn.init.zeros_(self.gate.weight)
        torch.nn.init.ones_(self.side.weight)

    def forward(self, x):
        return self.gate(self.before(x)) + self.side(x)


def _gated_case(lr):
    case = _two_by_one_case(lr)
    case["model"] = _BehindAZeroGate()
    return case


def test_a_gated_weight_under_the_low_warn_bound_passes_with_the_gate_note():
    result = _check(_gated_case(0.005))  # before.weight moves 2 x 0.005 ** 2 = 5e-5 of its norm
    assert result.details["gated"] == ["before.weight"] and result.details["judged_step"] == 2
    assert result.details["ratios"] == {"before.weight": 5e-5, "side.weight": 0.00503}
    assert result.status == "pass", result.summary
    assert "; 1 weight(s) behind a zero-init gate move less" in result.summary


def test_a_gated_weight_exactly_at_the_low_warn_bound_gets_no_gate_note():
    result = _check(_gated_case(5e-5 ** 0.5))  # before.weight moves 2 lr ** 2 = 1e-4 (LOW_WARN) of its norm
    assert result.details["gated"] == ["before.weight"]
    assert result.details["ratios"]["before.weight"] == 1e-4
    assert result.status == "pass", result.summary
    assert "zero-init gate" not in result.summary
