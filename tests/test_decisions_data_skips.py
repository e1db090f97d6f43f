"""The skips, warnings and refusals no test ran (issue 27), each pinned by the decision it makes, in process."""
import errno

import pytest
import torch

import bad_samples
import batchnorm
import causal_dependency
import data_sanity
import dist_check
import gradient_flow
import init_loss
import label_alignment
import labels
import monitor
import nan_watch
import rl_probes
import synthetic_curves
import target_leak


def _zero_linear(n_in, n_out):
    layer = torch.nn.Linear(n_in, n_out)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    return layer


def test_bad_samples_lets_an_output_error_other_than_a_full_disk_propagate(monkeypatch, capsys):
    def main():
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(bad_samples, "main", main)
    with pytest.raises(PermissionError):
        bad_samples.run()


class _UnusedBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.head = torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.head(x)


def test_batchnorm_skips_train_mode_layers_that_never_run():
    case = {"model": _UnusedBatchNorm(), "batch": (torch.randn(4, 3), torch.zeros(4, 1)),
            "loss_fn": torch.nn.functional.mse_loss}
    assert batchnorm.check_batchnorm(case).status == "skip"


class _OneHotPrefixSum(torch.nn.Module):
    """Causal without an Embedding: each position sums the one-hot tokens up to itself."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(5, 5)

    def forward(self, ids):
        return self.head(torch.nn.functional.one_hot(ids, 5).float().cumsum(1))


def test_causal_dependency_passes_on_the_perturbation_test_alone_without_a_token_embedding():
    ids = torch.tensor([[0, 3, 1, 4], [2, 4, 0, 1]])
    case = {"model": _OneHotPrefixSum(), "batch": (ids, ids), "loss_fn": lambda out, y: out.sum(),
            "task": {"kind": "causal_lm"}}
    result = causal_dependency.check_causal_dependency(case)
    assert result.status == "pass"
    assert "no token embedding found" in result.summary


def test_data_sanity_finds_no_doubled_first_token_in_fewer_than_two_attended_rows_or_at_the_last_position():
    ids = torch.tensor([[1, 1, 5], [1, 1, 7]])
    one_row = {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1], [0, 0, 0]])}
    starts_last = {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1], [0, 0, 1]])}
    assert data_sanity.doubled_first_token("inputs['input_ids']", ids, one_row) is None
    assert data_sanity.doubled_first_token("inputs['input_ids']", ids, starts_last) is None


def test_data_sanity_fails_inputs_that_hold_no_tensor():
    case = {"model": torch.nn.Linear(3, 1), "batch": ({"scale": 2.0}, torch.randn(4, 1)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "fail"
    assert "the inputs hold no tensor" in result.details["findings"][0]


def test_data_sanity_fails_an_empty_tensor():
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.empty(0, 3), torch.empty(0, 1)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "fail"
    assert "is empty" in result.summary


def test_data_sanity_warns_of_float_inputs_of_another_dtype_than_the_parameters():
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1)),
            "loss_fn": lambda out, y: ((out - y) ** 2).mean(), "task": {"kind": "regression"}}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "warn"
    assert "float64 but the model's parameters are torch.float32" in result.summary


def test_data_sanity_warns_of_integer_targets_for_a_regression_task():
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(8, 3), torch.arange(8).reshape(8, 1)),
            "loss_fn": lambda out, y: ((out - y) ** 2).mean(), "task": {"kind": "regression"}}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "warn"
    assert "for a regression task" in result.summary


def test_hang_watch_refuses_a_stall_time_that_is_not_positive(tmp_path):
    with pytest.raises(ValueError, match="stall_seconds must be > 0"):
        dist_check.HangWatch(stall_seconds=0, out_dir=tmp_path)


def test_hang_watch_names_its_file_after_the_rank_in_the_environment_without_a_process_group(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with dist_check.HangWatch(out_dir=tmp_path) as watch:
        assert watch.path == tmp_path / "rank0.stack.txt"
    monkeypatch.setenv("RANK", "3")
    with dist_check.HangWatch(out_dir=tmp_path) as watch:
        assert watch.path == tmp_path / "rank3.stack.txt"


def test_gradient_flow_skips_a_model_with_every_parameter_frozen():
    model = torch.nn.Linear(3, 2).requires_grad_(False)
    case = {"model": model, "batch": (torch.randn(4, 3), torch.randn(4, 2)), "loss_fn": torch.nn.functional.mse_loss}
    assert gradient_flow.check_gradient_flow(case).status == "skip"


def test_init_loss_skips_class_kind_targets_that_are_no_class_encoding():
    case = {"model": _zero_linear(3, 3), "batch": (torch.randn(4, 3), torch.full((4, 3), 0.5)),
            "loss_fn": torch.nn.functional.mse_loss, "task": {"kind": "classification"}}
    result = init_loss.check_init_loss(case)
    assert result.status == "skip"
    assert "neither class indices" in result.summary


def _classifier_case(loss_fn, task):
    return {"model": _zero_linear(3, 4), "batch": (torch.randn(8, 3), torch.arange(8) % 4), "loss_fn": loss_fn,
            "task": task}


def test_init_loss_warns_of_a_loss_function_scaled_away_from_a_mean_cross_entropy():
    case = _classifier_case(lambda out, y: 2 * torch.nn.functional.cross_entropy(out, y), {"kind": "classification"})
    result = init_loss.check_init_loss(case)
    assert result.status == "warn"
    assert "not a plain mean cross-entropy" in result.summary


def test_init_loss_warns_when_the_class_count_hint_differs_from_the_output():
    case = _classifier_case(torch.nn.functional.cross_entropy, {"kind": "classification", "num_classes": 5})
    result = init_loss.check_init_loss(case)
    assert result.status == "warn"
    assert "the task hints say 5 classes" in result.summary


def test_init_loss_warns_of_off_centre_targets_without_a_trial_when_nothing_trains():
    torch.manual_seed(0)
    model = _zero_linear(3, 1).requires_grad_(False)
    case = {"model": model, "batch": (torch.randn(8, 3), 10 + 0.1 * torch.randn(8, 1)),
            "loss_fn": torch.nn.functional.mse_loss, "task": {"kind": "regression"}}
    result = init_loss.check_init_loss(case)
    assert result.status == "warn"
    assert "the first steps learn the bias" in result.summary


def test_label_alignment_skips_an_output_without_a_gradient():
    case = {"model": torch.nn.Identity(), "batch": (torch.randn(4, 3), torch.tensor([0, 1, 2, 0])),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification"}}
    result = label_alignment.check_label_alignment(case)
    assert (result.status, result.summary) == ("skip", "no logits tensor with a gradient in the model's output")


def test_label_alignment_skips_a_loss_that_ignores_the_logits():
    extra = torch.nn.Parameter(torch.ones(2))
    case = {"model": torch.nn.Linear(3, 3), "batch": (torch.randn(4, 3), torch.tensor([0, 1, 2, 0])),
            "loss_fn": lambda out, y: extra.sum(), "task": {"kind": "classification"}}
    result = label_alignment.check_label_alignment(case)
    assert (result.status, result.summary) == ("skip", "the loss does not depend on the logits")


def test_label_alignment_names_no_dropped_class_when_the_loss_scores_other_targets_than_the_labels():
    torch.manual_seed(0)
    targets = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1]])
    case = {"model": torch.nn.Sequential(torch.nn.Embedding(4, 4), torch.nn.Linear(4, 4)),
            "batch": (torch.tensor([[3, 1, 0, 2], [2, 0, 3, 1], [1, 3, 2, 0]]), targets),
            "loss_fn": lambda out, y: torch.nn.functional.cross_entropy(out.flatten(0, 1), ((y + 2) % 4).flatten()),
            "task": {"kind": "classification"}}
    result = label_alignment.check_label_alignment(case)
    assert result.status == "pass"


def test_label_alignment_skips_when_no_output_position_moves_the_loss():
    case = {"model": torch.nn.Linear(3, 3), "batch": (torch.randn(4, 3), torch.tensor([0, 1, 2, 0])),
            "loss_fn": lambda out, y: (out * 0).sum(), "task": {"kind": "classification"}}
    assert label_alignment.check_label_alignment(case).status == "skip"


def test_labels_skips_0_1_targets_of_another_shape_than_the_output():
    case = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(4, 3), torch.tensor([0.0, 1.0, 1.0, 0.0])),
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "classification"}}
    assert labels.check_labels(case).status == "skip"


def test_monitor_names_the_command_to_run_when_spikes_py_is_not_beside_it(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor, "__file__", str(tmp_path / "monitor.py"))
    assert monitor._spikes_summary("run.jsonl") == "read it with: python diagnostics/spikes.py run.jsonl"


def test_nan_watch_fails_an_input_batch_that_already_holds_nan():
    x = torch.randn(4, 3)
    x[1, 2] = float("nan")
    case = {"model": torch.nn.Linear(3, 1), "batch": (x, torch.zeros(4, 1)), "loss_fn": torch.nn.functional.mse_loss}
    result = nan_watch.check_nan_watch(case)
    assert (result.status, result.summary) == ("fail", "the input batch already holds NaN/inf (run data_sanity)")


class _TruncationAsTermination:
    """An agent reduced to its returns, which bootstrap no truncation."""

    def __init__(self, n_actions, gamma):
        self.gamma = gamma

    def returns(self, rewards, terminated, truncated, next_values, gamma):
        return rl_probes.ReferenceAgent.returns(self, rewards, terminated | truncated, torch.zeros_like(truncated),
                                                next_values, gamma)


def test_rl_probes_fails_a_returns_bug_when_no_probe_fails(monkeypatch):
    """The probes, which pass for this returns bug, are left out: they take seconds."""
    monkeypatch.setattr(rl_probes, "PROBES", ())
    result = rl_probes.check_rl_probes(_TruncationAsTermination)
    assert result["status"] == "fail"
    assert "returns fails" in result["summary"]


def test_a_planted_spike_adds_nothing_before_its_ramp():
    shape = synthetic_curves.Shape("loss_spike", peak=10, height=2.0, ramp=2)
    assert shape.excess(5) == 0.0
    assert shape.excess(8) == pytest.approx(2.0 / 3)


def test_synthetic_curves_refuses_an_unknown_scenario():
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        synthetic_curves.Curve("nope")


class _ReadsTheTargets(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(4, 4)

    def forward(self, targets):
        return self.embed(targets)


def test_target_leak_claims_no_scored_position_when_the_loss_gives_the_prediction_no_gradient():
    torch.manual_seed(0)
    targets = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    extra = torch.nn.Parameter(torch.ones(2))
    case = {"model": _ReadsTheTargets(), "batch": (targets.clone(), targets), "loss_fn": lambda out, y: extra.sum()}
    result = target_leak.check_target_leak(case)
    assert (result.status, result.details["moved"]) == ("pass", {})


def _refuse(*args, **kwargs):
    raise RuntimeError("a peer is gone\nits traceback")


def test_dist_check_refuses_a_process_group_that_does_not_form(tmp_path, monkeypatch):
    monkeypatch.setattr(dist_check.dist, "init_process_group", _refuse)
    with pytest.raises(dist_check.UsageError, match="the process group did not form"):
        dist_check.run_rank(0, 1, 0, dist_check.dist.HashStore(), tmp_path, 10, "gloo")


def test_dist_check_fails_a_step_that_gives_a_wrong_value(tmp_path, monkeypatch):
    """One rank in process; the last step's value is planted wrong."""
    run_step = dist_check._expected_and_run
    monkeypatch.setattr(dist_check, "_expected_and_run", lambda step, *args: (False, "planted") if
                        step == dist_check.STEPS[-1] else run_step(step, *args))
    verdict = dist_check.run_rank(0, 1, 0, dist_check.dist.HashStore(), tmp_path, 10, "gloo")
    assert (verdict["status"], verdict["summary"]) == ("fail", f"{dist_check.STEPS[-1]} gave a wrong value: planted")


def test_dist_check_refuses_a_teardown_a_peer_left(tmp_path, monkeypatch):
    destroy = dist_check.dist.destroy_process_group
    monkeypatch.setattr(dist_check.dist, "destroy_process_group", _refuse)
    try:
        with pytest.raises(dist_check.UsageError, match="a peer left before the end"):
            dist_check.run_rank(0, 1, 0, dist_check.dist.HashStore(), tmp_path, 10, "gloo")
    finally:
        destroy()


def test_init_loss_skips_targets_that_are_not_a_tensor():
    case = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(4, 3), {"label": torch.tensor([0, 1, 0, 1])}),
            "loss_fn": lambda out, y: torch.nn.functional.cross_entropy(out, y["label"])}
    result = init_loss.check_init_loss(case)
    assert result.status == "skip" and "targets are not a tensor" in result.summary


def test_labels_reads_float_0_1_targets_as_labels_only_for_a_classification_task():
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(8, 3), torch.tensor([[0.0], [1.0]] * 4)),
            "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits}
    result = labels.check_labels(case)
    assert result.status == "skip" and "set task kind classification" in result.summary
    case["task"] = {"kind": "classification"}
    assert labels.check_labels(case).status != "skip"
