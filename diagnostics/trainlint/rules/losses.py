"""Rules on what goes into a loss: an activation the loss applies itself, and softmax without dim."""
import ast

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


SHAPED = {"view", "reshape", "randn", "rand", "zeros", "ones", "empty", "full"}  # their positional sizes give the rank


def rank(src, node):
    """The number of dimensions of node's value when the code spells it out: x.view(n, -1), x.reshape(n, c, h, w),
    torch.randn(4, 10), x.flatten(1); else None."""
    value = src.resolve(node) if node is not None else None
    if not isinstance(value, ast.Call) or value.keywords and terminal(value.func) != "flatten" or \
            any(isinstance(a, ast.Starred) for a in value.args):
        return None
    name, args = terminal(value.func), value.args
    if name == "flatten":
        start = argument(value, 0, "start_dim")
        whole = len(args) < 2 and keyword(value, "end_dim") is None
        return 2 if whole and isinstance(start, ast.Constant) and start.value == 1 else None
    if name not in SHAPED or (name in ("randn", "rand", "zeros", "ones", "empty", "full") and
                              not (src.qualname(value.func) or "").startswith("torch.")):
        return None
    if name == "full":
        args = args[:1]
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        return len(args[0].elts)
    return len(args) if args and not (len(args) == 1 and name in ("view", "reshape")) else None


@rule(
    "softmax-no-dim",
    "F.softmax / F.log_softmax / nn.Softmax without dim=, which picks a dimension that depends on the input's rank.",
    """Without dim, PyTorch uses dim 0 for 0-D, 1-D and 3-D inputs and dim 1 otherwise (with a
    deprecation warning that is easy to miss). For a (batch, time, vocab) tensor that normalises
    across the batch: every number is a valid-looking probability and the model trains on
    nonsense. Always pass dim, usually dim=-1. An input whose rank the code spells out as 2 or 4
    (x.view(n, -1), x.reshape(n, c, h, w), x.flatten(1)) is left alone: there dim 1 is the class
    or channel dimension, the one meant.""",
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
                and len(call.args) < 2 and keyword(call, "dim") is None and rank(src, argument(call, 0, "input")) not in (2, 4):
            yield call, (f"{last} without dim uses dim 0 for 1-D and 3-D inputs and dim 1 otherwise; for "
                         f"(batch, time, classes) that normalises across the batch. Pass dim explicitly (usually dim=-1).")
        elif name.startswith("torch.nn.") and last in ("Softmax", "LogSoftmax", "Softmin") \
                and not call.args and keyword(call, "dim") is None:
            yield call, (f"nn.{last}() without dim picks the dimension from the input's rank (dim 0 for 3-D input, "
                         f"across the batch). Pass dim explicitly, e.g. nn.{last}(dim=-1).")


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
