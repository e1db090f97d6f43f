"""Rules on train and eval modes: evaluation with autograd on, eval mode never left, functional dropout that
ignores the mode."""
import ast

from ..registry import rule
from ..syntax import argument, dotted, has_star_kwargs, is_false, keyword, method_call, position, terminal
from ..torch_names import ATTACK_WORDS, DROPOUTS, INPUT_GRADS, MOVES
from .parameters import is_module_class, is_optimizer_class
from .step_order import jump_after


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
    Loops that want gradients (backward(), torch.autograd.grad, requires_grad_, a call named for an adversarial
    attack: attack.perturb(x, y), pgd(model, x, y)) are not flagged, nor a
    model whose parameters were all frozen before the loop (requires_grad_(False), or requires_grad = False on
    each of its parameters): its forward passes record no graph.""",
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
                isinstance(n, ast.Call) and (src.qualname(n.func) in INPUT_GRADS or method_call(n, "requires_grad_")
                                             or attack_call(n)) for n in src.reach(loop)):
            continue  # gradients are wanted here (training, saliency maps, adversarial examples)
        for call in (n for n in src.local(loop) if isinstance(n, ast.Call)):
            target = ast.unparse(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
            if target not in scope_targets:
                continue
            switch = last_switch(src, scope, target, position(call))
            if switch is not None and switch.kind == "eval" and not src.grad_off(call, True) and \
                    not frozen_before(src, scope, target, position(call)):
                volatile = next((n for n in src.local(scope) if isinstance(n, ast.Call) and
                                 isinstance(keyword(n, "volatile"), ast.Constant) and keyword(n, "volatile").value is True), None)
                yield call, (f"{target} is in eval mode here but autograd is still on: every forward pass of this "
                             f"loop records a graph (memory, time, and graphs kept alive by stored outputs)"
                             + (f"; the volatile=True at line {volatile.lineno} turned autograd off only before "
                                f"PyTorch 0.4, and does nothing since" if volatile is not None else "")
                             + ". Wrap the loop in torch.no_grad() or torch.inference_mode(), or decorate the function.")
                break


def attack_call(call):
    """A call that runs an adversarial attack (its function or receiver named for one: attack.perturb(x, y),
    pgd(model, x, y), self.adversary(x)): the attack differentiates with respect to the input inside it."""
    names = [terminal(call.func)] + ([dotted(call.func.value)] if isinstance(call.func, ast.Attribute) else [])
    return any(word in (name or "").lower() for name in names for word in ATTACK_WORDS)


def frozen_before(src, scope, target, before):
    """Whether the last change of target's requires_grad in scope before a position froze it: target.requires_grad_(False),
    or a loop over target.parameters() / named_parameters() that sets each one's .requires_grad = False (or calls its
    requires_grad_(False)). A forward pass of frozen weights on plain inputs records no graph (KAIR's test scripts)."""
    changes = []
    for node in src.local(scope):
        if method_call(node, "requires_grad_") and ast.unparse(node.func.value) == target:
            changes.append((position(node), is_false(argument(node, 0, "requires_grad"))))
        elif isinstance(node, ast.For) and method_call(node.iter, "parameters", "named_parameters") and \
                ast.unparse(node.iter.func.value) == target:
            each = node.target.elts[-1] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
            name = ast.unparse(each)
            for inner in (n for statement in node.body for n in ast.walk(statement)):
                if isinstance(inner, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" and
                                                         ast.unparse(t.value) == name for t in inner.targets):
                    changes.append((position(inner), is_false(inner.value)))
                elif method_call(inner, "requires_grad_") and ast.unparse(inner.func.value) == name:
                    changes.append((position(inner), is_false(argument(inner, 0, "requires_grad"))))
    earlier = sorted(change for change in changes if change[0] < before)
    return bool(earlier) and earlier[-1][1]


def trained_models(src):
    """Models this file trains: whatever has .parameters() passed to an optimizer, or .train() called."""
    found = {e.target for e in src.all_events() if e.kind == "train"}
    for call in src.calls:
        if is_optimizer_class(src, call):
            found |= {ast.unparse(n.func.value) for a in call.args + [k.value for k in call.keywords]
                      for n in ast.walk(a) if method_call(n, "parameters", "named_parameters")}
    return found


def eval_target(src, call):
    """The model a call leaves in eval mode, as written and as an expression: `model.eval()` -> model;
    `evaluate(net)` where the helper evaluate(model) calls model.eval() and never model.train() -> net.
    Else (None, None)."""
    direct = [e for e in src.classify(call) if e.kind == "eval"]
    if direct:
        return direct[0].target, direct[0].node.func.value
    for helper in src.helpers(call):
        if "eval" in src.kinds(helper) and "train" not in src.kinds(helper):
            params = [a.arg for a in helper.args.args]
            if params and isinstance(call.func, ast.Attribute):
                params = params[1:]  # self
            for event in (e for n in src.local(helper) for e in src.classify(n) if e.kind == "eval"):
                if event.target in params:
                    index = params.index(event.target)
                    arg = argument(call, index, event.target)
                    return (ast.unparse(arg), arg) if arg is not None else (None, None)
                return event.target, None
    return None, None


def frozen_with(src, call, target):
    """The loop around call also freezes target (`text_encoder.train(False)`, then
    `text_encoder.requires_grad_(False)`): it stops training there, and eval mode is what it should stay in."""
    return any(method_call(n, "requires_grad_") and is_false(argument(n, 0, "requires_grad")) and
               ast.unparse(n.func.value) == target for n in src.local(src.enclosing_loops(call)[0]))


@rule(
    "eval-mode-not-restored",
    "A training loop switches the model to eval mode (directly or through a helper) and never back to train mode.",
    """After model.eval() for validation, dropout stays off and batch norm keeps using its running
    statistics for every later training step. Nothing fails; the model just overfits sooner or
    trains differently from what the code says. Call model.train() at the start of each epoch
    (or right after evaluation), or have the evaluation helper restore the mode it found. A model
    the file shows to have no layer that depends on the mode (its class holds only layers such as
    Linear, Conv2d, LSTM without dropout, no Dropout or batch norm) is left alone: eval() changes
    nothing there.""",
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
        fresh = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)} if isinstance(loop, ast.For) else set()
        for call in (n for n in src.local(loop) if isinstance(n, ast.Call) and n not in reported):
            target, model = eval_target(src, call)
            if target in trained and target not in fresh and not mode_free(src, built_by(src, model)) and \
                    not isinstance(jump_after(src, call), (ast.Break, ast.Return, ast.Raise)) and \
                    not frozen_with(src, call, target):  # `for model in models:` trains a new one each time
                reported.add(call)
                yield call, (f"this leaves {target} in eval mode and the training loop never calls {target}.train() "
                             f"again: later steps train with dropout off and frozen batch-norm statistics. Call "
                             f"{target}.train() at the start of each epoch or right after evaluating.")


