"""lint's model of a source file (trainlint/source.py) at its decisions, found by mutation testing: the activation an
expression holds (through an index, a log, nested Sequentials, a factory), autograd switches, and training-loop events."""
import ast

import pytest

from test_decisions_lint_source import source


def _last_value(src):
    """The expression of the file's last statement."""
    return src.tree.body[-1].value


def _activation(code):
    """The kind of activation the expression on the code's last line holds, else None."""
    src = source(code)
    found = src.activation(_last_value(src))
    return found[0] if found else None


def _events(code):
    """The kinds of training-loop events the call on the code's last line is."""
    src = source(code)
    return [event.kind for event in src.classify(_last_value(src))]


def test_an_indexed_softmax_output_still_holds_a_softmax():
    assert _activation("import torch.nn.functional as F\np = F.softmax(x, 1)\np[:, 0]\n") == "softmax"


def test_the_log_of_a_softmax_is_a_log_softmax_and_the_log_of_anything_else_no_activation():
    assert _activation("import torch\ntorch.log(torch.softmax(x, 1))\n") == "log_softmax"
    assert _activation("import torch\ntorch.log(torch.sigmoid(x))\n") is None
    assert _activation("import torch\ntorch.log(x)\n") is None


@pytest.mark.parametrize("nested, kind", [(11, "softmax"), (12, None)])
def test_a_module_s_activation_is_followed_through_at_most_eleven_nested_sequentials(nested, kind):
    # m(x) reaches module_activation at depth 1, and each Sequential around the Softmax adds one: the Softmax
    # inside 11 Sequentials is read at depth 12, the last one allowed
    built = "nn.Softmax(1)"
    for _ in range(nested):
        built = f"nn.Sequential(nn.Linear(2, 2), {built})"
    assert _activation(f"import torch.nn as nn\nm = {built}\nm(x)\n") == kind


def test_a_model_built_by_a_factory_ends_with_that_factory_s_activation():
    code = """
        import torch.nn as nn
        def build():
            return nn.Sequential(nn.Linear(2, 2), nn.Softmax(1))
        model = build()
        model(x)
    """
    assert _activation(code) == "softmax"


def test_a_factory_whose_returns_disagree_on_the_activation_gives_none():
    # the return that ends in a Softmax is the function's own statement, so it is the first return found
    code = """
        import torch.nn as nn
        def build(plain):
            if plain:
                return nn.Linear(2, 2)
            return nn.Sequential(nn.Linear(2, 2), nn.Softmax(1))
        model = build(False)
        model(x)
    """
    assert _activation(code) is None


def test_a_factory_that_returns_nothing_gives_no_activation():
    assert _activation("def build():\n    pass\nmodel = build()\nmodel(x)\n") is None


def test_inference_mode_false_turns_autograd_on_and_enable_grad_too():
    src = source("import torch\ntorch.inference_mode(False)\ntorch.inference_mode()\ntorch.enable_grad()\n")
    inference_off, inference, enable = (statement.value for statement in src.tree.body[1:])
    assert src.grad_switch(inference_off) is True
    assert src.grad_switch(inference) is False
    assert src.grad_switch(enable) is True


def test_set_grad_enabled_false_does_not_turn_autograd_off_for_its_own_call():
    # the statement and its call start at the same position: only what follows it runs with autograd off
    src = source("import torch\ntorch.set_grad_enabled(False)\ny = x * 2\n")
    switch, after = src.tree.body[1].value, src.tree.body[2].value
    assert not src.grad_off(switch, True)
    assert src.grad_off(after, True)


def test_a_function_called_under_no_grad_runs_with_autograd_off():
    code = """
        import torch
        def double(x):
            return x * 2
        with torch.no_grad():
            double(y)
    """
    src = source(code)
    product = next(n for n in src.of_type(ast.BinOp))
    assert src.grad_off(product, True)
    assert not src.grad_off(product, False)


def test_only_torch_s_distributed_autograd_context_is_a_zero_event():
    assert _events("import torch.distributed.autograd as dist_autograd\ndist_autograd.context()\n") == ["zero"]
    assert _events("ctx.context()\n") == []


@pytest.mark.parametrize("call, kinds", [
    ("p.grad.zero_()", ["zero"]),
    ("p.grad.data.zero_()", ["zero"]),
    ("self.w.grad.zero_()", ["zero"]),  # the receiver's own attribute is .grad, though it hangs off an attribute
    ("x.data.zero_()", []),
    ("self.w.zero_()", []),
])
def test_zeroing_in_place_is_a_zero_event_only_on_a_grad(call, kinds):
    assert _events(call + "\n") == kinds


def test_update_is_a_scaler_event_only_on_a_scaler():
    assert _events("import torch\nscaler = torch.cuda.amp.GradScaler()\nscaler.update()\n") == ["update"]
    assert _events("d.update(x)\n") == []
