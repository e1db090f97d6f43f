"""Branches pinned one by one (issue 27): refusals, skips and cases that tools/mutate.py found no test reaching or
holding. Each asserts the decision (status, the finding's presence, what was captured), in process, well under a second."""
import json
from pathlib import Path

import pytest
import torch

import bad_samples
import batch_independence
import capture
import causal_dependency
import data_sanity
import dist_check  # (at collection: its import sets TORCH_CPP_LOG_LEVEL, as its command wants)
import gradient_flow
import inplace
import input_dependence
import nan_watch


def test_batch_independence_skips_inputs_that_end_before_the_batch_dim():
    case = {"model": torch.nn.Identity(), "batch": (torch.randn(4), torch.zeros(4)), "loss_fn": lambda out, y: out.sum(),
            "task": {"batch_dim": 1}}  # a 1-D input has no dim 1: no rows to poison
    assert batch_independence.check_batch_independence(case).status == "skip"


class _Total(torch.nn.Module):
    def forward(self, x):
        return x.sum()  # 0-d: the batch is gone from the output


def test_batch_independence_skips_an_output_without_the_batch_dim():
    case = {"model": _Total(), "batch": (torch.randn(4, 3), torch.zeros(4)), "loss_fn": lambda out, y: out}
    assert batch_independence.check_batch_independence(case).status == "skip"


def test_causal_dependency_skips_a_task_that_is_not_a_causal_lm():
    case = {"model": torch.nn.Identity(), "batch": (torch.randn(2, 4, 1), torch.zeros(2, 4)),
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "regression"}}
    assert causal_dependency.check_causal_dependency(case).status == "skip"


def test_data_sanity_looks_for_a_doubled_first_token_in_input_ids_and_in_a_plain_tensor_only():
    ids = torch.tensor([[1, 1, 5, 6], [1, 1, 7, 8]])  # every row starts with id 1 twice
    assert data_sanity.doubled_first_token("inputs", ids, ids) == 1
    assert data_sanity.doubled_first_token("inputs['input_ids']", ids, {"input_ids": ids}) == 1
    assert data_sanity.doubled_first_token("inputs['token_type_ids']", ids, {"token_type_ids": ids}) is None
    each_its_own = torch.tensor([[1, 1, 5], [2, 2, 7]])  # doubled, but not one id: no shared BOS
    same_once = torch.tensor([[1, 4, 5], [1, 2, 7]])  # one shared first id, not doubled
    assert data_sanity.doubled_first_token("inputs", each_its_own, each_its_own) is None
    assert data_sanity.doubled_first_token("inputs", same_once, same_once) is None
    two_tokens = torch.tensor([[1, 1], [1, 1]])  # two positions are enough to see the id doubled
    assert data_sanity.doubled_first_token("inputs", two_tokens, two_tokens) == 1


def _embedding_case(top_id):
    ids = torch.tensor([[0, 3, 1], [2, 4, 0], [1, 2, 3], [4, 0, top_id]])
    model = torch.nn.Sequential(torch.nn.Embedding(5, 2), torch.nn.Flatten(), torch.nn.Linear(6, 2))
    return {"model": model, "batch": (ids, torch.tensor([0, 1, 0, 1])), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification"}}


def test_data_sanity_warns_of_an_id_equal_to_the_embedding_rows_and_passes_the_last_row():
    assert data_sanity.check_data_sanity(_embedding_case(4)).status == "pass"  # ids 0..4 of 5 rows
    assert data_sanity.check_data_sanity(_embedding_case(5)).status == "warn"  # id 5 is out of range


def test_data_sanity_counts_no_rows_in_a_0_d_target():
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(8, 3), torch.tensor(0.5)),  # one number for every row
            "loss_fn": lambda out, y: ((out - y) ** 2).mean(), "task": {"kind": "regression"}}
    assert data_sanity.check_data_sanity(case).status == "pass"


class _ScalesItsInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        out = self.weight * x  # backward needs x for the weight's gradient
        x.add_(1)  # x is no op's output: torch's refusal names no op, only the versions
        return out


def test_inplace_fails_a_backward_refusal_that_names_no_op_without_a_culprit():
    case = {"model": _ScalesItsInput(), "batch": (torch.randn(4, 3), torch.zeros(4, 3)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = inplace.check_inplace(case)
    assert (result.status, result.details["culprit"]) == ("fail", None)


class _LateLayer(torch.nn.Module):
    """A layer that joins the forward only from the fifth call on (a skip no random draw explains in four passes)."""

    def __init__(self):
        super().__init__()
        self.first, self.late, self.calls = torch.nn.Linear(3, 2), torch.nn.Linear(2, 2), 0

    def forward(self, x):
        self.calls += 1
        h = self.first(x)
        return self.late(h) if self.calls >= 5 else h


def test_gradient_flow_judges_a_parameter_missing_from_four_passes_as_getting_no_gradient():
    model = _LateLayer()
    case = {"model": model, "batch": (torch.randn(4, 3), torch.randn(4, 2)), "loss_fn": torch.nn.functional.mse_loss}
    result = gradient_flow.check_gradient_flow(case)
    assert result.status == "fail"
    assert result.details["none_grad"] == ["late.weight", "late.bias"]
    assert model.calls == 4  # the first pass and RESAMPLED_PASSES more: then the missing set stopped changing


class _Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.last, self.calls = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2), 0

    def forward(self, x):
        self.calls += 1
        return self.last(torch.tanh(self.first(x)))


def test_gradient_flow_runs_one_pass_when_every_parameter_gets_a_gradient():
    model = _Counted()
    case = {"model": model, "batch": (torch.randn(16, 4), torch.randn(16, 2)), "loss_fn": torch.nn.functional.mse_loss}
    assert gradient_flow.check_gradient_flow(case).status == "pass"
    assert model.calls == 1  # the passes that look for a layer a random draw skipped are for missing gradients only


def test_gradient_flow_gives_no_depth_ratio_when_a_gradient_norm_underflows_to_zero():
    """A loss scaled by 1e-30: each gradient entry is finite and non-zero, but its square underflows, so the norm is 0 and
    a ratio against it means nothing (it used to be a division by zero)."""
    case = {"model": _Counted(), "batch": (torch.randn(16, 4), torch.randn(16, 2)),
            "loss_fn": lambda out, y: torch.nn.functional.mse_loss(out, y) * 1e-30}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["depth"], result.details["rel_grad"]) == (
        "pass", {}, {"first.weight": 0.0, "last.weight": 0.0})