MODULE_MOVES = MOVES | {"train"}  # return the module they are called on
# torch.nn layers that compute the same in train and eval mode (a recurrent layer's dropout= is checked on its own)
MODE_FREE = {
    "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "RMSNorm", "Flatten", "Unflatten",
    "Identity", "ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Tanh",
    "Sigmoid", "Softplus", "Softmax", "LogSoftmax", "Hardtanh", "Hardswish", "MaxPool1d", "MaxPool2d", "MaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Upsample", "PixelShuffle", "ZeroPad2d", "ReflectionPad2d",
    "ReplicationPad2d", "ConstantPad2d", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
    "Parameter",  # no layer: a tensor the model learns (self.pos = nn.Parameter(torch.zeros(...)))
}


def mode_layers(src, made, depth=0):
    """The module the call `made` builds behaves differently in train and eval mode: it is, or holds, an
    nn.Dropout with a rate that is not a literal 0, a batch norm, or F.dropout(..., training=self.training); a
    Sequential of such, a class of this file (or of another file of the run) or a factory of this file that
    builds one. False when unsure."""
    while isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and made.func.attr in MODULE_MOVES:
        made = made.func.value  # Net().to(device)
    if not isinstance(made, ast.Call) or depth > 6:
        return False
    name = src.qualname(made.func) or ""
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.nn."):
        if "Dropout" in last:
            rate = argument(made, 0, "p")
            return not (isinstance(rate, ast.Constant) and rate.value == 0)
        return "BatchNorm" in last or last in ("Sequential", "ModuleList") and any(
            mode_layers(src, a, depth + 1) for a in made.args)
    if isinstance(made.func, ast.Name) and not name:
        classes = src.classes.get(made.func.id, [])
        if len(classes) == 1:
            return any(mode_layers(src, n, depth + 1) or training_dropout(src, n)
                       for n in ast.walk(classes[0]) if isinstance(n, ast.Call))
        returns = [r.value for f in src.helpers(made) for r in src.local(f) if isinstance(r, ast.Return) and r.value]
        return bool(returns) and all(mode_layers(src, src.resolve(r), depth + 1) for r in returns)
    imported = src.project.find(src.path, name) if src.project and name and not name.startswith("torch") else None
    if imported is not None and isinstance(imported[1], ast.ClassDef):
        other, cls = imported
        return any(mode_layers(other, n, depth + 1) or training_dropout(other, n)
                   for n in ast.walk(cls) if isinstance(n, ast.Call))
    return False


