"""Rules on what the model is fed and loads: the order of training batches, what a causal mask lets each token
see, and what torch.load may unpickle."""
import ast

from ..registry import rule
from ..syntax import argument, dotted, has_star_kwargs, is_false, keyword, method_call, terminal


@rule(
    "torch-load-unsafe",
    "torch.load(..., weights_only=False), which unpickles arbitrary objects.",
    """torch.load unpickles the file. Since PyTorch 2.6 the default is weights_only=True, which
    loads tensors and plain containers only; an explicit weights_only=False switches that off
    and runs any code a tampered or downloaded checkpoint carries. Drop the argument (and, for
    your own classes in a checkpoint, allow them with torch.serialization.add_safe_globals);
    keep weights_only=False only for a file you made yourself and add # noqa there. A call
    without the argument is not flagged: on PyTorch 2.6 or later it is safe (on an older pinned
    torch, pass weights_only=True). A call is flagged only where what it loads, or one entry of
    it, goes to a load_state_dict: weights, which weights_only=True loads. A checkpoint read in
    other ways (RNG states, a data pipeline's state, a whole pickled model, another project's
    format converted key by key) may need the unpickle, and a comment on the call or just above
    it that says so (`# nosec`, or one that names the unpickle or trust) marks it as reviewed.""",
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
        if src.qualname(call.func) == "torch.load" and is_false(keyword(call, "weights_only")) and \
                loads_weights(src, call) and not reviewed(src, call):
            yield call, ("weights_only=False makes torch.load unpickle arbitrary objects: a tampered checkpoint runs "
                         "code when it is loaded. Since PyTorch 2.6 the default, weights_only=True, loads tensors and "
                         "plain containers safely: drop the argument (allow your own classes with "
                         "torch.serialization.add_safe_globals), or keep it only for a file you made yourself.")


PIPELINE_WORDS = ("loader", "sampler", "dataset", "batch")  # a data pipeline's load_state_dict: its own contents


def entry_of(expr):
    """`ckpt` for `ckpt["model"]` and `ckpt.get("model", ...)`; expr itself otherwise."""
    if isinstance(expr, ast.Subscript):
        return expr.value
    return expr.func.value if method_call(expr, "get") else expr


def loads_weights(src, call):
    """What torch.load returns at call, or one entry of it, goes to the load_state_dict of a model or an optimizer
    (`model.load_state_dict(ckpt["model"])`): tensors and plain containers, which weights_only=True loads."""
    for use in src.calls_by_name.get("load_state_dict", []):
        if use.args and isinstance(use.func, ast.Attribute) and not any(
                word in (dotted(use.func.value) or "").lower() for word in PIPELINE_WORDS):
            value = src.resolve(entry_of(use.args[0]))
            if value is call or entry_of(value) is call or src.resolve(entry_of(value)) is call:
                return True
    return False


def reviewed(src, call):
    """A comment on the call's lines, or on the two lines above, says the unpickle was looked at: `# nosec` (bandit's
    B614 is this check) or words about the unpickle or trust."""
    lines = src.lines[max(call.lineno - 3, 0):call.end_lineno]
    comments = [line.partition("#")[2].lower() for line in lines if "#" in line]
    return any(word in text for text in comments for word in ("nosec", "unpickl", "trust"))


@rule(
    "train-loader-no-shuffle",
    "A DataLoader that this file shows feeding training epoch after epoch is built without shuffle=True (shuffle=False or left out) and no sampler.",
    """Without shuffling every epoch sees the samples in the same order, often sorted by class,
    source or length (DataLoader's default is shuffle=False). The model then learns the order
    (the loss drops and rises in a pattern that repeats every epoch) and batches are not
    representative. Pass shuffle=True for training, or a sampler (a DistributedSampler shuffles
    by default). A loader counts as a training loader only when this file shows it feeding
    training epoch after epoch: a loop that calls backward() or step() iterates it, inside an
    epoch loop, there or in a function of the file it is passed to in a loop
    (`for epoch ...: train_one_epoch(model, train_loader, ...)`), or it goes to trainer.fit or is
    returned by train_dataloader(). A loader merely named train, with no such use in the file, is
    left alone, and so is a single pass (a benchmark of a few hundred steps, where no order
    repeats), and so are iterable and streaming datasets (which the loader cannot shuffle). If
    the order matters on purpose (a curriculum, time series), silence this line.""",
    """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    train_loader = DataLoader(train_set, batch_size=64)  # BUG: shuffle defaults to False: same order every epoch
    for epoch in range(10):
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for epoch in range(10):
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
                has_star_kwargs(call) or shuffle is None and any(isinstance(a, ast.Starred) for a in call.args) or \
                any(keyword(call, k) is not None for k in ("sampler", "batch_sampler")) or \
                iterable_dataset(src, argument(call, 0, "dataset")):
            continue
        if loader_use(src, call) == "train":
            how = "shuffle=False" if shuffle is not None else "no shuffle argument (the default is shuffle=False)"
            yield call, (f"this training DataLoader has {how}: every epoch sees the samples in the same order, and "
                         f"the model learns that order. Pass shuffle=True (or a sampler).")


def iterable_dataset(src, dataset):
    """dataset is (or may be) an IterableDataset, which a DataLoader cannot shuffle: built by a class whose
    name or bases say Iterable, a class named for shuffling itself (MONAI's ShuffleBuffer), or by a call with
    streaming=True (Hugging Face datasets)."""
    if isinstance(dataset, ast.Name):  # any of its values: `ds = IterableX(...) if streaming else TensorDataset(...)`
        made = [v for _, v in src.bindings(src.scope(dataset)).get(dataset.id, [])]
    else:
        made = [src.origin(dataset)] if dataset is not None else []
    for call in (src.resolve(m) for m in made if m is not None):
        if not isinstance(call, ast.Call):
            continue
        made_by = (src.qualname(call.func) or terminal(call.func) or "").lower()
        if any(word in made_by for word in ("iterable", "stream", "shuffl")) or keyword(call, "streaming") is not None:
            return True
        classes = src.classes.get(call.func.id, []) if isinstance(call.func, ast.Name) else []
        if any("Iterable" in ast.unparse(base) for cls in classes for base in cls.bases):
            return True
    return False


def loader_use(src, call):
    """'train' when a training loop of this file iterates the loader built by call epoch after epoch (or it goes
    to trainer.fit, or train_dataloader() returns it); 'other' when only loops without backward() or step(), or
    a single pass, do; None when this file does not show."""
    parent = src.parent.get(call)
    function = src.function(call)
    if isinstance(parent, ast.Return) and getattr(function, "name", "") == "train_dataloader":
        return "train"
    targets = {dotted(t) for t in getattr(parent, "targets", [])} - {None}
    if not targets:
        return None  # not assigned to a name: nothing to follow

    places = {(src.place(call, t), t) for t in targets}
    if any((src.place(c, dotted(a)), dotted(a)) in places for c in src.calls_by_name.get("fit", []) if method_call(c, "fit")
           for a in [argument(c, 1, "train_dataloaders")] if dotted(a)):
        return "train"  # trainer.fit(model, train_loader)
    loops = fed_loops(src, places, 3, False)
    if not loops:
        return None
    return "train" if any(again and {"backward", "step"} & src.reach_kinds(l) for l, again in loops) else "other"


def fed_loops(src, places, depth, again):
    """[(loop, again)] for the for loops that iterate the object these (place, name) keys denote, where it is and
    in the functions of this file it is passed to as an argument (`train_one_epoch(model, train_loader)`), `depth`
    calls deep; again: the loop runs more than once (a loop around it, or around a call that hands it the object)."""
    found = [(l, again or bool(src.enclosing_loops(l))) for key in places for l in src.loops_over().get(key, [])]
    if depth > 1:
        for key in places:
            for call, function, param in src.passed().get(key, []):
                found += fed_loops(src, {(function, param)}, depth - 1, again or bool(src.enclosing_loops(call)))
    return found


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


def zero_filled(src, call):
    """The mask call builds is used to write zeros (`gates.masked_fill(mask, 0.)`): it selects entries of a
    decay or bias to drop, not attention scores to hide (those are filled with -inf or a large negative)."""
    stmt = call
    while not isinstance(stmt, ast.stmt):
        stmt = src.parent[stmt]
    names = {t.id for t in getattr(stmt, "targets", []) if isinstance(t, ast.Name)}
    fills = [n for n in src.local(src.scope(call)) if method_call(n, "masked_fill", "masked_fill_") and len(n.args) == 2
             and (n.args[0] is call or isinstance(n.args[0], ast.Name) and n.args[0].id in names)]
    return bool(fills) and all(isinstance(n.args[1], ast.Constant) and n.args[1].value == 0 for n in fills)


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
        if transposed(src, call) or not mask_context(src, call) or zero_filled(src, call):
            continue
        if kind == "tril":
            yield call, (f"tril(..., diagonal={offset}) allows {offset} position(s) above the diagonal: as a causal "
                         f"mask it lets each token see the next {offset}, so the model learns to copy the answer. "
                         f"Allow with tril(...) (diagonal=0), or block with triu(..., diagonal=1).")
        else:
            yield call, (f"triu(..., diagonal={offset}) includes the diagonal: as the blocked part of a causal mask it "
                         f"also hides each token from itself, and the first row is fully masked (NaN after the "
                         f"softmax). Block with triu(..., diagonal=1), or allow with tril(...).")
