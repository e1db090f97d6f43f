"""How many dimensions a tensor has, when the code spells it out: the sizes given to view, reshape or a
factory, followed through the calls that keep or change the rank in a known way (a Linear layer, an
elementwise op, cat, indexing, unsqueeze). None whenever a step is unknown: a function's parameter, a
model of another file, a call this module does not know."""
import ast

from .syntax import argument, keyword, terminal
from .torch_names import MOVES

SIZED = {"view", "reshape"}  # tensor methods whose positional sizes give the rank
FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full"}
# tensor methods and torch functions whose result has the rank of their (first) input
KEEP_RANK = MOVES | {
    "long", "int", "type", "type_as", "contiguous",
    "detach", "clone", "requires_grad_", "masked_fill", "clamp", "clip", "abs", "neg", "exp", "log", "sqrt",
    "rsqrt", "pow", "square", "relu", "relu6", "gelu", "silu", "elu", "selu", "celu", "leaky_relu", "softplus",
    "tanh", "sigmoid", "hardtanh", "dropout", "mul", "div", "add", "sub", "transpose", "linear", "layer_norm",
    "normalize", "Variable",
}
# modules whose output has the rank of their input
KEEP_RANK_MODULES = {
    "Linear", "Bilinear", "Identity", "Dropout", "ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU",
    "SiLU", "Mish", "Tanh", "Sigmoid", "Hardtanh", "Softplus", "LayerNorm", "BatchNorm1d", "Softmax", "LogSoftmax",
    "Softmin",
}
REDUCTIONS = {"sum", "mean", "amax", "amin", "logsumexp", "prod", "norm", "std", "var"}


def rank(src, node, depth=0):
    """The number of dimensions of node's value when the code determines it, else None."""
    if node is None or depth > 24:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return 0
    if isinstance(node, (ast.Name, ast.Attribute)):  # a name, or self.x set once in its class
        value = src.resolve(node)
        return None if value is node else rank(src, value, depth + 1)
    if isinstance(node, ast.BinOp):
        left, right = rank(src, node.left, depth + 1), rank(src, node.right, depth + 1)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.MatMult):
            return max(left, right) if min(left, right) >= 2 else None
        return max(left, right)  # broadcasting
    if isinstance(node, ast.UnaryOp):
        return rank(src, node.operand, depth + 1)
    if isinstance(node, ast.Subscript):
        return indexed_rank(rank(src, node.value, depth + 1), node.slice)
    if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        return call_rank(src, node, depth)
    return None


def spelled_rank(src, node):
    """The rank when node is, or names, a view, reshape or factory call that spells out its sizes; else None."""
    value = src.resolve(node) if node is not None else None
    if not isinstance(value, ast.Call):
        return None
    name, last, method = callee(src, value)
    if method and last in SIZED:  # x.view(n, c, h, w)
        return sized_rank(src, value, last)
    return sized_rank(src, value, last) if name.startswith("torch.") and last in FACTORIES else None  # torch.zeros(...)


def indexed_rank(of, index):
    """The rank of x[index] for x of rank `of`: an integer drops a dimension, None adds one, a slice keeps it."""
    if of is None:
        return None
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if isinstance(part, ast.Constant) and isinstance(part.value, int) and not isinstance(part.value, bool):
            of -= 1
        elif isinstance(part, ast.Constant) and part.value is None:
            of += 1
        elif not isinstance(part, ast.Slice):
            return None  # a tensor or a name (fancy indexing), or an ellipsis (what it spans is unknown)
    return of if of >= 0 else None


def callee(src, call):
    """(qualified name or "", its last part, whether it is a method of a tensor: `x.view(...)`)."""
    name = src.qualname(call.func) or ""
    last = name.rsplit(".", 1)[-1] if name else terminal(call.func)
    return name, last, isinstance(call.func, ast.Attribute) and not name


def call_rank(src, call, depth):
    name, last, method = callee(src, call)
    receiver = call.func.value if method else None
    if name.startswith("math.") or is_size(src, call) or method and last == "item":
        return 0  # a Python number
    if method and last in SIZED or name.startswith("torch.") and last in FACTORIES:
        return sized_rank(src, call, last)
    if method and last == "flatten" or name in ("torch.flatten",):
        return flattened_rank(src, call, receiver, depth)
    if method and last == "permute":
        return len(call.args) if call.args and not (len(call.args) == 1 and isinstance(call.args[0], ast.Tuple)) \
            else len(call.args[0].elts) if call.args else None
    if method and last in ("unsqueeze", "squeeze") and len(call.args) == 1 and not call.keywords:
        of = rank(src, receiver, depth + 1)
        return None if of is None else of + 1 if last == "unsqueeze" else of - 1
    if method and last in REDUCTIONS or name.startswith("torch.") and last in REDUCTIONS:
        return reduced_rank(src, call, receiver if method else argument(call, 0, "input"), 0 if method else 1, depth)
    if name in ("torch.cat", "torch.concat", "torch.stack") and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
        known = {rank(src, e, depth + 1) for e in call.args[0].elts} - {None}
        return None if len(known) != 1 else known.pop() + (last == "stack")
    if last in KEEP_RANK and (method or name.startswith("torch.") or name.endswith(".Variable")):
        return rank(src, receiver if method else argument(call, 0, "input"), depth + 1)
    return module_rank(src, src.origin(call.func), call.args[0] if call.args else None, depth)


