"""spike_guard: skip the optimizer step on an outlier loss or gradient norm, the same way on every rank.

Symptom
    A run takes one bad batch (a corrupted shard, an unnormalised input, a burst of rare tokens)
    and the loss jumps, then stays up for hundreds of steps or never comes back, because Adam
    keeps moving in the direction that batch gave it. Or the loss turns NaN once and the run is
    lost. You want the step that would do the damage skipped, not a rollback afterwards.

What it checks
    Before every optimizer step, SpikeGuard.should_skip(step, loss) looks at the loss and the
    global pre-clip gradient norm and answers True (skip this step) when:

      nonfinite_loss       the loss is NaN or inf, at any step
      nonfinite_grad_norm  the gradient norm is NaN or inf, at any step (with scaler=: left to the
                           GradScaler, which skips the step and lowers its scale by itself)
      loss_outlier         after the warmup, the loss is above mean + max(skip_z * std, 5% of mean)
      grad_norm_outlier    the same test for the gradient norm

    mean and std are exponential moving averages with ZClip's update and defaults (alpha 0.97,
    statistics initialised from the first 25 accepted steps; a warmup of all-zero values, say a
    frozen model's, teaches no scale and starts again). A skipped step never enters them, so a
    burst of outliers cannot raise the bar for the next one. skip_z defaults to 6, the
    sigma factor of OLMo-core's SkipStepOptimizer (a peer tool); the 5% floor is spikes.py's. On
    the demo task, 10 seeds x 1,500 healthy steps (`--healthy --steps 1500 --seed 0..9`), it
    skipped nothing, and the largest z-scores it let through were 5.4 (loss) and 5.9 (gradient
    norm), measured: not a wide margin on a small-batch task with a heavy-tailed gradient norm.
    guard.peak_z holds the same two numbers for your run; raise skip_z if they come close. A
    false skip costs one batch; the bad batches worth skipping sit far out (the demo's: a loss
    7.6 times the threshold). With clip_z=2.5 it also clips, ZClip-style: a gradient norm above mean + clip_z * std
    (z-score z) that is not skipped is scaled down to mean + clip_z * std / (z / clip_z), and
    that clipped norm is what enters the statistics. Clipping is the one change it ever makes,
    and only when asked; it never touches parameters, mode, hooks or the RNG.

    After max_consecutive skips in a row (default 5, our assumption) it raises
    RestartFromCheckpoint: a run that keeps producing outliers needs a rollback, a lower LR or
    other data (refs/stability.md#recover), not endless skipping. A planned change (new data
    mix, LR schedule jump) can look the same: call guard.reset() after one, and the guard warms
    up again. One run of skips is not a restart: max_consecutive gradient-norm outliers in a
    row with the loss in its band. No step was taken, so those batches met the same weights:
    the large norm belongs to the weights, not to a batch, a skip cannot change it, and the
    loss shows no damage to roll back. The guard takes that step (clip it, as above) and learns
    the norm's scale again from the next `warmup` steps (event "rewarm"). Measured on an H200
    (benchmarks/nanwatch_overhead.py, GPT-2 small from scratch, bf16, AdamW 1e-4, 2026-11-27):
    the guard variant skipped steps 33 to 37 for the gradient norm alone and raised. With the
    rule above, another run skipped steps 28 to 31 (norms 3.3 to 10.4 over a limit of 2.46, at
    one set of weights) and took step 32 (10.8). A run of the same model that took every step
    met one such norm (25.9 against 0.22 before it, at step 77) and was back at 0.225 one step
    later.

    In your loop, after backward and before clipping and optimizer.step():

      guard = SpikeGuard(model, monitor=mon)      # mon: an optional TrainingMonitor (diagnostics/monitor.py)
      for step, (x, y) in enumerate(loader):
          loss = loss_fn(model(x), y)
          loss.backward()
          if guard.should_skip(step, loss):       # the same answer on every rank
              optimizer.zero_grad(set_to_none=True)
              continue
          torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
          optimizer.step()
          mon.log(step, loss, grad_norm=guard.grad_norm)   # guard.grad_norm: global, pre-clip
          optimizer.zero_grad(set_to_none=True)

    With fp16 and a GradScaler, unscale first and let the scaler see every step:

          scaler.scale(loss).backward()
          scaler.unscale_(optimizer)              # the guard must see the true gradients
          if guard.should_skip(step, loss):       # SpikeGuard(model, scaler=scaler)
              scaler.update()                     # found_inf was recorded by unscale_
              optimizer.zero_grad(set_to_none=True)
              continue
          scaler.step(optimizer)
          scaler.update()

    Checkpoint the guard beside the model and the optimizer, or a resumed run warms up again and
    misses the spikes a resume can bring (refs/stability.md#resume):

      torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "guard": guard.state_dict(), "step": step}, path)
      ...
      checkpoint = torch.load(path, weights_only=True)  # on resume, before the first should_skip()
      model.load_state_dict(checkpoint["model"])
      optimizer.load_state_dict(checkpoint["optimizer"])
      guard.load_state_dict(checkpoint["guard"])        # a guard built with the same arguments as before

    The state holds plain Python numbers, lists and dicts: the statistics, the current run of
    skips, peak_z and the skipped and clipped counts, not the settings (they come from the
    constructor) nor guard.events (the monitor's log keeps those). A malformed state (other keys,
    other types, NaN or inf statistics) raises ValueError and leaves the guard as it was. Under
    torch.distributed every rank holds the same statistics, as every rank decides on the same
    all-reduced numbers: save rank 0's state with the rest of the checkpoint and load it on every
    rank.

    If you already clip before the guard, pass the clip's return value (the pre-clip norm):
    should_skip(step, loss, grad_norm=norm). Do not combine that with clip_z. With gradient
    accumulation, ask once per optimizer step, after the last micro-batch's backward, with the
    loss averaged over the micro-batches.

    Under torch.distributed every rank must take the same decision, or the replicas drift apart
    (one stepped, one did not) or hang in the next collective. So the guard decides on
    all-reduced inputs only: the loss averaged over ranks and the global gradient norm (DDP:
    the root mean square of the ranks' norms, equal to each when the replicas agree, inf when
    one rank holds an inf; sharded=True for FSDP/ZeRO: the squared shard norms summed). Both go
    in one all_reduce of a two-element tensor; every rank then runs the same float arithmetic on
    the same numbers. Call should_skip() on every rank at every step. Cost per step: one foreach
    norm over the gradients (none when you pass grad_norm=), that collective, and one CPU-GPU
    sync, as a host-side `if` needs the answer on the host (GradScaler.step syncs too).
    Measured with benchmarks/monitor_overhead.py (a 0.33M-parameter transformer-style MLP, 36 ms
    CPU steps, one thread, AMD EPYC, torch 2.13 CPU, 2026-11-22): should_skip() takes 0.65 ms of
    CPU per step (1.8%), 0.68 ms with clip_z; the zclip package's ZClip.step() took 0.72 ms.

    Events ({"step", "event": "skip"|"clip"|"rewarm"|"restart", "reason", "value", "threshold"}) are kept
    in guard.events (the last 10,000) and written to the monitor's log when one is given.

Command
    python diagnostics/spike_guard.py                    # demo: a bad batch at step 200, with and without the guard
    python diagnostics/spike_guard.py --healthy          # the same demo without the bad batch
    python diagnostics/spike_guard.py --json

Output
    $ python diagnostics/spike_guard.py
    the demo MLP, 300 steps (a bad batch planted at step 200), the same batches without and with SpikeGuard:
       step  unguarded    guarded
        180     0.1177     0.1177
        199     0.1212     0.1212
        200      6.804      6.804
        201     0.1726     0.1527
        205     0.4709     0.1188
        210     0.5248      0.136
        220     0.4814     0.1324
        240     0.3264     0.1332
        260      0.159     0.1072
        280     0.1735     0.1129
        299     0.1149    0.09722
    worst loss after step 200: unguarded 0.7084, guarded 0.1632
    largest z-score the guard let through: loss 1.21, grad_norm 3.40
    guard events: 1
      step 200: skip (loss_outlier), value 6.804, threshold 0.891
    $ python diagnostics/spike_guard.py --healthy
    ...
        299    0.09635    0.09635
    worst loss after step 200: unguarded 0.163, guarded 0.163
    largest z-score the guard let through: loss 1.23, grad_norm 3.40
    guard events: 0

How to read it
    Both runs see the same batches. At step 200 the planted batch gives a loss of 6.8 against a
    threshold of 0.89 (the running mean plus 6 standard deviations): the guard skips that step,
    so the guarded run's loss is high on that one batch only and then carries on along its
    curve (worst loss afterwards 0.16). The unguarded run takes the step, and its loss climbs
    for tens of steps after the bad batch (to 0.71) before it recovers. The largest z-scores the
    guard let through are the margin: the healthy steps stayed below z = 3.4, far from 6. With
    --healthy the guard reports no event and the two runs are identical, step for step.

Next step
    A skip is a symptom, not a fix: log which batch it was (the event's step) and inspect it.
    Occasional skips on a long run are normal; frequent ones mean the data or the LR needs
    attention. On RestartFromCheckpoint, roll back to a checkpoint well before the first skip
    and skip those batches or lower the LR (PLAYBOOK.md#loss-spikes, refs/stability.md#recover).
    Log the run with diagnostics/monitor.py and read the log with diagnostics/spikes.py.
"""
import argparse
import collections
import contextlib
import math
import os
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.distributed as dist