def test_gradient_flow_fails_a_loss_that_no_trainable_parameter_reaches():
    """model(x).detach() into the loss: no backward can run, every trainable parameter is named without a gradient."""
    model = torch.nn.Linear(3, 2)
    case = {"model": model, "batch": (torch.randn(4, 3), torch.randn(4, 2)),
            "loss_fn": lambda out, y: torch.nn.functional.mse_loss(out.detach(), y)}
    result = gradient_flow.check_gradient_flow(case)
    assert (result.status, result.details["none_grad"]) == ("fail", ["weight", "bias"])


def test_capture_keeps_a_number_target_of_a_loss_on_the_flattened_output_as_it_is():
    out = torch.zeros(2, 3, 4)  # the model's output; the loss read it flattened to (6, 4), with the target 1.0:
    # F.multilabel_soft_margin_loss(out.reshape(-1, 4), 1.0) runs (the one captured loss that takes a number)
    targets, (text, unflatten) = capture.Capture._targets(1.0, out, out.reshape(-1, 4), {})
    assert (targets, text, unflatten(targets)) == (1.0, "", 1.0)


def test_bad_samples_keeps_the_worst_twenty_by_default():
    junk = [(line, "/" * (300 + line)) for line in range(1, 26)]  # 25 flagged samples, the longer runs later
    result = bad_samples.screen(junk)
    assert result["flagged"] == 25 and [entry["line"] for entry in result["worst"]] == list(range(6, 26))


def test_batch_independence_predicts_from_the_tensor_beside_the_loss_when_there_are_no_logits():
    loss, logits_per_image = torch.tensor(1.0), torch.randn(3, 3)  # CLIP given return_loss=True
    assert batch_independence._prediction({"loss": loss, "logits_per_image": logits_per_image}) is logits_per_image


def test_batch_independence_reads_an_output_that_is_nan_in_both_runs_as_unchanged():
    nan = torch.full((3, 2), float("nan"))  # no finite value to scale the tolerance by: 1 is the scale
    assert batch_independence._outputs_changed(nan, nan.clone(), [1, 2], 0) == []


class _KeywordEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, ids):
        return self.head(self.emb(input=ids).mean(1))  # the embedding called by keyword: its hook sees no args


def test_batch_independence_passes_a_model_that_calls_its_embedding_by_keyword():
    torch.manual_seed(0)
    case = {"model": _KeywordEmbedding(), "batch": (torch.randint(0, 10, (4, 5)), torch.zeros(4, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy}
    assert batch_independence.check_batch_independence(case).status == "pass"


class _ScaledEmbedding(_KeywordEmbedding):
    def forward(self, ids, scale):
        return self.head(self.emb(ids).mean(1)) * scale


def test_batch_independence_looks_for_token_ids_only_among_inputs_that_have_the_batch_dim():
    torch.manual_seed(0)
    inputs = {"ids": torch.randint(0, 10, (4, 5)), "scale": torch.tensor(2)}  # a 0-d input beside the ids
    case = {"model": _ScaledEmbedding(), "batch": (inputs, torch.zeros(4, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = batch_independence.check_batch_independence(case)
    assert result.status == "pass" and result.details["gradient_leaks_from"] == []


class _SeesAhead(torch.nn.Module):
    """Each position's output adds the input `ahead` positions later (the last position's own at the end)."""

    def __init__(self, ahead):
        super().__init__()
        self.ahead = ahead

    def forward(self, x):  # x: (B, T, 1)
        later = torch.cat([x[:, self.ahead:], x[:, -1:].expand(-1, self.ahead, -1)], 1) if self.ahead else 0
        return x + later


def _sees_ahead(ahead, positions=8):
    case = {"model": _SeesAhead(ahead), "batch": (torch.randn(2, positions, 1), torch.zeros(2, positions)),
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "causal_lm"}}
    return causal_dependency.check_causal_dependency(case)


@pytest.mark.parametrize("ahead, diagnosis", [(2, "a mask off by a position or two"), (3, "a wrong causal mask"),
                                              (7, "a missing causal mask")])
def test_causal_dependency_tells_a_mask_off_by_one_or_two_from_a_wrong_or_a_missing_one(ahead, diagnosis):
    result = _sees_ahead(ahead)
    assert result.status == "fail" and result.details["lookahead"] == ahead and f"({diagnosis}" in result.summary


def test_causal_dependency_checks_a_sequence_of_two_positions():
    assert _sees_ahead(0, positions=2).status == "pass" and _sees_ahead(1, positions=2).status == "fail"


def test_causal_dependency_names_a_run_of_three_positions_as_a_range():
    assert causal_dependency._positions([5, 6, 7]) == "5..7" and causal_dependency._positions([5, 6]) == "5, 6"


def test_causal_dependency_runs_the_gradient_test_through_the_token_embedding():
    result = causal_dependency.check_causal_dependency(causal_dependency.make_demo_case(False))
    assert result.status == "pass" and "(perturbation and gradient tests)" in result.summary


def test_data_sanity_names_the_features_it_flags_and_a_one_feature_tensor_by_its_name():
    assert data_sanity.scale_findings("x", torch.full((4,), 1000.0)) == [
        ("wild", "x: far from normalised (mean 1e+03, std 0)")]
    wide = torch.randn(4, 3)
    wide[:, 2] = 0.5
    assert data_sanity.scale_findings("x", wide) == [("warn", "x features 2: constant over the batch")]


def test_data_sanity_takes_targets_flattened_over_batch_and_time_as_the_same_rows():
    case = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(4, 5, 3), torch.zeros(20, dtype=torch.long)),
            "loss_fn": lambda out, y: out.sum()}
    assert "disagree on the number of rows" not in data_sanity.check_data_sanity(case).summary


def test_data_sanity_judges_a_target_of_one_value_too():
    case = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(1, 3), torch.tensor([2.5])),  # a batch of one row
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "classification", "num_classes": 2}}
    result = data_sanity.check_data_sanity(case)
    assert result.status == "warn" and "class indices must be int64" in result.summary


