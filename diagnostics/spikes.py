"""Loss-spike forensics: read a training log, find and classify every spike, draft the post-mortem.

Symptom
-------
The loss curve jumped, crept upwards, turned NaN, or looked suspiciously good after a restart, and
you need to know which known pattern it is before you choose: carry on, skip some batches, roll
back, lower the learning rate, swap a dataset, or fix the resume code.

What it checks
--------------
It reads the log once, as a stream, and recognises its format by content (--format NAME forces one):
CSV or TSV (W&B exports and Lightning's CSVLogger metrics.csv included), JSONL, a TensorBoard event file
or directory, the HF Trainer's `trainer_state.json`, and the plain-text logs of modded-nanogpt
(`step:100/1000 train_loss:3.28 ...`), llm.c (`s:100 trl:3.21 lr:... norm:...` and its stdout),
nanoGPT (`iter 100: loss 3.2100, ...`), Megatron-LM (`iteration 100/ 1000 | ... | lm loss: ... |`),
the HF Trainer's stdout (`{'loss': 3.21, 'grad_norm': ...}`), torchtune's DiskLogger (`Step 100 |
loss:3.21 lr:2e-05 ...`) and fairseq's train_inner lines (`epoch 001:  100 / 8000 loss=3.21, ...,
num_updates=100, lr=..., gnorm=...`, stepped by num_updates). Columns are matched by name: `step` (in
a CSV without one, `epoch`; else the row order), the loss (`loss`, `train_loss`, `train/loss`, or
`--loss COLUMN`), `grad_norm`, `lr`/`learning_rate`, and every other column with "loss" in its name
(validation losses and the fp16 loss scale aside), taken as the loss of one dataset of a mix. A W&B export's `<run> - ` prefix and
Lightning's `_step` suffix are read through; summary columns (`__MIN`, `__MAX`, `_epoch`) are left out.

Each series keeps a rolling baseline: the median and the interquartile range (a robust sigma) of
its last 64 healthy values; while the loss falls fast, a line through them instead, so the baseline
follows the fall. Before 64 values (all of a short table of one row per epoch), a falling line through
the window or its newer half is the baseline when it explains the spread (never under the median of
the latest 8 values). A value above baseline + max(6 sigma, 5%, 0.2% of the run's highest baseline) opens
a spike. Values inside a spike never enter the window, as in llm.c's outlier detector and ZClip, so a
burst of spikes cannot raise the bar for the next one. The spike is followed until it can be
classified, against the trend the run was on before it (DESIGN.md; the noise band is baseline +
max(3 sigma, 1%)):

  fast_recovery   back in the band within 20 steps of the peak, or on the next logged row (the first
                  value back and the median of it and the next four are in the band)
  slow_recovery   back in the band, later than that
  no_recovery     stops coming down above the band (block medians of 32 values level off, or fall
                  so slowly that the band is more than 4x the time since the peak away), below 1.5x;
                  or back in the band but not on the trend: the 128 values after it sit 2% and 1.5
                  sigma or more above where the pre-spike trend leads, and above the pre-spike level,
                  and have stopped coming down (a lasting offset, however noisy the run)
  divergence      levels off at 1.5x the baseline or more, keeps rising, turns NaN/inf, or the log
                  ends (or rolls back) at the peak

Each spike in --json: step (of the peak), start, end, type, baseline, peak, recovery_steps,
grad_norm_lead (steps from the start of a grad-norm spike, found the same way at most 10 steps or one
logged row earlier, to the start of the loss spike), and also level_after, ended_by (recovered, settled,
nonfinite, resume, log_end, horizon), grad_norm_peak and lr. `nan_step` is the first NaN/inf loss.
Events, each with "kind" and "step":

  resume                the step went backwards (restart, rollback): from_step, rollback_steps
  resume_spike          a spike starting within 64 rows of a resume: resume_step, rows_after_resume, type
  resume_drop           the first 32 losses after a resume sit 2 sigma and 1% or more below the last 32
                        before it: before, after, drop_pct (step: the resume)
  repeat_data           after a resume_drop the loss climbs back by half the drop and stays there: the
                        low stretch was data seen before, under-reported (step: the jump; resume_step,
                        before, low; high: the median of the 16 values from the jump on; expected: the level
                        the pre-resume trend predicts there, baseline + drop; spike). The jump is no spike: a
                        spike open at the jump is measured from `expected` and kept (spike: true) only if its
                        peak clears the spike threshold of that level
  non_spike_divergence  healthy block medians 10% (and 1% of the run's highest baseline) above the lowest
                        so far, twice running, no spike in between (step: where the rise began;
                        detected_step, last_step, from, to); withdrawn if the loss later makes a new low
  grad_norm_spike       a grad-norm spike, twice its baseline or more, that neither led a loss spike nor
                        came during one: start, baseline, peak, type
  nonfinite             a run of NaN/inf values: last_step, count, series
  series_spike          two or more dataset losses: series (those that spiked), quiet, scope ("shared"
                        or "confined"), in_main, types
  unparsed              cells that were not numbers, read as missing: column, count, first_line (step null)
  too_short             33 values or fewer: detection needs a 32-value baseline first (values, needed)

Command
-------
    python diagnostics/synthetic_curves.py --scenario mixed --seed 8 --rows 6000 --out run.csv
    python diagnostics/spikes.py run.csv [--json] [--plot run.png] [--postmortem run.md] [--loss COLUMN]

Output
------
    run.csv (csv): 6000 values of 'loss', steps 0..4489; grad norm: grad_norm; dataset series: none
    spikes: 5 (2 fast_recovery, 1 slow_recovery, 1 no_recovery, 1 divergence)
       peak step  type            baseline      peak  x base  recovery grad lead
            1500  no_recovery        3.917     8.844   2.258         -         3
            1833  fast_recovery      3.797     4.805   1.265         3         2
            2324  divergence         3.688     10.35   2.805         -         0
            2625  fast_recovery      3.588     4.387   1.223         4         3
            3007  slow_recovery      3.507     8.427   2.403       478         0
    events: 2
      resume at step 1430: from_step=2298, rollback_steps=868
      resume at step 2156: from_step=2796, rollback_steps=640
    nan_step: none

On a real log, the public modded-nanogpt 1B run in ../shared/data/modded-nanogpt/:

    scaleup1b_ad8d7ae5.csv (csv): 20344 values of 'train_loss', steps 1..20344; grad norm: not logged; dataset series: none
    spikes: 122 (122 fast_recovery)
       peak step  type            baseline      peak  x base  recovery grad lead
             536  fast_recovery      3.774      5.69   1.508         1         -

How to read it
--------------
`x base` is the peak over the pre-spike baseline; `recovery` counts steps from the peak back into
the noise band; `grad lead` says a grad-norm spike started that many steps before the loss spike
(0: the same step; -: none, or grad norm not logged). In the example, the spike at 1500 settled
22% above its baseline and the run was rolled back (the resume at 1430); the one at 2324 climbed to
2.8x and was rolled back too; the one at 3007 took 478 steps to come back. The real log holds over a hundred
one-step spikes that are gone at the next step: fast recoveries, nothing to act on one by one.

Next step
---------
- Run it again with --plot and look: the types are measured, and the picture shows what they miss.
- fast_recovery: carry on. If the same steps spike in a second run with the same data order, the
  batches at those steps are the suspects.
- slow_recovery: let it run while it comes down; if such spikes recur, restart before one and skip
  the batches around its start.
- no_recovery or divergence: roll back to a checkpoint well before the spike, skip those batches,
  and lower the learning rate if it happens again; numerics (fp16) and data quality come next.
- grad_norm_spike alone: nothing to undo; if they grow larger or more frequent, loss spikes often follow.
- resume_spike, resume_drop, repeat_data: check the resume itself (RNG states, data loader position).
  After repeat_data do not roll back for the jump: the loss was under-reported before it, not worse after.
- series_spike confined to one dataset: inspect or swap that dataset.
- --postmortem writes a markdown draft with all these numbers, one section per spike that is not a
  fast recovery; refs/loss_patterns.md shows every pattern as this tool draws it.

Exit codes: 0 whenever the log was read, whatever it holds: NaN/inf values are data (nan_step,
nonfinite events) and cells that are not numbers are counted in an unparsed event and read as
missing, so the half-written last line of a crashed run does no harm. 2 when it cannot be read: no
such file, not a regular file (a FIFO or a device is refused at once), a format it does not know,
empty file, header only, no loss column (the line lists the candidates), no numeric loss, binary
junk or a line over 4 MB, JSON nested too deep, tensorboard missing for an event file, matplotlib
missing for --plot. Then one line on stderr and no traceback. Outputs: --plot (.png, .svg, .pdf) and
--postmortem (.md, .markdown, .txt) never overwrite a file without --force, and never write to the log
itself, a folder or a device (exit 2, one line). Ctrl-C exits 130 quietly; a closed stdout (`| head`)
ends quietly with 0, a full one (/dev/full) with 1.

Limits: a lasting offset is told from a slow recovery against a straight-line trend of the 256 healthy
values before the spike, extrapolated at most 128 rows; a loss back under its pre-spike level is never
called set back, so an offset early in training, while the loss still falls fast, can pass for a
recovery. A spike on top of the jump that ends a repeated stretch is measured from the true level only
once the jump is confirmed (16 values), so its recovery can be counted up to 16 steps late. Two spikes
fewer than five values apart merge unless the loss was back in the band between them. For JSONL, event
files and plain text the first 1000 records decide the columns; trainer_state.json is one JSON
document and is loaded whole (up to 512 MB). Memory is one 64-value window per series and a 64 KB
block of the file, plus what is found (every spike and event is kept); --plot keeps at most 4000
min/max buckets per series.

Speed and memory, measured with benchmarks/spikes_throughput.py next to a 15-line pandas rolling-median
detector (which only counts outliers), each in its own process, on a 2-core AMD EPYC VM shared with
other jobs (Linux, Python 3.11.7, load average 3.3-3.8 at the start): a 10-million-row CSV (step, loss,
grad_norm, lr; 336 MB) in 23.8 s CPU (0.42 M rows per CPU second) at a peak RSS of 18.0 MB, the same as
for 1 million rows, where pandas took 24.5 s CPU and 1000 MB. Healthy stretches are read a 64 KB block
and 32 values at a time; spikes are followed value by value, so a log dense with them is slower: one
with a spike every ~700 rows (half the rows inside a spike or its follow-up) ran at 0.20 M rows per CPU
second, against 0.35 for pandas (1 million rows: 5.0 s and 22.5 MB against 2.9 s and 161 MB).
"""
import argparse
import bisect
import csv
import itertools
import json
import math
import operator
import os
import re
import stat
import statistics
import sys
from collections import deque
from pathlib import Path

# --- column names (DESIGN.md, "A training log"); matched without regard to case ---------------
STEP_NAMES = ("step", "global_step", "trainer/global_step", "_step", "iter", "iteration")
LOSS_NAMES = ("loss", "train_loss", "train/loss")
GRAD_NAMES = ("grad_norm", "train/grad_norm")  # train/...: the HF Trainer's TensorBoard tags
LR_NAMES = ("lr", "learning_rate", "train/learning_rate")
# Validation losses are sampled sparsely and reflect no single batch: they are never a dataset's series;
# nor is an fp16 loss scale.
VALIDATION = re.compile(r"(^|[/_.\- ])(val|valid|validation|eval|test)([/_.\- ]|$)", re.IGNORECASE)
# Summary columns: a W&B export's min/max envelope of each series, Lightning's per-epoch means. Not datasets.
SUMMARY = re.compile(r"(__min|__max|_epoch)$", re.IGNORECASE)
PREVIEW_ROWS = 1000  # JSONL and event files name their columns row by row: the first rows decide
SNIFF_BYTES = 65536  # the format is recognised from the first 64 KB...
SNIFF_LINES = 200  # ...and at most 200 lines
BLOCK_BYTES = 1 << 16  # text is read 64 KB at a time
MAX_LINE = 1 << 22  # a line longer than 4 MB is no log line (a sparse or binary file): refused
MAX_JSON = 1 << 29  # a JSON document (trainer_state.json) is loaded whole: at most 512 MB

