"""lint: find silent training bugs in PyTorch source code before anything runs.

Symptom
    The run starts, the loss moves, nothing crashes, and the model still trains badly or not
    at all. Many such bugs are visible in the code itself: a softmax in front of
    CrossEntropyLoss, scheduler.step() before optimizer.step(), a missing zero_grad(), a loss
    summed with its graph, a model left in eval mode after validation.

What it checks
    It parses each Python file or notebook with `ast` (nothing is imported or run; torch need
    not be installed) and applies the rules that `--list-rules` prints; refs/static_analysis.md
    documents each with a bad and a good example, and its measured precision. It follows imports
    and aliases (`import torch.nn.functional as F`, `from torch import nn`), simple assignments
    (`crit = nn.CrossEntropyLoss()`, `out = model(x).softmax(-1)` then `crit(out, y)`),
    `self.x = ...` attributes set once in a class, calls to functions defined in the same file,
    and classes or model factories imported from the other files it is given (`from model import
    Net`). Rules are tuned for precision: when the code leaves a doubt (a helper from a module it
    was not given, a name it cannot trace) the rule stays silent. Its time grows linearly with the
    size of a file.

Command
    python diagnostics/lint.py train.py src/          # files and folders (*.py, *.ipynb)
    python diagnostics/lint.py train.py --json        # {"findings": [{rule, path, line, message}]}
    python diagnostics/lint.py src/ --select missing-zero-grad,softmax-into-ce
    python diagnostics/lint.py src/ --ignore data-write
    python diagnostics/lint.py --list-rules
    # settings: [tool.ml-debug.lint] in pyproject.toml (select, ignore, exclude, per-file-ignores;
    # on Python 3.10, reading them needs the tomli package)

Output
    $ python diagnostics/lint.py tests/data/lint/buggy_classifier.py
    tests/data/lint/buggy_classifier.py:36: softmax-into-ce cross_entropy applies log_softmax itself, so the output of the softmax at line 16 is squashed twice: the gradient vanishes as the model gets confident and training stalls. Pass the raw logits; keep softmax for predictions.
    tests/data/lint/buggy_classifier.py:37: missing-zero-grad this loop calls backward() and optimizer.step() but never zero_grad(): gradients add up across iterations, so every step uses the sum of all past gradients. Call optimizer.zero_grad(set_to_none=True) once per optimizer step.
    tests/data/lint/buggy_classifier.py:39: loss-accumulated-with-graph adding loss (a tensor with its autograd graph) to total on every iteration keeps all those graphs alive: memory grows until the run fails. Use loss.item() (or loss.detach()) here.
    tests/data/lint/buggy_classifier.py:41: eval-mode-not-restored this leaves model in eval mode and the training loop never calls model.train() again: later steps train with dropout off and frozen batch-norm statistics. Call model.train() at the start of each epoch or right after evaluating.
    lint: 4 finding(s) in 1 file(s)

How to read it
    One line per finding: `path:line: rule message` (in a notebook `path:cell N:line:`). The
    message says what goes wrong at run time and what to write instead. Exit code 0 when clean,
    1 when something was found, 2 when nothing could be read (a file that cannot be read or
    parsed, a Python 2 file, a FIFO or device is reported on stderr in one line and skipped).
    When a finding is intended, silence it on that line with a trailing `# noqa: <rule>`
    (several: `# noqa: rule-a, rule-b`; a bare `# noqa` silences every rule), for a whole run
    with `--ignore <rule>`, or for some paths with `per-file-ignores` in pyproject.toml.

Next step
    Fix the line, or confirm the suspicion at run time with the diagnostics in this folder:
    gradient_flow.py (parameters that get no gradient), overfit_one_batch.py (a loop that cannot
    learn), init_loss.py (a loss that starts at the wrong value). Each rule's section in
    refs/static_analysis.md shows the bug and its fix side by side.
"""
import argparse
import ast
import bisect
import collections
import errno
import fnmatch
import functools
import gc
import io
import json
import os
import stat
import sys
import textwrap
import tokenize
try:
    import tomllib  # Python 3.11 and later
except ModuleNotFoundError:  # Python 3.10: its backport, when installed
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None
from dataclasses import dataclass
from pathlib import Path

# --- the rule registry: the single source of truth for ids, docs and examples ------------------


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # one line: --list-rules and the docs' contents
    why: str  # what goes wrong, and what to write instead
    bad: str  # a snippet the rule flags; the flagged line carries a `# BUG:` comment
    good: str  # the fixed snippet; it lints clean
    check: object  # check(source) -> iterable of (node, message)


RULES = {}


def rule(id, summary, why, bad, good):
    """Register the decorated check under `id`, with its documentation and examples."""
    def register(check):
        RULES[id] = Rule(id, summary, " ".join(why.split()), textwrap.dedent(bad).strip() + "\n",
                         textwrap.dedent(good).strip() + "\n", check)
        return check
    return register


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    line: int
    message: str
    cell: int = None  # in a notebook: the cell (from 1), and line is the line in that cell

    def as_json(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def where(self):
        return f"{self.path}:cell {self.cell}:{self.line}" if self.cell is not None else f"{self.path}:{self.line}"


# --- what the rules know about torch ------------------------------------------------------------

ACTIVATIONS = {
    "torch.softmax": "softmax", "torch.nn.functional.softmax": "softmax", "torch.special.softmax": "softmax",
    "torch.log_softmax": "log_softmax", "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.special.expit": "sigmoid",
}
ACTIVATION_MODULES = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Sigmoid": "sigmoid"}
# methods that keep what a tensor holds (probabilities stay probabilities)
RESHAPES = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "contiguous",
            "float", "double", "half", "bfloat16", "to", "cpu", "cuda", "clone", "clamp", "clip",
            "view_as", "reshape_as", "type_as"}
LOSS_FUNCTIONS = {
    "cross_entropy": "ce", "nll_loss": "nll", "binary_cross_entropy_with_logits": "bce_logits",
    "binary_cross_entropy": "bce", "mse_loss": "other", "l1_loss": "other", "smooth_l1_loss": "other",
    "huber_loss": "other", "kl_div": "other", "poisson_nll_loss": "other", "gaussian_nll_loss": "other",
    "cosine_embedding_loss": "other", "margin_ranking_loss": "other", "ctc_loss": "other",
    "triplet_margin_loss": "other", "soft_margin_loss": "other", "multilabel_soft_margin_loss": "other",
    "hinge_embedding_loss": "other", "multi_margin_loss": "other", "multilabel_margin_loss": "other",
}
LOSS_MODULES = {"CrossEntropyLoss": "ce", "NLLLoss": "nll", "BCEWithLogitsLoss": "bce_logits", "BCELoss": "bce"}
# calls that hand back a value with no autograd history
DETACHING_METHODS = {"detach", "item", "numpy", "tolist"}
REWRAPS = {"torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.from_numpy"}
# tensor methods whose result carries the gradient of their inputs
TENSOR_METHODS = RESHAPES | {
    "mean", "sum", "abs", "pow", "exp", "log", "sqrt", "mul", "add", "sub", "div", "neg", "matmul",
    "masked_fill", "gather", "expand", "expand_as", "repeat", "norm", "logsumexp",
    "softmax", "log_softmax", "sigmoid", "tanh", "relu", "t", "square", "prod", "cumsum", "index_select",
}
# ops whose backward reads their own output, so that output must not change in place
SAVES_OUTPUT = {"torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.tanh": "tanh",
                "torch.nn.functional.tanh": "tanh", "torch.exp": "exp", "torch.sqrt": "sqrt", "torch.rsqrt": "rsqrt",
                "torch.relu": "relu", "torch.nn.functional.relu": "relu", "torch.softmax": "softmax",
                "torch.nn.functional.softmax": "softmax", "torch.log_softmax": "log_softmax",
                "torch.nn.functional.log_softmax": "log_softmax"}
SAVES_OUTPUT_METHODS = {"sigmoid", "tanh", "exp", "sqrt", "rsqrt", "relu", "softmax", "log_softmax"}
OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
             ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
NOT_INPLACE = {"requires_grad_", "share_memory_"}
GRAD_OFF = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
            "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}
GRAD_ON = {"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"}
SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
CLIPS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}
INPUT_GRADS = {"torch.autograd.grad", "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
               "torch.func.grad", "torch.func.vjp", "torch.func.jacrev"}
EVENT_NAMES = CLIPS | {"backward", "manual_backward", "zero_", "detach_", "step", "unscale_", "update", "eval", "train"}
DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
            "alpha_dropout": False, "feature_alpha_dropout": False}  # name -> default of `training`

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
NESTED = FUNCTIONS + (ast.ClassDef,)
SCOPES = NESTED + (ast.Module,)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
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
    """The call's argument at position `index` or named `name`, or None."""
    if any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return None
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


@dataclass(frozen=True)
class Event:
    kind: str  # backward step zero sched clip unscale update eval train
    node: ast.AST
    target: str = ""  # the optimizer or model the event acts on, as written
    subject: ast.AST = None  # that optimizer or model's expression
    scaler: bool = False  # step() through a GradScaler
    helper: bool = False  # seen inside a function of this file called here

    @property
    def pos(self):
        return position(self.node)


# --- one parsed file: imports, scopes, and the definitions that reach each use ------------------


def memo(method):
    """Cache a Source method's result per file and arguments (AST nodes hash by identity).

    The hot path of the whole linter (millions of calls on a big file): one dict per method, the argument
    tuple as the key, and a hit costs one lookup."""
    name = method.__name__

    def cached(self, *args):
        table = self._memo[name]
        try:
            return table[args]
        except KeyError:
            table[args] = value = method(self, *args)
            return value
    cached.__doc__ = method.__doc__
    return cached