class _OwnLossAndAMetric(torch.nn.Module):
    """nanoGPT's shape: the model makes its own loss with ignore_index=-1, and a detached metric beside it."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(6, 4)

    def forward(self, x, y):
        logits = self.head(x)
        self.logged = torch.nn.functional.cross_entropy(logits.detach(), y)  # for the log: feeds no backward()
        return logits, torch.nn.functional.cross_entropy(logits, y, ignore_index=-1)


def test_capture_reads_the_ignore_index_of_the_one_inner_loss_that_feeds_backward():
    model = _OwnLossAndAMetric()

    def train():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _, loss = model(torch.randn(8, 6), torch.randint(0, 4, (8,)))
        loss.backward()
        optimizer.step()

    assert capture.capture_case(train)["task"]["ignore_index"] == -1


class _HandWrittenLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(6, 1)

    def forward(self, x, y):
        out = self.head(x).squeeze(1)
        return out, ((out - y) ** 2).mean()  # its own loss, with no loss call inside: no ignore_index to keep


def test_capture_takes_a_models_own_loss_written_by_hand_with_no_inner_loss_settings():
    model = _HandWrittenLoss()

    def train():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _, loss = model(torch.randn(8, 6), torch.randn(8))
        loss.backward()
        optimizer.step()

    case = capture.capture_case(train)
    assert "the model's own loss" in case["captured"] and "ignore_index" not in case["task"]


def test_capture_names_the_line_of_the_users_function_that_raised_not_its_own():
    def train():
        raise ValueError("no data")

    raising = train.__code__.co_firstlineno + 1
    with pytest.raises(capture.CaptureError, match=rf"raised ValueError at test_decisions_branches\.py:{raising} "):
        capture.capture_case(train)


def test_a_closed_training_monitor_refuses_to_log(tmp_path):
    import monitor

    log = monitor.TrainingMonitor(tmp_path / "train.jsonl")
    log.log(step=1, loss=2.0)
    log.close()
    with pytest.raises(RuntimeError, match="is closed"):
        log.log(step=2, loss=1.9)
    assert len((tmp_path / "train.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("frozen_by_the_caller", [False, True])
def test_the_supervised_child_leaves_the_callers_garbage_collector_as_it_was(frozen_by_the_caller):
    """The parent freezes its heap for the fork (the child's collections then skip torch's objects) and unfreezes it
    after; a caller that froze its own heap (a pre-fork server) keeps it frozen."""
    import gc

    from ml_debug_contract import supervised

    gc.unfreeze()  # (a test run forked from a frozen parent, as mutate.py --warm does, starts frozen)
    if frozen_by_the_caller:
        gc.freeze()
    try:
        before = gc.get_freeze_count()
        assert list(supervised(lambda send: 42, "work", 30)) == [("done", 42)]
        assert gc.get_freeze_count() == before and (before > 0) == frozen_by_the_caller
    finally:
        gc.unfreeze()


def test_a_supervised_child_that_answered_ends_on_its_own_before_the_kill(tmp_path, monkeypatch):
    """What a coverage tool's os._exit does (save its data first) finishes: the kill comes after the child ended, or
    after EXIT_GRACE (1 s)."""
    import os
    import time

    from ml_debug_contract import supervised

    saved, real_exit = tmp_path / "saved", os._exit

    def exit_after_saving(code):  # in the child: the fork inherits the patch
        time.sleep(0.3)
        saved.write_text("data")
        real_exit(code)

    monkeypatch.setattr(os, "_exit", exit_after_saving)
    assert list(supervised(lambda send: 42, "work", 30)) == [("done", 42)]
    assert saved.read_text() == "data"
    saved.unlink()
    answers = supervised(lambda send: 43, "work", 30)
    assert next(answers) == ("done", 43)
    answers.close()  # a caller that returns at the answer, as the doctor does
    assert saved.read_text() == "data"


def test_a_supervised_child_that_never_answered_gets_no_exit_grace(monkeypatch):
    """A child that hangs past its limit is killed then, not EXIT_GRACE later."""
    import time

    import ml_debug_contract

    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", 0.1)
    monkeypatch.setattr(ml_debug_contract, "EXIT_GRACE", 5.0)
    started = time.monotonic()
    with pytest.raises(ml_debug_contract.SupervisedError, match="time limit"):
        list(ml_debug_contract.supervised(lambda send: time.sleep(60), "work", 0.1))
    assert time.monotonic() - started < 3.0


def test_resume_check_marks_the_resume_steps_of_a_resumed_run_and_names_its_column():
    import resume_check
    from ml_debug_contract import CheckResult

    run = {"loss": [2.0, 1.9, 1.8], "lr": [0.1, 0.1, 0.1], "batch": [0, 1, 2]}
    details = {"reference": run, "resumed": run, "steps": 3, "resume_at": [1], "rtol": 0.0, "atol": 0.0}
    lines = resume_check.report(CheckResult("resume_check", "pass", "same run", details)).splitlines()
    assert "resumed" in lines[1] and [line[2] for line in lines[2:]] == [" ", ">", " "]


def test_spike_guard_takes_z_scores_below_one_and_refuses_zero():
    import spike_guard

    assert spike_guard.SpikeGuard(skip_z=0.5).skip_z == 0.5
    assert spike_guard.SpikeGuard(torch.nn.Linear(2, 2), clip_z=0.5).clip_z == 0.5
    with pytest.raises(ValueError, match="skip_z must be positive"):
        spike_guard.SpikeGuard(skip_z=0)
    with pytest.raises(ValueError, match="clip_z must be between 0 and skip_z"):
        spike_guard.SpikeGuard(torch.nn.Linear(2, 2), clip_z=0)


def test_the_text_log_reader_strips_colour_codes_between_a_name_and_its_number():
    from spikelog.read import general

    assert general.parse("step 3 \x1b[1mloss\x1b[0m 0.5") == {"loss": "0.5", "step": "3"}  # bold name, a space, value


def test_the_text_log_reader_takes_a_table_of_three_columns_or_more_only():
    from spikelog.read import general

    assert general.table_row("Loss  Acc", None) == (None, None)  # two words apart: prose as likely as a header
    assert general.table_row("Epoch | Loss | Acc", None) == (["Epoch", "Loss", "Acc"], None)
    assert general.table_row("3 | 0.5 | 0.9", ["Epoch", "Loss", "Acc"]) == (
        ["Epoch", "Loss", "Acc"], {"Epoch": "3", "Loss": "0.5", "Acc": "0.9", "step": "3"})
    assert general.table_row("3 | 0.5 | 0.9 | 7", ["Epoch", "Loss", "Acc"]) == (["Epoch", "Loss", "Acc"], None)  # misaligned


def test_a_folder_without_an_event_file_is_refused_as_a_tensorboard_log(tmp_path):
    import spikes
    from spikelog import CliError

    with pytest.raises(CliError, match="holds no TensorBoard event file"):
        spikes.analyze(tmp_path)


def test_golden_values_logged_every_step_are_read(tmp_path):
    import json

    import spikes

    folder = tmp_path
    golden = {"lm loss": {"start_step": 1, "end_step": 64, "step_interval": 1, "values": [3.0 - 0.01 * k for k in range(64)]}}
    (folder / "golden.json").write_text(json.dumps(golden))
    report = spikes.analyze(folder / "golden.json")
    assert (report.values, report.first_step, report.last_step) == (64, 1, 64)


class _PlainTensors(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.scale = torch.ones(2, requires_grad=True)  # used in forward, trainable, not registered
        self.spare = torch.zeros(2)  # never used

    def forward(self, x):
        return self.lin(x) * self.scale


def test_registration_tells_the_unregistered_tensors_forward_uses_from_those_it_does_not():
    import registration

    case = {"model": _PlainTensors(), "batch": (torch.randn(4, 3), torch.zeros(4, 2)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = registration.check_registration(case)
    assert result.status == "fail"
    assert (result.details["unregistered_used"], result.details["unregistered_unused"]) == (["scale"], ["spare"])


class _PlainShift(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.shift = torch.ones(2)  # used in forward, not trainable, not registered

    def forward(self, x):
        return self.lin(x) + self.shift


def test_registration_names_the_containers_of_the_untrainable_tensors_when_none_is_trainable():
    import registration

    case = {"model": _PlainShift(), "batch": (torch.randn(4, 3), torch.zeros(4, 2)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = registration.check_registration(case)
    assert (result.status, result.details["containers"]) == ("warn", ["shift"])


def _postmortem_of(tmp_path, rows):
    import spikes

    path = tmp_path / "train.csv"
    path.write_text("step,loss\n" + "\n".join(f"{step},{loss}" for step, loss in rows) + "\n")
    report = spikes.analyze(path)
    return report, spikes.postmortem(report)


def test_the_postmortem_describes_a_run_of_nan_values(tmp_path):
    rows = [(s, 2.0 + 0.01 * (s % 3)) for s in range(200)] + [(s, "nan") for s in range(200, 205)]
    _, draft = _postmortem_of(tmp_path, rows)
    assert "loss: 5 non-finite values from step 200 to step 204." in draft


def test_the_postmortem_counts_a_spikes_lost_steps_up_to_the_rollback_after_it(tmp_path):
    rows = [(s, 2.0 + 0.01 * (s % 3)) for s in range(300)]
    rows += [(s, 9.0) for s in range(300, 400)]  # a spike that never comes down, then a rollback to step 250
    rows += [(s, 2.0 + 0.01 * (s % 3)) for s in range(250, 500)]
    report, draft = _postmortem_of(tmp_path, rows)
    assert report.spikes and "99 steps from the start of the spike to the rollback at step 399 (resumed at step 250)" in draft


class _AboveHalf(torch.nn.Module):
    """Outputs 0.5 + w**2: squared, the loss falls from 2.25 to a floor of 0.25 the model cannot go below; at 10x the lr
    SGD overshoots and diverges."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x * 0 + 0.5 + self.w ** 2