def mode_free(src, made, depth=0):
    """Every module the calls in `made` build provably computes the same in train and eval mode: torch.nn layers
    of MODE_FREE (a recurrent one without a dropout= that is not a literal 0), Sequentials and ModuleLists of them,
    and classes of this file whose attributes are such modules and which call no dropout that follows
    self.training. False when unsure (a model of another file, a factory, a name not followed)."""
    return bool(made) and depth <= 6 and all(layer_mode_free(src, m, depth) for m in made)


def layer_mode_free(src, made, depth):
    while isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and made.func.attr in MODULE_MOVES:
        made = src.origin(made.func.value)  # model = Net(); model = model.cuda()
    if not isinstance(made, ast.Call):
        return False
    name = src.qualname(made.func) or ""
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.nn."):
        if last in ("Sequential", "ModuleList"):
            layers = made.args[0].elts if last == "ModuleList" and made.args and \
                isinstance(made.args[0], (ast.List, ast.Tuple)) else made.args
            return mode_free(src, list(layers), depth + 1) or not layers
        dropout = keyword(made, "dropout")
        return last in MODE_FREE and (dropout is None or isinstance(dropout, ast.Constant) and dropout.value == 0)
    classes = src.classes.get(made.func.id, []) if isinstance(made.func, ast.Name) and not name else []
    if len(classes) != 1 or not is_module_class(classes[0]) or \
            any(training_dropout(src, n) for n in ast.walk(classes[0]) if isinstance(n, ast.Call)):
        return False
    held = [passed(src, made, classes[0], v) for values in src.class_attrs(classes[0]).values() for v in values]
    return all(v is not None and (mode_free(src, [v], depth + 1) if builds_module(src, v) else plain_value(src, v))
               for v in held)


def passed(src, made, cls, value):
    """What an attribute value that names a parameter of cls.__init__ (`self.n_layer = n_layer`) is at the call
    `made` that builds the object: the argument given, else the default; None when neither shows; other values
    as they are."""
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    params = [a.arg for a in init.args.args[1:]] if init is not None else []
    if not isinstance(value, ast.Name) or value.id not in params:
        return value
    given = argument(made, params.index(value.id), value.id)
    if given is None:
        defaults = dict(zip(params[len(params) - len(init.args.defaults):], init.args.defaults))
        given = defaults.get(value.id)
    return src.resolve(given) if given is not None else None


def builds_module(src, value):
    """value builds a module: a torch.nn class (`nn.Linear(...)`) or a class of this file."""
    name = src.qualname(value.func) or "" if isinstance(value, ast.Call) else ""
    return name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper() or \
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in src.classes


def plain_value(src, value):
    """An attribute value that holds no module: a literal, arithmetic, or a call of a builtin, math or a torch
    function (`torch.zeros(...)`); a name or another call might be a module passed in or built elsewhere."""
    if isinstance(value, ast.Call):
        name = src.qualname(value.func) or ""
        return isinstance(value.func, ast.Name) and value.func.id in ("int", "float", "len", "list", "tuple", "dict", "range") \
            or name.startswith(("math.", "torch.")) and not name.startswith("torch.nn.")
    return not any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(value)) or isinstance(value, ast.BinOp)


