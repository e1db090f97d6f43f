"""Loss-spike forensics: read a training log, find and classify every spike, draft the post-mortem.

Symptom
-------
The loss curve jumped, crept upwards, turned NaN, or looked suspiciously good after a restart, and
you need to know which known pattern it is before you choose: carry on, skip some batches, roll
back, lower the learning rate, swap a dataset, or fix the resume code.

What it checks
--------------
It reads the log once, as a stream, and recognises its format by content (--format NAME forces one):
CSV or TSV (W&B exports, Lightning's CSVLogger, YOLOv8's results.csv and stable-baselines3's progress.csv
included), JSONL (detectron2's metrics.json, mmdetection's log.json, LLaMA-Factory's trainer_log.jsonl), a
TensorBoard event file or directory, a JSON document (the HF Trainer's `trainer_state.json`, Megatron-LM's
golden values, a list of records), llm.c's logs (`s:100 trl:3.21 ...` and its stdout), and any other plain
text: every number next to a name on a line (`loss: 1.23`, `loss=1.23`, `loss 1.23`, `'loss': 1.23`,
`lm loss: 1.2E+00`, dict and JSON fragments), colour codes stripped, bytes that are not UTF-8 dropped from
their line (counted in an unparsed event), a line that says it is validation left out; and a table printed
with `|` between its cells (a header of names, then rows of numbers). That covers the
stdout of nanoGPT, modded-nanogpt, Megatron-LM, the HF Trainer, torchtune, fairseq, detectron2,
mmdetection, OpenNMT-py, YOLOX and DeepSpeed-Chat. The step is the log's own counter: `step` (a global
one first: `global_step`, `num_updates`, `current_steps`, `time/iterations`; in text, `Epoch [e][i/N]` is
(e - 1) * N + i, then `step`, `iteration`, `iter`, `it`; in a CSV without one, `epoch`; else the row
order); a counter that starts again with each epoch goes on from the epoch's last logged step plus the
logging interval. Columns are matched by name: the loss (`total_loss`, `loss`, `train_loss`, `train/loss`,
`lm loss`, `xent`, or `--loss COLUMN`; with no total, the sum of the `train/*_loss` parts, said in the
report, as is a total's parts; else the one column named like a loss, or the one of those named for training), `grad_norm` (`gnorm`), `lr`/`learning_rate`, and every column named
`loss/<x>` or `<x>/loss` (validation losses and the fp16 loss scale aside), taken as the loss of one dataset
of a mix. A W&B export's `<run> - ` prefix and Lightning's `_step` suffix are read through; summary columns
(`__MIN`, `__MAX`, `_epoch`) are left out. When no loss is found, the refusal lists the numeric series the
log holds (with their counts, where records name them).

Each series keeps a rolling baseline: the median and the interquartile range (a robust sigma) of
its last 64 healthy values; while the loss falls fast, a line through them instead (through their
logarithms for a positive loss: a fast fall is by a factor per step), so the baseline follows the fall.
Before 64 values (all of a short table of one row per epoch) and until three block medians can tell a
fast fall, a falling line through the window or its newer half is the baseline when it explains the
spread (never under the median of the latest 8 values). A positive loss whose logarithms spread by more
than 0.5 (a batch loss near zero, log-normal: its middle half spans a factor of 2 or more) has its 6
sigma widened toward where a log-normal's 6-sigma point lies, so its ordinary right tail is no spike. A value
above baseline + max(6 sigma, 5%, 0.2% of the run's highest baseline) opens a spike. So does a level shift
under that threshold, once three block refreshes have settled the baseline: the median of 7 values in a row
above the noise band (measured from the lower of the baseline and the latest block's median, and at least 5%
up) opens a spike where the shift began (a CUSUM change point: the start of the run of values that sum the
most above half-way to the band), also when a later row of it passes the threshold. And so does a shift too small
for any row test (a 1.3x offset at 1.5 sigma a row): the median of a block of 32 values 6 of its standard
errors (1.33 sigma, and 5%) over that base, a block earlier or two when lower, on a flat stretch; or, smaller still
(1.0 sigma), the median of the whole window, two blocks, 6 of its standard errors (0.94 sigma) over the window
median of a refresh before both blocks. Such a shift opens at its change point and is followed by its block medians
(back when one is in their noise band, half-way to that limit). Values inside a spike never enter the window, as in llm.c's outlier detector and ZClip, so a
burst of spikes cannot raise the bar for the next one. The spike is followed until it can be
classified, against the trend the run was on before it (DESIGN.md; the noise band is baseline +
max(3 sigma, 1%)):

  fast_recovery   back in the band within 20 steps of the peak, or on the next logged row (the first
                  value back and the median of it and the next four are in the band), and the median of
                  the next 32 within 1.33 sigma of the trend (a bump decaying from 3 sigma is in the row
                  band long before its level is back); a row past the threshold while the rows since the
                  peak sit above the band of their median is the same spike going on
  slow_recovery   back in the band, later than that
  no_recovery     stops coming down above the band (block medians of 32 values level off, or fall
                  so slowly that the band is more than 4x the time since the peak away), below 1.5x;
                  or back in the band but not on the trend: the 128 values after it sit 2% and 1.5
                  sigma or more above where the pre-spike trend leads, and above the pre-spike level,
                  and have stopped coming down (a lasting offset, however noisy the run); in a fast fall
                  that goes on after the spike (by half its pace or more), the trend is that fall, by a
                  factor per row, and the offset may sit below the pre-spike level
  divergence      levels off at 1.5x the baseline or more (the median of the block medians at that
                  level, not the latest alone), keeps rising, turns NaN/inf, or the log ends (or rolls
                  back) at the peak

Each spike in --json: step (of the peak), start, end, type, baseline, peak, recovery_steps,
grad_norm_lead (steps from the start of a grad-norm spike, found the same way at most 10 steps or one
logged row earlier, to the start of the loss spike), and also level_after, ended_by (recovered, settled,
nonfinite, resume, run_end, log_end, horizon), grad_norm_peak and lr. `nan_step` is the first NaN/inf loss.
In a log split into runs (new_run below), each spike and event also has "run": the number of the run it is in
(1 for the first; null for an event about the whole log). Events, each with "kind" and "step":

  resume                the step went backwards (restart, rollback): from_step, rollback_steps
  new_run               the step went back to the run's start and the loss with it (nearer the run's highest
                        baseline than its latest): another run written after this one, read on its own from
                        here (from_step, run: its number; `log.runs` counts them)
  resume_spike          a spike starting within 64 rows of a resume: resume_step, rows_after_resume, type
  resume_drop           the first 32 losses after a resume sit 2 sigma and 1% or more below the last 32
                        before it: before, after, drop_pct (step: the resume)
  repeat_data           after a resume_drop the loss climbs back by half the drop and stays there: the
                        low stretch was data seen before, under-reported (step: the jump; resume_step,
                        before, low; high: the median of the 16 values from the jump on; expected: the level
                        the pre-resume trend predicts there, baseline + drop; spike). The jump is no spike: a
                        spike open at the jump is measured from `expected` and kept (spike: true) only if its
                        peak clears the spike threshold of that level
  non_spike_divergence  the median of the latest 4 healthy block medians 10% (and 1% of the run's highest
                        baseline, and 3 standard errors of a block median) above its lowest so far, twice
                        running, no spike in between (step: where the rise began, a change point of
                        the block medians; detected_step, last_step, from, low_step: the lowest level and
                        where, to); withdrawn if the loss later makes a new low
  grad_norm_spike       a grad-norm spike, twice its baseline or more, that neither led a loss spike nor
                        came during one: start, baseline, peak, type
  nonfinite             a run of NaN/inf values: last_step, count, series
  series_spike          two or more dataset losses: series (those that spiked), quiet, scope ("shared"
                        or "confined"), in_main, types
  unparsed              cells that were not numbers, read as missing: column, count, first_line (step null)
  repeated_rows         JSONL, JSON and text: rows left out as a step logged again (one of the 6 latest steps,
                        and the next row goes back to the highest step or past it: two processes writing one
                        log, one a row or two behind), count, first_line (step null)
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
empty file, header only, no loss column (the line lists the series found), no numeric loss, binary
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
fewer than five values apart merge unless the loss was back in the band between them. For JSONL and event
files the first 1000 records decide the columns, for plain text the first 1000 lines that name a loss (looked
for in the first 100,000 lines); a JSON document (trainer_state.json, golden values) is loaded whole (up to
512 MB). An epoch-local counter is composed from the epoch's last logged step and the logging interval, not
from the epoch's length: a step may be off by less than one logging interval. During a fast fall the
baseline is recomputed every 32 values, so a spike's baseline is the level up to 32 rows before it. A
second writer two rows behind the first reads as resumes. Memory is one 64-value window per series and a 64 KB
block of the file, plus what is found (every spike and event is kept); --plot keeps at most 4000
min/max buckets per series.

Speed and memory, measured with benchmarks/spikes_throughput.py next to a 15-line pandas rolling-median
detector (which only counts outliers), each in its own process, on a 2-core AMD EPYC VM shared with
other jobs (Linux, Python 3.11.7, load average 0.9-4.3, 2026-11-25): a 10-million-row CSV (step, loss,
grad_norm, lr; 336 MB) with no spike in 3.4 to 4.5 s CPU (2.2 to 2.9 M rows per CPU second) at a peak RSS
of 127 to 129 MB (120 MB for 1 million rows), where pandas took 20.7 s CPU and 1000 MB. That is with pandas
installed (`pip install ml-debug[fast]`; make test's venv has it): a CSV of 24 MB or more is then parsed by pandas
4 MB at a time and its healthy stretches screened with numpy, to the same report. Without it everything is
Python: 18.0 s CPU (0.56 M rows per second) at 17.4 MB, the same as for 1 million rows. Spikes are followed
value by value, so a log dense with them is slower: with a spike every ~700 rows (half the rows inside a
spike or its follow-up) 10 million rows took 14.9 to 16.8 s CPU (0.60 to 0.67 M rows per second) at 142 to
149 MB, pandas 20.8 to 23.2 s, pure Python 22.3 to 28.3 s (74 MB); 1 million rows 1.55 to 2.0 s, pure
Python 2.0 to 2.3 s, pandas 2.2 to 2.4 s (five runs of each, one after the other: medians 1.62 s, 2.17 s
and 2.29 s). Issue 23's other shapes, 1 million rows, 2026-11-26, load average 13-23 (figures of a loaded machine):
139 runs appended into one CSV (each run read on its own, no seam a spike) 1.4 s CPU at 117 MB, pandas 2.8 s at
163 MB. The clean log as JSONL (`spikes_throughput.py --scenarios jsonl --against` the code before, one run,
2026-11-26, load average 5.1-5.9): 5.7 s CPU at 54 MB, where numpy screens the healthy stretches as for a big CSV,
6.7 s in pure Python at 41 MB, pandas (read_json) 6.4 s at 1025 MB, the code before 8.9 s at 26 MB. Python's json
decodes 1 MB of lines a call (about 3.4 s of it) and the records go on in batches, column by column.

The code: this file is the command; diagnostics/spikelog/ holds what it reads and thinks with, along its
data path: read/ (one module per log format), detect/ (thresholds, one series, the log's events, the numpy
screen), report.py, plot.py.
"""
import os
import sys

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # the spikelog package and the contract sit beside this file
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))

