"""nan_watch: which module first produces NaN/inf, forward or backward, and what led up to it?

Symptom
    The loss (or a gradient norm) turns NaN or inf, at step 0 or after a while, and nothing in
    the traceback says where. Or the run is fine in fp32/bf16 and overflows under fp16.

What it checks
    The idea of DebugUnderflowOverflow (transformers debug_utils, described in Bekman's
    ml-engineering, section Underflow and Overflow Detection): a hook on every module records, after
    each forward call, the abs-min and abs-max of its floating inputs and outputs (a frame).
    The first module whose inputs are finite and whose output is not is the forward origin;
    the frames recorded just before the first non-finite value are returned with it. In forward
    a frame counts as bad by its output: an additive attention mask of -inf going into a module
    whose output is finite (nn.Transformer's causal mask) is by design.
    If the forward pass and the loss are finite, backward is watched the same way: tensor hooks
    record the gradient arriving at each module's outputs and leaving through its inputs; the
    first module whose output gradient is finite and whose input gradient is not is the
    backward origin (e.g. torch.where(x > 0, x.log(), 0): finite forward, NaN gradient at 0).
    Weights that are already NaN/inf, and a batch that already holds NaN/inf, are named too.

    fp16 headroom: when everything is finite, any module output with abs max above 1e4 is a
    warn. fp16 tops out at 65504, and Bekman's rule of thumb keeps activations far below 1e4,
    since a matmul of two values of 1e4 reaches 1e8. Harmless in fp32 and bf16.

    Runs one forward and backward in train mode. Every hook it registers is removed. A
    DistributedDataParallel (or DataParallel) model is unwrapped to `.module`: no collective.

    NanWatch: the same question at every step of a real run, where the NaN that matters shows up
    at step 14,000, at the speed of a plain step, eager or under torch.compile. In the loop:

      watch = NanWatch(model)                 # model, torch.compile(model) or DDP(model); every=N
      for step, (x, y) in enumerate(loader):
          watch.begin()                       # optional: the RNG state this step starts from
          loss = loss_fn(model(x), y)
          loss.backward()
          report = watch.check(step, loss, replay=lambda: loss_fn(model(x), y))  # None when healthy
          if report is not None:
              print(report["summary"])        # also: step, module, class, phase, source, frames, rank
              optimizer.zero_grad(set_to_none=True)
              continue                        # skip the bad step (or let SpikeGuard decide)
          optimizer.step()
          optimizer.zero_grad(set_to_none=True)

    A healthy step costs one sentinel: is the loss finite, is the gradients' infinity norm (their
    largest abs value: NaN if one is NaN, inf if one is inf, never an fp16 overflow as a 2-norm
    can be) finite, one fused reduction on the device (pass grad_norm= the norm clip_grad_norm_
    returned to skip even that), read with one host sync per check(), or per N with every=N.
    NanWatch puts no hook in the model: a compiled model keeps its graphs (no graph break). A step counts as bad only when a NaN or an inf reaches the loss or a gradient: a
    -inf mask on logits, or anywhere the loss never sees, is not reported.

    On a bad step, check() replays it before optimizer.step() has moved the weights: the same
    weights, the same batch (the replay function), the RNG state the step started from (dropout
    draws the same mask), eagerly (torch.compiler.set_stance("force_eager")), with a forward hook
    on every module and gradient hooks on their inputs, outputs and parameters. One torch.aminmax
    per tensor gives its min and max: the NaN/inf test and the frame at once. Forward first (source
    "module": the first module whose inputs were finite and whose output is not, NaN or +inf before
    a -inf; "inputs": the batch already held NaN/inf; "outside": an operation outside any module,
    module None when every module's output was finite and the loss was not), else backward through
    torch.autograd.grad (the first non-finite gradient: the module whose backward made it). Frames
    are [abs min, abs max]; the abs min is exact for a tensor of one sign and None for one holding
    both (run the one-batch check of this file on that batch for more). The replay leaves the
    model as found: hooks removed, .grad untouched, BatchNorm's running stats and the RNG streams
    restored, also when the replay function raises; under DDP it runs under no_sync(). A replay
    function may be a list, one per micro-batch of a gradient-accumulation step, replayed in order.
    Without replay=, or with every=N when the bad step is not the last one read (later optimizer
    steps have moved its weights), the report names the step, with module None and source
    "sentinel"; source "not reproduced" when the replay made no NaN/inf on this rank.

    With fp16 and a GradScaler pass NanWatch(model, scaler=scaler): an inf or NaN gradient is then
    the scaler's to skip (it lowers its scale and tries again) while its scale is above 1; at a
    scale of 1 or less no scaling made it, and the step is reported: a NaN the scaler would skip
    at every step, halving its scale towards nothing. A non-finite loss is always reported.

    Under torch.distributed every rank must call check() at the same steps: each read all-reduces
    the flags (one small collective per read), so every rank agrees on the step; on a bad step
    every rank replays its own batch and all return the same report, that of the first rank whose
    replay found the NaN/inf, with its "rank". Zero-size parameters and sparse gradients
    (nn.Embedding(sparse=True)) are measured through their values; float8 and empty tensors are
    not measured. The replay watches the model in the mode the step ran it (train, or eval when
    a run trains with dropout off).
    Before 2026-11-26 NanWatch kept hooks on every module at every step and check(step) took
    only the step: that call still works and names bad steps, not their module; add loss= and
    replay= as above (the HF and Lightning callbacks do it for you).
    Cost, measured with benchmarks/nanwatch_overhead.py (CPU, one torch thread, a shared 2-core
    AMD EPYC at load average 14 to 21, 2026-11-26; tiny GPT2LMHeadModel, 0.44M parameters, batch
    16 x 64, fp32): 2.5 ms of CPU per step inside check() (the infinity norm of the gradients, the
    loss test, the RNG state), 1.7% of a 148 ms plain step; 0.34 ms with grad_norm= the clipping
    norm. Whole steps: 1.00x plain eager (0.95x to 1.05x over 5 rounds), against 1.43x for
    transformers' DebugUnderflowOverflow and 1.77x for torch.autograd.detect_anomaly; compiled
    (aot_eager): 1.04x (0.96x to 1.09x), 2.6 ms inside check(). At that load the rounds vary more
    than these costs. The planted inf of the benchmark (step 3, the last block's MLP) was named
    at step 3, eager and compiled: transformer.h.1.mlp.c_fc, forward.
    On a GPU (one H200, torch 2.11, GPT-2 small 124M, batch 16 x 1024, bf16, fused AdamW,
    2026-11-27) the host read is the cost: while the host waits for the step to end it queues
    none of the next step's kernels. A read every step: 1.034x plain eager (110 ms steps) and
    1.054x compiled with inductor (48 ms steps); every=10: 1.004x and 1.008x. grad_norm= saves
    almost nothing there. So on a GPU use every=10 for a long run: it still names the bad step,
    and its module when the bad step is the one read; rerun from the checkpoint before it with
    every=1 to name the module. The planted inf was named in its module at step 3 under inductor too.

Command
    python diagnostics/nan_watch.py                              # embedded demo (planted bug)
    python diagnostics/nan_watch.py --healthy
    python diagnostics/nan_watch.py --case my_case.py --json     # the frames are in the JSON

Output
    $ python diagnostics/nan_watch.py --json
    {
      "id": "nan_watch",
      "status": "fail",
      "summary": "first NaN/inf in the forward pass: the output of attend (_HandSoftmax), whose inputs were finite",
      "details": {
        "bad_weights": [],
        "inputs_finite": true,
        "frames": [
          {
            "phase": "forward",
            "module": "proj",
            "class": "Linear",
            "in": [
              0.00268,
              10.2
            ],
            "out": [
              0.00696,
              7.41
            ],
            "finite": true,
            "origin": false
          },
          {
            "phase": "forward",
            "module": "attend",
            "class": "_HandSoftmax",
            "in": [
              0.00696,
              7.41
            ],
            "out": [
              "nan",
              "nan"
            ],
            "finite": false,
            "origin": true
          }
        ],
        "origin": {
          "module": "attend",
          "class": "_HandSoftmax",
          "phase": "forward"
        },
        "next": "read the forward of attend: exp without max-subtraction, log/sqrt/division without eps"
      }
    }
    (exit code 1)
    $ python diagnostics/nan_watch.py --healthy
    [PASS] nan_watch: forward and backward finite over 4 module calls; largest activation 7.41 (fp16 headroom limit 10000)
    (exit code 0)

How to read it
    details["origin"] is the module (name, class, phase) where the first NaN/inf appeared.
    details["frames"] are the frames up to the first non-finite value, oldest first: "in" and
    "out" are [abs min, abs max] of the module's inputs and outputs; in the backward phase,
    "in" is the gradient arriving at the module's output and "out" the gradient it sends back
    to its input (one of the two per frame). Go a few frames up and look for values climbing towards overflow (abs max
    in the 1e4s for fp16, ~1e38 for fp32) or for an abs min of 0 going into a log, a division
    or a sqrt. A forward origin whose class is a container (Sequential, your model) means the
    NaN came from a functional op in its forward, between its submodules.

Next step
    PLAYBOOK.md#nan-watch. Forward overflow: subtract the max before exp (use torch.softmax /
    logsumexp), add eps to divisions and sqrt, clamp before log. Backward NaN with a finite
    forward: the where/mask trap (compute the unsafe op on a safe input, e.g.
    x.clamp_min(eps).log()), sqrt or norm at exactly 0. fp16 headroom warn: train in bf16,
    or keep the named layers in fp32.
"""
import contextlib
import sys
import weakref  # NanWatch: the stats of a tensor are reused while the tensor lives, unchanged

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, forward, preserved, cli_main

