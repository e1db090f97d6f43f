"""The data and initialisation checks: demos, state preservation (also when a check raises), CLI."""
import json

import pytest
import torch

import data_sanity
import init_loss
import init_scale
import input_dependence
import labels
from conftest import ROOT
from ml_debug_contract import load_case
from state_snapshot import assert_unchanged, differences, drawing, snapshot

MODULES = {"data_sanity": data_sanity, "init_scale": init_scale, "labels": labels, "init_loss": init_loss,
           "input_dependence": input_dependence}
ZOO = ROOT / "tests" / "zoo"


def check_of(check_id):
    return getattr(MODULES[check_id], f"check_{check_id}")


def demo(check_id, broken):
    module = MODULES[check_id]
    return module.validate_case(module.make_demo_case(broken=broken), "demo")


def zoo_case(spec):
    return load_case(str(ZOO / spec))


@pytest.mark.parametrize("check_id", MODULES)
def test_healthy_demo_passes_and_broken_demo_fails(check_id):
    assert check_of(check_id)(demo(check_id, broken=False)).status == "pass"
    broken = check_of(check_id)(demo(check_id, broken=True))
    assert broken.status == "fail", broken
    assert broken.details.get("next"), "a fail must say what to try next"


def lived_in(case):
    """Give the model the state a user's model has mid-training: grads, an optimizer with state,
    mixed train/eval modes, a hook; and a loss_fn that draws random numbers. Returns the user's optimizer."""
    case["loss_fn"] = drawing(case["loss_fn"])
    model = case["model"]
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    init_loss.main_tensor(init_loss.forward(model, case["batch"][0])).float().mean().backward()  # any graph will do
    optimizer.step()
    list(model.modules())[-1].eval()  # mixed modes (the last leaf, so that BatchNorm stays in train mode)
    model.register_forward_hook(lambda module, args, output: None)
    return optimizer


STATE_CASES = ["demo-healthy", "demo-broken", "healthy.py:make_cnn_classifier", "healthy.py:make_causal_lm"]


def case_for(check_id, which):
    if which.startswith("demo"):
        return demo(check_id, broken=which == "demo-broken")
    return zoo_case(which)


@pytest.mark.parametrize("which", STATE_CASES)
@pytest.mark.parametrize("check_id", MODULES)
def test_state_unchanged_after_check(check_id, which):
    case = case_for(check_id, which)
    optimizer = lived_in(case)
    before = snapshot(case["model"], optimizer)
    check_of(check_id)(case)
    assert_unchanged(before, snapshot(case["model"], optimizer))


class Boom(RuntimeError):
    pass


def raise_on_call(model, n):
    """A forward pre-hook that raises on the model's n-th forward call (registered before the snapshot)."""
    calls = []

    def hook(module, args):
        calls.append(1)
        if len(calls) == n:
            raise Boom(f"forward call {n}")
    model.register_forward_pre_hook(hook)
    return calls


@pytest.mark.parametrize("which", ["demo-broken", "healthy.py:make_cnn_classifier"])
@pytest.mark.parametrize("check_id", ["labels", "init_loss", "input_dependence"])
def test_state_unchanged_when_check_raises_at_its_last_forward(check_id, which):
    counting = case_for(check_id, which)
    calls = raise_on_call(counting["model"], 0)
    check_of(check_id)(counting)
    assert calls, "the check makes forward calls"
    case = case_for(check_id, which)
    optimizer = lived_in(case)
    raise_on_call(case["model"], len(calls))
    before = snapshot(case["model"], optimizer)
    with pytest.raises(Boom):
        check_of(check_id)(case)
    assert_unchanged(before, snapshot(case["model"], optimizer))


@pytest.mark.parametrize("check_id, helper", [("data_sanity", "scale_findings"), ("init_scale", "reference")])
def test_state_unchanged_when_forward_free_check_raises(check_id, helper, monkeypatch):
    case = demo(check_id, broken=True)
    optimizer = lived_in(case)
    before = snapshot(case["model"], optimizer)

    def boom(*args, **kwargs):
        case["model"].eval()
        torch.randn(3)
        raise Boom(helper)
    monkeypatch.setattr(MODULES[check_id], helper, boom)
    with pytest.raises(Boom):
        check_of(check_id)(case)
    assert_unchanged(before, snapshot(case["model"], optimizer))


