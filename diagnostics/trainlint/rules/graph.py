"""Rules on the autograd graph behind backward(): a loss cut from the model, computed with autograd off, not
reduced to a scalar, or summed across iterations with its graph."""
import ast

from ..registry import rule
from ..syntax import LOOPS, dotted, end_position, keyword, method_call, position, terminal
from ..torch_names import DETACHING_FUNCTIONS, DETACHING_METHODS, RESHAPES, REWRAPS, TENSOR_METHODS


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
    wants = keyword(node, "requires_grad")
    if isinstance(wants, ast.Constant) and wants.value is True and \
            combine(flow(src, a, set(seen), depth) for a in node.args) == CONST:
        return LIVE  # a new leaf of numbers that requires grad (torch.tensor(1.0, requires_grad=True)); a re-wrap of a
        # value cut from the model stays cut
    if detaching_method(src, node) or name in DETACHING_FUNCTIONS:
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


def detaching_method(src, node):
    """node is x.detach(), x.item(), x.numpy() or x.tolist() called on a value (not a module's function)."""
    return method_call(node, *DETACHING_METHODS) and src.qualname(node.func) is None


def cut_label(src, node):
    """How a cut is written, for messages: `.item()`, `.data`, `torch.tensor(...)`."""
    if isinstance(node, ast.Attribute):
        return ".data"
    if detaching_method(src, node):
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
            inner = where.value if isinstance(where, ast.Attribute) else where.func.value \
                if detaching_method(src, where) else where.args[0] if where.args else None  # what was cut
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


def graph_carriers(expr, src=None):
    """Names and calls in expr outside .item()/.detach()/float(...), not behind .data, and (given src) not in a call
    of a function of this file whose every return is such a value (`def to_scalar(v): return v.data.tolist()[0]`)."""
    todo, found = [expr], []
    while todo:
        node = todo.pop()
        if method_call(node, *DETACHING_METHODS) or isinstance(node, ast.Attribute) and node.attr == "data" or \
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("float", "int") or \
                src is not None and isinstance(node, ast.Call) and returns_numbers(src, node):
            continue
        if isinstance(node, (ast.Name, ast.Call)):
            found.append(node)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):  # args.steps: not args itself
            todo.extend(ast.iter_child_nodes(node))
    return found


def an_object(src, scope, name):
    """name is bound in scope to an instance of a class named in CamelCase (MONAI's CumulativeAverage, a project's
    meter), not a list: its append() may keep a number or a detached copy, not the tensor."""
    return any(isinstance(value, ast.Call) and (terminal(value.func) or "")[:1].isupper()
               for _, value in src.bindings(scope).get(name, []))


def returns_numbers(src, call):
    """call runs a function of this file whose returns all give values without a graph (.item(), .tolist(), .data,
    float(...)): a number, whatever tensor it was given."""
    helpers = src.helpers(call)
    if not helpers:
        return False
    returns = [n for n in src.local(helpers[0]) if isinstance(n, ast.Return)]
    return bool(returns) and all(r.value is not None and not graph_carriers(r.value) for r in returns)


def loss_names(src, scope, targets, helpers=True):
    """Names in scope that hold a loss: what feeds a backward() there (`targets`), a loss function's output, and
    (helpers) what a step function of this file returns as it is, graph and all (`loss.backward(); return loss`),
    alone or in a tuple the caller unpacks (`return loss, acc` read by `loss, acc = train_step(...)`)."""
    names = names_behind(src, targets, (ast.BinOp, ast.Name))
    for n in src.local(scope):
        if not isinstance(n, ast.Assign):
            continue
        whole = src.loss_call(n.value)
        returned = returned_losses(src, n.value) if helpers and not whole and isinstance(n.value, ast.Call) else set()
        for t in n.targets:
            if isinstance(t, ast.Name) and (whole or None in returned):
                names.add(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)):
                names |= {e.id for i, e in enumerate(t.elts) if i in returned and isinstance(e, ast.Name)}
    return names


def returned_losses(src, call):
    """Where the function of this file that call runs returns one of its loss names as it is: None for the whole
    value (`return loss`), the index of each tuple element that is one (`return loss, acc`: 0)."""
    helpers = src.helpers(call)
    if not helpers:
        return set()
    function = helpers[0]
    losses = loss_names(src, function, [t for _, t in backward_calls(src, function) if t is not None], helpers=False)
    found = set()
    for n in src.local(function):
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id in losses:
            found.add(None)
        elif isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple):
            found |= {i for i, e in enumerate(n.value.elts) if isinstance(e, ast.Name) and e.id in losses}
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


def self_attribute(src, target):
    """target is `self.<name>` in a method."""
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
        src.self_class(target.value) is not None