FRAMES = 8  # frames reported up to the first NaN/inf; the peer tool DebugUnderflowOverflow prints the last 21 — our assumption
# fp16 tops out at 65504 (evidence bekman-pytorch-debug#fp16-max-65504), and activations must stay well below 1e4
# because 1e4 * 1e4 = 1e8 in a matmul (evidence bekman-pytorch-debug#fp16-activations-limit).
FP16_HEADROOM = 1e4


def _floats(obj):
    """The floating-point tensors in a tensor / tuple / list / dict (ModelOutput included), in order."""
    if torch.is_tensor(obj):
        return [obj] if obj.is_floating_point() else []
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    return [t for value in values for t in _floats(value)]


def _number(x):
    """A float rounded to 3 digits, or "nan" / "inf" as a string so that --json stays strict JSON."""
    return float(f"{x:.3g}") if abs(x) < float("inf") else str(x)


def _span(tensors):
    """([abs min, abs max] over the tensors, or None when there are none) and whether all are finite."""
    lows, highs, finite = [], [], True
    for t in tensors:
        a = t.detach().abs().float()
        if a.numel():
            lows.append(float(a.min()))
            highs.append(float(a.max()))
            finite = finite and bool(torch.isfinite(a).all())
    if not lows:
        return None, True
    nan = float("nan")
    low = nan if any(v != v for v in lows) else min(lows)  # min()/max() of Python floats would skip a NaN
    high = nan if any(v != v for v in highs) else max(highs)
    return [_number(low), _number(high)], finite


