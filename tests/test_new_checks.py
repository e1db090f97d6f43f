"""The checks for bugs the doctor used to miss (issue 9, issue 15): label_alignment, registration, batchnorm, inplace.

Each on its embedded demo (healthy passes, broken fails), on broken twins of real architectures in tests/corpus
(the verdict and the detail that names the bug), on their healthy twins and the zoo (no fail), leaving the model as
found (also when the check fails half-way or raises). Under DDP: tests/test_distributed_checks.py.
"""
import sys

import pytest
import torch

import batchnorm
import doctor
import inplace
import label_alignment
import registration
from conftest import ROOT
from ml_debug_contract import load_case
from state_snapshot import assert_unchanged, snapshot

MODULES = {"label_alignment": label_alignment, "registration": registration, "batchnorm": batchnorm, "inplace": inplace}
CORPUS = ROOT / "tests" / "corpus"
ZOO = ROOT / "tests" / "zoo"
CORPUS_FILES = {"label_alignment": "broken_labels.py", "registration": "broken_registration.py",
                "batchnorm": "broken_batchnorm.py", "inplace": "broken_inplace.py"}


def check(check_id, case):
    return getattr(MODULES[check_id], f"check_{check_id}")(case)


def corpus_case(check_id, factory):
    return load_case(f"{CORPUS / CORPUS_FILES[check_id]}:{factory}")


def corpus_module(check_id):
    sys.path.insert(0, str(CORPUS))
    return __import__(CORPUS_FILES[check_id].removesuffix(".py"))


def bug_line(filename, text):
    """`file.py:N` of the `# BUG:` line holding text."""
    lines = (CORPUS / filename).read_text().splitlines()
    [n] = [i for i, line in enumerate(lines, 1) if "# BUG:" in line and text in line]
    return f"{filename}:{n}"


@pytest.mark.parametrize("check_id", MODULES)
def test_demo_healthy_passes_and_broken_fails(check_id):
    module = MODULES[check_id]
    assert check(check_id, module.validate_case(module.make_demo_case(broken=False))).status == "pass"
    broken = check(check_id, module.validate_case(module.make_demo_case(broken=True)))
    assert broken.status == "fail", broken
    assert broken.details["next"]


def test_doctor_runs_the_new_checks():
    assert set(MODULES) <= {check_id for check_id, _ in doctor.CHECKS}


CORPUS_BUGS = [  # (check, broken twin, what the details must say)
    ("label_alignment", "make_gpt2_shifted_twice", {"input_offset": 2, "loss_inside_model": True}),
    ("label_alignment", "make_gpt2_not_shifted", {"input_offset": 0, "loss_inside_model": False}),
    ("label_alignment", "make_lstm_time_major_not_shifted", {"input_offset": 0}),  # offset 0 reads the same either way
    ("label_alignment", "make_gpt2_pad_in_labels", {"input_offset": 1, "padding_scored": 8, "padding_tokens": [0]}),
    ("label_alignment", "make_bert_pad_in_labels", {"padding_scored": 8}),
    ("label_alignment", "make_bert_ignores_frequent_tag", {"ignored_class": 0, "ignored_real": 43}),
    ("registration", "make_gpt_blocks_in_list", {"containers": ["h"]}),
    ("registration", "make_two_towers_plain_temperature", {"containers": ["logit_scale"], "untrained_parameters": 1}),
    ("batchnorm", "make_resnet_batch_of_one", {}),
    ("batchnorm", "make_projection_head_batch_of_one", {}),
    ("inplace", "make_gpt_inplace_residual", {"saved_by_node": "NativeLayerNormBackward0",
                                              "saved_by_line": bug_line("broken_inplace.py", "ln_1 saved x")}),
    ("inplace", "make_sequential_inplace_relu", {"saved_by_node": "SigmoidBackward0"}),
]


@pytest.mark.parametrize("check_id, factory, expected", CORPUS_BUGS, ids=[f for _, f, _ in CORPUS_BUGS])
def test_broken_twin_of_a_real_architecture_fails(check_id, factory, expected):
    result = check(check_id, corpus_case(check_id, factory))
    assert result.status == "fail", result
    assert {key: result.details.get(key) for key in expected} == expected


