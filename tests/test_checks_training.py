"""The training-dynamics checks (issue 3, part B): overfit_one_batch, gradient_flow, update_ratio,
nan_watch, batch_independence, causal_dependency.

Per check: the embedded demo's healthy twin passes and its broken twin fails; every healthy zoo case
gets no `fail`; each broken twin in tests/zoo/broken_training.py gets its expected status from the
right check; the model's state is unchanged after the check, also when the check raises mid-way;
`--help` exits 0 and the CLI exits 1 on the broken demo.
"""
import collections
import importlib
import json
import runpy
import sys

import pytest
import torch

from conftest import DIAGNOSTICS, ROOT
from state_snapshot import assert_unchanged, drawing, snapshot

sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import broken_training  # noqa: E402  (needs tests/zoo on sys.path)
import capture  # noqa: E402
import healthy  # noqa: E402
import ml_debug_contract  # noqa: E402
import overfit_one_batch  # noqa: E402
import update_ratio  # noqa: E402

CHECKS = ["overfit_one_batch", "gradient_flow", "update_ratio", "nan_watch", "batch_independence", "causal_dependency"]
OVERFIT_FAILURE = {"make_lr_zero": "flat", "make_optimizer_on_other_model": "flat", "make_flipped_loss_sign": "diverging",
                   "make_double_softmax": "plateau"}


def run(check_id, case, **kwargs):
    module = importlib.import_module(check_id)
    return getattr(module, f"check_{check_id}")(module.validate_case(case, check_id), **kwargs)


@pytest.mark.parametrize("check_id", CHECKS)
def test_demo_twins(check_id):
    module = importlib.import_module(check_id)
    assert run(check_id, module.make_demo_case(broken=False)).status == "pass"
    assert run(check_id, module.make_demo_case(broken=True)).status == "fail"


@pytest.mark.parametrize("factory", healthy.HEALTHY)
@pytest.mark.parametrize("check_id", CHECKS)
def test_healthy_zoo_gets_no_fail(check_id, factory):
    result = run(check_id, getattr(healthy, factory)())
    assert result.status != "fail", result.summary


@pytest.mark.parametrize("factory", sorted(broken_training.EXPECTED))
def test_broken_twin_flagged_by_its_check(factory):
    check_id, status = broken_training.EXPECTED[factory]
    result = run(check_id, getattr(broken_training, factory)())
    assert result.status == status, result.summary
    if factory in OVERFIT_FAILURE:
        assert result.details["failure"] == OVERFIT_FAILURE[factory]


def test_overfit_warns_when_some_parameters_are_not_optimised():
    case = healthy.make_mlp_classifier()
    head = case["model"].net[-1]
    case["optimizer"] = lambda params: torch.optim.Adam(head.parameters(), lr=3e-3)
    result = run("overfit_one_batch", case)
    assert result.status == "warn"
    assert result.details["not_in_optimizer"] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]


def test_gradient_flow_frozen_on_purpose_is_info():
    case = healthy.make_mlp_classifier()
    case["model"].net[0].requires_grad_(False)
    result = run("gradient_flow", case)
    assert result.status == "pass" and result.details["frozen"] == ["net.0.weight", "net.0.bias"]


def test_gradient_flow_zero_init_head_is_info():
    case = healthy.make_mlp_classifier()
    torch.nn.init.zeros_(case["model"].net[-1].weight)  # zero-init output layer: upstream grads are 0 until one step
    result = run("gradient_flow", case)
    assert result.status == "pass", result.summary
    assert "net.2.weight" in result.details["zero_at_init"]


def test_batch_independence_notes_batchnorm():
    result = run("batch_independence", healthy.make_cnn_classifier())
    assert result.status == "pass" and result.details["batchnorm"] == ["features.1", "features.5"]


def test_nan_watch_names_origin_and_frames():
    forward = run("nan_watch", broken_training.make_log_of_negative())
    assert forward.details["origin"] == {"module": "1", "class": "LogLink", "phase": "forward"}
    assert [f["module"] for f in forward.details["frames"]][-2:] == ["0", "1"]  # the MLP, then the log link
    backward = run("nan_watch", broken_training.make_sqrt_at_zero())
    assert backward.details["origin"] == {"module": "distance", "class": "Distance", "phase": "backward"}


def _dirty(case):
    """Give the model state a careless check would lose: grads, mixed train/eval modes, a hook; and a loss_fn that
    draws random numbers."""
    case["loss_fn"] = drawing(case["loss_fn"])
    model = case["model"]
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    model.eval()
    next(iter(model.children())).train()
    model.register_forward_hook(lambda module, args, output: None)
    return model


@pytest.mark.parametrize("check_id", CHECKS)
def test_state_unchanged(check_id):
    case = healthy.make_causal_lm() if check_id == "causal_dependency" else healthy.make_cnn_classifier()
    model = _dirty(case)
    before = snapshot(model)
    run(check_id, case)
    assert_unchanged(before, snapshot(model))


class RaisesOnCall(torch.nn.Module):
    """Delegates to `inner` and raises on the k-th forward call: a check interrupted mid-way."""

    def __init__(self, inner, k):
        super().__init__()
        self.inner, self.k, self.calls = inner, k, 0

    def forward(self, *args):
        self.calls += 1
        if self.calls == self.k:
            raise RuntimeError("boom")
        return self.inner(*args)


# the forward call to fail on: after the check has changed something (a training step, modes, hooks, grads)
RAISE_AT = {"overfit_one_batch": 4, "gradient_flow": 1, "update_ratio": 1, "nan_watch": 1, "batch_independence": 3,
            "causal_dependency": 4}