def all_mode_layers(src, made):
    return bool(made) and all(mode_layers(src, m) for m in made)


def built_by(src, expr, depth=0):
    """The calls that build the module expr names: its own origin, or for a parameter of a function of this file,
    what each caller passes (an empty list when unsure)."""
    made = src.origin(expr) if expr is not None else None
    if made is not None or not isinstance(expr, ast.Name) or depth > 2:
        return [made] if made is not None else []
    function = src.function(expr)
    params = [a.arg for a in function.args.posonlyargs + function.args.args] if isinstance(function, ast.FunctionDef) else []
    callers = [c for c in src.calls_by_name.get(getattr(function, "name", ""), []) if function in src.helpers(c)]
    if expr.id not in params or not callers:
        return []
    found = [built_by(src, argument(c, params.index(expr.id), expr.id), depth + 1) for c in callers]
    return [] if any(not f for f in found) else [m for f in found for m in f]


def training_dropout(src, call):
    """F.dropout(x, p, training=self.training): a dropout that follows the module's mode."""
    name = src.qualname(call.func) or ""
    return name.startswith("torch.nn.functional.") and name.rsplit(".", 1)[-1] in DROPOUTS and \
        isinstance(argument(call, 2, "training"), ast.Attribute) and argument(call, 2, "training").attr == "training"


def trained_between(src, scope, start, end):
    """A backward() or step() of scope from start (a helper that builds the model and trains it, `net = fit(loader)`,
    counts at its call) to before end."""
    return any(e.kind in ("backward", "step") and start <= e.pos < end for e in src.events(scope))


def in_train_mode(src, scope, expr, before, depth=0):
    """The model expr names is provably in train mode at position `before` of scope, and has trained since it got
    there: the last switch there is target.train() (or train(True)), or there is none, no helper called before
    switches modes and the scope built it (a new module trains), with a backward() or step() of this scope (or of
    a helper it calls) in between; or the scope is a function every caller of which has it so. A forward pass
    right after model.train() with no training before it (recalibrating batch norm) is not evaluation."""
    target = ast.unparse(expr)
    switch = last_switch(src, scope, target, before)
    if switch is not None:
        mode = argument(switch.node, 0, "mode")
        return switch.kind == "train" and (mode is None or isinstance(mode, ast.Constant) and mode.value is True) \
            and trained_between(src, scope, switch.pos, before)
    if any(position(c) < before and any("eval" in src.kinds(f) for f in src.helpers(c))
           for c in src.local(scope) if isinstance(c, ast.Call)):
        return False  # a helper of this file switches some model's mode: unsure which
    if isinstance(expr, ast.Name) and expr.id in src.bindings(scope) and src.origin(expr) is not None:
        return trained_between(src, scope, position(src.definition(expr)), before)
    if isinstance(scope, ast.Module):
        return False  # a loop at module level: no caller to follow
    callers = [c for c in src.calls_by_name.get(getattr(scope, "name", ""), []) if scope in src.helpers(c)]
    if not callers or depth > 2 or isinstance(src.parent.get(scope), ast.ClassDef):
        return False
    params = [a.arg for a in scope.args.posonlyargs + scope.args.args]
    for call in callers:
        given = argument(call, params.index(target), target) if target in params else None
        if not isinstance(given, (ast.Name, ast.Attribute)) or \
                not in_train_mode(src, src.function(call) or src.tree, given, position(call), depth + 1):
            return False
    return True