def check_nan_watch(case, frames=FRAMES):
    """One forward (and, if finite, backward) with per-module abs-min/abs-max frames; names the first NaN/inf."""
    case = validate_case(case)
    with preserved(case["model"]):
        model = case["model"]
        model.train()
        names = {m: n or type(model).__name__ for n, m in model.named_modules()}
        inputs, targets = case["batch"]
        bad_weights = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
        _, inputs_finite = _span(_floats(inputs))
        details = {"bad_weights": bad_weights, "inputs_finite": inputs_finite}
        if bad_weights:
            details["next"] = "reload the weights from the last good checkpoint; find the step that broke them (spikes on the log)"
            return CheckResult("nan_watch", "fail", f"{len(bad_weights)} parameter(s) already hold NaN/inf: "
                               f"{', '.join(bad_weights[:3])} (a corrupt checkpoint or an earlier bad step)", details)
        if not inputs_finite:
            details["next"] = "run data_sanity and fix the data pipeline"
            return CheckResult("nan_watch", "fail", "the input batch already holds NaN/inf (run data_sanity)", details)
        log = []  # frames in the order the hooks fire
        grad_out_finite = {}  # module -> whether every gradient arriving at its outputs was finite

        def frame(module, phase, ins, outs, origin_if_bad=True):
            span_in, fin_in = _span(ins)
            span_out, fin_out = _span(outs)
            finite = fin_out if phase == "forward" else fin_in and fin_out  # a -inf additive attention mask going in is by design
            log.append({"phase": phase, "module": names[module], "class": type(module).__name__, "in": span_in,
                        "out": span_out, "finite": finite, "origin": origin_if_bad and fin_in and not fin_out})
            return finite

        def on_grad_out(module):  # backward frame "in": the gradient arriving at the module's output
            def hook(grad):
                finite = frame(module, "backward", [grad], [], origin_if_bad=False)
                grad_out_finite[module] = grad_out_finite.get(module, True) and finite
            return hook

        def on_grad_in(module):  # backward frame "out": the gradient the module sends back to its input
            def hook(grad):
                frame(module, "backward", [], [grad], origin_if_bad=grad_out_finite.get(module, True))
            return hook

        def on_forward(module, args, output):
            ins, outs = _floats(args), _floats(output)
            frame(module, "forward", ins, outs)
            if torch.is_grad_enabled():
                for t in outs:
                    if t.requires_grad:
                        t.register_hook(on_grad_out(module))
                for t in ins:
                    if t.requires_grad:
                        t.register_hook(on_grad_in(module))

        handles = [m.register_forward_hook(on_forward) for m in model.modules()]
        try:
            output = forward(model, inputs)
            loss = case["loss_fn"](output, targets)
            forward_finite = _span(_floats(output))[1] and bool(torch.isfinite(loss))
            if forward_finite and loss.requires_grad:
                loss.backward()
        finally:
            for handle in handles:
                handle.remove()
        return _verdict(log, loss, forward_finite, frames, details)


