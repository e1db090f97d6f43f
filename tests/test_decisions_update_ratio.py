"""update_ratio's decisions at their boundaries, found by mutation testing: its bands and constants (schedule horizon,
zero-init steps, warm-up, payoff, replacement, bf16 rounding, Adadelta's lr, rise, seed) and the CUDA random stream."""
import itertools

import torch

import update_ratio
from test_decisions_log_boundaries import _two_by_one_case


def _check(case):
    return update_ratio.check_update_ratio(update_ratio.validate_case(case, "update_ratio"))


def _quadratic_case(ratio):
    """A (2, 1) float64 weight of ones under loss = sum(out ** 2) at input 1: the Hessian is 2, so SGD at lr ratio / 2
    moves it by exactly `ratio` of its norm, to 1 - ratio, and its step buys 1 - ratio / 2 of the first-order promise."""
    case = _two_by_one_case(ratio / 2)
    case["batch"] = (case["batch"][0], torch.zeros(1, 2, dtype=torch.float64))
    case["loss_fn"] = lambda out, targets: ((out - targets) ** 2).sum()
    return case


def _bf16_case(lost, kept):
    """A bf16 weight of `lost` elements at 1.0 and `kept` at 0.0625, SGD at 1e-3 with a gradient of ones: 1.0 - 1e-3
    rounds back to 1.0 in bf16 (its step below 1 is 2 ** -8), 0.0625 - 1e-3 does not (its step is 2 ** -12)."""
    model = torch.nn.Linear(1, lost + kept, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([1.0] * lost + [0.0625] * kept).reshape(-1, 1))
    return {"model": model, "batch": (torch.ones(1, 1, dtype=torch.bfloat16), torch.zeros(1)),
            "loss_fn": lambda out, targets: out.float().sum(), "optimizer": lambda params: torch.optim.SGD(params, lr=1e-3)}


def test_sgd_moving_a_weight_by_0_105_of_its_norm_is_high_and_runs_the_experiment():
    result = _check(_two_by_one_case(0.105))  # above HIGH_FAIL (0.1): the overshoot experiment, not the band's warn
    assert result.details["ratios"] == {"weight": 0.105}
    assert list(result.details["overshoot"]) == ["1x"]
    assert result.status == "pass", result.summary  # a linear loss: every step lowers it


def test_sgd_moving_a_weight_by_0_031_of_its_norm_is_above_the_band():
    result = _check(_two_by_one_case(0.031))  # HIGH_WARN is 0.03
    assert result.details["ratios"] == {"weight": 0.031}
    assert result.status == "warn" and result.details["overshoot"] == {}, result.summary


def test_sgd_moving_a_weight_by_1_05e_4_of_its_norm_is_inside_the_band():
    result = _check(_two_by_one_case(1.05e-4))  # LOW_WARN is 1e-4
    assert result.details["ratios"] == {"weight": 1.05e-4}
    assert result.status == "pass", result.summary


def test_a_schedule_is_read_over_its_first_10000_steps_only():
    case = _two_by_one_case(1e-3)
    case["task"] = {"lr_schedule": lambda step: 1.0 if step < 10_000 else 100.0}  # step 10,000 is the first one past
    result = _check(case)
    assert result.details["lr_factor"] == 1.0 and result.details["ratios"] == {"weight": 1e-3}
    assert result.status == "pass", result.summary


class _BehindZeroChain(torch.nn.Module):
    """`before` feeds `depth` zero-initialised Linear layers (their biases not zero), beside a plain `side` layer. Each
    step lets the gradient one layer further down the chain: `before` gets one on step depth + 1."""

    def __init__(self, depth):
        super().__init__()
        self.before, self.side = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        self.chain = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(depth)])
        for layer in self.chain:
            torch.nn.init.zeros_(layer.weight)

    def forward(self, x):
        return self.chain(self.before(x)) + self.side(x)


def _zero_chain_case(depth):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _BehindZeroChain(depth)
    return {"model": model, "batch": (torch.ones(4, 2), torch.zeros(4)), "loss_fn": lambda out, targets: out.sum(),
            "optimizer": lambda params: torch.optim.SGD(params, lr=1e-3)}


def test_a_weight_behind_four_zero_init_layers_is_judged_on_step_5():
    result = _check(_zero_chain_case(4))
    assert result.details["judged_step"] == 5 and result.details["gated"] == ["before.weight"]
    assert "before.weight" in result.details["ratios"]


def test_the_check_steps_on_at_most_four_times_for_a_weight_a_zero_init_chain_still_blocks():
    result = _check(_zero_chain_case(5))  # its gradient would come on step 6
    assert result.details["judged_step"] == 5
    assert "before.weight" not in result.details["ratios"] and "side.weight" in result.details["ratios"]


def test_momentum_sgd_is_judged_after_eight_warm_up_steps():
    """Momentum 0.9 and a constant gradient: after 8 warm-up steps the judged step carries 1 + 0.9 + ... + 0.9 ** 8 =
    6.126 gradients, so lr 1.6e-5 moves the weight 9.8e-5 of its norm (under LOW_WARN); 9 warm-up steps would make it
    6.513, 1.04e-4, inside the band."""
    case = _two_by_one_case(1.6e-5)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=1.6e-5, momentum=0.9)
    result = _check(case)
    assert result.details["first_step_ratios"] == {"weight": 1.6e-5}
    assert result.details["ratios"] == {"weight": 9.8e-5}
    assert result.status == "warn", result.summary


