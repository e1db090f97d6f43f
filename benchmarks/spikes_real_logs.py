"""spikes.py on real public training logs, read with no flag. (Not run in CI; the logs stay outside the repository.)

    python benchmarks/spikes_real_logs.py [--mirrors DIR] [--only NAME] [--json]

Each entry of LOGS names a public repository that committed a training log, the commit it was read at and the log's
path. The harness reads the log from the `fetch` tool's mirror (`git show COMMIT:PATH`, into a temp folder), runs
spikes.analyze on it with no flag and prints one row per log: its producer, whether it was read (or the one-line
refusal), the rows read, the steps, the spikes by type and the events by kind, then our judgement of what it found
(looked at by hand, 2026-11-26), and `ok` when what it found is what the entry expects, else `DIFFERS`.

Then the planted spikes (issue 23): the loss series as spikes.py read it (its own steps, with any resume or new run)
is written to a `step,loss` CSV three more times, each with one shape planted, and read again: a one-row 3x spike
(a fast_recovery), a 2x bump decaying linearly to the curve over 100 rows (a slow_recovery) and a lasting 1.3x
offset (a no_recovery). They go at two thirds of the log (`calm`; earlier where a resume or a new run would fall
inside the shape's rows: a spike open at a resume is judged by its level there), and once more where the log falls
fastest (`fall`) when it has a fast fall: its loss down by 20% or more over 48 rows (the medians of 16 rows at
either end). A plant is found when a spike that the unplanted CSV does not have starts within 5 rows after it (an
offset: from a block before it to 160 rows after, or a new creep event there, see plant_all), typed when that spike
has the shape's type; but an offset whose planted curve comes back under the pre-plant trend (a log whose fall
speeds up after it) is a recovery by DESIGN.md's types, and is typed right as a slow_recovery (see back_on_trend).
A log too short for a shape (the spike needs 40 rows before it, the bump and the offset 96 before and 240 after) is
not planted with it, nor is a loss whose median is 0 or less (3x is a dip there).
`--no-plants` leaves the plants out.

A missing mirror is one line saying which fetch to run (fetch github:OWNER/NAME). The look-alikes of each shape
these logs taught us are in tests/data/logs/ (README.md there), with their tests in tests/test_spikes.py.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

import spikes  # noqa: E402  (needs the path above)
from spikelog.read import open_log  # noqa: E402

MIRRORS = Path("/work/.mirror")

# name: (repo, commit, path, producer and domain, expected: None for a refusal, else (rows, first step, last step,
# spikes), our judgement)
LOGS = {
    "yolo11-seg": ("102y/Gallstone-Detection-using-YOLO-v11", "2fd33d2bf94610d59f730d5dc8e7d5e6d3a81a5d", "results.csv",
                   "ultralytics YOLO11 results.csv (segmentation)", (10, 1, 10, 0),
                   "read as the sum of its 4 train/*_loss parts; 10 epochs: too short to judge"),
    "llamafactory-sft": ("rameyjm7/SFT-Training-LLM", "264b29045923fad9c4a88aa0384d33a5835accfe", "trainer_log.jsonl",
                         "LLaMA-Factory trainer_log.jsonl (LLM fine-tuning)", (680, 10, 6560, 0),
                         "two processes wrote each step, one mostly a row behind, two at times, catching up where "
                         "the other saved a checkpoint: 678 repeats left out; one real resume, from step 5240 to "
                         "5010, both writers side by side after it (656 steps and the 24 replayed: 680 rows); no "
                         "spike, right"),
    "llamafactory-pretrain": ("suzushi-tw/luojiu-7b-base", "f6a05a26564c4307e67d84de86bc9855633c7a29",
                              "trainer_log.jsonl", "LLaMA-Factory trainer_log.jsonl (7B pretraining)",
                              (1742, 5, 8710, 0), "a smooth curve, current_steps as steps: no spike, right"),
    "detr": ("FarjadAhmed/detr_custom_dcmha", "0c51002a1ff82a0a567a9bd70956098aa09ed80b", "output/log.txt",
             "DETR's log.txt, JSON lines per epoch (detection)", (61, 0, 60, 0),
             "train_loss per epoch, the epoch as step: no spike, right"),
    "gpt2-tsv": ("Jayant-Guru-Shrivastava/ERAV4-Session11-shakespeare-gpt2-124M",
                 "9d7497880089e00021a7a2c53a453308aad24bdb", "logs/train.log", "a GPT-2 124M script's TSV (pretraining)",
                 (457, 10, 4570, 0), "step and loss every 10 steps: no spike, right"),
    "build-nanogpt": ("neemiasbsilva/developing-nanoGPT2-fineweb", "1f7bbc84a745869a6803899877e018272dd0e9fe",
                      "logs/train_log.txt", "build-nanogpt's log.txt (pretraining)", (1992, 0, 1991, 0),
                      "`<step> train <loss>` lines, val lines left out: no spike, right"),
    "fast-scnn": ("Cuber-Wei/Fast-SCNN-pytorch-for-Silicon-M", "73e3b2f6956d2d8f1c48af1e921ce13fa45de8c1",
                  "logs/train.log", "Fast-SCNN's logging (segmentation)", (29740, 10, 297400, 205),
                  "Iter [i/1487] per epoch composed into global steps (20 epochs, no false run or resume); the spikes "
                  "are one-row 2-4x jumps (and a few 2-3 row clusters, each one spike: once two, the second starting "
                  "before the first ended) back on the next rows: real hard batches, fast_recovery right; 3 "
                  "slow_recovery (rows at 1.6-2x for 3-7 rows after the peak, as at step 227060), right; no creep (once a false non_spike_divergence at step 281220 from the lowest "
                  "of ~900 single 32-value block medians: the 400-row medians are flat at 0.97-1.01)"),
    "mt-transformer": ("GuoxiangJiang/Transformer-in-en-de-trans", "94ed65de8cb232e2104c507a33a55ce0e9788214",
                       "logs/train.log", "a Transformer en-de script (translation)", (100, 0, 99, 0),
                       "`Train Loss` per epoch: no spike, right"),
    "breath-audio": ("DexplovateCode/WheezeDetectionAI", "8ad1fbe7858bc0da3fa931e726944dc78b5064e2", "logs/train.log",
                     "a breath-sound CNN's epoch table (audio)", (22, 1, 22, 0),
                     "a | table: TrainLoss read, ValLoss beside it left out; 22 epochs: too short to judge"),
    "grpo-small": ("JunyiJ/PostTraining-LLM-Small", "90cc326c553fd7801f4394320e2926b346ccfe71", "logs/train.log",
                   "a GRPO post-training script (LLM RL fine-tuning)", (3, 50, 150, 0),
                   "3 avg_loss lines among samples: read, too short to judge"),
    "dit-finetune": ("yaramohamadi/DomainGuidance", "45768162d66ebbea3056f5d189fb73c4d7351149", "results/000-DiT-XL-2/log.txt",
                     "DiT's train.py log.txt, DiT-XL/2 fine-tuned on Caltech-101 (diffusion)", (145, 100, 14500, 0),
                     "`(step=0000100) Train Loss: 0.3394` every 100 steps, timestamps in ANSI colour: no spike, right"),
    "dit-pq": ("hehesangsj/PQDiT", "dc0476ddab8b294ab4c7eca741fdd7d22647e847", "results/low_rank/011-DiT-XL-2/log.txt",
               "DiT's train.py log.txt of a compressed DiT-XL/2 trained on ImageNet (diffusion)", (550, 100, 50000, 0),
               "5,105 lines of weight names and compression stats before the first training line (once refused: the "
               "format was looked for in the first 200 lines only); two runs, steps 100..5000 then 100..50000, the "
               "loss back at its start: a new_run (once a resume and a false resume_spike, the first run having no "
               "baseline before its loss fell; and the second run's steps 4900 and 5000 left out as repeats); no "
               "spike, right"),
    "awr-rl": ("JKinx/awr", "2b801b05ae71559a0612bcb94be957f941c0194b", "output/20000_iters/log.txt",
               "AWR's log.txt, a table aligned with spaces (RL)", None,
               "refused: an actor and a critic loss and no total; the line names both with their counts, right"),
    "mtgan": ("uuseeluo/paper-MTGAN-implementation", "19ade845cfe8f49c931be72cfa0c82ea6b7c18f6", "logs/train_log.txt",
              "a GAN's epoch log (image generation)", None,
              "refused: Loss_D and Loss_G and no total; the line names them, right"),
    "sb3-stdout": ("FlashDW/TrafficLightRL", "b07651a8532fce98bd8a7ab29daf7b6c6671d46b", "logs/train.log",
                   "stable-baselines3 PPO console tables (RL)", (3578, 2, 3579, 9),
                   "each `| train/ |` box one record, train/loss by time/iterations; the 9 spikes are one-update jumps "
                   "back on the next: fast_recovery right; the non_spike_divergence (-0.054 to -0.023) is PPO's loss "
                   "drifting towards 0, no divergence of training (a limit: an RL loss need not fall)"),
    "detectron2-config": ("EricWWWW/bottom-up-attention.pytorch", "81fe5a663eb70a802812d78b013627aae57654ef",
                          "output/log.txt", "detectron2's log.txt (detection)", None,
                          "refused: config dumps and evaluations only, no training line: right"),
    "lipreading": ("wangmaoxuhaoshuai/Lipreading_1.1", "ca79c6c5d93f81ec369e2ab29d8294286347d92c",
                   "logs/train_log.txt", "a lipreading script's log (speech)", None,
                   "refused: 5 lines, no training line: right"),
}


# shape: (what is planted, the type it should be given, rows it needs before it, rows after it)
SHAPES = {"spike": ("one row at 3x", "fast_recovery", 40, 6),
          "bump": ("2x, back to the curve linearly over 100 rows", "slow_recovery", 96, 240),
          "offset": ("1.3x from there on", "no_recovery", 96, 240)}
BUMP_ROWS = 100
NEAR = 5  # rows between a plant and the start of the spike that finds it (spikes_scores.py: 5 steps)
OFFSET_EARLY, OFFSET_LATE = 32, 160  # ...but for an offset, from a block before it to 160 rows after: one under a
# block median's line is seen in the median of two blocks (or by the creep watch, blocks later), and the change
# point of a 1-1.5 sigma shift in a heavy-tailed batch loss lands up to a block early (tests/test_spikes.py's
# look-alike)
FALL_ROWS, FALL_EDGE, FAST_FALL = 48, 16, 0.8  # a fast fall: the median of 16 rows 48 rows later <= 0.8x
TREND_BLOCK = 32  # rows whose median is compared with the pre-plant trend (spikes.py's block)


class HarnessError(Exception):
    """A missing mirror or file: one line, exit code 2."""


def read_log(mirrors, repo, commit, path, folder):
    """The log at commit, written into folder; a HarnessError says which fetch to run."""
    git_dir = mirrors / repo.replace("/", "+") / "repo"
    proc = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True)
    if proc.returncode:
        raise HarnessError(f"{repo}@{commit[:12]}:{path} is not in {git_dir}: call the fetch tool with github:{repo}")
    out = folder / Path(path).name
    out.write_bytes(proc.stdout)
    return out


def measure(log):
    """(found, summary): found is (rows, first step, last step, spikes) or None when refused."""
    try:
        report = spikes.analyze(log)
    except spikes.CliError as exc:
        return None, {"refused": str(exc)}
    data = report.to_json()
    kinds = Counter(s["type"] for s in data["spikes"])
    events = Counter(e["kind"] for e in data["events"])
    found = (report.values, report.first_step, report.last_step, len(report.spikes))
    return found, {"format": report.format, "loss": report.columns.loss_label, "rows": report.values,
                   "steps": [report.first_step, report.last_step], "spikes": dict(kinds), "events": dict(events)}


def loss_series(log):
    """(steps, losses) as spikes.py reads them: the log's own steps (row numbers when it has none), values only."""
    _, cols, chunks, _ = open_log(log, accelerate=False)
    steps, losses, row = [], [], 0
    for chunk_steps, chunk_losses, *_ in chunks:
        for i, loss in enumerate(chunk_losses):
            step = row + i if cols.step is None else chunk_steps[i]
            if loss is not None and step is not None:
                steps.append(step)
                losses.append(loss)
        row += len(chunk_losses)
    return steps, losses