# --- detection thresholds ------------------------------------------------------------------------
WINDOW = 64  # values in the rolling baseline; llm.c's loss and grad-norm outlier detector uses 64 too
MIN_POINTS = 32  # values before detection starts: order statistics need some mass (our assumption)
REFRESH = 32  # healthy values between two recomputations of the threshold: it lags a little, the
# median lags half a window anyway (and follows a fast fall, see FALLING_Z), and each recomputation costs
# ~5 us: every 16 rows it was a third of the time per row (measured); every 32 the synthetic scores are the same
IQR_PER_SIGMA = 1.349  # interquartile range of a normal distribution, in standard deviations
SPIKE_Z = 6.0  # robust z-score that opens a spike; our assumption, tuned on the synthetic curves and
# the modded-nanogpt log, whose heavy lower tail alone reaches z = -5 about 34 times in 20k steps
SPIKE_REL = 0.05  # ...and at least 5% above the baseline: smaller bumps are noise for this purpose (ours)
BAND_Z = 3.0  # the pre-spike noise band: baseline + 3 robust sigma (our assumption)
BAND_REL = 0.01  # ...and never narrower than 1% of the baseline (our assumption)
CONFIRM = 5  # the first value back in the band and the median of it and the next 4 must be in the band
FAST_STEPS = 20  # DESIGN.md: back in the band within 20 steps of the peak is a fast recovery
DIVERGE_RATIO = 1.5  # DESIGN.md: settling at 1.5x the pre-spike level or more is a divergence
EARLY_TREND = 0.5  # before the window is full, a falling line (through it or its newer half) whose residuals spread less than half the values do is the baseline (ours)
EARLY_RECENT = 8  # ...and never under the median of its latest 8 values (ours)
BLOCK = 32  # values per block median: settling, creeping and resume checks compare block medians
MIN_SETTLE_BLOCKS = 4  # follow a spike for at least 4 blocks before calling its level settled (ours)
SETTLE_TOL = 1.0  # block medians closer than 1 noise sigma are level (a median of 32 moves ~0.2 sigma)
SETTLE_FACTOR = 4.0  # still coming down, but the band is more than 4x the time since the peak away at
# the current rate of descent: call it settled (our assumption, tuned on the synthetic curves)
MAX_FOLLOW = 4096  # values after which an unresolved spike is judged by its level
FALLING_Z = 3.0  # the latest block median this many sigma (the block's own spread) under the one two blocks
# earlier: the loss falls fast, and the baseline is a line through the window, not its median (ours)
TREND_BLOCKS = 8  # block medians that give the pre-spike trend
VERIFY = 4 * BLOCK  # values after a recovery whose level is checked against the pre-spike trend
OFFSET_Z = 1.5  # a median of those this many noise sigma above the trend (the median of 64 values moves
OFFSET_REL = 0.02  # ~0.2 sigma) and 2% or more, not still coming down: a lasting offset, no_recovery (ours)
FALL_Z = 0.5  # still coming down: the later median lower by 0.5 sigma (2 standard errors of the difference)
SPIKE_ABS = 0.002  # floors in units of the run's own scale, its highest baseline so far (the first loss,
CREEP_ABS = 0.01  # usually): a loss near zero moving by a hair is no spike or creep (ours)
CREEP_REL = 0.10  # a block median 10% above the lowest one so far, twice in a row, with no spike
CREEP_BLOCKS = 2  # ...is a divergence without a spike (our assumption)
DROP_Z = 2.0  # after a resume, the first block median this many sigma below the last one before it
DROP_REL = 0.01  # ...and at least 1% lower is a suspicious drop (our assumption)
JUMP_CONFIRM = 16  # values whose median must stay above the midpoint to call the jump back up
RESUME_NEAR = 64  # rows: a spike starting this soon after a resume is a resume spike (one window)
LEAD_STEPS = 10  # a grad-norm spike at most this many steps (or one logged row) before a loss spike led it;
# further back, on real logs, unrelated blips were picked up (ours)
GRAD_ALONE_RATIO = 2.0  # a grad-norm spike with no loss spike is an event from twice its baseline up: the grad
# norm is heavy-tailed, and smaller blips alone mean nothing (ours; the llm.c log's lone spike was 6.7x)
SHARED_GAP = 3  # rows: spikes in two dataset series this close together are one event


class CliError(Exception):
    """A problem the user can fix: printed as one line, exit code 2."""


# --- reading logs --------------------------------------------------------------------------------


def _base(name):
    """The metric a column holds, lower case: a W&B export writes '<run name> - train/loss', Lightning's
    CSVLogger 'train_loss_step' for the per-step values of train_loss."""
    low = name.strip().lower()
    if " - " in low:
        low = low.rsplit(" - ", 1)[1]
    if low.endswith("_step") and low not in STEP_NAMES:
        low = low[:-5]
    return low


class Columns:
    """Which column plays which role: names as written in the log, None when absent."""

    def __init__(self, names, loss_name=None, epoch_rows=False):
        kept = [n for n in names if not SUMMARY.search(n.strip())]  # min/max envelopes, epoch means
        exact, base = {}, {}
        for name in kept:
            exact.setdefault(name.strip().lower(), name)
            base.setdefault(_base(name), name)
        if loss_name:
            self.loss = exact.get(loss_name.strip().lower()) or base.get(_base(loss_name))
        else:
            self.loss = next((base[n] for n in LOSS_NAMES if n in base), None)
        self.step = next((exact[n] for n in STEP_NAMES if n in exact), None)
        if self.step is None and epoch_rows:  # a table of one row per epoch (Keras CSVLogger, timm, ultralytics)
            self.step = exact.get("epoch")
        if self.loss is None:
            hints = [n for n in kept if "loss" in n.lower()] or [n for n in kept if n != self.step]
            seen = ", ".join(hints[:8]) + (f" and {len(hints) - 8} more" if len(hints) > 8 else "") or "none"
            asked = f"no column '{loss_name}'" if loss_name else "no loss found"
            raise CliError(f"{asked}: candidates {seen}; use --loss COLUMN")
        self.grad = next((base[n] for n in GRAD_NAMES if n in base), None)
        self.lr = next((base[n] for n in LR_NAMES if n in base), None)
        taken = {n for n in LOSS_NAMES} | {_base(self.loss)}
        self.extras = [  # every other loss is taken for one dataset's loss (cm4, pmd, ...)
            name for low, name in base.items()
            if "loss" in low and low not in taken and name != self.loss and not VALIDATION.search(low)
            and "scale" not in low
        ]

    def order(self):
        """Column names in row-tuple order: step, loss, grad, lr, extras (None where absent)."""
        return [self.step, self.loss, self.grad, self.lr, *self.extras]


class Unparsed:
    """Cells that are present but not numbers: counted per column, then treated as missing."""

    def __init__(self):
        self.columns = {}  # name -> [count, first line]

    def add(self, name, line):
        entry = self.columns.setdefault(name, [0, line])
        entry[0] += 1


def _number(value, name, line, unparsed):
    """A float, None for an empty cell; text that is not a number is counted and treated as empty."""
    if isinstance(value, str):
        value = value.strip()
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        unparsed.add(name, line)
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        unparsed.add(name, line)
        return None


def _convert(line, cells, names, unparsed):
    """Row tuple (step, loss, grad, lr, extras) from cells aligned with `names`."""
    values = [None if name is None else _number(cell, name, line, unparsed) for name, cell in zip(names, cells)]
    step = values[0]
    if isinstance(cells[0], str) and step is not None:
        try:
            return int(cells[0]), values[1], values[2], values[3], tuple(values[4:])  # exact, however large
        except ValueError:
            pass
    if step is not None:
        if step - step != 0:  # a NaN or infinite step says nothing about where the row is: read as missing
            unparsed.add(names[0], line)
            step = None
        elif step.is_integer():
            step = int(step)
    return step, values[1], values[2], values[3], tuple(values[4:])


def _blocks(path):
    """A UTF-8 text file in whole lines (joined by \\n, the last line end and a BOM left out), BLOCK_BYTES at a
    time: a file of any size is never held whole, and a "line" longer than MAX_LINE (a binary or sparse file)
    is refused. Yields (number of the first line, text)."""
    with open(path, "rb") as handle:
        carry, line = b"", 1
        while True:
            block = handle.read(BLOCK_BYTES)
            if not block:
                break
            if line == 1 and not carry and block.startswith(b"\xef\xbb\xbf"):
                block = block[3:]  # the BOM Excel and PowerShell put first: not part of the first name
            if b"\0" in block:
                raise CliError(f"line {line} holds NUL bytes: a binary file, not a text log")
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if not cut:
                if len(block) > MAX_LINE:
                    raise CliError(f"line {line} is longer than {MAX_LINE >> 20} MB: not a training log")
                carry = block
                continue
            carry = block[cut:]
            text = _decode(block[:cut - 1], line)
            yield line, text
            line += text.count("\n") + 1
        if carry:
            yield line, _decode(carry, line)


def _decode(data, line):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line += data.count(b"\n", 0, exc.start)
        raise CliError(f"not UTF-8 text (line {line})") from None


def _lines(path):
    """Every line of a text file, one at a time (a flat iterator over _blocks)."""
    return itertools.chain.from_iterable(text.split("\n") for _, text in _blocks(path))


def _csv_chunks(path, delimiter, loss_name, unparsed):
    blocks = _blocks(path)
    header = None
    for line, text in blocks:
        lines = text.split("\n")
        k = next((k for k, text in enumerate(lines) if text.strip()), None)
        if k is not None:  # the first line that is not blank
            header, rest = lines[k], (line + k + 1, "\n".join(lines[k + 1:]))
            break
    if header is None:
        raise CliError("the file is empty")
    try:
        header = [h.strip() for h in next(csv.reader([header], delimiter=delimiter))]
    except csv.Error as exc:
        raise CliError(f"not a readable CSV file ({exc})") from None
    cols = Columns(header, loss_name, epoch_rows=True)  # JSON records carry fractional epochs: only a table counts them
    names = cols.order()
    position = {name: i for i, name in reversed(list(enumerate(header)))}
    idx = [None if name is None else position[name] for name in names]
    width = len(header)
    si, li, gi, ri, *ex = idx

    def by_line(lines, first):
        """Row tuples, one line at a time: quoted cells, empty cells, words, ragged rows."""
        rows, numbered = [], enumerate(lines, first)
        for number, text in numbered:
            if not text.strip():
                continue
            if '"' in text:  # quoted cells: the csv module handles them, and line breaks inside them
                cells = next(csv.reader(itertools.chain([text], (t for _, t in numbered)), delimiter=delimiter))
            else:
                cells = text.split(delimiter)
            cells += [""] * (width - len(cells))
            rows.append(_convert(number, [None if i is None else cells[i] for i in idx], names, unparsed))
        return _columns(rows, cols)

    def chunks():
        for first, text in itertools.chain([rest], blocks):
            if not text:
                continue
            if '"' not in text:  # plain numbers: one split per block and a column is a slice (3x faster)
                flat = text.replace("\n", delimiter).split(delimiter)
                if len(flat) == width * (text.count("\n") + 1):
                    try:  # int() and float() ignore a trailing \r
                        yield (None if si is None else [*map(int, flat[si::width])], [*map(float, flat[li::width])],
                               None if gi is None else [*map(float, flat[gi::width])],
                               None if ri is None else flat[ri::width],  # read only where a spike starts
                               [[*map(float, flat[i::width])] for i in ex], True)
                        continue
                    except ValueError:  # a word, an empty cell, a float step: line by line
                        pass
            try:
                yield by_line(text.split("\n"), first)
            except csv.Error as exc:
                raise CliError(f"line {first}: not readable as CSV ({exc})") from None

    return cols, chunks()


