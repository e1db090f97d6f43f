"""What does NanWatch cost per training step, eager and compiled, next to the monitor, the guard and its peers?
(Not run in CI.)

    python benchmarks/nanwatch_overhead.py [--device cpu|cuda] [--compile] [--size tiny|wide|gpt2]
        [--dtype fp32|bf16] [--steps 20] [--warmup 3] [--rounds 5] [--threads 1] [--variants plain,...]

One process, a GPT (Hugging Face GPT2LMHeadModel built from a config, sdpa attention), next-token loss
on random tokens, AdamW (fused on cuda), gradients clipped at 1.0 in every variant. Defaults: on cpu the
tiny GPT (2 layers, width 128, 0.44M parameters, batch 16 x 64) in fp32; on cuda GPT-2 small (124M,
batch 16 x 1024) under bf16 autocast. `--compile` compiles the model of every variant (inductor on
cuda, aot_eager on cpu: no C compiler needed). Each variant has its own copy of the model, trained on
the same batches:

  plain                    forward, backward, clip_grad_norm_, optimizer.step(), zero_grad()
  nanwatch                 + watch.check(step, loss, replay=...) after backward: the loss and the
                           gradients' infinity norm, read every step (one host sync)
  nanwatch every=10        + the same, read every 10th step
  nanwatch grad_norm=clip  + the same, with the norm clip_grad_norm_ returned (no second pass over the gradients)
  monitor                  + TrainingMonitor(path, model, optimizer).log() every step
  guard                    + SpikeGuard(model).should_skip() every step
  debug_underflow          + transformers' DebugUnderflowOverflow(model): forward hooks on every module
  detect_anomaly           the forward and backward inside torch.autograd.detect_anomaly()

Every variant first runs --warmup untimed steps (allocation, the optimizer state, compilation). Then
the rounds: each variant runs the same --steps steps, the variants interleaved and each round starting
with the next one, so that a change in the machine's load hits all alike. Time is wall time, the
device's queue drained before and after, on cuda; this process's CPU time on cpu (one torch thread:
on a machine shared with other jobs, wall time measures the neighbours). Printed: each round's ms/step per variant, then the median
over rounds, the ratio to plain (the median of each round's ratio to that round's plain run), and the
time inside the tool's own call per step (check(), log(), should_skip(); on cuda that includes waiting
for the device at a host read): the direct measure, where whole steps differ by less than the noise.
Last, a planted inf (the last block's first MLP weight set to inf for step 3): what each NanWatch mode
reports, and any report on a healthy step (a false alarm).
"""
import argparse
import contextlib
import importlib.util
import io
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

from monitor import TrainingMonitor  # noqa: E402  (needs the path above)
from nan_watch import NanWatch  # noqa: E402
from spike_guard import SpikeGuard  # noqa: E402

# (vocab, width, layers, heads, sequence, batch). tiny: as little compute per activation as a GPT can have; wide: GPT-2
# small's width and heads, 2 of its 12 layers; gpt2: GPT-2 small (124M) at batch 16 x 1024, the GPU setting.
SIZES = {"tiny": (256, 128, 2, 4, 64, 16), "wide": (8192, 768, 2, 12, 128, 4), "gpt2": (50257, 768, 12, 12, 1024, 16)}
VARIANTS = ["plain", "nanwatch", "nanwatch every=10", "nanwatch grad_norm=clip", "monitor", "guard",
            "debug_underflow", "detect_anomaly"]
CLIP = 1.0  # every variant clips at 1.0, as GPT-2 recipes do: "nanwatch grad_norm=clip" reuses that norm


def machine(device):
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    card = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{cpu}{card}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, torch {torch.__version__}; "
            f"load average at start {load}")


def make_model(size, device):
    import transformers
    vocab, dim, layers, heads, seq, _ = SIZES[size]
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=dim, n_layer=layers, n_head=heads,
                                     attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).to(device).train()


class Run:
    """One variant: its model (compiled or not), optimizer and tool, trained step by step on the same batches."""

    def __init__(self, variant, args, device, log_dir):
        self.variant, self.device, self.dtype = variant, device, args.dtype
        self.clock = time.perf_counter if device.type == "cuda" else time.process_time
        self.model = make_model(args.size, device)
        self.run = torch.compile(self.model, backend=args.backend) if args.compile else self.model
        fused = {"fused": True} if device.type == "cuda" else {}
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, **fused)
        self.watch = self.monitor = self.guard = None
        if variant.startswith("nanwatch"):
            self.watch = NanWatch(self.run, every=10 if variant == "nanwatch every=10" else 1)
        if variant == "monitor":
            self.monitor = TrainingMonitor(os.path.join(log_dir, "monitor.jsonl"), self.model, self.opt)
        if variant == "guard":
            self.guard = SpikeGuard(self.model)
        if variant == "debug_underflow":
            from transformers.debug_utils import DebugUnderflowOverflow
            DebugUnderflowOverflow(self.model)
        self.context = torch.autograd.detect_anomaly if variant == "detect_anomaly" else contextlib.nullcontext
        self.reports, self.inside = {}, 0.0  # inside: seconds in the tool's own call (check, log, should_skip)

    def loss(self, ids):
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.dtype == "bf16" else contextlib.nullcontext()
        with autocast:
            return self.run(input_ids=ids, labels=ids).loss

    def step(self, number, ids):
        with self.context(), contextlib.redirect_stdout(io.StringIO()):  # DebugUnderflowOverflow prints on a detection
            loss = self.loss(ids)
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        report, skip = None, False
        start = self.clock()
        if self.watch is not None:
            norm_given = norm if self.variant == "nanwatch grad_norm=clip" else None
            report = self.watch.check(number, loss, replay=lambda: self.loss(ids), grad_norm=norm_given)
        if self.guard is not None:
            skip = self.guard.should_skip(number, loss, grad_norm=norm)
        if self.monitor is not None:
            self.monitor.log(number, loss, grad_norm=norm)
        self.inside += self.clock() - start
        if report is not None:
            self.reports[report["step"]] = {**report, "read_at": number}
        if report is None and not skip:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def timed(self, batches, first):
        """Seconds for these steps, numbered from `first`: wall time on cuda (the queue drained before and after),
        this process's CPU time on cpu (on a machine shared with other jobs, wall time measures the neighbours)."""
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        start, inside = self.clock(), self.inside
        for k, ids in enumerate(batches):
            self.step(first + k, ids)
        if cuda:
            torch.cuda.synchronize()
        return self.clock() - start, self.inside - inside