def planted(steps, losses, at, shape):
    """A copy of losses with one shape planted from row `at` on, by step: a row that logs a step again (a log two
    processes wrote) gets what the step's first row got, so the rows stay repeats. The spike is 3x the curve at
    its step (the median of the 16 rows around it: a noisy row's own value times 3 can be an ordinary row), the
    bump and the offset scale the rows they cover, noise and all; rows of another run (steps before `at`'s, after
    a seam) are left alone."""
    out = list(losses)
    first = steps[at]
    later = sorted({s for s in steps[at:] if s >= first})
    k = {s: i for i, s in enumerate(later[:BUMP_ROWS if shape == "bump" else 1 if shape == "spike" else None])}
    peak = 3.0 * curve(losses, at)
    for j in range(at, len(out)):
        if steps[j] in k:
            out[j] = peak if shape == "spike" else out[j] * (2.0 - k[steps[j]] / BUMP_ROWS if shape == "bump" else 1.3)
    return out


def curve(losses, at):
    return statistics.median(losses[max(at - FALL_EDGE // 2, 0):at + FALL_EDGE // 2])


def noise_sigmas(losses, at, shape):
    """The plant's height over the curve in the log's own noise there: the robust sigma (IQR / 1.349) of the 64
    rows before it. spikes.py opens a spike from 6 sigma up (thresholds.SPIKE_Z)."""
    quartiles = statistics.quantiles(losses[max(at - 64, 0):at], n=4)
    sigma = (quartiles[2] - quartiles[0]) / 1.349
    height = {"spike": 2.0, "bump": 1.0, "offset": 0.3}[shape] * curve(losses, at)
    return height / sigma if sigma > 0 else math.inf


def back_on_trend(losses, planted_losses, at):
    """The first row from which a block (32 rows) of the planted curve has its median at or under the pre-plant
    trend, None when none does: then a lasting offset is what the curve shows. The trend is a line in logs through
    the medians of the two halves of the 96 rows before the plant (flat when it rises). A 1.3x offset on a log whose
    fall speeds up after the plant comes back under that trend: by DESIGN.md's types a recovery (slow, past 20
    steps), and no reader of the planted log alone could call it an offset. (A loss at or under 0 there: not judged,
    None.)"""
    _, _, before, after = SHAPES["offset"]
    if min(planted_losses[at - before:at + after]) <= 0:
        return None
    half = before // 2
    logs = [math.log(x) for x in losses[at - before:at]]
    early, late = statistics.median(logs[:half]), statistics.median(logs[half:])
    slope = min((late - early) / half, 0.0)
    for j in range(at, at + after - TREND_BLOCK + 1):
        trend = late + slope * (j + TREND_BLOCK / 2 - (at - half / 2))
        if math.log(statistics.median(planted_losses[j:j + TREND_BLOCK])) <= trend:
            return j
    return None


def clear_of_resumes(steps, rows_before, rows_after):
    """Whether the span of a plant at a row (rows_before before it, rows_after from it) holds no resume or new run:
    a plant across one would test how a spike open at a resume is judged (by its level there), not the shape."""
    back = [j for j in range(1, len(steps)) if steps[j] <= steps[j - 1]]
    return lambda row: not any(row - rows_before < j < row + rows_after for j in back)


def fastest_fall(steps, losses):
    """(row, ratio): where the loss falls fastest (the median of 16 rows, 48 rows on, over the median of the 16
    rows before), among the rows a bump fits at clear of resumes; None when it never falls by 20% or more."""
    best = None
    _, _, rows_before, rows_after = SHAPES["bump"]
    clear = clear_of_resumes(steps, rows_before, rows_after)
    for at in range(rows_before, len(losses) - rows_after + 1, 4):
        if not clear(at):
            continue
        before = sorted(losses[at - FALL_EDGE:at])[FALL_EDGE // 2]
        later = sorted(losses[at + FALL_ROWS - FALL_EDGE:at + FALL_ROWS])[FALL_EDGE // 2]
        if before > 0 and (best is None or later / before < best[1]):
            best = (at, later / before)
    return best if best is not None and best[1] <= FAST_FALL else None


def calm_row(steps, rows_before, rows_after):
    """Two thirds of the way into the log, or the latest row before that clear of resumes; None when none is."""
    clear = clear_of_resumes(steps, rows_before, rows_after)
    return next((row for row in range(min(2 * len(steps) // 3, len(steps) - rows_after), rows_before - 1, -1)
                 if clear(row)), None)


def analyzed(steps, losses, path):
    """(spikes, events) of a `step,loss` CSV of these values."""
    with path.open("w") as out:
        out.write("step,loss\n")
        out.writelines(f"{s},{x!r}\n" for s, x in zip(steps, losses))
    report = spikes.analyze(path, accelerate=False)
    return report.spikes, report.to_json()["events"]


def plant_all(log, folder):
    """[(place, shape, step, sigmas, found, the type given or None, typed, the type expected, the step the planted
    curve is back on its pre-plant trend or None)] for each plant that fits in the log.
    Found: a new spike starting within NEAR rows after the plant (the nearest, if several); for the offset, which
    may stay inside the noise of every row, from OFFSET_EARLY rows before it to OFFSET_LATE after, or else a new
    non_spike_divergence event (the creep watch) within the OFFSET_LATE rows after it."""
    steps, losses = loss_series(log)
    n = len(losses)
    if statistics.median(losses) <= 0:  # the shapes are factors of a positive loss: 3x a negative one is a dip
        return []
    path = folder / "planted.csv"
    spikes_before, events_before = analyzed(steps, losses, path)
    starts = {s.start_row for s in spikes_before}
    creeps = {e["step"] for e in events_before if e["kind"] == "non_spike_divergence"}
    places = [("calm", None)]
    fall = fastest_fall(steps, losses)
    if fall is not None:
        places.append((f"fall x{fall[1]:.2f}/{FALL_ROWS} rows", fall[0]))
    results = []
    for place, at in places:
        for shape, (_, want, rows_before, rows_after) in SHAPES.items():
            row = calm_row(steps, rows_before, rows_after) if at is None else at
            if row is None or row < rows_before or row + rows_after > n:
                continue
            planted_losses = planted(steps, losses, row, shape)
            back = back_on_trend(losses, planted_losses, row) if shape == "offset" else None
            expected = want if back is None else "slow_recovery"  # (see back_on_trend)
            found, events = analyzed(steps, planted_losses, path)
            first, last = (row - OFFSET_EARLY, row + OFFSET_LATE) if shape == "offset" else (row, row + NEAR)
            new = [kind for _, kind in sorted((abs(s.start_row - row), s.type) for s in found
                                              if s.start_row not in starts and first <= s.start_row <= last)]
            if not new and shape == "offset":
                new = [e["kind"] for e in events if e["kind"] == "non_spike_divergence" and e["step"] not in creeps
                       and steps[row] <= e["step"] <= steps[min(row + OFFSET_LATE, n - 1)]]
            given = new[0] if new else None
            results.append((place, shape, steps[row], noise_sigmas(losses, row, shape), bool(new), given,
                            given == expected, expected, None if back is None else steps[back]))
    path.unlink()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=MIRRORS, help=f"where fetch puts snapshots (default {MIRRORS})")
    parser.add_argument("--only", choices=sorted(LOGS), help="one log")
    parser.add_argument("--json", action="store_true", help="one JSON object per log instead of the table")
    parser.add_argument("--no-plants", action="store_true", help="read each log as it is only")
    args = parser.parse_args()
    names = [args.only] if args.only else list(LOGS)
    differs = 0
    with tempfile.TemporaryDirectory(prefix="spikes-real-logs-") as folder:
        for name in names:
            repo, commit, path, producer, expected, judged = LOGS[name]
            try:
                log = read_log(args.mirrors, repo, commit, path, Path(folder))
            except HarnessError as exc:
                print(f"spikes_real_logs.py: {exc}", file=sys.stderr)
                return 2
            found, summary = measure(log)
            plants = [] if found is None or args.no_plants else plant_all(log, Path(folder))
            verdict = "ok" if found == expected else "DIFFERS"
            differs += verdict != "ok"
            if args.json:
                print(json.dumps({"log": name, "source": f"{repo}@{commit[:12]}:{path}", "producer": producer,
                                  **summary, "expected": expected, "judged": judged, "verdict": verdict,
                                  "plants": [{"place": place, "shape": shape, "step": step, "sigmas": round(sigmas, 1),
                                              "found": hit, "type": given, "typed": typed, "type_expected": want,
                                              "back_on_trend_step": back}
                                             for place, shape, step, sigmas, hit, given, typed, want, back in plants]}))
                continue
            if found is None:
                read = f"refused: {summary['refused'][:110]}"
            else:
                spiked = ", ".join(f"{n} {k}" for k, n in summary["spikes"].items()) or "0"
                evented = ", ".join(f"{n} {k}" for k, n in summary["events"].items()) or "none"
                read = (f"read ({summary['format']}, {summary['loss']}): {summary['rows']} rows, steps "
                        f"{summary['steps'][0]}..{summary['steps'][1]}; spikes {spiked}; events {evented}")
            print(f"{name} [{verdict}] {producer}, {repo}@{commit[:12]}:{path}\n    {read}\n    judged: {judged}")
            if plants:
                print(f"    planted: {sum(p[4] for p in plants)}/{len(plants)} found, "
                      f"{sum(p[6] for p in plants)} typed right")
            for place, shape, step, sigmas, hit, given, typed, expected, back in plants:
                print(f"      {place}, step {step}: {shape} ({SHAPES[shape][0]}, {sigmas:.1f} sigma"
                      + ("" if back is None else f"; back on the pre-plant trend at step {back}: a recovery") + ") "
                      + (f"found, {given}" + ("" if typed else f" (should be {expected})") if hit else "missed"))
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