def _verdict(log, loss, forward_finite, frames, details):
    """Turn the frame log into a CheckResult."""
    first_bad = next((i for i, f in enumerate(log) if not f["finite"]), None)
    origin = next((f for f in log if f["origin"]), None)
    if first_bad is None and forward_finite:
        outputs = [f for f in log if f["phase"] == "forward" and f["out"]]
        near = [f for f in outputs if f["out"][1] > FP16_HEADROOM]
        details["fp16_risk"] = [{"module": f["module"], "class": f["class"], "abs_max": f["out"][1]} for f in near]
        if near:
            worst = max(near, key=lambda f: f["out"][1])
            details["next"] = "under fp16 autocast: train in bf16, or keep these modules in fp32; else nothing to do"
            return CheckResult("nan_watch", "warn", f"no NaN/inf, but {len(near)} module output(s) exceed {FP16_HEADROOM:g} "
                               f"(fp16 max 65504): worst {worst['module']} at {worst['out'][1]:.3g}; harmless in fp32/bf16", details)
        largest = max((f["out"][1] for f in outputs), default=0.0)
        return CheckResult("nan_watch", "pass", f"forward and backward finite over {len(outputs)} module calls; "
                           f"largest activation {largest:.3g} (fp16 headroom limit {FP16_HEADROOM:g})", details)
    if first_bad is None:  # every module output finite, the loss is not: the loss function made it
        details.update(origin={"module": "loss_fn", "phase": "forward"}, frames=log[-frames:], loss=float(loss.detach()),
                       next="use the fused losses (F.cross_entropy on logits, F.log_softmax, BCEWithLogits); run labels")
        return CheckResult("nan_watch", "fail", f"the model's outputs are finite but the loss is {float(loss.detach())}: "
                           "the loss function produced it (e.g. every label ignored, log of 0)", details)
    details["frames"] = log[max(0, first_bad + 1 - frames):first_bad + 1]
    if origin is None:
        origin = log[first_bad]
    details["origin"] = {"module": origin["module"], "class": origin["class"], "phase": origin["phase"]}
    where = f"{origin['module']} ({origin['class']})"
    details["next"] = (f"read the forward of {origin['module']}: exp without max-subtraction, log/sqrt/division without eps"
                       if origin["phase"] == "forward" else
                       f"read the forward of {origin['module']}: sqrt/log/norm at exactly 0, a where() or mask hiding an inf")
    if origin["origin"] and origin["phase"] == "forward":
        summary = f"first NaN/inf in the forward pass: the output of {where}, whose inputs were finite"
    elif origin["origin"]:
        summary = (f"forward is finite; first NaN/inf in backward: {where} turned a finite gradient at its output "
                   "into a non-finite gradient at its input")
    else:
        kind = "a gradient" if origin["phase"] == "backward" else "a value"
        summary = f"first NaN/inf seen in {kind} at {where} (its source is not a module this check can hook)"
    return CheckResult("nan_watch", "fail", summary, details)


def scale_of(scaler, device):
    """An enabled GradScaler's current scale, a 0-d tensor on `device`, read without a host sync."""
    scale = getattr(scaler, "_scale", None)  # set by its first scale(); get_scale() would sync
    return torch.as_tensor(scaler.get_scale() if scale is None else scale, dtype=torch.float32).to(device).reshape(())


