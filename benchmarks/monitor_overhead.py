"""What do TrainingMonitor and SpikeGuard cost per training step, next to their peers? (Not run in CI.)

    python benchmarks/monitor_overhead.py [--steps 200] [--rounds 5] [--threads 1]

One process, one small transformer-style model (token embedding, two pre-norm residual MLP blocks,
LayerNorm, output head: 0.3M parameters), next-token cross-entropy on random tokens, AdamW, batch
16 x 64 tokens, on CPU. Every variant trains a fresh copy of the same model on the same batches:

  plain               forward, backward, optimizer.step(), zero_grad()
  monitor every=1     + TrainingMonitor.log() at every step (loss, grad, param, Adam-v norms, lr, tokens/s)
  monitor every=10    + the same, logged every 10th step
  guard               + SpikeGuard.should_skip() before every step
  guard + clip        + SpikeGuard(clip_z=2.5): ZClip-style adaptive clipping as well
  tensorboard         + the monitor's numbers computed by hand (.item() on each) and written with
                        torch.utils.tensorboard.SummaryWriter.add_scalar at every step
  zclip               + ZClip(alpha=0.97, z_thresh=2.5).step(model), the `zclip` package from PyPI,
                        when installed (pip install zclip; it is in no requirements file)

The variants run interleaved, round after round, so that a change in the machine's load hits all of
them. Time is this process's CPU time (one torch thread), not wall time: on a machine shared with
other jobs, wall time measures the neighbours. steps/s is the median over rounds of steps per CPU
second, with its spread; its differences are mostly noise at this size. The overhead column is
the direct measure: the median CPU time spent inside the tool's own call per step (log(),
should_skip(), the hand-written tensorboard logging, ZClip.step()), as a share of a plain step.
On a CPU a host sync costs nothing, so these numbers are the compute and Python cost only; on a
GPU the monitor adds one sync per logged step and the guard one per step.

Measured on an x86_64 CPU (2 cores, shared with other jobs; 1 torch thread), Linux, Python 3.11,
torch 2.13.0+cpu, zclip 1.0.0, on 2026-11-22, `--steps 200 --rounds 5`:

    machine: AMD EPYC, 2 cores, 1 torch thread(s), Linux 6.18.44-fc-v669, Python 3.11.7, torch 2.13.0+cpu; load average at start 0.9, 1.0, 1.7
    model: 0.33M parameters, batch 16 x 64 tokens, 200 steps x 5 rounds per variant
    plain step: 36.1 ms of CPU (median of 5 rounds)
    variant             steps/s    min..max  in the tool  overhead
    plain                  27.7  25.6..32.5       0.00 ms      0.0%
    monitor every=1        28.0  25.3..28.8       0.98 ms      2.7%
    monitor every=10       28.4  25.9..30.2       0.11 ms      0.3%
    guard                  28.3  25.0..31.4       0.65 ms      1.8%
    guard + clip           26.0  24.1..29.8       0.68 ms      1.9%
    tensorboard            25.5  23.7..26.6       1.80 ms      5.0%
    zclip                  25.9  24.5..29.9       0.72 ms      2.0%

Nothing was skipped or clipped in these runs (the gradient norm stays near 0.35-0.42), so every
variant did the same training work. ZClip.step() also clips to its default max_grad_norm of 1.0
at every step, which never bit here.
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

import monitor  # noqa: E402  (needs the path above)
import spike_guard  # noqa: E402

VOCAB, DIM, SEQ, BATCH, BLOCKS = 256, 128, 64, 16, 2


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, torch {torch.__version__}; "
            f"load average at start {load}")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, DIM), *(Block() for _ in range(BLOCKS)),
                               torch.nn.LayerNorm(DIM), torch.nn.Linear(DIM, VOCAB))


def batches(steps):
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (steps, BATCH, SEQ + 1), generator=gen)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def train(data, log_dir, variant):
    """(steps per CPU second, CPU seconds per step spent in the tool's own call) of one variant over `data`."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hook, closer = None, None
    if variant.startswith("monitor"):
        mon = monitor.TrainingMonitor(Path(log_dir) / "log.jsonl", model, optimizer, every=int(variant.split("=")[1]),
                                      overwrite=True)  # our own temp dir: each variant and round replaces the last log
        closer = mon.close

        def hook(step, loss, x):
            mon.log(step, loss, tokens=x.numel())
    elif variant.startswith("guard"):
        guard = spike_guard.SpikeGuard(model, clip_z=2.5 if "clip" in variant else None)

        def hook(step, loss, x):
            return guard.should_skip(step, loss)
    elif variant == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir)
        closer = writer.close
        last = [time.perf_counter()]

        def hook(step, loss, x):
            params = list(model.parameters())
            now = time.perf_counter()
            writer.add_scalar("loss", loss.item(), step)
            writer.add_scalar("grad_norm", torch.nn.utils.get_total_norm([p.grad for p in params]).item(), step)
            writer.add_scalar("param_norm", torch.nn.utils.get_total_norm([p.detach() for p in params]).item(), step)
            moments = [s["exp_avg_sq"] for s in optimizer.state.values()]
            if moments:
                writer.add_scalar("adam_v_norm", torch.nn.utils.get_total_norm(moments).item(), step)
            writer.add_scalar("lr", optimizer.param_groups[0]["lr"], step)
            writer.add_scalar("tokens_per_s", x.numel() / (now - last[0]), step)
            last[0] = now
    elif variant == "zclip":
        from zclip import ZClip
        zclip = ZClip(alpha=0.97, z_thresh=2.5)

        def hook(step, loss, x):
            zclip.step(model)
    guard_first = variant.startswith("guard") or variant == "zclip"
    in_hook = 0.0

    def timed(step, loss, x):
        nonlocal in_hook
        before = time.process_time()
        verdict = hook(step, loss, x)
        in_hook += time.process_time() - before
        return verdict

    start = time.process_time()
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        if guard_first and timed(step, loss, x):
            optimizer.zero_grad(set_to_none=True)
            continue
        optimizer.step()
        if hook is not None and not guard_first:
            timed(step, loss, x)
        optimizer.zero_grad(set_to_none=True)
    elapsed = time.process_time() - start
    if closer is not None:
        closer()
    return len(data) / elapsed, in_hook / len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps per variant and round (200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = ["plain", "monitor every=1", "monitor every=10", "guard", "guard + clip", "tensorboard", "zclip"]
    try:
        import zclip  # noqa: F401
    except ImportError:
        variants.remove("zclip")
        print("zclip is not installed (pip install zclip): its row is left out")
    print(f"machine: {machine()}")
    data = batches(args.steps)
    parameters = sum(p.numel() for p in make_model().parameters())
    print(f"model: {parameters / 1e6:.2f}M parameters, batch {BATCH} x {SEQ} tokens, {args.steps} steps x "
          f"{args.rounds} rounds per variant")
    rates = {v: [] for v in variants}
    costs = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="monitor-bench-") as log_dir:
        train(data[:20], log_dir, "plain")  # warm up the allocator and the kernels
        for _ in range(args.rounds):
            for variant in variants:
                rate, cost = train(data, log_dir, variant)
                rates[variant].append(rate)
                costs[variant].append(cost)
    step_ms = 1000 / statistics.median(rates["plain"])
    print(f"plain step: {step_ms:.1f} ms of CPU (median of {args.rounds} rounds)")
    print(f"{'variant':<18} {'steps/s':>8} {'min..max':>11} {'in the tool':>12} {'overhead':>9}")
    for variant in variants:
        spent = 1000 * statistics.median(costs[variant])
        print(f"{variant:<18} {statistics.median(rates[variant]):8.1f} "
              f"{min(rates[variant]):5.1f}..{max(rates[variant]):<5.1f} {spent:9.2f} ms {100 * spent / step_ms:8.1f}%")

if __name__ == "__main__":
    main()
