"""gradient_flow's decisions pinned at their boundaries (found by mutation testing): the ReLU unit dim, the resampled
passes, the zero-init steps, which weights have a depth ratio, the depth limit and its direction, the summary."""
import pytest
import torch

import gradient_flow


def _sum_loss(out, _):
    return out.sum()


class _ZeroChain(torch.nn.Module):
    """y = p1 * (1 + p2 * (1 + ... * (1 + pn))) * x, every p zero at init: p1 gets a gradient at once, and each optimizer
    step wakes the next one, so p_k wakes on step k - 1."""

    def __init__(self, length):
        super().__init__()
        self.p = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(1)) for _ in range(length))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        inner = torch.ones(1)
        for p in reversed(list(self.p)[1:]):
            inner = 1 + p * inner
        return self.p[0] * inner * x


@pytest.mark.parametrize("length, status", [(5, "pass"), (6, "fail")])  # ZERO_INIT_STEPS: 4
def test_a_zero_init_chain_that_wakes_on_the_fourth_step_is_info_and_one_needing_a_fifth_is_a_zero_grad(length, status):
    case = {"model": _ZeroChain(length), "batch": (torch.ones(2, 1), torch.zeros(2, 1)), "loss_fn": _sum_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert result.status == status, result.summary
    woken = [f"p.{k}" for k in range(1, min(length, 5))]
    assert (result.details["zero_at_init"], result.details["zero_grad"]) == (woken, [f"p.{k}" for k in range(5, length)])


def test_zero_init_steps_stop_once_every_zero_gradient_woke():
    model = _ZeroChain(2)
    case = {"model": model, "batch": (torch.ones(2, 1), torch.zeros(2, 1)), "loss_fn": _sum_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["zero_at_init"]) == ("pass", ["p.1"])
    assert model.calls == 2  # the first pass and one step's pass: p.1 woke on it and nothing was left to wake


class _DeadPath(torch.nn.Module):
    """A parameter multiplied by 0: its gradient is zero at every step, so no step wakes it."""

    def __init__(self):
        super().__init__()
        self.live, self.dead = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.live * x + self.dead * 0


def test_zero_init_steps_stop_at_the_first_step_that_wakes_nothing():
    model = _DeadPath()
    case = {"model": model, "batch": (torch.ones(2, 1), torch.zeros(2, 1)), "loss_fn": _sum_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["zero_grad"], result.details["zero_at_init"]) == ("fail", ["dead"], [])
    assert model.calls == 2  # the first pass and one step's pass, not ZERO_INIT_STEPS of them


class _Alternating(torch.nn.Module):
    """Odd passes use only `a`, even passes only `b`: some parameter is missing in every pass, never the same one."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.calls = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2), 0

    def forward(self, x):
        self.calls += 1
        return self.a(x) if self.calls % 2 else self.b(x)


def test_passes_that_keep_missing_a_different_parameter_end_after_seven():
    model = _Alternating()
    case = {"model": model, "batch": (torch.randn(4, 3), torch.randn(4, 2)), "loss_fn": torch.nn.functional.mse_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["none_grad"]) == ("pass", [])
    assert model.calls == 2 * gradient_flow.RESAMPLED_PASSES + 1  # the loop runs while passes <= 6: pass 7 is the last
    assert list(result.details["rel_grad"]) == ["a.weight"]  # judged on pass 7's gradients, which reached `a`


@pytest.mark.parametrize("shape, unit_dim", [((4, 1, 2, 2), 1), ((4, 4, 1), 2)])  # 4-D: channels; 3-D: the last dim
def test_relu_units_are_the_channels_of_a_4d_output_and_the_last_dim_of_a_3d_one(shape, unit_dim):
    # 1x1 conv (or linear over the last dim) of an all-ones input to 10 units, 5 of them pushed to -100: half dead
    layer = torch.nn.Conv2d(1, 10, 1) if len(shape) == 4 else torch.nn.Linear(1, 10)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.copy_(torch.tensor([0.0] * 5 + [-100.0] * 5))
    model = torch.nn.Sequential(layer, torch.nn.ReLU())
    inputs = torch.ones(shape)
    case = {"model": model, "batch": (inputs, torch.zeros(1)), "loss_fn": _sum_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert model(inputs).shape[unit_dim] == 10
    assert (result.status, result.details["dead_relu"]) == ("warn", {"1": 0.5}), result.summary


def test_a_zero_initialised_weight_with_a_gradient_has_no_depth_ratio():
    # the first weight is all zero but gets a gradient (its bias feeds the next layer): |grad|/|w| would be inf
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(0.5)
    case = {"model": model, "batch": (torch.ones(4, 3), torch.zeros(4, 2)), "loss_fn": _sum_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["zero_grad"], list(result.details["rel_grad"]), result.details["depth"]) == (
        "pass", [], ["2.weight"], {})


def _two_weights(first, last):
    """y = last * first * x with x = 1 and loss y: |grad|/|w| is last/first for `first` and first/last for `last`, so
    the first/last depth ratio is (last / first) ** 2."""
    model = torch.nn.Sequential(torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(first)
        model[1].weight.fill_(last)
    return {"model": model, "batch": (torch.tensor([[1.0]]), torch.zeros(1, 1)), "loss_fn": _sum_loss}


@pytest.mark.parametrize("first, last, direction", [(1.0, 102.5, "exploding"), (102.5, 1.0, "vanishing")])
def test_a_depth_ratio_of_1_05e4_fails_and_says_which_way_it_goes(first, last, direction):
    # 102.5 ** 2 = 10506.25: past DEPTH_FAIL (1e4), short of 1.1e4
    result = gradient_flow.check_gradient_flow(_two_weights(first, last))
    ratio = result.details["depth"]["ratio"]
    assert ratio == pytest.approx(10506.25 if direction == "exploding" else 1 / 10506.25, rel=1e-6)
    assert result.status == "fail", result.summary
    assert result.summary.startswith(f"{direction} gradients across depth")
    assert ("clip gradients" in result.details["next"]) == (direction == "exploding")


def test_a_fail_with_no_warning_leads_the_summary_and_names_the_next_step():
    result = gradient_flow.check_gradient_flow(gradient_flow.make_demo_case(broken=True))
    assert (result.status, result.details["none_grad"]) == ("fail", ["encoder.0.weight", "encoder.0.bias",
                                                                     "encoder.2.weight", "encoder.2.bias"])
    assert result.summary.startswith("4 parameter(s) get no gradient")
    assert result.details["next"].startswith("search the forward")


def test_a_warning_with_no_fail_leads_the_summary_and_names_the_next_step():
    result = gradient_flow.check_gradient_flow(_two_weights(1.0, 20.0))  # depth ratio 400: past DEPTH_WARN only
    assert result.status == "warn", result.summary
    assert result.summary.startswith("exploding gradients across depth")
    assert result.details["next"].startswith("run init_scale")


def test_a_pass_says_how_many_trainable_parameters_it_checked():
    result = gradient_flow.check_gradient_flow(gradient_flow.make_demo_case(broken=False))
    assert (result.status, "next" in result.details) == ("pass", False)
    assert result.summary.startswith("all 6 trainable parameters")