from ml_debug_contract import ArgumentParser, json_text

ALPHA = 0.97  # ZClip's EMA factor (evidence zclip-readme#default-alpha)
WARMUP = 25  # steps that initialise the statistics: ZClip's warmup_steps (evidence zclip-readme#default-warmup-steps)
SKIP_Z = 6.0  # OLMo-core's SkipStepOptimizer skips at 6 standard deviations (sigma_factor=6), a peer tool
MAX_CONSECUTIVE = 5  # skips in a row before RestartFromCheckpoint: our assumption (5 batches is cheap to lose,
# and 5 independent false skips in a row do not happen in a healthy run)
REL_MARGIN = 0.05  # an outlier is also at least 5% above the mean: spikes.py's SPIKE_REL (our assumption)
EPS = 1e-6  # ZClip's eps in the z-score's denominator
MAX_EVENTS = 10_000  # events kept in memory; the monitor's log keeps them all
STATE_KEYS = {"loss", "grad_norm", "run", "peak_z", "skipped", "clipped"}  # SpikeGuard.state_dict()
EVENT_KEYS = {"step", "event", "reason", "value", "threshold"}


class RestartFromCheckpoint(RuntimeError):
    """Too many consecutive skips: the run needs a rollback, a lower LR or other data, not more skipping."""

    def __init__(self, step, skips, events):
        self.step, self.skips, self.events = step, skips, events
        reasons = ", ".join(sorted({e["reason"] for e in events}))
        super().__init__(
            f"step {step}: {skips} consecutive steps skipped ({reasons}); roll back to a checkpoint well before step "
            f"{events[0]['step']} and skip those batches or lower the LR (PLAYBOOK.md#loss-spikes). If the change "
            f"was planned (data mix, LR schedule), call guard.reset() after it.")


