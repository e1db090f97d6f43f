"""How fast does spikes.py read a long log, and does its memory stay flat? (Not run in CI.)

    python benchmarks/spikes_throughput.py [--rows 10000000] [--scenarios clean,mixed] [--keep DIR]

For each scenario it writes a synthetic CSV log of `--rows` steps (step, loss, grad_norm, lr) with
diagnostics/synthetic_curves.py, then runs `python diagnostics/spikes.py LOG --json` in a child
process and reports its wall time, CPU time, steps per CPU second and peak resident memory (the child's
ru_maxrss, as the child reports it). A tenth-length log is measured too: if memory is bounded by the
window and not by the log, both peaks are close. `clean` plants nothing, so its memory is the
window alone; `mixed` plants a spike every ~600 steps, so it shows what the findings themselves
cost (they are kept: the report lists them all).

The machine is printed with the figures: they mean little without it.
"""
import argparse
import os
import platform
import resource
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
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average at start {load}")


# The child runs spikes.py and reports its own peak resident memory (Linux: ru_maxrss in kilobytes).
CHILD = """
import resource, runpy, sys
sys.argv = [sys.argv[1], sys.argv[2], "--json"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def run_spikes(log):
    """(wall seconds, CPU seconds, peak RSS in MB) of `spikes.py LOG --json` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "diagnostics" / "spikes.py"), str(log)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"spikes.py failed on {log}: {proc.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(proc.stderr.split()[-1]) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="steps in the big log (default 10M)")
    parser.add_argument("--scenarios", default="clean,mixed", help="synthetic scenarios to measure")
    parser.add_argument("--keep", help="write the logs into this directory and keep them (reused if present)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spikes-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    for scenario in args.scenarios.split(","):
        for rows in (args.rows // 10, args.rows):
            log = directory / f"{scenario}-{rows}.csv"
            if not log.exists():  # a log kept from an earlier run is measured again as it is
                synthetic_curves.make_curve(scenario, seed=0, rows=rows).write_csv(log)
            wall, cpu, rss = run_spikes(log)
            print(f"{scenario:>6} {rows:>11,} steps ({log.stat().st_size / 1e6:,.0f} MB CSV): {wall:6.1f} s wall, "
                  f"{cpu:6.1f} s CPU, {rows / cpu / 1e6:5.2f} M steps per CPU second, peak RSS {rss:6.1f} MB")
            if not args.keep:
                log.unlink()
    if not args.keep:
        directory.rmdir()


if __name__ == "__main__":
    main()
