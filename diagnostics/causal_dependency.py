"""causal_dependency: does the output at position t see only positions <= t?

Symptom
    A causal language model whose training loss drops suspiciously fast and low (it copies the
    next token it can see), while generation, one token at a time, is poor. The cause is a
    missing or wrong attention mask: `is_causal` forgotten, a mask built with the wrong
    diagonal, a padding mask passed where the causal one belongs, or a mask broadcast on the
    wrong dimension.

What it checks
    Only for task kind `causal_lm` (skip otherwise). In eval mode, on the case's batch, with the
    sequence as dim 1 of the first input tensor (or `input_ids` of a dict):

      perturb   change the token at position s (s = T//2, then T-1; another token id for
                integer inputs, +1 for floating inputs) and require every output at a
                position before s to stay the same.
      gradient  Karpathy's backprop test: the sum of the outputs at position t (t = 0, T//2,
                T-2) is differentiated with respect to the token embeddings (the output of the
                nn.Embedding that reads the ids, or the inputs themselves when they are
                floating); the gradient at every position after t must be zero.

    Position embeddings computed from torch.arange are not perturbed: a leak through them is
    visible only once it carries token content, which the two tests above already follow. A
    DistributedDataParallel (or DataParallel) model is unwrapped to `.module`: no collective.
    The outputs compared are output["logits"] when the model returns a dict or a Hugging Face
    ModelOutput that has them (given labels, such a model returns the loss first), else the
    first tensor of the output.

Command
    python diagnostics/causal_dependency.py                      # embedded demo (planted bug)
    python diagnostics/causal_dependency.py --healthy
    python diagnostics/causal_dependency.py --case my_case.py --json

Output
    $ python diagnostics/causal_dependency.py
    [FAIL] causal_dependency: outputs see up to 11 position(s) ahead (a missing causal mask): changing the token at 11 moved the outputs at 0..10; the output at 0 gets gradient from positions 1..11
    (exit code 1)
    $ python diagnostics/causal_dependency.py --healthy
    [PASS] causal_dependency: no output depends on a later position over 12 positions (perturbation and gradient tests)
    (exit code 0)

How to read it
    fail: details["perturb_leaks"] maps a changed position s to the earlier positions whose
    outputs moved; details["gradient_leaks"] maps a position t to the later positions it
    received gradient from. A leak from t to t+1 only is the off-by-one mask (diagonal 0 vs 1,
    or a mask shifted by one); a leak to every later position is a missing mask. skip: not a
    causal_lm case, or no (batch, time) shaped input and output. The batch is dim 0 and time
    dim 1 unless task["batch_dim"] / task["time_dim"] say otherwise (a time-major (T, B)
    model such as word_language_model's LSTM: batch_dim 1, time_dim 0).

Next step
    PLAYBOOK.md#causal-dependency. Print the mask you build for T=4 and compare it with
    torch.ones(4, 4).tril() (1 = may attend). With F.scaled_dot_product_attention pass
    is_causal=True (and no attn_mask), with nn.MultiheadAttention / nn.Transformer pass
    mask=nn.Transformer.generate_square_subsequent_mask(T) and is_causal=True. Check that the
    labels are the inputs shifted by one.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, cli_main, forward, preserved, replace_tensor, validate_case

TOLERANCE = 1e-5  # relative change allowed in earlier outputs; a correct mask leaves them bitwise equal on the zoo — our assumption
GRAD_TOLERANCE = 1e-6  # future-position gradient relative to the largest past one; a correct mask gives exact zeros — our assumption


def _flat(obj):
    """All tensors in a tensor / tuple / list / dict (ModelOutput included), in order."""
    if torch.is_tensor(obj):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    return [t for value in values for t in _flat(value)]


def _prediction(output):
    """output["logits"] when there is one (a Hugging Face model given labels puts the loss first), else the first tensor."""
    if isinstance(output, dict) and torch.is_tensor(output.get("logits")):
        return output["logits"]
    return next(iter(_flat(output)), None)



def _sequence(inputs):
    """The (batch, time, ...) tensor: `input_ids` of a dict, else the first tensor."""
    if isinstance(inputs, dict) and torch.is_tensor(inputs.get("input_ids")):
        return inputs["input_ids"]
    return next(iter(_flat(inputs)), None)


def _perturb_at(seq, s, tdim):
    """seq with position s (along the time dim tdim) changed: another id for integer inputs, +1 for floating ones."""
    seq = seq.clone()
    step = seq.select(tdim, s)
    if seq.is_floating_point():
        step += 1.0
    else:
        step.copy_((step + 1) % (int(seq.max()) + 1))  # another id, inside the range the batch already uses
    return seq


def _gradient_leaks(model, inputs, seq, positions, tdim):
    """For each t, the positions > t whose embeddings get gradient from the outputs at t; None if untestable."""
    leaves = []
    if seq.is_floating_point():
        leaf = seq.detach().clone().requires_grad_(True)
        leaves.append(leaf)
        inputs = replace_tensor(inputs, seq, leaf)

    def embedding_leaf(module, args, output):  # replace the token embeddings by a leaf we can differentiate against
        if not leaves and args and args[0].data_ptr() == seq.data_ptr() and args[0].numel() == seq.numel():
            leaf = output.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        return None

    handles = [m.register_forward_hook(embedding_leaf) for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    try:
        out = _prediction(forward(model, inputs))
    finally:
        for handle in handles:
            handle.remove()
    if not leaves or out is None or not out.requires_grad:
        return None
    leaks = {}
    for t in positions:
        (grad,) = torch.autograd.grad(out.select(tdim, t).sum(), leaves, retain_graph=True)
        per_position = grad.detach().abs().movedim(tdim, 0).flatten(1).amax(1).double()  # (T,)
        scale = float(per_position[:t + 1].max()) or 1.0
        future = [int(p) for p in range(t + 1, per_position.shape[0]) if float(per_position[p]) > GRAD_TOLERANCE * scale]
        if future:
            leaks[t] = future
    return leaks


def _positions(ps):
    """[5, 6, 7] -> "5..7"; anything else comma-separated."""
    if len(ps) > 2 and ps == list(range(ps[0], ps[-1] + 1)):
        return f"{ps[0]}..{ps[-1]}"
    return ", ".join(map(str, ps))


def check_causal_dependency(case):
    """Outputs at t must not depend on inputs after t: perturb future tokens, and backprop output[t]."""
    case = validate_case(case)
    with preserved(case["model"]):
        if case["task"].get("kind") != "causal_lm":
            kind = case["task"].get("kind", "unspecified")
            return CheckResult("causal_dependency", "skip", f"applies to task kind causal_lm; this case is {kind!r}")
        model = case["model"]
        model.eval()
        inputs, _ = case["batch"]
        bdim, tdim = case["task"].get("batch_dim", 0), case["task"].get("time_dim", 1)
        seq = _sequence(inputs)
        if seq is None or seq.dim() < 2 or seq.shape[tdim] < 2:
            return CheckResult("causal_dependency", "skip", "no (batch, time) input with at least 2 positions")
        T = seq.shape[tdim]
        with torch.no_grad():
            clean = _prediction(forward(model, inputs))
            if clean is None or clean.dim() < 2 or (clean.shape[bdim], clean.shape[tdim]) != (seq.shape[bdim], T):
                return CheckResult("causal_dependency", "skip", "the output is not shaped (batch, time, ...) like the input "
                                   "(task['batch_dim'] and task['time_dim'] say where they are)")
            clean = clean.movedim((bdim, tdim), (0, 1))  # (B, T, ...) from here on
            perturb_leaks = {}
            for s in sorted({T // 2, T - 1}):
                changed = _prediction(forward(model, replace_tensor(inputs, seq, _perturb_at(seq, s, tdim)))).movedim((bdim, tdim), (0, 1))
                a, b = clean[:, :s].double(), changed[:, :s].double()
                moved = ((a - b).abs() > TOLERANCE * float(a.abs().max().clamp_min(1))).movedim(1, 0).flatten(1).any(1)
                if bool(moved.any()):
                    perturb_leaks[s] = [int(p) for p in moved.nonzero().flatten()]
        gradient_leaks = _gradient_leaks(model, inputs, seq, sorted({0, T // 2, T - 2}), tdim)
        details = {"positions": T, "perturb_leaks": perturb_leaks, "gradient_leaks": gradient_leaks or {}}
        if perturb_leaks or gradient_leaks:
            ahead = max([s - p[0] for s, p in perturb_leaks.items()] + [p[-1] - t for t, p in (gradient_leaks or {}).items()])
            details.update(lookahead=ahead, next="print the mask for T=4 and compare with torch.ones(4, 4).tril(); "
                           "with scaled_dot_product_attention pass is_causal=True")
            parts = []
            if perturb_leaks:
                s = max(perturb_leaks)
                parts.append(f"changing the token at {s} moved the outputs at {_positions(perturb_leaks[s])}")
            if gradient_leaks:
                t = min(gradient_leaks)
                parts.append(f"the output at {t} gets gradient from positions {_positions(gradient_leaks[t])}")
            kind = ("a missing causal mask" if ahead >= T - 1 else
                    "a mask off by a position or two, e.g. tril(diagonal=1); each layer adds its own step" if ahead <= 2 else
                    "a wrong causal mask, or positions mixed by a reshape")
            return CheckResult("causal_dependency", "fail", f"outputs see up to {ahead} position(s) ahead ({kind}): "
                               + "; ".join(parts), details)
        tested = "perturbation and gradient tests" if gradient_leaks is not None else "perturbation test (no token embedding found)"
        return CheckResult("causal_dependency", "pass", f"no output depends on a later position over {T} positions ({tested})",
                           details)


class _TinyLM(torch.nn.Module):
    """One causal self-attention block over token + position embeddings."""

    def __init__(self, broken, vocab=16, dim=32, max_len=32):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(max_len, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, vocab)
        self.broken = broken

    def forward(self, ids):  # ids: (B, T)
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))  # (B, T, C)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.broken:
            h = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # BUG: is_causal=True forgotten: sees the future
        else:
            h = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(x + h)  # (B, T, vocab)


def make_demo_case(broken):
    """A one-block causal LM on random tokens; the broken twin forgets the causal mask."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        ids = torch.randint(0, 16, (4, 12))
        model = _TinyLM(broken)
    targets = torch.roll(ids, -1, dims=1)  # next token (the last position wraps; fine for a demo)
    return {"model": model, "batch": (ids, targets),
            "loss_fn": lambda logits, y: torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()),
            "task": {"kind": "causal_lm", "vocab_size": 16}}


if __name__ == "__main__":
    sys.exit(cli_main(check_causal_dependency, make_demo_case, __doc__))
