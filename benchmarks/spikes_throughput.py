"""How fast does spikes.py read a long log, next to a pandas rolling-median detector, and does its memory
stay flat? (Not run in CI.)

    python benchmarks/spikes_throughput.py [--rows 10000000] [--scenarios clean,mixed,seams,jsonl] [--keep DIR]
                                           [--against CHECKOUT]

For each scenario it writes a synthetic log of `--rows` steps (step, loss, grad_norm, lr) with
diagnostics/synthetic_curves.py (`seams`: 139 clean runs of equal length appended into one CSV, each from step 0,
as issue 23's spike-dense log with seams; `jsonl`: the clean log as JSON lines), then runs, each in a child
process of its own and one after the other:

- `python diagnostics/spikes.py LOG --json`, the whole tool: every spike classified, events, resumes; with
  pandas installed (it is in requirements-test.txt) a CSV of 24 MB or more is read by pandas and screened with numpy,
  and a JSONL log of 24 MB or more has its numbers screened with numpy;
- `pure`: the same command with those accelerators off, as where pandas and numpy are not installed;
- with `--against CHECKOUT` (another checkout of this repository, e.g. `git worktree add /tmp/before main`), that
  checkout's spikes.py on the same log, just before this one's: a change measured before and after in one run;
- the baseline a reader would write in 15 lines of pandas: `read_csv` (`read_json(lines=True)`), then for loss and grad norm a
  rolling median and interquartile range over the previous 64 values and a count of the values above
  median + max(6 sigma, 5%). It finds outliers only: no types, no recovery, no events.

For both it reports wall time, CPU time, rows per CPU second and peak resident memory (the child's
ru_maxrss, as the child reports it). A tenth-length log is measured too: if memory is bounded by the
window and not by the log, both spikes.py peaks are close (pandas holds the whole log, so its peak grows
with it). `clean` plants nothing; `mixed` plants a spike every ~600 steps and shows what the findings cost.

The machine and its load are printed with the figures: they mean little without them.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

import synthetic_curves  # noqa: E402  (needs the path above)


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def load():
    return ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


# Each child reports its own CPU time and peak resident memory (Linux: ru_maxrss in kilobytes) on stderr.
SPIKES = """
import os, resource, runpy, sys
sys.argv = [sys.argv[1], sys.argv[2], "--json"]
if PURE_PYTHON:  # the path taken where pandas is not installed
    sys.path.insert(0, os.path.dirname(sys.argv[0]))
    from spikelog.read import table
    table.ACCELERATE_BYTES = float("inf")
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
use = resource.getrusage(resource.RUSAGE_SELF)
print(use.ru_utime + use.ru_stime, use.ru_maxrss, file=sys.stderr)
sys.exit(code)
"""

PANDAS = """
import resource, sys
import numpy as np
import pandas as pd

log = pd.read_json(sys.argv[2], lines=True) if sys.argv[2].endswith(".jsonl") else pd.read_csv(sys.argv[2])
outliers = 0
for column in ("loss", "grad_norm"):
    x = log[column]
    window = x.rolling(64, min_periods=32)
    median = window.median().shift(1)
    sigma = ((window.quantile(0.75) - window.quantile(0.25)) / 1.349).shift(1)
    outliers += int((x > median + np.maximum(6 * sigma, 0.05 * median.abs())).sum())
print(outliers)
use = resource.getrusage(resource.RUSAGE_SELF)
print(use.ru_utime + use.ru_stime, use.ru_maxrss, file=sys.stderr)
"""


SEAMS = 139  # runs in the `seams` log (issue 23's 1M-row CSV of concatenated runs had 139)


def write_log(scenario, rows, path):
    """The synthetic log of one scenario: a synthetic_curves scenario as CSV, `seams` or `jsonl`."""
    if scenario == "seams":
        run = synthetic_curves.make_curve("clean", seed=0, rows=rows // SEAMS)
        run.write_csv(path)
        lines = path.read_text().splitlines(keepends=True)
        with open(path, "a") as handle:
            for _ in range(SEAMS - 1):
                handle.writelines(lines[1:])
    elif scenario == "jsonl":
        curve = synthetic_curves.make_curve("clean", seed=0, rows=rows)
        with open(path, "w") as handle:
            for r in curve.rows():
                handle.write(json.dumps({c: r[c] for c in curve.columns}) + "\n")
    else:
        synthetic_curves.make_curve(scenario, seed=0, rows=rows).write_csv(path)


def run(child, log, root=ROOT):
    """(wall seconds, CPU seconds, peak RSS in MB) of one child process (spikes.py from the checkout at `root`)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", child, str(root / "diagnostics" / "spikes.py"), str(log)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the child failed on {log}: {proc.stderr.strip()}")
    cpu, rss = proc.stderr.split()[-2:]
    return wall, float(cpu), int(rss) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="steps in the big log (default 10M)")
    parser.add_argument("--scenarios", default="clean,mixed,seams,jsonl", help="synthetic scenarios to measure")
    parser.add_argument("--keep", help="write the logs into this directory and keep them (reused if present)")
    parser.add_argument("--against", help="also measure spikes.py of this other checkout (before a change)")
    args = parser.parse_args()
    against = Path(args.against).resolve() if args.against else None
    if against is not None and not (against / "diagnostics" / "spikes.py").is_file():
        parser.error(f"{args.against}: no diagnostics/spikes.py there")
    print(f"machine: {machine()}")
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spikes-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    for scenario in args.scenarios.split(","):
        for rows in (args.rows // 10, args.rows):
            log = directory / f"{scenario}-{rows}.{'jsonl' if scenario == 'jsonl' else 'csv'}"
            if not log.exists():  # a log kept from an earlier run is measured again as it is
                write_log(scenario, rows, log)
            children = [("spikes.py", SPIKES.replace("PURE_PYTHON", "False"), ROOT),
                        ("pure", SPIKES.replace("PURE_PYTHON", "True"), ROOT), ("pandas", PANDAS, ROOT)]
            if against is not None:
                children.insert(0, ("before", SPIKES.replace("PURE_PYTHON", "False"), against))
            for name, child, root in children:
                before = load()
                wall, cpu, rss = run(child, log, root)
                print(f"{scenario:>6} {rows:>11,} rows ({log.stat().st_size / 1e6:,.0f} MB {log.suffix[1:]}) {name:>9}: "
                      f"{wall:6.1f} s wall, {cpu:6.1f} s CPU, {rows / cpu / 1e6:5.2f} M rows per CPU second, "
                      f"peak RSS {rss:7.1f} MB (load average before: {before})")
            if not args.keep:
                log.unlink()
    if not args.keep:
        directory.rmdir()


if __name__ == "__main__":
    main()
