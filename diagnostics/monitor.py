"""monitor: a per-step training log that diagnostics/spikes.py reads, from a few lines in your loop.

Symptom
    A run spiked, diverged or slowed down, and the log holds the loss and little else: no pre-clip
    gradient norm, no parameter norm, no learning rate, no throughput, and under several ranks
    only rank 0's local loss. Post-mortems start from the log; log these before you need them.

What it checks
    TrainingMonitor writes one JSON line per logged step, in the training-log format spikes.py
    reads (DESIGN.md, "A training log"):

      step          your step counter
      loss          the loss, averaged over ranks
      grad_norm     the global L2 norm of the gradients before clipping
      param_norm    the global L2 norm of the trainable parameters (steady growth: instability building)
      adam_v_norm   the global L2 norm of Adam's second moment `exp_avg_sq` (a jump: beta2 too slow for
                    the data); read from the optimizer's state, so it costs no copy. We log it rather
                    than the update/weight ratio, which needs a copy of every weight before each step:
                    use diagnostics/update_ratio.py for per-layer ratios.
      lr            the first param group's learning rate (or the lr= you pass)
      tokens_per_s  tokens since the last logged step, summed over ranks, over the wall time between
                    the two logged steps (only when you pass tokens=)
      <name>        every scalar you pass in scalars=, averaged over ranks (per-dataset losses as
                    "loss/<name>": spikes.py treats them as the losses of a data mix)

    In your loop: call log() on every rank at every step, after optimizer.step() and before
    zero_grad() (the gradients are still there), with the unscaled loss:

      from monitor import TrainingMonitor
      with TrainingMonitor("train_log.jsonl", model, optimizer, every=10) as mon:
          for step, (x, y) in enumerate(loader):
              loss = loss_fn(model(x), y)
              loss.backward()
              norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # returns the pre-clip norm
              optimizer.step()
              mon.log(step, loss, grad_norm=norm, tokens=x.numel())
              optimizer.zero_grad(set_to_none=True)

    Pass grad_norm= whenever something clipped the gradients in place (clip_grad_norm_'s return
    value, FSDP's clip_grad_norm_, SpikeGuard.grad_norm): the monitor would otherwise measure the
    clipped gradients. Without grad_norm= it measures the gradients it finds.

    Cost: on a step it does not log, log() adds the tokens and returns: no kernel, no host sync,
    no collective. On a logged step it computes the norms with fused foreach kernels, packs every
    value into one small float64 tensor, all-reduces it once (when torch.distributed is
    initialized) and copies it to the host once: the step's only CPU-GPU sync point. Rank 0 alone
    opens and writes the file, one flushed line per logged step. The norms read every parameter,
    gradient and Adam moment once, so their cost grows with the model. Measured with
    benchmarks/monitor_overhead.py (a 0.33M-parameter transformer-style MLP, 36 ms CPU steps, one
    thread, AMD EPYC, torch 2.13 CPU, 2026-11-22): log() takes 0.98 ms of CPU per logged step,
    2.7% of a step at every=1 and 0.3% at every=10; writing the same numbers to TensorBoard
    with SummaryWriter.add_scalar, each fetched with .item(), took 1.8 ms (5.0%).

    Under torch.distributed (build the monitor after init_process_group): with DDP (replicated
    gradients, sharded=False) the norms are those of the local replica, combined as the root mean
    square over ranks, which is the same number when the replicas agree and shows a rank-local
    inf when they do not. With sharded gradients and parameters (FSDP, ZeRO: sharded=True) each
    rank holds a slice: the squared norms are summed over ranks (DTensors are read through their
    local shard). Every rank must call log() at the same steps, or the all-reduce waits forever.
    Build it on every rank: rank 0 opens the log and tells the others, so a log it refuses is
    refused (the same error, "rank 0: ...") on every rank.

    Events: TrainingMonitor.event(step, kind, **fields) writes {"step", "event", ...} lines
    (SpikeGuard writes its skips there). spikes.py ignores them: they have no loss.

    The log never replaces a file by surprise: a path that holds a non-empty file is refused
    (FileExistsError) unless you pass append=True, when you resume a run (the steps going backwards
    mark the resume for spikes.py), or overwrite=True. A folder, a device or a FIFO is refused
    (ValueError). Scalars named like a column the monitor writes (step, loss, grad_norm, ...) are
    refused (ValueError), and log() or event() after close() raises RuntimeError.

Command
    python diagnostics/monitor.py                        # demo: a bad batch is planted at step 200
    python diagnostics/monitor.py --healthy --every 10 --out run.jsonl
    python diagnostics/spikes.py run.jsonl               # the log, read back

Output
    $ python diagnostics/monitor.py --out /tmp/run.jsonl
    trained the demo MLP for 300 steps (a bad batch planted at step 200); TrainingMonitor(every=1) wrote 300 records to /tmp/run.jsonl
    ...
    around step 200:
             step        loss   grad_norm  param_norm adam_v_norm          lr    accuracy
              180      0.1177      0.4973       13.87    0.001148       0.003      0.9609
              197        0.12      0.4853       14.04    0.001286       0.003      0.9648
              198      0.1275      0.5609       14.04    0.001292       0.003      0.9492
              199      0.1212      0.5625       14.05    0.001299       0.003      0.9648
              200       6.804       64.14       14.06      0.2054       0.003      0.9258
              201      0.1726       0.952       14.07      0.2052       0.003      0.9219
              202      0.1817       1.019       14.08       0.205       0.003      0.9297
              203      0.2381       1.155       14.09      0.2048       0.003      0.9023
              220      0.4814       1.232       14.23      0.2034       0.003      0.8477
              240      0.3264      0.8277       14.22      0.1998       0.003      0.8594
              260       0.159      0.5413       14.22      0.1961       0.003      0.9492
              280      0.1735       0.455       14.25      0.1923       0.003      0.9219
    read back by spikes.py (the same as `python diagnostics/spikes.py /tmp/run.jsonl`):
    run.jsonl (jsonl): 300 values of 'loss', steps 0..299; grad norm: grad_norm; dataset series: none
    spikes: 1 (1 slow_recovery)
       peak step  type            baseline      peak  x base  recovery grad lead
             200  slow_recovery     0.1461     6.804   46.57        50         0
    events: none
    nan_step: none
    $ python diagnostics/monitor.py --healthy --out /tmp/healthy.jsonl
    ...
    read back by spikes.py (the same as `python diagnostics/spikes.py /tmp/healthy.jsonl`):
    healthy.jsonl (jsonl): 300 values of 'loss', steps 0..299; grad norm: grad_norm; dataset series: none
    spikes: 0
    events: none
    nan_step: none

How to read it
    The table shows the log around the planted batch. The loss (6.8) and the pre-clip grad norm
    (64, against about 0.5) jump on the bad batch itself, step 200; the loss then climbs again
    for tens of steps (0.48 at step 220) while Adam's v norm, up about 160-fold in one step, decays
    slowly: the momentum keeps pushing in the direction the bad batch gave it, and a normal
    gradient is then small against the inflated v. spikes.py reads the same file: one spike
    starting at step 200, a slow recovery (back in the noise band after 50 steps), grad-norm
    lead 0 (the grad norm jumped on the same step). With --healthy it finds no spike. A column
    missing from the log was not available: grad_norm and param_norm without a model,
    adam_v_norm with an optimizer that keeps no exp_avg_sq, tokens_per_s without tokens=.

Next step
    Read the log with `python diagnostics/spikes.py train_log.jsonl --plot spikes.png` and follow
    PLAYBOOK.md#loss-spikes; the signals and their sources are in refs/stability.md (Detect). To
    act inside the loop instead of after the fact, put diagnostics/spike_guard.py before
    optimizer.step(): it skips an outlier step on every rank at once.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.distributed as dist

from ml_debug_contract import ArgumentParser, OutputRefused, output_file


def _local(tensor):
    """The part of a (possibly DTensor) tensor this rank holds."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _scalar(x, device, dtype):
    """A tensor or a number as a 0-d tensor of `dtype` on `device`, detached; no host sync."""
    if torch.is_tensor(x):
        return x.detach().reshape(()).to(device, dtype)
    return torch.tensor(x, dtype=dtype, device=device)


