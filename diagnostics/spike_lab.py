"""spike_lab: practise a loss-spike incident on CPU before a real one costs you a week.

Symptom
    You have read about loss spikes, bad data pockets and repeat-data resumes, but the first
    one you meet will be at 3 a.m. on a run that costs money. A drill is cheaper: a real small
    training run, a failure injected at a step you choose, and the same position a real incident
    leaves you in, a log, a reading of it and a post-mortem to write.

What it checks
    Trains a small GPT (2 layers, 64 wide, 0.1M parameters) on a token stream drawn from a fixed
    Markov chain, with the monitor on (diagnostics/monitor.py writes OUT/train_log.jsonl every
    step), and injects one failure at --at:

      pocket          --pocket batches of uniform random tokens (a badly cleaned shard)
      lr_jump         the learning rate is multiplied by 40 from --at on (a schedule bug)
      nan_batch       one batch whose per-token loss weights hold NaN (a corrupted mask)
      repeat_resume   a crash at --at and a resume from the checkpoint 60 steps earlier whose data
                      loader restarts at the beginning of the stream, which opens with easier data

    Then it reads the log with diagnostics/spikes.py, as you would, and writes the post-mortem
    draft (OUT/postmortem.md) for you to complete. With --guard it trains twice on the same
    batches, without and with diagnostics/spike_guard.py, and shows the steps the guard skipped
    and where each run ended.

Command
    python diagnostics/spike_lab.py --scenario pocket --at 300                  # the drill: 600 steps
    python diagnostics/spike_lab.py --scenario pocket --at 300 --guard          # and the guard's answer
    python diagnostics/spike_lab.py --scenario repeat_resume --out /tmp/lab --force

Output
    $ python diagnostics/spike_lab.py --scenario pocket --at 150 --steps 300 --guard --out /tmp/lab
    spike_lab: pocket: 8 batches of random tokens from step 150; 300 steps of a 105,216-parameter GPT; the log: /tmp/lab/train_log.jsonl
    spikes.py reads it as:
    train_log.jsonl (jsonl): 300 values of 'loss', steps 0..299; grad norm: grad_norm; dataset series: none
    spikes: 1 (1 slow_recovery)
       peak step  type            baseline      peak  x base  recovery grad lead
             150  slow_recovery      1.205     6.781   5.627        28         0
    events: none
    nan_step: none
    the same stream with SpikeGuard (after its restart, the rerun's losses):
        step  unguarded    guarded
         148      1.157      1.157
         149      1.157      1.157
         150      6.781      1.222
         151      6.659      1.289
         152      6.172      1.234
         153      5.996      1.167
         154      5.789      1.104
         155      5.211      1.174
         156       5.08      1.194
         200      1.265      1.199
         250      1.202      1.166
    guard skipped 5 steps: 150, 151, 152, 153, 154; asked for a restart at step 154: rolled back to the last checkpoint (every 50 steps) and skipped 20 batches
    mean loss over the 32 steps after the pocket: unguarded 1.693, guarded 1.164
    post-mortem draft to complete: /tmp/lab/postmortem.md

How to read it
    The first lines say what was injected and where; the spikes.py reading below is what you
    would have had from a real log: find the injected step among its spikes, check its type
    against refs/loss_patterns.md, then open OUT/postmortem.md and fill in the lines marked
    `fill in` as if you did not know the cause: what the log alone tells, what you would look at
    next (the batches at the spike, the grad-norm lead, the resume history). With --guard, the
    table compares the two runs step by step.

Next step
    Repeat the drill for each scenario, then for your own run: log every step with
    TrainingMonitor, read the log with spikes.py, and decide from refs/stability.md#recover which
    recovery is cheapest. Exit code: 0 when the drill ran, 2 on bad usage.
"""
import argparse
import copy
import os
import sys
from pathlib import Path

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # monitor, spike_guard, spikes and the contract sit beside this file
from ml_debug_contract import ArgumentParser, OutputFolder, OutputRefused, run_command  # noqa: E402
import spikes  # noqa: E402
from monitor import TrainingMonitor  # noqa: E402
from spike_guard import RestartFromCheckpoint, SpikeGuard  # noqa: E402