class NanWatch:
    """A sentinel on every step, a replay with per-module hooks on a bad one; see the module docstring."""

    def __init__(self, model, every=1, frames=FRAMES, scaler=None):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.wrapper = model  # what the loop calls: the replay goes through it, with DDP's no_sync
        self.model = _unwrapped(model)
        self.every, self.frames = every, frames
        self.names = {m: n or type(self.model).__name__ for n, m in self.model.named_modules()}
        self.params = list({id(p): p for p in self.model.parameters() if p.requires_grad}.values())  # tied: once
        self._pending, self._checks, self._handles = [], 0, []
        self._step = None  # the replay's _StepLog while a replay runs
        self._rng = _rng_state()

    def remove(self):
        """Forget the steps not read yet. NanWatch holds no hook between steps: the model is as it was."""
        self._pending = []

    def begin(self):
        """At the top of a step, before its forward: remember the RNG state the step starts from (a few KB, no sync).

        Without it the replay starts from the state check() saw at the end of the previous step, which is
        the same unless the loop draws random numbers in between (random augmentations in the main process).
        """
        self._rng = _rng_state()

    def check(self, step, loss=None, replay=None, grad_norm=None):
        """After backward, before optimizer.step(): None on a healthy step; on a step whose loss or gradients
        hold NaN/inf, the report (a dict).

        loss: the step's loss (a tensor; no sync). replay: a function that recomputes that loss from the
        same batch (forward only, e.g. lambda: loss_fn(model(x), y)), or a list of them, one per micro-batch;
        without it a bad step is reported without its module. grad_norm: a global gradient norm the loop
        already computed (clip_grad_norm_'s return value): then the gradients are not read again. Reads the
        verdict once every `every` calls (the one host sync; under torch.distributed, one all-reduce with it).
        """
        self._pending.append((step, self._flag(loss, grad_norm), replay, self._rng))
        self._checks += 1
        self._rng = _rng_state()
        if self._checks % self.every:
            return None
        pending, self._pending = self._pending, []
        bad = self._read([flag for _, flag, _, _ in pending])
        if not any(bad):
            return None
        first = bad.index(True)
        step, _, replay, rng = pending[first]
        return self._agree(self._replay(step, replay, rng, first == len(pending) - 1, pending[-1][0]))

    def _flag(self, loss, grad_norm):
        """A 0-d bool on the device: the loss or the gradients hold NaN/inf. One fused reduction, no sync.

        The gradients' infinity norm (their largest abs value) is NaN when one holds NaN and inf when one
        holds inf, and never overflows as a 2-norm can (fp16 gradients of norm above 65504).
        """
        if grad_norm is None:
            grads = [p.grad._values() if p.grad.is_sparse else p.grad for p in self.params if p.grad is not None]
            grads = [g for g in grads if g.numel()]  # an empty tensor has no infinity norm
            grad_norm = torch.nn.utils.get_total_norm(grads, float("inf")) if grads else None
        values = [torch.as_tensor(v).detach().float().reshape(()) for v in (loss, grad_norm) if v is not None]
        if not values:
            return None
        device = values[0].device
        finite = torch.stack([v.to(device) for v in values]).isfinite()
        if self.scaler is not None and grad_norm is not None:  # (the last value) an fp16 overflow is the scaler's to
            finite[-1] |= scale_of(self.scaler, device) > 1  # skip; at a scale of 1 or less no scaling made it: NaN/inf
        return ~finite.all()

    def _read(self, flags):
        """Whether each pending step was bad, on this rank or any other: one host read, one all-reduce."""
        known = [f for f in flags if f is not None]
        device = known[0].device if known else next(iter(self.params), torch.zeros(())).device
        values = torch.stack([f.to(device) if f is not None else torch.zeros((), dtype=torch.bool, device=device)
                              for f in flags]).to(torch.int32)
        if _world() > 1:  # every rank takes the same decision, whichever rank made the NaN
            torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.MAX)
        return [bool(v) for v in values.tolist()]

    def _agree(self, report):
        """The same report on every rank: the first rank whose replay found the NaN/inf, else rank 0's."""
        if _world() == 1:
            return {**report, "rank": 0}
        reports = [None] * _world()
        torch.distributed.all_gather_object(reports, report)  # a bad step only: every rank is here, they agreed
        rank = next((r for r, each in enumerate(reports) if each["source"] != "not reproduced"), 0)
        return {**reports[rank], "rank": rank}

    def _replay(self, step, replay, rng, latest, read_at):
        """The report of a bad step: its replay with per-module hooks, or what is known without one."""
        if replay is None or not latest:
            why = ("check() had no replay= to recompute its loss" if replay is None else
                   f"it was read at step {read_at} (every={self.every}), after later steps changed the weights")
            return self._dict(step, None, None, "sentinel", "the loss or a gradient held NaN/inf; its module is not "
                              f"named: {why}", [])
        for closure in replay if isinstance(replay, (list, tuple)) else [replay]:
            report = self._replay_one(step, closure, rng)
            rng = None  # the next micro-batch goes on from where this one left the RNG, as in the step
            if report is not None:
                return report
        return self._dict(step, None, None, "not reproduced", "the loss or a gradient held NaN/inf, but its replay from "
                          "the same weights, batch and RNG state made none on this rank (another rank's gradients "
                          "under DDP, or nondeterminism)", [])

    def _replay_one(self, step, closure, rng):
        """Run closure eagerly with hooks on every module, backward too when its loss is finite; the report or None.

        Leaves the model as found: hooks removed, buffers (BatchNorm's running stats) copied back, .grad
        untouched (the gradients go to torch.autograd.grad, not to .grad), the RNG streams restored.
        """
        saved_rng, buffers = _rng_state(), [(b, b.detach().clone()) for b in self.model.buffers()]
        self._step = log = _StepLog()
        try:
            self._handles = [m.register_forward_hook(self._on_forward, with_kwargs=True) for m in self.names]
            watched = set()
            for module in self.names:
                for name, p in module.named_parameters(recurse=False):
                    if p.requires_grad and id(p) not in watched:  # a tied weight is watched once, with its first owner
                        watched.add(id(p))
                        self._handles.append(p.register_hook(self._on_param_grad(module, name)))
            if rng is not None:
                _set_rng_state(rng)
            stance = torch.compiler.set_stance("force_eager") if hasattr(torch.compiler, "set_stance") else _nothing()
            sync = self.wrapper.no_sync() if hasattr(self.wrapper, "no_sync") else _nothing()
            with stance, sync, torch.enable_grad():
                loss = _loss(closure())
                loss_finite = None if loss is None else bool(torch.isfinite(loss.detach()).all())  # None: no loss
                if loss_finite and loss.requires_grad and self.params:
                    torch.autograd.grad(loss, self.params, allow_unused=True)
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles, self._step = [], None
            with torch.no_grad():
                for buffer, value in buffers:
                    buffer.copy_(value)
            _set_rng_state(saved_rng)
        log.close()
        return self._report(step, log, loss_finite)

    def _on_forward(self, module, args, kwargs, output):  # registered for the replay only, in whatever mode it runs
        log = self._step
        ins, outs = [], []
        _collect(args, ins)
        _collect(kwargs, ins)
        _collect(output, outs)
        index = log.index
        out_ix = [index(t, 2 if t.requires_grad else 1) for t in outs]  # outputs first: an output that is an input is
        in_ix = [index(t, 0) for t in ins]                                # measured once, at its own level
        log.forward.append((module, in_ix, out_ix))
        hooked = log.grad_hooked
        for t, i in zip(outs + ins, out_ix + in_ix):
            if t.requires_grad and i not in hooked:
                hooked.add(i)
                t.register_hook(self._on_grad(log, i))

    def _on_grad(self, log, i):
        def hook(grad):  # fires in the replay's torch.autograd.grad only: its graph is freed when the replay ends
            log.backward.append((i, None, log.index(grad, 2)))
        return hook

    def _on_param_grad(self, module, name):
        def hook(grad):  # registered for the replay only
            if grad.is_sparse:  # nn.Embedding(sparse=True): its values are what can be NaN/inf
                grad = grad._values()
            if grad.numel():
                self._step.backward.append((None, (module, name), self._step.index(grad, 2)))
        return hook

    def _report(self, step, log, loss_finite):
        """Name the first NaN/inf of a replay: forward first, then the loss, then backward; None when all was finite
        (or the replay gave no loss: then backward was not replayed)."""
        rows = {id(values): values.read() for values in log.values.values()}  # the replay's values come to the host
        lows, highs = [], []
        for (values, p), watch in zip(log.slots, log.watch):
            low_fully_watched, low_other, high = rows[id(values)]
            lows.append(low_fully_watched[p] if watch == 2 else low_other[p])
            highs.append(high[p])

        def finite(i):
            return abs(lows[i]) < float("inf") and abs(highs[i]) < float("inf")

        def input_ok(i):  # a -inf in an input is a mask (additive attention mask), not a fault
            return highs[i] < float("inf")  # NaN reaches the max too, and fails the test

        def nan_or_plus_inf(i):  # measured as an output (levels 1 and 2): NaN or +inf
            return log.watch[i] >= 1 and not input_ok(i)

        def fault(i):  # as well a -inf in an output that needs a gradient (level 2): log(0), or a -inf mask
            return log.watch[i] == 2 and not finite(i) or nan_or_plus_inf(i)

        def frame(phase, module, ins, outs, **extra):
            return {"phase": phase, "module": self.names[module], "class": type(module).__name__,
                    "in": _abs_span(lows, highs, ins), "out": _abs_span(lows, highs, outs), **extra}

        forward = log.forward
        for faulty in (nan_or_plus_inf, fault):  # a -inf mask (logits masked before the loss) is blamed only when
            bad = [any(map(faulty, outs)) for _, _, outs in forward]  # nothing made NaN or +inf
            if any(bad):
                break
        if any(bad):
            first = bad.index(True)
            origin = next((k for k, (m, ins, _) in enumerate(forward) if bad[k] and all(map(input_ok, ins))), None)
            roots = [k for k, (m, _, _) in enumerate(forward) if m is self.model]
            if origin is not None:
                source, where, last = "module", origin, origin
                summary = "first NaN/inf in the forward pass: the output of {}, whose inputs were finite"
            elif roots and not all(map(input_ok, forward[roots[-1]][1])):
                source, where, last = "inputs", roots[-1], first
                summary = "the model's inputs (the batch) already held NaN/inf when they reached {}"
            else:
                source, where, last = "outside", first, first
                summary = "first NaN/inf seen at the output of {}, whose inputs held NaN/inf made outside any module"
            frames = [frame("forward", *entry) for entry in forward[max(0, last + 1 - self.frames):last + 1]]
            return self._dict(step, forward[where][0], "forward", source, summary, frames)
        if loss_finite is False:
            frames = [frame("forward", *entry) for entry in forward[-self.frames:]]
            return self._dict(step, None, "forward", "outside", "every module's output was finite; the loss made from "
                              "them was not: the loss function or an operation after the model made it", frames)
        consumers, producers = {}, {}
        for m, ins, outs in forward:  # in firing order: the innermost module first
            for i in ins:
                consumers.setdefault(i, m)
            for i in outs:
                producers.setdefault(i, m)
        frames = []
        for i, param, s in log.backward:  # "in": the gradient arriving at a module's output; "out": the one it sends back
            if param is not None:
                module, source = param[0], "module"
                frames.append(frame("backward", module, [], [s], param=param[1]))
                summary = f"forward is finite; the backward of {{}} made a non-finite gradient for its parameter {param[1]}"
            elif i in consumers:
                module, source = consumers[i], "module"
                frames.append(frame("backward", module, [], [s]))
                summary = ("forward is finite; first NaN/inf in backward: {} turned a finite gradient at its output "
                           "into a non-finite gradient at its input")
            else:
                module, source = producers[i], "outside"
                frames.append(frame("backward", module, [s], []))
                summary = ("forward is finite; the gradient arriving at the output of {} was already non-finite: the "
                           "loss, or an operation after it outside any module, made it")
            if not finite(s):
                return self._dict(step, module, "backward", source, summary, frames[-self.frames:])
        return None

    def _dict(self, step, module, phase, source, summary, frames):
        """The report: step, module (None when no module made it), class, phase, source, summary, frames."""
        name, kind = (self.names[module], type(module).__name__) if module is not None else (None, None)
        return {"step": step, "module": name, "class": kind, "phase": phase, "source": source,
                "summary": f"step {step}: " + summary.format(f"{name} ({kind})"), "frames": frames}