class EmaStat:
    """ZClip's running mean and variance: initialised from the first `warmup` values, then EMA with `alpha`."""

    def __init__(self, alpha, warmup):
        self.alpha, self.warmup = alpha, warmup
        self.buffer, self.mean, self.var = [], None, None

    @property
    def ready(self):
        return self.mean is not None

    def std(self):
        return math.sqrt(self.var)

    def z(self, x):
        return (x - self.mean) / (self.std() + EPS)

    def update(self, x):
        if not self.ready:
            self.buffer.append(x)
            if len(self.buffer) >= self.warmup:
                self.mean = sum(self.buffer) / len(self.buffer)
                self.var = sum((v - self.mean) ** 2 for v in self.buffer) / len(self.buffer)
                self.buffer = []
        else:
            self.mean = self.alpha * self.mean + (1 - self.alpha) * x
            self.var = self.alpha * self.var + (1 - self.alpha) * (x - self.mean) ** 2  # the new mean, as ZClip
        self._settle()

    def _settle(self):
        """Statistics of all-zero values (a frozen model, an accumulation bug) hold no scale: the threshold would
        be 0 and every later step an outlier. Such statistics are not ready: the warmup starts again."""
        if self.mean == 0 and self.var == 0:
            self.mean = self.var = None

    def state_dict(self):
        return {"buffer": list(self.buffer), "mean": self.mean, "var": self.var}

    def load_state_dict(self, state):
        self.buffer, self.mean, self.var = list(state["buffer"]), state["mean"], state["var"]
        self._settle()


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_finite(x):
    """A number a float holds, neither NaN nor inf (an int too large for a float is not)."""
    try:
        return _is_number(x) and math.isfinite(x)
    except OverflowError:
        return False


