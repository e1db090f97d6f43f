"""How does lint.py's time and memory grow with the size of a file and of a tree? (Not run in CI.)

    python benchmarks/lint_scale.py [--lines 10000,20000,50000] [--tree 200000] [--keep DIR]

Issue 8 measured 42 s on a 20,000-line file (one analysis was quadratic) and asked for a
50,000-line file in under 10 s. The inputs are our own healthy and twin training code
(tests/data/lint/corpus, tests/data/lint/twins): whole files are concatenated until a single file
reaches each `--lines` figure, and copied into numbered folders (one copy of the corpus each) until
a tree reaches `--tree` lines. Each run is `python diagnostics/lint.py PATH --json` in a child
process; the figures are its wall and CPU time and its peak resident memory (from os.wait4). A
concatenated file repeats the same function names many times, which is the hard case for
following calls; a tree is many files of ordinary size.

The machine and its load are printed with the figures: they mean little without them.
"""
import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "tests" / "data" / "lint" / "corpus").rglob("*.py")) + \
    sorted((ROOT / "tests" / "data" / "lint" / "twins").glob("*.py"))


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; load average {load}"


def run(path):
    """(wall seconds, CPU seconds, peak MB, exit code) of lint.py on path, in a child process. On a loaded
    machine the CPU time is the steadier figure: the wall time also counts the waits for a core."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, str(ROOT / "diagnostics" / "lint.py"), str(path), "--json", "--no-config"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    return (time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
            os.waitstatus_to_exitcode(status))


def one_file(folder, lines):
    texts, total, out = [p.read_text(encoding="utf-8") for p in SOURCES], 0, []
    while total < lines:
        text = texts[len(out) % len(texts)]
        out.append(text)
        total += text.count("\n")
    path = folder / f"one_{lines}.py"
    path.write_text("\n".join(out), encoding="utf-8")
    return path, total


def tree(folder, lines):
    root, total, copies = folder / f"tree_{lines}", 0, 0
    corpus_lines = sum(p.read_text(encoding="utf-8").count("\n") for p in SOURCES)
    while total < lines:
        target = root / f"copy{copies:04d}"
        for source in SOURCES:
            destination = target / source.relative_to(source.parents[1] if source.parent.name == "project" else source.parent)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
        total += corpus_lines
        copies += 1
    return root, total, copies


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", default="10000,20000,50000")
    parser.add_argument("--tree", type=int, default=200_000)
    parser.add_argument("--keep", metavar="DIR", help="write the inputs here and keep them (default: a temp folder)")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(args.keep) if args.keep else Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        for lines in (int(n) for n in args.lines.split(",")):
            path, total = one_file(folder, lines)
            seconds, cpu, peak, code = run(path)
            print(f"one file, {total:>7,} lines: {seconds:6.2f} s wall, {cpu:6.2f} s CPU, peak {peak:4.0f} MB, exit {code}")
        if args.tree:
            root, total, copies = tree(folder, args.tree)
            files = sum(1 for _ in root.rglob("*.py"))
            seconds, cpu, peak, code = run(root)
            print(f"tree, {total:>7,} lines in {files} files ({copies} copies of the corpus): {seconds:6.2f} s wall, "
                  f"{cpu:6.2f} s CPU, peak {peak:4.0f} MB, exit {code}")


if __name__ == "__main__":
    main()
