"""Skips and refusals of the model checks that no test ran (issue 27): nan_watch, input_dependence, update_ratio, overfit_one_batch."""
import torch

import input_dependence
import nan_watch
import overfit_one_batch
import update_ratio


def _regression(model, rows=8, features=3):
    torch.manual_seed(0)
    return {"model": model, "batch": (torch.randn(rows, features), torch.randn(rows, 1)),
            "loss_fn": torch.nn.functional.mse_loss}


def test_nan_watch_fails_weights_that_already_hold_nan_before_any_forward():
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    result = nan_watch.check_nan_watch(_regression(model))
    assert (result.status, result.details["bad_weights"]) == ("fail", ["weight"])
    assert "already hold NaN/inf" in result.summary


def test_nan_watch_fails_an_input_batch_that_already_holds_nan():
    case = _regression(torch.nn.Linear(3, 1))
    case["batch"][0][2, 1] = float("inf")
    result = nan_watch.check_nan_watch(case)
    assert (result.status, result.details["inputs_finite"]) == ("fail", False)
    assert "input batch already holds NaN/inf" in result.summary


def test_input_dependence_skips_inputs_whose_only_tensor_is_a_target():
    case = _regression(torch.nn.Linear(3, 1))
    case["task"] = {"target_inputs": (0,)}
    case["batch"] = ((case["batch"][0],), case["batch"][1])
    result = input_dependence.check_input_dependence(case)
    assert result.status == "skip"
    assert "hold no tensor" in result.summary


