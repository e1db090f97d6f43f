"""gradient_flow: does every trainable parameter get a useful gradient?

Symptom
    Part of the model never changes during training, the loss improves only a little, or a deep
    stack trains its last layers and leaves the first ones where they started.

What it checks
    One forward and backward pass on the case's batch in train mode, then, per parameter:

      None grad   backward never reached it: a `.detach()` (or `.item()`, `.numpy()`, a tensor
                  rebuilt with torch.tensor) cut the graph, or the layer is never used in forward.
                  Up to 3 more passes (each with its own random draws) must agree: a layer that
                  LayerDrop or stochastic depth skipped in one pass is reached in another.
      zero grad   the gradient exists but is exactly 0 everywhere: a dead path. When this happens
                  the check takes an optimizer step (the case's factory) and looks again, up to 4
                  steps while each one wakes more gradients: gradients that appear so were zero
                  only because of a zero-init (zero-init residual branch or head, ReZero, DiT's
                  adaLN-Zero, whose zero final layer and zero gates need two steps to reach the
                  conditioning) and are reported as info.
      frozen      requires_grad False: reported as info, assumed to be on purpose.

    Dead ReLUs: units of an nn.ReLU module that output 0 for every sample of the batch (the
    unit is dim 1 of a 2-D, 4-D or 5-D output, the last dim otherwise; functional F.relu is not
    seen). Depth: the relative gradient norm |grad| / |weight| of the first weight matrix the
    forward pass uses, divided by that of the last one (embeddings excluded: their gradient is
    sparse); a tiny ratio is vanishing, a huge one exploding.

    A DistributedDataParallel (or DataParallel) model is unwrapped to `.module`: the check
    computes local gradients only and starts no collective, so it neither hangs when one rank
    runs it alone nor changes what the other ranks see.

Command
    python diagnostics/gradient_flow.py                          # embedded demo (planted bug)
    python diagnostics/gradient_flow.py --healthy
    python diagnostics/gradient_flow.py --case my_case.py --json

Output
    $ python diagnostics/gradient_flow.py
    [FAIL] gradient_flow: 4 parameter(s) get no gradient (None: detached or unused): encoder.0.weight, encoder.0.bias, encoder.2.weight, encoder.2.bias
    (exit code 1)
    $ python diagnostics/gradient_flow.py --healthy
    [PASS] gradient_flow: all 6 trainable parameters get finite, non-zero gradients
    (exit code 0)

How to read it
    fail lists the parameters with None grads (details["none_grad"]), all-zero grads that stay
    zero after a step (details["zero_grad"]), ReLU layers at least 90% dead
    (details["dead_relu"]: fraction of dead units per layer), or a first/last relative gradient
    ratio beyond 1e-4 / 1e4 (details["depth"]: of the weights in the first and the last
    quarter of the forward order, the pair whose ratios are nearest each other, so that an
    attention query weight, whose gradient is tiny at init by design, or a classifier head,
    whose gradient is large, does not speak for the whole network). warn: a ReLU layer at least 50% dead, or a
    depth ratio beyond 1e-2 / 1e2. details["rel_grad"] holds |grad|/|weight| per weight matrix
    in forward order: read it top to bottom to see where the gradient shrinks or grows.

Next step
    PLAYBOOK.md#gradient-flow. None grad: search the forward for `.detach()`, `.item()`,
    `torch.tensor(...)` on activations, `with torch.no_grad()`, and layers defined but not
    called. Dead ReLUs: lower the learning rate, fix a large negative bias init, or use
    LeakyReLU/GELU. Vanishing: check the init scale (init_scale: a too-wide init saturates the
    head, and the first layers then get relatively little gradient too), use ReLU-family
    activations with He init instead of stacked sigmoids/tanh, add normalisation or residual
    connections. Exploding: check the init scale and clip gradients.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, cli_main, forward, loss_closure, preserved, step_optimizer, validate_case

RESAMPLED_PASSES = 3  # more passes when some parameter got no gradient: a layer that LayerDrop (p 0.1, wav2vec2's default)
# skipped in one pass is reached in another; one skipped in all four has p 1e-4 (derived) — our assumption
DEAD_FAIL = 0.9  # a ReLU layer with >= 90% of its units dead has lost most of its width — our assumption, tuned on the test zoo
DEAD_WARN = 0.5  # >= 50% dead is worth a look — our assumption (the healthy zoo's ReLU layers measure 0-3% dead)
MIN_SAMPLES = 16  # a live unit at init is active with p ~ 1/2, so it looks dead on 16 samples with p ~ 2**-16 (derived)
ZERO_INIT_STEPS = 4  # steps to wake gradients a zero-init chain blocks: DiT's adaLN-Zero needs 2 (measured); 4 leaves room — our assumption
DEPTH_FAIL = 1e4  # first/last relative grad norm beyond 1e-4 or 1e4: vanishing/exploding — our assumption, tuned on the test zoo
DEPTH_WARN = 1e2  # beyond 1e-2 or 1e2 — our assumption: healthy zoo cases measure 0.08-0.4, 12 stacked sigmoids 3e-11


def _unit_dim(output):
    """Which dimension holds the units: channels for 2-D/4-D/5-D outputs, the last dim otherwise."""
    return 1 if output.dim() in (2, 4, 5) else output.dim() - 1


def _backward(case, net):
    """Fresh gradients from one forward/backward pass; returns (first-use order of leaf modules, relu stats) or None."""
    order, relu_alive, calls = [], {}, {}
    names = {m: n or type(m).__name__ for n, m in net.named_modules()}

    def on_forward(module, args, output):
        if module not in order:
            order.append(module)
        if isinstance(module, torch.nn.ReLU) and torch.is_tensor(output) and output.dim() >= 2:
            calls[module] = calls.get(module, 0) + 1  # one nn.ReLU reused in several places: one entry per call
            key = names[module] if calls[module] == 1 else f"{names[module]} (call {calls[module]})"
            dim = _unit_dim(output)
            out = output.detach().movedim(dim, -1).reshape(-1, output.shape[dim])  # (samples, units)
            relu_alive[key] = ((out > 0).any(0), out.shape[0])

    handles = [m.register_forward_hook(on_forward) for m in net.modules()
               if isinstance(m, torch.nn.ReLU) or next(m.parameters(recurse=False), None) is not None]
    try:
        net.zero_grad(set_to_none=True)
        inputs, targets = case["batch"]
        loss = case["loss_fn"](forward(net, inputs), targets)
        if not loss.requires_grad:
            return None
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return order, relu_alive


def _all_zero(p):
    return p.grad is not None and not bool(p.grad.any())


def check_gradient_flow(case):
    """One backward pass: None/zero grads, frozen params, dead ReLUs, vanishing/exploding norms across depth."""
    case = validate_case(case)
    model = case["model"]
    with preserved(model):
        model.train()
        named = list(model.named_parameters())
        frozen = [name for name, p in named if not p.requires_grad]
        trainable = [(name, p) for name, p in named if p.requires_grad]
        if not trainable:
            return CheckResult("gradient_flow", "skip", "no trainable parameters (every parameter has requires_grad False)",
                               {"frozen": frozen})
        ran = _backward(case, model)
        if ran is None:
            return CheckResult("gradient_flow", "fail", "the loss does not depend on any trainable parameter "
                               "(a detached graph, or an output built outside autograd)",
                               {"none_grad": [name for name, _ in trainable], "frozen": frozen,
                                "next": "search the forward and the loss for .detach(), .item(), torch.no_grad(), torch.tensor(...)"})
        missing_now = [name for name, p in trainable if p.grad is None]
        missing_always, passes = set(missing_now), 1
        while missing_now and passes <= 2 * RESAMPLED_PASSES:  # a layer its random draw skipped (LayerDrop) is no finding
            if set(missing_now) == missing_always and passes > RESAMPLED_PASSES:
                break  # the gradients judged below come from a pass that reached every parameter any pass reached
            ran = _backward(case, model)
            passes += 1
            missing_now = [name for name, p in trainable if p.grad is None]
            missing_always &= set(missing_now)
        order, relu_alive = ran
        none_grad = [name for name, _ in trainable if name in missing_always]
        nonfinite = [name for name, p in trainable if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
        zero_grad = [name for name, p in trainable if _all_zero(p)]
        owner = {}
        for module in order:
            for p in module.parameters(recurse=False):
                owner.setdefault(p, module)
        weights = sorted(((name, p) for name, p in trainable if p.dim() >= 2 and p in owner
                          and not isinstance(owner[p], torch.nn.Embedding) and p.grad is not None),
                         key=lambda item: order.index(owner[item[1]]))
        rel_grad = {name: float(p.grad.norm() / p.detach().norm()) for name, p in weights  # before any step; zero weights or
                    if bool(p.detach().any()) and name not in zero_grad}  # zero grads have no meaningful ratio (reported above)
        zero_at_init = []
        if zero_grad:  # zero only because of a zero-init? optimizer steps, looking again after each
            optimizer = case["optimizer"]([p for _, p in trainable])
            for _ in range(ZERO_INIT_STEPS):  # each step unblocks one more zero-initialised layer of a chain
                step_optimizer(optimizer, loss_closure(case, model, *case["batch"]))
                _backward(case, model)
                woke = [name for name in zero_grad if not _all_zero(dict(trainable)[name])]
                zero_at_init += woke
                zero_grad = [name for name in zero_grad if name not in woke]
                if not woke or not zero_grad:
                    break
        dead = {}
        for key, (alive, samples) in relu_alive.items():
            if samples >= MIN_SAMPLES:
                dead[key] = round(1.0 - float(alive.float().mean()), 3)
        ratios = list(rel_grad.values())
        depth = {}
        if len(ratios) >= 2 and ratios[-1] > 0 and not zero_at_init:  # a zero-init layer makes the ratio meaningless
            names = list(rel_grad)
            quarter = max(1, len(names) // 4)  # first and last quarter: the pair nearest each other speaks for the depth
            first, last = min(((a, b) for a in names[:quarter] for b in names[-quarter:]),
                              key=lambda pair: abs(float(torch.tensor(rel_grad[pair[0]] / rel_grad[pair[1]]).log())))
            depth = {"first": first, "last": last, "ratio": rel_grad[first] / rel_grad[last]}
        details = {"none_grad": none_grad, "zero_grad": zero_grad, "nonfinite_grad": nonfinite, "zero_at_init": zero_at_init,
                   "frozen": frozen, "dead_relu": {k: v for k, v in dead.items() if v >= DEAD_WARN}, "depth": depth,
                   "rel_grad": {name: float(f"{value:.3g}") for name, value in rel_grad.items()}}
        problems, warnings = [], []  # (message, what to try next)
        if none_grad:
            problems.append((f"{len(none_grad)} parameter(s) get no gradient (None: detached or unused): {', '.join(none_grad[:4])}",
                             "search the forward for .detach(), .item(), torch.no_grad() and layers defined but never called"))
        if zero_grad:
            problems.append((f"{len(zero_grad)} parameter(s) get an all-zero gradient: {', '.join(zero_grad[:4])}",
                             "find what blocks the path to them: a dead ReLU layer, a mask of zeros, a multiply by 0"))
        if nonfinite:
            problems.append((f"{len(nonfinite)} parameter(s) get NaN/inf gradients: {', '.join(nonfinite[:4])}",
                             "run nan_watch: it names the module where the first NaN/inf appears"))
        for key, fraction in dead.items():
            bucket = problems if fraction >= DEAD_FAIL else warnings if fraction >= DEAD_WARN else None
            if bucket is not None:
                bucket.append((f"{fraction:.0%} of the units of ReLU {key} are dead on this batch",
                               "look at the bias init and the lr of the layer before it; or use LeakyReLU/GELU"))
        if depth:
            ratio, span = depth["ratio"], f"|grad|/|w| of {depth['first']} is {depth['ratio']:.2g}x that of {depth['last']}"
            for limit, bucket in ((DEPTH_FAIL, problems), (DEPTH_WARN, warnings)):
                if ratio < 1 / limit or ratio > limit:
                    bucket.append((f"vanishing gradients across depth: {span}", "run init_scale (a too-wide init saturates the "
                                   "head); replace stacked sigmoid/tanh by ReLU-family + He init; add normalisation or residuals")
                                  if ratio < 1 else
                                  (f"exploding gradients across depth: {span}", "run init_scale (too-wide init); clip gradients"))
                    break
        info = []
        if frozen:
            info.append(f"{len(frozen)} frozen parameter(s) (requires_grad False), assumed on purpose")
        if zero_at_init:
            info.append(f"{len(zero_at_init)} parameter(s) had zero grads only at init (zero-init somewhere)")
        status = "fail" if problems else "warn" if warnings else "pass"
        found = problems or warnings
        if found:
            details["next"] = found[0][1]
        summary = ("; ".join(message for message, _ in found)
                   or f"all {len(trainable)} trainable parameters get finite, non-zero gradients")
        if info:
            summary += " (" + "; ".join(info) + ")"
        return CheckResult("gradient_flow", status, summary, details)


class _DemoNet(torch.nn.Module):
    def __init__(self, broken):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 4)
        self.broken = broken

    def forward(self, x):
        features = self.encoder(x)
        if self.broken:
            features = features.detach()  # BUG: cuts the graph, so the encoder never gets a gradient
        return self.head(features)


def make_demo_case(broken):
    """A 4-class MLP; the broken twin detaches the encoder's output before the head."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(32, 16)
        targets = torch.randint(0, 4, (32,))
        model = _DemoNet(broken)
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_gradient_flow, make_demo_case, __doc__))