def test_a_time_major_lm_is_read_along_dim_0():
    result = check("label_alignment", corpus_case("label_alignment", "make_lstm_time_major"))
    assert result.status == "pass" and result.details["time_dim"] == 0 and result.details["input_offset"] == 1


def test_the_summary_names_the_bug():
    shifted = check("label_alignment", corpus_case("label_alignment", "make_gpt2_shifted_twice"))
    assert "shifted twice" in shifted.summary and "by the model" in shifted.summary
    unshifted = check("label_alignment", corpus_case("label_alignment", "make_gpt2_not_shifted"))
    assert "not shifted" in unshifted.summary
    blocks = check("registration", corpus_case("registration", "make_gpt_blocks_in_list"))
    assert "h (a plain list of 2 Block)" in blocks.summary
    assert blocks.details["unregistered_used"][0].startswith("h[0].")
    resnet = check("batchnorm", corpus_case("batchnorm", "make_resnet_batch_of_one"))
    assert "9 of 9" in resnet.summary and "layer bn1" in resnet.summary
    head = check("batchnorm", corpus_case("batchnorm", "make_projection_head_batch_of_one"))
    assert head.summary.startswith("head.1 gets input (1, 32)")


def test_inplace_names_the_users_line_or_the_torch_module():
    residual = check("inplace", corpus_case("inplace", "make_gpt_inplace_residual"))
    line = bug_line("broken_inplace.py", "ln_1 saved x")
    assert residual.details["culprit"]["line"] == line and residual.details["culprit"]["module"] == "h.1"
    assert f"at {line}" in residual.summary
    relu = check("inplace", corpus_case("inplace", "make_sequential_inplace_relu"))
    assert relu.details["culprit"] == {"op": "relu (inplace=True)", "shape": [16, 32], "version_before": 0,
                                       "line": None, "module": "2"}
    assert not torch.is_anomaly_enabled()


class LeafClamp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        self.w.clamp_(-1, 1)  # refused at once: a leaf that requires grad, changed in place
        return x @ self.w


