"""Rules on what goes into a loss: an activation the loss applies itself, and softmax without dim."""
import ast

from ..ranks import rank, spelled_rank, through
from ..registry import rule
from ..syntax import argument, dotted, has_star_kwargs, keyword, method_call, place, position, terminal


def activation_fed_to(src, call, loss_kind):
    """(activation, where) when `call` is a loss of `loss_kind` whose input comes from an activation, else None."""
    loss = src.loss_call(call)
    return src.activation(loss[1]) if loss and loss[0] == loss_kind and loss[1] is not None else None


LABELS = ("label", "target", "class", "cls")  # how a tensor of class indices is named
NOT_LABELS = ("prob", "soft", "teacher", "dist", "logit", "pred")  # soft targets: MSE or KL on probabilities is fine


def label_like(expr):
    name = (terminal(expr) or "").lower()
    return name in ("y", "t", "gt", "yb", "y_true") or any(w in name for w in LABELS) and not any(w in name for w in NOT_LABELS)


def untraced_criterion(src, call):
    """call is `crit(output, labels)` with crit a criterion this file cannot trace: a function's parameter
    (`def train(model, crit)`) or a callable named like a loss whose origin is elsewhere."""
    if len(call.args) != 2 or call.keywords or not label_like(call.args[1]):
        return False
    func, function = call.func, src.function(call)
    parameter = isinstance(func, ast.Name) and function is not None and src.definition(func) is None and \
        func.id in {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
    return parameter and not src.helpers(call) or (src.loss_call(call) or ("",))[0] == "other"


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
        found = activation_fed_to(src, call, "ce")
        if not found and untraced_criterion(src, call):
            found = src.activation(call.args[0])
            if found and found[0] == "softmax":
                yield call, (f"{ast.unparse(call.func)} is given class labels, so it is almost surely a cross-entropy, "
                             f"which applies log_softmax itself: the output of the softmax at {place(found[1])} is "
                             f"squashed twice and training stalls as the model gets confident. Pass the raw logits.")
            continue
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
        found = activation_fed_to(src, call, "nll")
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
        found = activation_fed_to(src, call, "bce_logits")
        if found and found[0] == "sigmoid":
            yield call, (f"BCEWithLogitsLoss applies the sigmoid itself; this sigmoid output ({place(found[1])}) "
                         f"gets a second one, so predictions are stuck in (0.5, 0.73). Pass the raw logits.")


@rule(
    "softmax-no-dim",
    "F.softmax / F.log_softmax / nn.Softmax without dim=, which picks a dimension that depends on the input's rank.",
    """Without dim, PyTorch uses dim 0 for 0-D, 1-D and 3-D inputs and dim 1 otherwise (with a
    deprecation warning that is easy to miss). For a (batch, time, vocab) tensor that normalises
    across the batch; for (batch, heads, query, key) attention scores, across the heads: every
    number is a valid-looking probability and the model trains on nonsense. Always pass dim,
    usually dim=-1. The rule follows the input's rank through the code (view and reshape sizes,
    factories, Linear layers, elementwise ops, matmul, cat, indexing) and speaks only when that
    rank makes the implicit dim wrong: 3-D, or 4-D and more not spelled out as an image batch
    (x.view(n, c, h, w), where dim 1 is the channel dimension, is left alone). A 1-D or 2-D
    input, and one whose rank the code does not show, is left to PyTorch's own warning.""",
    """
    import torch.nn.functional as F

    logits = model(tokens).view(batch, time, vocab)
    log_probs = F.log_softmax(logits)  # BUG: no dim; a 3-D input is normalised over the batch
    """,
    """
    import torch.nn.functional as F

    logits = model(tokens).view(batch, time, vocab)
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
            tensor = argument(call, 0, "input")
            of = rank(src, tensor)
            if implicit_dim_is_wrong(of, spelled_rank(src, tensor)):
                yield call, f"{last} without dim {normalised_over(of)}. Pass dim explicitly (usually dim=-1)."
        elif name.startswith("torch.nn.") and last in ("Softmax", "LogSoftmax", "Softmin") \
                and not call.args and keyword(call, "dim") is None:
            wrong = [(use, of) for use, of in module_inputs(src, call) if implicit_dim_is_wrong(of, None)]
            if wrong:
                use, of = wrong[0]
                yield call, (f"nn.{last}() without dim, applied at line {use.lineno}, {normalised_over(of)}. "
                             f"Pass dim explicitly, e.g. nn.{last}(dim=-1).")


def implicit_dim_is_wrong(of, spelled):
    """Without dim, softmax normalises dim 0 of a 0-D, 1-D or 3-D input and dim 1 otherwise. For a 3-D input that
    is the batch (or time); for 4-D and more it is the channel dimension of an image batch, which is meant when the
    code spells its sizes out (x.view(n, c, h, w)), and otherwise the heads of attention scores. A rank the code
    leaves open (None) is no finding: PyTorch warns about the implicit dim at run time."""
    return of == 3 or of is not None and of >= 4 and spelled != of


def normalised_over(of):
    if of == 3:
        return "normalises this 3-D input over dim 0: across the batch of a (batch, time, classes) tensor"
    return (f"normalises this {of}-D input over dim 1: the channels of an image batch, but the heads of "
            f"(batch, heads, query, key) attention scores")


def module_inputs(src, made):
    """(call, rank) for each call in this file that applies the softmax module built by `made` (after the layers
    before it when it sits in an nn.Sequential); none when it is never applied here or a use cannot be followed."""
    container, before = made, []
    parent = src.parent.get(made)
    if isinstance(parent, ast.Call) and made in parent.args and (src.qualname(parent.func) or "").endswith(".Sequential"):
        container, before = parent, parent.args[:parent.args.index(made)]
        if not all(isinstance(a, ast.Call) for a in before):
            return []
    found = []
    for use in module_uses(src, container):
        called = src.parent.get(use)
        if isinstance(called, ast.Call) and called.func is use and len(called.args) == 1 and not called.keywords:
            found.append((called, through(src, before, rank(src, called.args[0]))))
    return found


def module_uses(src, module):
    """The expressions that read the module built by `module`: `self.head` in its class, `head` in its scope, or
    the call itself for `nn.Softmax()(x)`; none when the module is put somewhere this cannot follow."""
    holder = src.parent.get(module)
    if isinstance(holder, ast.Call) and holder.func is module:
        return [module]
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1):
        return []
    target = holder.targets[0]
    if isinstance(target, ast.Name):
        return [n for n in src.of_type(ast.Name) if n.id == target.id and isinstance(n.ctx, ast.Load) and
                src.resolve(n) is module]
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and src.method(holder) is not None):
        return []
    return [n for n in src.of_type(ast.Attribute) if n.attr == target.attr and isinstance(n.ctx, ast.Load) and
            src.self_attribute(n) is module]


def summed_loss_reduction(src, term):
    """'mean' or 'sum' when the term added to a running total is one torch loss value per batch
    (`crit(out, y).item()`, `loss.item()` with loss such a call, `float(loss)`), by its reduction; else None."""
    while True:
        if isinstance(term, ast.Call) and isinstance(term.func, ast.Attribute) and term.func.attr in (
                "item", "detach", "cpu") and not term.args:
            term = term.func.value
        elif isinstance(term, ast.Call) and isinstance(term.func, ast.Name) and term.func.id == "float" and \
                len(term.args) == 1:
            term = term.args[0]
        else:
            break
    if isinstance(term, ast.Name):
        term = src.definition(term)
    loss = src.loss_call(term) if isinstance(term, ast.Call) and not has_star_kwargs(term) else None
    if loss is None or loss[0] == "other":
        return None
    holders = [h for h in (term, src.origin(term.func)) if isinstance(h, ast.Call)]
    if any(keyword(h, "reduce") is not None for h in holders):
        return None  # the old reduce=False: one loss per sample
    size_average = next((keyword(h, "size_average") for h in holders if keyword(h, "size_average") is not None), None)
    if size_average is not None:  # the old API: size_average=False sums
        return ("mean" if size_average.value else "sum") if isinstance(size_average, ast.Constant) else None
    reduction = src.loss_reduction(term)
    if reduction is None and any(keyword(h, "reduction") is not None for h in holders):
        return None  # reduction=args.reduction: unknown
    return reduction or "mean"


def iterated_loader(loop):
    """The name a for loop draws its batches from: `loader` in `for x, y in loader`, `enumerate(loader)`, `tqdm(loader)`."""
    it = loop.iter
    if isinstance(it, ast.Call) and it.args and not it.keywords and terminal(it.func) in ("enumerate", "tqdm"):
        it = it.args[0]
    return it.id if isinstance(it, ast.Name) else None


def divisor(node, total):
    """The expression total is divided by at node: `total / len(x)`, `total /= len(x)`; else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name) and \
            node.left.id == total:
        return node.right
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div) and isinstance(node.target, ast.Name) and \
            node.target.id == total:
        return node.value
    return None