COLUMNS = ("step", "loss", "grad_norm", "param_norm", "adam_v_norm", "lr", "tokens_per_s", "event")  # the monitor's own


def _open_log(path, append, overwrite):
    """The log file opened for writing; refuses a folder, a device, a FIFO, and a non-empty file unless told."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return open(path, "x", encoding="utf-8")  # "x": created here, never a file that appeared meanwhile
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a folder, a device or a FIFO); give the log a file path")
    if info.st_size and not (append or overwrite):
        raise FileExistsError(f"{path} exists and is not empty; pass append=True to continue its log (a resume) "
                              "or overwrite=True to replace it")
    # "a" keeps an earlier run's lines: steps that go backwards then mark the resume for spikes.py.
    return open(path, "a" if append else "w", encoding="utf-8")


class TrainingMonitor:
    """Writes the per-step JSONL log spikes.py reads; see the module docstring for the columns."""

    def __init__(self, path, model=None, optimizer=None, every=1, sharded=False, append=False, overwrite=False):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.path, self.model, self.optimizer = Path(path), model, optimizer
        self.every, self.sharded = every, sharded
        distributed = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size() if distributed else 1
        self.rank = dist.get_rank() if distributed else 0
        self._file, refusal = None, None
        if self.rank == 0:  # rank 0 alone writes
            try:
                self._file = _open_log(self.path, append, overwrite)
            except (OSError, ValueError) as error:
                refusal = error
        if self.world > 1:  # every rank learns rank 0's answer: refused there alone, the others would wait in a collective
            verdict = [None if refusal is None else (type(refusal), str(refusal))]
            dist.broadcast_object_list(verdict, src=0)
            if verdict[0] is not None and refusal is None:
                refusal = verdict[0][0](f"rank 0: {verdict[0][1]}")
        if refusal is not None:
            raise refusal
        self._closed = False
        self._tokens = 0
        self._since = time.perf_counter()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Flush and close the log (rank 0); safe to call twice."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, record):
        if self._closed:
            raise RuntimeError(f"the TrainingMonitor of {self.path} is closed: nothing more can be logged to it")
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")  # NaN/inf as NaN/Infinity: json.loads reads them back
            self._file.flush()

    def event(self, step, kind, **fields):
        """One event line {"step", "event": kind, **fields}, written at once (rank 0)."""
        self._write({"step": step, "event": kind, **fields})

    def _squared_norms(self, grad_norm, device, dtype):
        """{name: (squared norm on this rank, whether ranks hold slices to sum)}; kernels only, no host sync.

        Replicated values (summed=False) are combined as a mean of squares over ranks: the same value
        when the ranks agree. A grad_norm passed in is global already, so it is combined that way too.
        """
        params = [p for p in self.model.parameters() if p.requires_grad] if self.model is not None else []
        moments = []
        if self.optimizer is not None:
            moments = [s["exp_avg_sq"] for s in self.optimizer.state.values() if "exp_avg_sq" in s]
        norms = {}
        if grad_norm is not None:
            norms["grad_norm"] = (_scalar(grad_norm, device, dtype) ** 2, False)
        for name, tensors in (("grad_norm", [p.grad for p in params if p.grad is not None]),
                              ("param_norm", [p.detach() for p in params]), ("adam_v_norm", moments)):
            if tensors and name not in norms:
                tensors = [_local(t) for t in tensors] if self.sharded else tensors
                norms[name] = (_scalar(torch.nn.utils.get_total_norm(tensors), device, dtype) ** 2, self.sharded)
        return norms

    def log(self, step, loss, grad_norm=None, lr=None, tokens=None, scalars=None):
        """Log this step if step % every == 0; returns the record (on every rank) or None.

        loss, grad_norm, tokens and the scalars may be tensors (on any device) or numbers.
        grad_norm is taken as the global norm, already; tokens counts this rank's tokens of this step.
        """
        if self._closed:
            raise RuntimeError(f"the TrainingMonitor of {self.path} is closed: nothing more can be logged to it")  # before the all_reduce
        if tokens is not None:
            self._tokens = self._tokens + tokens  # a tensor stays on its device: no sync
        if step % self.every:
            return None
        clash = sorted(set(COLUMNS) & set(scalars or ()))
        if clash:
            raise ValueError(f"scalars may not be named {', '.join(clash)}: the monitor writes those columns itself")
        device = loss.device if torch.is_tensor(loss) else torch.device("cpu")
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        means = {"loss": loss, **(scalars or {})}  # averaged over ranks
        norms = self._squared_norms(grad_norm, device, dtype)  # name -> (squared norm, summed over ranks?)
        packed = torch.stack([*(_scalar(x, device, dtype) for x in means.values()),
                              *(square for square, _ in norms.values()), _scalar(self._tokens, device, dtype)])
        if self.world > 1:
            dist.all_reduce(packed)  # one collective for every value of this step (SUM)
        values = packed.tolist()  # CPU-GPU sync point: the only one, on logged steps only
        now = time.perf_counter()
        mean_values, norm_values, token_count = values[:len(means)], values[len(means):-1], values[-1]
        record = {"step": step, "loss": mean_values[0] / self.world}
        for (name, (_, summed)), square in zip(norms.items(), norm_values):
            record[name] = math.sqrt(square if summed else square / self.world)  # inf/NaN stay inf/NaN
        if lr is None and self.optimizer is not None:
            lr = self.optimizer.param_groups[0]["lr"]
        if lr is not None:
            record["lr"] = float(lr)
        if tokens is not None:
            record["tokens_per_s"] = token_count / max(now - self._since, 1e-9)
        record.update((name, x / self.world) for name, x in zip(list(means)[1:], mean_values[1:]))
        self._tokens, self._since = 0, now
        self._write(record)
        return record


# --- the demo ----------------------------------------------------------------------------------

DEMO_STEPS = 300
BAD_STEP = 200  # late enough for spikes.py's baseline (it needs 32 values) and a visible aftermath
BATCH, FEATURES, CLASSES, WIDTH = 256, 16, 8, 64


@contextlib.contextmanager
def _one_thread():
    """A model this small gains nothing from more threads, and loses much on a shared CPU; restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def demo_run(path, broken=True, every=1, steps=DEMO_STEPS, seed=0, overwrite=False):
    """Train a small MLP classifier with Adam and log it with a TrainingMonitor; returns the records written.

    The task: label each point by the class a fixed random linear teacher scores highest. Each
    sample counts as one token. The caller's RNG state is left as it was.
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
        records = []
        with TrainingMonitor(path, model, optimizer, every=every, overwrite=overwrite) as mon:
            for step in range(steps):
                x = torch.randn(BATCH, FEATURES, generator=data)
                y = (x @ teacher).argmax(dim=1)
                if broken and step == BAD_STEP:
                    x = x * 100  # BUG: one batch arrives unnormalised (raw values 100x the usual scale)
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                loss.backward()
                optimizer.step()
                accuracy = (logits.argmax(dim=1) == y).float().mean()
                record = mon.log(step, loss, tokens=len(x), scalars={"accuracy": accuracy})
                if record is not None:
                    records.append(record)
                optimizer.zero_grad(set_to_none=True)
    return records


def _cell(value):
    return "-" if value is None else f"{value:.4g}"


def _table(records, around):
    """The records next to step `around`, and one every 20 steps from 20 steps before it."""
    columns = ["step", "loss", "grad_norm", "param_norm", "adam_v_norm", "lr", "accuracy"]
    lines = ["  " + " ".join(f"{c:>11}" for c in columns)]
    for record in records:
        step = record["step"]
        if abs(step - around) <= 3 or (step >= around - 20 and step % 20 == 0):
            lines.append("  " + " ".join(f"{_cell(record.get(c)):>11}" for c in columns))
    return "\n".join(lines)


def _spikes_summary(path):
    """spikes.py's summary of the log when spikes.py sits beside this file, else the command to run."""
    beside = Path(__file__).with_name("spikes.py")
    command = f"python {os.path.relpath(beside) if beside.exists() else 'diagnostics/spikes.py'} {path}"
    if not beside.exists():
        return f"read it with: {command}"
    spec = importlib.util.spec_from_file_location("spikes", beside)
    spikes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spikes)
    return f"read back by spikes.py (the same as `{command}`):\n{spikes.summary(spikes.analyze(path))}"