def test_inplace_refused_in_the_forward_pass_names_the_line():
    case = {"model": LeafClamp(), "batch": (torch.randn(5, 4), torch.randint(0, 3, (5,))),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = check("inplace", case)
    assert result.status == "fail" and "forward pass" in result.summary
    assert result.details["culprit"]["op"] == "clamp_"
    assert result.details["culprit"]["line"].startswith("test_new_checks.py:")


def classifier_with_ignore_index(ignore_index):
    """The zoo's MLP classifier with a criterion that ignores `ignore_index`."""
    case = load_case(f"{ZOO / 'healthy.py'}:make_mlp_classifier")
    case["loss_fn"] = torch.nn.CrossEntropyLoss(ignore_index=ignore_index)
    return case


def test_ignore_index_on_a_real_class_of_one_label_per_sample():
    frequent = int(torch.bincount(classifier_with_ignore_index(-100)["batch"][1]).argmax())
    result = check("label_alignment", classifier_with_ignore_index(frequent))
    assert result.status == "fail" and result.details["ignored_class"] == frequent
    assert result.summary.startswith(f"ignore_index={frequent} drops a real class")
    assert check("label_alignment", classifier_with_ignore_index(-100)).status == "pass"


def test_ignore_index_on_trailing_padding_passes():
    """A pad id (0) ignored by the loss, at the ends of the rows only: what ignore_index is for."""
    case = load_case(f"{ZOO / 'healthy.py'}:make_causal_lm")
    inputs, targets = case["batch"]  # token ids 0..31, targets -100 at the end of two rows
    inputs, targets = inputs % 31 + 1, torch.where(targets == -100, 0, targets % 31 + 1)  # real ids 1..31, padding 0
    case["batch"] = (inputs, targets)
    case["loss_fn"] = lambda logits, y: torch.nn.functional.cross_entropy(logits.reshape(-1, 32), y.reshape(-1), ignore_index=0)
    result = check("label_alignment", case)
    assert result.status == "pass", result.summary
    targets[3, 5] = 0  # the same id once inside a row, where padding never is, and once more below: a real token
    targets[4, 7] = 0
    result = check("label_alignment", case)
    assert result.status == "fail" and result.details["ignored_real"] == 2, result.summary


HEALTHY_TWINS = [(check_id, factory) for check_id in MODULES for factory in corpus_module(check_id).HEALTHY]


@pytest.mark.parametrize("check_id, factory", HEALTHY_TWINS, ids=[f"{c}-{f}" for c, f in HEALTHY_TWINS])
def test_healthy_twins_get_no_fail_from_any_new_check(check_id, factory):
    case = corpus_case(check_id, factory)
    results = {c: check(c, case).status for c in MODULES}
    assert "fail" not in results.values() and "warn" not in results.values(), results
    assert results[check_id] == "pass", results


STATE_CASES = [("label_alignment", "make_gpt2_shifted_twice"), ("label_alignment", "make_bert_tagger"),
               ("registration", "make_gpt_blocks_in_list"), ("batchnorm", "make_resnet_batch_of_one"),
               ("batchnorm", "make_projection_head_batch_of_one"), ("inplace", "make_gpt_inplace_residual")]


@pytest.mark.parametrize("check_id, factory", STATE_CASES, ids=[f for _, f in STATE_CASES])
def test_state_unchanged_after_the_check(check_id, factory):
    case = corpus_case(check_id, factory)
    model = case["model"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    optimizer.step()
    list(model.modules())[-1].eval()
    model.register_forward_hook(lambda module, args, output: None)
    before = snapshot(model, optimizer)
    check(check_id, case)
    assert_unchanged(before, snapshot(model, optimizer))
    assert not torch.is_anomaly_enabled()


def test_registration_restores_the_modules_it_finds_outside_the_tree():
    """A BatchNorm in a plain list is not in model.modules(): its running statistics must be restored too."""
    class Loose(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = [torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6)]  # BUG: a plain list
            self.head = torch.nn.Linear(6, 2)

        def forward(self, x):
            return self.head(self.parts[1](self.parts[0](x)))

    model = Loose()
    case = {"model": model, "batch": (torch.randn(8, 6), torch.randint(0, 2, (8,))), "loss_fn": torch.nn.functional.cross_entropy}
    loose = torch.nn.ModuleList(model.parts)
    before = snapshot(loose)
    result = check("registration", case)
    assert result.status == "fail" and result.details["containers"] == ["parts"]
    assert_unchanged(before, snapshot(loose))


class Boom(RuntimeError):
    pass


@pytest.mark.hostile
@pytest.mark.parametrize("check_id", MODULES)
def test_state_unchanged_when_the_model_raises(check_id):
    module = MODULES[check_id]
    case = module.validate_case(module.make_demo_case(broken=False))
    model = case["model"]

    def boom(module_, args):
        raise Boom("the user's forward failed")

    model.register_forward_pre_hook(boom)
    before = snapshot(model)
    if check_id == "registration":  # it runs no forward pass when nothing is held outside the tree
        assert check(check_id, case).status == "pass"
    else:
        with pytest.raises(Boom):
            check(check_id, case)
    assert_unchanged(before, snapshot(model))
    assert not torch.is_anomaly_enabled()


@pytest.mark.hostile
@pytest.mark.parametrize("check_id", MODULES)
def test_missing_case_is_one_line_exit_2(check_id, tmp_path, capsys):
    module = MODULES[check_id]
    code = module.cli_main(getattr(module, f"check_{check_id}"), module.make_demo_case, module.__doc__,
                           ["--case", str(tmp_path / "no_such_case.py")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: case file not found"), err


def test_unshifted_labels_without_a_task_kind_are_a_warn():
    """A denoising model scores each position against its own input token by design: only causal_lm makes it a fail."""
    case = corpus_case("label_alignment", "make_gpt2_not_shifted")
    del case["task"]
    result = check("label_alignment", case)
    assert result.status == "warn" and result.details["input_offset"] == 0
    assert "causal_lm" in result.details["next"]
