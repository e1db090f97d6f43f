"""overfit_one_batch's classification of a missed target, its settled-noise pass, its relabelling with the model's own
predictions and the loss floor's size gate, pinned at their boundaries: decisions found by mutation testing."""
import torch

import overfit_one_batch
from overfit_one_batch import _classify, _loss_floor, _own_targets, _settled, _settled_low, _trace, _train
from test_decisions_overfit import _linear_case

NOISE = overfit_one_batch.NOISE_WINDOW


def test_the_sprint_switches_the_optimizers_weight_decay_off():
    case = _linear_case(torch.nn.functional.mse_loss,
                        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, weight_decay=0.1))
    inputs, targets = case["batch"]
    _, optimizer, _ = _train(case, case["model"], inputs, targets, 1.0, 0, -1.0)
    assert optimizer.param_groups[0]["weight_decay"] == 0.0


def test_a_noisy_run_whose_mean_moved_exactly_flat_of_its_start_is_flat():
    # first window's mean 100 (FLAT of it is 1.0), last window's 99 with no spread: a move of exactly the band
    assert _classify([100.0] * NOISE + [99.0] * NOISE, noisy=True) == "flat"


def test_a_noisy_run_whose_last_mean_stands_exactly_the_band_above_its_lowest_is_a_plateau():
    # band 1.0 (FLAT of a start of 100, no spread in the last window): lowest mean 98, last mean 99
    assert _classify([100.0] * NOISE + [98.0] * NOISE + [99.0] * NOISE, noisy=True) == "plateau"


def test_a_loss_ending_exactly_flat_above_its_start_is_flat_not_diverging():
    # (1 + FLAT) x 100 is exactly 101.0, and a move of 1.0 is exactly FLAT of the start
    assert _classify([100.0, 101.0]) == "flat"


def test_a_loss_that_moved_exactly_flat_of_its_start_is_flat():
    assert _classify([100.0, 99.0]) == "flat"


def test_a_noisy_run_whose_recent_mean_is_exactly_zero_settled_low():
    assert _settled_low([1.0] * NOISE + [0.0] * NOISE, "stalled")


def test_a_noisy_run_whose_recent_mean_is_exactly_floor_times_its_start_did_not_settle_low():
    assert not _settled_low([1.0] * NOISE + [overfit_one_batch.FLOOR] * NOISE, "stalled")


def test_a_noisy_trace_runs_between_window_means_not_single_draws():
    # draws alternate 2, 0: every window's mean is 1, while the first draw is 2 and the last 0
    assert _trace([2.0, 0.0] * NOISE, noisy=True).startswith("1 -> 1 ")


def test_a_settled_noisy_run_with_parameters_missing_from_the_optimizer_warns():
    result = _settled([1.0] * NOISE + [0.1] * NOISE, "", {}, "", ["fc.weight"])
    assert result.status == "warn"


def _own_targets_of(extra_input):
    case = {"task": {}}
    targets = torch.tensor([0, 1])
    scores = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # the model's own predictions: 1, 0
    (_, given), own = _own_targets(case, (torch.zeros(2, 3), extra_input(targets)), targets, scores)
    return given, own


def test_the_targets_the_model_is_given_are_replaced_by_its_own_predictions():
    given, own = _own_targets_of(lambda targets: targets.clone())
    assert torch.equal(own, torch.tensor([1, 0])) and torch.equal(given, own)


def test_an_input_of_the_targets_shape_with_other_values_is_not_replaced():
    given, _ = _own_targets_of(lambda targets: torch.tensor([5, 7]))
    assert torch.equal(given, torch.tensor([5, 7]))


def test_outputs_of_exactly_free_numel_numbers_still_get_a_floor(monkeypatch):
    settled = [1.0] + [0.0] * overfit_one_batch.FREE_STEPS
    monkeypatch.setattr(overfit_one_batch, "_free_descent", lambda *args: settled)
    output = torch.zeros(overfit_one_batch.FREE_NUMEL)
    assert _loss_floor({}, output, torch.zeros(1)) == 0.0


def _blocked(inputs, target):
    # loss = w * x with w = 1: each row's loss and its gradient's norm are both its x
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    case = {"loss_fn": lambda output, targets: output.sum()}
    return overfit_one_batch._blocked_rows(case, model, inputs, torch.zeros(len(inputs), 1), len(inputs), 0, target)


def test_a_row_with_a_tiny_gradient_whose_loss_is_exactly_the_target_is_not_blocked():
    inputs = torch.tensor([[1.0], [1.0], [1.0], [0.00095], [1.0]])
    assert _blocked(inputs, float(inputs[3, 0])) == []  # at the target: memorised, whatever its gradient
    assert _blocked(inputs, 0.0) == [3]


def test_a_row_whose_gradient_is_exactly_blocked_times_the_median_is_not_blocked():
    # the median row's norm is 1000, and BLOCKED x 1000 is exactly 1.0: row 3's norm
    assert _blocked(torch.tensor([[1000.0], [1000.0], [1000.0], [1.0], [1000.0]]), 0.0) == []
    assert _blocked(torch.tensor([[1000.0], [1000.0], [1000.0], [0.999], [1000.0]]), 0.0) == [3]


