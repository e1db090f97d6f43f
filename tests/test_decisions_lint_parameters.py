"""lint's parameter rules (trainlint/rules/parameters.py) at their decisions, found by mutation testing: what counts
as freezing parameters, which class a model object is an instance of, when a subset or a replaced layer is reported,
and how deep a weight_decay is looked up."""
import pytest

from conftest import findings
from test_decisions_lint_source import source
from trainlint.rules.parameters import freezes_something, model_class


def test_only_an_assignment_of_false_to_requires_grad_freezes_something():
    assert freezes_something(source("for p in model.parameters():\n    p.requires_grad = False\n"))
    assert not freezes_something(source("done = False\nmodel.training = False\n"))


def test_a_model_built_from_a_class_of_the_file_is_an_instance_of_it():
    src = source("import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n\n\nmodel = Net()\nmodel\n")
    assert model_class(src, src.tree.body[-1].value) is src.tree.body[1]


def test_self_in_a_method_is_an_instance_of_the_method_s_class():
    src = source("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return self\n")
    assert model_class(src, src.tree.body[1].body[0].body[0].value) is src.tree.body[1]


def test_a_submodule_s_parameters_are_no_subset_when_it_is_the_model_class_s_only_layer_with_parameters():
    assert findings("""
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)

        model = Net()
        optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)
        model(x).sum().backward()
        """) == []


def test_another_optimizer_that_never_names_the_model_does_not_cover_the_rest_of_it():
    assert findings("""
        import torch
        import torchvision

        model = torchvision.models.resnet18()
        optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)
        other = torch.optim.Adam(disc.parameters(), lr=0.1)
        model(x).sum().backward()
        """) == [("optimizer-param-subset", 6)]


def test_an_instance_of_a_module_class_of_the_file_replaces_a_layer():
    assert findings("""
        import torch
        import torch.nn as nn
        import torchvision

        class Head(nn.Module):
            pass

        model = torchvision.models.resnet18()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.fc = Head()
        """) == [("layer-replaced-after-optimizer", 11)]


def test_an_add_param_group_evaluated_in_the_replacing_assignment_s_target_comes_before_the_new_layer():
    # the target's add_param_group runs before the attribute is set, so the new layer is still not in the optimizer
    assert findings("""
        import torch
        import torch.nn as nn
        import torchvision

        model = torchvision.models.resnet18()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.add_param_group({}).fc = nn.Linear(2, 2)
        """) == [("layer-replaced-after-optimizer", 8)]


def decay_through_lookups(count):
    """Adam's weight_decay read through `count` dict lookups, each table holding the previous one's entry."""
    tables = ["c0 = {'wd': 0.1}"] + [f"c{i} = {{'wd': c{i - 1}['wd']}}" for i in range(1, count)]
    return "\n".join(["import torch", *tables, f"torch.optim.Adam(model.parameters(), weight_decay=c{count - 1}['wd'])"])


@pytest.mark.parametrize("count, found", [(8, True), (9, False)])
def test_a_weight_decay_is_followed_through_eight_dict_lookups_and_no_more(count, found):
    assert bool(findings(decay_through_lookups(count))) is found