def test_a_step_that_bought_just_over_half_its_promise_is_not_called_past_the_best_point():
    result = _check(_quadratic_case(0.95))  # the step buys 1 - 0.95 / 2 = 0.525 of its promise; STEP_PAYOFF is 0.5
    assert result.details["step_payoff"] == 0.525
    assert result.status == "pass", result.summary
    assert "past the best point" not in result.summary


def test_a_step_just_over_the_weights_own_size_is_a_warn_though_the_experiment_clears_it():
    result = _check(_quadratic_case(1.05))  # REPLACES is 1.0; each step takes the weight to -0.05 of itself
    assert result.details["ratios"] == {"weight": 1.05}
    arm = result.details["overshoot"]["1x"]
    assert arm["highest"] < arm["before"] and list(result.details["overshoot"]) == ["1x"]
    assert result.status == "warn", result.summary


def test_a_bf16_weight_with_half_its_pushed_elements_unchanged_fails():
    result = _check(_bf16_case(lost=10, kept=10))  # LOST_FAIL is 0.5: a fail from it
    assert result.details["lost_to_rounding"] == {"weight": 0.5}
    assert result.status == "fail", result.summary


def test_a_bf16_weight_with_a_tenth_of_its_pushed_elements_unchanged_warns():
    result = _check(_bf16_case(lost=2, kept=18))  # LOST_WARN is 0.1: a warn from it
    assert result.details["lost_to_rounding"] == {"weight": 0.1}
    assert 1e-4 < result.details["ratios"]["weight"] < 3e-2  # inside the band: the rounding alone warns
    assert result.status == "warn", result.summary


def test_adadelta_above_lr_1_is_judged_high_like_adam():
    """Adadelta's first steps move each element by about lr x 3e-3: a weight of 1e-3 moves by more than itself. At lr
    1.0 (ADADELTA_LR) that would be its designed scale, a pass; at 1.05 the ratio is judged: a step that replaces the
    weight is a warn."""
    case = _two_by_one_case(1.05)
    torch.nn.init.constant_(case["model"].weight, 1e-3)
    case["optimizer"] = lambda params: torch.optim.Adadelta(params, lr=1.05)
    result = _check(case)
    assert result.details["ratios"]["weight"] > 1.0 and "1x" in result.details["overshoot"]
    assert result.status == "warn", result.summary


def scripted_overshoot(losses):
    """update_ratio._overshoot over a loss that reads its values from `losses` (each arm: before, one per step, after), 0.5 once
    they run out; the loss's gradient is 0, so the steps change nothing but the count."""
    script = itertools.chain(losses, itertools.repeat(0.5))
    model = torch.nn.Linear(1, 1)
    case = {"model": model, "batch": (torch.ones(1, 1), torch.ones(1, 1)), "task": {},
            "loss_fn": lambda out, y: out.sum() * 0 + next(script), "optimizer": lambda params: torch.optim.SGD(params, lr=1.0)}
    return update_ratio._overshoot(case, model, list(model.named_parameters()), 1.0, model.state_dict())


def test_a_rise_to_1_6x_on_the_way_sends_the_experiment_to_the_next_lower_lr():
    """The judged lr's loss goes to 1.6x its start (over RISE, 1.5x) and ends at 0.9x: it rose, so the tenth of the lr
    is tried."""
    result = scripted_overshoot([1.0, 1.0, 1.6, 1.2, 1.0, 0.95, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9,  # each arm: before, steps, after
                                 1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.55, 0.5, 0.5, 0.5, 0.5, 0.5])
    assert list(result) == [1.0, 0.1], result


def test_the_experiments_losses_are_the_batchs_loss_under_seed_0():
    """Every arm's loss before and after its steps is taken under torch.manual_seed(0): a dropout model's reported
    `before` is the loss a user gets with that seed, in train mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        torch.manual_seed(0)
        with torch.no_grad():
            expected = float(torch.nn.functional.mse_loss(model(x), y))
    case = {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.SGD(params, lr=1.0)}
    result = _check(case)
    assert result.details["overshoot"]["1x"]["before"] == float(f"{expected:.4g}"), result.details["overshoot"]


class _FakeCudaStream:
    """torch.cuda's RNG functions over a counter: each draw (a forward's noise) takes the next value."""

    def __init__(self):
        self.state = 0

    def draw(self):
        self.state += 1
        return float(self.state)

    def get_rng_state_all(self):
        return [self.state]

    def set_rng_state_all(self, states):
        self.state = states[0]


def test_the_payoffs_second_forward_sees_the_first_ones_cuda_draws(monkeypatch):
    """A linear loss plus noise drawn from the CUDA stream: with the same draw in both forwards, the step buys exactly
    its first-order promise (payoff 1)."""
    stream = _FakeCudaStream()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", stream.get_rng_state_all)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", stream.set_rng_state_all)
    case = _two_by_one_case(1e-3)
    case["loss_fn"] = lambda out, targets: out.sum() + stream.draw()
    assert _check(case).details["step_payoff"] == 1.0


def test_the_cuda_rng_stream_is_not_read_while_cuda_is_available_but_not_in_use(monkeypatch):
    def initializes_cuda(*args):
        raise AssertionError("read or set the CUDA RNG state: that initializes CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", initializes_cuda)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", initializes_cuda)
    assert _check(_two_by_one_case(1e-3)).status == "pass"
