"""One parsed file: its imports, scopes, the definitions that reach each use, and its training-loop events."""
import ast
import bisect
import collections
from dataclasses import dataclass

from .syntax import (ACTOR_CALLS, BINDERS, COMPREHENSIONS, FUNCTIONS, LOOPS, NESTED, SCOPES, Elsewhere, argument, dotted,
                     end_position, is_false, keyword, method_call, position, terminal)
from .torch_names import (ACTIVATION_MODULES, ACTIVATIONS, CLIPS, EVENT_NAMES, GRAD_OFF, GRAD_ON, LIBRARY_GRAD_OFF,
                          LOSS_FUNCTIONS, LOSS_MODULES, RESHAPES, SET_GRAD, TENSOR_METHODS)


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


def is_none(node):
    return node is None or isinstance(node, ast.Constant) and node.value is None


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

    def __init__(self, tree, path, project, text):
        self.tree, self.path, self.project = tree, path, project
        self.lines = text.splitlines()  # never fewer lines than the parser counted: it splits at \f and \x1c too
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

    def comment(self, node):
        """The comment that ends node's last line (`# always on, also at inference`), lowercased, else ''."""
        rest = self.lines[node.end_lineno - 1].encode()[node.end_col_offset:].decode(errors="ignore")
        return rest.partition("#")[2].lower()

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
            positional = a.posonlyargs + a.args
            defaults = dict(zip([x.arg for x in positional[len(positional) - len(a.defaults):]], a.defaults))
            defaults.update((x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
            for arg in positional + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                default = defaults.get(arg.arg)  # `criterion=nn.CrossEntropyLoss()`: what the function uses unless told
                bind(ast.Name(id=arg.arg), position(scope), None if is_none(default) else default)
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

    def unpacked_from(self, name):
        """The call the last tuple assignment before a name's use unpacked it from (`logits, loss = model(x, y)`), or
        None: what definition() leaves unknown, an element of a tuple, for a caller that can judge by the call."""
        found = None
        for node in self.local(self.scope(name)):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and position(node) < position(name) and \
                    any(isinstance(t, (ast.Tuple, ast.List)) and any(isinstance(e, ast.Name) and e.id == name.id
                                                                      for e in t.elts) for t in node.targets):
                if found is None or position(node) > position(found):
                    found = node
        return None if found is None else found.value

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
            if value is None:
                unpacked = self.unpacked(node)
                return self.element_activation(*unpacked, depth + 1) if unpacked else None
            return self.activation(value, depth + 1)
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
            made = self.origin(node.func)  # self.softmax(x) with self.softmax = nn.LogSoftmax(): the module decides
            if made is not None:
                return self.module_activation(made, depth + 1)
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

    def unpacked(self, name):
        """(call, index) when name was last bound by unpacking a call's result (`validity, label = D(x)`: the
        call and 1 for label), else None."""
        scope = self.scope(name)
        bound = self.bindings(scope).get(name.id, [])
        earlier = [b for b in bound if b[0] <= position(name)]
        if not earlier or earlier[-1][1] is not None:
            return None
        for node in self.local(scope):
            if isinstance(node, ast.Assign) and end_position(node) == earlier[-1][0] and isinstance(node.value, ast.Call) \
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple):
                names = [e.id if isinstance(e, ast.Name) else None for e in node.targets[0].elts]
                return (node.value, names.index(name.id)) if name.id in names else None
        return None

    def element_activation(self, call, index, depth):
        """The activation applied to element `index` of what the call returns, when it calls a module of a class of
        this file whose forward returns a tuple at every return (`return self.adv(x), self.aux(x)`)."""
        made = self.origin(call.func)
        classes = self.classes.get(made.func.id, []) if made is not None and isinstance(made.func, ast.Name) else []
        forward = next((f for f in classes[0].body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None) \
            if len(classes) == 1 else None
        returns = [n.value for n in self.local(forward) if isinstance(n, ast.Return)] if forward else []
        if not returns or not all(isinstance(r, ast.Tuple) and len(r.elts) > index for r in returns):
            return None
        found = [self.activation(r.elts[index], depth + 1) for r in returns]
        kinds = {f[0] if f else None for f in found}
        return found[0] if len(kinds) == 1 and None not in kinds else None

    def self_class(self, name):
        """The class whose method has `name` as its self parameter (`self(x)` in a LightningModule), else None."""
        method = self.method(name) if isinstance(name, ast.Name) else None
        if method is not None and method.args.args and method.args.args[0].arg == name.id:
            return self.parent[method]
        return None

    # -- autograd mode --------------------------------------------------------------------------

    def grad_switch(self, expr, resolve=True):
        """False for a context or decorator that turns autograd off, True for one that turns it on, else None. With
        resolve, a decorator (or decorator factory) defined once in this file that runs the function under a `with`
        or an inner function decorated to turn autograd off (`def no_grad_eval(fn): ... with torch.no_grad(): return
        fn(...)`, `def torch_eval(fn): @torch.no_grad() def run(...)`) turns it off too."""
        call = expr if isinstance(expr, ast.Call) else None
        target = call.func if call else expr
        if resolve and isinstance(target, ast.Name) and target.id not in self.imports \
                and len(self.functions.get(target.id, ())) == 1:
            definition = self.functions[target.id][0]
            switches = [item.context_expr for n in ast.walk(definition) if isinstance(n, (ast.With, ast.AsyncWith))
                        for item in n.items]
            switches += [d for n in ast.walk(definition) if isinstance(n, FUNCTIONS) and n is not definition
                         for d in n.decorator_list]
            if any(self.grad_switch(switch, False) is False for switch in switches):
                return False
        name = self.qualname(target)
        if name in GRAD_OFF:
            mode = argument(call, 0, "mode") if call else None
            return is_false(mode)  # inference_mode(False) leaves autograd on
        if name in GRAD_ON:
            return True
        if name in LIBRARY_GRAD_OFF:
            return False
        if name in SET_GRAD and call:
            mode = argument(call, 0, "mode")
            return bool(mode.value) if isinstance(mode, ast.Constant) else None
        if not (name or "").startswith("torch.") and any(
                w in (terminal(call.func if call else expr) or "") for w in ("no_grad", "inference_mode")):
            return False  # a project's own `@no_grad()`, `@smart_inference_mode()` (a wrapper of torch's)
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
            return []  # no event has that name: a shortcut past the checks below
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

    @memo
    def object_method(self, call):
        """(Source, method) that `obj.m(...)` runs (an actor's `obj.m.call(...)`, `obj.m.remote(...)` too) when obj
        was built from a class of this file or of another file of this run: `Trainer(...)`, or a call handed the
        class (`mesh.spawn("trainer", Trainer, ...)`); `self.obj = None` placeholders are passed over. Else None."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in ACTOR_CALLS and isinstance(func.value, ast.Attribute):
            func = func.value
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, (ast.Name, ast.Attribute)):
            return None
        made = self.resolve(func.value)
        method = self.method(func.value)
        if made is func.value and isinstance(made, ast.Attribute) and isinstance(made.value, ast.Name) and method \
                and method.args.args and method.args.args[0].arg == made.value.id:
            values = [v for v in self.class_attrs(self.parent[method]).get(made.attr, []) if not is_none(v)]
            made = values[0] if len(values) == 1 else made  # `self.trainer = None` in __init__, built later
        if not isinstance(made, ast.Call):
            return None
        for candidate in (made.func, *made.args):
            found = self.class_of(candidate) if (terminal(candidate) or "a")[0].isupper() else None  # CapWords
            if found is not None:
                other, cls = found
                methods = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and f.name == func.attr]
                return (other, methods[0]) if len(methods) == 1 else None
        return None

    @memo
    def outside_callees(self, call, imported=True):
        """(Source, function) pairs, none or one, for what a call runs beyond the functions of this file it names:
        the method of an object whose class this file or another file of the run defines
        (`trainer.forward_backward(batch)`), or with imported, a function imported from another file of the run
        (`from engine import train_one_epoch`)."""
        method = self.object_method(call)
        if method is not None:
            return [method]
        name = self.qualname(call.func) if self.project and imported else None
        found = self.project.find(self.path, name) if name and name.split(".")[0] != "torch" else None
        return [found] if found is not None and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)) else []

    def callees(self, call):
        """(Source, function) for each function a call runs: one of this file (helpers), or outside_callees."""
        return [(self, f) for f in self.helpers(call)] + self.outside_callees(call)

    @memo
    def run_events(self, container, imported=True):
        """events(container), where a call to a method of an object of a known class, or with imported to a function
        of another file of the run, also counts as the backward() or step() it runs (a trainer whose
        forward_backward() and optim_step() a controller calls; a train_one_epoch imported from engine.py)."""
        found = list(self.events(container))
        for node in self.local(container):
            found += self.outside_events(node, imported) if isinstance(node, ast.Call) else []
        return sorted(found, key=lambda e: e.pos)

    @memo
    def outside_events(self, call, imported=True):
        """The backward() and step() that a call runs through outside_callees, as helper events at the call."""
        kinds = set().union(*(other.kinds(function) for other, function in self.outside_callees(call, imported)))
        return [Event(kind, call, helper=True) for kind in ("backward", "step") if kind in kinds]

    def class_of(self, expr):
        """(Source, ClassDef) when expr names a class of this file or one imported from another file of the run."""
        if isinstance(expr, ast.Name) and expr.id not in self.imports:
            classes = self.classes.get(expr.id, [])
            return (self, classes[0]) if len(classes) == 1 else None
        name = self.qualname(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
        found = self.project.find(self.path, name) if self.project and name and name.split(".")[0] != "torch" else None
        return found if found is not None and isinstance(found[1], ast.ClassDef) else None

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

    @memo
    def passed(self):
        """{(place, name or attribute as written): [(call, function, parameter)]} for each call to a function of
        this file that takes the object as an argument (`train_one_epoch(model, train_loader)`); (function,
        parameter) is the key of the object's name inside the function."""
        found = {}
        for call in self.calls:
            slots = [(i, a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]
            for slot, value in slots:
                name = dotted(value)
                if name is None or type(slot) is int and any(isinstance(a, ast.Starred) for a in call.args[:slot]):
                    continue
                for helper in self.helpers(call):
                    params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
                    if isinstance(call.func, ast.Attribute):  # self.method(...): the first parameter is self
                        params = params[1:]
                    if type(slot) is int:
                        param = params[slot] if slot < len(params) else None
                    else:
                        param = slot if slot in params + [a.arg for a in helper.args.kwonlyargs] else None
                    if param is not None:
                        found.setdefault((self.place(call, name), name), []).append((call, helper, param))
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