def _state_problem(state):
    """What makes `state` something other than a SpikeGuard.state_dict(), or None."""
    if not isinstance(state, dict) or set(state) != STATE_KEYS:
        found = sorted(map(str, state)) if isinstance(state, dict) else f"a {type(state).__name__}"
        return f"expected a dict with the keys {sorted(STATE_KEYS)}, got {found}"
    for name in ("loss", "grad_norm"):
        stat = state[name]
        if not isinstance(stat, dict) or set(stat) != {"buffer", "mean", "var"}:
            return f"{name} must be a dict with the keys buffer, mean and var"
        if not isinstance(stat["buffer"], list) or not all(map(_is_finite, stat["buffer"])):
            return f"{name}['buffer'] must be a list of finite numbers"  # the guard never buffers NaN or inf
        warming_up = stat["mean"] is None and stat["var"] is None
        if not (warming_up or (_is_finite(stat["mean"]) and _is_finite(stat["var"]) and stat["var"] >= 0)):
            return (f"{name}: mean and var must be both None (warming up) or finite numbers (var >= 0), got "
                    f"{stat['mean']!r} and {stat['var']!r}")  # NaN statistics would never flag a step again
    peak_z = state["peak_z"]
    if not isinstance(peak_z, dict) or set(peak_z) != {"loss", "grad_norm"} or \
            not all(z is None or _is_finite(z) for z in peak_z.values()):
        return "peak_z must be a dict of loss and grad_norm, each None or a finite number"
    for name in ("skipped", "clipped"):
        if not isinstance(state[name], int) or isinstance(state[name], bool) or state[name] < 0:
            return f"{name} must be a non-negative integer, got {state[name]!r}"
    if not isinstance(state["run"], list) or not all(isinstance(e, dict) and set(e) == EVENT_KEYS
                                                     for e in state["run"]):
        return f"run must be a list of events, dicts with the keys {sorted(EVENT_KEYS)}"
    for e in state["run"]:  # a skip's value may be NaN or inf: that is what a nonfinite_loss skip holds
        if not (isinstance(e["step"], int) and not isinstance(e["step"], bool) and e["event"] == "skip"
                and isinstance(e["reason"], str) and _is_number(e["value"])
                and (e["threshold"] is None or _is_number(e["threshold"]))):
            return f"run must hold skip events (step an integer, value and threshold numbers), got {e!r}"
    return None