class Source:
    """A parsed file with the lookups the rules share."""

    def __init__(self, tree, path="<string>", project=None):
        self.tree, self.path, self.project = tree, path, project
        self._memo = collections.defaultdict(dict)  # method name -> {arguments: result}
        self.nodes, self.parent, self.children = [tree], {}, {}
        self.by_type = collections.defaultdict(list)  # node class -> its nodes, breadth first
        for node in self.nodes:  # breadth first; the list grows as it is read
            self.by_type[type(node)].append(node)
            self.children[node] = children = list(ast.iter_child_nodes(node))
            for child in children:
                self.parent[child] = node
            self.nodes.extend(children)
        self.imports, self.star = {}, None
        for node in sorted(self.of_type(ast.Import, ast.ImportFrom), key=position):  # a later import wins
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    self.imports[alias.asname or root] = alias.name if alias.asname else root
            else:
                module = "." * node.level + (node.module or "")  # relative: `.model`, followed across files
                for alias in node.names:
                    if alias.name == "*":
                        self.star = module  # `from torch import *`: free names such as no_grad come from there
                    else:
                        self.imports[alias.asname or alias.name] = module + ("" if module.endswith(".") else ".") + alias.name
        self.scopes = self.of_type(*SCOPES)
        self.functions = {}
        for node in self.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
            self.functions.setdefault(node.name, []).append(node)
        self.classes = {}
        for node in self.of_type(ast.ClassDef):
            self.classes.setdefault(node.name, []).append(node)
        self.calls = self.of_type(ast.Call)
        self.calls_by_name = {}  # `f(...)`, `x.f(...)` by f: who calls a function of this file
        for call in self.calls:
            self.calls_by_name.setdefault(terminal(call.func), []).append(call)
        self.stored = {n.id for n in self.of_type(ast.Name) if not isinstance(n.ctx, ast.Load)} | {
            n.arg for n in self.of_type(ast.arg)} | set(self.functions) | set(self.classes)
        self.mentions_loss_class = any(name.endswith("Loss") for name in self.imports.values()) or \
            any(n.attr.endswith("Loss") for n in self.of_type(ast.Attribute))

    def of_type(self, *kinds):
        """The nodes of these classes: each class's breadth first, one class after the other."""
        return [node for kind in kinds for node in self.by_type.get(kind, ())]

    @memo
    def local(self, node):
        """node and everything inside it, without entering nested functions, lambdas or classes."""
        found, todo = [], [node]
        while todo:
            current = todo.pop()
            found.append(current)
            for child in self.children[current]:
                if isinstance(child, NESTED):
                    found.append(child)
                else:
                    todo.append(child)
        return found

    @memo
    def all_events(self):
        """Every event in the file, in no particular order."""
        return [e for n in self.of_type(ast.Call, ast.Assign) for e in self.classify(n)]  # the only kinds of event

    # -- names --------------------------------------------------------------------------------

    @memo
    def bindings(self, scope):
        """{name: [(position from which it holds, value or None when unknown)]} for one scope."""
        found = {}

        def bind(target, pos, value):
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append((pos, value))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for element in target.elts:
                    bind(element, pos, None)
            elif isinstance(target, ast.Starred):
                bind(target.value, pos, None)

        if isinstance(scope, FUNCTIONS):
            a = scope.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                bind(ast.Name(id=arg.arg), position(scope), None)
        for node in self.local(scope):
            if type(node) not in BINDERS or node is scope:
                continue  # one set lookup: most nodes bind nothing, and this loop sees every node of the file
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, end_position(node), node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                bind(node.target, end_position(node), node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                bind(node.target, end_position(node), self._augmented(node))
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, end_position(node), node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                bind(node.target, end_position(node.target), None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, end_position(node.optional_vars), None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(ast.Name(id=node.name), position(node), None)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bind(ast.Name(id=node.name), position(node), None)
        for bound in found.values():
            bound.sort(key=lambda b: b[0])
        return found

    def _augmented(self, node):
        """`x += v` read as the value `x + v`, placed where the statement is."""
        left = ast.copy_location(ast.Name(id=node.target.id, ctx=ast.Load()), node.target)
        value = ast.copy_location(ast.BinOp(left=left, op=node.op, right=node.value), node)
        self.parent[value] = node
        self.parent[left] = value
        return value

    @memo
    def class_attrs(self, cls):
        """{attr: [values]} for every `self.<attr> = value` in the class's methods."""
        attrs = {}
        for method in cls.body:
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
                me = method.args.args[0].arg
                for node in ast.walk(method):
                    targets = node.targets if isinstance(node, ast.Assign) else \
                        [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
                    for target in targets:
                        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me:
                            attrs.setdefault(target.attr, []).append(node.value)
        return attrs

    def scope(self, node):
        p = self.parent.get(node)
        while p is not None and not isinstance(p, SCOPES):
            p = self.parent.get(p)
        return p

    def function(self, node):
        """The function (or lambda) node runs in, or None at module level."""
        p = self.parent.get(node)
        while p is not None and not isinstance(p, FUNCTIONS):
            p = self.parent.get(p)
        return p

    def method(self, node):
        """The method of a class that node is inside, or None."""
        p = self.parent.get(node)
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(self.parent.get(p), ast.ClassDef):
                return p
            p = self.parent.get(p)
        return None

    @memo
    def definition(self, name):
        """The value last assigned to this name before its use, or None when unknown."""
        p = self.parent.get(name)
        while p is not None and not isinstance(p, SCOPES):
            if isinstance(p, COMPREHENSIONS) and any(
                    isinstance(n, ast.Name) and n.id == name.id for g in p.generators for n in ast.walk(g.target)):
                return None  # the comprehension's own variable
            p = self.parent.get(p)
        scope = self.scope(name)
        bound = self.bindings(scope).get(name.id)
        if bound:
            earlier = bisect.bisect_right(bound, position(name), key=lambda b: b[0])
            return bound[earlier - 1][1] if earlier else None
        while scope is not None and not isinstance(scope, ast.Module):
            scope = self.scope(scope)
            if isinstance(scope, ast.ClassDef):
                continue
            bound = self.bindings(scope).get(name.id)
            if bound:
                return bound[0][1] if len(bound) == 1 else None
        return None

    def self_attribute(self, node):
        """The value of `self.<attr>` when the class assigns it exactly once, else None."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            return None
        method = self.method(node)
        if method is None or not method.args.args or method.args.args[0].arg != node.value.id:
            return None
        values = self.class_attrs(self.parent[method]).get(node.attr, [])
        return values[0] if len(values) == 1 else None

    @memo
    def resolve(self, node):
        """Follow names and `self.x` attributes back to the expression that produced them."""
        seen = set()
        while id(node) not in seen:
            seen.add(id(node))
            value = self.definition(node) if isinstance(node, ast.Name) and node.id not in self.imports \
                else self.self_attribute(node) if isinstance(node, ast.Attribute) else None
            if value is None:
                return node
            node = value
        return node

    @memo
    def qualname(self, expr, depth=0):
        """The dotted name of an imported object: `F.softmax` -> `torch.nn.functional.softmax`."""
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name) or depth > 8:
            return None
        if expr.id in self.imports:
            base = self.imports[expr.id]
        elif self.star and expr.id not in self.stored:
            base = f"{self.star}.{expr.id}"
        else:
            value = self.definition(expr)
            base = self.qualname(value, depth + 1) if isinstance(value, (ast.Name, ast.Attribute)) else None
            if base is None:
                return None
        return ".".join([base, *reversed(parts)])

    def origin(self, expr):
        """The call that built the object expr refers to (`crit` -> `nn.CrossEntropyLoss()`), or None."""
        value = self.resolve(expr)
        return value if isinstance(value, ast.Call) else None

    def origin_name(self, expr):
        made = self.origin(expr)
        return (self.qualname(made.func) or "") if made is not None else ""

    # -- what an expression is ------------------------------------------------------------------

    def is_optimizer(self, expr):
        made = self.origin_name(expr).lower()
        if made:
            return "optim" in made and "sched" not in made and "swa" not in made
        hint = (terminal(expr) or "").lower()
        return "sched" not in hint and ("optim" in hint or hint == "opt" or hint.startswith("opt_") or hint.endswith("_opt"))

    def is_scheduler(self, expr):
        made = self.origin_name(expr).lower()
        return "sched" in made if made else "sched" in (terminal(expr) or "").lower()

    def is_scaler(self, expr):
        made = self.origin_name(expr)
        return made.endswith("GradScaler") if made else "scaler" in (terminal(expr) or "").lower()

    @memo
    def loss_call(self, call):
        """(kind, input) when call computes a loss, else None. kind: ce, nll, bce_logits, bce for those
        torch losses; other for the rest, and for a callable this file cannot trace that is named like
        a loss (criterion, loss_fn) and called as f(prediction, target)."""
        if not isinstance(call, ast.Call) or isinstance(call.func, ast.Attribute) and call.func.attr in TENSOR_METHODS:
            return None  # x.view(...), x.mean(...): a tensor method, never a loss (and most calls are these)
        name = self.qualname(call.func) or ""
        if name.startswith("torch.nn.functional.") and name.rsplit(".", 1)[1] in LOSS_FUNCTIONS:
            return LOSS_FUNCTIONS[name.rsplit(".", 1)[1]], argument(call, 0, "input")
        made = self.origin_name(call.func) if self.mentions_loss_class else ""
        if made.startswith("torch.nn.") and made.endswith("Loss"):
            return LOSS_MODULES.get(made.rsplit(".", 1)[1], "other"), argument(call, 0, "input")
        hint = (terminal(call.func) or "").lower()
        if not name and not made and len(call.args) == 2 and ("loss" in hint or "crit" in hint) and \
                self.origin(call.func) is None and not self.helpers(call):
            return "other", call.args[0]
        return None

    def loss_reduction(self, call):
        """The `reduction=` constant of a loss call (or of the loss module it calls), else None."""
        for holder in (call, self.origin(call.func)):
            value = keyword(holder, "reduction") if isinstance(holder, ast.Call) else None
            if isinstance(value, ast.Constant):
                return value.value
        return None

    def activation(self, node, depth=0):
        """(kind, where) when node holds the output of softmax, log_softmax or sigmoid (kind), applied
        at the node where; else None."""
        if depth > 12:
            return None
        if isinstance(node, ast.Name):
            value = self.definition(node)
            return self.activation(value, depth + 1) if value is not None else None
        if isinstance(node, ast.Subscript):
            return self.activation(node.value, depth + 1)
        if not isinstance(node, ast.Call):
            return None
        name = self.qualname(node.func)
        if name in ACTIVATIONS:
            return ACTIVATIONS[name], node
        if name in ("torch.log", "torch.special.log") and node.args:
            return self.logged(self.activation(node.args[0], depth + 1))
        if isinstance(node.func, ast.Attribute) and name is None:
            attr, receiver = node.func.attr, node.func.value
            if attr in ("softmax", "log_softmax", "sigmoid"):
                return attr, node
            if attr == "log":
                return self.logged(self.activation(receiver, depth + 1))
            if attr in RESHAPES:
                return self.activation(receiver, depth + 1)
        cls = self.self_class(node.func.value if isinstance(node.func, ast.Attribute) and node.func.attr == "forward"
                              else node.func)  # self(x) or self.forward(x)
        if cls is not None:
            return self.class_activation(cls, depth + 1)
        return self.module_activation(self.origin(node.func), depth + 1)

    @staticmethod
    def logged(found):
        """log() of a softmax is a log_softmax."""
        return ("log_softmax", found[1]) if found and found[0] == "softmax" else None

    def module_activation(self, made, depth):
        """The activation a module built by the call `made` ends with: nn.Softmax, a Sequential
        ending in one, or a class of this file whose forward always returns one."""
        if made is None or depth > 12:
            return None
        name = self.qualname(made.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.nn.") and last in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[last], made
        if name.startswith("torch.nn.") and last == "Sequential" and made.args and isinstance(made.args[-1], ast.Call):
            return self.module_activation(made.args[-1], depth + 1)
        if isinstance(made.func, ast.Name) and not name:
            classes = self.classes.get(made.func.id, [])
            if classes:
                return self.class_activation(classes[0], depth + 1) if len(classes) == 1 else None
            factories = self.helpers(made)  # model = build_model()
            return self.factory_activation(factories[0], depth + 1) if factories else None
        imported = self.project.find(self.path, name) if self.project and name and "torch" not in name else None
        if imported is not None:  # `from model import Net`: Net's forward in model.py, a file of this run
            other, definition = imported
            found = other.class_activation(definition, depth + 1) if isinstance(definition, ast.ClassDef) \
                else other.factory_activation(definition, depth + 1)
            return (found[0], found[1] if isinstance(found[1], Elsewhere) else Elsewhere(other.path, found[1].lineno)) \
                if found else None
        return None

    def factory_activation(self, function, depth):
        """The activation the module every return of a factory function builds ends with, else None."""
        returns = [r.value for r in self.local(function) if isinstance(r, ast.Return) and r.value is not None]
        found = [self.module_activation(self.origin(value), depth + 1) for value in returns]
        kinds = {f[0] if f else None for f in found}
        return found[0] if found and len(kinds) == 1 and None not in kinds else None

    def class_activation(self, cls, depth):
        """The activation every return of cls.forward applies (reported at the first), else None."""
        forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
        returns = [n for n in self.local(forward) if isinstance(n, ast.Return)] if forward else []
        found = [self.activation(r.value, depth + 1) if r.value is not None else None for r in returns]
        kinds = {f[0] if f else None for f in found}
        return found[0] if found and len(kinds) == 1 and None not in kinds else None

    def self_class(self, name):
        """The class whose method has `name` as its self parameter (`self(x)` in a LightningModule), else None."""
        method = self.method(name) if isinstance(name, ast.Name) else None
        if method is not None and method.args.args and method.args.args[0].arg == name.id:
            return self.parent[method]
        return None

    # -- autograd mode --------------------------------------------------------------------------

    def grad_switch(self, expr):
        """False for a context or decorator that turns autograd off, True for one that turns it on, else None."""
        call = expr if isinstance(expr, ast.Call) else None
        name = self.qualname(call.func if call else expr)
        if name in GRAD_OFF:
            mode = argument(call, 0, "mode") if call else None
            return is_false(mode)  # inference_mode(False) leaves autograd on
        if name in GRAD_ON:
            return True
        if name in SET_GRAD and call:
            mode = argument(call, 0, "mode")
            return bool(mode.value) if isinstance(mode, ast.Constant) else None
        return None

    @memo
    def grad_off(self, node, callers=False):
        """True when node runs with autograd off: inside `with torch.no_grad():` (or inference_mode,
        set_grad_enabled(False)) or in a function decorated with one. With callers, also when an
        earlier torch.set_grad_enabled(False) statement or a caller in this file turns it off."""
        child, p = node, self.parent.get(node)
        while p is not None:
            if isinstance(p, (ast.With, ast.AsyncWith)) and any(child is s for s in p.body):
                for item in reversed(p.items):
                    switch = self.grad_switch(item.context_expr)
                    if switch is not None:
                        return not switch
            if isinstance(p, FUNCTIONS):
                for decorator in getattr(p, "decorator_list", []):
                    switch = self.grad_switch(decorator)
                    if switch is not None:
                        return not switch
                return callers and (self._set_grad_off_before(p, node) or self._called_with_grad_off(p))
            child, p = p, self.parent.get(p)
        return callers and self._set_grad_off_before(self.tree, node)

    @memo
    def _set_grad_off_before(self, scope, node):
        return any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and self.grad_switch(n.value) is False
                   and position(n) < position(node) for n in self.local(scope))

    @memo
    def _called_with_grad_off(self, function):
        name = getattr(function, "name", None)
        return name is not None and any(self.grad_off(call) for call in self.calls_by_name.get(name, []))

    # -- training-loop events ---------------------------------------------------------------------

    def classify(self, node):
        """The training-loop events a single node is (usually none, at most one). Not cached itself: it
        runs for every node the rules walk, and most are neither calls nor assignments."""
        kind = type(node)
        if kind is ast.Call:
            return self._classify_call(node)
        if kind is ast.Assign and isinstance(node.value, ast.Constant) and node.value.value is None and \
                any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets):
            return [Event("zero", node)]
        return []

    @memo
    def _classify_call(self, node):
        func = node.func
        receiver = func.value if isinstance(func, ast.Attribute) else None
        name = terminal(func) or ""
        if isinstance(func, ast.Name) and func.id in self.imports:
            name = self.imports[func.id].rsplit(".", 1)[-1]  # from torch.nn.utils import clip_grad_norm_ as clip
        if name not in EVENT_NAMES and "zero_grad" not in name:
            if name == "context" and self.qualname(func) == "torch.distributed.autograd.context":
                return [Event("zero", node)]  # each distributed-autograd context starts with no gradients
            return []
        if name in ("backward", "manual_backward") and receiver is not None:
            return [Event("backward", node)]
        if "zero_grad" in name:
            return [Event("zero", node, ast.unparse(receiver), receiver) if receiver is not None else Event("zero", node)]
        if name in ("zero_", "detach_") and isinstance(receiver, ast.Attribute):
            grad = receiver.value if receiver.attr == "data" and isinstance(receiver.value, ast.Attribute) else receiver
            return [Event("zero", node)] if grad.attr == "grad" else []
        if name in CLIPS:
            return [Event("clip", node)]
        if receiver is None:
            return []
        if name == "step":
            if self.is_scaler(receiver) and node.args:
                return [Event("step", node, ast.unparse(node.args[0]), node.args[0], scaler=True)]
            if self.is_optimizer(receiver):
                return [Event("step", node, ast.unparse(receiver), receiver)]
            if self.is_scheduler(receiver):
                return [Event("sched", node, ast.unparse(receiver))]
        if name == "unscale_":
            return [Event("unscale", node)]
        if name == "update" and self.is_scaler(receiver):
            return [Event("update", node)]
        if name == "eval" and not node.args and not node.keywords:
            return [Event("eval", node, ast.unparse(receiver))]
        if name == "train":
            mode = argument(node, 0, "mode")
            return [Event("eval" if is_false(mode) else "train", node, ast.unparse(receiver))]
        return []

    @memo
    def helpers(self, call):
        """The function of this file that `call` runs (`name(...)` or `self.method(...)`), as a list of
        zero or one. Of several functions with that name, the one defined last before the call in a scope
        around it (else the first): one per call keeps the analysis linear in the file's size."""
        func = call.func
        if isinstance(func, ast.Name):
            around = set()
            scope = self.scope(call)
            while scope is not None:
                around.add(scope)
                scope = self.scope(scope)
            found = sorted((f for f in self.functions.get(func.id, []) if self.scope(f) in around), key=position)
            before = [f for f in found if position(f) < position(call)]
            return (before[-1:] or found[:1])
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            method = self.method(call)
            if method is not None and method.args.args and method.args.args[0].arg == func.value.id:
                return [f for f in self.parent[method].body
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == func.attr]
        return []

    def reach(self, node):
        """node's own nodes, then those of the functions of this file it calls, transitively."""
        seen, todo = set(), [node]
        while todo:
            for sub in self.local(todo.pop()):
                yield sub
                if isinstance(sub, ast.Call):
                    for helper in self.helpers(sub):
                        if helper not in seen:
                            seen.add(helper)
                            todo.append(helper)

    @memo
    def kinds(self, function):
        """The kinds of event anywhere in a function of this file (and what it calls)."""
        return {e.kind for n in self.reach(function) for e in self.classify(n)}

    @memo
    def events(self, container):
        """The events inside container in source order; a call to a helper of this file that
        calls backward() (steps an optimizer, unscales a GradScaler) counts as one at the call."""
        found = []
        for node in self.local(container):
            found.extend(self.classify(node))
            if isinstance(node, ast.Call):
                kinds = set().union(*(self.kinds(f) for f in self.helpers(node)))
                found += [Event(kind, node, helper=True) for kind in ("backward", "step", "unscale") if kind in kinds]
        return sorted(found, key=lambda e: e.pos)

    @memo
    def reach_kinds(self, container):
        return {e.kind for n in self.reach(container) for e in self.classify(n)}

    def is_loop(self, node):
        """A loop, or a method named training_step (a framework such as Lightning calls it once per batch)."""
        return isinstance(node, LOOPS) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
            node.name == "training_step" and isinstance(self.parent.get(node), ast.ClassDef)

    @memo
    def loops_over(self):
        """{(place, name or attribute as written): the for loops there whose iterable mentions it}. The place
        is the function the loop runs in, or for `self.x` the class of its method: a name means that object
        only there, and the index keeps the lookups constant-time however often a file repeats a name."""
        found = {}
        for loop in self.loops():
            if isinstance(loop, (ast.For, ast.AsyncFor)):
                for name in {dotted(n) for n in ast.walk(loop.iter)} - {None}:
                    found.setdefault((self.place(loop, name), name), []).append(loop)
        return found

    def place(self, node, name):
        """Where `name` used at node means one object: its class for `self.x`, else its function."""
        method = self.method(node) if name.startswith("self.") else None
        return self.parent.get(method) if method is not None else self.function(node)

    @memo
    def loops(self):
        return [node for node in self.of_type(*LOOPS, ast.FunctionDef, ast.AsyncFunctionDef) if self.is_loop(node)]

    def enclosing_loops(self, node):
        """The loops around node inside its function, innermost first (training_step counts as one)."""
        found, p = [], self.parent.get(node)
        while p is not None:
            if self.is_loop(p):
                found.append(p)
            if isinstance(p, NESTED):
                break
            p = self.parent.get(p)
        return found

    def backward_target(self, call):
        """The tensor a backward call differentiates: `loss` in loss.backward(),
        accelerator.backward(loss), scaler.scale(loss).backward()."""
        func = call.func
        receiver = func.value if isinstance(func, ast.Attribute) else None
        hint = (terminal(receiver) or "").lower() if receiver is not None else ""
        library = any(w in self.origin_name(receiver).lower() for w in ("accelerat", "fabric", "deepspeed")) \
            if receiver is not None else False
        if terminal(func) == "manual_backward" or receiver is None or library or \
                hint in ("accelerator", "fabric", "engine", "model_engine") or \
                self.qualname(func) == "torch.autograd.backward":
            target = call.args[0] if call.args else None
        else:
            target = receiver
        if method_call(target, "scale") and self.is_scaler(target.func.value) and target.args:
            target = target.args[0]
        return target


# --- the rules ---------------------------------------------------------------------------------------

@rule(
    "softmax-into-ce",
    "Softmax or log_softmax output passed to CrossEntropyLoss / F.cross_entropy, which expect raw logits.",
    """cross_entropy applies log_softmax itself. Fed probabilities, it computes log_softmax(softmax(z)):
    the loss can no longer approach 0, its gradient shrinks as the model grows confident, and
    training stalls at a mediocre accuracy without any error. Fed log_softmax output, it gives the
    right number only because log_softmax is idempotent, which hides a confusion with NLLLoss.
    Pass the logits; apply softmax only where you need probabilities (metrics, sampling).""",
    """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        probs = model(x).softmax(dim=-1)
        loss = criterion(probs, y)  # BUG: probabilities, not logits
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """,
    """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        logits = model(x)
        loss = criterion(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """,
)
def check_softmax_into_ce(src):
    for call in src.calls:
        loss = src.loss_call(call)
        found = src.activation(loss[1]) if loss and loss[0] == "ce" and loss[1] is not None else None
        if found and found[0] == "softmax":
            yield call, (f"cross_entropy applies log_softmax itself, so the output of the softmax at "
                         f"{place(found[1])} is squashed twice: the gradient vanishes as the model gets confident and "
                         f"training stalls. Pass the raw logits; keep softmax for predictions.")
        elif found and found[0] == "log_softmax":
            yield call, (f"cross_entropy applies log_softmax itself; on log_softmax output ({place(found[1])}) the "
                         f"value comes out right only because log_softmax is idempotent. Pass the raw logits to "
                         f"cross_entropy, or use nll_loss on the log-probabilities.")


@rule(
    "probs-into-nll",
    "Softmax output (probabilities) passed to NLLLoss / F.nll_loss, which expect log-probabilities.",
    """nll_loss only picks out minus the input at the target class. On probabilities that is -p,
    which is bounded in [-1, 0], rewards confidence linearly instead of logarithmically and gives
    tiny gradients: the model trains, badly, without any error. Use log_softmax before nll_loss,
    or pass logits to cross_entropy.""",
    """
    import torch.nn.functional as F

    probs = F.softmax(model(x), dim=-1)
    loss = F.nll_loss(probs, y)  # BUG: nll_loss wants log-probabilities
    """,
    """
    import torch.nn.functional as F

    log_probs = F.log_softmax(model(x), dim=-1)
    loss = F.nll_loss(log_probs, y)
    """,
)
def check_probs_into_nll(src):
    for call in src.calls:
        loss = src.loss_call(call)
        found = src.activation(loss[1]) if loss and loss[0] == "nll" and loss[1] is not None else None
        if found and found[0] == "softmax":
            yield call, (f"nll_loss expects log-probabilities; on softmax output ({place(found[1])}) it computes "
                         f"-p, a bounded loss with tiny gradients. Use log_softmax instead of softmax (or cross_entropy "
                         f"on logits).")


@rule(
    "sigmoid-into-bce-logits",
    "Sigmoid output passed to BCEWithLogitsLoss / F.binary_cross_entropy_with_logits, which apply the sigmoid themselves.",
    """The with-logits losses apply a sigmoid internally. Fed sigmoid output, every prediction is
    squeezed into (0.5, 0.73), the loss cannot go below about 0.31 for positives, and the model
    learns slowly and calibrates wrongly, silently. Pass the logits; apply sigmoid only for
    predictions.""",
    """
    import torch
    import torch.nn as nn

    criterion = nn.BCEWithLogitsLoss()
    pred = torch.sigmoid(model(x))
    loss = criterion(pred, y)  # BUG: the sigmoid is applied twice
    """,
    """
    import torch
    import torch.nn as nn

    criterion = nn.BCEWithLogitsLoss()
    logits = model(x)
    loss = criterion(logits, y)
    pred = torch.sigmoid(logits)  # for metrics only
    """,
)
def check_sigmoid_into_bce_logits(src):
    for call in src.calls:
        loss = src.loss_call(call)
        found = src.activation(loss[1]) if loss and loss[0] == "bce_logits" and loss[1] is not None else None
        if found and found[0] == "sigmoid":
            yield call, (f"BCEWithLogitsLoss applies the sigmoid itself; this sigmoid output ({place(found[1])}) "
                         f"gets a second one, so predictions are stuck in (0.5, 0.73). Pass the raw logits.")


@rule(
    "softmax-no-dim",
    "F.softmax / F.log_softmax / nn.Softmax without dim=, which picks a dimension that depends on the input's rank.",
    """Without dim, PyTorch uses dim 0 for 0-D, 1-D and 3-D inputs and dim 1 otherwise (with a
    deprecation warning that is easy to miss). For a (batch, time, vocab) tensor that normalises
    across the batch: every number is a valid-looking probability and the model trains on
    nonsense. Always pass dim, usually dim=-1.""",
    """
    import torch.nn.functional as F

    logits = model(tokens)  # (batch, time, vocab)
    log_probs = F.log_softmax(logits)  # BUG: no dim; a 3-D input is normalised over the batch
    """,
    """
    import torch.nn.functional as F

    logits = model(tokens)  # (batch, time, vocab)
    log_probs = F.log_softmax(logits, dim=-1)
    """,
)
def check_softmax_no_dim(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        if has_star_kwargs(call) or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        if name.startswith("torch.nn.functional.") and last in ("softmax", "log_softmax", "softmin") \
                and len(call.args) < 2 and keyword(call, "dim") is None:
            yield call, (f"{last} without dim uses dim 0 for 1-D and 3-D inputs and dim 1 otherwise; for "
                         f"(batch, time, classes) that normalises across the batch. Pass dim explicitly (usually dim=-1).")
        elif name.startswith("torch.nn.") and last in ("Softmax", "LogSoftmax", "Softmin") \
                and not call.args and keyword(call, "dim") is None:
            yield call, (f"nn.{last}() without dim picks the dimension from the input's rank (dim 0 for 3-D input, "
                         f"across the batch). Pass dim explicitly, e.g. nn.{last}(dim=-1).")


@rule(
    "missing-zero-grad",
    "A training loop calls backward() and optimizer.step() but never zeroes the gradients.",
    """backward() adds into .grad. Without zero_grad() each step applies the sum of every
    gradient since the start: the effective learning rate grows every iteration and the loss
    first drops, then oscillates or diverges, with nothing to say why. Call
    optimizer.zero_grad(set_to_none=True) (or model.zero_grad(), or set p.grad = None) once per
    optimizer step. Accumulating over micro-batches is fine: zero after the step.""",
    """
    import torch.nn.functional as F

    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # BUG: gradients from earlier batches are still there
        optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """,
)
def check_missing_zero_grad(src):
    trains = {loop: {"backward", "step"} <= src.reach_kinds(loop) for loop in src.loops()}
    for loop, training in trains.items():
        if not training or any(n is not loop and trains.get(n) for n in src.reach(loop)):
            continue
        local = {id(n) for n in src.local(loop)}
        zeros = [e for n in src.reach(loop) for e in src.classify(n) if e.kind == "zero"]
        if not zeros:
            first = next(e for e in src.events(loop) if e.kind in ("backward", "step"))
            yield first.node, ("this loop calls backward() and optimizer.step() but never zero_grad(): gradients add "
                               "up across iterations, so every step uses the sum of all past gradients. Call "
                               "optimizer.zero_grad(set_to_none=True) once per optimizer step.")
            continue
        if any(id(z.node) not in local or z.subject is None or not src.is_optimizer(z.subject) for z in zeros):
            continue  # model.zero_grad(), p.grad = None or a helper: taken to cover every optimizer
        for step in (e for e in src.events(loop) if e.kind == "step" and not e.helper):
            if not any(same_object(src, step.subject, z.subject) for z in zeros):
                yield step.node, (f"{step.target} is stepped in this loop but {step.target}.zero_grad() is never "
                                  f"called: its gradients add up across iterations. Call {step.target}.zero_grad() "
                                  f"once per step.")


def same_object(src, a, b):
    """a and b are written the same, or were built by the same call."""
    return ast.unparse(a) == ast.unparse(b) or src.origin(a) is not None and src.origin(a) is src.origin(b)


def jump_after(src, node):
    """The break, continue, return or raise that follows node's statement in the same block, or None."""
    stmt = node
    while not isinstance(stmt, ast.stmt):
        stmt = src.parent[stmt]
    parent = src.parent[stmt]
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            later = block[[id(s) for s in block].index(id(stmt)) + 1:]
            return next((s for s in later if isinstance(s, (ast.Break, ast.Continue, ast.Return, ast.Raise))), None)
    return None


@rule(
    "zero-grad-before-step",
    "zero_grad() runs between backward() and optimizer.step(), so the step sees zero gradients.",
    """When zero_grad() comes after backward() (or step() comes before the next backward()), the
    optimizer steps on gradients that were just cleared. The parameters do not move (or, with
    weight decay or momentum, drift without learning) while the loss is computed and logged as
    usual. The order is zero_grad(), forward, backward(), step().""",
    """
    import torch.nn.functional as F

    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # BUG: wipes the gradients backward() just computed
        optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """,
)
def check_zero_grad_before_step(src):
    for zero in (e for e in src.all_events() if e.kind == "zero" and isinstance(e.node, ast.Call)):
        loops = src.enclosing_loops(zero.node)
        container = loops[0] if loops else src.function(zero.node) or src.tree
        optimizer_zeroed = zero.target and src.is_optimizer(zero.node.func.value)
        events = [e for e in src.events(container) if e.kind == "backward" or e.kind == "step"
                  and not e.helper and (not optimizer_zeroed or e.target == zero.target)]
        if not any(e.kind == "backward" for e in events):
            continue
        jump = jump_after(src, zero.node)
        if jump is not None and not isinstance(jump, ast.Continue):
            continue  # break, return or raise: nothing after it runs
        later = [e for e in events if e.pos > zero.pos] if jump is None else []
        after = later + (events if loops else [])  # then round the loop again
        if after and after[0].kind == "step":
            yield zero.node, (f"{after[0].target or 'the optimizer'}.step() at line {after[0].pos[0]} runs after this "
                              f"zero_grad() with no backward() in between, so it steps on zeroed gradients and the "
                              f"model does not learn. Order: zero_grad(), forward, backward(), step().")


@rule(
    "scheduler-before-optimizer",
    "scheduler.step() comes before optimizer.step() in the same loop.",
    """Since PyTorch 1.1 the learning-rate scheduler must step after the optimizer. Stepping it
    first skips the first value of the schedule (the warmup start, or the whole first epoch at
    the base rate) and shifts every later change one period early. PyTorch warns once, and the
    run carries on. Call scheduler.step() after optimizer.step(). A scheduler step under an if
    (at an epoch boundary, say) is not flagged: the condition may already skip the first pass.""",
    """
    import torch.nn.functional as F
    from torch.optim.lr_scheduler import StepLR

    scheduler = StepLR(optimizer, step_size=30)
    for epoch in range(90):
        scheduler.step()  # BUG: runs before this epoch's optimizer.step()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.optim.lr_scheduler import StepLR

    scheduler = StepLR(optimizer, step_size=30)
    for epoch in range(90):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        scheduler.step()
    """,
)
def check_scheduler_before_optimizer(src):
    for sched in (e for e in src.all_events() if e.kind == "sched"):
        for loop in src.enclosing_loops(sched.node):
            steps = [e for e in src.events(loop) if e.kind == "step"]
            if steps:
                if sched.pos < steps[0].pos and not guarded(src, sched.node, loop):
                    stepper = f"{steps[0].target}.step()" if steps[0].target else "the optimizer step"
                    yield sched.node, (f"{sched.target}.step() runs before {stepper} (line {steps[0].pos[0]}) in this "
                                       f"loop, so the schedule skips its first value and runs one period early. Call "
                                       f"it after optimizer.step().")
                break


def guarded(src, node, loop):
    """node sits under an `if` inside loop that may skip the first pass (`if step % n == 0: scheduler.step()`),
    not one that only asks whether the scheduler exists (`if scheduler:`, `if scheduler is not None:`)."""
    subject = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else None
    p = src.parent[node]
    while p is not loop:
        if isinstance(p, ast.If) and not only_tests(p.test, subject):
            return True
        p = src.parent[p]
    return False


def only_tests(test, subject):
    """test checks nothing but that subject exists: `subject`, `subject is not None`, and of those."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(only_tests(v, subject) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) and \
            isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return ast.unparse(test) == subject


@rule(
    "clip-grad-order",
    "clip_grad_norm_ / clip_grad_value_ called before backward() or after optimizer.step().",
    """Clipping acts on whatever is in .grad at that moment. Before backward() it clips the
    previous iteration's (or zeroed) gradients and the new ones reach the optimizer unclipped;
    after step() the update has already happened. Either way clipping silently does nothing and
    the spikes it was meant to stop get through. Clip between backward() and step().""",
    """
    import torch.nn.functional as F
    from torch.nn.utils import clip_grad_norm_

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        clip_grad_norm_(model.parameters(), 1.0)  # BUG: the new gradients do not exist yet
        loss.backward()
        optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.nn.utils import clip_grad_norm_

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    """,
)
def check_clip_grad_order(src):
    for clip in (e for e in src.all_events() if e.kind == "clip"):
        for loop in src.enclosing_loops(clip.node):
            events = [e for e in src.events(loop) if e.kind in ("backward", "step")]
            if not any(e.kind == "backward" for e in events):
                continue
            before = [e for e in events if e.pos < clip.pos]
            previous = (before or events)[-1]  # wrapping round: the end of the previous iteration
            if previous.kind == "step" and not any(e.kind == "backward" for e in before):
                yield clip.node, ("gradients are clipped before backward() has produced this iteration's gradients, "
                                  "so the ones the optimizer uses are never clipped. Clip after backward() and before step().")
            elif previous.kind == "step":
                stepper = f"{previous.target}.step()" if previous.target else "the optimizer step"
                yield clip.node, (f"gradients are clipped after {stepper} (line {previous.pos[0]}) has already used "
                                  f"them. Clip after backward() and before step().")
            break


def branches(src, node):
    """{if statement: 'body' or 'orelse'} for each if that node sits in."""
    found, child, p = {}, node, src.parent.get(node)
    while p is not None:
        if isinstance(p, ast.If) and child is not p.test:
            found[p] = "body" if any(child is s for s in p.body) else "orelse"
        child, p = p, src.parent.get(p)
    return found


def exclusive(src, a, b):
    """a and b sit in different branches of one if: they never run in the same pass."""
    left, right = branches(src, a), branches(src, b)
    return any(right.get(statement, side) != side for statement, side in left.items())


@rule(
    "clip-before-unscale",
    "With a GradScaler, clip_grad_norm_ runs on still-scaled gradients (no scaler.unscale_ first).",
    """With mixed precision, .grad holds gradients multiplied by the loss scale (65536 at the
    start). Clipping them to a norm of 1.0 clips nearly every step, by a factor that changes
    whenever the scale does: the effective learning rate becomes erratic, with no error.
    Call scaler.unscale_(optimizer) before clipping.""",
    """
    import torch
    import torch.nn.functional as F

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast('cuda'):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: clips the scaled gradients
        scaler.step(optimizer)
        scaler.update()
    """,
    """
    import torch
    import torch.nn.functional as F

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast('cuda'):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """,
)
def check_clip_before_unscale(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        if not name.startswith("torch.nn.utils.") or name.rsplit(".", 1)[-1] not in CLIPS:
            continue
        for loop in src.enclosing_loops(call) or [src.function(call) or src.tree]:
            events = [e for e in src.events(loop) if not exclusive(src, e.node, call)]  # not `if amp: ... else: ...`
            if any(e.kind == "step" and e.scaler for e in events):
                if not any(e.kind == "unscale" and e.pos < position(call) for e in events):
                    yield call, ("the GradScaler's gradients are still multiplied by the loss scale here, so this "
                                 "clips almost every step by a varying factor. Call scaler.unscale_(optimizer) "
                                 "before clipping.")
                break


@rule(
    "scaler-without-update",
    "A loop (or a function that runs a whole step: backward, then scaler.step) never calls scaler.update().",
    """GradScaler skips a step whose gradients contain inf or NaN, and update() is what lowers
    the scale afterwards. Without update() the scale never changes: after the first overflow
    every following step is skipped too and the model stops learning while the loop keeps
    running. Call scaler.update() after every scaler.step(optimizer).""",
    """
    import torch

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)  # BUG: the scale is never adjusted
    """,
    """
    import torch

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
    """,
)
def check_scaler_without_update(src):
    for step in (e for e in src.all_events() if e.kind == "step" and e.scaler):
        loops = src.enclosing_loops(step.node)
        loop = next((l for l in loops if "backward" in src.reach_kinds(l)), loops[0] if loops else None)
        function = src.function(step.node)
        if loop is None and function is not None and "backward" in src.reach_kinds(function):
            loop = function  # a whole per-batch step (a scaler wrapper's __call__, train_step): update belongs in it
        if loop is not None and "update" not in src.reach_kinds(loop):  # `for opt in opts: scaler.step(opt)`
            yield step.node, ("scaler.step() without scaler.update() in the loop: the loss scale never adapts, and "
                              "after one overflow every later step is skipped. Call scaler.update() after scaler.step().")



LIVE, CONST = ("live", None, ""), ("const", None, "")


def combine(results):
    """A value built from several: it carries a gradient if any part does."""
    results = list(results)
    if any(r[0] == "live" for r in results):
        return LIVE
    return next((r for r in results if r[0] == "cut"), CONST)


def flow(src, node, seen=None, depth=0):
    """Can the value of node carry a gradient back to the model? ('live', None, ''), ('const', None, ''),
    or ('cut', where, why) with why 'detach' (.item(), .detach(), torch.tensor(...), ...) or 'no_grad'.
    Anything the analysis cannot follow, or would follow further than 64 steps, counts as live."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen or depth > 64:
        return LIVE
    seen.add(id(node))
    result = _flow(src, node, seen, depth + 1)
    if result[0] == "live" and isinstance(node, (ast.Call, ast.BinOp)) and src.grad_off(node):
        return ("cut", node, "no_grad")
    return result


def _flow(src, node, seen, depth):
    if isinstance(node, ast.Constant):
        return CONST
    if isinstance(node, ast.Name):
        return flow(src, src.definition(node), seen, depth) if node.id not in src.imports else LIVE
    if isinstance(node, ast.Attribute):
        if node.attr == "data":
            return ("cut", node, "detach")
        return flow(src, node.value, seen, depth)  # `outputs.loss` holds a graph when outputs does
    if isinstance(node, (ast.Subscript, ast.Starred)):
        return flow(src, node.value, seen, depth)
    if isinstance(node, ast.UnaryOp):
        return flow(src, node.operand, seen, depth)
    if isinstance(node, ast.BinOp):
        return combine([flow(src, node.left, seen, depth), flow(src, node.right, seen, depth)])
    if isinstance(node, (ast.Tuple, ast.List)):
        return combine(flow(src, e, seen, depth) for e in node.elts)
    if isinstance(node, ast.IfExp):
        return combine([flow(src, node.body, seen, depth), flow(src, node.orelse, seen, depth)])
    if not isinstance(node, ast.Call):
        return LIVE
    func, args = node.func, node.args + [kw.value for kw in node.keywords]
    name = src.qualname(func)
    if method_call(node, *DETACHING_METHODS) and name is None:
        return ("cut", node, "detach")
    if name in REWRAPS or (name or "").startswith("numpy."):
        inner = combine(flow(src, a, seen, depth) for a in args)
        return inner if inner[0] != "live" else ("cut", node, "detach")  # report the first cut, nearest the model
    if isinstance(func, ast.Name) and func.id in ("float", "int") and name is None and src.definition(func) is None:
        return ("cut", node, "detach")
    loss = src.loss_call(node)
    if loss:
        return flow(src, loss[1], seen, depth)
    if name is not None:
        return combine(flow(src, a, seen, depth) for a in args)
    if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
        return combine(flow(src, a, seen, depth) for a in [func.value, *args])
    return LIVE


def cut_label(src, node):
    """How a cut is written, for messages: `.item()`, `.data`, `torch.tensor(...)`."""
    if isinstance(node, ast.Attribute):
        return ".data"
    if method_call(node, *DETACHING_METHODS) and src.qualname(node.func) is None:
        return f".{node.func.attr}()"
    return f"{src.qualname(node.func) or terminal(node.func)}(...)"


def backward_calls(src, scope=None):
    """(call, target) for each backward() call in scope (the whole file by default)."""
    events = src.all_events() if scope is None else src.events(scope)
    for event in events:
        if event.kind == "backward" and not event.helper:
            yield event.node, src.backward_target(event.node)


@rule(
    "detached-loss",
    "The loss reaches the model only through .detach(), .item(), .numpy(), .data or a torch.tensor(...) re-wrap.",
    """These return values without autograd history. When the only path from the loss back to the
    model goes through one, no gradient reaches the model: backward() fails with a does-not-require-grad
    error, or, when the value was re-wrapped as torch.tensor(..., requires_grad=True), runs fine
    and trains nothing while the loss is logged as usual. Keep the computation in torch ops on the
    original tensors. Detaching one term on purpose (a target, a teacher's output) is fine: the
    rule fires only when every path is cut.""",
    """
    import torch

    out = model(x)
    error = out.detach().cpu().numpy() - y_np
    loss = torch.tensor((error ** 2).mean(), requires_grad=True)  # BUG: a new leaf, cut off from the model
    loss.backward()
    """,
    """
    import torch

    out = model(x)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    """,
)
def check_detached_loss(src):
    reported = set()
    for call, target in backward_calls(src):
        state, where, why = flow(src, target)
        if state == "cut" and why == "detach" and where not in reported:
            reported.add(where)
            yield where, (f"the loss backpropagated at line {call.lineno} depends on the model only through "
                          f"{cut_label(src, where)} here, which has no autograd history: no gradient reaches the "
                          f"model, so backward() fails or trains nothing. Keep the loss in torch ops on the original tensors.")


def summands(src, node, depth=0):
    """The terms a loss is the sum (or difference) of, following names: `a + 0.1 * b` -> [a, 0.1 * b]."""
    if depth > 16 or node is None:
        return []
    if isinstance(node, ast.Name):
        value = src.definition(node)
        return summands(src, value, depth + 1) if isinstance(value, (ast.BinOp, ast.Name)) else [node]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return summands(src, node.left, depth + 1) + summands(src, node.right, depth + 1)
    return [node]


def looks_like_loss(src, expr):
    """expr is a loss: a loss call, a name bound to one, or a name that says loss."""
    expr = expr.func.value if method_call(expr, *DETACHING_METHODS) else expr
    value = src.resolve(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else expr
    return bool(src.loss_call(value)) or "loss" in (terminal(expr) or "").lower()


@rule(
    "detached-loss-term",
    "A term of the loss is cut from the graph (loss_b.detach(), .item(), .data) and added to the terms that train.",
    """A term added as aux_loss.item() or aux_loss.detach() is a constant to autograd: it shows in
    the logged loss, but its gradient is zero, so that part of the objective never trains (the
    auxiliary head, the KL term, the regulariser stays where it started). Add the tensor itself.
    A detached target inside a loss (F.mse_loss(pred, target.detach())) or a detached divisor
    (loss / loss.detach()) is not a term and is not flagged.""",
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad()
        logits, aux_logits = model(x)
        main_loss = F.cross_entropy(logits, y)
        aux_loss = F.cross_entropy(aux_logits, y)
        loss = main_loss + 0.4 * aux_loss.item()  # BUG: the auxiliary head gets no gradient
        loss.backward()
        optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad()
        logits, aux_logits = model(x)
        main_loss = F.cross_entropy(logits, y)
        aux_loss = F.cross_entropy(aux_logits, y)
        loss = main_loss + 0.4 * aux_loss
        loss.backward()
        optimizer.step()
    """,
)
def check_detached_loss_term(src):
    reported = set()
    for call, target in backward_calls(src):
        terms = summands(src, target)
        flows = [flow(src, t) for t in terms]
        if not any(f[0] == "live" for f in flows):
            continue  # wholly cut: detached-loss says so
        for term, (state, where, why) in zip(terms, flows):
            if state != "cut" or why != "detach" or where in reported:
                continue
            inner = where.func.value if isinstance(where, ast.Call) and isinstance(where.func, ast.Attribute) else \
                where.value if isinstance(where, ast.Attribute) else where.args[0] if where.args else None
            if inner is not None and looks_like_loss(src, inner):
                reported.add(where)
                yield where, (f"{ast.unparse(inner)} enters the loss backpropagated at line {call.lineno} through "
                              f"{cut_label(src, where)}, which has no autograd history: this term shows in the logged "
                              f"loss but trains nothing. Add {ast.unparse(inner)} itself.")


@rule(
    "backward-under-no-grad",
    "backward() on a loss computed under torch.no_grad() / inference_mode (or in a function decorated with one).",
    """Under no_grad nothing records a graph, so the loss has no history: backward() raises, or, if
    the code was rearranged until the error went away, trains nothing. This usually comes from an
    evaluation helper copied into the training step, or a @torch.no_grad() decorator left on it.
    Compute the forward pass and the loss with autograd on. (Calling backward() inside a no_grad
    block on a loss computed outside it is fine.)""",
    """
    import torch
    import torch.nn.functional as F

    @torch.no_grad()
    def train_step(model, optimizer, x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # BUG: the whole function runs with autograd off
        optimizer.step()
    """,
    """
    import torch
    import torch.nn.functional as F

    def train_step(model, optimizer, x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """,
)
def check_backward_under_no_grad(src):
    for call, target in backward_calls(src):
        state, where, why = flow(src, target)
        if state == "cut" and why == "no_grad":
            yield call, (f"this loss was computed with autograd off (torch.no_grad() or inference_mode around line "
                         f"{where.lineno}), so it has no graph: backward() fails or trains nothing. Run the forward "
                         f"pass and the loss with autograd on; keep no_grad for evaluation.")


def unreduced(src, node, depth=0):
    """node holds a loss computed with reduction='none' and not reduced since."""
    if depth > 12 or node is None:
        return False
    if isinstance(node, ast.Name):
        return unreduced(src, src.definition(node), depth + 1)
    if isinstance(node, ast.BinOp):
        return unreduced(src, node.left, depth + 1) or unreduced(src, node.right, depth + 1)
    if isinstance(node, ast.Call):
        if src.loss_call(node):
            return src.loss_reduction(node) == "none"
        if method_call(node, *RESHAPES) and src.qualname(node.func) is None:
            return unreduced(src, node.func.value, depth + 1)
    return False


@rule(
    "backward-non-scalar",
    "backward() with no gradient argument on a loss built with reduction='none'.",
    """A loss with reduction='none' holds one value per sample (or per token). backward() on it
    without a gradient argument raises, and the usual quick fix, passing torch.ones_like(loss),
    silently turns a mean into a sum and scales the learning rate by the batch size. Reduce
    explicitly: loss.mean(), or (loss * mask).sum() / mask.sum() for padded tokens.""",
    """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss(reduction='none')
    loss = criterion(model(x), y)  # one value per sample
    loss.backward()  # BUG: backward() needs a scalar
    """,
    """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss(reduction='none')
    loss = criterion(model(x), y)  # one value per sample
    (loss * weights).mean().backward()
    """,
)
def check_backward_non_scalar(src):
    for call, target in backward_calls(src):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "backward" and not call.args \
                and not call.keywords and unreduced(src, target):
            yield call, ("this loss was built with reduction='none', so it holds one value per sample and backward() "
                         "needs a scalar. Reduce it explicitly: loss.mean(), or (loss * mask).sum() / mask.sum().")


def graph_carriers(expr):
    """Names and calls in expr outside .item()/.detach()/float(...) and not behind .data."""
    todo, found = [expr], []
    while todo:
        node = todo.pop()
        if method_call(node, *DETACHING_METHODS) or isinstance(node, ast.Attribute) and node.attr == "data" or \
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("float", "int"):
            continue
        if isinstance(node, (ast.Name, ast.Call)):
            found.append(node)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):  # args.steps: not args itself
            todo.extend(ast.iter_child_nodes(node))
    return found


def names_behind(src, exprs, follow):
    """Names in exprs, and in the values assigned to them, as long as those values are of a `follow` type."""
    names, todo = set(), list(exprs)
    while todo:
        expr = todo.pop()
        for name in (n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id not in names
                     and (n is expr or not isinstance(src.parent.get(n), ast.Attribute))):  # `args` in args.weight is no loss
            names.add(name.id)
            value = src.definition(name)
            if isinstance(value, follow):
                todo.append(value)
    return names


def adds_to(value, total):
    """value is `total + ...` (`total += x` reads so too): a running sum, not a reset."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and \
        isinstance(value.left, ast.Name) and value.left.id == total


def trains(src, node):
    """node runs once per optimizer step: in a loop that calls backward() or step() (not a loop that sums the
    terms of one loss, such as a perceptual loss over layers), or in a training_step method."""
    loops = src.enclosing_loops(node)
    return bool(loops) and (not isinstance(loops[0], LOOPS) or bool({"backward", "step"} & src.reach_kinds(loops[0])))


@rule(
    "loss-accumulated-with-graph",
    "A loss tensor is summed (or appended) across iterations without .item() or .detach().",
    """`total += loss` keeps a reference to every iteration's autograd graph, activations
    included. Memory grows each step until the run fails out of memory hours in, or it slows
    down, and the total is a tensor that drags the graph along into every later use. Add
    loss.item() (or loss.detach()) instead.""",
    """
    import torch.nn.functional as F

    total_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss  # BUG: keeps every batch's graph alive
    """,
    """
    import torch.nn.functional as F

    total_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    """,
)
def check_loss_accumulated_with_graph(src):
    for scope in src.scopes:
        sums = []
        for node in src.local(scope):
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
                sums.append((node, node.target.id, node.value))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                    isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) and \
                    isinstance(node.value.left, ast.Name) and node.value.left.id == node.targets[0].id:
                sums.append((node, node.targets[0].id, node.value.right))
            elif method_call(node, "append") and isinstance(node.func.value, ast.Name) and len(node.args) == 1:
                sums.append((node, node.func.value.id, node.args[0]))
        sums = [(node, total, added) for node, total, added in sums if trains(src, node)]
        if not sums:
            continue
        targets = [t for _, t in backward_calls(src, scope) if t is not None]
        backpropagated = names_behind(src, targets, ast.AST)  # anything that feeds a backward()
        losses = names_behind(src, targets, (ast.BinOp, ast.Name)) | {
            t.id for n in src.local(scope) if isinstance(n, ast.Assign) and src.loss_call(n.value)
            for t in n.targets if isinstance(t, ast.Name)}
        for node, total, added in sums:
            carried = [ast.unparse(n) for n in graph_carriers(added)
                       if (isinstance(n, ast.Name) and n.id in losses or isinstance(n, ast.Call) and src.loss_call(n))
                       and flow(src, n)[0] == "live"]  # not a value computed under no_grad, nor through .item()
            if not carried or total in backpropagated or src.grad_off(node, True):
                continue
            loop = src.enclosing_loops(node)[0]
            rebound = [pos for pos, value in src.bindings(scope).get(total, [])  # reset in the loop: not a running total
                       if position(loop) <= pos <= end_position(loop) and not adds_to(value, total)]
            if not rebound:
                yield node, (f"adding {carried[0]} (a tensor with its autograd graph) to {total} on every iteration "
                             f"keeps all those graphs alive: memory grows until the run fails. Use {carried[0]}.item() "
                             f"(or {carried[0]}.detach()) here.")


def last_switch(src, scope, target, before):
    """The last model.eval() / model.train() on target in scope before a position, or None."""
    switches = [e for e in src.events(scope) if e.kind in ("eval", "train") and e.target == target and e.pos < before]
    return switches[-1] if switches else None


@rule(
    "eval-without-no-grad",
    "An evaluation loop (model.eval(), forward passes, no backward) runs without torch.no_grad() / inference_mode.",
    """model.eval() changes dropout and batch norm; it does not turn off autograd. Without no_grad
    every forward pass in the loop records a graph: evaluation uses several times the memory and
    runs slower, and any output kept for later (a list of predictions, a summed loss) holds its
    graph alive. Wrap the loop in torch.no_grad() (or torch.inference_mode()), or decorate the
    function. If every caller already wraps it, add the decorator anyway, or silence this line.
    Loops that want gradients (backward(), torch.autograd.grad, requires_grad_) are not flagged.""",
    """
    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            pred = model(x).argmax(-1)  # BUG: records a graph for every batch
            correct += (pred == y).sum().item()
        return correct
    """,
    """
    import torch

    @torch.no_grad()
    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            pred = model(x).argmax(-1)
            correct += (pred == y).sum().item()
        return correct
    """,
)
def check_eval_without_no_grad(src):
    for loop in src.loops():
        scope = src.function(loop) or src.tree
        scope_targets = {e.target for e in src.events(scope) if e.kind == "eval"}
        kinds = src.reach_kinds(loop) if scope_targets else {"backward"}
        if "backward" in kinds or "step" in kinds or any(
                isinstance(n, ast.Call) and (src.qualname(n.func) in INPUT_GRADS or method_call(n, "requires_grad_"))
                for n in src.reach(loop)):
            continue  # gradients are wanted here (training, saliency maps, adversarial examples)
        for call in (n for n in src.local(loop) if isinstance(n, ast.Call)):
            target = ast.unparse(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
            if target not in scope_targets:
                continue
            switch = last_switch(src, scope, target, position(call))
            if switch is not None and switch.kind == "eval" and not src.grad_off(call, True):
                yield call, (f"{target} is in eval mode here but autograd is still on: every forward pass of this "
                             f"loop records a graph (memory, time, and graphs kept alive by stored outputs). Wrap the "
                             f"loop in torch.no_grad() or torch.inference_mode(), or decorate the function.")
                break


def trained_models(src):
    """Models this file trains: whatever has .parameters() passed to an optimizer, or .train() called."""
    found = {e.target for e in src.all_events() if e.kind == "train"}
    for call in src.calls:
        if is_optimizer_class(src, call):
            found |= {ast.unparse(n.func.value) for a in call.args + [k.value for k in call.keywords]
                      for n in ast.walk(a) if method_call(n, "parameters", "named_parameters")}
    return found


def is_optimizer_class(src, call):
    """call builds an optimizer: torch.optim.AdamW(...), bnb.optim.Adam8bit(...)."""
    name = src.qualname(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    return "optim" in name.lower() and "sched" not in name.lower() and "swa" not in name.lower() and last[:1].isupper()


def eval_target(src, call):
    """The model a call leaves in eval mode: `model.eval()` -> model; `evaluate(net)` where the
    helper evaluate(model) calls model.eval() and never model.train() -> net. Else None."""
    direct = [e for e in src.classify(call) if e.kind == "eval"]
    if direct:
        return direct[0].target
    for helper in src.helpers(call):
        if "eval" in src.kinds(helper) and "train" not in src.kinds(helper):
            params = [a.arg for a in helper.args.args]
            if params and isinstance(call.func, ast.Attribute):
                params = params[1:]  # self
            for event in (e for n in src.local(helper) for e in src.classify(n) if e.kind == "eval"):
                if event.target in params:
                    index = params.index(event.target)
                    arg = argument(call, index, event.target)
                    return ast.unparse(arg) if arg is not None else None
                return event.target
    return None


@rule(
    "eval-mode-not-restored",
    "A training loop switches the model to eval mode (directly or through a helper) and never back to train mode.",
    """After model.eval() for validation, dropout stays off and batch norm keeps using its running
    statistics for every later training step. Nothing fails; the model just overfits sooner or
    trains differently from what the code says. Call model.train() at the start of each epoch
    (or right after evaluation), or have the evaluation helper restore the mode it found.""",
    """
    import torch
    import torch.nn.functional as F

    def evaluate(model, loader):
        model.eval()
        with torch.no_grad():
            return sum(F.cross_entropy(model(x), y).item() for x, y in loader)

    optimizer = torch.optim.AdamW(model.parameters())
    model.train()
    for epoch in range(10):
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        val_loss = evaluate(model, val_loader)  # BUG: the next epoch trains in eval mode
    """,
    """
    import torch
    import torch.nn.functional as F

    def evaluate(model, loader):
        model.eval()
        with torch.no_grad():
            return sum(F.cross_entropy(model(x), y).item() for x, y in loader)

    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        val_loss = evaluate(model, val_loader)
    """,
)
def check_eval_mode_not_restored(src):
    trained, reported = trained_models(src), set()
    for loop in src.loops():
        kinds = src.reach_kinds(loop)
        if not {"backward", "step"} <= kinds or "train" in kinds:
            continue
        for call in (n for n in src.local(loop) if isinstance(n, ast.Call) and n not in reported):
            target = eval_target(src, call)
            if target in trained and not isinstance(jump_after(src, call), (ast.Break, ast.Return, ast.Raise)):
                reported.add(call)
                yield call, (f"this leaves {target} in eval mode and the training loop never calls {target}.train() "
                             f"again: later steps train with dropout off and frozen batch-norm statistics. Call "
                             f"{target}.train() at the start of each epoch or right after evaluating.")


FACTORIES = {"tensor", "Tensor", "FloatTensor", "LongTensor", "zeros", "ones", "empty", "full", "rand", "randn",
             "randint", "arange", "linspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
             "rand_like", "randn_like", "from_numpy", "as_tensor", "load", "Variable", "Parameter"}


def is_module_class(cls):
    """cls is a class whose bases end in Module (nn.Module, LightningModule)."""
    return isinstance(cls, ast.ClassDef) and any((terminal(b) or "").endswith("Module") for b in cls.bases)


def is_activation(src, value, function):
    """value is a tensor computed on the autograd path: the output of a torch op or module, or of a
    model call in code that runs backward()."""
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
    initialisation) is harmless and not flagged, though torch.no_grad() is the modern form.""",
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
        if isinstance(tensor, ast.Name) and is_activation(src, src.definition(tensor), function):
            name = ast.unparse(tensor)
            yield node, (f"writing through {name}.data hides the change from autograd: {name} is part of the graph, so "
                         f"backward() computes gradients from the new values without any error. Write it out of place "
                         f"({name} = ...), or modify {name} itself under torch.no_grad().")


@rule(
    "torch-load-unsafe",
    "torch.load(..., weights_only=False), which unpickles arbitrary objects.",
    """torch.load unpickles the file. Since PyTorch 2.6 the default is weights_only=True, which
    loads tensors and plain containers only; an explicit weights_only=False switches that off
    and runs any code a tampered or downloaded checkpoint carries. Drop the argument (and, for
    your own classes in a checkpoint, allow them with torch.serialization.add_safe_globals);
    keep weights_only=False only for a file you made yourself and add # noqa there. A call
    without the argument is not flagged: on PyTorch 2.6 or later it is safe (on an older pinned
    torch, pass weights_only=True).""",
    """
    import torch

    state = torch.load('checkpoint.pt', map_location='cpu', weights_only=False)  # BUG: runs whatever the pickle says
    model.load_state_dict(state)
    """,
    """
    import torch

    state = torch.load('checkpoint.pt', map_location='cpu')  # weights_only=True by default since PyTorch 2.6
    model.load_state_dict(state)
    """,
)
def check_torch_load_unsafe(src):
    for call in src.calls:
        if src.qualname(call.func) == "torch.load" and is_false(keyword(call, "weights_only")):
            yield call, ("weights_only=False makes torch.load unpickle arbitrary objects: a tampered checkpoint runs "
                         "code when it is loaded. Since PyTorch 2.6 the default, weights_only=True, loads tensors and "
                         "plain containers safely: drop the argument (allow your own classes with "
                         "torch.serialization.add_safe_globals), or keep it only for a file you made yourself.")


@rule(
    "dropout-missing-training",
    "F.dropout (and dropout1d/2d/3d, alpha_dropout) called without training=.",
    """The functional form does not know about model.eval(). F.dropout defaults to training=True,
    so it keeps dropping units at evaluation and inference time: validation looks worse and
    noisier than the model is. F.alpha_dropout defaults to training=False, so it never drops
    anything. Pass training=self.training, or use nn.Dropout. Only calls inside the methods of a
    module class are checked: a free function has no self.training to pass.""",
    """
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def forward(self, x):
            return F.dropout(self.fc(x), p=0.1)  # BUG: still drops units after model.eval()
    """,
    """
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def forward(self, x):
            return F.dropout(self.fc(x), p=0.1, training=self.training)
    """,
)
def check_dropout_missing_training(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.nn.functional.") and last in DROPOUTS and argument(call, 2, "training") is None \
                and not has_star_kwargs(call) and not any(isinstance(a, ast.Starred) for a in call.args) \
                and is_module_class(src.parent.get(src.method(call))):
            if DROPOUTS[last]:
                yield call, (f"F.{last} defaults to training=True and ignores model.eval(): it keeps dropping at "
                             f"evaluation time. Pass training=self.training (or use the nn.Dropout module).")
            else:
                yield call, (f"F.{last} defaults to training=False: it never drops anything, even in training. Pass "
                             f"training=self.training (or use the nn.AlphaDropout module).")


def freezes_something(src):
    """The file freezes parameters: requires_grad = False, requires_grad_(False)."""
    for node in src.of_type(ast.Assign, ast.Call):
        if isinstance(node, ast.Assign) and is_false(node.value) and \
                any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets):
            return True
        if method_call(node, "requires_grad_") and is_false(argument(node, 0, "requires_grad")):
            return True
    return False


def prefixes(expr):
    """The objects an attribute chain hangs from: model.encoder.fc -> [model.encoder, model]."""
    found = []
    while isinstance(expr, ast.Attribute):
        expr = expr.value
        found.append(expr)
    return found


PARAMETER_FREE = {"ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Dropout", "Dropout1d",
                  "Dropout2d", "Dropout3d", "Identity", "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d",
                  "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d",
                  "Upsample", "PixelShuffle", "LeakyReLU", "ELU", "Softplus", "Hardtanh", "Mish"}
WRAPPERS = {"module", "_orig_mod", "_fsdp_wrapped_module"}  # DataParallel/DDP, torch.compile, FSDP: the whole model


def submodules_with_parameters(src, cls):
    """Attributes a module class of this file sets to a torch layer with parameters, or to another
    module class of this file."""
    found = set()
    for attr, values in src.class_attrs(cls).items():
        for value in (v for v in values if isinstance(v, ast.Call)):
            name = src.qualname(value.func) or ""
            last = name.rsplit(".", 1)[-1]
            local = isinstance(value.func, ast.Name) and any(map(is_module_class, src.classes.get(value.func.id, [])))
            if local or name.startswith("torch.nn.") and last[:1].isupper() and last not in PARAMETER_FREE \
                    and not last.endswith("Loss"):
                found.add(attr)
    return found


def model_class(src, root):
    """The class of this file a root object is an instance of: `self` in a method, or `model = Net()`."""
    if isinstance(root, ast.Name) and src.self_class(root) is not None:
        return src.self_class(root)
    made = src.origin(root)
    if made is not None and isinstance(made.func, ast.Name):
        return next(iter(src.classes.get(made.func.id, [])), None)
    return None


@rule(
    "optimizer-param-subset",
    "An optimizer gets only a submodule's parameters (model.fc.parameters()) while the whole model is run and nothing is frozen.",
    """When the optimizer holds model.fc's parameters but the loss comes from model(x), every
    other part of the model gets gradients that are never applied: it stays at its
    initialisation while the head trains, and the run looks merely mediocre. Pass
    model.parameters(). If training only that part is the intent (linear probing,
    fine-tuning a head), freeze the rest explicitly with model.requires_grad_(False) and
    model.fc.requires_grad_(True), which also skips the wasted backward work and silences this
    rule; or add # noqa: optimizer-param-subset.""",
    """
    import torch
    import torch.nn.functional as F
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)  # BUG: only the last layer is ever updated
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    """,
    """
    import torch
    import torch.nn.functional as F
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    model.requires_grad_(False)  # linear probe: train the head only, on purpose
    model.fc.requires_grad_(True)
    optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    """,
)
def check_optimizer_param_subset(src):
    optimizers = [c for c in src.calls if is_optimizer_class(src, c)]
    subsets = [(c, argument(c, 0, "params")) for c in optimizers]
    subsets = [(c, p.func.value) for c, p in subsets if method_call(p, "parameters") and
               isinstance(p.func.value, ast.Attribute) and p.func.value.attr not in WRAPPERS]
    if not subsets or freezes_something(src):
        return
    called = {dotted(c.func) for c in src.calls} - {None}
    for call, part in subsets:
        roots = [p for p in prefixes(part) if ast.unparse(p) in called]
        if not roots:
            continue
        root = roots[0]
        cls = model_class(src, root) if isinstance(part.value, ast.Name) else None
        if cls is not None and not submodules_with_parameters(src, cls) - {part.attr}:
            continue  # the model's only submodule with parameters is the one given to the optimizer
        root = ast.unparse(root)
        others = [o for o in optimizers if o is not call and src.scope(o) is src.scope(call) and any(
            ast.unparse(n) == root or ast.unparse(n).startswith(root + ".")
            for n in ast.walk(o) if isinstance(n, (ast.Name, ast.Attribute)))]
        if not others:
            part = ast.unparse(part)
            yield call, (f"this optimizer only gets {part}'s parameters, but the loss comes from {root}(...): the "
                         f"rest of {root} gets gradients that are never applied. Pass {root}.parameters(); or, to "
                         f"train {part} alone on purpose, freeze the rest ({root}.requires_grad_(False); "
                         f"{part}.requires_grad_(True)), which silences this rule.")


@rule(
    "layer-replaced-after-optimizer",
    "A submodule is replaced (model.fc = nn.Linear(...)) after the optimizer was built from model.parameters().",
    """The optimizer keeps references to the parameter tensors that existed when it was built.
    A layer assigned afterwards brings new parameters the optimizer has never seen: they get
    gradients and are never updated, while the old layer's parameters are updated and unused.
    Replace layers first, then build the optimizer (or add the new layer with
    optimizer.add_param_group).""",
    """
    import torch
    import torch.nn as nn
    import torchvision

    model = torchvision.models.resnet18(weights='DEFAULT')
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.fc = nn.Linear(512, 10)  # BUG: the new head is not in the optimizer
    """,
    """
    import torch
    import torch.nn as nn
    import torchvision

    model = torchvision.models.resnet18(weights='DEFAULT')
    model.fc = nn.Linear(512, 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """,
)
def check_layer_replaced_after_optimizer(src):
    def builds_module(value):
        name = src.qualname(value.func) or ""
        if name.startswith("torch.nn.") and name.rsplit(".", 1)[1][:1].isupper():
            return True
        return isinstance(value.func, ast.Name) and value.func.id in src.classes

    optimizers = [c for c in src.calls if is_optimizer_class(src, c)]
    built, scopes = set(optimizers), {}  # scope -> (replaced layers [(assignment, target)], where the last optimizer or add_param_group is)
    for scope in {src.scope(call) for call in optimizers}:
        local = src.local(scope)
        replaced = [(node, t) for node in local if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and builds_module(node.value) for t in node.targets if isinstance(t, ast.Attribute)]
        rebuilt = [position(n) for n in local if n in built or method_call(n, "add_param_group")]
        scopes[scope] = replaced, max(rebuilt, default=(0, 0))
    for call in optimizers:
        roots = {ast.unparse(n.func.value) for a in call.args + [k.value for k in call.keywords]
                 for n in ast.walk(a) if method_call(n, "parameters", "named_parameters")}
        replaced, last_rebuild = scopes[src.scope(call)]
        for node, target in replaced:
            if position(node) <= end_position(call) or last_rebuild > position(node):
                continue
            root = next((r for r in roots if ast.unparse(target).startswith(r + ".")), None)
            if root:
                yield node, (f"{ast.unparse(target)} is replaced after the optimizer (line {call.lineno}) was built "
                             f"from {root}'s parameters: the new layer is never updated. Replace layers first, "
                             f"then build the optimizer.")


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
        training = getattr(function, "name", "") == "forward" or any(True for _ in backward_calls(src, function or src.tree))
        if training and not src.grad_off(node, True):
            yield node, (f"{name.id} is the output of {op}, whose backward pass reads that output; {how} changes it in "
                         f"place, so backward() fails with a modified-by-an-inplace-operation error. Write {fix} instead.")


@rule(
    "train-loader-no-shuffle",
    "A DataLoader that feeds training is built without shuffle=True (shuffle=False or left out) and no sampler.",
    """Without shuffling every epoch sees the samples in the same order, often sorted by class,
    source or length (DataLoader's default is shuffle=False). The model then learns the order
    (the loss drops and rises in a pattern that repeats every epoch) and batches are not
    representative. Pass shuffle=True for training, or a sampler (a DistributedSampler shuffles
    by default). A loader counts as a training loader when a loop of this file that calls
    backward() or step() iterates it, when it is passed to trainer.fit or returned by
    train_dataloader(); an explicit shuffle=False is also flagged on a loader whose name says
    train and that this file never evaluates with. Iterable datasets (which cannot be shuffled
    by the loader) are left alone. If the order matters on purpose (a curriculum, time series),
    silence this line.""",
    """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    train_loader = DataLoader(train_set, batch_size=64)  # BUG: shuffle defaults to False: same order every epoch
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    """,
)
def check_train_loader_no_shuffle(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        shuffle = argument(call, 2, "shuffle")
        if not name.endswith(".DataLoader") or shuffle is not None and not is_false(shuffle) or len(call.args) > 3 or \
                has_star_kwargs(call) or any(keyword(call, k) is not None for k in ("sampler", "batch_sampler")) or \
                iterable_dataset(src, argument(call, 0, "dataset")):
            continue
        use = loader_use(src, call)
        labels = [ast.unparse(t).lower() for t in getattr(src.parent.get(call), "targets", [])] + \
                 [ast.unparse(a).lower() for a in [argument(call, 0, "dataset")] if a is not None]
        named_train = any("train" in label for label in labels) and \
            not any(w in label for label in labels for w in ("val", "test", "eval", "dev"))
        if use == "train" or use is None and is_false(shuffle) and named_train:
            how = "shuffle=False" if shuffle is not None else "no shuffle argument (the default is shuffle=False)"
            yield call, (f"this training DataLoader has {how}: every epoch sees the samples in the same order, and "
                         f"the model learns that order. Pass shuffle=True (or a sampler).")


def iterable_dataset(src, dataset):
    """dataset is (or may be) an IterableDataset, which a DataLoader cannot shuffle: built by a class whose
    name or bases say Iterable, or by a call with streaming=True (Hugging Face datasets)."""
    if isinstance(dataset, ast.Name):  # any of its values: `ds = IterableX(...) if streaming else TensorDataset(...)`
        made = [v for _, v in src.bindings(src.scope(dataset)).get(dataset.id, [])]
    else:
        made = [src.origin(dataset)] if dataset is not None else []
    for call in (src.resolve(m) for m in made if m is not None):
        if not isinstance(call, ast.Call):
            continue
        if "iterable" in (src.qualname(call.func) or terminal(call.func) or "").lower() or keyword(call, "streaming") is not None:
            return True
        classes = src.classes.get(call.func.id, []) if isinstance(call.func, ast.Name) else []
        if any("Iterable" in ast.unparse(base) for cls in classes for base in cls.bases):
            return True
    return False


def loader_use(src, call):
    """'train' when a training loop of this file iterates the loader built by call (or it goes to trainer.fit,
    or train_dataloader() returns it); 'other' when only loops without backward() or step() do; None when
    this file does not show."""
    parent = src.parent.get(call)
    function = src.function(call)
    if isinstance(parent, ast.Return) and getattr(function, "name", "") == "train_dataloader":
        return "train"
    targets = {dotted(t) for t in getattr(parent, "targets", [])} - {None}
    if not targets:
        return None

    places = {(src.place(call, t), t) for t in targets}
    if any((src.place(c, dotted(a)), dotted(a)) in places for c in src.calls_by_name.get("fit", []) if method_call(c, "fit")
           for a in [argument(c, 1, "train_dataloaders")] if dotted(a)):
        return "train"  # trainer.fit(model, train_loader)
    loops = [l for key in places for l in src.loops_over().get(key, [])]
    if not loops:
        return None
    return "train" if any({"backward", "step"} & src.reach_kinds(l) for l in loops) else "other"


def int_constant(node, default):
    """The int a node writes (`1`, `-1`), default when absent, None when not a constant."""
    if node is None:
        return default
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = int_constant(node.operand, None)
        return -inner if inner is not None else None
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def mask_context(src, call):
    """call builds an attention mask: its statement assigns a name that says mask or causal, registers a buffer
    named so (or `bias`, as nanoGPT does), or hands it to masked_fill or an attn_mask= argument."""
    child, p = call, src.parent.get(call)
    while p is not None and not isinstance(p, ast.stmt):
        if method_call(p, "masked_fill", "masked_fill_") and child in p.args[:1]:
            return True
        if isinstance(p, ast.keyword) and p.arg in ("attn_mask", "mask"):
            return True
        if method_call(p, "register_buffer") and p.args and isinstance(p.args[0], ast.Constant) and \
                any(w in str(p.args[0].value).lower() for w in ("mask", "causal", "bias")):
            return True
        child, p = p, src.parent.get(p)
    targets = getattr(p, "targets", []) + [t for t in [getattr(p, "target", None)] if t is not None]
    return any(w in ast.unparse(t).lower() for t in targets for w in ("mask", "causal"))


def transposed(src, node):
    """node's value is transposed later in its statement: `(torch.triu(ones) == 1).transpose(0, 1)`."""
    p = src.parent.get(node)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.Attribute) and p.attr in ("T", "mT", "t", "transpose", "transpose_") or \
                isinstance(p, ast.Call) and src.qualname(p.func) in ("torch.transpose", "torch.t"):
            return True
        p = src.parent.get(p)
    return False


@rule(
    "causal-mask-offset",
    "A causal attention mask built with the wrong diagonal: tril(..., diagonal=1) as the allowed positions, or triu(..., diagonal=0) as the blocked ones.",
    """A causal mask allows position i to attend to positions j <= i: tril(ones) (diagonal=0) as the
    allowed positions, or triu(ones, diagonal=1) as the blocked ones. One off in either direction
    trains without any error: tril(..., diagonal=1) lets every token see the next one, so the model
    learns to copy it (the training loss drops far below what generation achieves); triu(...,
    diagonal=0) (the default diagonal) also blocks each token from itself, so the first row is
    all masked (NaN after the softmax) and every token loses its own input. Only a tril or triu
    that feeds a mask (a name or buffer that says mask, causal or bias, masked_fill, attn_mask=)
    is checked, and one that is transposed afterwards (the old triu(...).transpose(0, 1) idiom)
    is left alone.""",
    """
    import torch

    T = 8
    scores = q @ k.transpose(-2, -1)  # (B, T, T)
    causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # BUG: each token also sees the next one
    scores = scores.masked_fill(~causal_mask, float('-inf'))
    """,
    """
    import torch

    T = 8
    scores = q @ k.transpose(-2, -1)  # (B, T, T)
    causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = scores.masked_fill(~causal_mask, float('-inf'))
    """,
)
def check_causal_mask_offset(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        if name in ("torch.tril", "torch.triu"):
            kind, diagonal = name[6:], argument(call, 1, "diagonal")
        elif method_call(call, "tril", "triu", "tril_", "triu_") and not name:
            kind, diagonal = call.func.attr.rstrip("_"), argument(call, 0, "diagonal")
        else:
            continue
        offset = int_constant(diagonal, 0)
        if offset is None or (kind == "tril" and offset <= 0) or (kind == "triu" and offset >= 1):
            continue
        if transposed(src, call) or not mask_context(src, call):
            continue
        if kind == "tril":
            yield call, (f"tril(..., diagonal={offset}) allows {offset} position(s) above the diagonal: as a causal "
                         f"mask it lets each token see the next {offset}, so the model learns to copy the answer. "
                         f"Allow with tril(...) (diagonal=0), or block with triu(..., diagonal=1).")
        else:
            yield call, (f"triu(..., diagonal={offset}) includes the diagonal: as the blocked part of a causal mask it "
                         f"also hides each token from itself, and the first row is fully masked (NaN after the "
                         f"softmax). Block with triu(..., diagonal=1), or allow with tril(...).")


# --- running: files, suppression, output ---------------------------------------------------------

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "venv"}


def noqa_comments(source):
    """{line: set of rule ids silenced there}; an empty set silences every rule."""
    found = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            for part in token.string.split("#"):
                head, colon, rest = part.strip().partition(":")
                if head.strip().lower() == "noqa":
                    ids = {word.split()[0] for word in rest.split(",") if word.split()} if colon else set()
                    found[token.start[0]] = ids
    except (tokenize.TokenError, SyntaxError):
        pass  # the file parsed, so this only cuts off comments after a tokenizer quirk
    return found


def lint_source(source, path="<string>", select=None, project=None):
    """The findings for one file's source text, sorted by line. Raises SyntaxError or ValueError
    when the text is not Python, RecursionError or MemoryError when it nests too deeply to analyse.
    project: the Project of the run, through which imported classes of the other files are followed."""
    collecting = gc.isenabled()
    gc.disable()  # a file's syntax tree is millions of objects: the cyclic collector would rescan them all, again and again
    try:
        src = Source(ast.parse(source, filename=path), path, project)
        findings = {Finding(r.id, path, node.lineno, message) for r in RULES.values()
                    if select is None or r.id in select for node, message in r.check(src)}
    finally:
        if collecting:
            gc.enable()
    silenced = noqa_comments(source) if findings and "noqa" in source.lower() else {}
    findings = [f for f in findings if silenced.get(f.line) is None or silenced[f.line] and f.rule not in silenced[f.line]]
    return sorted(findings, key=lambda f: (f.line, f.rule, f.message))


def python_files(path):
    """The .py and .ipynb files under a folder (hidden folders, caches and virtualenvs skipped), or the path itself."""
    if not path.is_dir():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        yield from (Path(root) / f for f in sorted(files) if f.endswith((".py", ".ipynb")))


MAX_BYTES = 5_000_000  # our assumption: hand-written Python stays far below (the largest file in the corpora of issue 11 is under 0.5 MB)


def read_python(path):
    """The text of a source file; raises ValueError with a one-line reason when it is not readable text.
    A FIFO, device or socket is refused before it is opened: reading one can block for ever."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ValueError("no such file or folder")
    except OSError as error:
        raise ValueError(error.strerror or type(error).__name__)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file (a FIFO, device or socket): refused")
    if info.st_size > MAX_BYTES:
        raise ValueError(f"{info.st_size / 1e6:.0f} MB, larger than the {MAX_BYTES / 1e6:.0f} MB lint reads: generated, not hand-written code")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(error.strerror or type(error).__name__)
    if b"\0" in data:
        raise ValueError("binary file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        raise ValueError("not UTF-8 text (nor in the encoding its coding line declares)")


def notebook_source(text):
    """(source, cells) for a Jupyter notebook's text: its code cells joined into one module, with IPython
    magics (`%time`, `!pip`, `%%bash` cells) blanked; cells[i] is (cell number, line in cell) of line i + 1."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
        codes = [(n, c.get("source", "")) for n, c in enumerate(cells, 1) if c.get("cell_type") == "code"]
        codes = [(n, "".join(code) if isinstance(code, list) else code) for n, code in codes]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise ValueError("not a Jupyter notebook (no list of cells in its JSON)")
    lines, where = [], []
    for number, code in codes:
        if not isinstance(code, str):
            raise ValueError(f"not a Jupyter notebook (cell {number} has no text)")
        magic_cell = code.lstrip().startswith("%%")
        for line_number, line in enumerate(code.splitlines() or [""], 1):
            body = line.lstrip()
            if magic_cell or body.startswith(("%", "!")) or body.endswith("?") and not body.startswith("#"):
                line = line[:len(line) - len(body)] + "pass" if body and not magic_cell else ""
            lines.append(line)
            where.append((number, line_number))
    return "\n".join(lines) + "\n", where


PY2_HINTS = {"Missing parentheses in call to 'print'": "print statement",
             "Missing parentheses in call to 'exec'": "exec statement",
             "multiple exception types must be parenthesized": "except E, e",
             "leading zeros in decimal integer literals": "0777-style octal literal"}


def python2(error):
    """What marks a SyntaxError as Python 2 source (`print statement`), else None."""
    return next((label for hint, label in PY2_HINTS.items() if hint in (error.msg or "")), None)


class Project:
    """The files of one run, so that `from model import Net` in train.py reaches the class in model.py.
    A file is parsed when first needed; a few stay cached, so memory does not grow with the tree."""

    CACHED = 16

    def __init__(self, files):
        self.files = {path.resolve() for path in files if path.suffix == ".py"}
        self.cache = {}

    def source(self, path):
        if path not in self.cache:
            if len(self.cache) >= self.CACHED:
                self.cache.pop(next(iter(self.cache)))
            try:
                self.cache[path] = Source(ast.parse(read_python(path)), str(path), self)
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                self.cache[path] = None
        return self.cache[path]

    def find(self, importer, dotted):
        """(Source, ClassDef or FunctionDef) for a dotted name imported in the file `importer` (`model.Net`,
        `.nets.build_model`) when it names a class or a module-level function of another file of this run."""
        if not self.files or importer == "<string>":
            return None
        level = len(dotted) - len(dotted.lstrip("."))
        module, _, name = dotted.lstrip(".").rpartition(".")
        here = Path(importer).resolve().parent
        up = [here, *here.parents]
        bases = up[level - 1:level] if level else up[:9]  # `.model`: this folder; `model`: here or a folder above
        parts = module.split(".") if module else []
        for base in bases:
            for candidate in (base.joinpath(*parts).with_suffix(".py") if parts else None,
                              base.joinpath(*parts, "__init__.py")):
                if candidate in self.files:
                    src = self.source(candidate)
                    found = [] if src is None else src.classes.get(name, []) + [
                        f for f in src.functions.get(name, []) if src.parent.get(f) is src.tree]
                    return (src, found[0]) if len(found) == 1 else None
        return None


def lint_paths(paths, select=None, config=None):
    """(findings, errors, number of files read) for files and folders; errors are (path, reason, bad):
    bad is False for a Python 2 file, which is skipped, not an error. config: a Config, for per-path rules."""
    findings, errors, read = [], [], 0
    files = []
    for given in paths:
        found = [path for path in python_files(Path(given)) if config is None or not config.excluded(path)]
        if not found:
            errors.append((given, "no Python files found", True))
        files += found
    project = Project(files)
    for path in files:
        try:
            text = read_python(path)
            chosen = select if config is None else config.rules_for(path, select)
            if path.suffix == ".ipynb":
                source, cells = notebook_source(text)
                findings += [Finding(f.rule, f.path, cells[f.line - 1][1], f.message, cells[f.line - 1][0])
                             for f in lint_source(source, str(path), chosen)]
            else:
                findings += lint_source(text, str(path), chosen, project)
            read += 1
        except ValueError as error:
            errors.append((str(path), str(error), True))
        except SyntaxError as error:
            if python2(error):
                errors.append((str(path), f"Python 2 source ({python2(error)}, line {error.lineno}); lint reads Python 3",
                               False))
            else:
                errors.append((str(path), f"cannot parse: {error.msg} (line {error.lineno})", True))
        except (RecursionError, MemoryError):
            errors.append((str(path), "nested too deeply to parse or analyse", True))
    return findings, errors, read


class Config:
    """`[tool.ml-debug.lint]` in the pyproject.toml nearest the linted paths (the first one up the tree that
    has the section), the way ruff and flake8 read theirs:

        [tool.ml-debug.lint]
        select = ["softmax-into-ce", "missing-zero-grad"]   # only these rules (default: all)
        ignore = ["torch-load-unsafe"]                      # never these
        exclude = ["legacy/*", "notebooks/scratch_*.ipynb"] # paths not linted, relative to this file
        per-file-ignores = {"tests/*" = ["data-write"]}     # rules skipped in those paths

    `--select` on the command line replaces `select` and `ignore`; `--ignore` adds to `ignore`; `--no-config`
    skips the file. `exclude` and `per-file-ignores` hold whatever the command line says."""

    KEYS = {"select", "ignore", "exclude", "per-file-ignores"}

    def __init__(self, path=None, table=None):
        self.path, table = path, table or {}
        unknown = sorted(set(table) - self.KEYS)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(self.KEYS))})")
        self.select = self._ids(table, "select") if "select" in table else None
        self.ignore = self._ids(table, "ignore")
        self.exclude = self._strings(table.get("exclude", []), "exclude")
        per_file = table.get("per-file-ignores", {})
        if not isinstance(per_file, dict):
            raise ValueError("per-file-ignores must be a table of pattern = [rule ids]")
        self.per_file = {pattern: self._ids(per_file, pattern) for pattern in per_file}

    def _strings(self, value, key):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a list of strings")
        return value

    def _ids(self, table, key):
        ids = set(self._strings(table.get(key, []), key))
        unknown = sorted(ids - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule id {unknown[0]!r} in {key}; --list-rules shows them all")
        return ids

    @classmethod
    def nearest(cls, paths):
        """The config for these paths, from the nearest pyproject.toml with the section; empty when none."""
        start = Path(os.path.commonpath([str(Path(p).resolve()) for p in paths]))
        for folder in [start, *start.parents]:
            candidate = folder / "pyproject.toml"
            if candidate.is_file():
                try:
                    text = read_python(candidate)
                    data = tomllib.loads(text) if tomllib is not None else None
                except ValueError as error:  # (TOMLDecodeError is a ValueError)
                    raise ValueError(f"{candidate}: {error}")
                if data is None:  # Python 3.10 without tomli: a pyproject.toml that does not name us holds no
                    if "ml-debug" not in text:  # settings of ours
                        continue
                    raise ValueError(f"{candidate}: reading its [tool.ml-debug.lint] settings needs Python 3.11 or "
                                     "the tomli package (pip install tomli); --no-config lints without them")
                table = data.get("tool", {}).get("ml-debug", {}).get("lint")
                if table is not None:
                    if not isinstance(table, dict):
                        raise ValueError(f"{candidate}: [tool.ml-debug.lint] must be a table")
                    try:
                        return cls(candidate, table)
                    except ValueError as error:
                        raise ValueError(f"{candidate}: [tool.ml-debug.lint]: {error}")
        return cls()

    def _matches(self, path, pattern):
        try:
            relative = Path(path).resolve().relative_to(self.path.parent).as_posix()
        except ValueError:
            return False
        parts = relative.split("/")
        return any(fnmatch.fnmatch("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1))

    def excluded(self, path):
        return self.path is not None and any(self._matches(path, p) for p in self.exclude)

    def rules_for(self, path, select):
        if self.path is None:
            return select
        return select - set().union(*(ids for pattern, ids in self.per_file.items() if self._matches(path, pattern)))


# --- the docs page, generated from the registry -------------------------------------------------


TEST_DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "lint"


@functools.cache
def measure():
    """(table rows, files, lines): each rule's planted bugs found and false findings over the test code,
    tests/data/lint: the fixtures, the healthy/broken twins and the real-style corpus (a planted bug is a
    `# BUG: rule` comment on its line; any other finding is false)."""
    paths = sorted(TEST_DATA.glob("*.py")) + sorted((TEST_DATA / "twins").glob("*.py")) + \
        [p for p in sorted((TEST_DATA / "corpus").rglob("*")) if p.suffix in (".py", ".ipynb")]
    planted = set()
    for path in paths:
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "# BUG:" in text:
                planted |= {(str(path), rule, number) for rule in text.split("# BUG:")[1].split()[0].split(",")}
    findings, _, _ = lint_paths([str(p) for p in paths])
    found = {(f.path, f.rule, f.line) for f in findings}
    rows = []
    for r in RULES.values():
        bugs = {p for p in planted if p[1] == r.id}
        hits, false = len(bugs & found), len({f for f in found if f[1] == r.id} - bugs)
        precision = f"{hits / (hits + false):.0%}" if hits + false else "n/a"
        rows.append(f"| [{r.id}](#{r.id}) | {hits} of {len(bugs)} | {false} | {precision} |")
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)
    return rows, len(paths), lines


def render_docs():
    """refs/static_analysis.md, from the registry (and the measurements on the test code)."""
    rows, files, lines = measure()
    out = [
        "# Static analysis: silent training bugs in the source",
        "",
        f"`python diagnostics/lint.py PATH...` reads Python files without running them and flags {len(RULES)} "
        "kinds of PyTorch training bug, most of them silent at run time; each is shown below as buggy code and its fix.",
        "",
        "## Contents",
        "",
        "- [Usage](#usage)",
        "- [Measured precision](#measured-precision)",
        *(f"- [{r.id}](#{r.id}): {r.summary}" for r in RULES.values()),
        "",
        "## Usage",
        "",
        "```bash",
        "python diagnostics/lint.py train.py src/             # human-readable: path:line: rule message",
        "python diagnostics/lint.py src/ --json                # {\"findings\": [{rule, path, line, message}]}",
        "python diagnostics/lint.py src/ --select missing-zero-grad,softmax-into-ce",
        "python diagnostics/lint.py src/ --ignore data-write",
        "python diagnostics/lint.py --list-rules",
        "python diagnostics/lint.py analysis.ipynb           # notebooks: path:cell N:line: rule message",
        "```",
        "",
        "Exit code 0 when clean, 1 when something was found, 2 when nothing could be read. Files that "
        "cannot be read or parsed are reported on stderr, one line each, and skipped; so are Python 2 files, "
        "which do not change the exit code. A FIFO, a device or a file over 5 MB is refused. Silence an "
        "intended finding with a trailing `# noqa: <rule>` on the reported line (a bare `# noqa` silences "
        "every rule there).",
        "",
        "Settings live in the nearest `pyproject.toml` up from the linted paths that has the section "
        "(`--no-config` skips it; `--select` on the command line replaces its select and ignore):",
        "",
        "```toml",
        "[tool.ml-debug.lint]",
        "select = [\"softmax-into-ce\", \"missing-zero-grad\"]   # only these rules (default: all)",
        "ignore = [\"data-write\"]                           # never these",
        "exclude = [\"legacy\", \"scratch_*.py\"]              # paths not linted, relative to pyproject.toml",
        "per-file-ignores = {\"tests/*\" = [\"torch-load-unsafe\"]}",
        "```",
        "",
        "The analysis follows imports and aliases, simple assignments, attributes a class sets once "
        "(`self.criterion = nn.CrossEntropyLoss()`), calls to functions of the same file, and classes "
        "and model factories imported from the other files given on the command line (`from model import Net` reaches "
        "model.py when it is linted too). When it cannot follow something, a rule stays silent rather "
        "than guess: a clean run is not proof of correct code, but a finding is worth reading.",
        "",
        "This page is generated from the rule registry in [diagnostics/lint.py](../diagnostics/lint.py) "
        "(`python diagnostics/lint.py --write-docs refs/static_analysis.md`); the tests check that the two "
        "match and run the linter on every example below.",
        "",
        "## Measured precision",
        "",
        f"Measured on the test code in tests/data/lint ({files} files, {lines} lines): planted bugs, healthy "
        "look-alikes of each (a loss reused in an evaluation loop under no_grad, terms of one loss summed in "
        "a forward pass, one scaler update after several optimizers, a training-set loader used only for "
        "features), and a corpus of healthy code written in the styles of public training scripts (the "
        "transformers no_trainer examples, diffusers DreamBooth, Lightning GAN and classifier modules, a "
        "timm-style loss scaler, RPC distributed autograd, nanoGPT, DINO, a two-file project). A planted bug "
        "is a line marked `# BUG: <rule>`; every other finding counts as false. Precision is "
        "found / (found + false). This is our own code, not a sample of the world's: it shows the "
        "patterns each rule was tuned on, and a rule with few planted bugs has a thin measurement.",
        "",
        "| rule | planted bugs found | false findings | precision |",
        "| --- | --- | --- | --- |",
        *rows,
    ]
    for r in RULES.values():
        out += ["", f"## {r.id}", "", r.summary, "", r.why, "", "Flagged (the `# BUG:` line is reported):", "",
                "```python", r.bad.rstrip(), "```", "", "Fixed:", "", "```python", r.good.rstrip(), "```"]
    return "\n".join(out) + "\n"


# --- command line -----------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    json = False  # --json was asked for: errors come as a JSON object on stdout too

    def error(self, message):
        if self.json:
            print(json.dumps({"findings": [], "errors": [{"path": "", "message": message}]}))
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_ids(text, parser):
    ids = {word.strip() for word in text.split(",") if word.strip()}
    unknown = sorted(ids - set(RULES))
    if unknown:
        parser.error(f"unknown rule id {', '.join(unknown)}; --list-rules shows them all")
    return ids


DOCS_HEADING = "# Static analysis: silent training bugs in the source"


def write_docs(target, force, parser):
    """Write the reference page; refuse a folder, a device, or a file this command did not write (without --force)."""
    path = Path(target)
    if path.exists():
        if not path.is_file():
            parser.error(f"--write-docs {target}: not a regular file; give a .md path")
        if not force and not path.read_text(encoding="utf-8", errors="replace").startswith(DOCS_HEADING):
            parser.error(f"--write-docs {target}: the file exists and is not a page lint.py wrote; pass --force to replace it")
    try:
        path.write_text(render_docs(), encoding="utf-8")
    except OSError as error:
        parser.exit(2, f"lint.py: error: cannot write {target}: {error.strerror}\n")


def main(argv=None):
    parser = Parser(prog="lint.py", description="Find silent PyTorch training bugs in source code, without running it.",
                    epilog="Exit 0 clean, 1 findings, 2 nothing could be read. Rules and examples: refs/static_analysis.md. "
                           "Settings: [tool.ml-debug.lint] in pyproject.toml (select, ignore, exclude, per-file-ignores).")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="Python files, notebooks (.ipynb) or folders")
    parser.add_argument("--json", action="store_true", help='print {"findings": [...], "errors": [...]} instead of lines')
    parser.add_argument("--select", metavar="IDS", help="only these rules (comma-separated ids)")
    parser.add_argument("--ignore", metavar="IDS", help="skip these rules (comma-separated ids)")
    parser.add_argument("--no-config", action="store_true", help="do not read [tool.ml-debug.lint] from pyproject.toml")
    parser.add_argument("--list-rules", action="store_true", help="print every rule id with its summary")
    parser.add_argument("--write-docs", metavar="FILE", help="write the rules reference page (refs/static_analysis.md)")
    parser.add_argument("--force", action="store_true", help="with --write-docs: replace a file lint.py did not write")
    parser.json = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    if args.list_rules:
        width = max(map(len, RULES))
        print("\n".join(f"{r.id:<{width}}  {r.summary}" for r in RULES.values()))
        return 0
    if args.write_docs:
        write_docs(args.write_docs, args.force, parser)
        return 0
    if not args.paths:
        parser.error("give at least one file or folder to lint")
    try:
        config = Config() if args.no_config else Config.nearest(args.paths)
    except ValueError as error:
        parser.error(str(error))
    if args.select:  # asked for by name on the command line: the file's select and ignore give way
        select = parse_ids(args.select, parser)
    else:
        select = (set(RULES) if config.select is None else config.select) - config.ignore
    select -= parse_ids(args.ignore, parser) if args.ignore else set()

    findings, errors, read = lint_paths(args.paths, select, config)
    for path, reason, _ in errors:
        print(f"{path}: skipped: {reason}", file=sys.stderr)
    if args.json:
        print(json.dumps({"findings": [f.as_json() for f in findings],
                          "errors": [{"path": p, "message": m} for p, m, _ in errors]}, indent=2))
    else:
        for f in findings:
            print(f"{f.where()}: {f.rule} {f.message}")
        if read:
            print(f"lint: {len(findings)} finding(s) in {read} file(s)", file=sys.stderr)
    if not read:
        return 2 if any(bad for _, _, bad in errors) else 0
    return 1 if findings else 0


def run():
    """main() with the endings a command line owes its user: Ctrl-C exits 130 and a closed or full stdout
    (`| head`, /dev/full) ends the run, both without a traceback."""
    try:
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt:
        os._exit(130)  # at once: tearing down a big file's syntax tree object by object takes seconds
    except BrokenPipeError:
        code = 0  # the reader has what it wanted
    except OSError as error:
        if error.errno != errno.ENOSPC:  # a full disk or /dev/full; anything else is not about the output
            raise
        print(f"lint.py: error: cannot write the output: {error.strerror}", file=sys.stderr)
        code = 2
    else:
        return code
    try:  # drop what is left in the buffer, so that exiting does not try to write it again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return code


if __name__ == "__main__":
    sys.exit(run())