@pytest.mark.parametrize("steps, missed", [(300, "stalled"), (30, "ran out of its 30 steps")])
def test_overfit_one_batch_says_whether_a_run_unstable_at_10x_stalled_or_ran_out_of_steps(steps, missed):
    import overfit_one_batch

    case = {"model": _AboveHalf(), "batch": (torch.zeros(4, 1), torch.zeros(4, 1)), "loss_fn": lambda out, y: (out ** 2).mean(),
            "optimizer": lambda params: torch.optim.SGD(params, lr=0.05)}
    result = overfit_one_batch.check_overfit_one_batch(case, steps=steps)
    assert (result.status, result.details["failure"], result.details["retry_unstable"]) == ("skip", "inconclusive", "diverged")
    assert f"but {missed} above the target" in result.summary


def test_overfit_one_batch_reports_every_tenth_loss_and_the_last_one_once():
    import overfit_one_batch

    assert overfit_one_batch._every_10([float(v) for v in range(12)]) == [0.0, 10.0, 11.0]
    assert overfit_one_batch._every_10([float(v) for v in range(11)]) == [0.0, 10.0]  # step 10 is the last: not twice


@pytest.mark.parametrize("output, centred", [
    (torch.tensor([0.0, -200.0]).log_softmax(-1), True),  # one row of log-probabilities, one of them exactly 0
    (torch.tensor([[0.3, -0.2], [1.0, 2.0]]).log_softmax(-1), True),  # two classes
    (torch.full((3, 1), -5e-4), False),  # one column: nothing to centre, though it is <= 0 with logsumexp near 0
    (torch.tensor([[5e-4, -100.0]]), False),  # a positive value is no log-probability, whatever its logsumexp
    (torch.tensor(-1.0), False),  # 0-d
    (torch.tensor([[-0.95e-3, -1000.0]], dtype=torch.float64), True),  # logsumexp within 1e-3 of 0
    (torch.tensor([[-1e-3, -1000.0]], dtype=torch.float64), False),  # exactly 1e-3 off: not log-probabilities
])
def test_input_dependence_centres_log_probabilities_only(output, centred):
    compared = input_dependence.comparable(output)
    expected = output.double() - output.double().mean(-1, keepdim=True) if centred else output.double()
    assert torch.equal(compared, expected)


class _ZeroHead(torch.nn.Module):
    """A zero-initialised output layer; with `blows_up`, its output is inf once a step has moved the weight."""

    def __init__(self, blows_up=False):
        super().__init__()
        self.head, self.blows_up = torch.nn.Linear(3, 2), blows_up
        torch.nn.init.zeros_(self.head.weight)

    def forward(self, x):
        out = self.head(x)
        return out / 0 if self.blows_up and self.head.weight.detach().any() else out