SCENARIOS = ("pocket", "lr_jump", "nan_batch", "repeat_resume")
VOCAB, CONTEXT, BATCH = 48, 32, 16
LR = 3e-3  # AdamW; warm up over 20 steps, then constant: a small model takes a large LR
LR_JUMP = 40.0  # the schedule bug's factor: far outside what the model tolerates, as a unit mix-up would be
RESUME_BACK = 60  # steps between the last checkpoint and the crash in repeat_resume
CHECKPOINT_EVERY = 50  # steps between the in-memory checkpoints a guarded run restarts from
SKIP_AHEAD = 20  # batches skipped after a restart (PaLM skipped a few hundred; our pockets are short)
EASY_PREFIX = 48  # batches of the easier source that opens the stream: enough for spikes.py to see the drop (32)
OUTPUTS = ("train_log.jsonl", "postmortem.md", "guarded_log.jsonl")


class UsageError(Exception):
    """Bad usage: one line on stderr, exit code 2."""


class TinyGPT(torch.nn.Module):
    """Pre-norm decoder: token and position embeddings, 2 blocks of causal attention and MLP, tied head."""

    def __init__(self, vocab=VOCAB, width=64, layers=2, heads=4, context=CONTEXT):
        super().__init__()
        self.heads = heads
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict({"ln1": torch.nn.LayerNorm(width), "qkv": torch.nn.Linear(width, 3 * width),
                                 "proj": torch.nn.Linear(width, width), "ln2": torch.nn.LayerNorm(width),
                                 "mlp": torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                                            torch.nn.Linear(4 * width, width))})
            for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(width)
        for table in (self.tokens, self.positions):
            torch.nn.init.normal_(table.weight, std=0.02)  # GPT-2's: N(0, 1) through the tied head starts at loss ~40

    def forward(self, idx):
        batch, time = idx.shape
        x = self.tokens(idx) + self.positions(torch.arange(time, device=idx.device))  # (B, T, C)
        for block in self.blocks:
            q, k, v = block["qkv"](block["ln1"](x)).split(x.shape[-1], dim=-1)
            q, k, v = (t.view(batch, time, self.heads, -1).transpose(1, 2) for t in (q, k, v))  # (B, H, T, C/H)
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + block["proj"](attended.transpose(1, 2).reshape(batch, time, -1))
            x = x + block["mlp"](block["ln2"](x))
        return self.ln_f(x) @ self.tokens.weight.T  # (B, T, V) logits


