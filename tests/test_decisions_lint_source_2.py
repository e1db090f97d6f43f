"""lint's model of a source file (trainlint/source.py) at its boundaries, found by mutation testing: how a name is
followed to its import (qualname) through plain aliases, a star import and an attribute; what makes an optimizer; which
module calls are loss calls."""
import pytest

from test_decisions_lint_source import source as parsed


def _qualname(code):
    """The qualified name of the expression the code's last line assigns."""
    source = parsed(code)
    return source.qualname(source.tree.body[-1].value)


@pytest.mark.parametrize("aliases, name", [(8, "torch.nn.functional.softmax"), (9, None)])
def test_a_name_is_followed_through_at_most_eight_aliases(aliases, name):
    # import torch.nn.functional as F, then a1 = F, a2 = a1, ...: the name of `a<aliases>.softmax`
    chain = "a1 = F\n" + "".join(f"a{i} = a{i - 1}\n" for i in range(2, aliases + 1))
    assert _qualname(f"import torch.nn.functional as F\n{chain}y = a{aliases}.softmax\n") == name


def test_a_name_never_assigned_after_a_star_import_comes_from_that_module_and_one_assigned_does_not():
    assert _qualname("from torch.nn import *\ny = functional.softmax\n") == "torch.nn.functional.softmax"
    assert _qualname("from torch.nn import *\nfunctional = 3\ny = functional.softmax\n") is None


def test_a_name_bound_to_an_imported_attribute_is_followed_and_one_bound_to_a_call_is_not():
    assert _qualname("import torch\nf = torch.nn\ny = f.Linear\n") == "torch.nn.Linear"
    assert _qualname("import torch\nf = torch.nn.Linear(2, 2)\ny = f.weight\n") is None


def test_what_built_an_object_decides_whether_it_is_an_optimizer_before_its_name_does():
    source = parsed("import torch\nx = torch.optim.Adam(params)\nopt = torch.optim.lr_scheduler.StepLR(x, 1)\nx\nopt\n")
    built_by_adam, named_opt = (statement.value for statement in source.tree.body[-2:])
    assert source.is_optimizer(built_by_adam) and not source.is_optimizer(named_opt)


def test_a_module_of_torch_nn_is_a_loss_only_when_its_class_ends_in_loss():
    """In a file that builds a loss module, a call of an nn.Linear is no loss call, nor is one of a loss class from
    outside torch.nn named like no loss (`head`)."""
    source = parsed("import torch.nn as nn\nimport mylib\ncrit = nn.CrossEntropyLoss()\nlin = nn.Linear(2, 2)\n"
                    "head = mylib.FocalLoss()\nlin(x)\nhead(x, y)\ncrit(x, y)\n")
    linear, focal, cross_entropy = (statement.value for statement in source.tree.body[-3:])
    assert (source.loss_call(linear), source.loss_call(focal)) == (None, None)
    assert source.loss_call(cross_entropy)[0] == "ce"