def plant(args, device):
    """A planted inf: the first MLP weight of the last block set to inf for step 3 only. What each NanWatch mode says."""
    results = {}
    for variant in ("nanwatch", "nanwatch every=10"):
        run = Run(variant, args, device, tempfile.mkdtemp())
        weight = run.model.transformer.h[-1].mlp.c_fc.weight
        for number, ids in enumerate(batches(args, 10, device, seed=2)):
            if number == 3:
                saved = weight[0, 0].item()
                with torch.no_grad():
                    weight[0, 0] = float("inf")  # BUG: planted
            run.step(number, ids)
            if number == 3:
                with torch.no_grad():
                    weight[0, 0] = saved
        results[variant] = {step: (r["module"], r["phase"], r["source"], f"read at step {r['read_at']}")
                            for step, r in run.reports.items()}
    return results


def batches(args, steps, device, seed=1):
    vocab, _, _, _, seq, batch = SIZES[args.size]
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(vocab, (batch, seq), generator=gen).to(device) for _ in range(steps)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda (cuda if there)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model in every variant")
    parser.add_argument("--backend", default=None, help="torch.compile's backend (inductor on cuda, aot_eager on cpu)")
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="the GPT (tiny on cpu, gpt2 on cuda)")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default=None, help="bf16 autocast or fp32 (bf16 on cuda)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round (20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per variant first: allocation, compilation (3)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on cpu (1)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.backend = args.backend or ("inductor" if cuda else "aot_eager")
    args.size = args.size or ("gpt2" if cuda else "tiny")
    args.dtype = args.dtype or ("bf16" if cuda else "fp32")
    variants = [v for v in args.variants.split(",") if v]
    if "plain" not in variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants: plain and some of {', '.join(VARIANTS)}")
    if "debug_underflow" in variants and importlib.util.find_spec("transformers.debug_utils") is None:
        variants.remove("debug_underflow")
    if not cuda:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine(device)}")
    vocab, dim, layers, heads, seq, batch = SIZES[args.size]
    log_dir = tempfile.mkdtemp()
    runs = {v: Run(v, args, device, log_dir) for v in variants}
    params = sum(p.numel() for p in runs["plain"].model.parameters())
    print(f"model: GPT2LMHeadModel ({args.size}: {layers} layers, width {dim}, {heads} heads, vocab {vocab}), "
          f"{params / 1e6:.2f}M parameters, batch {batch} x {seq} tokens, {args.dtype}, "
          f"{'torch.compile backend ' + args.backend if args.compile else 'eager'}, {args.steps} steps x {args.rounds} "
          f"rounds per variant after {args.warmup} warm-up steps, {'wall' if cuda else 'CPU'} time")
    data = batches(args, args.steps, device)
    for variant in list(variants):
        try:
            runs[variant].timed(data[:args.warmup], -args.warmup)  # compilation and allocation, not timed
        except Exception as exc:  # a peer that cannot run this way (e.g. under torch.compile): said, and left out
            print(f"{variant}: left out, its warm-up raised {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            variants.remove(variant)
    times, inside = {v: [] for v in variants}, {v: [] for v in variants}
    for number in range(args.rounds):
        turn = number % len(variants)  # each round starts with the next variant: none always runs first
        for variant in variants[turn:] + variants[:turn]:
            total, spent = runs[variant].timed(data, number * args.steps)
            times[variant].append(1000 * total / args.steps)
            inside[variant].append(1000 * spent / args.steps)
        print(f"round {number}: " + ", ".join(f"{v} {times[v][-1]:.1f}" for v in variants) + " ms/step")
    print(f"{'variant':<24} {'ms/step':>8} {'min..max':>16} {'x plain':>8} {'min..max':>11} {'in the call':>12}")
    for variant in variants:
        ratios = [t / p for t, p in zip(times[variant], times["plain"])]
        print(f"{variant:<24} {statistics.median(times[variant]):8.1f} {min(times[variant]):7.1f}..{max(times[variant]):<7.1f} "
              f"{statistics.median(ratios):8.3f} {min(ratios):5.2f}..{max(ratios):<5.2f} "
              f"{statistics.median(inside[variant]):9.2f} ms")
    false_alarms = {v: sorted(r.reports) for v, r in runs.items() if r.reports}
    print(f"reports on the healthy steps: {false_alarms or 'none'}")
    print(f"planted inf at step 3 in {'transformer.h.%d.mlp.c_fc' % (layers - 1)}: {plant(args, device)}")


if __name__ == "__main__":
    main()
