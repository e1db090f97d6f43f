"""Every diagnostic's docstring Output is a real, current run (CONTRIBUTING.md, "Diagnostics").

The Output section holds runs: a line `$ python diagnostics/<file> args...`, then what the command printed
(stdout and stderr, as a terminal shows them), optionally ending with `(exit code N)`. A line that is exactly
`...` stands for any number of lines. Arguments under /tmp/ are rewritten into a pytest tmp dir (the same one for all runs of one docstring, so a later
run reads what an earlier one wrote), and that dir is printed back as /tmp in the output.
"""
import ast
import difflib
import json
import math
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

from conftest import DIAGNOSTICS, ROOT

FILES = sorted(DIAGNOSTICS.glob("*.py"))
# Files whose docstring shows no `$ python` run, and why; each must keep showing none (else it is tested here).
NO_RUNS = {
    "spikes.py": "its Output shows a log written by synthetic_curves.py; tests/test_spikes.py checks it",
    "synthetic_curves.py": "a data generator with no tutorial Output section",
    "hf_case.py": "a one-function helper for case files; tests/test_real_models.py runs it on four transformers models",
    "ml_debug_contract.py": "the module every command imports, no command itself; tests/test_diagnostic_conventions.py",
}
# Files whose runs start processes of their own or train for long: their own test runs the command once, compares
# it with the docstring and checks its verdicts on the same run.
OWN_TEST = {"dist_check.py": "test_dist_check.py::test_docstring_output_is_this_run",
            "spike_lab.py": "test_spike_lab.py::test_docstring_output_is_the_demo_run"}
WRITE_FLAGS = {"--out", "--plot", "--postmortem", "--truth", "--write-demo", "--png"}
RUN = re.compile(r"^\$ python (diagnostics/\S+\.py)(.*)$", re.M)
EXIT = re.compile(r"^\(exit code (\d+)\)$")

# Runs every command of every docstring in one interpreter (torch imports once), each as
# `python diagnostics/x.py` would: as __main__, the script's folder first on sys.path, torch's RNG as a fresh
# interpreter has it, stdout and stderr into one stream.
RUN_ALL = """
import contextlib, io, json, os, runpy, sys, traceback
import torch
torch.set_num_threads(1)
fresh_seed = torch.initial_seed()
results = []
for script, args in json.load(sys.stdin):
    sys.argv, sys.path[0], out = [script, *args], os.path.abspath(os.path.dirname(script)), io.StringIO()
    torch.manual_seed(fresh_seed)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append({"output": out.getvalue(), "code": code})
print(json.dumps(results))
"""


def output_section(path):
    """The Output section of a file's module docstring, dedented; None when there is none."""
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    lines = docstring.splitlines()
    if "Output" not in lines:
        return None
    body = lines[lines.index("Output") + 1:]
    if body and set(body[0]) == {"-"}:
        body = body[1:]
    end = next((i for i, line in enumerate(body) if line and not line.startswith(" ")), len(body))
    return textwrap.dedent("\n".join(body[:end]))


def parse_runs(section):
    """[(`$` line, script, args, expected lines, exit code or None)] for each `$ python diagnostics/...` line."""
    runs = []
    for line in section.splitlines():
        match = RUN.match(line)
        if match:
            runs.append((line, match[1], shlex.split(match[2]), []))
        elif runs:
            runs[-1][3].append(line)
    parsed = []
    for line, script, args, expected in runs:
        while expected and not expected[-1].strip():
            expected.pop()
        code = None
        if expected and EXIT.match(expected[-1]):
            code = int(EXIT.match(expected.pop())[1])
        parsed.append((line, script, args, expected, code))
    return parsed


TIMING = [(re.compile(r" \[\d+\.\d s\]$"), " [N s]"), (re.compile(r'"seconds": \d+(\.\d+)?'), '"seconds": N')]


def untimed(line):
    """The line with the doctor's wall times (` [0.4 s]`, `"seconds": 0.42`) replaced by N: they vary run to run."""
    for pattern, replacement in TIMING:
        line = pattern.sub(replacement, line)
    return line


NUMBER = re.compile(r"(-?\d+\.\d+(?:e[-+]?\d+)?)")
DIGITS = 1e-3  # decimals may differ by this much, relatively: torch's CPU kernels round differently on AVX2 and
# AVX-512 machines, and a loss climbing for 10 steps at an overshooting lr (update_ratio's docstring) carries
# that into the 4th digit (5.4 on one, 5.401 on the other, measured); integers, words and verdicts stay exact


