"""What does NanWatch cost per training step, next to its peers? (Not run in CI.)

    python benchmarks/nanwatch_overhead.py [--size tiny|wide] [--steps 30] [--rounds 5] [--threads 1]

One process, one small GPT (Hugging Face GPT2LMHeadModel built from a config, eager attention), next-token
loss on random tokens, AdamW, on CPU. `--size tiny` (the default): 2 layers, width 128, 4 heads, 0.44M
parameters, batch 16 x 64 tokens, the worst case for a cost per tensor (as little compute per activation
as a GPT has); `--size wide`: GPT-2 small's width and heads (768, 12), 2 layers, vocab 8192, 20.6M
parameters, batch 4 x 128. Every variant trains a fresh copy of the same model on the same batches:

  plain             forward, backward, optimizer.step(), zero_grad()
  nanwatch          + NanWatch(model) hooks on every module (forward and backward) and
                    watch.check(step) after backward, every step (the one host read per step)
  nanwatch every=10 + the same, the verdict read every 10th step
  debug_underflow   + transformers' DebugUnderflowOverflow(model): forward hooks on every module
  detect_anomaly    the step inside torch.autograd.detect_anomaly()

The variants run interleaved, round after round, so that a change in the machine's load hits all of
them alike; each round starts with the next variant, and each run's first step, which allocates the
optimizer state, is not timed (before, plain always ran first in a round, and every run's first step was
timed). Time is this process's CPU time (one torch thread), not wall time: on a machine shared
with other jobs, wall time measures the neighbours. Reported: the median over rounds of CPU ms per
step, and the ratio to plain: the median over rounds of each round's ratio to that round's plain
run (neighbours in time share the machine's load; the spread of those ratios is printed too).
Differences of whole steps are noisy on a shared machine; the direct measure is the CPU time spent
inside NanWatch itself (its hooks, with the kernels they launch, and check()), metered around each
call, as a share of a plain step. The meter's own cost (two clock reads per hook) is counted in. On a CPU a host read costs no waiting; on a GPU NanWatch reads once
per check (or every N) and DebugUnderflowOverflow syncs several times per module (per tensor,
.item() on a NaN test and an inf test, and the abs min and max formatted into its frame text).

Then each tool meets the masks attention really uses, in a model made for it (a 1-layer
attention with an additive -inf causal mask, passed to a module as an argument; a boolean mask): does
it stay silent on a healthy step?

Measured on an x86_64 CPU (2 cores, shared with other jobs: load average 2 to 4 during the run;
1 torch thread), Linux, Python 3.11, torch 2.13.0+cpu, transformers 5.23.0, on 2026-11-23,
`--steps 20 --rounds 7`:

    machine: AMD EPYC, 2 cores, 1 torch thread(s), Linux 6.18.44-fc-v657, Python 3.11.7, torch 2.13.0+cpu; load average at start 2.4, 4.2, 6.1
    model: GPT2LMHeadModel, 0.44M parameters, batch 16 x 64 tokens, 20 steps x 7 rounds per variant
    variant             ms/step       min..max  x plain    min..max  in NanWatch
    plain                 106.0   94.5..115.4      1.00  1.00..1.00
    nanwatch              119.7  113.4..129.6      1.15  1.04..1.27      10.69 ms
    nanwatch every=10     121.5  107.5..131.2      1.17  1.05..1.29      11.08 ms
    debug_underflow       192.4  167.4..201.4      1.75  1.65..1.94
    detect_anomaly        212.2  179.6..233.5      1.99  1.71..2.40
    nanwatch: 10.69 ms of CPU per step inside its hooks and check(), 10.6% of a plain step (106.0 ms), median of 7 rounds
    nanwatch every=10: 11.08 ms of CPU per step inside its hooks and check(), 9.9% of a plain step (106.0 ms), median of 7 rounds
    on masks (one healthy forward and backward):
      nanwatch         additive -inf: silent; boolean: silent
      debug_underflow  additive -inf: raised ValueError: DebugUnderflowOverflow: inf/nan detected, aborting as there ; boolean: raised NotImplementedError: "abs_cpu" not implemented for 'Bool'
      detect_anomaly   additive -inf: silent; boolean: silent

NanWatch spent 10.7 ms of CPU per step inside its own hooks and check(), 10.6% of a plain step;
a cProfile run put roughly half of that in the aminmax kernels (one per activation, gradient and
parameter gradient, about 100 a step here) and half in Python (the hooks and register_hook), an
estimate. Whole steps came out 1.15x plain, with per-round ratios from 1.04 to 1.27: at this load
the noise between rounds is as large as the cost measured. Four earlier runs that day (at load
averages 5 to 13, some with earlier versions of NanWatch and of this script) gave whole-step
medians of 1.08x to 1.19x for NanWatch, 1.66x to 1.84x for DebugUnderflowOverflow (forward hooks
alone) and 1.94x to 2.04x for detect_anomaly. This model is narrow: the cost per activation element
is fixed, a step's compute per element grows with the width, so the share shrinks on real models
(then assumed; measured below with `--size wide`).

Run again on 2026-11-25 (rotated order, first step untimed; a helper's benchmarks ran on the other core,
load average 1.2 to 2.5), `--size tiny --steps 15 --rounds 7` and `--size wide --steps 4 --rounds 5`:

    model: GPT2LMHeadModel (tiny: 2 layers, width 128, 4 heads, vocab 256), 0.44M parameters, batch 16 x 64 tokens, 15 steps x 7 rounds per variant
    variant             ms/step       min..max  x plain    min..max  in NanWatch
    plain                  93.0   86.4..99.0       1.00  1.00..1.00
    nanwatch               99.4   85.6..104.9      1.07  0.92..1.14       7.30 ms
    nanwatch every=10     100.4   96.1..115.7      1.06  1.02..1.31       8.65 ms
    debug_underflow       154.0  128.7..159.0      1.59  1.36..1.78
    detect_anomaly        174.5  149.4..216.2      1.84  1.62..2.18
    nanwatch: 7.30 ms of CPU per step inside its hooks and check(), 7.7% of a plain step (93.0 ms), median of 7 rounds

    model: GPT2LMHeadModel (wide: 2 layers, width 768, 12 heads, vocab 8192), 20.57M parameters, batch 4 x 128 tokens, 4 steps x 5 rounds per variant
    variant             ms/step       min..max  x plain    min..max  in NanWatch
    plain                1202.5 1091.4..1266.5     1.00  1.00..1.00
    nanwatch             1130.1 1074.3..1302.0     1.00  0.94..1.04      25.48 ms
    nanwatch every=10    1174.6 1111.0..1224.4     0.98  0.89..1.10      28.65 ms
    debug_underflow      1535.5 1356.3..1731.4     1.21  1.13..1.56
    detect_anomaly       1492.7 1391.4..1566.8     1.27  1.11..1.34
    nanwatch: 25.48 ms of CPU per step inside its hooks and check(), 2.1% of a plain step (1202.5 ms), median of 5 rounds

every=10 came out a little above every=1 inside in each run here (also
with --steps 40 --rounds 3: 8.14 against 7.37 ms). Its work per step is the same (it reads the verdict
less often, which saves host syncs on a GPU and nothing on a CPU); where the gap comes from is not
measured: the first ten steps of each run, which fill blocks of values of their own, are a candidate.
The masks: as above. The share inside NanWatch falls from 7.7% to 2.1% as the width goes from 128 to 768
(measured): the kernels' work per activation is fixed, a step's compute per activation grows with the width.

An earlier run on 2026-11-25, after NanWatch's frames became [abs min, abs max] and its values were
written in place into a block kept across steps, with `--steps 10 --rounds 4` while the test suite ran
beside it on the other core (load average 1.4 to 3): NanWatch 105.5 ms a step against 96.0 plain,
1.09x (0.94 to 1.13 over the rounds), 8.4 ms of CPU inside NanWatch (8.1% of a plain step); every=10
1.09x; DebugUnderflowOverflow 1.54x; detect_anomaly 1.72x; the masks as above.
"""
import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