def _columns(rows, cols):
    """A chunk (steps, losses, grads, lrs, [extra series], complete) from row tuples; None for a role the log
    lacks; complete: no value is missing (None) in steps, losses, grads and extra series."""
    steps, losses, grads, lrs, extras = zip(*rows) if rows else ((),) * 5
    chunk = (list(steps) if cols.step else None, list(losses), list(grads) if cols.grad else None,
             list(lrs) if cols.lr else None, [list(x) for x in zip(*extras)] if cols.extras else [])
    complete = all(c is None or None not in c for c in (chunk[0], chunk[1], chunk[2], *chunk[4]))
    return chunk + (complete,)


def _chunked(rows, cols, size=4096):
    """Chunks from row tuples (the readers of records: JSONL, JSON, TensorBoard, plain text)."""
    while True:
        batch = list(itertools.islice(rows, size))
        if not batch:
            return
        yield _columns(batch, cols)


def _dict_rows(records, loss_name, unparsed):
    """Columns and row tuples from (line, dict) records; the first PREVIEW_ROWS decide the columns."""
    preview = []
    for record in records:
        preview.append(record)
        if len(preview) >= PREVIEW_ROWS:
            break
    if not preview:
        raise CliError("no records with values found")
    names = []
    for _, record in preview:
        names.extend(k for k in record if k not in names)
    cols = Columns(names, loss_name)
    wanted = cols.order()

    rows = (_convert(line, [None if n is None else record.get(n) for n in wanted], wanted, unparsed)
            for line, record in itertools.chain(preview, records))
    return cols, _chunked(rows, cols)