class _IgnoresTheGraph(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x, adjacency):
        return self.fc(x)


def test_a_batch_shaped_like_a_graph_that_the_user_says_is_none_is_sliced_not_cut():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = _IgnoresTheGraph()
        x = torch.randn(16, 4)
    case = overfit_one_batch.validate_case({"model": model, "batch": ((x, torch.zeros(16, 16)), torch.zeros(16, 1)),
                                            "loss_fn": torch.nn.functional.mse_loss, "task": {"graph": False}})
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert result.details["subgraph"] is None and result.details["rows"] == 8


def test_a_loss_that_starts_at_exactly_zero_samples_no_noise():
    result = overfit_one_batch.check_overfit_one_batch(_linear_case(lambda output, targets: (output * 0).sum()))
    assert result.details["start_loss"] == 0.0 and result.details["samples_noise"] is False


def test_a_noisy_objectives_target_is_taken_from_the_mean_of_its_two_draws():
    # 1.0 under seed 0, 1.5 under seed 1: the reference is 1.25, not the first draw
    def drawing(output, targets):
        return torch.tensor(1.0 + 0.5 * torch.initial_seed(), dtype=torch.float64)
    result = overfit_one_batch.check_overfit_one_batch(_linear_case(drawing))
    assert result.details["samples_noise"] is True
    assert abs(result.details["target"] - overfit_one_batch.TARGET * 1.25) < 1e-12


def _falling(per_step):
    """A loss of 1.0 at the first call, falling by per_step a call (the model's output times 0 keeps the graph)."""
    calls = []

    def loss_fn(output, targets):
        calls.append(None)
        return (output * 0).sum() + 1.0 - per_step * (len(calls) - 1)
    return loss_fn


def test_a_slow_fall_on_course_to_its_target_within_the_steps_is_not_stalled():
    # 0.9% of the start a 50 steps (under FLAT, 1%), and the target 0.98 is 112 steps away: within the 300
    case = _linear_case(_falling(0.00018))
    inputs, targets = case["batch"]
    losses, _, stop = _train(case, case["model"], inputs, targets, 1.0, 300, 0.98)
    assert stop == "target" and len(losses) == 113


def test_a_slow_fall_that_would_miss_its_target_within_the_steps_is_stalled():
    case = _linear_case(_falling(0.00018))
    inputs, targets = case["batch"]
    losses, _, stop = _train(case, case["model"], inputs, targets, 1.0, 300, 0.9)  # 556 steps away
    assert stop == "stalled" and len(losses) == 51  # at step 50, the first it can tell


def test_a_plain_logistic_regression_that_memorises_slowly_is_no_plateau():
    """nn.Linear(16, 1) with BCE on 8 separable rows: at 10x lr its loss falls ever slower (0.0489, 0.0473, 0.0464 at
    steps 450-470) toward a target of 0.0426. It was stopped as stalled there and failed "plateau: a capacity bug"
    in 6 seeds of 6, while its pace reached the target within the steps left."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=generator)
    y = (x @ torch.randn(16, 1, generator=generator) > 0).float()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 1)
    case = overfit_one_batch.validate_case({"model": model, "batch": (x, y),
                                            "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits})
    assert overfit_one_batch.check_overfit_one_batch(case).status == "pass"


class _WithSpare(torch.nn.Module):
    """A model and `spare` more parameters that no output reads."""

    def __init__(self, model, spare):
        super().__init__()
        self.model, self.spare = model, torch.nn.Parameter(torch.zeros(spare))

    def forward(self, x):
        return self.model(x)


def _plain_regression(spare=0):
    """Eight rows of 0/1 targets under MSE: four inputs and a bias cannot match eight values (it stalls at 0.078)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 1)
    x, y = torch.randn(32, 4), (torch.rand(32, 1) > 0.5).float()
    return overfit_one_batch.validate_case({"model": _WithSpare(linear, spare) if spare else linear, "batch": (x, y),
                                            "loss_fn": torch.nn.functional.mse_loss,
                                            "optimizer": lambda params: torch.optim.Adam(params, lr=3e-3)})


def test_a_model_with_fewer_parameters_than_the_target_values_that_stalls_is_inconclusive_not_a_plateau():
    """A plain linear regression is no capacity bug: a FAIL needs a model with the parameters to match the values."""
    result = overfit_one_batch.check_overfit_one_batch(_plain_regression())
    assert (result.status, result.details["failure"]) == ("skip", "inconclusive"), result.summary
    assert (result.details["trainable_parameters"], result.details["target_values"]) == (5, 8)
    assert result.details["next"].endswith("rows=5)")


def test_a_model_with_as_many_parameters_as_target_values_that_stalls_is_a_plateau():
    """Three parameters that no output reads make eight: as many as the values, so stalling is the model's own."""
    result = overfit_one_batch.check_overfit_one_batch(_plain_regression(3))
    assert (result.status, result.details["failure"]) == ("fail", "plateau"), result.summary