@pytest.mark.parametrize("check_id", CHECKS)
def test_state_unchanged_when_check_raises(check_id):
    case = healthy.make_causal_lm() if check_id == "causal_dependency" else healthy.make_cnn_classifier()
    case["model"] = RaisesOnCall(case["model"], RAISE_AT[check_id])
    model = _dirty(case)
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        run(check_id, case)
    assert_unchanged(before, snapshot(model))


@pytest.mark.parametrize("check_id", CHECKS)
def test_help(check_id, capsys, monkeypatch):
    """The file run as __main__ with --help, in-process (tests/test_diagnostic_conventions.py runs it in a fresh interpreter)."""
    monkeypatch.setattr(sys, "argv", [f"{check_id}.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(DIAGNOSTICS / f"{check_id}.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "Symptom" in out and f"PLAYBOOK.md#{check_id.replace('_', '-')}" in out


@pytest.mark.parametrize("check_id", CHECKS)
def test_cli_on_broken_demo(check_id, capsys):
    """The CLI in-process: exit 1 and the fail as JSON."""
    module = importlib.import_module(check_id)
    assert module.cli_main(getattr(module, f"check_{check_id}"), module.make_demo_case, module.__doc__, ["--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "fail"


def _in_dtype(dtype, lr):
    """The healthy MLP with its weights and inputs in `dtype`, Adam at `lr`: a 16-bit twin or its fp32 original."""
    case = healthy.make_mlp_classifier()
    case["model"] = case["model"].to(dtype)
    x, y = case["batch"]
    case["batch"] = (x.to(dtype), y)
    case["loss_fn"] = lambda logits, y: torch.nn.functional.cross_entropy(logits.float(), y)
    case["optimizer"] = lambda params: torch.optim.Adam(params, lr=lr)
    return case


def test_update_ratio_names_a_step_lost_to_bf16_rounding_and_passes_its_fp32_twin():
    broken = run("update_ratio", broken_training.make_bf16_weights_at_a_fine_tuning_lr())
    assert broken.status == "fail" and "lost most of the step to rounding" in broken.summary
    assert broken.details["lost_to_rounding"]["net.0.weight"] > 0.9  # measured 0.962: nearly every element kept its value
    assert "fp32" in broken.details["next"] and broken.details["not_updated"] == []
    healthy_twin = run("update_ratio", _in_dtype(torch.float32, 2e-5))
    assert healthy_twin.status == "pass" and healthy_twin.details["lost_to_rounding"] == {}


def test_update_ratio_warns_when_part_of_a_bf16_step_rounds_away():
    result = run("update_ratio", _in_dtype(torch.bfloat16, 3e-4))  # the first layer's +-0.22 init: a bf16 unit of ~1e-3
    assert result.status == "warn" and "lost part of the step to rounding" in result.summary
    assert update_ratio.LOST_WARN <= max(result.details["lost_to_rounding"].values()) < update_ratio.LOST_FAIL



def test_update_ratio_tells_an_optimizer_made_nan_from_a_gradient_made_one():
    result = run("update_ratio", _in_dtype(torch.float16, 2e-5))  # Adam's eps 1e-8 is 0 in float16
    assert result.status == "fail" and "from finite gradients" in result.summary and "eps" in result.summary
    assert result.details["next"] != "run nan_watch"


def test_update_ratio_in_bf16_with_lr_0_is_not_called_rounding():
    result = run("update_ratio", _in_dtype(torch.bfloat16, 0.0))
    assert result.status == "fail" and result.details["lost_to_rounding"] == {}
    assert result.details["not_updated"] == ["net.0.weight", "net.2.weight", "net.4.weight"]


def test_update_ratio_tells_an_overshooting_lr_to_come_down_by_the_multiple_that_worked():
    result = run("update_ratio", broken_training.make_lr_too_high())
    assert result.status == "fail" and result.details["next"].startswith("lower the lr to about 0.1x")


Pair = collections.namedtuple("Pair", "y weight")


def test_a_namedtuple_in_the_batch_keeps_its_type_through_the_checks():
    """A batch's tuples are rebuilt by every walker (moving to a device, taking rows, copying): a namedtuple cannot be
    built from one iterable, and a case with its targets in one crashed validate_case before map_tensors."""
    model = torch.nn.Linear(3, 2)
    targets = Pair(torch.randn(8, 2), torch.rand(8, 2))
    case = {"model": model, "batch": (torch.randn(8, 3), targets),
            "loss_fn": lambda out, t: (t.weight * (out - t.y) ** 2).mean()}
    case = update_ratio.validate_case(case, "update_ratio")
    assert type(case["batch"][1]) is Pair
    assert update_ratio.check_update_ratio(case).status == "pass"
    rows = ml_debug_contract.batch_rows(targets, 8, 2, 3)
    assert type(rows) is Pair and rows.y.shape == (3, 2)
    swapped = ml_debug_contract.replace_tensor(targets, targets.weight, None)
    assert type(swapped) is Pair and swapped.weight is None and swapped.y is targets.y
    assert type(capture._copy(targets, {})) is Pair
    assert type(overfit_one_batch._rows_to(targets, 8, torch.tensor([1, 0]), skip=[])) is Pair


def test_rows_to_cuts_only_the_tensors_with_the_batchs_rows():
    rows, other, scalar = torch.arange(8.0), torch.arange(5.0), torch.tensor(3.0)
    cut = overfit_one_batch._rows_to((rows, other, scalar), 8, torch.tensor([6, 1]), skip=[])
    assert cut[0].tolist() == [6.0, 1.0] and cut[1] is other and cut[2] is scalar  # 5 rows, and none: not the batch's
