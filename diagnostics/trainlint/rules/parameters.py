"""Rules on the parameters an optimizer holds: one submodule's while the whole model runs, or a layer replaced
after the optimizer was built; and on how it decays them (Adam's weight_decay is L2, not weight decay)."""
import ast

from ..registry import rule
from ..syntax import argument, dotted, end_position, is_false, keyword, method_call, position, terminal


def is_optimizer_class(src, call):
    """call builds an optimizer: torch.optim.AdamW(...), bnb.optim.Adam8bit(...)."""
    name = src.qualname(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    return "optim" in name.lower() and "sched" not in name.lower() and "swa" not in name.lower() and last[:1].isupper()


def is_module_class(cls):
    """cls is a class whose bases end in Module (nn.Module, LightningModule)."""
    return isinstance(cls, ast.ClassDef) and any((terminal(b) or "").endswith("Module") for b in cls.bases)


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
HELD = {"model", "net", "network", "base_model", "wrapped"}  # what a wrapper of a class we cannot see calls its network
DECOUPLED_SIZED = 0.01  # Adam's weight_decay from here on is a decoupled decay's value (AdamW's own default, the
# recipes' 0.01-0.1) given to the wrong optimizer; below it is L2 of the size papers choose as L2 (GCN's 5e-4, 1e-4
# to 1e-6 in vision and GANs): on a fresh 1M-line corpus all 62 findings below 0.01 were deliberate (ours)


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


def user_made(src, root):
    """root was built elsewhere (a parameter) or by a class that is neither torch's nor a model zoo's (a wrapper of
    the project's)."""
    name = src.origin_name(root)
    return not name or not name.startswith(("torch", "timm", "transformers")) and name.rsplit(".", 1)[-1][:1].isupper()


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
        if any(w in (terminal(root) or "").lower() for w in ("loss", "crit")):
            continue  # a GAN loss module's discriminator: the rest of it is a frozen perceptual network
        cls = model_class(src, root) if isinstance(part.value, ast.Name) else None
        if cls is not None and not submodules_with_parameters(src, cls) - {part.attr}:
            continue  # the model's only submodule with parameters is the one given to the optimizer
        if cls is None and part.attr in HELD and isinstance(part.value, ast.Name) and user_made(src, root):
            continue  # `wrapper.model`: the network a wrapper (an EMA, a loss wrapper) built elsewhere holds
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


def literal(src, expr, depth=0):
    """The constant expr holds when this file writes it: `wd` after `wd = 0.1`, `config["weight_decay"]` after
    `config = {"weight_decay": 0.1}` (or `dict(weight_decay=0.1)`) that is never written to; else expr itself."""
    value = src.resolve(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else expr
    if not (isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and depth < 8):
        return value
    table = src.resolve(value.value) if isinstance(value.value, (ast.Name, ast.Attribute)) else value.value
    if isinstance(table, ast.Dict):
        entries = {k.value: v for k, v in zip(table.keys, table.values) if isinstance(k, ast.Constant)}
    elif isinstance(table, ast.Call) and isinstance(table.func, ast.Name) and table.func.id == "dict":
        entries = {kw.arg: kw.value for kw in table.keywords if kw.arg}
    else:
        return value
    name = dotted(value.value)
    written = any(isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load) and dotted(n.value) == name
                  for n in src.of_type(ast.Subscript)) or any(
        method_call(c, "update", "setdefault", "pop") and dotted(c.func.value) == name for c in src.calls)
    if value.slice.value in entries and not written:
        return literal(src, entries[value.slice.value], depth + 1)
    return value


@rule(
    "adam-coupled-weight-decay",
    "torch.optim.Adam gets a weight_decay of 0.01 or more: a decoupled decay's value added to the gradient as L2.",
    """Adam's weight_decay adds weight_decay * w to the gradient before the moments, so the decay
    is divided by the same sqrt(v) as the gradient: weights with large gradients are barely
    decayed and rarely updated ones are decayed hard. That is L2 regularisation, which under
    Adam is not the weight decay that recipes (and their 0.01 to 0.1 values) mean. AdamW applies
    the decay to the weights directly, apart from the gradient; use it, or pass
    decoupled_weight_decay=True to Adam. A smaller value (GCN's 5e-4, 1e-4 to 1e-6) is L2 of the
    size papers choose as L2, and is left alone. If L2 of 0.01 or more under Adam is the intent,
    add # noqa: adam-coupled-weight-decay.""",
    """
    import torch

    model = torch.nn.Linear(512, 10)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=0.1)  # BUG: L2 under Adam, not weight decay
    """,
    """
    import torch

    model = torch.nn.Linear(512, 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    """,
)
def check_adam_coupled_weight_decay(src):
    for call in src.calls:
        if src.qualname(call.func) != "torch.optim.Adam":
            continue
        decay = literal(src, argument(call, 4, "weight_decay"))  # Adam(params, lr, betas, eps, weight_decay, ...)
        decoupled = keyword(call, "decoupled_weight_decay")
        if isinstance(decoupled, ast.Constant) and decoupled.value is True:
            continue
        if isinstance(decay, ast.Constant) and isinstance(decay.value, (int, float)) and not isinstance(decay.value, bool) \
                and decay.value >= DECOUPLED_SIZED:
            yield call, (f"torch.optim.Adam(weight_decay={decay.value}) adds the decay to the gradient, where Adam's "
                         f"normalisation scales it per weight: that is L2, not weight decay. Use torch.optim.AdamW, or "
                         f"decoupled_weight_decay=True.")