def _unwrapped(model):
    """The module itself under torch.compile's OptimizedModule and DistributedDataParallel/DataParallel, in any order."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers) or hasattr(model, "_orig_mod"):
        model = model.module if isinstance(model, wrappers) else model._orig_mod
    return model


def _world():
    """The number of ranks under torch.distributed, else 1."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def _rng_state():
    """The torch RNG streams (CPU, and every CUDA device once CUDA is in use): host copies, no device sync."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _loss(output):
    """The loss a replay function returned: a tensor, or the "loss" of a dict (HF's ModelOutput, Lightning's step)."""
    if isinstance(output, dict):
        output = output.get("loss")
    return output if torch.is_tensor(output) else None


@contextlib.contextmanager
def _nothing():
    yield


_MEASURED = {torch.float16, torch.bfloat16, torch.float32, torch.float64}  # aminmax has no float8 kernel on CPU


def _collect(obj, into):
    """Append to `into` the floating-point tensors NanWatch can measure in a tensor / tuple / list / dict
    (ModelOutput included), in order: float16/bfloat16/float32/float64, strided (not sparse), not
    empty, not inference tensors."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype in _MEASURED and obj.layout == torch.strided and obj.numel() and not obj.is_inference():
            into.append(obj)
    elif isinstance(obj, (tuple, list)):
        for value in obj:
            _collect(value, into)
    elif isinstance(obj, dict):
        for value in obj.values():
            _collect(value, into)