from nan_watch import NanWatch  # noqa: E402  (needs the path above)

# (vocab, width, layers, heads, sequence, batch). tiny: the worst case for a per-tensor cost, as little compute
# per activation as a GPT can have; wide: GPT-2 small's width and heads (768, 12), 2 of its 12 layers, so that a
# step takes about a second on one CPU thread, not ten.
SIZES = {"tiny": (256, 128, 2, 4, 64, 16), "wide": (8192, 768, 2, 12, 128, 4)}
VOCAB, DIM, LAYERS, HEADS, SEQ, BATCH = SIZES["tiny"]  # set by --size


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


def make_model():
    import transformers
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=DIM, n_layer=LAYERS, n_head=HEADS,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def batches(steps):
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(VOCAB, (BATCH, SEQ), generator=gen) for _ in range(steps)]


class TimedNanWatch(NanWatch):
    """NanWatch with a CPU-time meter around each of its hooks and check(): the time spent inside the tool."""

    spent = 0.0

    def _timed(self, function):
        def timed(*args):
            start = time.process_time()
            try:
                return function(*args)
            finally:
                self.spent += time.process_time() - start
        return timed

    def _on_forward(self, *args):
        return self._timed(super()._on_forward)(*args)

    def _on_grad(self, log, i):
        return self._timed(super()._on_grad(log, i))

    def _on_param_grad(self, module, name):
        return self._timed(super()._on_param_grad(module, name))

    def check(self, step):
        return self._timed(super().check)(step)