class Stream:
    """Batches from a fixed Markov chain, indexed by position: a resumed loader can replay any of them.

    Each token is followed by one of 8 successors, the first ones likelier (weights exp(-sharpness * j)).
    With easy_start=True the first EASY_PREFIX batches come from a sharper chain (an unshuffled corpus that
    opens with an easier source): a loader that restarts at position 0 serves easier data for a while.
    """

    def __init__(self, seed, easy_start=False):
        g = torch.Generator().manual_seed(seed)
        self.successors = torch.stack([torch.randperm(VOCAB, generator=g)[:8] for _ in range(VOCAB)])  # (V, 8)
        self.seed, self.easy_start = seed, easy_start

    def batch(self, position):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + position)
        sharpness = 2.0 if self.easy_start and position < EASY_PREFIX else 1.0
        weights = torch.exp(-sharpness * torch.arange(8.0))
        choices = torch.multinomial(weights.expand(BATCH * CONTEXT, 8), 1, generator=g).view(BATCH, CONTEXT)
        tokens = torch.empty(BATCH, CONTEXT + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(VOCAB, (BATCH,), generator=g)
        for t in range(CONTEXT):
            tokens[:, t + 1] = self.successors[tokens[:, t], choices[:, t]]
        return tokens[:, :-1], tokens[:, 1:], torch.ones(BATCH, CONTEXT)  # inputs, targets, loss weights


def injected(scenario, position, at, pocket, batch, g):
    """The batch at data position `position` as the drill's data fault changes it."""
    x, y, weights = batch
    if scenario == "pocket" and at <= position < at + pocket:
        x = torch.randint(VOCAB, x.shape, generator=g)  # a shard of noise: nothing in it is predictable
        y = torch.randint(VOCAB, y.shape, generator=g)
    if scenario == "nan_batch" and position == at:
        weights = weights.clone()
        weights[0, 0] = float("nan")  # a corrupted mask: one NaN weight poisons the whole batch's loss
    return x, y, weights


def snapshot(step, position, model, optimizer):
    """An in-memory checkpoint, as a file would hold it: tensors cloned, the data position with them."""
    optimizer_state = optimizer.state_dict()
    return {"step": step, "position": position, "model": {k: v.clone() for k, v in model.state_dict().items()},
            "optimizer": {"state": {k: {n: t.clone() if torch.is_tensor(t) else t for n, t in v.items()}
                                    for k, v in optimizer_state["state"].items()},
                          "param_groups": copy.deepcopy(optimizer_state["param_groups"])}}


def train(scenario, at, steps, pocket, log_path, seed=0, guard=False):
    """One run with the monitor on; returns {"losses": {step: loss}, "skipped": [steps], "restarts": [steps]}.

    With guard=True, SpikeGuard skips outlier steps; when it asks for a restart (too many skips in a row), the
    run does what refs/stability.md#recover says: back to the last checkpoint (kept every CHECKPOINT_EVERY
    steps), and the data from the step that triggered it on is skipped (SKIP_AHEAD batches).
    """
    torch.manual_seed(seed)
    stream = Stream(seed, easy_start=scenario == "repeat_resume")
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    noise = torch.Generator().manual_seed(seed + 1)
    losses, skipped, restarts, crash_checkpoint, last_checkpoint = {}, [], [], None, None
    with TrainingMonitor(log_path, model, optimizer, overwrite=True) as monitor:  # main()'s OutputFolder: ours or new
        spike_guard = SpikeGuard(model, monitor=monitor) if guard else None
        step, position = 0, 0
        while step < steps:
            if scenario == "repeat_resume" and step == at - RESUME_BACK:
                crash_checkpoint = snapshot(step, position, model, optimizer)
            if scenario == "repeat_resume" and step == at and crash_checkpoint is not None:
                model.load_state_dict(crash_checkpoint["model"])  # the crash, and the resume from the checkpoint
                optimizer.load_state_dict(crash_checkpoint["optimizer"])
                step, position, crash_checkpoint = crash_checkpoint["step"], 0, None  # BUG: the loader restarts at 0
                scenario = None
            if guard and step % CHECKPOINT_EVERY == 0:
                last_checkpoint = snapshot(step, position, model, optimizer)
            lr = LR * min(1.0, (step + 1) / 20) * (LR_JUMP if scenario == "lr_jump" and step >= at else 1.0)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y, weights = injected(scenario, position, at, pocket, stream.batch(position), noise)
            per_token = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="none")
            loss = (per_token * weights.flatten()).sum() / weights.sum()
            loss.backward()
            losses[step] = loss.item()
            try:
                skip = spike_guard is not None and spike_guard.should_skip(step, loss)
            except RestartFromCheckpoint:
                optimizer.zero_grad(set_to_none=True)
                skipped.append(step)
                restarts.append(step)
                model.load_state_dict(last_checkpoint["model"])
                optimizer.load_state_dict(last_checkpoint["optimizer"])
                step, position = last_checkpoint["step"], position + 1 + SKIP_AHEAD
                continue
            if skip:
                skipped.append(step)
            else:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # returns the pre-clip norm
                optimizer.step()
                monitor.log(step, loss, grad_norm=norm)
            optimizer.zero_grad(set_to_none=True)
            step, position = step + 1, position + 1
    return {"losses": losses, "skipped": skipped, "restarts": restarts}