def _abs_span(lows, highs, indices):
    """[abs min, abs max] over the tensors with these (min, max), None when there are none; "nan" when any holds NaN.

    The abs max is max(-min, max). The abs min follows from min and max only for a tensor of one sign
    (min >= 0: min; max <= 0: -max); for a tensor holding both signs it is not measured, and the
    frame's abs min is None, unless another of its tensors holds a 0.
    """
    if not indices:
        return None
    rows = [(lows[i], highs[i]) for i in indices]
    if any(low != low or high != high for low, high in rows):
        return ["nan", "nan"]
    known = [low if low >= 0 else -high for low, high in rows if low >= 0 or high <= 0]
    abs_min = min(known) if len(known) == len(rows) or 0.0 in known else None
    return [None if abs_min is None else _number(abs_min), _number(max(max(-low, high) for low, high in rows))]


class _StepLog:
    """What the hooks saw during one replay: each measured tensor's min and max, on the device until the report reads them."""

    def __init__(self):
        self.watch, self.slots = [], []  # per measured tensor: its watch level; where its values are: (_Values, position)
        self.values = {}  # (dtype, device) -> _Values
        self.seen = {}  # id(tensor) -> (weak ref, version, index); None once closed
        self.forward, self.backward, self.grad_hooked = [], [], set()

    def index(self, t, watch):
        """The index of t's (min, max), measured once per version of t; watch it at this level.

        Watch levels: 0 an input only; 1 NaN and +inf count (a -inf mask is not a fault); 2 any
        non-finite value counts. A tensor met again (a module's output is the next one's input; the
        same gradient is handed to several tensors) keeps its values while it is unchanged.
        """
        version = t._version
        known = self.seen.get(id(t))
        if known is not None and known[0]() is t and known[1] == version:
            i = known[2]
            if watch > self.watch[i]:
                if watch == 2:
                    values, p = self.slots[i]
                    values.fully_watch(p)
                self.watch[i] = watch
            return i
        group = (t.dtype, t.device)
        values = self.values.get(group)
        if values is None:
            values = self.values[group] = _Values(*group)
        self.slots.append((values, values.put(t.detach() if t.requires_grad else t, watch == 2)))
        self.watch.append(watch)
        i = len(self.watch) - 1
        self.seen[id(t)] = (weakref.ref(t), version, i)
        return i

    def close(self):
        """End of the replay: the references to tensors are let go."""
        self.seen = self.grad_hooked = None