def _zero_head_case(blows_up):
    torch.manual_seed(0)
    return {"model": _ZeroHead(blows_up), "batch": (torch.randn(4, 3), torch.randn(4, 2)),
            "loss_fn": torch.nn.functional.mse_loss}


def test_input_dependence_skips_an_output_that_turns_inf_after_the_zero_init_step():
    result = input_dependence.check_input_dependence(_zero_head_case(blows_up=True))
    assert result.status == "skip" and "NaN/inf after 1 step(s)" in result.summary


def test_input_dependence_counts_the_steps_a_zero_init_layer_took_apart_from_the_weak_output_steps():
    result = input_dependence.check_input_dependence(_zero_head_case(blows_up=False))
    assert result.status == "pass" and result.details["steps_taken"] == 21  # 1 past the zero init, 20 for a weak output
    assert "after 1 optimizer step(s): at init the all-zero head.weight" in result.summary
    torch.manual_seed(0)
    plain = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(4, 3), torch.randn(4, 2)),
             "loss_fn": torch.nn.functional.mse_loss}
    result = input_dependence.check_input_dependence(plain)
    assert result.status == "pass" and "optimizer step" not in result.summary


def test_nan_watch_blames_a_nan_loss_from_finite_outputs_on_the_loss_function_without_a_backward():
    import nan_watch

    targets = torch.zeros(4, 2)
    targets[0, 0] = float("nan")  # a corrupt label: the model is fine, the loss is not
    case = {"model": torch.nn.Sequential(torch.nn.Linear(3, 2)), "batch": (torch.randn(4, 3), targets),
            "loss_fn": torch.nn.functional.mse_loss}
    result = nan_watch.check_nan_watch(case)
    assert (result.status, result.details["origin"]) == ("fail", {"module": "loss_fn", "phase": "forward"})


@pytest.mark.parametrize("how, blamed", [("a NaN batch", ("Sequential", "inputs")),
                                         ("a log between layers called one by one", ("1", "outside"))])
def test_the_nan_watch_replay_tells_a_nan_batch_from_a_nan_made_outside_the_model(how, blamed):
    from nan_watch import NanWatch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    x = torch.randn(4, 3)
    if how == "a NaN batch":
        x[0, 0] = float("nan")

    def compute():  # the loop calls the model whole, or its layers itself with a log between them (the root never runs)
        return model(x).sum() if how == "a NaN batch" else model[1](model[0](x).log()).sum()

    loss = compute()
    loss.backward()
    report = NanWatch(model).check(0, loss, replay=compute)
    assert (report["module"], report["phase"], report["source"]) == (blamed[0], "forward", blamed[1])


def test_spikes_write_output_never_replaces_a_file_that_appeared_and_removes_only_its_own_partial_file(tmp_path):
    from spikelog import CliError
    from spikelog.output import write_output
    calls = []
    appeared = tmp_path / "pm.md"
    appeared.write_text("mine\n")  # made after check_output looked: the open refuses, write is never called
    with pytest.raises(CliError, match="the file exists"):
        write_output(appeared, calls.append, force=False)
    assert calls == [] and appeared.read_text() == "mine\n"
    with pytest.raises(CliError, match="cannot write"):
        write_output(tmp_path / "no such folder" / "pm.md", calls.append, force=False)
    assert calls == []

    def disk_full(handle):
        handle.write(b"half a post-")
        raise OSError(28, "No space left on device")
    ours = tmp_path / "new.md"
    with pytest.raises(CliError, match="No space left"):
        write_output(ours, disk_full, force=False)
    assert not ours.exists()  # created by this run and not finished: removed
    with pytest.raises(CliError, match="No space left"):
        write_output(appeared, disk_full, force=True)
    assert appeared.exists()  # the user's file (--force): never deleted


@pytest.mark.parametrize("scale, loss, used, reported", [
    (2.0 ** 16, 1.0, True, False),  # an fp16 overflow: the scaler skips the step and halves its scale
    (2.0, 1.0, True, False),  # (the last scale a scaling can overflow at)
    (1.0, 1.0, True, True),  # at a scale of 1 no scaling made the inf: a NaN/inf the scaler would skip forever
    (2.0 ** 16, float("nan"), True, True),  # a non-finite loss is never the scaler's
    (2.0 ** 16, 1.0, False, False),  # a scaler not used yet: its initial scale
    (1.0, 1.0, False, True),
])
def test_nan_watch_leaves_an_inf_gradient_to_an_fp16_scaler_only_while_its_scale_is_above_1(scale, loss, used, reported):
    model = torch.nn.Linear(2, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    if used:
        scaler.scale(torch.ones(()))  # its first use: the scale is set
    model.weight.grad, model.bias.grad = torch.full((1, 2), float("inf")), torch.zeros(1)
    watch = nan_watch.NanWatch(model, scaler=scaler)
    assert (watch.check(0, torch.tensor(loss)) is not None) == reported
    unscaled = nan_watch.NanWatch(model)  # without the scaler: every inf is a bad step
    assert unscaled.check(0, torch.tensor(1.0)) is not None


def test_the_callbacks_grad_norm_is_none_without_gradients_not_zero():
    from ml_debug.integrations._session import grad_norm
    model = torch.nn.Linear(2, 1)
    assert grad_norm(model) is None  # before any backward (or all frozen): nothing to log, not a norm of 0
    model(torch.ones(2)).sum().backward()
    assert float(grad_norm(model)) == pytest.approx(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))


def test_data_sanity_standardises_rows_by_features_per_feature_and_images_as_a_whole():
    table = torch.stack([torch.arange(8.0), 100.0 + 10 * torch.arange(8.0)], dim=1)  # 8 rows, 2 features
    per_feature = data_sanity._standardised(table)
    assert torch.allclose(per_feature.mean(0), torch.zeros(2), atol=1e-6)
    assert torch.allclose(per_feature.std(0), torch.ones(2), atol=1e-6)  # each column alone, not the table as a whole
    images = torch.arange(24.0).reshape(2, 3, 2, 2)
    whole = data_sanity._standardised(images)
    assert float(whole.mean()) == pytest.approx(0.0, abs=1e-6) and float(whole.std()) == pytest.approx(1.0, rel=1e-6)