def _local(tensor):
    """The part of a (possibly DTensor) tensor this rank holds."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _scalar(x, device, dtype):
    """A tensor or a number as a 0-d tensor of `dtype` on `device`, detached; no host sync."""
    if torch.is_tensor(x):
        return x.detach().reshape(()).to(device, dtype)
    return torch.tensor(x, dtype=dtype, device=device)


class SpikeGuard:
    """Decides, each step, whether to skip the optimizer step; see the module docstring."""

    def __init__(self, model=None, skip_z=SKIP_Z, clip_z=None, alpha=ALPHA, warmup=WARMUP,
                 max_consecutive=MAX_CONSECUTIVE, sharded=False, scaler=None, monitor=None):
        if not skip_z > 0:
            raise ValueError(f"skip_z must be positive, got {skip_z!r}")
        if clip_z is not None and not 0 < clip_z < skip_z:
            raise ValueError(f"clip_z must be between 0 and skip_z ({skip_z}), got {clip_z!r}")
        if clip_z is not None and model is None:
            raise ValueError("clip_z needs the model: it scales the model's gradients")
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
        if not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup must be a positive integer, got {warmup!r}")
        if not isinstance(max_consecutive, int) or max_consecutive < 1:
            raise ValueError(f"max_consecutive must be a positive integer, got {max_consecutive!r}")
        self.model, self.skip_z, self.clip_z = model, skip_z, clip_z
        self.alpha, self.warmup, self.max_consecutive = alpha, warmup, max_consecutive
        self.sharded, self.scaler, self.monitor = sharded, scaler, monitor
        distributed = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size() if distributed else 1
        self.events = collections.deque(maxlen=MAX_EVENTS)
        self.skipped = self.clipped = 0
        self.loss = self.grad_norm = None  # the last step's all-reduced values, for logging
        self.reset()

    def reset(self):
        """Forget the statistics and the run of skips: the guard warms up again."""
        self.loss_stat = EmaStat(self.alpha, self.warmup)
        self.norm_stat = EmaStat(self.alpha, self.warmup)
        self.consecutive = 0
        self._run = []  # the events of the current run of consecutive skips
        self.peak_z = {"loss": None, "grad_norm": None}  # the largest z-scores of accepted steps: the margin to skip_z

    def state_dict(self):
        """What a resumed run needs to decide as this one would: plain Python numbers, lists and dicts, a copy."""
        return {"loss": self.loss_stat.state_dict(), "grad_norm": self.norm_stat.state_dict(),
                "run": [dict(e) for e in self._run], "peak_z": dict(self.peak_z),
                "skipped": self.skipped, "clipped": self.clipped}

    def load_state_dict(self, state_dict):
        """Continue from a state_dict() of a guard built with the same arguments; ValueError if it is not one."""
        problem = _state_problem(state_dict)
        if problem is not None:
            raise ValueError(f"not a SpikeGuard state_dict: {problem}")
        self.loss_stat.load_state_dict(state_dict["loss"])
        self.norm_stat.load_state_dict(state_dict["grad_norm"])
        self._run = [dict(e) for e in state_dict["run"]]
        self.consecutive = len(self._run)
        self.peak_z = dict(state_dict["peak_z"])
        self.skipped, self.clipped = state_dict["skipped"], state_dict["clipped"]

    def _grads(self):
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return [_local(g) for g in grads] if self.sharded else grads

    def _reduce(self, loss, grad_norm):
        """(mean loss over ranks, global grad norm): one all_reduce, one host sync."""
        device = loss.device if torch.is_tensor(loss) else torch.device("cpu")
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        summed = False  # a norm passed in is global already: combined like replicated norms
        if grad_norm is not None:
            square = _scalar(grad_norm, device, dtype) ** 2
        elif self.model is None:
            raise ValueError("should_skip needs grad_norm= when the guard was built without a model")
        else:
            grads = self._grads()
            square = _scalar(torch.nn.utils.get_total_norm(grads) if grads else 0.0, device, dtype) ** 2
            summed = self.sharded
        packed = torch.stack([_scalar(loss, device, dtype), square])
        if self.world > 1:
            dist.all_reduce(packed)  # SUM; NaN and inf on any rank reach every rank
        loss_sum, square = packed.tolist()  # CPU-GPU sync point: the decision is a host-side branch
        return loss_sum / self.world, math.sqrt(square if summed else square / self.world)

    def _event(self, step, kind, reason, value, threshold):
        event = {"step": step, "event": kind, "reason": reason, "value": value, "threshold": threshold}
        self.events.append(event)
        if self.monitor is not None:
            self.monitor.event(step, kind, reason=reason, value=value, threshold=threshold)
        return event

    def _limit(self, stat):
        return stat.mean + max(self.skip_z * stat.std(), REL_MARGIN * abs(stat.mean))

    def should_skip(self, step, loss, grad_norm=None):
        """True: do not step the optimizer now. Call after backward (and scaler.unscale_), on every rank.

        loss: this rank's loss (tensor or number); grad_norm: the global pre-clip norm if you have it.
        Raises RestartFromCheckpoint after max_consecutive skips in a row, unless all of them were for the gradient
        norm alone: then the step is taken and the norm's statistics start again (event "rewarm").
        """
        loss, norm = self.loss, self.grad_norm = self._reduce(loss, grad_norm)
        reason = threshold = None
        if not math.isfinite(loss):
            reason, value = "nonfinite_loss", loss
        elif not math.isfinite(norm):
            if self.scaler is not None and self.scaler.is_enabled():
                return False  # scaler.step skips it and lowers the scale; not a spike, nothing to learn from
            reason, value = "nonfinite_grad_norm", norm
        elif self.loss_stat.ready and loss > self._limit(self.loss_stat):
            reason, value, threshold = "loss_outlier", loss, self._limit(self.loss_stat)
        elif self.norm_stat.ready and norm > self._limit(self.norm_stat):
            reason, value, threshold = "grad_norm_outlier", norm, self._limit(self.norm_stat)
        if reason == "grad_norm_outlier" and self.consecutive + 1 >= self.max_consecutive and self._run and \
                all(e["reason"] == "grad_norm_outlier" for e in self._run):
            self._event(step, "rewarm", f"grad_norm_outlier on {self.consecutive + 1} batches in a row at the same "
                        "weights, the loss in its band", value, threshold)
            self.norm_stat = EmaStat(self.alpha, self.warmup)  # learnt again from the steps after this one
            self.consecutive, self._run = 0, []
            self.loss_stat.update(loss)
            return False
        if reason is not None:
            self.skipped += 1
            self.consecutive += 1
            self._run.append(self._event(step, "skip", reason, value, threshold))
            if self.consecutive >= self.max_consecutive:
                self._event(step, "restart", f"{self.consecutive} consecutive skips", self.consecutive,
                            self.max_consecutive)
                raise RestartFromCheckpoint(step, self.consecutive, list(self._run))
            return True
        self.consecutive, self._run = 0, []
        for name, stat, x in (("loss", self.loss_stat, loss), ("grad_norm", self.norm_stat, norm)):
            if stat.ready:
                self.peak_z[name] = max(stat.z(x), self.peak_z[name] or -math.inf)
        accepted = norm
        if self.clip_z is not None and self.norm_stat.ready:
            z = self.norm_stat.z(norm)
            if z > self.clip_z:  # ZClip's adaptive_scaling: the further out, the harder the clip
                accepted = self.norm_stat.mean + self.clip_z * self.norm_stat.std() / (z / self.clip_z)
                scale = accepted / (norm + EPS)
                for grad in self._grads():
                    grad.mul_(scale)
                self.clipped += 1
                self._event(step, "clip", "grad_norm_outlier", norm, accepted)
        self.loss_stat.update(loss)
        self.norm_stat.update(accepted)
        return False


# --- the demo ----------------------------------------------------------------------------------

DEMO_STEPS = 300
BAD_STEP = 200
BATCH, FEATURES, CLASSES, WIDTH = 256, 16, 8, 64
SHOW = (180, 199, 200, 201, 205, 210, 220, 240, 260, 280)  # steps in the printed table, and the last one


@contextlib.contextmanager
def _one_thread():
    """A model this small gains nothing from more threads, and loses much on a shared CPU; restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def demo_run(broken=True, guard_options=None, steps=DEMO_STEPS, seed=0):
    """Train a small MLP classifier with Adam (the monitor demo's task): (the loss of every step, the guard).

    guard_options: None trains without a guard; a dict (maybe empty) builds SpikeGuard(model, **options),
    and a step it skips is not taken. The caller's RNG state is left as it was.
    """
    with torch.random.fork_rng(devices=[]), _one_thread():
        torch.manual_seed(seed)
        data = torch.Generator().manual_seed(seed)
        teacher = torch.randn(FEATURES, CLASSES, generator=data)
        model = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, WIDTH), torch.nn.GELU(),
            torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(),
            torch.nn.Linear(WIDTH, CLASSES),
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # torch's default betas (0.9, 0.999)
        guard = None if guard_options is None else SpikeGuard(model, **guard_options)
        losses = []
        for step in range(steps):
            x = torch.randn(BATCH, FEATURES, generator=data)
            y = (x @ teacher).argmax(dim=1)
            if broken and step == BAD_STEP:
                x = x * 100  # BUG: one batch arrives unnormalised (raw values 100x the usual scale)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.item())
            if guard is not None and guard.should_skip(step, loss):
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return losses, guard