class _Values:
    """The min and max of every tensor of one dtype on one device measured in a replay, written in place.

    One aminmax reduction per tensor is the NaN/inf test and the frame at once (NaN reaches both
    the min and the max, an inf is one of them). It writes (out=) into a block, through 0-d views
    of it, not into two new 0-d tensors per tensor: hundreds of small allocations a step among
    the activations (when the hooks stayed on at every step, they tripled the system time of the
    benchmark's step: page faults). Rows of a
    block: 0 the min of a tensor whose every non-finite value counts (watch level 2); 1 the min
    of any other (a -inf there is a mask, not a fault); 2 the max. Unused: 0.
    """

    SIZE = 512  # tensors per block; a replay that measures more takes another block

    def __init__(self, dtype, device):
        self.dtype, self.device = dtype, device
        self.blocks, self.n = [], 0

    def put(self, t, fully_watched):
        """Measure t (not requiring grad); its position."""
        b, q = divmod(self.n, self.SIZE)
        if b == len(self.blocks):
            self.blocks.append(_Block(self.dtype, self.device, self.SIZE))
        low_fully_watched, low_other, high = self.blocks[b].at(q)
        torch.aminmax(t, out=(low_fully_watched if fully_watched else low_other, high))
        self.n += 1
        return self.n - 1

    def fully_watch(self, p):
        """The tensor at p, measured as an input or a mask, is also an output whose every non-finite value counts."""
        low_fully_watched, low_other, _ = self.blocks[p // self.SIZE].at(p % self.SIZE)
        low_fully_watched.copy_(low_other)

    def read(self):
        """The three rows, as lists of floats (a host sync)."""
        return torch.cat([block.data for block in self.blocks], 1).tolist()


class _Block:
    """Rows of values for SIZE tensors, and the 0-d views that aminmax writes through, made once per position."""

    def __init__(self, dtype, device, size):
        self.data = torch.zeros(3, size, dtype=dtype, device=device)
        self.rows, self.views = self.data.unbind(), []

    def at(self, q):
        """The (min if fully watched, min otherwise, max) views at position q; positions are taken in order."""
        if q == len(self.views):
            self.views.append(tuple(row[q] for row in self.rows))
        return self.views[q]


class _HandSoftmax(torch.nn.Module):
    """Softmax with a temperature, written by hand."""

    def __init__(self, temperature, broken):
        super().__init__()
        self.temperature = temperature
        self.broken = broken

    def forward(self, x):
        x = x / self.temperature
        if self.broken:
            e = torch.exp(x)  # BUG: no max-subtraction: exp overflows to inf, and inf / inf is NaN
        else:
            e = torch.exp(x - x.amax(-1, keepdim=True))  # shifted so the largest exponent is 0
        return e / e.sum(-1, keepdim=True)


class _DemoNet(torch.nn.Module):
    def __init__(self, broken):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.attend = _HandSoftmax(temperature=0.01, broken=broken)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.proj(x)
        return self.head(self.attend(h) * h)


def make_demo_case(broken):
    """A small net with a hand-written low-temperature softmax; the broken twin forgets to subtract the max."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(16, 16) * 3
        targets = torch.randint(0, 4, (16,))
        model = _DemoNet(broken)
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_nan_watch, make_demo_case, __doc__))