def adds_to(value, total):
    """value is `total + ...` (`total += x` reads so too): a running sum, not a reset."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and \
        isinstance(value.left, ast.Name) and value.left.id == total


def trains(src, node):
    """node runs once per optimizer step: in a loop that calls backward() or step() (not a loop that sums the
    terms of one loss, such as a perceptual loss over layers), or in a training_step method."""
    loops = src.enclosing_loops(node)
    return bool(loops) and (not isinstance(loops[0], LOOPS) or bool({"backward", "step"} & src.reach_kinds(loops[0])))


FEW = 10  # our assumption: a loop of at most this many passes (a test's handful of steps) keeps a few graphs, not a growing pile


def few(src, node):
    """node's loop runs a literal small number of times: `for _ in range(3)`."""
    loop = src.enclosing_loops(node)[0]
    count = loop.iter.args[-1] if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and \
        terminal(loop.iter.func) == "range" and 1 <= len(loop.iter.args) <= 2 else None
    return isinstance(count, ast.Constant) and isinstance(count.value, int) and count.value <= FEW


@rule(
    "loss-accumulated-with-graph",
    "A loss tensor is summed (or appended) across iterations without .item() or .detach().",
    """`total += loss` keeps a reference to every iteration's autograd graph. Where no backward()
    of that loss runs in the loop (an evaluation loop without no_grad) that is the activations
    too: memory grows each step until the run fails out of memory hours in. Where one runs, it
    frees the activations, but the graph nodes still pile up step after step, and the total is a
    tensor that drags the graph along into every later use. Add loss.item() (or loss.detach())
    instead. A loss a step function of the file returns as it is (`loss.backward(); return loss`, alone or
    in a tuple the caller unpacks) and its caller sums counts too. A loop of a literal few passes (range(3) in a test)
    and a dict of outputs (whose entries the code detaches by key) are left alone.""",
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
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and self_attribute(src, node.target):
                sums.append((node, dotted(node.target), node.value))  # self.running_loss += loss: lives as long as self
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                    isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) and \
                    isinstance(node.value.left, ast.Name) and node.value.left.id == node.targets[0].id:
                sums.append((node, node.targets[0].id, node.value.right))
            elif method_call(node, "append") and isinstance(node.func.value, ast.Name) and len(node.args) == 1 and \
                    not an_object(src, scope, node.func.value.id):
                sums.append((node, node.func.value.id, node.args[0]))
        sums = [(node, total, added) for node, total, added in sums if trains(src, node) and not few(src, node)]
        if not sums:
            continue
        backwards = [(call, t) for call, t in backward_calls(src, scope) if t is not None]
        targets = [t for _, t in backwards]
        backpropagated = names_behind(src, targets, ast.AST)  # anything that feeds a backward()
        keyed = {n.value.id for n in src.local(scope) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                 and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)}  # dicts: out["loss"]
        losses = loss_names(src, scope, targets)
        for node, total, added in sums:
            carriers = [n for n in graph_carriers(added, src)
                        if (isinstance(n, ast.Name) and n.id in losses and n.id not in keyed or
                            isinstance(n, ast.Call) and src.loss_call(n))
                        and flow(src, n)[0] == "live"]  # not a value computed under no_grad, nor through .item()
            carried = [ast.unparse(n) for n in carriers]
            if not carried or total in backpropagated or src.grad_off(node, True):
                continue
            loop = src.enclosing_loops(node)[0]
            rebound = [pos for pos, value in src.bindings(scope).get(total, [])  # reset in the loop: not a running total
                       if position(loop) <= pos <= end_position(loop) and not adds_to(value, total)] + [
                a for a in src.local(loop) if "." in total and isinstance(a, ast.Assign) and  # self.total = 0.0
                any(dotted(t) == total for t in a.targets) and not (
                    isinstance(a.value, ast.BinOp) and dotted(a.value.left) == total)]
            if rebound:
                continue
            freed = next((call for call, target in backwards if position(loop) <= position(call) <= end_position(loop) and
                          carried[0] in {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}), None)
            made = (src.definition(carriers[0]) or src.unpacked_from(carriers[0])) if isinstance(carriers[0], ast.Name) else None
            helper = src.helpers(made)[0] if isinstance(made, ast.Call) and src.helpers(made) else None
            if freed is None and helper is not None and "backward" in src.kinds(helper):
                yield node, (f"adding {carried[0]} (a tensor with its autograd graph, as {helper.name}() returns it) to "
                             f"{total} on every iteration chains every step's graph onto {total} (the backward() in "
                             f"{helper.name}() freed their activations, not the graph): memory creeps up with the steps. "
                             f"Use {carried[0]}.item() (or {carried[0]}.detach()) here, or return loss.item().")
            elif freed is None:
                yield node, (f"adding {carried[0]} (a tensor with its autograd graph) to {total} on every iteration "
                             f"keeps all those graphs alive: memory grows until the run fails. Use {carried[0]}.item() "
                             f"(or {carried[0]}.detach()) here.")
            else:  # backward() freed the activations: what stays is smaller, and still a graph
                yield node, (f"adding {carried[0]} (a tensor with its autograd graph) to {total} on every iteration "
                             f"chains every step's graph onto {total} (backward() at line {freed.lineno} freed their "
                             f"activations, not the graph): memory creeps up with the steps, and {total} stays a tensor "
                             f"with a graph wherever it is used later. Use {carried[0]}.item() (or "
                             f"{carried[0]}.detach()) here.")