def train(data, variant):
    """(CPU seconds for the steps of one variant on a fresh model, CPU seconds inside NanWatch)."""
    from transformers.debug_utils import DebugUnderflowOverflow
    model = make_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    watch = None
    if variant.startswith("nanwatch"):
        watch = TimedNanWatch(model, every=10 if variant == "nanwatch every=10" else 1)
    if variant == "debug_underflow":
        DebugUnderflowOverflow(model)
    context = torch.autograd.detect_anomaly if variant == "detect_anomaly" else contextlib.nullcontext

    def step(number, ids):
        with context():
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        if watch is not None and watch.check(number) is not None:
            raise RuntimeError(f"{variant}: a false alarm at step {number}")
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(-1, data[0])  # not timed: the first step allocates the optimizer state and the activations' memory
    start, spent = time.process_time(), watch.spent if watch is not None else 0.0
    for number, ids in enumerate(data):
        step(number, ids)
    return time.process_time() - start, watch.spent - spent if watch is not None else 0.0


class MaskedAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if mask.dtype == torch.bool:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return ((q @ k.transpose(-1, -2)) / DIM ** 0.5 + mask).softmax(-1) @ v


class MaskedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = MaskedAttention()

    def forward(self, x, mask):
        return self.attn(x, mask)


def masks_verdicts():
    """{tool: {mask kind: "silent" or what it did}} on one healthy forward and backward."""
    from transformers.debug_utils import DebugUnderflowOverflow
    masks = {"additive -inf": torch.full((SEQ, SEQ), float("-inf")).triu(1),
             "boolean": torch.ones(SEQ, SEQ, dtype=torch.bool).tril()}
    verdicts = {}
    for tool in ("nanwatch", "debug_underflow", "detect_anomaly"):
        verdicts[tool] = {}
        for kind, mask in masks.items():
            torch.manual_seed(0)
            model = MaskedModel()
            x = torch.randn(2, SEQ, DIM)
            watch = NanWatch(model) if tool == "nanwatch" else None
            if tool == "debug_underflow":
                DebugUnderflowOverflow(model)
            context = torch.autograd.detect_anomaly if tool == "detect_anomaly" else contextlib.nullcontext
            try:
                with context(), contextlib.redirect_stdout(open(os.devnull, "w")):
                    model(x, mask).square().mean().backward()
                report = watch.check(0) if watch is not None else None
                verdicts[tool][kind] = "silent" if report is None else f"false alarm at {report['module']}"
            except BaseException as exc:  # DebugUnderflowOverflow aborts with SystemExit-like errors too
                verdicts[tool][kind] = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:60] if str(exc) else ''}"
    return verdicts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per variant and round (30)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="the GPT's shape (tiny; see SIZES)")
    args = parser.parse_args()
    global VOCAB, DIM, LAYERS, HEADS, SEQ, BATCH
    VOCAB, DIM, LAYERS, HEADS, SEQ, BATCH = SIZES[args.size]
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    variants = ["plain", "nanwatch", "nanwatch every=10", "debug_underflow", "detect_anomaly"]
    data = batches(args.steps)
    params = sum(p.numel() for p in make_model().parameters())
    print(f"model: GPT2LMHeadModel ({args.size}: {LAYERS} layers, width {DIM}, {HEADS} heads, vocab {VOCAB}), "
          f"{params / 1e6:.2f}M parameters, batch {BATCH} x {SEQ} tokens, "
          f"{args.steps} steps x {args.rounds} rounds per variant")
    times = {variant: [] for variant in variants}
    inside = {variant: [] for variant in variants}
    for number in range(args.rounds):
        turn = number % len(variants)  # each round starts with the next variant: none always runs first
        for variant in variants[turn:] + variants[:turn]:
            total, spent = train(data, variant)
            times[variant].append(1000 * total / args.steps)
            inside[variant].append(1000 * spent / args.steps)
    print(f"{'variant':<18} {'ms/step':>8} {'min..max':>14} {'x plain':>8} {'min..max':>11} {'in NanWatch':>12}")
    for variant in variants:
        ms = statistics.median(times[variant])
        ratios = [t / p for t, p in zip(times[variant], times["plain"])]
        tool = f"{statistics.median(inside[variant]):6.2f} ms" if variant.startswith("nanwatch") else ""
        print(f"{variant:<18} {ms:8.1f} {min(times[variant]):6.1f}..{max(times[variant]):<6.1f} "
              f"{statistics.median(ratios):8.2f} {min(ratios):5.2f}..{max(ratios):<5.2f} {tool:>12}")
    plain = statistics.median(times["plain"])
    for variant in ("nanwatch", "nanwatch every=10"):
        share = [spent / p for spent, p in zip(inside[variant], times["plain"])]
        print(f"{variant}: {statistics.median(inside[variant]):.2f} ms of CPU per step inside its hooks and check(), "
              f"{100 * statistics.median(share):.1f}% of a plain step ({plain:.1f} ms), median of {args.rounds} rounds")
    print("on masks (one healthy forward and backward):")
    for tool, verdicts in masks_verdicts().items():
        print(f"  {tool:<16} " + "; ".join(f"{kind}: {verdict}" for kind, verdict in verdicts.items()))


if __name__ == "__main__":
    main()