def _jsonl_records(path, unparsed):
    for line, text in enumerate(_lines(path), 1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: a record nested thousands deep
            record = None
        if isinstance(record, dict):
            yield line, record
        else:
            unparsed.add("<line>", line)


def _json_records(path):
    if path.stat().st_size > MAX_JSON:
        raise CliError(f"a JSON document over {MAX_JSON >> 20} MB is not loaded whole; write the log as JSONL")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            data = json.load(handle)
    except UnicodeDecodeError as exc:
        raise CliError(f"not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise CliError(f"not valid JSON ({exc})") from None
    except RecursionError:
        raise CliError("not a training log: JSON nested too deep to read") from None
    if isinstance(data, dict) and isinstance(data.get("log_history"), list):
        data = data["log_history"]  # HF Trainer's trainer_state.json
    if not isinstance(data, list):
        raise CliError("JSON log must be a trainer_state.json (with log_history) or a list of records")
    return ((i, record) for i, record in enumerate(data, 1) if isinstance(record, dict))


def _event_records(path):
    try:  # lazy: only event files need tensorboard
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise CliError("reading TensorBoard event files needs tensorboard: pip install tensorboard") from None
    files = sorted(p for p in path.iterdir() if "tfevents" in p.name and p.is_file()) if path.is_dir() else [path]
    if not files:
        raise CliError("directory holds no TensorBoard event file (*tfevents*)")
    last, current, number = None, {}, 0  # scalars logged at the same step make one row
    for file in files:  # event file names start with a timestamp: sorted means chronological
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name != "scalars":
                        continue
                    if event.step != last and current:
                        number += 1
                        yield number, current
                        current = {}
                    last = event.step
                    current["step"] = event.step
                    current[value.tag] = tensor_util.make_ndarray(value.tensor).item()
        except Exception as exc:  # the reader raises protobuf and TF-stub errors of many kinds on junk
            raise CliError(f"{file.name}: not a readable TensorBoard event file ({type(exc).__name__})") from None
    if current:
        yield number + 1, current


# --- plain-text logs: one small parser per trainer, registered in TEXT_FORMATS ----------------------
# Each takes one line and returns a record (a dict of named numbers) or None for a line it does not know.
# Lines it does not know are the trainer's other output and are skipped. To add a format: write its
# parser and add one line to TEXT_FORMATS.

NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
MODDED = re.compile(r"step:(\d+)(?:/\d+)?((?:\s+\w+:" + NUM + r"\w*)+)")  # step:100/1000 train_loss:3.28 ...
KEY_VALUE = re.compile(r"(\w+):(" + NUM + ")")
LLMC_FILE = re.compile(r"s:(\d+)((?:\s+\w+:" + NUM + r")+)\s*$")  # llm.c's -o log: s:100 trl:3.21 lr:... norm:...
LLMC_OUT = re.compile(r"step\s+(\d+)/\d+ \| loss (" + NUM + r")[^|]*\|(?: norm (" + NUM + r")[^|]*\|)?"
                      r"(?: lr (" + NUM + r") \|)?")  # llm.c's stdout: step   1/74 | loss 11.01 (+nanz)| norm ...
NANOGPT = re.compile(r"iter (\d+): loss (" + NUM + "),")  # iter 100: loss 3.2100, time 12.34ms, mfu 0.50%
MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)")  # iteration 100/ 1000 | ... | lm loss: ... |
MEGATRON_FIELD = re.compile(r"\s*([a-z][a-z0-9 _-]*?)\s*:\s*(" + NUM + r")\s*$", re.IGNORECASE)
TORCHTUNE = re.compile(r"Step (\d+) \| ((?:\w+:\S+\s*)+)$")  # torchtune's DiskLogger: Step 100 | loss:1.23 lr:2e-05 ...
FAIRSEQ = re.compile(r"epoch \d+:\s+\d+ / \d+ (.*\bnum_updates=\d+.*)$")  # fairseq train_inner: ... loss=4.1, ..., num_updates=100, ...
FAIRSEQ_PAIR = re.compile(r"(\w+)=(" + NUM + ")")
HF_DICT = re.compile(r"\{'(?:loss|eval_\w+|train_runtime)'[^{}]*\}")  # {'loss': 3.21, 'grad_norm': ..., ...}
HF_PAIR = re.compile(r"'(\w+)': (?:np\.float\d*\(|tensor\()?(" + NUM + ")")


def _modded_nanogpt(line):
    m = MODDED.match(line)
    if m is None:
        return None
    record = {"step": m.group(1)}
    for key, value in KEY_VALUE.findall(m.group(2)):
        record["loss" if key == "train_loss" else key] = value
    return record


def _llmc_file(line):
    m = LLMC_FILE.match(line)
    if m is None:
        return None
    names = {"trl": "loss", "tel": "val_loss", "norm": "grad_norm", "lr": "lr"}
    record = {"step": m.group(1)}
    for key, value in KEY_VALUE.findall(m.group(2)):
        if key in names:
            record[names[key]] = value
    return record


def _llmc_stdout(line):
    m = LLMC_OUT.match(line)
    if m is None:
        return None
    return {k: v for k, v in zip(("step", "loss", "grad_norm", "lr"), m.groups()) if v is not None}


def _nanogpt(line):
    m = NANOGPT.match(line)
    return None if m is None else {"step": m.group(1), "loss": m.group(2)}


def _megatron(line):
    m = MEGATRON.search(line)
    if m is None:
        return None
    names = {"lm loss": "loss", "grad norm": "grad_norm", "learning rate": "lr"}
    record = {"step": m.group(1)}
    for field in m.group(2).split("|"):
        f = MEGATRON_FIELD.match(field)
        if f and f.group(1).lower() in names:
            record[names[f.group(1).lower()]] = f.group(2)
    return record


def _torchtune(line):
    m = TORCHTUNE.match(line)
    if m is None:
        return None
    record = {"step": m.group(1)}
    record.update((key, value) for key, value in KEY_VALUE.findall(m.group(2)) if key in ("loss", "lr", "grad_norm"))
    return record


def _fairseq(line):
    m = FAIRSEQ.search(line)  # after the logging prefix: 2024-01-01 00:00:00 | INFO | train_inner |
    if m is None:
        return None
    names = {"num_updates": "step", "loss": "loss", "gnorm": "grad_norm", "lr": "lr"}  # the step: updates, not the epoch's count
    return {names[key]: value for key, value in FAIRSEQ_PAIR.findall(m.group(1)) if key in names}


def _hf_trainer(line):
    m = HF_DICT.search(line)  # the Trainer's progress bar may share the line
    if m is None:
        return None
    record = dict(HF_PAIR.findall(m.group(0)))  # no step: the training records are numbered in order
    return record if "loss" in record else None  # eval and end-of-training summaries are not training steps


TEXT_FORMATS = {  # name -> line parser; the format whose parser knows most of the first lines wins
    "modded-nanogpt": _modded_nanogpt,
    "llm.c": _llmc_file,
    "llm.c-stdout": _llmc_stdout,
    "nanogpt": _nanogpt,
    "megatron": _megatron,
    "hf-trainer": _hf_trainer,
    "torchtune": _torchtune,
    "fairseq": _fairseq,
}


def _text_records(path, parse):
    for line, text in enumerate(_lines(path), 1):
        record = parse(text)
        if record:
            yield line, record


# --- which reader: by content, the suffix breaking ties ----------------------------------------------

FORMATS = ("csv", "tsv", "jsonl", "json", "tensorboard", *TEXT_FORMATS)


def sniff(path):
    """The format of a log file, recognised from its first lines (the suffix only breaks ties)."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    if b"brain.Event" in head[:128] or "tfevents" in path.name:
        return "tensorboard"
    if not head.strip():
        raise CliError("the file is empty")
    if b"\0" in head:
        raise CliError("holds NUL bytes: a binary file, not a text log")
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    lines = [ln.strip() for ln in text.split("\n")[:SNIFF_LINES] if ln.strip()]
    if len(head) == SNIFF_BYTES and len(lines) > 1:
        lines.pop()  # the last line may be cut
    first = lines[0]
    if first.startswith("["):
        return "json"
    if first.startswith("{") and not first.startswith("{'"):
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            return "json"  # a document over several lines, such as trainer_state.json
        return "json" if isinstance(record, dict) and "log_history" in record else "jsonl"
    known = {name: sum(parse(line) is not None for line in lines) for name, parse in TEXT_FORMATS.items()}
    best = max(known, key=known.get)
    if known[best]:
        return best
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if "\t" in first:
        return "tsv"
    if "," in first:
        return "csv"
    raise CliError(f"not a training log this tool knows (first line: {first[:60]!r}); formats: "
                   f"{', '.join(FORMATS)} (recognised by content; --format NAME forces one)")


def open_log(path, loss_name=None, fmt=None):
    """(format, Columns, chunk iterator, Unparsed) for a log file; raises CliError when unreadable. A chunk holds
    a stretch of rows column by column: (steps, losses, grads, lrs, [extra series], complete), None for an
    absent role; complete when no value is missing."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise CliError("no such file or directory") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO or a device would block or never end
        raise CliError("not a regular file (a FIFO, socket or device): refused")
    unparsed = Unparsed()
    if stat.S_ISDIR(mode):
        if fmt not in (None, "tensorboard"):
            raise CliError(f"a directory, not a {fmt} file")
        fmt = "tensorboard"
    fmt = fmt or sniff(path)
    if fmt == "tensorboard":
        cols, rows = _dict_rows(_event_records(path), loss_name, unparsed)
    elif fmt in ("csv", "tsv"):
        cols, rows = _csv_chunks(path, "\t" if fmt == "tsv" else ",", loss_name, unparsed)
    elif fmt == "jsonl":
        cols, rows = _dict_rows(_jsonl_records(path, unparsed), loss_name, unparsed)
    elif fmt == "json":
        cols, rows = _dict_rows(_json_records(path), loss_name, unparsed)
    else:
        cols, rows = _dict_rows(_text_records(path, TEXT_FORMATS[fmt]), loss_name, unparsed)
    return fmt, cols, rows, unparsed


# --- one series: robust baseline and spike episodes -----------------------------------------------


class Spike:
    """A finished spike. Steps come from the log; rows count data rows of the file."""

    __slots__ = ("step", "start", "end", "type", "baseline", "peak", "recovery_steps", "grad_norm_lead",
                 "level_after", "ended_by", "grad_norm_peak", "lr", "start_row", "peak_row", "end_row")

    def __init__(self, episode, kind, end, level_after, ended_by, end_row):
        self.step = episode.peak_step
        self.start = episode.start
        self.end = end
        self.type = kind
        self.baseline = episode.baseline
        self.peak = episode.peak
        self.recovery_steps = None if kind in ("no_recovery", "divergence") or end is None else end - episode.peak_step
        self.grad_norm_lead = None
        self.level_after = level_after
        self.ended_by = ended_by
        self.grad_norm_peak = episode.grad_peak
        self.lr = episode.lr
        self.start_row, self.peak_row, self.end_row = episode.start_row, episode.peak_row, end_row

    def to_json(self):
        return {
            "step": _int(self.step), "start": _int(self.start), "end": _int(self.end), "type": self.type,
            "baseline": _float(self.baseline), "peak": _float(self.peak),
            "recovery_steps": _int(self.recovery_steps), "grad_norm_lead": _int(self.grad_norm_lead),
            "level_after": _float(self.level_after), "ended_by": self.ended_by,
            "grad_norm_peak": _float(self.grad_norm_peak), "lr": _float(self.lr),
        }


class Episode:
    """A spike from the value that crossed the threshold until it is classified."""

    def __init__(self, step, row, x, baseline, sigma, threshold, snapshot, trend=(0.0, 0)):
        self.start, self.start_row = step, row
        self.baseline, self.threshold = baseline, threshold
        self.slope, self.lag = trend  # the trend the run was on: per row (<= 0), rows the baseline lags behind
        self.band = baseline + max(BAND_Z * sigma, BAND_REL * abs(baseline))
        self.noise = (self.band - baseline) / BAND_Z  # sigma, floored like the band
        self.snapshot = snapshot  # the pre-spike window, to restore after a rollback past the spike
        self.peak, self.peak_step, self.peak_row = x, step, row
        self.tail = []  # (step, row, value) after the peak, CONFIRM at most: the recovery test
        self.recent = deque(maxlen=BLOCK)  # (row, step, value): the latest values, for a verdict by level
        self.recent.append((row, step, x))
        self.block, self.block_step = [x], step
        self.blocks = []  # (first step, median) of each full block since the start
        self.last_block = None  # the values of the latest full block: the new baseline after settling
        self.count = 1
        self.grad_peak = None
        self.lr = None
        self.pending = None  # a recovery verdict while the level after it is checked against the trend
        self.after = []  # (step, row, value) after the first value back in the band: fed again afterwards
        self.dropped = []  # ...those the check slid past (only the last WINDOW of them are fed again)
        self.back_step = None  # where the loss came back into the band

    def add(self, step, row, x):
        """Feed one finite value; returns a verdict (type, end, level_after, ended_by) or None."""
        self.count += 1
        self.recent.append((row, step, x))
        if self.pending is not None:
            self.after.append((step, row, x))
            if x > self.threshold + max(self.pending[2] - self.baseline, 0.0):  # a new spike (over the level
                return self.pending  # the loss came back to) before the level could be checked: the recovery stands
            if len(self.after) < VERIFY:
                return None
            verdict = self._offset()
            if verdict is None:  # still coming down: slide on by a block (any spike in it ended the check)
                if self.count >= MAX_FOLLOW:
                    return self.pending
                self.dropped.extend(self.after[:BLOCK])
                del self.after[:BLOCK]
            return verdict
        tail = self.tail
        if tail and x > self.threshold and all(v <= self.band for _, _, v in tail):
            level = statistics.median(v for _, _, v in tail)  # back in the band, then up again: a new spike
            tail.append((step, row, x))
            return self._recovered(tail[0][0], tail[0][1], level)
        if x > self.peak:
            self.peak, self.peak_step, self.peak_row = x, step, row
            self.tail.clear()
        else:
            tail.append((step, row, x))
            if len(tail) == CONFIRM:
                values = [v for _, _, v in tail]
                if values[0] <= self.band and statistics.median(values) <= self.band:
                    self.pending = self._recovered(tail[0][0], tail[0][1], statistics.median(values))
                    self.after, self.back_step = tail[1:], tail[0][0]
                    return None
                del tail[0]
        if not self.block:
            self.block_step = step
        self.block.append(x)
        if len(self.block) == BLOCK:
            self.blocks.append((self.block_step, statistics.median(self.block)))
            self.last_block, self.block = self.block, []
            verdict = self._settled(step)
            if verdict:
                return verdict
        if self.count >= MAX_FOLLOW:
            return self.by_level("horizon")
        return None

    def _recovered(self, step, row, level):
        """Back in the band at `step`: fast within FAST_STEPS steps, or on the very next row of a sparse log."""
        kind = "fast_recovery" if step - self.peak_step <= FAST_STEPS or row - self.peak_row <= 1 else "slow_recovery"
        return kind, step, level, "recovered"

    def _offset(self):
        """Back in the band, but is it back on the trend? The medians of the two halves of the last VERIFY values
        against the pre-spike trend: higher by OFFSET_Z noise sigma and OFFSET_REL, and no longer coming down
        faster than that trend, is a lasting offset however noisy the run (no_recovery); within that, the
        recovery stands; still coming down: None, look again a block later."""
        values = [v for _, _, v in self.after]
        half = len(values) // 2
        early, late = statistics.median(values[:half]), statistics.median(values[half:])
        rows = min(self.after[-1][1] - self.start_row, 2 * WINDOW)  # a trend is not extrapolated further
        fall = self.slope * (rows + self.lag)  # <= 0: where the pre-spike trend would have taken the loss
        expected = self.baseline + fall
        falling = (early - late) + self.slope * half  # beyond the trend's own fall over those rows
        margin = max(OFFSET_Z * self.noise, OFFSET_REL * abs(self.baseline))
        # A fast fall slows down and a straight line overshoots it: below its pre-spike level, a loss was not set back.
        if late - expected <= margin or late <= self.baseline:
            return self.pending
        if falling > FALL_Z * self.noise:
            return None
        self.last_block = values[half:]
        return "no_recovery", self.back_step, late, "settled"

    def _settled(self, step):
        """At the end of a block: has the level stopped coming down above the band?"""
        if len(self.blocks) < MIN_SETTLE_BLOCKS:
            return None
        first_step, level = self.blocks[-1]
        earlier_step, earlier = self.blocks[(len(self.blocks) - 1) // 2]
        if level <= self.band:
            return None  # on its way back: the tail test will call the recovery
        tol = SETTLE_TOL * self.noise
        descent = earlier - level
        if descent > tol:
            rate = descent / max(first_step - earlier_step, 1)
            if (level - self.band) / rate <= SETTLE_FACTOR * max(step - self.peak_step, 1):
                return None  # still coming down at a pace that brings it back: keep following
        if descent < -tol or self._diverged(level):
            return "divergence", None, level, "settled"
        return "no_recovery", first_step, level, "settled"

    def _diverged(self, level):
        return self.baseline > 0 and level >= DIVERGE_RATIO * self.baseline

    def by_level(self, ended_by):
        """Verdict when the follow-up is cut short (log end, resume, horizon): judge by the last level."""
        if self.pending is not None:
            verdict = (self._offset() if len(self.after) >= BLOCK else None) or self.pending
            return verdict[:3] + (ended_by,) if verdict[3] == "recovered" else verdict
        after = [(step, row, x) for row, step, x in self.recent if row > self.peak_row]
        if not after:
            return "divergence", None, None, ended_by  # the log ends (or rolls back) at the peak
        level = statistics.median(x for _, _, x in after)
        if level <= self.band:
            back = next((s, r) for s, r, x in after if x <= self.band)
            return self._recovered(*back, level)[:3] + (ended_by,)
        if self._diverged(level):
            return "divergence", None, level, ended_by
        return "no_recovery", after[-1][0], level, ended_by


def _trend(values):
    """(level at the newest value, robust sigma of the residuals, slope per row) of a window that falls: a line
    through the medians of its two halves, so the baseline follows a fast-falling loss instead of lagging."""
    n, half = len(values), len(values) // 2
    slope = (sorted(values[half:])[half >> 1] - sorted(values[:half])[half >> 1]) / half
    r = sorted(v - slope * i for i, v in enumerate(values))
    return r[n >> 1] + slope * (n - 1), (r[(3 * n) >> 2] - r[n >> 2]) / IQR_PER_SIGMA, min(slope, 0.0)


class Series:
    """One logged series: a rolling window that spike values never enter, and its spike episodes.

    Like llm.c's outlier detector (which takes a flagged value back out of its window) and ZClip
    (which does not let a spike update its running statistics), values inside a spike never reach
    the baseline, so a spike cannot lift the threshold for the next one. Unlike them we use the
    median and the interquartile range, which a few outliers cannot move, instead of mean and variance.
    """

    def __init__(self, name, on_block=None, on_reset=None):
        self.name = name
        self.on_block, self.on_reset = on_block, on_reset  # hooks: a block median; the baseline was rebuilt (why)
        self.window = deque(maxlen=WINDOW)
        self.med = self.sigma = None
        self.slope = 0.0  # per row: the trend of the window when it falls clearly, else 0
        self.scale = 0.0  # the highest baseline so far: the run's own unit for the absolute floors
        self.blocks = deque(maxlen=TREND_BLOCKS)  # (row, median) of the latest healthy blocks: the trend
        self.falling = False  # the latest block median is far below the one two blocks earlier
        self.threshold = math.inf
        self.until_refresh = 1
        self.refreshes = 0
        self.episode = None
        self.spikes = []
        self.snapshot = None  # (start step, window) before the last spike that re-based the window
        self.last_step = -math.inf
        self.nonfinite = []  # [first step, last step, count, first row] per run of NaN/inf values

    def _refresh(self, step, row):
        """Recompute median, robust sigma and threshold from the window (every REFRESH healthy values); every
        BLOCK values also a block median, for the trend, the creep watch, and to tell a fast fall."""
        window = self.window
        w = sorted(window)
        n = len(w)
        if n < MIN_POINTS:
            self.med = self.sigma = None
            self.threshold, self.until_refresh = math.inf, 1
            return
        self.until_refresh = REFRESH
        self.refreshes += 1
        block = not self.refreshes % (BLOCK // REFRESH)
        if block:
            b = sorted(itertools.islice(window, n - BLOCK, n))
            level = (b[(BLOCK >> 1) - 1] + b[BLOCK >> 1]) / 2
            blocks = self.blocks
            blocks.append((row, level))
            local = (b[(3 * BLOCK) >> 2] - b[BLOCK >> 2]) / IQR_PER_SIGMA  # noise, and a little of the trend
            self.falling = n == WINDOW and len(blocks) >= 3 and blocks[-3][1] - level > FALLING_Z * local
        if self.falling:  # the median lags above a fast-falling curve and the trend widens the IQR: a line instead
            med, sigma, slope = _trend(list(window))
            last_row, last = self.blocks[-1]  # a drop is a step, not a slope: never below the latest block
            med = max(med, last + slope * ((BLOCK >> 1) + row - last_row))
        else:
            med, sigma, slope = w[n >> 1], (w[(3 * n) >> 2] - w[n >> 2]) / IQR_PER_SIGMA, 0.0
            if n < WINDOW:  # a short log (one row per epoch) may be all descent: a line, if it explains the spread,
                values = list(window)  # through the whole window or, on a curve that bends, its newer half
                fits = [fit for fit in (_trend(values), _trend(values[n >> 1:])) if fit[2] < 0 and fit[1] < EARLY_TREND * sigma]
                if fits:
                    med, sigma, slope = min(fits, key=lambda fit: fit[1])  # the line that leaves the least spread,
                    recent = sorted(values[-EARLY_RECENT:])  # never under the latest values: a bending curve leaves a
                    med = max(med, recent[len(recent) >> 1])  # line below it
        self.med, self.sigma, self.slope = med, sigma, slope
        size = med if med >= 0 else -med
        if size > self.scale:
            self.scale = size
        self.threshold = med + max(SPIKE_Z * sigma, SPIKE_REL * size, SPIKE_ABS * self.scale)
        if block and self.on_block is not None:
            self.on_block(step, row, level, self.scale)

    def trend(self):
        """(slope per row, lag in rows) of the run before now: from the two oldest and two newest of the last
        TREND_BLOCKS block medians (the median of 64 values over 200 rows: far steadier than the window's own
        halves), 0 when it rises or there is too little; the lag is the plain median's, unless it followed a fall."""
        b = self.blocks
        if len(b) < TREND_BLOCKS:
            return 0.0, 0
        slope = ((b[-1][1] + b[-2][1]) - (b[0][1] + b[1][1])) / (b[-1][0] + b[-2][0] - b[0][0] - b[1][0])
        return min(slope, 0.0), 0 if self.slope else WINDOW // 2

    def feed(self, step, row, x):
        """Take one value of the series at `step` (`row`: the row of the file, a clock shared by all series)."""
        previous = self.last_step
        if step <= previous:
            self.rollback(step, row)
            previous = -math.inf
        self.last_step = step
        if x - x != 0:  # NaN or inf
            self._nonfinite(step, row, previous)
        elif self.episode is not None:
            self._follow(step, row, x)
        elif x > self.threshold:
            self.episode = Episode(step, row, x, self.med, self.sigma, self.threshold, list(self.window), self.trend())
        else:  # healthy: the common case, kept short
            self.window.append(x)
            self.until_refresh -= 1
            if not self.until_refresh:
                self._refresh(step, row)

    def feed_run(self, steps, values, row, start, stop, strict=False):
        """Feed values[start:stop] (values[i] is at row + i; steps increasing, no None). A stretch up to the next
        refresh that is all finite and under the threshold, with no spike open, goes into the window at once: the
        same result as one value at a time, several times faster. Anything else is fed value by value, or, when
        `strict`, left to the caller: returns the index it got to."""
        i = start
        window = self.window
        while i < stop:
            if self.episode is None:
                k = min(self.until_refresh, stop - i)
                stretch = values[i:i + k]
                total = sum(stretch)
                if total - total == 0 and max(stretch) <= self.threshold:
                    window.extend(stretch)
                    i += k
                    self.last_step = steps[i - 1]
                    self.until_refresh -= k
                    if not self.until_refresh:
                        self._refresh(self.last_step, row + i - 1)
                    continue
            if strict:
                return i
            self.feed(steps[i], row + i, values[i])
            i += 1
        return i

    def _follow(self, step, row, x):
        """Feed the open spike; close it once it has a verdict."""
        episode = self.episode
        verdict = episode.add(step, row, x)
        if verdict:
            self._close(verdict, row)
            if verdict[3] == "recovered":  # the values that confirmed the recovery come after it and
                self.last_step = -math.inf  # may hold the next spike: take them again as new values
                for later in ((episode.dropped + episode.after)[-WINDOW:] if episode.pending else episode.tail[1:]):
                    self.feed(*later)

    def _nonfinite(self, step, row, previous):
        if self.nonfinite and self.nonfinite[-1][1] == previous:  # the run goes on
            run = self.nonfinite[-1]
            run[1] = step
            run[2] += 1
        else:
            self.nonfinite.append([step, step, 1, row])
        if self.episode is not None:
            self._close(self.episode.pending or ("divergence", None, None, "nonfinite"), row)

    def _close(self, verdict, row):
        kind, end, level, ended_by = verdict
        episode = self.episode
        self.spikes.append(Spike(episode, kind, end, level, ended_by, row))
        self.episode = None
        if kind in ("no_recovery", "divergence") and ended_by in ("settled", "horizon"):
            self.snapshot = (episode.start, episode.snapshot)  # the level moved: rebuild the baseline there
            self._reset(episode.last_block, row, kind)

    def _reset(self, values, row, why):
        self.window = deque(values, maxlen=WINDOW)
        self.blocks.clear()
        self.falling = False
        self.refreshes = 0
        self._refresh(self.last_step, row)
        if self.on_reset is not None:
            self.on_reset(why)

    def repeat_ended(self, gap, row):
        """The data stopped repeating: the values before the jump read `gap` too low.

        An open spike is measured from the level the loss really had, its baseline plus the gap. If its
        peak stays under the threshold of that level, it was only the jump back up and is no spike.
        The window, held at the repeated level since the spike opened, moves up by the gap as well.
        Returns whether a spike stays open.
        """
        episode = self.episode
        if episode is None:  # the jump stayed under the threshold: the window follows it on its own
            if self.on_reset is not None:
                self.on_reset("repeat_data")  # but the low of the repeated stretch is no level to climb from
            return False
        episode.baseline += gap
        episode.threshold += gap
        episode.band += gap
        if episode.peak <= episode.threshold:
            self.episode = None
        self._reset([x + gap for x in self.window], row, "repeat_data")  # the pre-spike window, corrected
        return self.episode is not None

    def rollback(self, step, row):
        """Steps went backwards. Close an open spike; restore the pre-spike baseline if we went past it."""
        self.last_step = -math.inf
        self.blocks.clear()  # the trend before a resume is another run's; a drop right after it is a step
        self.falling = False
        if self.episode is not None:
            self._close(self.episode.by_level("resume"), row)
        if self.snapshot is not None and step <= self.snapshot[0]:
            self._reset(self.snapshot[1], row, "rollback")
            self.snapshot = None

    def finish(self, row):
        if self.episode is not None:
            self._close(self.episode.by_level("log_end"), row)


# --- the whole log: spikes plus events --------------------------------------------------------------


class Creep:
    """Divergence without a spike: healthy block medians climbing well above their lowest level."""

    def __init__(self, events):
        self.events, self.event = events, None
        self.reset()

    def reset(self, why=None):
        """Start afresh after a resume or a re-based baseline; after a divergence, stay quiet until a resume.
        After repeat_data a rise already reported is withdrawn: it was the loss leaving the repeated data."""
        if why == "repeat_data" and self.event is not None:
            self.events.remove(self.event)
        self.low, self.low_step, self.above, self.event = None, None, 0, None
        self.paused = why == "divergence"  # its further climb is the divergence already reported

    def add_block(self, step, row, level, scale):
        if self.paused:
            return
        if self.low is None or level < self.low:
            if self.event is not None:  # a new low: the rise was not a divergence after all
                self.events.remove(self.event)
                self.event = None
            self.low, self.low_step, self.above = level, step, 0
            return
        if level <= self.low + max(CREEP_REL * abs(self.low), CREEP_ABS * scale):
            self.above = 0
            return
        self.above += 1
        if self.event is None and self.above >= CREEP_BLOCKS:
            self.event = {"kind": "non_spike_divergence", "step": self.low_step, "detected_step": step,
                          "last_step": step, "from": self.low, "to": level, "_row": row}
            self.events.append(self.event)
        if self.event is not None:
            self.event["last_step"] = step
            self.event["to"] = max(self.event["to"], level)


class ResumeWatch:
    """After a resume: is the loss suspiciously lower than before it, and does it then jump back up?"""

    def __init__(self, step, row, ref, series, events):
        self.step, self.row, self.ref, self.series, self.events = step, row, ref, series, events
        self.sigma = series.sigma
        self.after = []  # the first BLOCK values after the resume
        self.gap = None  # how much lower they were, once the drop is seen; then we watch for the jump back
        self.recent = deque(maxlen=JUMP_CONFIRM)  # (step, row, value, threshold)

    def add(self, step, row, x):
        """Take one loss value (after the series took it); True once there is nothing more to watch for."""
        level_now = self.series.med  # the baseline median follows the curve while the data repeats
        if x - x != 0 or level_now is None:
            return False
        if self.gap is None:
            self.after.append(x)
            if len(self.after) < BLOCK:
                return False
            low = statistics.median(self.after)
            drop = self.ref - low
            if drop < max(DROP_Z * self.sigma, DROP_REL * abs(self.ref)):
                return True
            self.gap, self.low = drop, low
            self.events.append({"kind": "resume_drop", "step": self.step, "before": self.ref, "after": low,
                                "drop_pct": 100.0 * drop / abs(self.ref), "_row": self.row})
            return False
        self.recent.append((step, row, x, level_now + self.gap / 2))  # half the drop back up
        first_step, first_row, first, threshold = self.recent[0]
        if len(self.recent) == JUMP_CONFIRM and first > threshold:
            level = statistics.median(v for _, _, v, _ in self.recent)
            if level > threshold:
                spike = self.series.repeat_ended(self.gap, row)
                self.events.append({"kind": "repeat_data", "step": first_step, "resume_step": self.step,
                                    "before": self.ref, "low": self.low, "high": level,
                                    "expected": level_now + self.gap, "spike": spike, "_row": first_row})
                return True
        return False


class Curve:
    """A bounded copy of one series for the plot: buckets keep their lowest and highest value."""

    LIMIT = 4000  # buckets; two points each is plenty for a 10-inch wide figure

    def __init__(self):
        self.buckets = []  # [segment, step_lo, lo, step_hi, hi, count]
        self.size = 1

    def add(self, segment, step, x):
        b = self.buckets[-1] if self.buckets else None
        if b is None or b[0] != segment or b[5] >= self.size:
            self.buckets.append([segment, step, x, step, x, 1])
            if len(self.buckets) > self.LIMIT:
                self._halve()
            return
        if x < b[2]:
            b[1], b[2] = step, x
        if x > b[4]:
            b[3], b[4] = step, x
        b[5] += 1

    def _halve(self):
        merged = []
        for b in self.buckets:
            last = merged[-1] if merged else None
            if last is not None and last[0] == b[0] and last[5] < 2 * self.size:
                if b[2] < last[2]:
                    last[1], last[2] = b[1], b[2]
                if b[4] > last[4]:
                    last[3], last[4] = b[3], b[4]
                last[5] += b[5]
            else:
                merged.append(list(b))
        self.buckets = merged
        self.size *= 2

    def segments(self):
        """{segment: (steps, values)} in step order."""
        out = {}
        for seg, s_lo, lo, s_hi, hi, _ in self.buckets:
            steps, values = out.setdefault(seg, ([], []))
            for s, v in sorted({(s_lo, lo), (s_hi, hi)}):
                steps.append(s)
                values.append(v)
        return out


class Report:
    """Everything found in one log; `to_json()` is the DESIGN.md contract (plus a `log` summary)."""

    def __init__(self, path, fmt, cols):
        self.path, self.format, self.columns = Path(path), fmt, cols
        self.spikes, self.events, self.nan_step = [], [], None
        self.values = 0
        self.first_step = self.last_step = None
        self.curves = {}
        self.resumes = []  # (row, step, step before the resume)
        self.dataset_spikes = {}  # series name -> its own spikes, when there are per-dataset losses

    def to_json(self):
        events = sorted(self.events, key=lambda e: e["_row"])
        return {
            "spikes": [s.to_json() for s in self.spikes],
            "events": [{k: _clean(v) for k, v in e.items() if k != "_row"} for e in events],
            "nan_step": _int(self.nan_step),
            "log": {"path": str(self.path), "format": self.format, "loss_column": self.columns.loss,
                    "grad_norm_column": self.columns.grad, "lr_column": self.columns.lr,
                    "dataset_columns": self.columns.extras, "values": self.values,
                    "first_step": _int(self.first_step), "last_step": _int(self.last_step)},
        }


def analyze(path, loss_name=None, keep_curves=False, fmt=None):
    """Read one log and return its Report. Memory: one window per series plus what is found."""
    fmt, cols, rows, unparsed = open_log(path, loss_name, fmt)
    report = Report(path, fmt, cols)
    events = report.events
    creep = Creep(events)
    main = Series(cols.loss, on_block=creep.add_block, on_reset=creep.reset)
    grad = Series(cols.grad)
    extras = [Series(name) for name in cols.extras]
    curves = report.curves
    if keep_curves:
        curves.update((name, Curve()) for name in [cols.loss, cols.grad, *cols.extras] if name)
    watch = None  # the ResumeWatch of the latest resume, while it still has something to say
    has_step, has_grad, has_lr = cols.step is not None, cols.grad is not None, cols.lr is not None
    first_step = None
    last_step = -math.inf
    values = segment = 0
    row = 0  # the row of the file (data rows only) at the start of the chunk
    feed_loss, feed_grad = main.feed, grad.feed  # bound once: the loop below runs once per row
    for steps, losses, grads, lrs, extra, complete in rows:
        n = len(losses)
        if not has_step:
            steps = range(row, row + n)
        fast = complete and not curves and steps[0] > last_step and _increasing(steps)
        i = 0
        while i < n:
            if fast and watch is None and main.episode is None:  # healthy stretches, a block at a time
                done = main.feed_run(steps, losses, row, i, n, strict=True)
                if done > i:
                    if grads is not None:
                        grad.feed_run(steps, grads, row, i, done)
                    for series, x in zip(extras, extra):
                        series.feed_run(steps, x, row, i, done)
                    first_step = steps[i] if first_step is None else first_step
                    last_step = steps[done - 1]
                    values += done - i
                    i = done
                    if i == n:
                        break
            k = i
            while i < n:  # row by row: spikes, resumes, missing values, NaN, the plot's curves
                r = row + i
                step, loss = steps[i], losses[i]
                gnorm = grads[i] if grads is not None else None
                if step is None:
                    step = last_step + 1 if values else r
                if loss is not None:
                    if step <= last_step:  # a resume or a rollback
                        events.append({"kind": "resume", "step": step, "from_step": last_step,
                                       "rollback_steps": last_step - step, "_row": r})
                        report.resumes.append((r, step, last_step))
                        main.rollback(step, r)
                        creep.reset()
                        segment += 1
                        recent = list(main.window)[-BLOCK:]  # the level just before the resume
                        watch = None
                        if recent and main.med is not None:
                            watch = ResumeWatch(step, r, statistics.median(recent), main, events)
                    elif first_step is None:
                        first_step = step
                    last_step = step
                    values += 1
                    feed_loss(step, r, loss)
                    if watch is not None and watch.add(step, r, loss):
                        watch = None
                    episode = main.episode
                    if episode is not None:
                        if episode.count == 1 and has_lr:
                            episode.lr = _number(lrs[i], cols.lr, None, Unparsed())
                        if has_grad and gnorm is not None and gnorm - gnorm == 0:
                            episode.grad_peak = gnorm if episode.grad_peak is None else max(episode.grad_peak, gnorm)
                    if curves and loss - loss == 0:
                        curves[cols.loss].add(segment, step, loss)
                if not fast:  # (in a complete chunk the other series take the stretch as a whole, below)
                    if gnorm is not None:
                        feed_grad(step, r, gnorm)
                        if curves and gnorm - gnorm == 0:
                            curves[cols.grad].add(segment, step, gnorm)
                    for series, column in zip(extras, extra):
                        x = column[i]
                        if x is not None:
                            series.feed(step, r, x)
                            if curves and x - x == 0:
                                curves[series.name].add(segment, step, x)
                i += 1
                if fast and main.episode is None and watch is None:
                    break  # back to the blocks
            if fast:  # the other series do not wait on the loss: their own spikes are found value by value
                if grads is not None:
                    grad.feed_run(steps, grads, row, k, i)
                for series, x in zip(extras, extra):
                    series.feed_run(steps, x, row, k, i)
        row += n
    row -= 1  # the last row
    if values == 0:
        bad = unparsed.columns.get(cols.loss)
        why = (" (header only)" if row < 0 else
               f" ({bad[0]} cells are not numbers, the first on line {bad[1]})" if bad else "")
        raise CliError(f"no numeric values in loss column '{cols.loss}'{why}")
    report.values, report.first_step, report.last_step = values, first_step, last_step
    if values <= MIN_POINTS:  # say so: "spikes: 0" alone would read as a clean run
        events.append({"kind": "too_short", "step": None, "values": values, "needed": MIN_POINTS + 1, "_row": -1})
    for series in (main, grad, *extras):
        series.finish(row)
    report.spikes = main.spikes
    report.dataset_spikes = {series.name: series.spikes for series in extras}
    report.nan_step = main.nonfinite[0][0] if main.nonfinite else None
    _link_grad_leads(main.spikes, grad.spikes, report.resumes)
    _grad_only(main.spikes, grad.spikes, events)
    _resume_spikes(main.spikes, report.resumes, events)
    _series_spikes(main, extras, events)
    for series in (main, grad, *extras):
        for first, last, count, first_row in series.nonfinite:
            events.append({"kind": "nonfinite", "step": first, "last_step": last, "count": count,
                           "series": series.name, "_row": first_row})
    for name, (count, line) in unparsed.columns.items():
        events.append({"kind": "unparsed", "step": None, "column": name, "count": count, "first_line": line,
                       "_row": -1})
    return report


def _increasing(steps):
    """Steps strictly increasing: no resume inside. Evenly spaced ones (most logs) are checked at C speed."""
    if isinstance(steps, range):  # the row numbers of a log without a step column
        return True
    stride = steps[1] - steps[0] if len(steps) > 1 else 1
    if stride > 0 and steps[-1] == steps[0] + stride * (len(steps) - 1):
        return steps == list(range(steps[0], steps[-1] + 1, stride))
    return all(map(operator.lt, steps, itertools.islice(steps, 1, None)))


def _link_grad_leads(spikes, grad_spikes, resumes):
    """grad_norm_lead: steps from the start of the latest grad-norm spike to the start of the loss spike."""
    grad_spikes = sorted(grad_spikes, key=lambda g: g.start_row)
    grad_rows = [g.start_row for g in grad_spikes]
    resume_rows = [r for r, _, _ in resumes]
    for spike in spikes:
        k = bisect.bisect_right(resume_rows, spike.start_row)
        since = resume_rows[k - 1] if k else -1  # a grad-norm spike before the last resume belongs elsewhere
        i = bisect.bisect_right(grad_rows, spike.start_row) - 1
        while i >= 0 and grad_rows[i] >= since:
            lead = spike.start - grad_spikes[i].start
            if lead > LEAD_STEPS and spike.start_row - grad_rows[i] > 1:
                break
            if lead >= 0:
                spike.grad_norm_lead = lead
                break
            i -= 1


def _grad_only(spikes, grad_spikes, events):
    """Grad-norm spikes that neither led a loss spike nor came during one: events of their own."""
    starts = [s.start_row for s in spikes]
    for g in grad_spikes:
        i = bisect.bisect_left(starts, g.start_row - 1)
        led = i < len(spikes) and (spikes[i].start_row - g.start_row <= 1 or spikes[i].start - g.start <= LEAD_STEPS)
        during = i > 0 and spikes[i - 1].end_row >= g.start_row
        if not (led or during) and g.peak >= GRAD_ALONE_RATIO * g.baseline:
            events.append({"kind": "grad_norm_spike", "step": g.step, "start": g.start, "baseline": g.baseline,
                           "peak": g.peak, "type": g.type, "_row": g.start_row})


def _resume_spikes(spikes, resumes, events):
    resume_rows = [r for r, _, _ in resumes]
    for spike in spikes:
        i = bisect.bisect_right(resume_rows, spike.start_row) - 1
        if i >= 0 and spike.start_row - resume_rows[i] <= RESUME_NEAR:
            row, step, _ = resumes[i]
            events.append({"kind": "resume_spike", "step": spike.step, "resume_step": step,
                           "rows_after_resume": spike.start_row - row, "type": spike.type, "_row": spike.start_row})


def _series_spikes(main, extras, events):
    """With two or more dataset series: is each spike shared by several or confined to one?"""
    extras = [s for s in extras if s.med is not None or s.spikes]  # the series that had a baseline
    if len(extras) < 2:
        return
    found = sorted((sp.start_row, sp.end_row, s.name, sp) for s in extras for sp in s.spikes)
    clusters = []
    for start_row, end_row, name, spike in found:
        if clusters and start_row <= clusters[-1]["end_row"] + SHARED_GAP:
            cluster = clusters[-1]
            cluster["end_row"] = max(cluster["end_row"], end_row)
            cluster["spikes"][name] = spike
        else:
            clusters.append({"start_row": start_row, "end_row": end_row, "spikes": {name: spike}})
    names = [s.name for s in extras]
    for c in clusters:
        spiked = [n for n in names if n in c["spikes"]]
        in_main = any(sp.start_row <= c["end_row"] + SHARED_GAP and c["start_row"] <= sp.end_row + SHARED_GAP
                      for sp in main.spikes)
        events.append({"kind": "series_spike", "step": min(sp.step for sp in c["spikes"].values()),
                       "series": spiked, "quiet": [n for n in names if n not in spiked],
                       "scope": "shared" if len(spiked) > 1 else "confined", "in_main": in_main,
                       "types": {n: c["spikes"][n].type for n in spiked}, "_row": c["start_row"]})


def _int(value):
    return None if value is None else int(value)


def _float(value):
    return None if value is None or not math.isfinite(value) else float(value)


def _clean(value):
    return _float(value) if isinstance(value, float) else value


# --- output ---------------------------------------------------------------------------------------


def _fmt(value):
    return "-" if value is None else f"{value:.4g}"


def summary(report, limit=40):
    """The plain-text report the CLI prints without --json."""
    cols = report.columns
    out = [
        f"{report.path.name} ({report.format}): {report.values} values of '{cols.loss}', "
        f"steps {_int(report.first_step)}..{_int(report.last_step)}; "
        f"grad norm: {cols.grad or 'not logged'}; dataset series: {', '.join(cols.extras) or 'none'}"
    ]
    kinds = _counts(report.spikes)
    out.append(f"spikes: {len(report.spikes)}" + (f" ({kinds})" if kinds else ""))
    if report.values <= MIN_POINTS:
        out.append(f"  detection needs at least {MIN_POINTS + 1} values (a baseline of {MIN_POINTS} first); this log "
                   f"has {report.values}: no spike could be found")
    shown = sorted(report.spikes, key=_height, reverse=True)[:limit]
    if shown:
        out.append(f"  {'peak step':>10}  {'type':<14}{'baseline':>10}{'peak':>10}{'x base':>8}"
                   f"{'recovery':>10}{'grad lead':>10}")
        for s in sorted(shown, key=lambda s: s.peak_row):
            ratio = s.peak / s.baseline if s.baseline > 0 else None
            out.append(f"  {_int(s.step):>10}  {s.type:<14}{_fmt(s.baseline):>10}{_fmt(s.peak):>10}"
                       f"{_fmt(ratio):>8}{_fmt(s.recovery_steps):>10}{_fmt(s.grad_norm_lead):>10}")
        if len(report.spikes) > limit:
            out.append(f"  ... {len(report.spikes) - limit} smaller spikes not shown (all are in --json)")
    events = report.to_json()["events"]
    out.append(f"events: {len(events) or 'none'}")
    for event in events[:limit]:
        details = ", ".join(f"{k}={_fmt(v) if isinstance(v, float) else v}" for k, v in event.items()
                            if k not in ("kind", "step"))
        out.append(f"  {event['kind']} at step {event['step']}: {details}")
    if len(events) > limit:
        out.append(f"  ... {len(events) - limit} more events (all are in --json)")
    out.append(f"nan_step: {_int(report.nan_step) if report.nan_step is not None else 'none'}")
    return "\n".join(out)


TYPES = ("fast_recovery", "slow_recovery", "no_recovery", "divergence")


def _counts(spikes):
    """'3 fast_recovery, 1 divergence': how many spikes of each type, in a fixed order."""
    return ", ".join(f"{n} {k}" for k in TYPES for n in [sum(s.type == k for s in spikes)] if n)


def _height(spike):
    return (spike.peak - spike.baseline) / abs(spike.baseline) if spike.baseline else spike.peak


TYPE_COLORS = {"fast_recovery": "tab:green", "slow_recovery": "tab:orange",
               "no_recovery": "tab:purple", "divergence": "tab:red"}
MAX_LABELS = 12  # more text labels than this hide the curve


def plot(report, out, force=False):
    """Write a PNG: the loss with every spike marked by type; grad norm below it when logged."""
    try:  # lazy: only --plot needs matplotlib
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install matplotlib") from None
    cols = report.columns
    grad_curve = report.curves.get(cols.grad) if cols.grad else None
    has_grad = bool(grad_curve and grad_curve.buckets)
    fig, axes = plt.subplots(2 if has_grad else 1, 1, figsize=(9, 5.4 if has_grad else 4), sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": [3, 1] if has_grad else [1]})
    ax = axes[0][0]
    shown = []
    for n, name in enumerate([cols.loss, *cols.extras]):
        color = "tab:blue" if n == 0 else f"C{n + 1}"
        shown += _draw(ax, report.curves[name], color, name)
        marked = report.dataset_spikes.get(name)
        if marked:  # a dataset's own spikes: shared with the other datasets or confined to this one
            ax.scatter([s.step for s in marked], [s.peak for s in marked], s=14, marker="v", color=color, zorder=3)
    for _, step, _ in report.resumes:
        ax.axvline(step, color="grey", ls=":", lw=1)
    if report.resumes:
        ax.plot([], [], color="grey", ls=":", label="resume (steps go back; faded: rolled-back data)")
    if report.nan_step is not None:
        ax.axvline(report.nan_step, color="red", ls="--", lw=1, label=f"first NaN/inf (step {_int(report.nan_step)})")
    for kind, color in TYPE_COLORS.items():
        marked = [s for s in report.spikes if s.type == kind]
        if marked:
            ax.scatter([s.step for s in marked], [s.peak for s in marked], s=26, color=color, zorder=3,
                       edgecolor="black", linewidth=0.5, label=f"{kind} ({len(marked)})")
    for n, s in enumerate(_labelled(report.spikes)):
        ax.annotate(s.type.replace("_", " "), (s.step, s.peak), textcoords="offset points",
                    xytext=(4, 5 if n % 2 else -10), fontsize=7, color=TYPE_COLORS[s.type])
    shades = {"non_spike_divergence": ("tab:red", "divergence without a spike"),
              "repeat_data": ("tab:cyan", "repeated data after a resume")}
    for e in report.events:
        if e["kind"] in shades:
            color, label = shades[e["kind"]]
            creep = e["kind"] == "non_spike_divergence"
            start, end = (e["step"], e["last_step"]) if creep else (e["resume_step"], e["step"])
            ax.axvspan(start, end, color=color, alpha=0.12, label=label)
            shades[e["kind"]] = (color, None)
            if not creep and not e["spike"]:  # the jump back up is marked as what it is, not as a spike
                ax.annotate("new data: back to the true level, no spike", (e["step"], e["high"]),
                            textcoords="offset points", xytext=(6, 8), fontsize=7, color="teal")
    _scale(ax, shown, 5, ticker)  # early training and big spikes can span a decade
    ax.set_ylabel(cols.loss)
    ax.set_title(f"{report.path.name}: {len(report.spikes)} spikes", fontsize=10)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    ax.grid(alpha=0.3)
    if has_grad:
        gax = axes[1][0]
        _scale(gax, _draw(gax, grad_curve, "tab:gray", None), 10, ticker)
        alone = [e for e in report.events if e["kind"] == "grad_norm_spike"]
        if alone:  # the loss did not move: marked on the grad-norm panel only
            gax.scatter([e["step"] for e in alone], [e["peak"] for e in alone], s=22, marker="^", color="tab:red",
                        zorder=3, label=f"grad-norm spike, no loss spike ({len(alone)})")
            gax.legend(fontsize=7, loc="best", framealpha=0.85)
        gax.set_ylabel(cols.grad)
        gax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    try:
        write_output(out, lambda handle: fig.savefig(handle, dpi=90, format=Path(out).suffix[1:].lower()), force)
    finally:
        plt.close(fig)


def _draw(ax, curve, color, label):
    """Plot each resume segment; data a later rollback went back over is drawn faded. Returns the values."""
    segments = sorted(curve.segments().items())
    values = []
    for i, (seg, (steps, vals)) in enumerate(segments):
        cut = min((s[0] for _, (s, _) in segments[i + 1:] if s), default=math.inf)
        live = [(s, v) for s, v in zip(steps, vals) if s < cut]
        dead = [(s, v) for s, v in zip(steps, vals) if s >= cut]
        if live:
            ax.plot(*zip(*live), lw=0.7, color=color, label=label)
            label = None
        if dead:
            ax.plot(*zip(*dead), lw=0.6, color=color, alpha=0.25)
        values += vals
    return values


def _scale(ax, values, ratio, ticker):
    """Log scale when all values are positive and span `ratio` or more, with 1-2-5 ticks labelled plainly."""
    if values and min(values) > 0 and max(values) / min(values) >= ratio:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _labelled(spikes):
    """Which spikes get a text label: all of a few; of many, the tallest that are not fast recoveries."""
    if len(spikes) <= 6:
        return spikes
    return sorted((s for s in spikes if s.type != "fast_recovery"), key=_height, reverse=True)[:MAX_LABELS]


# --- post-mortem draft -------------------------------------------------------------------------------

TEMPLATE_TYPE = {"fast_recovery": "1, recoverable", "slow_recovery": "1, recoverable",  # the template's types
                 "no_recovery": "2, lingering", "divergence": "3, divergent"}

CAUSE = {
    "slow_recovery": "a bad pocket of data (badly shuffled, or garbage left in) pushed the optimizer far "
                     "off course; it found its way back on its own",
    "no_recovery": "the optimizer state was knocked into a worse region and did not return: a bad batch "
                   "hitting an Adam second moment that adapts too slowly, or a learning rate too high for "
                   "this point of training",
    "divergence": "the run left its stable region: learning rate too high, numerics (fp16 range, loss "
                  "scaling) or data full of garbage, as in the failed 104B attempts before BLOOM",
}

ACTION = {
    "slow_recovery": "Let it run while the loss keeps coming down and look again a couple of hundred steps "
                     "later. If spikes like this recur, restart from a checkpoint before the spike and skip "
                     "the batches around its start (5 to 20 batches is the range commonly used).",
    "no_recovery": "The run will not catch up on its own: restart from a checkpoint well before the spike "
                   "(a common rule of thumb is 1000 steps or more earlier), skipping the batches around "
                   "its start. If it happens again after the restart, lower the learning rate 2 to 3 times.",
    "divergence": "Stop the run. Restart from a checkpoint before the spike with the batches around its "
                  "start skipped and a learning rate 2 to 3 times lower. If it keeps diverging, check the "
                  "numerics (bf16 rather than fp16) and the cleanliness of the data.",
}


def postmortem(report):
    """A markdown draft after the post-mortem template of seed 001, filled with measured numbers."""
    cols = report.columns
    events = report.to_json()["events"]
    counts = _counts(report.spikes)
    significant = [s for s in report.spikes if s.type != "fast_recovery"]
    fast = [s for s in report.spikes if s.type == "fast_recovery"]
    lines = [
        f"# Post-mortem draft: {report.path.name}",
        "",
        f"Drafted by `python diagnostics/spikes.py {report.path.name} --postmortem` from {report.values} "
        f"values of `{cols.loss}` (steps {_int(report.first_step)} to {_int(report.last_step)}). Every number "
        "is measured from the log; lines marked *fill in* need facts the log does not hold. Causes and "
        "actions are suggestions to check, not findings.",
        "",
        "## Summary",
        "",
        f"- Spikes: {len(report.spikes)}" + (f" ({counts})" if counts else ""),
        f"- First NaN/inf loss: {'step ' + str(_int(report.nan_step)) if report.nan_step is not None else 'none'}",
        f"- Resumes (steps going backwards): {len(report.resumes)}",
        f"- Other events: {', '.join(sorted({e['kind'] for e in events if e['kind'] != 'resume'})) or 'none'}",
        "- Grad norm: " + (f"`{cols.grad}`" if cols.grad else "not logged (log it: a grad-norm spike often comes first)"),
    ]
    for number, spike in enumerate(significant, 1):
        lines += _spike_section(number, spike, report, events)
    if fast:
        lines += _fast_section(fast)
    lines += _event_sections(events, report)
    return "\n".join(lines) + "\n"


def _spike_section(number, s, report, events):
    ratio = f" ({s.peak / s.baseline:.2f}x the baseline)" if s.baseline > 0 else ""
    if s.type == "slow_recovery":
        after = f"{_fmt(s.level_after)}, back inside the pre-spike noise band {s.recovery_steps} steps after the peak"
        cost = f"{_int(s.end - s.start)} steps from the start of the spike until the loss was back in its band."
    elif s.ended_by == "nonfinite":
        after = "none: the loss turned NaN/inf"
        cost = _lost_steps(s, report)
    elif s.type == "no_recovery" and s.level_after is not None and s.baseline > 0:
        after = (f"settled at {_fmt(s.level_after)}, {100 * (s.level_after / s.baseline - 1):.0f}% above the pre-spike "
                 "level: it came down, then went on along a parallel track higher than the trend it was on. That is a "
                 "lasting offset, not a recovery, even where the values fall inside the noise band of a noisy run")
        cost = _lost_steps(s, report)
    else:
        after = f"settled at {_fmt(s.level_after)}" if s.level_after is not None else "none: the log ends at the peak"
        cost = _lost_steps(s, report)
    grad = ("not logged" if not report.columns.grad else
            f"{_fmt(s.grad_norm_peak)}" + (f", its spike started {s.grad_norm_lead} steps before the loss spike"
                                           if s.grad_norm_lead is not None else ", no grad-norm spike led it"))
    related = _related(s, report, events)
    return [
        "",
        f"## Spike #{number}: step {_int(s.step)} ({s.type})",
        "",
        "### Symptoms",
        "",
        f"- Pre-spike loss (median of the last {WINDOW} healthy values): {_fmt(s.baseline)}",
        f"- Peak loss: {_fmt(s.peak)} at step {_int(s.step)}{ratio}; the spike started at step {_int(s.start)}",
        f"- Loss after the spike: {after}",
        f"- Grad norm peak during the spike: {grad}",
        f"- Learning rate when it started: {_fmt(s.lr) if report.columns.lr else 'not logged'}",
        "",
        "### Evidence",
        "",
        f"- Log: `{report.path}`, steps {_int(s.start)} to {_int(s.end) if s.end is not None else 'end of segment'}",
        f"- Batches to pull: the data fed at steps {_int(s.start) - 5} to {_int(s.step)} *(fill in sample "
        "indices from the data loader)*; the trouble may have started earlier than the batch before the spike",
        *[f"- {text}" for text in related],
        "",
        "### Classification",
        "",
        f"- Type: {s.type} (template type {TEMPLATE_TYPE[s.type]}); the follow-up ended by: {s.ended_by}",
        f"- Likely cause (to check): {CAUSE[s.type]}",
        "",
        "### Recovery action (suggested)",
        "",
        f"- {ACTION[s.type]}",
        "",
        "### Cost",
        "",
        f"- {cost}",
        "",
        "### Lessons / follow-ups",
        "",
        "- *fill in*",
    ]


def _lost_steps(s, report):
    later = [(step, before) for row, step, before in report.resumes if row > s.start_row]
    if later:
        step, before = later[0]
        return (f"{_int(before - s.start)} steps from the start of the spike to the rollback at step {_int(before)} "
                f"(resumed at step {_int(step)}), plus the steps between the checkpoint restored and the spike.")
    return (f"{_int(report.last_step - s.start)} steps from the spike to the end of the log are suspect, plus "
            "the steps between the checkpoint you restart from and the spike.")


def _related(s, report, events):
    notes = []
    for e in events:
        if e["kind"] == "resume_spike" and e["step"] == _int(s.step):
            notes.append(f"Came {e['rows_after_resume']} rows after the resume at step {e['resume_step']}: "
                         "check that RNG states and the data loader position were restored.")
    repeat = [e for e in events if e["kind"] == "repeat_data" and abs(e["step"] - s.start) <= JUMP_CONFIRM]
    for e in repeat:
        notes.append(f"Came where the repeated data after the resume at step {e['resume_step']} ran out, and rose "
                     f"clearly above the {_fmt(e['expected'])} the pre-resume trend predicts: the pre-spike loss "
                     "given above is that level, so this is a spike on top of the jump back, not the jump itself.")
    resumes_before = [step for row, step, _ in report.resumes if row <= s.start_row]
    if s.type == "no_recovery" and resumes_before and not repeat:
        notes.append(f"A resume (step {_int(resumes_before[-1])}) came before this shift to a higher level: rule "
                     "out repeated data (a sampler restarting from the beginning) before rolling back.")
    return notes


def _fast_section(fast):
    rows = sorted(fast, key=_height, reverse=True)[:20]
    lines = [
        "",
        f"## Fast-recovering spikes ({len(fast)})",
        "",
        f"Back inside the pre-spike noise band within {FAST_STEPS} steps of the peak. Largest first"
        + (f" (20 of {len(fast)}):" if len(fast) > 20 else ":"),
        "",
        "| peak step | baseline | peak | x baseline | recovery steps | grad lead |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in rows:
        ratio = _fmt(s.peak / s.baseline) if s.baseline > 0 else "-"
        lines.append(f"| {_int(s.step)} | {_fmt(s.baseline)} | {_fmt(s.peak)} | {ratio} | {s.recovery_steps} | "
                     f"{_fmt(s.grad_norm_lead)} |")
    lines += [
        "",
        "Suggested action: none needed while they stay short; training carries on as before. If the same "
        "steps spike again in another run with the same data order, the batches at those steps are the "
        "suspects: pull them and inspect or filter them.",
        "",
        f"Cost: {sum(s.end - s.start for s in fast if s.end is not None):g} steps spent above the band in total.",
    ]
    return lines


EVENT_SECTIONS = {
    "non_spike_divergence": (
        "Divergence without a spike",
        "Roll back to before the rise and restart with a lower learning rate; if each restart makes a little "
        "progress and then climbs again, look at the data and the numerics rather than at single batches.",
    ),
    "nonfinite": (
        "NaN or inf values",
        "Find the first bad step: run it again with anomaly detection and look for an overflow (fp16 range, "
        "loss scaling) or a division by zero. Restart from the last checkpoint with finite values.",
    ),
    "resume_drop": (
        "Lower loss right after a resume",
        "A loss that improves at a resume is suspicious: check that the data sampler continued where it "
        "stopped instead of starting the data stream again, and that the RNG states were restored.",
    ),
    "repeat_data": (
        "Repeated data after a resume",
        "The loss never went up: during the low stretch the model was scored on data it had already seen "
        "and partly memorised, and the jump is the loss coming back to its real level when new data arrived, "
        "so it is not listed as a spike and gives no reason to roll back. Fix the sampler's resume (or change "
        "the seed, which only hides the repetition) and do a couple of test resumes before a long run. The "
        "steps of the low stretch were spent on repeated data.",
    ),
    "resume_spike": (
        "Spikes right after a resume",
        "A spike after each resume that then recovers points at state that was not restored: the data "
        "loader position and mix, the RNG states. Compare a few batches before and after a test resume.",
    ),
    "grad_norm_spike": (
        "Gradient-norm spikes without a loss spike",
        "Nothing to undo: the loss did not move, because clipping or the optimizer's normalisation absorbed the "
        "step, or the batch was odd only for the gradient. Watch them: when they grow larger or more frequent, "
        "loss spikes often follow. The batches at those steps are the first suspects; tighter clipping or a "
        "lower learning rate the usual remedy if they keep coming.",
    ),
    "series_spike": (
        "Spikes per dataset",
        "A spike confined to one dataset points at that dataset: inspect the shard it came from, filter it "
        "or swap it out. A spike shared by all datasets points at the optimizer or the learning rate.",
    ),
}


def _event_sections(events, report):
    lines = []
    for kind, (title, action) in EVENT_SECTIONS.items():
        found = [e for e in events if e["kind"] == kind]
        if not found:
            continue
        lines += ["", f"## {title} ({len(found)})", ""]
        for e in found[:20]:
            lines.append(f"- {_describe(e)}")
        if len(found) > 20:
            lines.append(f"- ... {len(found) - 20} more in `--json`")
        lines += ["", f"Suggested action: {action}"]
    return lines


def _describe(e):
    kind = e["kind"]
    if kind == "non_spike_divergence":
        return (f"The loss crept from {_fmt(e['from'])} (lowest, around step {e['step']}) to {_fmt(e['to'])} by step "
                f"{e['last_step']} without a spike ({100 * (e['to'] - e['from']) / abs(e['from']):.0f}% higher).")
    if kind == "nonfinite":
        return (f"{e['series']}: {e['count']} non-finite values from step {e['step']} to step {e['last_step']}.")
    if kind == "resume_drop":
        return (f"Resume at step {e['step']}: the loss fell from {_fmt(e['before'])} to {_fmt(e['after'])} "
                f"({e['drop_pct']:.1f}% lower) over the first {BLOCK} values.")
    if kind == "repeat_data":
        level = (f"clearly above the {_fmt(e['expected'])} the pre-resume trend predicts: a spike on top of the "
                 "jump, in its own section" if e["spike"] else
                 f"about the {_fmt(e['expected'])} the pre-resume trend predicts: under-reported until then, not a spike")
        return (f"After the resume at step {e['resume_step']} the loss read {_fmt(e['low'])} instead of "
                f"{_fmt(e['before'])}; at step {e['step']}, {e['step'] - e['resume_step']} steps later, it jumped back "
                f"to {_fmt(e['high'])}, {level}.")
    if kind == "grad_norm_spike":
        return (f"Step {e['step']}: grad norm {_fmt(e['peak'])} against a baseline of {_fmt(e['baseline'])} "
                f"({e['type']}); the loss stayed inside its band.")
    if kind == "resume_spike":
        return (f"{e['type']} spike at step {e['step']}, {e['rows_after_resume']} rows after the resume at step "
                f"{e['resume_step']}.")
    scope = "shared by " + ", ".join(e["series"]) if e["scope"] == "shared" else "confined to " + e["series"][0]
    return f"Step {e['step']}: {scope}" + (f"; quiet: {', '.join(e['quiet'])}" if e["quiet"] else "") + "."


# --- command line ----------------------------------------------------------------------------------

OUTPUTS = {"--plot": (".png", ".svg", ".pdf"), "--postmortem": (".md", ".markdown", ".txt")}


def check_output(option, out, log, force):
    """Refuse an output path before any work: the log itself, a folder, a device, an unknown extension,
    or (without --force) a file that is already there. Nothing is written that would destroy data."""
    path = Path(out)
    if path.suffix.lower() not in OUTPUTS[option]:
        raise CliError(f"{option} {out}: unknown extension; use {', '.join(OUTPUTS[option])}")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise CliError(f"{option} {out}: no such folder {path.parent}") from None
        return
    if not stat.S_ISREG(mode):
        raise CliError(f"{option} {out}: a folder or a device, not a file: refused")
    if Path(log).exists() and path.samefile(log):
        raise CliError(f"{option} {out}: that is the log itself: refused")
    if not force:
        raise CliError(f"{option} {out}: the file exists; pass --force to overwrite it, or choose another name")


def write_output(out, write, force):
    """Call write(binary handle) on `out`, created afresh (or replaced with --force). A file this run created
    and could not finish is removed: it was ours."""
    try:
        handle = open(out, "wb" if force else "xb")
    except FileExistsError:
        raise CliError(f"{out}: the file exists; pass --force to overwrite it, or choose another name") from None
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        with handle:
            write(handle)
    except OSError as exc:
        if not force:
            Path(out).unlink(missing_ok=True)
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Find and classify loss spikes in a training log (CSV, JSONL, TensorBoard events, "
                    "HF trainer_state.json, W&B and Lightning CSV, plain-text logs of nanoGPT, llm.c, "
                    "modded-nanogpt, Megatron-LM, the HF Trainer, torchtune and fairseq); optionally plot them and draft a "
                    "post-mortem.")
    parser.add_argument("log", help="the training log, any of the formats above (recognised by content), "
                                    "or a TensorBoard event directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object (spikes, events, nan_step)")
    parser.add_argument("--plot", metavar="OUT.png", help="write a PNG (or .svg, .pdf) of the curve with the spikes marked")
    parser.add_argument("--postmortem", metavar="OUT.md", help="write a markdown post-mortem draft")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --plot/--postmortem file")
    parser.add_argument("--loss", metavar="COLUMN", help="the loss column when it is not loss/train_loss/train/loss")
    parser.add_argument("--format", choices=FORMATS, help="read the log as this format instead of recognising it")
    args = parser.parse_args(argv)
    try:
        try:
            for option, out in (("--plot", args.plot), ("--postmortem", args.postmortem)):
                if out:
                    check_output(option, out, args.log, args.force)
            report = analyze(args.log, args.loss, keep_curves=bool(args.plot), fmt=args.format)
            if args.plot:
                plot(report, args.plot, args.force)
            if args.postmortem:
                text = postmortem(report).encode("utf-8")
                write_output(args.postmortem, lambda handle: handle.write(text), args.force)
        except CliError as exc:
            print(f"spikes.py: {args.log}: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"spikes.py: {args.log}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            return 2
        text = json.dumps(report.to_json(), indent=1, allow_nan=False) if args.json else summary(report)
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except OSError as exc:  # `spikes.py log.csv | head` closed the pipe, or stdout is a full disk
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
            return 0 if isinstance(exc, BrokenPipeError) else 1
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130


if __name__ == "__main__":
    sys.exit(main())
