"""Rules on writes autograd cannot see or cannot survive: through .data, and in place on an output that a
backward pass reads."""
import ast

from ..registry import rule
from ..syntax import terminal
from ..torch_names import MOVES, NOT_INPLACE, SAVES_OUTPUT, SAVES_OUTPUT_METHODS
from .graph import backward_calls, looks_like_loss
from .modes import mode_branch


FACTORIES = {"tensor", "Tensor", "FloatTensor", "LongTensor", "zeros", "ones", "empty", "full", "rand", "randn",
             "randint", "arange", "linspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
             "rand_like", "randn_like", "from_numpy", "as_tensor", "load", "Variable", "Parameter"}
OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
             ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


SAME_TENSOR = MOVES | {"contiguous", "clone"}  # its values, moved or copied


def is_activation(src, value, function):
    """value is a tensor computed on the autograd path: the output of a torch op or module, or of a
    model call in code that runs backward()."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in SAME_TENSOR:
        receiver = value.func.value  # torch.randn(8, 4).to(device): judged by what it moves, a factory's buffer
        value = src.definition(receiver) if isinstance(receiver, ast.Name) else receiver
    if not isinstance(value, ast.Call):
        return False
    name = src.qualname(value.func)
    if name:
        return name.startswith("torch.") and name.rsplit(".", 1)[1] not in FACTORIES
    made = src.origin_name(value.func)
    if made:
        return made.startswith("torch.nn.")
    return isinstance(value.func, (ast.Name, ast.Attribute)) and any(True for _ in backward_calls(src, function or src.tree))


@rule(
    "data-write",
    "An activation is modified through .data (h.data = ..., h.data.mul_(...)), behind autograd's back.",
    """Writes through .data skip autograd's version check. When the tensor is an activation (the
    output of a torch op, a layer or the model) that was saved for the backward pass, the
    gradient is computed from the new values, wrong and without any error. Write the operation
    out of place (h = h * mask), or under torch.no_grad() on the tensor itself so autograd can
    check it. Updating parameters through .data (hand-written SGD, weight clipping, EMA,
    initialisation) is harmless and not flagged, though torch.no_grad() is the modern form; so is
    a write to the loss itself (speechbrain sets a non-finite loss's value to 0 for its log), which
    no backward reads.""",
    """
    import torch
    import torch.nn as nn

    class Gate(nn.Module):
        def forward(self, x, mask):
            h = torch.sigmoid(self.proj(x))
            h.data.mul_(mask)  # BUG: sigmoid's backward reads h, now changed behind autograd's back
            return h
    """,
    """
    import torch
    import torch.nn as nn

    class Gate(nn.Module):
        def forward(self, x, mask):
            h = torch.sigmoid(self.proj(x))
            return h * mask
    """,
)
def check_data_write(src):
    def through_data(expr):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr
        return isinstance(expr, ast.Attribute) and expr.attr == "data"

    for node in src.of_type(ast.Assign, ast.AugAssign, ast.Call):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hit = next((t for t in targets if through_data(t)), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                and not node.func.attr.startswith("_") and node.func.attr not in NOT_INPLACE and through_data(node.func.value):
            hit = node.func.value
        else:
            continue
        if hit is None or src.grad_off(node):
            continue
        tensor = hit.value if isinstance(hit, ast.Attribute) else hit.value.value
        function = src.function(node)
        if isinstance(tensor, ast.Name) and is_activation(src, src.definition(tensor), function) and \
                not looks_like_loss(src, tensor):  # the graph's root: no backward reads its value (a logged 0)
            name = ast.unparse(tensor)
            yield node, (f"writing through {name}.data hides the change from autograd: {name} is part of the graph, so "
                         f"backward() computes gradients from the new values without any error. Write it out of place "
                         f"({name} = ...), or modify {name} itself under torch.no_grad().")


def custom_function(src, function):
    """function is a method of a torch.autograd.Function subclass."""
    cls = src.parent.get(function)
    return isinstance(cls, ast.ClassDef) and any(
        (src.qualname(b) or "").endswith("autograd.Function") or terminal(b) == "Function" for b in cls.bases)


def saves_output(src, value):
    """The name of the op that produced value when its backward reads its own output, else None."""
    if not isinstance(value, ast.Call):
        return None
    name = src.qualname(value.func)
    if name in SAVES_OUTPUT:
        return SAVES_OUTPUT[name]
    if name is None and isinstance(value.func, ast.Attribute) and value.func.attr in SAVES_OUTPUT_METHODS:
        return value.func.attr
    made = src.origin_name(value.func)
    last = made.rsplit(".", 1)[-1]
    if made.startswith("torch.nn.") and last in ("Sigmoid", "Tanh", "Softmax", "LogSoftmax", "ReLU"):
        return last.lower()
    return None


@rule(
    "inplace-on-saved-output",
    "An in-place op (x += ..., x.mul_(...), x[...] = ...) right after an op whose backward needs its output (sigmoid, tanh, exp, softmax, relu, sqrt).",
    """sigmoid, tanh, exp, softmax, log_softmax, relu, sqrt and rsqrt keep their output for the
    backward pass. Changing that output in place invalidates it: backward() then fails with a
    modified-by-an-inplace-operation error, often hours into a run when the branch is first
    taken. Write the out-of-place form (h = h + b, h = h * m).""",
    """
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        def forward(self, x):
            h = torch.tanh(self.fc(x))
            h += self.bias  # BUG: tanh's backward needs h as it was
            return h
    """,
    """
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        def forward(self, x):
            h = torch.tanh(self.fc(x))
            return h + self.bias
    """,
)
def check_inplace_on_saved_output(src):
    for node in src.of_type(ast.AugAssign, ast.Call, ast.Assign):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            name = node.target
            how, fix = f"{name.id} {OPERATORS.get(type(node.op), '?')}= ...", f"{name.id} = {name.id} {OPERATORS.get(type(node.op), '?')} ..."
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.attr.endswith("_") and not node.func.attr.startswith("_") and node.func.attr not in NOT_INPLACE:
            name = node.func.value
            how, fix = f"{name.id}.{node.func.attr}(...)", f"{name.id} = {name.id}.{node.func.attr[:-1]}(...)"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) \
                and isinstance(node.targets[0].value, ast.Name):
            name = node.targets[0].value
            how, fix = f"{name.id}[...] = ...", f"{name.id} = torch.where(mask, value, {name.id}) or {name.id}.masked_fill(...)"
        else:
            continue
        op = saves_output(src, src.definition(name))
        if not op:
            continue
        function = src.function(node)
        if custom_function(src, function):
            continue  # autograd.Function.forward runs with autograd off: its backward gets what forward saves
        if mode_branch(src, node) is False:
            continue  # (yolov7's detection head decodes its output in place when not training: no backward follows)
        training = getattr(function, "name", "") == "forward" or any(True for _ in backward_calls(src, function or src.tree))
        if training and not src.grad_off(node, True):
            yield node, (f"{name.id} is the output of {op}, whose backward pass reads that output; {how} changes it in "
                         f"place, so backward() fails with a modified-by-an-inplace-operation error. Write {fix} instead.")
