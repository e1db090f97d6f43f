"""batch_independence: does each row's output depend on its own input only?

Symptom
    The model trains "okay" but worse than it should, results change with the batch size or with
    the order of examples in a batch, or evaluation one example at a time disagrees with batched
    evaluation. Karpathy's recipe: using `view` where `transpose`/`permute` was meant mixes
    information across the batch dimension, and the net still trains, learning to ignore it.

What it checks
    Two tests in eval mode (dropout off, BatchNorm on running statistics), on the middle row i
    of the case's batch:

      poison    row i of every input tensor is replaced (NaN for floating inputs, other token
                ids for integer inputs, flipped for bool), every other row is left alone; the
                outputs of the other rows must not change (a NaN must not spread to them).
      gradient  Karpathy's test: the loss is the sum of row i's outputs; its gradient with
                respect to the inputs (floating inputs) or to the token embeddings (integer
                inputs: the output of the nn.Embedding that reads them) must be zero on every
                other row.

    BatchNorm in train mode normalises with statistics of the whole batch, so it mixes rows by
    design: that is expected, not a bug, and it is why the check runs in eval mode. A model with
    BatchNorm gets a note in the summary (details["batchnorm"]). A DistributedDataParallel (or
    DataParallel) model is unwrapped to `.module`: no collective.
    A model that scores the batch against itself (a CLIP-style (B, B) similarity matrix, in-batch
    negatives) mixes rows by design, but only through the scores against the changed row: when
    the other rows changed in column i alone, that column is set aside and the gradient test
    starts from row i's score against itself (details["score_matrix_dim"]). BatchNorm in a tower
    still shows, as changes outside that column.
    A leak that runs one way along the rows (row i changes only later rows and depends only on
    earlier ones) while no sequence runs along the next dim is what a time axis looks like: a
    time-major model read as batch-first gets a warn that names task["batch_dim"], not a fail.
    When a sequence does run along the next dim (a batch-first LM), the same one-way leak is a
    fail: a cumsum over the batch, say.
    Every pass runs under the same seed, so a model that samples noise in forward (a VAE's
    reparameterisation, dropout kept on) draws the same noise each time: randomness is not
    mistaken for leakage. The batch is dim 0 unless task["batch_dim"] says otherwise (1 for a
    time-major (T, B) model such as an nn.LSTM without batch_first).
    The outputs compared are output["logits"] when the model returns a dict or a Hugging Face
    ModelOutput that has them (given labels, such a model returns the loss first), else its first
    output that is not the loss (CLIP's logits_per_image), else the first tensor of the output.

Command
    python diagnostics/batch_independence.py                     # embedded demo (planted bug)
    python diagnostics/batch_independence.py --healthy
    python diagnostics/batch_independence.py --case my_case.py --json

Output
    $ python diagnostics/batch_independence.py --json
    {
      "id": "batch_independence",
      "status": "fail",
      "summary": "rows mix across the batch dimension: changing row 4 changed the outputs of 4/7 other rows; row 4's outputs have gradient on the inputs of 4/7 other rows",
      "details": {
        "batchnorm": [],
        "mode": "eval",
        "row": 4,
        "rows": 8,
        "poison_leaks_to": [
          0,
          5,
          6,
          7
        ],
        "gradient_leaks_from": [
          0,
          2,
          5,
          7
        ],
        "score_matrix_dim": null,
        "next": "bisect: run this check on submodules; look for view/reshape on a tensor whose batch dim is not first, reductions over dim 0, flatten() without start_dim=1"
      }
    }
    (exit code 1)
    $ python diagnostics/batch_independence.py --healthy
    [PASS] batch_independence: row 4 of 8 influences no other row (poison and gradient tests)
    (exit code 0)

How to read it
    fail: details["poison_leaks_to"] lists the rows whose outputs changed when only row i
    changed; details["gradient_leaks_from"] lists the rows whose inputs received gradient from
    row i's outputs. Either means information crosses the batch dimension in eval mode. warn:
    the leak runs one way (later rows change, earlier rows feed row i): dim 0 is probably time;
    set task["batch_dim"]. skip:
    a batch of one row, or an output whose first dimension is not the batch.

Next step
    PLAYBOOK.md#batch-independence. Look for `view`/`reshape` on a tensor whose batch dim is not
    first (time-major RNN code, attention heads: `view(B, T, H, D).transpose(1, 2)`, not
    `view(B, H, T, D)`), for reductions over dim 0 (`mean(0)`, `softmax(dim=0)`), and for
    `flatten()` without start_dim=1. Bisect by running the check on submodules.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, forward, map_tensors, preserved, cli_main

TOLERANCE = 1e-5  # relative change allowed in other rows' outputs; independent rows are bitwise equal on the zoo — our assumption
GRAD_TOLERANCE = 1e-6  # gradient on other rows relative to row i's own; independent rows get exact zeros — our assumption
BATCH_STAT_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm)


def _flat(obj):
    """All tensors in a tensor / tuple / list / dict (ModelOutput included), in order."""
    if torch.is_tensor(obj):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    return [t for value in values for t in _flat(value)]


SEED = 0  # any fixed seed: what matters is that every pass draws the same numbers


def _first_tensor(obj):
    return next(iter(_flat(obj)), None)


def _prediction(output):
    """output["logits"] when there is one (a Hugging Face model given labels puts the loss first), else the first tensor
    that is not output["loss"] (CLIP's logits_per_image), else the first tensor."""
    if isinstance(output, dict):
        if torch.is_tensor(output.get("logits")):
            return output["logits"]
        return _first_tensor([value for key, value in output.items() if key != "loss"])
    return _first_tensor(output)


def _poison_row(n, i, bdim):
    """A function that changes row i of every tensor whose batch dim (bdim) has the batch size n."""
    def poison(t):
        if t.dim() <= bdim or t.shape[bdim] != n:
            return t
        t = t.clone()
        row = t.select(bdim, i)
        if t.is_floating_point():
            row.fill_(float("nan"))
        elif t.dtype == torch.bool:
            row.copy_(~row)
        else:
            row.copy_((row + 1) % (int(t.max()) + 1))  # other ids, inside the range the batch already uses
        return t
    return poison


def _outputs_changed(clean, poisoned, rows, bdim):
    """The rows (other than the poisoned one) whose outputs differ; a value NaN in both runs counts as unchanged."""
    clean, poisoned = clean.detach().double(), poisoned.detach().double()
    finite = clean[torch.isfinite(clean)]
    scale = float(finite.abs().max().clamp_min(1)) if finite.numel() else 1.0
    same = (clean == poisoned) | (clean.isnan() & poisoned.isnan()) | ((clean - poisoned).abs() <= TOLERANCE * scale)
    return [j for j in rows if not bool(same.select(bdim, j).all())]


def _score_matrix_dim(clean, poisoned, others, i, n, bdim):
    """The dim c (not the batch's) of size n such that, with index i along c left out, no other row's output changed:
    the output scores rows against rows (a CLIP-style (B, B) similarity matrix). None when there is no such dim."""
    keep = torch.tensor([k for k in range(n) if k != i], device=clean.device)
    for c in range(clean.dim()):
        if c != bdim and clean.shape[c] == n and not _outputs_changed(clean.index_select(c, keep),
                                                                      poisoned.index_select(c, keep), others, bdim):
            return c
    return None


def _carries_a_sequence(model, inputs, clean, dim):
    """Whether changing the middle position along `dim` changes the outputs at other positions along it (a sequence
    runs along dim), False when it does not, None when the inputs or the output have no such dim to test."""
    first = _first_tensor(inputs)
    m = first.shape[dim] if first is not None and first.dim() > dim else 0
    if m < 2 or clean.dim() <= dim or clean.shape[dim] != m:
        return None
    with torch.no_grad():
        torch.manual_seed(SEED)
        poisoned = _prediction(forward(model, map_tensors(inputs, _poison_row(m, m // 2, dim))))
    return bool(_outputs_changed(clean, poisoned, [k for k in range(m) if k != m // 2], dim))


def _gradient_leaks(model, inputs, n, i, bdim, score_dim=None):
    """Rows j != i whose inputs (or token embeddings) get gradient from the sum of row i's outputs; None if untestable.
    With a score matrix (score_dim), from row i's score against itself: its scores against the others read them."""
    leaves = []

    def as_leaf(t):
        if t.is_floating_point() and t.dim() > bdim and t.shape[bdim] == n:
            t = t.detach().clone().requires_grad_(True)
            leaves.append(t)
        return t

    inputs = map_tensors(inputs, as_leaf)
    id_tensors = [] if leaves else [t for t in _flat(inputs) if t.dim() > bdim and t.shape[bdim] == n and not t.is_floating_point()]

    def embedding_leaf(module, args, output):  # replace the token embeddings by a leaf we can differentiate against
        ids = args[0] if args else None  # the batch's ids (maybe a view of them), not e.g. positions from torch.arange:
        if ids is not None and any(ids.data_ptr() == t.data_ptr() and ids.numel() == t.numel() for t in id_tensors):
            leaf = output.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        return None

    handles = [m.register_forward_hook(embedding_leaf) for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    try:
        torch.manual_seed(SEED)  # the same noise as the other passes: a model that samples (a VAE) is not a leak
        out = _prediction(forward(model, inputs))
    finally:
        for handle in handles:
            handle.remove()
    if not leaves or out is None or not out.requires_grad:
        return None
    target = out.select(bdim, i)
    if score_dim is not None:
        target = target.select(score_dim - (score_dim > bdim), i)
    grads = torch.autograd.grad(target.sum(), leaves, allow_unused=True)
    leaks = set()
    for g in grads:
        if g is None:
            continue
        per_row = g.detach().movedim(bdim, 0).abs().flatten(1).amax(1).double()  # (n,)
        scale = float(per_row[i]) or 1.0
        leaks.update(j for j in range(n) if j != i and float(per_row[j]) > GRAD_TOLERANCE * scale)
    return sorted(leaks)


def check_batch_independence(case):
    """Poison row i and backprop row i's outputs: no other row may be affected (eval mode)."""
    case = validate_case(case)
    with preserved(case["model"]):
        model = case["model"]
        model.eval()
        inputs, _ = case["batch"]
        bdim = case["task"].get("batch_dim", 0)
        first = _first_tensor(inputs)
        n = first.shape[bdim] if first is not None and first.dim() > bdim else 0
        batchnorm = [name for name, m in model.named_modules() if isinstance(m, BATCH_STAT_NORMS)]
        details = {"batchnorm": batchnorm, "mode": "eval"}
        if n < 2:
            return CheckResult("batch_independence", "skip", "the batch has fewer than 2 rows", details)
        if case["task"].get("graph"):
            return CheckResult("batch_independence", "skip", "the batch is one graph (task['graph']: an adjacency or "
                               "edge-list input): its rows are nodes that message passing mixes by design", details)
        i = n // 2  # the middle row: a leak into later rows and a dependence on earlier rows both show
        with torch.no_grad():
            torch.manual_seed(SEED)  # every pass draws the same noise (preserved() restores the caller's RNG)
            clean = _prediction(forward(model, inputs))
            torch.manual_seed(SEED)
            poisoned = _prediction(forward(model, map_tensors(inputs, _poison_row(n, i, bdim))))
        if clean is None or clean.dim() <= bdim or clean.shape[bdim] != n:
            return CheckResult("batch_independence", "skip", f"the model's output does not have the batch in dim {bdim} "
                               "(task['batch_dim'] says where it is)", details)
        others = [j for j in range(n) if j != i]
        poison_leaks = _outputs_changed(clean, poisoned, others, bdim)
        score_dim = _score_matrix_dim(clean, poisoned, others, i, n, bdim) if poison_leaks else None
        if score_dim is not None:
            poison_leaks = []  # every change in the other rows sits in column i: the rows' scores against row i
        grad_leaks = _gradient_leaks(model, inputs, n, i, bdim, score_dim)
        details.update(row=i, rows=n, poison_leaks_to=poison_leaks, gradient_leaks_from=grad_leaks, score_matrix_dim=score_dim)
        note = (f" (BatchNorm in {', '.join(batchnorm[:2])} mixes rows in train mode by design: expected; checked in eval mode)"
                if batchnorm else "")
        one_way = poison_leaks and all(j > i for j in poison_leaks) and grad_leaks is not None and all(j < i for j in grad_leaks)
        next_dim = 1 if bdim == 0 else 0  # where the sequence would be, if the batch dim were right
        if one_way and _carries_a_sequence(model, inputs, clean, next_dim) is False:
            details["next"] = (f"if the model is time-major, tell the doctor: task['batch_dim'] = 1, task['time_dim'] = 0; "
                               f"if dim {bdim} really is the batch, find the op that runs along it (a cumsum, an RNN "
                               f"fed (B, T, ...) without batch_first)")
            return CheckResult("batch_independence", "warn", f"dim {bdim} looks like time, not the batch: changing row {i} "
                               f"changed only later rows ({len(poison_leaks)}/{n - 1}) and row {i}'s outputs depend only on "
                               f"earlier rows: a time-major (T, B) model without task['batch_dim']? Else rows leak "
                               f"forward across the batch{note}", details)
        if poison_leaks or grad_leaks:
            details["next"] = ("bisect: run this check on submodules; look for view/reshape on a tensor whose batch dim is "
                               "not first, reductions over dim 0, flatten() without start_dim=1")
            parts = []
            if poison_leaks:
                parts.append(f"changing row {i} changed the outputs of {len(poison_leaks)}/{n - 1} other rows")
            if grad_leaks:
                parts.append(f"row {i}'s outputs have gradient on the inputs of {len(grad_leaks)}/{n - 1} other rows")
            return CheckResult("batch_independence", "fail", "rows mix across the batch dimension: " + "; ".join(parts) + note, details)
        tested = "poison and gradient tests" if grad_leaks is not None else "poison test (no differentiable input or token embedding)"
        if score_dim is not None:
            return CheckResult("batch_independence", "pass", f"row {i} of {n} reaches the other rows only through their "
                               f"scores against it (column {i} of dim {score_dim}): the output scores the batch against "
                               f"itself, as in-batch negatives do (CLIP, SimCLR) ({tested}){note}", details)
        return CheckResult("batch_independence", "pass", f"row {i} of {n} influences no other row ({tested}){note}", details)


class _DemoNet(torch.nn.Module):
    """Mean over time of a per-step projection, computed time-major."""

    def __init__(self, broken):
        super().__init__()
        self.step = torch.nn.Linear(6, 16)
        self.head = torch.nn.Linear(16, 3)
        self.broken = broken

    def forward(self, x):  # x: (B, T, F)
        B, T, F = x.shape
        if self.broken:
            x = x.reshape(T, B, F)  # BUG: reshape is not a transpose: it mixes rows of the batch
        else:
            x = x.transpose(0, 1)  # (T, B, F)
        h = torch.relu(self.step(x)).mean(0)  # (B, 16)
        return self.head(h)


def make_demo_case(broken):
    """A time-major sequence classifier; the broken twin reshapes (B, T, F) to (T, B, F) instead of transposing."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(8, 5, 6)
        targets = torch.randint(0, 3, (8,))
        model = _DemoNet(broken)
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "task": {"kind": "classification", "num_classes": 3}}


if __name__ == "__main__":
    sys.exit(cli_main(check_batch_independence, make_demo_case, __doc__))
