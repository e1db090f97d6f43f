"""target_leak: does the model read the answer it is scored against?

Symptom
    The training loss of a seq2seq or decoder model falls fast and far below what the task
    allows (on random tokens, far below ln V), while generation or evaluation without the
    targets is poor. The cause: an input handed to the model carries the targets at the
    position they are scored: the decoder fed the targets themselves instead of the targets
    shifted right (a start token, then targets[:-1]), or fed the shifted ones without a causal
    mask, or a label passed in as a feature.

What it checks
    Inputs that carry the targets: an integer input tensor of the targets' shape that equals
    them on 90% or more of the scored positions (shift 0), or equals them one position later
    along time (shift 1: input[t + 1] is target t, the decoder-input convention). Targets the
    model flattened itself (B*T of them against an output of B*T rows, as Lightning's demo
    transformer returns output.view(-1, V)) are viewed as (B, T) like the input of that many
    elements, and the output as (B, T, V). A causal LM's
    own token sequence at shift 1 is left to causal_dependency. For each carrier, in eval mode
    on the case's batch, the carrier is changed at the position that holds target t (t = T//2
    and the last one it can reach) in every row: fail when the output at position t moves (by
    more than 1e-4 of the output's scale). That is the model reading its own answer, shown on
    your model and batch. Skip: no input carries the targets, or the model returns its own
    loss (which output position is scored against which target is then inside the model;
    causal_dependency covers causal LMs).

Command
    python diagnostics/target_leak.py                      # embedded demo (planted bug)
    python diagnostics/target_leak.py --healthy
    python diagnostics/target_leak.py --case my_case.py --json

Output
    $ python diagnostics/target_leak.py
    [FAIL] target_leak: the output at position 5 moves when inputs[1][5], which holds the target that position is scored against, changes (by 1.2 of its scale): the model reads its own answers
    (exit code 1)
    $ python diagnostics/target_leak.py --healthy
    [PASS] target_leak: inputs[1] (shift 1) carries the targets; no output moves when the target of its own position changes
    (exit code 0)

How to read it
    details["carriers"] lists each input that carries the targets: its name, the shift and
    the share of scored positions where it equals them; details["moved"] maps each carrier to
    the output positions that moved when the carrier's copy of the target they are scored
    against changed, with that target's position and the relative change. Which output position
    is scored against which target is read from your loss: the positions whose gradient moves
    when one target changes (a loss that shifts inside scores position t - 1 against target t).

Next step
    PLAYBOOK.md#target-leak. Feed the decoder the targets shifted right (a start token, then
    targets[:, :-1]) and mask attention causally (nn.Transformer.generate_square_subsequent_mask
    or is_causal=True); check that the mask covers the diagonal's right side only. A label that
    is also a feature: drop it from the inputs.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, cli_main, forward, named_tensors, preserved, replace_tensor, validate_case

CARRIES = 0.9  # share of scored positions where an input equals the targets: 1/V by chance on random tokens, 1.0 when
# it is the targets (our assumption: a copy with a few positions masked or padded differently still counts)
MOVED = 1e-4  # relative change of the output at a position above float noise (float32: ~1e-6): our assumption




def _prediction(output):
    """output["logits"] when there is one, else the first tensor; None when the model returns a loss of its own."""
    named = list(named_tensors(output))
    if any(t.dim() == 0 and t.is_floating_point() for _, t in named):
        return None
    if isinstance(output, dict) and torch.is_tensor(output.get("logits")):
        return output["logits"]
    return named[0][1] if named else None


def _carriers(inputs, targets, kept, time_dim, sequence):
    """(name, tensor, shift, share) for each integer input that holds the targets at their positions (shift 0) or one later."""
    found = []
    for name, tensor in named_tensors(inputs):
        if tensor.is_floating_point() or tensor.dtype == torch.bool or tensor.shape != targets.shape:
            continue
        for shift in (0, 1) if targets.dim() >= 2 else (0,):
            if shift == 1 and tensor is sequence:
                continue  # a causal LM's own tokens one step ahead: causal_dependency's question
            a = targets.movedim(time_dim, -1)
            b = tensor.movedim(time_dim, -1)
            keep = kept.movedim(time_dim, -1)
            if shift:
                a, b, keep = a[..., :-1], b[..., 1:], keep[..., :-1]
            if not keep.any():
                continue
            share = int((a == b)[keep].sum()) / int(keep.sum())  # counted, not a float32 mean: 72 of 80 is 0.9 exactly
            if share >= CARRIES:
                found.append((name, tensor, shift, share))
    return found


def _scored_positions(case, output, prediction, targets, p, time_dim):
    """The output positions scored against target position p: where the loss's gradient moves when target p changes.

    A loss that shifts inside (logits[:, :-1] against labels[:, 1:], as Hugging Face models do) scores position p - 1
    against target p; the plain one scores p. Empty when target p is not scored (ignored) or the loss cannot say.
    """
    def gradient(targets):
        leaf = prediction.detach().float().requires_grad_(True)
        with torch.enable_grad():
            loss = case["loss_fn"](replace_tensor(output, prediction, leaf.to(prediction.dtype)), targets)
            return torch.autograd.grad(loss, leaf, allow_unused=True)[0]

    changed = targets.clone()
    spot = changed.select(time_dim, p)
    spot.copy_((spot + 1) % (int(targets.max()) + 1))
    try:
        before, after = gradient(targets), gradient(changed)
    except Exception:  # a loss that cannot take a leaf, or the changed class: no position is claimed
        return []
    if before is None or after is None:
        return []
    moved = (after - before).abs().movedim(time_dim, 0).flatten(1).amax(1)
    return [q for q in range(moved.shape[0]) if moved[q] > 1e-7]


class _Unflattened(torch.nn.Module):
    """The model with its prediction viewed as (B, T, ...) when it flattened (B, T) to B*T rows itself (the Lightning
    demo transformer's output.view(-1, V)): so the check sees positions, as for any sequence model."""

    def __init__(self, model, grid):
        super().__init__()
        self.model, self.grid = model, grid

    def forward(self, *args, **kwargs):
        output = self.model(*args, **kwargs)
        prediction = _prediction(output)
        if prediction is None or prediction.shape[0] != self.grid.numel():
            return output
        return replace_tensor(output, prediction, prediction.view(*self.grid, *prediction.shape[1:]))


def _unflattened(case, grid):
    """The case seen position by position: targets viewed as `grid` (B, T), the model's flat prediction as (B, T, ...),
    and the case's loss given both flat again, as it was written."""
    def loss_fn(output, targets):
        prediction = _prediction(output)
        flat = prediction.reshape(-1, *prediction.shape[len(grid):])
        return case["loss_fn"](replace_tensor(output, prediction, flat), targets.reshape(-1))

    inputs, targets = case["batch"]
    return {**case, "model": _Unflattened(case["model"], grid), "batch": (inputs, targets.view(grid)), "loss_fn": loss_fn}


def _flattened_grid(inputs, targets):
    """The (B, T) shape of an integer input with as many elements as 1-D targets: targets a model flattened to B*T,
    or (B, 1): a label column beside (B,) class targets."""
    if targets.dim() != 1:
        return None
    return next((t.shape for _, t in named_tensors(inputs) if not t.is_floating_point() and t.dtype != torch.bool
                 and t.dim() == 2 and t.numel() == targets.numel()), None)


def check_target_leak(case):
    """Change each input's copy of target t and watch whether the output at position t moves."""
    case = validate_case(case)
    if torch.is_tensor(case["batch"][1]) and not case["batch"][1].is_floating_point():
        grid = _flattened_grid(*case["batch"])
        case = _unflattened(case, grid) if grid is not None else case
    model, (inputs, targets), task = case["model"], case["batch"], case["task"]
    if not torch.is_tensor(targets) or targets.is_floating_point() or targets.dim() < 1:
        return CheckResult("target_leak", "skip", "applies to integer targets (classes or tokens)")
    time_dim = task.get("time_dim", 1) if targets.dim() >= 2 else 0
    kept = targets != task.get("ignore_index", -100)
    sequence = None
    if task.get("kind") == "causal_lm":
        sequence = inputs.get("input_ids") if isinstance(inputs, dict) else next(iter(named_tensors(inputs)), (None, None))[1]
    carriers = _carriers(inputs, targets, kept, time_dim, sequence)
    if not carriers:
        return CheckResult("target_leak", "skip", "no input carries the targets: nothing the model could read its answers from")
    details = {"carriers": [{"input": name, "shift": shift, "share": round(share, 3)} for name, _, shift, share in carriers],
               "moved": {}}
    with preserved(model), torch.no_grad():
        model.eval()  # no dropout noise, no batch statistics mixing positions
        output = forward(model, inputs)
        prediction = _prediction(output)
        if prediction is None:
            return CheckResult("target_leak", "skip", "the model returns its own loss: which output position is scored "
                               "against which target is inside the model (causal_dependency covers causal LMs)", details)
        aligned = prediction.dim() >= targets.dim() and prediction.shape[:targets.dim()] == targets.shape
        if not aligned:
            return CheckResult("target_leak", "skip", f"the output {tuple(prediction.shape)} does not line up with the "
                               f"targets {tuple(targets.shape)} position by position", details)
        steps = targets.shape[time_dim] if targets.dim() >= 2 else 1
        scale = float(prediction.float().abs().max()) or 1.0
        for name, tensor, shift, _ in carriers:
            last = steps - 1 - shift  # the last position whose copy (at p + shift) is inside the carrier
            for p in sorted({min(steps // 2, last), last} if targets.dim() >= 2 else {0}):
                scored = _scored_positions(case, output, prediction, targets, p, time_dim) if targets.dim() >= 2 else [0]
                if p < 0 or not scored:
                    continue
                changed = tensor.clone()
                where = changed.select(time_dim, p + shift) if targets.dim() >= 2 else changed
                where.copy_((where + 1) % (int(max(tensor.max(), targets.max())) + 1))  # another class, in range
                moved_to = _prediction(forward(model, replace_tensor(inputs, tensor, changed)))
                for q in scored:
                    at = (lambda t: t.select(time_dim, q)) if targets.dim() >= 2 else (lambda t: t)
                    change = float((at(moved_to).float() - at(prediction).float()).abs().max()) / scale
                    if change > MOVED:
                        details["moved"].setdefault(name, {})[q] = {"target": p, "change": change}
    if details["moved"]:
        name, moved = next(iter(details["moved"].items()))
        q, seen = next(iter(moved.items()))
        shift = next(s for n, _, s, _ in carriers if n == name)
        where = f"{name}[{seen['target'] + shift}]" if targets.dim() >= 2 else name
        details["next"] = ("feed the decoder the targets shifted right (a start token, then targets[:, :-1]) under a causal "
                           "mask, or stop passing the targets to the model")
        position = f"the output at position {q}" if targets.dim() >= 2 else "the output"
        return CheckResult("target_leak", "fail", f"{position} moves when {where}, which holds the target "
                           f"{'that position is scored against' if targets.dim() >= 2 else 'of its row'}, changes (by "
                           f"{seen['change']:.2g} of its scale): the model reads its own answers", details)
    names = ", ".join(f"{name} (shift {shift})" for name, _, shift, _ in carriers)
    verb = "carries" if len(carriers) == 1 else "carry"
    return CheckResult("target_leak", "pass", f"{names} {verb} the targets; no output moves when the target of its own "
                       "position changes", details)


class TinySeq2Seq(torch.nn.Module):
    """Source summary plus the decoder token at each position -> scores over the vocabulary."""

    def __init__(self, vocab=12, dim=16):
        super().__init__()
        self.source = torch.nn.Embedding(vocab, dim)
        self.decoder = torch.nn.Embedding(vocab + 1, dim)  # one more id: the start token
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, src, decoder_input):  # (B, S), (B, T) -> (B, T, V)
        return self.head(torch.tanh(self.source(src).mean(1, keepdim=True) + self.decoder(decoder_input)))


def make_demo_case(broken=True):
    """A copy task: the decoder is fed the targets shifted right; the broken twin feeds it the targets themselves."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        vocab, start = 12, 12
        src = torch.randint(0, vocab, (8, 10))
        targets = src.flip(1)  # translate = reverse
        decoder_input = torch.cat([torch.full((8, 1), start), targets[:, :-1]], dim=1)  # the start token, then shifted right
        if broken:
            decoder_input = targets  # BUG: the decoder is fed the targets themselves: position t reads its own answer
        model = TinySeq2Seq(vocab)

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))

    return {"model": model, "batch": ((src, decoder_input), targets), "loss_fn": loss_fn,
            "task": {"kind": "seq2seq", "vocab_size": vocab}}


if __name__ == "__main__":
    sys.exit(cli_main(check_target_leak, make_demo_case, __doc__))
