"""lint.py's precision on real code: every finding on a corpus of public repositories, counted per rule, with the
findings in test files apart, and the time and memory of the run. (Not run in CI.)

    python benchmarks/lint_corpus.py CORPUS [--verdicts VERDICTS.json] [--json OUT.json]

CORPUS is a folder with one sub-folder per repository, fetched at evaluation time outside this repository
(issue 24 used the `fetch` tool's snapshots, exported to /tmp); the code never enters the repository. Each
repository is linted by `python diagnostics/lint.py REPO --json --no-config --include-tests` in a child process;
the figures are its CPU time and peak resident memory (from os.wait4). A finding is in a test file when
diagnostics/trainlint/run.py's test_file says so for its path inside the repository.

Whether a finding is a real bug is a person's judgement, read the way the repository's author would: VERDICTS
is a JSON object {"repo/path:line:rule": true or false, ...} ("repo/path:cell N:line:rule" in a notebook) written by whoever reviewed the findings; the table
then gives each rule's true and false findings outside tests and its precision. Without it, only the counts.

The machine and its load are printed with the figures: they mean little without them.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

from lint_scale import machine  # noqa: E402
from trainlint.run import test_file  # noqa: E402


def lint(repo):
    """(findings, errors, CPU seconds, peak MB) of one run of lint.py on a repository."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "diagnostics" / "lint.py"), str(repo), "--json",
                             "--no-config", "--include-tests"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    report = json.loads(out)
    return report["findings"], report["errors"], usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def lines_of(repo):
    """Lines of Python: the .py files, and the code cells of the notebooks (as lint.py reads them)."""
    lines = sum(len(p.read_bytes().splitlines()) for p in repo.rglob("*.py") if p.is_file())
    for notebook in (p for p in repo.rglob("*.ipynb") if p.is_file()):
        try:
            cells = json.loads(notebook.read_bytes()).get("cells", [])
        except (ValueError, AttributeError):
            continue  # lint.py reports it as skipped
        lines += sum(len("".join(c.get("source", [])).splitlines()) for c in cells if c.get("cell_type") == "code")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--verdicts", type=Path)
    parser.add_argument("--json", type=Path, help="write every finding, keyed as in VERDICTS, to this new file")
    args = parser.parse_args()
    verdicts = json.loads(args.verdicts.read_text()) if args.verdicts else {}
    rows, found, seconds, peak, lines = Counter(), {}, 0.0, 0.0, 0
    print(f"machine: {machine()}")
    for repo in sorted(p for p in args.corpus.iterdir() if p.is_dir()):
        findings, errors, cpu, mb = lint(repo)
        seconds, peak, size = seconds + cpu, max(peak, mb), lines_of(repo)
        lines += size
        print(f"{repo.name}: {size} lines, {len(findings)} findings, {len(errors)} files skipped, {cpu:.1f} s CPU, {mb:.0f} MB")
        for f in findings:
            relative = Path(f["path"]).relative_to(repo)
            cell = f":cell {f['cell']}" if "cell" in f else ""  # a notebook's line counts within its cell
            key = f"{repo.name}/{relative.as_posix()}{cell}:{f['line']}:{f['rule']}"
            tested = test_file(relative)
            found[key] = {"rule": f["rule"], "test": tested, "message": f["message"]}
            rows[f["rule"], "tests" if tested else verdicts.get(key, "unjudged")] += 1
    print(f"\n{lines} lines, {seconds:.0f} s CPU in all, peak {peak:.0f} MB "
          f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)\n")
    print("| rule | true | false | unjudged | precision | in tests |\n| --- | --- | --- | --- | --- | --- |")
    for rule in sorted({r for r, _ in rows}):
        true, false = rows[rule, True], rows[rule, False]
        precision = f"{true / (true + false):.0%}" if true + false else "n/a"
        print(f"| {rule} | {true} | {false} | {rows[rule, 'unjudged']} | {precision} | {rows[rule, 'tests']} |")
    if args.json:
        with open(args.json, "x") as out:  # never replaces a file
            json.dump(found, out, indent=1)


if __name__ == "__main__":
    main()