def test_preserved_restores_everything_and_the_snapshot_sees_each_change():
    case = demo("init_loss", broken=False)
    model = case["model"]
    optimizer = lived_in(case)
    before = snapshot(model, optimizer)
    with pytest.raises(Boom):
        with init_loss.preserved(model):
            model.eval()
            model.register_forward_hook(lambda *args: None)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
            for p in model.parameters():
                p.grad = None
                p.requires_grad_(False)
            torch.randn(3)
            raise Boom("mid-way")
    assert_unchanged(before, snapshot(model, optimizer))
    # and the snapshot is not blind: the same changes outside the guard are all reported
    model.eval()
    model.register_forward_hook(lambda *args: None)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    torch.randn(3)
    optimizer.step()
    changed = differences(before, snapshot(model, optimizer))
    for expected in ("param_values", "modes", "hooks", "torch_rng", "optimizer"):
        assert any(c.startswith(expected) for c in changed), (expected, changed)


@pytest.mark.parametrize("check_id", MODULES)
def test_cli_in_process(check_id, capsys):
    module = MODULES[check_id]
    check = check_of(check_id)
    with pytest.raises(SystemExit) as exc:
        module.cli_main(check, module.make_demo_case, module.__doc__, ["--help"])
    assert exc.value.code == 0
    assert "Symptom" in capsys.readouterr().out
    assert module.cli_main(check, module.make_demo_case, module.__doc__, []) == 1
    assert capsys.readouterr().out.startswith(f"[FAIL] {check_id}: ")
    assert module.cli_main(check, module.make_demo_case, module.__doc__, ["--healthy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pass"


# --- details that matter beyond pass/fail ---------------------------------------------------------

def test_init_loss_low_side_and_nan():
    low = init_loss.check_init_loss(zoo_case("broken_data.py:make_unshifted_lm"))
    assert low.status == "warn" and "may already know the targets" in low.summary  # target_leak shows it: a fail there
    masked = init_loss.check_init_loss(zoo_case("broken_data.py:make_all_labels_masked"))
    assert masked.status == "fail" and "ignore_index" in masked.summary


def test_init_loss_fails_outputs_too_large_only_when_the_steps_go_into_undoing_them():
    broken = init_loss.check_init_loss(demo("init_loss", broken=True))  # logits x20: 20 Adam steps end at 4.47
    assert broken.status == "fail" and broken.details["loss_after_trial"] >= broken.details["calmed_loss"], broken
    torch.manual_seed(0)  # a regression net whose outputs are 6x the targets' RMS, and that soon learns past it: a pass
    x = torch.randn(64, 8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    torch.nn.init.normal_(model[2].weight, std=1.5)
    case = {"model": model, "batch": (x, 0.5 * x[:, :1]), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.SGD(params, lr=0.1), "task": {"kind": "regression"}}
    before = {name: value.clone() for name, value in model.state_dict().items()}
    large = init_loss.check_init_loss(init_loss.validate_case(case))
    assert large.details["output_rms"] > init_loss.OUTPUT_SCALE * large.details["target_rms"], large
    assert large.status == "pass" and large.details["loss_after_trial"] < large.details["calmed_loss"], large
    scaled = init_loss.check_init_loss(zoo_case("broken_data.py:make_scaled_logits"))  # a classifier: still a warn
    assert scaled.status == "warn" and scaled.details["loss_after_trial"] < scaled.details["calmed_loss"], scaled
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())  # the trial trained a copy's way back




@pytest.mark.parametrize("change", ["lbfgs", "frozen", "scale-free loss"])
def test_init_loss_too_large_with_no_trial_possible_is_a_warn(change):
    """An optimizer that needs a closure, nothing trainable, or a loss that no output scale changes (it normalises the
    outputs itself: every scale scores exactly the same): no steps can show harm, so no fail."""
    case = zoo_case("broken_data.py:make_scaled_logits")
    if change == "lbfgs":
        case["optimizer"] = lambda params: torch.optim.LBFGS(params)
    elif change == "frozen":
        case["model"].requires_grad_(False)
    else:
        case["loss_fn"] = lambda out, y: torch.nn.functional.cross_entropy(torch.nn.functional.normalize(out, dim=-1) * 20, y)
    result = init_loss.check_init_loss(init_loss.validate_case(case))
    assert result.status == "warn" and "loss_after_trial" not in result.details, result

def test_init_loss_calms_with_the_largest_scale_whose_loss_is_within_the_bound():
    """A loss exactly at the bound is within it: scale 1/4 of outputs of 1 scores 0.25 <= 0.25 (1/2 scores 0.5)."""
    case = {"batch": (None, torch.zeros(4)), "loss_fn": lambda out, _: out.abs().max()}
    assert init_loss._calming_factor(case, torch.ones(4, 3), 0.25) == (0.25, 0.25)

def test_init_loss_sum_reduction_is_a_warn_not_a_scaled_logits_fail():
    case = demo("init_loss", broken=False)
    case["loss_fn"] = lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="sum")
    result = init_loss.check_init_loss(case)
    assert result.status == "warn" and "all-zero output" in result.summary, result


def test_init_loss_judges_another_regression_loss_against_its_own_zero_output_score():
    torch.manual_seed(0)
    x = torch.randn(64, 5)
    case = {"model": torch.nn.Linear(5, 1), "batch": (x, torch.randn(64, 1)), "loss_fn": torch.nn.functional.l1_loss,
            "task": {"kind": "regression"}}
    result = init_loss.check_init_loss(init_loss.validate_case(case))
    assert result.status == "pass" and "all-zero output" in result.summary, result


def test_init_loss_infers_binary_logits_and_regression_shapes():
    torch.manual_seed(0)
    x = torch.randn(64, 5)
    case = {"model": torch.nn.Linear(5, 1), "batch": (x, (x[:, :1] > 0).float()), "task": {},
            "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits}
    result = init_loss.check_init_loss(init_loss.validate_case(case))
    assert result.details["chance_formula"] == "ln 2 per element" and result.status == "pass", result
    case = {"model": torch.nn.Linear(5, 1), "batch": (x, x[:, 0]), "loss_fn": torch.nn.functional.mse_loss,
            "task": {"kind": "regression"}}
    with pytest.warns(UserWarning):
        result = init_loss.check_init_loss(init_loss.validate_case(case))
    assert result.status == "fail" and "differ in shape" in result.summary


def test_init_loss_skips_other_and_pretrained():
    case = demo("init_loss", broken=True)
    assert init_loss.check_init_loss({**case, "task": {"kind": "other"}}).status == "skip"
    assert init_loss.check_init_loss({**case, "task": {"pretrained": True}}).status == "skip"


def test_labels_lists_confident_wrong_predictions():
    result = labels.check_labels(demo("labels", broken=False))
    wrong = result.details["most_confident_wrong"]
    assert 0 < len(wrong) <= 5
    assert [w["confidence"] for w in wrong] == sorted((w["confidence"] for w in wrong), reverse=True)
    assert all(w["label"] != w["predicted"] for w in wrong)


def test_labels_one_class_batch_fails_and_imbalance_warns():
    case = demo("labels", broken=False)
    x, y = case["batch"]
    assert labels.check_labels({**case, "batch": (x, torch.zeros_like(y))}).status == "fail"
    skewed = torch.zeros_like(y)
    skewed[:4] = 1
    assert labels.check_labels({**case, "batch": (x, skewed)}).status == "warn"


def test_data_sanity_nan_rows_and_identical_samples():
    case = demo("data_sanity", broken=False)
    x, y = case["batch"]
    with_nan = x.clone()
    with_nan[3, 0, 0, 0] = float("nan")
    assert "NaN" in data_sanity.check_data_sanity({**case, "batch": (with_nan, y)}).summary
    assert "identical" in data_sanity.check_data_sanity({**case, "batch": (x[:1].expand_as(x), y)}).summary
    assert "rows" in data_sanity.check_data_sanity({**case, "batch": (x, y[:-1])}).summary


def test_init_scale_judges_rnn_against_hidden_size_and_skips_embeddings():
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"emb": torch.nn.Embedding(50, 8), "rnn": torch.nn.LSTM(1000, 16)})
    case = {"model": model, "batch": (torch.zeros(1, 1000), torch.zeros(1)), "loss_fn": torch.nn.functional.mse_loss}
    result = init_scale.check_init_scale(case)  # init_scale reads only the weights; the batch is there for the contract
    assert result.status == "pass", result  # PyTorch's LSTM init is uniform(+-1/sqrt(hidden)), not fan-in based
    assert [row["name"] for row in result.details["embeddings"]] == ["emb.weight"]