def test_an_output_in_a_folder_that_does_not_exist_is_refused_before_any_work(tmp_path):
    from ml_debug_contract import OutputRefused, output_file
    with pytest.raises(OutputRefused, match="does not exist"):
        output_file(tmp_path / "no such folder" / "report.md", option="--out")
    assert output_file(tmp_path / "report.md", option="--out") == tmp_path / "report.md"  # a new file in a folder: fine


def test_a_text_log_with_a_nul_byte_is_refused_and_a_line_of_4_mb_is_the_longest_read(tmp_path):
    from spikelog import CliError
    from spikelog.read.text import MAX_LINE, text_blocks
    path = tmp_path / "log.txt"
    path.write_bytes(b"step 1 loss 2.0\nstep 2 \0loss 1.9\n")
    with pytest.raises(CliError, match="NUL bytes"):
        list(text_blocks(path))
    path.write_bytes(b"a" * MAX_LINE)  # one line of exactly 4 MB, no newline: the longest a log line may be
    assert [len(text) for _, text in text_blocks(path)] == [MAX_LINE]
    path.write_bytes(b"a" * (MAX_LINE + 1))
    with pytest.raises(CliError, match="longer than 4 MB"):
        list(text_blocks(path))


def test_the_post_mortem_counts_lost_steps_to_a_later_rollback_says_20_of_n_and_tells_a_creep():
    from types import SimpleNamespace

    from spikelog import report as postmortem
    spike = SimpleNamespace(start=1000, start_row=100, type="no_recovery")
    rolled_back = SimpleNamespace(resumes=[(150, 900, 1400)], last_step=5000)  # (row, resumed at, rolled back from)
    assert postmortem._lost_steps(spike, rolled_back).startswith("400 steps from the start of the spike to the rollback")
    to_the_end = SimpleNamespace(resumes=[(50, 900, 950)], last_step=5000)  # a resume before the spike: not this one's
    assert postmortem._lost_steps(spike, to_the_end).startswith("4000 steps from the spike to the end of the log")
    fast = [SimpleNamespace(type="fast_recovery", step=s, start=s, end=s + 2, baseline=1.0, peak=3.0 + s, recovery_steps=2,
                            grad_norm_lead=None) for s in range(21)]
    assert "Largest first:" in "\n".join(postmortem._fast_section(fast[:20]))  # all 20 shown: no "20 of"
    assert "Largest first (20 of 21):" in "\n".join(postmortem._fast_section(fast))
    creep = {"kind": "non_spike_divergence", "from": 1.0, "low_step": 10, "to": 1.5, "last_step": 90, "step": 40}
    assert postmortem._describe(creep).startswith("The loss crept from 1 (lowest, around step 10) to 1.5 by step 90")


@pytest.mark.parametrize("name, text, fmt", [("run.log", "step,loss\n1,2.5\n2,2.4\n", "csv"),
                                             ("run.log", "step\tloss\n1\t2.5\n2\t2.4\n", "tsv")])
def test_a_table_whose_name_says_nothing_is_read_by_its_separator(tmp_path, name, text, fmt):
    from spikelog.read import sniff
    path = tmp_path / name
    path.write_text(text)
    assert sniff(path) == fmt


def test_init_loss_skips_an_output_with_no_class_dimension_matching_the_targets():
    import init_loss
    case = {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(8, 4), torch.randint(0, 3, (5,))),
            "loss_fn": lambda out, y: out.float().mean()}
    result = init_loss.check_init_loss(case)
    assert result.status == "skip" and "no class dimension matching targets (5,)" in result.summary


class _Notes(torch.nn.Module):
    def forward(self, x):
        return {"note": "no tensor here"}


