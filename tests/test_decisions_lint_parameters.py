"""lint's parameter rules (trainlint/rules/parameters.py) at their decisions, found by mutation testing: what counts
as freezing parameters, and which class a model object is an instance of."""
from test_decisions_lint_source import source
from trainlint.rules.parameters import freezes_something, model_class


def test_only_an_assignment_of_false_to_requires_grad_freezes_something():
    assert freezes_something(source("for p in model.parameters():\n    p.requires_grad = False\n"))
    assert not freezes_something(source("done = False\nmodel.training = False\n"))


def test_a_model_built_from_a_class_of_the_file_is_an_instance_of_it():
    src = source("import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n\n\nmodel = Net()\nmodel\n")
    assert model_class(src, src.tree.body[-1].value) is src.tree.body[1]