@rule(
    "eval-mode-missing",
    "A loop that runs a model after training it, with no backward(), while it is still in train mode, and the model has dropout or batch norm.",
    """torch.no_grad() turns off autograd; it does not switch dropout and batch norm to their
    inference behaviour. A model that trains, then is evaluated without model.eval(), still drops
    units at random and normalises each batch with that batch's own statistics (and moves its
    running statistics toward the validation data): validation scores are noisy, worse than the
    model, and differ with the batch size. Call model.eval() before the evaluation loop and
    model.train() before training resumes. Flagged only when the file proves all of it: the
    model's parameters go to an optimizer of this file (or it is set to train()), its class or
    Sequential holds a dropout or a batch norm, a loop without backward() or step() calls it,
    and the last switch before that loop is model.train() (or none, where the model was built)
    with training in between, in the same function or in every caller of it. A forward loop right
    after model.train() with no training before it (recalibrating batch norm, as SWA does) is
    left alone, and so is a function no caller of this file shows. A second model trained beside
    the first (a decoder beside an encoder) is checked on its own.""",
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in val_loader:
                correct = (model(x).argmax(1) == y).sum().item()  # BUG: dropout still on
    """,
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for x, y in val_loader:
                correct = (model(x).argmax(1) == y).sum().item()
    """,
)
def check_eval_mode_missing(src):
    trained, reported = trained_models(src), set()
    for loop in src.loops():
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) or {"backward", "step"} & src.reach_kinds(loop):
            continue
        scope = src.function(loop) or src.tree
        for call in (n for n in src.local(loop) if isinstance(n, ast.Call)):
            target = ast.unparse(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
            if target not in trained or (scope, target) in reported or \
                    not in_train_mode(src, scope, call.func, position(call)) or \
                    not all_mode_layers(src, built_by(src, call.func)):
                continue
            reported.add((scope, target))
            yield call, (f"{target} is still in train mode in this evaluation loop: its dropout keeps dropping units "
                         f"and its batch norm uses each batch's statistics (and updates its running ones), so the "
                         f"scores are noisy and wrong. Call {target}.eval() before the loop and {target}.train() "
                         f"before training resumes.")


def training_flag(test):
    """True for `self.training` (any receiver's .training), False for `not self.training`, None otherwise; an
    `and` of tests is what one of its parts says."""
    if isinstance(test, ast.Attribute) and test.attr == "training":
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = training_flag(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((flag for flag in map(training_flag, test.values) if flag is not None), None)
    return None


def mode_branch(src, node):
    """True when node runs only while its module trains (in the body of `if self.training and ...:` or the else
    of `if not self.training:`), False when only while it does not (the other branch of those), else None; the
    nearest `if` of the function that tests the mode decides."""
    child, p = node, src.parent.get(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(p, ast.If) and child is not p.test:
            flag = training_flag(p.test)
            if flag is not None:
                return flag == any(child is s for s in p.body)
        child, p = p, src.parent.get(p)
    return None


def deliberate(comment):
    """A comment that says dropout stays on by design (Tacotron's prenet, Monte Carlo dropout)."""
    return any(word in comment for word in ("always", "inference", "by design", "on purpose", "monte carlo", "mc dropout"))


@rule(
    "dropout-missing-training",
    "F.dropout (and dropout1d/2d/3d, alpha_dropout) called without training=.",
    """The functional form does not know about model.eval(). F.dropout defaults to training=True,
    so it keeps dropping units at evaluation and inference time: validation looks worse and
    noisier than the model is. F.alpha_dropout defaults to training=False, so it never drops
    anything. Pass training=self.training, or use nn.Dropout. Only calls inside the methods of a
    module class are checked: a free function has no self.training to pass. A call whose comment
    says the dropout stays on by design (`# always on, also at inference`, as in Tacotron's
    prenet or Monte Carlo dropout) is left alone, and so is a class that its own file builds and never
    switches anything to eval mode (a GAN's discriminator that only ever trains).""",
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
    evaluates = any(e.kind == "eval" for e in src.all_events())
    for call in src.calls:
        name = src.qualname(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        cls = src.parent.get(src.method(call))
        if name.startswith("torch.nn.functional.") and last in DROPOUTS and argument(call, 2, "training") is None \
                and not has_star_kwargs(call) and not any(isinstance(a, ast.Starred) for a in call.args) \
                and is_module_class(cls) and not deliberate(src.comment(call)) \
                and mode_branch(src, call) is not True and (evaluates or cls.name not in src.calls_by_name):
            if DROPOUTS[last]:
                yield call, (f"F.{last} defaults to training=True and ignores model.eval(): it keeps dropping at "
                             f"evaluation time. Pass training=self.training (or use the nn.Dropout module).")
            else:
                yield call, (f"F.{last} defaults to training=False: it never drops anything, even in training. Pass "
                             f"training=self.training (or use the nn.AlphaDropout module).")