from ml_debug_contract import ArgumentParser, json_text, single_line  # noqa: E402
from spikelog import CliError  # noqa: E402
from spikelog.detect import analyze  # noqa: E402
from spikelog.detect.thresholds import MIN_POINTS  # noqa: E402
from spikelog.output import check_output, write_output  # noqa: E402
from spikelog.plot import plot  # noqa: E402
from spikelog.read import FORMATS  # noqa: E402
from spikelog.report import TYPES, postmortem, summary  # noqa: E402

__all__ = ["CliError", "analyze", "summary", "postmortem", "plot", "main", "FORMATS", "TYPES", "MIN_POINTS"]


def main(argv=None):
    parser = ArgumentParser(
        description="Find and classify loss spikes in a training log (CSV, JSONL, TensorBoard events, "
                    "HF trainer_state.json, Megatron-LM golden values, W&B and Lightning CSV, and any plain-text log "
                    "that prints its loss next to its name); optionally plot them and draft a post-mortem.")
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
            print(single_line(f"spikes.py: {args.log}: {exc}"), file=sys.stderr)
            return 2
        except OSError as exc:
            print(single_line(f"spikes.py: {args.log}: cannot read: {exc.strerror or exc}"), file=sys.stderr)
            return 2
        text = json_text(report.to_json(), indent=1) if args.json else summary(report)
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
