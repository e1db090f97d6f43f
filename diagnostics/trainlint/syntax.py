"""Helpers over Python's syntax tree, shared by Source and the rules: node kinds, positions, names, arguments."""
import ast
from dataclasses import dataclass
from pathlib import Path


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
NESTED = FUNCTIONS + (ast.ClassDef,)
SCOPES = NESTED + (ast.Module,)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
ACTOR_CALLS = {"call", "call_one", "remote", "choose", "broadcast"}  # obj.method.call(...): Monarch's and Ray's actors
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
BINDERS = {ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension,
           ast.withitem, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler}  # what binds a name


def position(node):
    return (node.lineno, node.col_offset)


def end_position(node):
    return (node.end_lineno, node.end_col_offset)


def terminal(expr):
    """The last identifier of a name or attribute chain: `self.opt.step` -> `step`."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Subscript):
        return terminal(expr.value)
    return None


def dotted(expr):
    """`a.b.c` for a name or attribute chain, else None (what ast.unparse gives for those, much faster)."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    return ".".join([expr.id, *reversed(parts)]) if isinstance(expr, ast.Name) else None


def keyword(call, name):
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def argument(call, index, name):
    """The call's argument at position `index` or named `name`, or None. After a `*args` no position is known, but a
    keyword still is (Python refuses a parameter given both ways)."""
    if any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return keyword(call, name)
    return call.args[index] if len(call.args) > index else keyword(call, name)


def has_star_kwargs(call):
    return any(kw.arg is None for kw in call.keywords)


def is_false(node):
    return isinstance(node, ast.Constant) and node.value is False


def method_call(node, *names):
    """`node` is a call `<receiver>.<name>(...)` for one of names."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


@dataclass(frozen=True)
class Elsewhere:
    """A place in another file of the run (where an imported model applies its softmax)."""
    path: str
    lineno: int


def place(node):
    """How a message names where node is: `line 16`, or `model.py line 16` in another file."""
    return f"{Path(node.path).name} line {node.lineno}" if isinstance(node, Elsewhere) else f"line {node.lineno}"