def drill(scenario, at, steps, pocket, folder, guard):
    """Run the drill, writing into `folder` (an OutputFolder, prepared), and return the lines to print."""
    out = Path(folder.path)
    with folder.writing("train_log.jsonl") as log:
        run = train(scenario, at, steps, pocket, log)
    report = spikes.analyze(log)
    with folder.writing("postmortem.md") as postmortem:
        Path(postmortem).write_text(spikes.postmortem(report))
    what = {"pocket": f"{pocket} batches of random tokens from step {at}",
            "lr_jump": f"the learning rate x{LR_JUMP:g} from step {at}",
            "nan_batch": f"a NaN loss weight in the batch of step {at}",
            "repeat_resume": f"a crash at step {at}, resumed from step {at - RESUME_BACK} with the loader at the "
                             f"start of the stream"}[scenario]
    lines = [f"spike_lab: {scenario}: {what}; {steps} steps of a {sum(p.numel() for p in TinyGPT().parameters()):,}"
             f"-parameter GPT; the log: {log}",
             "spikes.py reads it as:", spikes.summary(report)]
    if guard:
        with folder.writing("guarded_log.jsonl") as guarded_log:
            guarded = train(scenario, at, steps, pocket, guarded_log, guard=True)
        lines += guard_table(run, guarded, at, pocket)
    lines.append(f"post-mortem draft to complete: {out / 'postmortem.md'}")
    return lines


def guard_table(plain, guarded, at, pocket):
    def after_pocket(losses):
        window = [losses[s] for s in range(at + pocket, at + pocket + 32) if s in losses]
        return sum(window) / len(window) if window else float("nan")

    lines = ["the same stream with SpikeGuard (after its restart, the rerun's losses):",
             f"  {'step':>6} {'unguarded':>10} {'guarded':>10}"]
    shown = sorted({s for s in plain["losses"] if at - 2 <= s <= at + 6 or (s > at and s % 50 == 0)})
    for s in shown:
        lines.append(f"  {s:>6} {plain['losses'].get(s, float('nan')):>10.4g} {guarded['losses'].get(s, float('nan')):>10.4g}")
    skipped, restarts = guarded["skipped"], ", ".join(map(str, guarded["restarts"]))
    lines.append(f"guard skipped {len(skipped)} step{'s' if len(skipped) != 1 else ''}: "
                 f"{', '.join(map(str, skipped[:10])) or 'none'}"
                 + (f"; asked for a restart at step {restarts}: rolled back to the last checkpoint (every "
                    f"{CHECKPOINT_EVERY} steps) and skipped {SKIP_AHEAD} batches" if restarts else ""))
    lines.append(f"mean loss over the 32 steps after the pocket: unguarded {after_pocket(plain['losses']):.4g}, "
                 f"guarded {after_pocket(guarded['losses']):.4g}")
    return lines


def main(argv=None):
    parser = ArgumentParser(prog="spike_lab.py", description=__doc__.split("\n\n", 1)[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Exit 0 when the drill ran, 2 on bad usage.")
    parser.add_argument("--scenario", choices=SCENARIOS, default="pocket", help="the failure to inject (default pocket)")
    parser.add_argument("--at", type=int, default=300, help="the step of the failure (default 300)")
    parser.add_argument("--steps", type=int, default=600, help="training steps (default 600: about 20 s on one CPU core)")
    parser.add_argument("--pocket", type=int, default=8, help="bad batches in a pocket (default 8)")
    parser.add_argument("--guard", action="store_true", help="train again with SpikeGuard and compare")
    parser.add_argument("--out", default="spike_lab_out", help="folder for the log and the post-mortem draft")
    parser.add_argument("--force", action="store_true", help="write into an --out folder that holds files of yours "
                        "(they are kept; a file of yours named like the lab's is never replaced)")
    try:
        args = parser.parse_args(argv)
        first = RESUME_BACK + 1 if args.scenario == "repeat_resume" else 50
        if not first <= args.at <= args.steps - 100:
            raise UsageError(f"--at must be between {first} and --steps - 100 = {args.steps - 100} (the log needs "
                             f"history before the failure and room after it), got {args.at}")
        if not 1 <= args.pocket <= 100:
            raise UsageError(f"--pocket must be between 1 and 100, got {args.pocket}")
        folder = OutputFolder(args.out, OUTPUTS, args.force, tool="spike_lab.py")
        folder.prepare()
        torch.set_num_threads(1)
        print("\n".join(drill(args.scenario, args.at, args.steps, args.pocket, folder, args.guard)))
        return 0
    except (UsageError, OutputRefused) as exc:
        print(f"spike_lab.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