def main(argv=None):
    parser = ArgumentParser(prog="monitor.py", formatter_class=argparse.RawDescriptionHelpFormatter,
                            description=__doc__.split("\n\n", 1)[0],
                            epilog="Runs the embedded demo: a small MLP trained on CPU for 300 steps with a TrainingMonitor, "
                                   "a bad batch planted at step 200 (none with --healthy); then reads the log back with "
                                   "spikes.py. Exit 0 when the demo ran, 2 on bad usage.")
    parser.add_argument("--healthy", action="store_true", help="run the demo without the planted bad batch")
    parser.add_argument("--every", type=int, default=1, help="log every N steps (default 1)")
    parser.add_argument("--out", help="where to write the JSONL log (default: a new monitor_demo_*.jsonl file in the "
                        "temp dir); an existing file is refused without --force")
    parser.add_argument("--force", action="store_true", help="replace the --out file if it exists")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be at least 1, got {args.every}")
    try:
        if args.out:
            try:
                path = Path(output_file(args.out, args.force, option="--out"))
            except OutputRefused as exc:
                parser.exit(2, f"monitor.py: error: {exc}\n")
        else:  # a new, empty file of our own: nothing of the user's is replaced
            handle, name = tempfile.mkstemp(prefix="monitor_demo_", suffix=".jsonl")
            os.close(handle)
            path = Path(name)
        try:
            records = demo_run(path, broken=not args.healthy, every=args.every, overwrite=args.force)
        except FileExistsError:
            parser.exit(2, f"monitor.py: error: {path} exists and is not empty; pass --force to replace it, or "
                           "another --out\n")
        except ValueError as exc:
            parser.exit(2, f"monitor.py: error: {exc}\n")
        except OSError as exc:
            parser.exit(2, f"monitor.py: error: cannot write {path}: {exc.strerror or exc}\n")
        what = "no bad batch" if args.healthy else f"a bad batch planted at step {BAD_STEP}"
        last = json.dumps({k: v if k == 'step' else float(f'{v:.4g}') for k, v in records[-1].items()})
        sys.stdout.write(f"trained the demo MLP for {DEMO_STEPS} steps ({what}); TrainingMonitor(every={args.every}) "
                         f"wrote {len(records)} records to {path}\nlast record: {last}\n"
                         f"around step {BAD_STEP}:\n{_table(records, BAD_STEP)}\n{_spikes_summary(path)}\n")
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130
    except OSError as exc:  # `monitor.py | head` closed the pipe, or stdout is a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return 0 if isinstance(exc, BrokenPipeError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