def test_labels_skips_an_output_that_holds_no_prediction_tensor():
    import labels
    case = {"model": _Notes(), "batch": (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            "loss_fn": lambda out, y: torch.zeros(())}
    result = labels.check_labels(case)
    assert result.status == "skip" and "cannot find the prediction tensor" in result.summary


class _Pooled(torch.nn.Module):
    """The target_leak demo's model with its output averaged over time: one vector per row, no position to score."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs).mean(dim=1)


def test_target_leak_skips_an_output_that_does_not_line_up_with_the_targets_position_by_position():
    import target_leak
    case = target_leak.make_demo_case(broken=False)
    case["model"] = _Pooled(case["model"])
    result = target_leak.check_target_leak(case)
    assert result.status == "skip" and "does not line up with the targets" in result.summary


@pytest.mark.parametrize("tool", ["metric_stuck", "pinn_check"])
def test_a_problem_file_that_raises_on_import_or_lacks_its_function_is_named_for_what_it_did(tmp_path, tool):
    module = __import__(tool)
    name = "make_problem" if tool == "metric_stuck" else "make_pinn"
    raising = tmp_path / "raising.py"
    raising.write_text(f"def {name}():\n    return {{}}\n\nraise ValueError('no data here')\n")  # its function is defined
    with pytest.raises(module.ProblemError, match="raised ValueError on import: no data here"):
        module.load_problem(str(raising))
    lacking = tmp_path / "lacking.py"
    lacking.write_text("x = 1\n")
    with pytest.raises(module.ProblemError, match=rf"has no function {name}\(\)"):
        module.load_problem(str(lacking))


def test_a_spikes_grad_norm_peak_skips_non_finite_values_and_none_leaves_it_unknown():
    from types import SimpleNamespace

    from spikelog.detect import _grad_peak
    episode = SimpleNamespace(grad_peak=None)
    _grad_peak(episode, [1.0, float("inf"), 3.0, float("nan")])
    assert episode.grad_peak == 3.0
    _grad_peak(episode, [float("nan")])  # nothing finite: the peak so far stays
    assert episode.grad_peak == 3.0


def test_the_callbacks_log_the_guards_own_grad_norm_when_they_give_none(tmp_path):
    import json

    from ml_debug.integrations._session import Session
    model = torch.nn.Linear(2, 1)
    model(torch.ones(2)).sum().backward()
    session = Session(model, None, tmp_path / "log.jsonl", nan_watch=False)
    session.add_loss(torch.tensor(0.5))
    session.before_step(0)  # no norm given: the guard measures the gradients itself, before any clip
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # the trainer clips: the monitor would measure 0.01
    session.after_step(0)
    session.close()
    [record] = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert record["grad_norm"] == pytest.approx(session.guard.grad_norm) and record["grad_norm"] > 1  # pre-clip


@pytest.mark.parametrize("global_step, kept", [(1, True), (0, False)])
def test_the_lightning_callback_continues_the_log_of_a_resumed_run_and_refuses_to_replace_one_at_step_0(
        tmp_path, global_step, kept):
    pytest.importorskip("lightning")
    from types import SimpleNamespace

    from ml_debug.integrations.lightning import MLDebugCallback
    log = tmp_path / "ml_debug_log.jsonl"
    log.write_text('{"step": 0, "loss": 1.0}\n')
    model = torch.nn.Linear(2, 1)
    trainer = SimpleNamespace(global_step=global_step, optimizers=[torch.optim.SGD(model.parameters(), lr=0.1)],
                              log_dir=str(tmp_path), default_root_dir=str(tmp_path))
    callback = MLDebugCallback(guard=False, nan_watch=False)
    if kept:
        callback.on_train_start(trainer, model)  # resumed from step 1: the log goes on
        callback.session.close()
    else:
        with pytest.raises(FileExistsError):  # a fresh run never writes over a log that is there
            callback.on_train_start(trainer, model)
    assert log.read_text() == '{"step": 0, "loss": 1.0}\n'


def test_an_install_refusal_names_5_paths_and_counts_the_rest():
    import install_skill
    paths = [f"refs/{n}.md" for n in range(7)]
    assert install_skill.listing(paths) == "refs/0.md, refs/1.md, refs/2.md, refs/3.md, refs/4.md and 2 more"
    assert install_skill.listing(paths[:5]) == "refs/0.md, refs/1.md, refs/2.md, refs/3.md, refs/4.md"


def test_bad_samples_keeps_one_flagged_sample_with_top_1(capsys):
    assert bad_samples.main(["--top", "1", "--json"]) == 1  # the demo shard has 3 flagged samples
    result = json.loads(capsys.readouterr().out)
    assert (result["flagged"], len(result["worst"])) == (3, 1)


def test_batchnorm_skips_a_model_whose_batchnorm_layers_are_all_in_eval_mode():
    import batchnorm
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).eval()
    case = {"model": model, "batch": (torch.randn(1, 3), torch.zeros(1)), "loss_fn": lambda out, y: out.sum()}
    skipped = batchnorm.check_batchnorm(case)
    assert skipped.status == "skip" and "eval mode" in skipped.summary  # why, not "none ran": the fix is train mode
    model[1].train()  # the same one-row batch in train mode: statistics over one sample
    assert batchnorm.check_batchnorm(case).status == "fail"


@pytest.mark.parametrize("ids", [torch.tensor([[1], [2]]), torch.tensor([1, 2, 3])], ids=["one position", "1-D"])
def test_causal_dependency_skips_an_input_without_two_positions_in_time(ids):
    case = {"model": torch.nn.Embedding(4, 3), "batch": (ids, ids), "loss_fn": lambda out, y: out.sum(),
            "task": {"kind": "causal_lm"}}
    assert causal_dependency.check_causal_dependency(case).status == "skip"


def test_init_scale_skips_a_model_the_task_says_is_pretrained():
    import init_scale
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        model.weight.mul_(100)  # far off its init scale: a fail, unless the weights are pretrained
    case = {"model": model, "batch": (torch.randn(4, 8), torch.zeros(4)), "loss_fn": lambda out, y: out.sum()}
    assert init_scale.check_init_scale(case).status == "fail"
    assert init_scale.check_init_scale({**case, "task": {"pretrained": True}}).status == "skip"


def test_dist_check_says_all_ranks_passed_only_when_every_rank_reported_a_pass():
    def said(verdicts):
        return "all ranks passed" in dist_check.report(verdicts, 2, "gloo", 30, "/tmp/out")

    ok = {"device": "cpu", "status": "pass", "summary": "ok"}
    assert said({0: ok, 1: ok})
    assert not said({0: ok, 1: {**ok, "status": "fail", "summary": "all_reduce gave 3, not 2"}})
    assert not said({0: ok})  # rank 1 never reported


def test_a_model_checks_embedded_demo_runs_in_this_process_and_only_a_case_file_in_the_supervised_child(
        monkeypatch, capsys):
    import batchnorm
    import ml_debug_contract
    children = []
    real = ml_debug_contract.supervised
    monkeypatch.setattr(ml_debug_contract, "supervised", lambda *args, **kw: children.append(args[1]) or real(*args, **kw))
    assert ml_debug_contract.cli_main(batchnorm.check_batchnorm, batchnorm.make_demo_case, "", ["--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "fail" and children == []


def test_inplace_says_whether_it_saw_in_place_ops_when_it_passes():
    import inplace

    class AddsInPlace(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):
            y = self.linear(x)
            y += 1  # in place on a tensor autograd tracks, not one backward needs
            return y

    def case(model):
        return {"model": model, "batch": (torch.randn(4, 3), torch.zeros(4)), "loss_fn": lambda out, y: out.sum()}

    seen, none = inplace.check_inplace(case(AddsInPlace())), inplace.check_inplace(case(torch.nn.Linear(3, 3)))
    assert (seen.status, seen.details["inplace_ops"], none.status, none.details["inplace_ops"]) == ("pass", 1, "pass", 0)
    assert "1 in-place ops" in seen.summary and "no in-place op" in none.summary
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "y += 1  # in place" in text)
    assert seen.details["inplace_lines"] == [f"test_decisions_branches.py:{line}"]  # the line, where one is known


class _SigmoidScaledInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = torch.sigmoid(self.linear(x))
        y.mul_(2)  # BUG: sigmoid's backward needs y as it was
        return y


def test_inplace_names_the_line_of_the_op_backward_refuses():
    import inplace
    result = inplace.check_inplace({"model": _SigmoidScaledInPlace(), "batch": (torch.randn(4, 3), torch.zeros(4)),
                                    "loss_fn": lambda out, y: out.sum()})
    culprit = result.details["culprit"]
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "y.mul_(2)  # BUG" in text)
    assert (result.status, culprit["op"], culprit["line"]) == ("fail", "mul_", f"test_decisions_branches.py:{line}")
    assert f"at {culprit['line']}" in result.summary


@pytest.mark.parametrize("shape", [(1,), (4,)])
def test_batchnorm_leaves_a_1d_input_to_torch_s_own_error(shape):
    """BatchNorm1d refuses a 1-D input for its shape: that error is the finding, not one value per channel."""
    import batchnorm
    case = {"model": torch.nn.Sequential(torch.nn.BatchNorm1d(shape[0])), "batch": (torch.randn(shape), torch.zeros(1)),
            "loss_fn": lambda out, y: out.sum()}
    with pytest.raises(ValueError, match="2D or 3D input"):
        batchnorm.check_batchnorm(case)


class _RefusesBeforeItsBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        raise ValueError("the user's own refusal")


def test_batchnorm_passes_on_a_value_error_raised_before_any_batchnorm_ran():
    import batchnorm
    case = {"model": _RefusesBeforeItsBatchNorm(), "batch": (torch.randn(4, 3), torch.zeros(4)),
            "loss_fn": lambda out, y: out.sum()}
    with pytest.raises(ValueError, match="the user's own refusal"):
        batchnorm.check_batchnorm(case)


class _PooledOverTime(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)

    def forward(self, ids):
        return self.embed(ids).mean(1)  # (batch, 4): no prediction per position


def test_causal_dependency_skips_a_model_without_a_prediction_per_position():
    ids = torch.randint(0, 8, (2, 5))
    case = {"model": _PooledOverTime(), "batch": (ids, ids), "loss_fn": lambda out, y: out.sum(), "task": {"kind": "causal_lm"}}
    assert causal_dependency.check_causal_dependency(case).status == "skip"


def test_case_from_hf_refuses_a_batch_without_labels_before_it_looks_at_the_model():
    from hf_case import case_from_hf
    with pytest.raises(ValueError, match="holds 'labels', or return_loss=True"):
        case_from_hf(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(ValueError, match="needs a transformers model"):  # labels given: now the model is looked at
        case_from_hf(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(2, 3, dtype=torch.long), "labels": torch.zeros(2)})


def _init_scale_of(model):
    import init_scale
    return init_scale.check_init_scale({"model": model, "batch": (torch.randn(4, 2), torch.zeros(4)),
                                        "loss_fn": lambda out, y: out.sum()})


def test_init_scale_judges_a_two_element_matrix_and_skips_a_model_of_embeddings_alone():
    wide = torch.nn.Linear(2, 1)
    with torch.no_grad():
        wide.weight.mul_(100)  # its (1, 2) weight far above 1/sqrt(2)
    assert _init_scale_of(wide).status == "fail"
    assert _init_scale_of(torch.nn.Embedding(10, 4)).status == "skip"


def test_init_scale_fails_a_matrix_of_one_repeated_value():
    same = torch.nn.Linear(4, 4)
    with torch.no_grad():
        same.weight.fill_(0.3)
    result = _init_scale_of(same)
    assert (result.status, result.details["constant"]) == ("fail", ["weight"])


def test_init_scale_measures_a_recurrent_weight_against_its_hidden_size():
    result = _init_scale_of(torch.nn.GRU(64, 4))  # PyTorch's init: uniform within 1/sqrt(hidden_size)
    assert result.status == "pass", result.summary
    assert {row["rule"] for row in result.details["layers"]} == {"1/sqrt(hidden_size=4)"}


class _NaNOutput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.linear(x) * float("nan")


def test_input_dependence_skips_an_output_that_is_not_finite():
    import input_dependence
    case = {"model": _NaNOutput(), "batch": (torch.randn(4, 3), torch.zeros(4)), "loss_fn": lambda out, y: out.sum()}
    result = input_dependence.check_input_dependence(case)
    assert result.status == "skip" and "nan_watch" in result.summary


def test_overfit_one_batch_reads_only_rows_of_two_or_more_values_as_probabilities():
    from overfit_one_batch import _looks_like_probabilities
    assert _looks_like_probabilities(torch.full((4, 2), 0.5))
    assert not _looks_like_probabilities(torch.ones(4, 1))  # one sigmoid output at 1.0 sums to 1 as well
    assert not _looks_like_probabilities(torch.tensor([0.5, 0.5]))


def test_a_keyboard_interrupt_is_the_users_error_in_the_supervised_child_or_off_the_main_thread(monkeypatch):
    """A Ctrl-C reaches the main thread of the process the terminal runs: there it stops the command; anywhere else a
    KeyboardInterrupt was raised by the user's code and is reported like any error."""
    import os
    import threading

    import ml_debug_contract

    monkeypatch.setattr(ml_debug_contract, "_child_pid", None)
    assert not ml_debug_contract.users_error(KeyboardInterrupt())
    assert ml_debug_contract.users_error(SystemExit(3)) and ml_debug_contract.users_error(ValueError())
    off_main = []
    thread = threading.Thread(target=lambda: off_main.append(ml_debug_contract.users_error(KeyboardInterrupt())))
    thread.start()
    thread.join()
    assert off_main == [True]
    monkeypatch.setattr(ml_debug_contract, "_child_pid", os.getpid())
    assert ml_debug_contract.users_error(KeyboardInterrupt())


def test_a_ctrl_c_while_a_users_file_loads_or_its_factory_runs_stops_the_command(tmp_path, monkeypatch):
    """On the main thread of the process the terminal runs, a KeyboardInterrupt is a Ctrl-C: it is not the user's error
    to report in one line, and it goes through."""
    import ml_debug_contract

    monkeypatch.setattr(ml_debug_contract, "_child_pid", None)
    path = tmp_path / "case.py"
    path.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        ml_debug_contract.user_function(str(path), "make_case", "case file")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ml_debug_contract.call_user_function(str(path), "make_case", interrupted)


def test_the_prediction_tensor_of_an_output_is_itself_its_logits_or_its_first_element():
    from ml_debug_contract import main_tensor

    logits = torch.ones(2, 3)
    assert main_tensor(logits) is logits and main_tensor({"loss": torch.tensor(1.0), "logits": logits}) is logits
    assert main_tensor((logits, torch.zeros(1))) is logits
    assert main_tensor({"hidden": logits}) is None and main_tensor(["text"]) is None and main_tensor(()) is None