class _Says(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def forward(self, x):
        return {"answer": "yes", "scores": [self.net(x)]}


def test_input_dependence_skips_an_output_with_no_prediction_tensor():
    result = input_dependence.check_input_dependence(_regression(_Says()))
    assert result.status == "skip"
    assert "cannot find the prediction tensor" in result.summary


class _Embedded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(4, 2)

    def forward(self, ids):
        return self.embed(ids).sum(1)


def test_input_dependence_skips_a_batch_whose_every_input_is_constant():
    case = {"model": _Embedded(), "batch": (torch.full((4, 3), 2), torch.zeros(4, 2)), "loss_fn": torch.nn.functional.mse_loss}
    result = input_dependence.check_input_dependence(case)
    assert (result.status, result.details["mean_abs_change"]) == ("skip", None)
    assert "every input tensor is constant" in result.summary


def _weak_dependence_case(lr):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.fill_(1e-3)
        model.bias.fill_(100.0)
    x = torch.randn(16, 3)
    return {"model": model, "batch": (x, 100.0 + x.sum(1, keepdim=True) * 0.05), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.SGD(params, lr=lr)}


def test_input_dependence_is_inconclusive_on_a_weak_dependence_that_grows_as_it_trains():
    result = input_dependence.check_input_dependence(_weak_dependence_case(0.1))
    assert result.status == "skip"
    assert result.details["relative_change"] >= 2 * result.details["relative_change_at_start"]
    assert result.summary.startswith("inconclusive")


def test_input_dependence_skips_an_output_that_turns_nan_in_the_steps_on_a_weak_dependence():
    result = input_dependence.check_input_dependence(_weak_dependence_case(float("nan")))
    assert result.status == "skip"
    assert "NaN/inf after 20 step(s)" in result.summary


def test_update_ratio_skips_a_model_without_trainable_parameters():
    result = update_ratio.check_update_ratio(_regression(torch.nn.ReLU()))
    assert result.status == "skip"
    assert "no trainable parameters" in result.summary


def test_update_ratio_skips_a_loss_that_depends_on_no_trainable_parameter():
    case = _regression(torch.nn.Linear(3, 1))
    case["loss_fn"] = lambda out, y: torch.nn.functional.mse_loss(out.detach(), y)
    result = update_ratio.check_update_ratio(case)
    assert result.status == "skip"
    assert "does not depend on any trainable parameter" in result.summary


def test_update_ratio_skips_when_only_a_bias_gets_a_gradient():
    model = torch.nn.Linear(3, 1)
    model.weight.requires_grad_(False)
    result = update_ratio.check_update_ratio(_regression(model))
    assert (result.status, list(result.details["other"])) == ("skip", ["bias"])


def _labelled_rows_mse(out, y):
    kept = y[:, 0] >= 0
    return torch.nn.functional.mse_loss(out[kept], y[kept]) if bool(kept.any()) else torch.zeros(())


def test_update_ratio_ends_the_warm_up_at_a_slice_whose_loss_has_no_gradient():
    """The first quarter of the rows is unlabelled: the warm-up stops there, so the steady state is the first step again."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3), torch.rand(8, 2)
    y[:2] = -1.0
    case = {"model": torch.nn.Linear(3, 2), "batch": (x, y), "loss_fn": _labelled_rows_mse,
            "optimizer": lambda params: torch.optim.SGD(params, lr=1e-5, momentum=0.9)}
    result = update_ratio.check_update_ratio(case)
    assert result.details["warm_slices"] == 4
    assert result.details["ratios"] == result.details["first_step_ratios"]


def test_overfit_one_batch_skips_inputs_without_a_batch_dimension():
    case = {"model": torch.nn.Linear(1, 1), "batch": (torch.tensor(2.0), torch.tensor(1.0)),
            "loss_fn": lambda out, y: (out.sum() - y) ** 2}
    result = overfit_one_batch.check_overfit_one_batch(case, steps=5)
    assert result.status == "skip"
    assert "cannot find a batch dimension" in result.summary


def test_overfit_one_batch_fails_a_loss_that_is_nan_before_any_step():
    case = _regression(torch.nn.Linear(3, 1))
    case["batch"][1][0, 0] = float("nan")
    result = overfit_one_batch.check_overfit_one_batch(case, steps=5)
    assert (result.status, result.details["failure"]) == ("fail", "nonfinite_at_start")


def test_overfit_one_batch_fails_a_loss_detached_from_every_parameter_as_flat():
    case = _regression(torch.nn.Linear(3, 1))
    case["loss_fn"] = lambda out, y: torch.nn.functional.mse_loss(out.detach(), y)
    result = overfit_one_batch.check_overfit_one_batch(case, steps=5)
    assert (result.status, result.details["failure"]) == ("fail", "flat")
    assert "does not depend on any trainable parameter" in result.summary


def test_overfit_one_batch_fails_a_loss_that_ends_higher_without_running_away_as_diverging():
    case = _regression(torch.nn.Linear(3, 1))
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.01, maximize=True)
    result = overfit_one_batch.check_overfit_one_batch(case, steps=5)
    assert (result.status, result.details["failure"]) == ("fail", "diverging")


def _soft_targets_case(lr):
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    return {"model": torch.nn.Linear(4, 1), "batch": (x, torch.sigmoid(x @ torch.randn(4, 1))),
            "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits,
            "optimizer": lambda params: torch.optim.SGD(params, lr=lr)}


def test_overfit_one_batch_passes_soft_targets_memorised_down_to_their_floor_at_ten_times_the_lr():
    result = overfit_one_batch.check_overfit_one_batch(_soft_targets_case(0.3), steps=30)
    assert result.status == "pass"
    assert result.details["retry_lr_scale"] == 10.0
    assert "down to the loss's floor at 10x your lr" in result.summary


def test_overfit_one_batch_warns_of_parameters_outside_the_optimizer_when_ten_times_the_lr_memorises():
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 1), torch.randn(8, 4)
    y = (x @ torch.randn(4, 1) + model.bias).detach()
    case = {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.SGD([model.weight], lr=0.003)}
    result = overfit_one_batch.check_overfit_one_batch(case, steps=30)
    assert (result.status, result.details["not_in_optimizer"], result.details["retry_lr_scale"]) == ("warn", ["bias"], 10.0)
    assert "memorised 8 rows at 10x" in result.summary


class _Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.net(x) + 1.5 * torch.randn(len(x), 1)


def test_overfit_one_batch_passes_a_sampled_loss_that_settles_above_zero_at_ten_times_the_lr():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    case = {"model": _Noisy(), "batch": (x, 3.0 * x @ torch.randn(4, 1)), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.SGD(params, lr=0.004)}
    result = overfit_one_batch.check_overfit_one_batch(case, rows=32, steps=30)
    assert (result.status, result.details["samples_noise"], result.details["retry_lr_scale"]) == ("pass", True, 10.0)
    assert "fell and settled at 10x" in result.summary


class _Propagate(torch.nn.Module):
    """One message-passing layer: each node's scores read its neighbours' features through the adjacency."""

    def __init__(self, features=2, classes=2):
        super().__init__()
        self.lin = torch.nn.Linear(features, classes)

    def forward(self, x, adj):
        return self.lin(adj @ x)


def _chain(n):
    adj = torch.zeros(n, n)
    for i in range(n - 1):
        adj[i, i + 1] = adj[i + 1, i] = 1.0
    return adj


def _graph_case(adj, model=None, targets=None, loss_fn=torch.nn.functional.cross_entropy):
    torch.manual_seed(0)
    n = adj.shape[0]
    return {"model": model or _Propagate(), "batch": ((torch.randn(n, 2), adj), torch.arange(n) % 2 if targets is None else targets),
            "loss_fn": loss_fn}


def test_overfit_one_batch_cuts_a_sparse_adjacency_by_its_non_zero_entries_only():
    """Edges 0-1, 1-2, 0-3, and an explicit zero at 1-5 that is no edge: rows 0 and 1 and their neighbours 2 and 3."""
    pairs = [(0, 1), (1, 0), (1, 2), (2, 1), (0, 3), (3, 0), (1, 5), (5, 1), (6, 7), (7, 6)]
    values = [1.0] * 6 + [0.0, 0.0, 1.0, 1.0]
    adj = torch.sparse_coo_tensor(torch.tensor(pairs).t(), torch.tensor(values), (10, 10), check_invariants=True)
    result = overfit_one_batch.check_overfit_one_batch(_graph_case(adj), rows=2, steps=5)
    assert result.details["subgraph"] == {"nodes": 4, "of": 10, "read": 4, "hops": 1}


def test_overfit_one_batch_keeps_the_targets_when_the_loss_reads_every_node():
    result = overfit_one_batch.check_overfit_one_batch(_graph_case(_chain(10)), rows=2, steps=5)
    assert result.details["subgraph"] == {"nodes": 3, "of": 10, "read": 3, "hops": 1}  # 0, 1 and 1's neighbour 2


def test_overfit_one_batch_cuts_a_graph_whose_targets_are_a_dict():
    case = _graph_case(_chain(10), targets={"label": torch.arange(10) % 2},
                       loss_fn=lambda out, t: torch.nn.functional.cross_entropy(out, t["label"]))
    result = overfit_one_batch.check_overfit_one_batch(case, rows=2, steps=5)
    assert result.details["subgraph"] == {"nodes": 3, "of": 10, "read": 3, "hops": 1}


def test_overfit_one_batch_trains_whole_a_graph_that_one_hop_covers():
    case = _graph_case(torch.ones(6, 6))
    result = overfit_one_batch.check_overfit_one_batch(case, rows=2, steps=5)
    assert (result.details["subgraph"], result.details["rows"]) == (None, 6)


class _ScoresAlongDimOne(_Propagate):
    def forward(self, x, adj):
        return super().forward(x, adj).t()


def test_overfit_one_batch_trains_whole_a_graph_whose_output_rows_are_not_its_nodes():
    case = _graph_case(_chain(10), model=_ScoresAlongDimOne(classes=1), targets=torch.randn(10),
                       loss_fn=lambda out, y: torch.nn.functional.mse_loss(out[0], y))
    result = overfit_one_batch.check_overfit_one_batch(case, rows=2, steps=5)
    assert (result.details["subgraph"], result.details["rows"]) == (None, 10)


class _ThreeHops(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1, 2))

    def forward(self, x, adj):
        return adj @ (adj @ (adj @ x)) @ self.weight


def test_overfit_one_batch_trains_whole_a_graph_whose_cut_the_loss_reads_no_row_of():
    """Scores three hops deep, clamped at zero by the loss: the cut around node 2 loses node 5, the only one that makes
    its scores positive, so the loss reads no row of the cut."""
    x = torch.zeros(8, 1)
    x[5] = 1.0
    case = {"model": _ThreeHops(), "batch": ((x, _chain(8)), torch.full((8, 2), 0.5)),
            "loss_fn": lambda out, y: torch.nn.functional.mse_loss(torch.relu(out), y)}
    result = overfit_one_batch.check_overfit_one_batch(case, rows=1, steps=5)
    assert (result.details["subgraph"], result.details["rows"]) == (None, 8)


def test_overfit_one_batch_counts_a_nan_or_inf_in_a_retry_as_a_jump():
    nan, inf = float("nan"), float("inf")
    assert all(overfit_one_batch._jumped(losses) for losses in ([1.0, nan], [1.0, inf], [nan, 1.0]))
    assert overfit_one_batch._jumped([1.0, 0.9, nan, 0.8] * 10, noisy=True)
    assert not overfit_one_batch._jumped([1.0, 1.2, 0.5])


def test_overfit_one_batch_traces_a_run_without_noise_from_its_first_loss_to_its_last():
    losses = [4.0] + [2.0] * (2 * overfit_one_batch.NOISE_WINDOW) + [1.0]
    assert overfit_one_batch._trace(losses) == f"4 -> 1 in {len(losses) - 1} steps"


def test_input_dependence_takes_a_dicts_logits_and_only_without_them_its_first_tensor_that_is_no_loss():
    hidden, logits, loss = torch.zeros(2, 3), torch.ones(2, 4), torch.tensor(1.0)
    assert input_dependence.prediction({"hidden": hidden, "logits": logits}) is logits
    assert input_dependence.prediction({"loss": loss, "logits_per_image": logits}) is logits
    assert input_dependence.prediction((hidden, logits)) is hidden and input_dependence.prediction(["text"]) is None