def demo(broken=True, steps=DEMO_STEPS, seed=0, **guard_options):
    """Both runs on the same batches: the losses of each, the guard's events and the peak z-scores it accepted."""
    unguarded, _ = demo_run(broken, None, steps, seed)
    guarded, guard = demo_run(broken, guard_options, steps, seed)
    return {"unguarded": unguarded, "guarded": guarded, "events": list(guard.events), "skipped": guard.skipped,
            "peak_z": guard.peak_z}


def _report(result, broken, steps):
    unguarded, guarded = result["unguarded"], result["guarded"]
    what = f"a bad batch planted at step {BAD_STEP}" if broken else "no bad batch"
    lines = [f"the demo MLP, {steps} steps ({what}), the same batches without and with SpikeGuard:",
             f"  {'step':>5} {'unguarded':>10} {'guarded':>10}"]
    lines += [f"  {s:>5} {unguarded[s]:>10.4g} {guarded[s]:>10.4g}" for s in (*SHOW, steps - 1) if s < steps]
    after = slice(BAD_STEP + 1, steps)
    lines.append(f"worst loss after step {BAD_STEP}: unguarded {max(unguarded[after]):.4g}, "
                 f"guarded {max(guarded[after]):.4g}")
    peak = ", ".join(f"{name} {'-' if z is None else f'{z:.2f}'}" for name, z in result["peak_z"].items())
    lines.append(f"largest z-score the guard let through: {peak}")
    lines.append(f"guard events: {len(result['events'])}")
    for e in result["events"]:
        threshold = "-" if e["threshold"] is None else f"{e['threshold']:.4g}"
        lines.append(f"  step {e['step']}: {e['event']} ({e['reason']}), value {e['value']:.4g}, threshold {threshold}")
    return "\n".join(lines)