def counter(src, loop, name):
    """'samples' when name is a counter the loop increases by each batch's size (`seen += x.size(0)`,
    `n += len(y)`, `+= x.shape[0]`), 'batches' when by 1, else None."""
    steps = [n.value for n in src.local(loop) if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and
             isinstance(n.target, ast.Name) and isinstance(name, ast.Name) and n.target.id == name.id]
    if len(steps) != 1:
        return None
    step = steps[0]
    if isinstance(step, ast.Constant) and step.value == 1:
        return "batches"
    sized = method_call(step, "size") and len(step.args) == 1 and isinstance(step.args[0], ast.Constant) and \
        step.args[0].value == 0 or isinstance(step, ast.Call) and terminal(step.func) == "len" or \
        isinstance(step, ast.Subscript) and isinstance(step.value, ast.Attribute) and step.value.attr == "shape" and \
        isinstance(step.slice, ast.Constant) and step.slice.value == 0
    return "samples" if sized else None


@rule(
    "loss-average-mismatch",
    "A loss summed over the batches of a loop is divided by the wrong count: per-batch means by the number of samples, or per-batch sums by the number of batches.",
    """A running total of a loss is turned into an average by dividing by a count, and the count must
    match the reduction: a mean-reduced loss (the default) gives one value per batch, so divide its
    sum by the number of batches, len(loader); a reduction='sum' loss gives one value per sample
    summed, so divide by the number of samples, len(loader.dataset). Mixed up, the reported loss is
    off by the batch size: a mean divided by the number of samples looks batch-size times too
    small (the old `size_average=False` of the MNIST example, dropped in an update, does this). Nothing
    fails: the curve just has the wrong scale, and comparisons across batch sizes are wrong. Only a
    total of the plain loss value (no `* x.size(0)` weighting) of a torch loss with a literal reduction
    in a loop over `loader`, divided after the loop by `len(loader.dataset)` or `len(loader)` (or by a
    counter the loop increases by each batch's size, or by 1), is checked.""",
    """
    import torch
    import torch.nn.functional as F

    def test(model, test_loader):
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for data, target in test_loader:
                test_loss += F.nll_loss(model(data), target).item()  # the mean over the batch
        test_loss /= len(test_loader.dataset)  # BUG: a sum of batch means, divided by the number of samples
        return test_loss
    """,
    """
    import torch
    import torch.nn.functional as F

    def test(model, test_loader):
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for data, target in test_loader:
                test_loss += F.nll_loss(model(data), target, reduction='sum').item()  # sum over the batch
        test_loss /= len(test_loader.dataset)
        return test_loss
    """,
)
def check_loss_average_mismatch(src):
    for node in src.of_type(ast.AugAssign):
        if not isinstance(node.op, ast.Add) or not isinstance(node.target, ast.Name):
            continue
        loops = [l for l in src.enclosing_loops(node) if isinstance(l, (ast.For, ast.AsyncFor))]
        loader = iterated_loader(loops[0]) if loops else None
        reduction = summed_loss_reduction(src, node.value) if loader else None
        if reduction is None:
            continue
        loop, total = loops[0], node.target.id
        for after in src.local(src.function(loop) or src.tree):
            count = divisor(after, total)
            if count is None or position(after) <= (loop.end_lineno, loop.end_col_offset):
                continue
            of = count.args[0] if isinstance(count, ast.Call) and terminal(count.func) == "len" and \
                len(count.args) == 1 else None
            counted = counter(src, loop, count)
            samples = isinstance(of, ast.Attribute) and of.attr == "dataset" and dotted(of.value) == loader or \
                counted == "samples"
            batches = isinstance(of, ast.Name) and of.id == loader or counted == "batches"
            if reduction == "mean" and samples:
                yield after, (f"{total} sums one mean per batch (the loss's default reduction='mean'), but is divided "
                              f"by the number of samples ({ast.unparse(count)}): the average comes out batch-size "
                              f"times too small. Divide by len({loader}), or sum with reduction='sum'.")
            elif reduction == "sum" and batches:
                yield after, (f"{total} sums the losses of every sample (reduction='sum'), but is divided by the number "
                              f"of batches ({ast.unparse(count)}): the average comes out batch-size times too large. "
                              f"Divide by the number of samples, len({loader}.dataset).")
