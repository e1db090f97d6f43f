"""refs/snippets/*.py: the notebook-sized checks that refs/snippets.md includes; each passes a healthy model and
flags a broken twin from the test zoo, and leaves the model as it found it."""
import ast
import importlib.util
import sys

import pytest
import torch

from conftest import ROOT
from state_snapshot import assert_unchanged, snapshot

sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import broken_data  # noqa: E402  (needs tests/zoo on sys.path)
import broken_training  # noqa: E402
import healthy  # noqa: E402

SNIPPETS = ROOT / "refs" / "snippets"
NAMES = ["init_loss", "overfit_one_batch", "gradient_flow", "nan_hooks", "batch_independence", "causal_dependency",
         "input_dependence", "update_ratio"]
ADAM = lambda params: torch.optim.Adam(params, lr=3e-4)  # noqa: E731  (the cases' default optimizer)


def snippet(name):
    """The snippet's function, from its file executed as a notebook cell would run it."""
    spec = importlib.util.spec_from_file_location(f"snippet_{name}", SNIPPETS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def call(name, case):
    """Run a snippet on a case, with the arguments that snippet takes."""
    model, (x, y), loss_fn = case["model"], case["batch"], case["loss_fn"]
    if name == "init_loss":
        return snippet(name)(model, x, y, loss_fn, num_classes=case["task"]["classes"])
    if name == "overfit_one_batch":
        return snippet(name)(model, x, y, loss_fn, steps=150, lr=case.get("lr", 1e-3))
    if name in ("gradient_flow", "nan_hooks"):
        return snippet(name)(model, x, y, loss_fn)
    if name in ("batch_independence", "input_dependence"):
        return snippet(name)(model, x)
    if name == "causal_dependency":
        return snippet(name)(model, x, vocab_size=32)
    return snippet(name)(model, x, y, loss_fn, case.get("optimizer", ADAM))


def with_classes(factory, classes):
    case = factory()
    case.setdefault("task", {})["classes"] = classes
    return case


def lr_zero():
    case = broken_training.make_lr_zero()
    case["lr"] = 0.0  # the snippet takes an LR, not an optimizer: the same planted bug
    return case


OK = {  # verdict of a healthy run
    "init_loss": lambda r: 0.75 <= r <= 1.5,
    "overfit_one_batch": lambda r: 0 <= r < 0.1,
    "gradient_flow": lambda r: r == [],
    "nan_hooks": lambda r: r is None,
    "batch_independence": lambda r: r == 0,
    "causal_dependency": lambda r: r == [],
    "input_dependence": lambda r: r >= 1e-3,
    "update_ratio": lambda r: 1e-4 <= r <= 1e-2,
}
HEALTHY = [
    ("init_loss", lambda: with_classes(healthy.make_mlp_classifier, 5)),
    ("init_loss", lambda: with_classes(healthy.make_causal_lm, 32)),
    ("overfit_one_batch", healthy.make_mlp_classifier),
    ("gradient_flow", healthy.make_cnn_classifier),
    ("gradient_flow", healthy.make_causal_lm),
    ("nan_hooks", healthy.make_cnn_classifier),
    ("nan_hooks", healthy.make_causal_lm),
    ("batch_independence", healthy.make_cnn_classifier),
    ("batch_independence", healthy.make_causal_lm),
    ("causal_dependency", healthy.make_causal_lm),
    ("input_dependence", healthy.make_cnn_classifier),
    ("input_dependence", healthy.make_causal_lm),
    ("update_ratio", healthy.make_mlp_classifier),
    ("update_ratio", healthy.make_causal_lm),
]
BROKEN = [  # (snippet, broken twin, what the result must be)
    ("init_loss", lambda: with_classes(broken_data.make_scaled_logits, 5), lambda r: r > 1.5),
    ("init_loss", lambda: with_classes(broken_data.make_unshifted_lm, 32), lambda r: r < 0.75),
    ("overfit_one_batch", lr_zero, lambda r: r > 0.99),
    ("overfit_one_batch", broken_training.make_flipped_loss_sign, lambda r: r < 0),
    ("overfit_one_batch", broken_training.make_double_softmax, lambda r: r >= 0.1),
    ("gradient_flow", broken_training.make_detached_features, lambda r: r and all(n.startswith("features.") for n in r)),
    ("gradient_flow", broken_training.make_dead_relu, lambda r: "net.0.weight" in r),
    ("nan_hooks", broken_training.make_log_of_negative, lambda r: r == "forward: 1 (LogLink)"),
    ("nan_hooks", broken_training.make_sqrt_at_zero, lambda r: r.startswith("backward: ")),
    ("batch_independence", broken_training.make_seq_first_view, lambda r: r > 1e-3),
    ("batch_independence", broken_training.make_batch_stats_in_forward, lambda r: r > 1e-3),
    ("causal_dependency", broken_training.make_no_causal_mask, lambda r: r == list(range(15))),
    ("causal_dependency", broken_training.make_mask_off_by_one, lambda r: r == list(range(15))),
    ("input_dependence", broken_data.make_input_ignored, lambda r: r < 1e-3),
    ("update_ratio", broken_training.make_lr_zero, lambda r: r < 1e-4),
    ("update_ratio", broken_training.make_lr_too_high, lambda r: r > 1e-2),
]


def test_the_folder_holds_the_snippets_the_page_shows():
    assert sorted(p.stem for p in SNIPPETS.glob("*.py")) == sorted(NAMES)
    page = (ROOT / "refs" / "snippets.md").read_text()
    for name in NAMES:
        assert f'--8<-- "refs/snippets/{name}.py"' in page, f"refs/snippets.md does not include {name}.py"


@pytest.mark.parametrize("name", NAMES)
def test_snippet_is_short_and_torch_only(name):
    source = (SNIPPETS / f"{name}.py").read_text()
    assert 10 <= len(source.splitlines()) <= 30
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"torch"} | sys.stdlib_module_names, imported
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == [name]


@pytest.mark.parametrize("name,factory", HEALTHY, ids=lambda v: v if isinstance(v, str) else "")
def test_healthy_model_passes_and_is_left_as_found(name, factory, capsys):
    case = factory()
    before = snapshot(case["model"])
    result = call(name, case)
    assert OK[name](result), result
    assert capsys.readouterr().out.splitlines()[-1].startswith("ok"), "the printed verdict must agree"
    assert_unchanged(before, snapshot(case["model"]))


@pytest.mark.parametrize("name,factory,flagged", BROKEN, ids=lambda v: v if isinstance(v, str) else "")
def test_broken_twin_is_flagged(name, factory, flagged, capsys):
    result = call(name, factory())
    assert not OK[name](result) and flagged(result), result
    assert "FAIL" in capsys.readouterr().out