def main(argv=None):
    parser = ArgumentParser(prog="spike_guard.py", formatter_class=argparse.RawDescriptionHelpFormatter,
                            description=__doc__.split("\n\n", 1)[0],
                            epilog="Runs the embedded demo: a small MLP trained on CPU for 300 steps twice on the same "
                                   "batches, without and with SpikeGuard, a bad batch planted at step 200 (none with "
                                   "--healthy). Exit 0 when the demo ran, 1 when the guarded run raised RestartFromCheckpoint, "
                                   "2 on bad usage.")
    parser.add_argument("--healthy", action="store_true", help="run the demo without the planted bad batch")
    parser.add_argument("--json", action="store_true", help="print the losses of both runs and the events as JSON")
    parser.add_argument("--skip-z", type=float, default=SKIP_Z,
                        help=f"the z-score above which a step is skipped ({SKIP_Z:g})")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"steps before the guard judges outliers ({WARMUP})")
    parser.add_argument("--steps", type=int, default=DEMO_STEPS, help=f"training steps, at least {DEMO_STEPS}")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model and the data (0)")
    args = parser.parse_args(argv)
    if args.steps < DEMO_STEPS:
        parser.error(f"--steps must be at least {DEMO_STEPS}, got {args.steps}")
    code = 0
    try:
        try:
            result = demo(not args.healthy, args.steps, args.seed, skip_z=args.skip_z, warmup=args.warmup)
            text = json_text(result, indent=None) if args.json else _report(result, not args.healthy, args.steps)
        except ValueError as exc:
            parser.error(str(exc))
        except RestartFromCheckpoint as exc:  # a run of loss or non-finite outliers: damage a rollback must undo
            text, code = f"the guarded run stopped with RestartFromCheckpoint: {exc}", 1
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130
    except OSError as exc:  # `spike_guard.py | head` closed the pipe, or stdout is a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return code if isinstance(exc, BrokenPipeError) else 1
    return code

if __name__ == "__main__":
    sys.exit(main())