def sized_rank(src, call, name):
    """x.view(n, -1), torch.zeros(b, s), torch.full((b, s), v): the number of sizes given. One argument is a
    size when it is a number (`view(-1)`, `zeros(x.size(0))`), and a shape of unknown length otherwise."""
    args = call.args[:1] if name == "full" else call.args
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        return len(args[0].elts)
    if len(args) == 1:
        return 1 if is_size(src, args[0]) else None
    return len(args) or None


def is_size(src, expr, depth=0):
    """expr is one number: a literal, `-1`, `x.size(0)`, `x.shape[0]`, `len(x)`, arithmetic on those, or a name
    assigned one."""
    if depth > 8:
        return False
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.UnaryOp):
        return is_size(src, expr.operand, depth + 1)
    if isinstance(expr, ast.BinOp):
        return is_size(src, expr.left, depth + 1) and is_size(src, expr.right, depth + 1)
    if isinstance(expr, ast.Subscript):
        return terminal(expr.value) in ("shape", "size") and not isinstance(expr.slice, ast.Slice)
    if isinstance(expr, ast.Call):
        return terminal(expr.func) == "size" and len(expr.args) == 1 or \
            isinstance(expr.func, ast.Name) and expr.func.id in ("len", "int")
    if isinstance(expr, ast.Name):
        value = src.resolve(expr)
        return value is not expr and is_size(src, value, depth + 1)
    return False


def flattened_rank(src, call, receiver, depth):
    """x.flatten(1) is 2-D; x.flatten(s, e) keeps the rank open unless x's rank is known."""
    args = call.args if receiver is not None else call.args[1:]
    start = args[0] if args else keyword(call, "start_dim")
    end = args[1] if len(args) > 1 else keyword(call, "end_dim")
    start = start.value if isinstance(start, ast.Constant) else 0 if start is None else None
    if start is None or not isinstance(start, int) or start < 0:
        return None
    if end is None or isinstance(end, ast.UnaryOp) and isinstance(end.operand, ast.Constant) and end.operand.value == 1:
        return start + 1
    of = rank(src, receiver if receiver is not None else argument(call, 0, "input"), depth + 1)
    if of is None or not isinstance(end, ast.Constant) or not isinstance(end.value, int):
        return None
    return of - (end.value % of - start) if of else None


def reduced_rank(src, call, tensor, first_dim, depth):
    """x.sum(1) drops a dimension, x.sum(1, keepdim=True) keeps it; x.sum() is a scalar."""
    of = rank(src, tensor, depth + 1)
    dim = call.args[first_dim] if len(call.args) > first_dim else keyword(call, "dim")
    keep = call.args[first_dim + 1] if len(call.args) > first_dim + 1 else keyword(call, "keepdim")
    if dim is None:
        return 0 if not call.keywords and len(call.args) == first_dim else None
    if of is None or not isinstance(dim, ast.Constant) or not isinstance(dim.value, int):
        return None
    if keep is not None and not isinstance(keep, ast.Constant):
        return None
    return of if keep is not None and keep.value else of - 1


def module_rank(src, made, given, depth):
    """The rank of module(given) for a module of torch.nn built by the call `made` that keeps its input's
    rank, or a Sequential of such layers (nn.Flatten makes 2-D); else None."""
    if made is None or given is None:
        return None
    layers = sequence(src, made)
    return None if layers is None else through(src, layers, rank(src, given, depth + 1))


def sequence(src, made):
    """The layers of an nn.Sequential built by `made`, or [made] for one torch.nn module; None otherwise."""
    name = src.qualname(made.func) or ""
    if not name.startswith("torch.nn."):
        return None
    if name.endswith(".Sequential"):
        return list(made.args) if all(isinstance(a, ast.Call) for a in made.args) else None
    return [made]


def through(src, layers, of):
    """The rank after these torch.nn layers, from an input of rank `of`."""
    for layer in layers:
        last = (src.qualname(layer.func) or "").rsplit(".", 1)[-1]
        if of is None:
            return None
        if last == "Flatten":
            start = argument(layer, 0, "start_dim")
            end = argument(layer, 1, "end_dim")
            if end is not None or start is not None and not isinstance(start, ast.Constant):
                return None
            of = (start.value if start is not None else 1) + 1
        elif last not in KEEP_RANK_MODULES:
            return None
    return of