def test_input_dependence_names_an_ignored_input():
    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x, unused):
            return self.fc(x)
    torch.manual_seed(0)
    case = {"model": TwoInputs(), "batch": ((torch.randn(8, 4), torch.randn(8, 3)), torch.zeros(8, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {}}
    result = input_dependence.check_input_dependence(input_dependence.validate_case(case))
    assert result.status == "fail" and "changing input 1 alone" in result.summary, result


def test_input_dependence_is_not_fooled_by_a_large_constant_offset():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.bias.fill_(2e5)  # the input's part of the output is ~1e-6 of it, but not zero
    case = {"model": model, "batch": (torch.randn(16, 4), torch.randn(16, 1)), "loss_fn": torch.nn.functional.mse_loss}
    result = input_dependence.check_input_dependence(input_dependence.validate_case(case))
    assert result.status == "warn" and "barely matters" in result.summary, result


def test_init_loss_names_a_flipped_sign():
    case = demo("init_loss", broken=False)
    case["loss_fn"] = lambda out, y: -torch.nn.functional.cross_entropy(out, y)
    result = init_loss.check_init_loss(case)
    assert result.status == "fail" and "sign" in result.summary, result


def test_data_sanity_warns_on_a_doubled_bos_and_not_on_its_single_bos_twin():
    doubled = data_sanity.check_data_sanity(zoo_case("broken_data.py:make_doubled_bos"))
    assert doubled.status == "warn" and "starts with id 1 twice" in doubled.summary
    assert data_sanity.check_data_sanity(zoo_case("broken_data.py:make_single_bos")).status == "pass"


def test_data_sanity_reads_a_doubled_bos_after_left_padding_and_ignores_constant_token_type_ids():
    case = zoo_case("broken_data.py:make_doubled_bos")
    inputs, labels = case["batch"]
    ids, mask = inputs["input_ids"].clone(), inputs["attention_mask"].clone()
    ids[0] = torch.cat([torch.zeros(3, dtype=ids.dtype), ids[0, :-3]])  # row 0 left-padded with the pad id 0
    mask[0] = torch.cat([torch.zeros(3, dtype=mask.dtype), mask[0, :-3]])
    left = data_sanity.check_data_sanity({**case, "batch": ({"input_ids": ids, "attention_mask": mask}, labels)})
    assert left.status == "warn" and "twice" in left.summary
    single = zoo_case("broken_data.py:make_single_bos")
    inputs, labels = single["batch"]
    with_types = {**inputs, "token_type_ids": torch.zeros_like(inputs["input_ids"])}  # all 0 by design: not a BOS
    assert data_sanity.check_data_sanity({**single, "batch": (with_types, labels)}).status == "pass"


def test_data_sanity_doubled_bos_is_not_hidden_by_a_row_of_padding_only():
    case = zoo_case("broken_data.py:make_doubled_bos")
    inputs, labels = case["batch"]
    ids, mask = inputs["input_ids"].clone(), inputs["attention_mask"].clone()
    ids[0], mask[0] = 0, 0  # a row that is all padding (pad id 0): its first two ids are no BOS
    result = data_sanity.check_data_sanity({**case, "batch": ({"input_ids": ids, "attention_mask": mask}, labels)})
    assert result.status == "warn" and "starts with id 1 twice" in result.summary


@pytest.mark.parametrize("lr, status", [(1e-3, "warn"), (0.3, "pass")])
def test_init_loss_targets_far_from_zero_mean_warn_only_while_the_bias_is_still_being_learned(lr, status):
    """Targets around 5: at Adam 1e-3, 20 steps leave the loss above where outputs shifted by the mean start (the hockey
    stick, a warn); at 0.3 the bias is learned within them (Lightning's autoencoder, pixels of mean 0.5: a pass)."""
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    case = {"model": torch.nn.Linear(4, 2), "batch": (x, 5 + 0.3 * x[:, :2]), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.Adam(params, lr=lr), "task": {"kind": "regression"}}
    result = init_loss.check_init_loss(init_loss.validate_case(case))
    assert result.status == status and (result.details["loss_after_trial"] < result.details["centred_loss"]) == (
        status == "pass"), result.summary
