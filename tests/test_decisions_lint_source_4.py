"""lint's model of a source file (trainlint/source.py) at its decisions, found by mutation testing: what a call runs
outside this file, and the tensor a library's backward() differentiates."""
import ast

from test_decisions_lint_source import source
from trainlint.run import Project


def _last_call(src):
    """The call on the file's last line."""
    return src.tree.body[-1].value


def test_a_file_linted_alone_looks_up_no_imported_function():
    # no project: outside_callees must not ask one for `train_one_epoch`, and finds nothing
    src = source("from engine import train_one_epoch\ntrain_one_epoch(model, loader)\n")
    assert src.outside_callees(_last_call(src)) == []


def test_an_imported_function_is_a_callee_only_when_imported_ones_are_asked_for(tmp_path):
    (tmp_path / "engine.py").write_text("def train_one_epoch(model, loader):\n    pass\n")
    (tmp_path / "train.py").write_text("from engine import train_one_epoch\ntrain_one_epoch(model, loader)\n")
    project = Project([tmp_path / "engine.py", tmp_path / "train.py"])
    src = project.source((tmp_path / "train.py").resolve())
    call = _last_call(src)
    assert [function.name for _, function in src.outside_callees(call)] == ["train_one_epoch"]
    assert src.outside_callees(call, False) == []


def test_backward_of_an_accelerator_under_any_name_differentiates_its_argument():
    # `acc` is none of the hinted names: only what built it (accelerate.Accelerator) makes its argument the target
    src = source("from accelerate import Accelerator\nacc = Accelerator()\nacc.backward(loss)\n")
    target = src.backward_target(_last_call(src))
    assert isinstance(target, ast.Name) and target.id == "loss"