def same_line(expected, actual):
    """Whether two output lines match: the same text, wall times aside, with decimals within DIGITS."""
    expected, actual = NUMBER.split(untimed(expected)), NUMBER.split(untimed(actual))
    return len(expected) == len(actual) and all(
        e == a if k % 2 == 0 else math.isclose(float(e), float(a), rel_tol=DIGITS, abs_tol=DIGITS)
        for k, (e, a) in enumerate(zip(expected, actual)))


def matches(expected, actual):
    """Whether the lines match, a line that is exactly `...` standing for any number of lines; wall times are any
    number, and decimals may differ in the last digit (same_line)."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and same_line(expected[0], actual[0]) and matches(expected[1:], actual[1:])


def in_tmp(args, tmp):
    """args with every /tmp/ path moved under tmp; a file the command writes must be under /tmp/."""
    for flag, value in zip(args, args[1:]):
        assert flag not in WRITE_FLAGS or value.startswith("/tmp/"), f"{flag} {value}: write under /tmp/ in a docstring"
    return [str(tmp / arg[len("/tmp/"):]) if arg.startswith("/tmp/") else arg for arg in args]


SECTIONS = {path.name: output_section(path) or "" for path in FILES}
RUNS = {name: [] if name in NO_RUNS or name in OWN_TEST else parse_runs(section) for name, section in SECTIONS.items()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{file name: [(`$` line, script, args, expected, code, actual output, actual code)]}, run in one interpreter."""
    tmps = {name: tmp_path_factory.mktemp(name.removesuffix(".py")) for name in RUNS}
    commands = [(script, in_tmp(args, tmps[name])) for name, runs in RUNS.items() for _, script, args, _, _ in runs]
    proc = subprocess.run([sys.executable, "-c", RUN_ALL], input=json.dumps(commands), capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONHASHSEED="0"))
    assert proc.returncode == 0, proc.stderr
    done = iter(json.loads(proc.stdout.splitlines()[-1]))
    out = {}
    for name, runs in RUNS.items():
        out[name] = []
        for run in runs:
            result = next(done)
            output = result["output"].replace(str(tmps[name]), "/tmp")
            out[name].append((*run, output.rstrip("\n").splitlines(), result["code"]))
    return out


@pytest.mark.parametrize("name", sorted(set(RUNS) - set(NO_RUNS) - set(OWN_TEST)))
def test_docstring_output_is_what_the_commands_print(name, results):
    assert RUN.match(SECTIONS[name].lstrip()), "the Output section must start with `$ python diagnostics/<file> ...`"
    for command, _, _, expected, code, actual, actual_code in results[name]:
        diff = "\n".join(difflib.unified_diff(expected, actual, "docstring", "now", lineterm=""))
        assert matches(expected, actual), f"{command}\n{diff}"
        assert code is None or code == actual_code, f"{command}: exit code {actual_code}, docstring says {code}"


@pytest.mark.parametrize("name", sorted(NO_RUNS))
def test_files_without_runs_still_have_none(name):
    assert name in SECTIONS, f"{name} is gone: remove it from NO_RUNS"
    assert not any(map(RUN.match, SECTIONS[name].splitlines())), f"{name} now shows runs: remove it from NO_RUNS"


@pytest.mark.parametrize("name", sorted(OWN_TEST))
def test_files_with_their_own_output_test_have_it(name):
    test_file, test_name = OWN_TEST[name].split("::")
    assert parse_runs(SECTIONS[name]), f"{name} shows no run"
    assert f"def {test_name}(" in (ROOT / "tests" / test_file).read_text()


def test_dots_match_any_number_of_lines_and_nothing_else_is_fuzzy():
    assert matches(["a", "...", "d"], ["a", "d"])
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["...", "d"], ["d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c", "e"])
    assert not matches(["a", "b"], ["a", "b", "c"])
    assert not matches(["a", " ..."], ["a", "b"])


def test_only_wall_times_and_the_last_digit_of_a_decimal_may_differ():
    assert matches(["  PASS  labels  ok [0.1 s]", '  "seconds": 0.12'], ["  PASS  labels  ok [3.4 s]", '  "seconds": 3'])
    assert not matches(["  PASS  labels  ok [0.1 s]"], ["  FAIL  labels  ok [0.1 s]"])
    assert not matches(["  PASS  labels  8 rows [0.1 s]"], ["  PASS  labels  9 rows [0.1 s]"])
    assert not matches(['  "rows": 8'], ['  "rows": 9'])
    assert matches(["ending at 5.4), worst 0.254"], ["ending at 5.401), worst 0.2541"])  # another CPU's rounding
    assert not matches(["ending at 5.4)"], ["ending at 5.41)"])
    assert not matches(["10 step(s) at 0.5"], ["11 step(s) at 0.5"])
    assert not matches(["up to 6.271"], ["up to 6.271 (twice)"])
