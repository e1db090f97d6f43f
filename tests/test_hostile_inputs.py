"""Every command that reads a file, given what is not one it can read; every command's report, given a stdout that
cannot take it (issue 22, Deliver 5: a generator per kind, applied to every command).

Input kinds: an empty file, a binary file, a missing file, a folder, and a missing path with a newline in its name
(issue 22, "errors of several lines"). Each ends in exit 2 with one stderr line and no traceback, or in the command's
own report (a linter has nothing to say about an empty file). Stdout kinds: a reader that left (`| head`, `| true`)
and a full disk (`> /dev/full`): no traceback and at most one stderr line; a full stdout is exit 1 or 2, never 0
(issue 22: `ml-debug --version | true`, `sweeps ... > /dev/full` were tracebacks).

All runs of both families go through one interpreter (each command as __main__, as `python diagnostics/<file>`
runs it), so torch is imported once.
"""
import json
import subprocess
import sys

import pytest

from conftest import COMMANDS, ROOT

pytestmark = pytest.mark.hostile

MODEL_CHECKS = sorted(p.name for p in COMMANDS if "cli_main(" in p.read_text() and "def cli_main(" not in p.read_text())

# command (as run) -> (file under ROOT, argv before the input, argv after it, the input's file name)
READERS = {
    **{f"{name[:-3]} --case": (f"diagnostics/{name}", ["--case"], [], "case.py") for name in MODEL_CHECKS},
    "doctor --case": ("diagnostics/doctor.py", ["--case"], [], "case.py"),
    "doctor --script": ("diagnostics/doctor.py", ["--script"], [], "train.py"),
    "capture SCRIPT": ("diagnostics/capture.py", [], [], "train.py"),
    "metric_stuck --problem": ("diagnostics/metric_stuck.py", ["--problem"], [], "problem.py"),
    "pinn_check --problem": ("diagnostics/pinn_check.py", ["--problem"], [], "pinn.py"),
    "loss_surface --surface": ("diagnostics/loss_surface.py", ["--surface"], [], "surface.py"),
    "rl_probes --agent": ("diagnostics/rl_probes.py", ["--agent"], [], "agent.py"),
    "resume_check --trainer": ("diagnostics/resume_check.py", ["--trainer"], [], "trainer.py"),
    "spikes LOG": ("diagnostics/spikes.py", [], [], "log.csv"),
    "sweeps RUNS": ("diagnostics/sweeps.py", [], ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "runs.csv"),
    "bad_samples PATH": ("diagnostics/bad_samples.py", [], [], "samples.jsonl"),
    "lint PATH": ("diagnostics/lint.py", [], [], "code.py"),
    "ml-debug spikes LOG": ("ml_debug/cli.py", ["spikes"], [], "log.csv"),
    "ml-debug doctor --case": ("ml_debug/cli.py", ["doctor", "--case"], [], "case.py"),
    "install_skill DEST": ("tools/install_skill.py", [], [], "skills"),
}
INPUT_KINDS = ["empty file", "binary file", "missing file", "a folder", "newline in a missing path"]
# a linter or screener may read an empty or binary file and report on it; the rest must refuse it
MAY_REPORT = {("lint PATH", "empty file"), ("bad_samples PATH", "binary file")}
# install_skill's DEST is a folder: a missing one is made (any name), a folder is the normal case
NOT_HOSTILE = {("install_skill DEST", "missing file"), ("install_skill DEST", "a folder"),
               ("install_skill DEST", "newline in a missing path")}
INPUT_CASES = [(name, kind) for name in READERS for kind in INPUT_KINDS if (name, kind) not in NOT_HOSTILE]


def place(kind, folder, name):
    """Put the kind where the command reads; returns the path to give it."""
    path = folder / name
    if kind == "empty file":
        path.write_bytes(b"")
    elif kind == "binary file":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "a folder":
        path.mkdir()
        (path / "inside.txt").write_text("x\n")
    elif kind == "newline in a missing path":
        path = folder / ("no\nsuch_" + name)
    return path


RUNNER = """
import contextlib, io, json, os, runpy, sys
sys.path.append(os.getcwd())  # the ml_debug package of this checkout, for ml_debug/cli.py
results, runs, folder = [], json.loads(sys.argv[1]), sys.argv[2]
for path, argv, stdout in runs:
    sys.path.insert(0, os.path.dirname(path))  # as `python path` does
    saved = os.dup(1), os.dup(2)
    err_file = open(os.path.join(folder, f"err{len(results)}"), "w+")
    if stdout == "full":
        target = os.open("/dev/full", os.O_WRONLY)
    elif stdout == "closed":
        read, target = os.pipe()
        os.close(read)
    else:
        target = os.open(os.devnull, os.O_WRONLY)
    os.dup2(target, 1)
    os.dup2(err_file.fileno(), 2)
    os.close(target)
    sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
        code = "returned without exiting"
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        import traceback
        traceback.print_exc()
        code = f"{type(exc).__name__}: {exc}"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what Python's exit would do: an error here is its `Exception ignored` on stderr
        except OSError as exc:
            code = f"unflushed: {exc}"
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    sys.path.remove(os.path.dirname(path))
    err_file.seek(0)
    results.append({"code": code, "stderr": err_file.read()})
print(json.dumps(results))
"""


def run_all(runs, tmp_path):
    """[(path, argv, stdout kind)] -> [{code, stderr}], all in one interpreter."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(runs), str(tmp_path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def input_runs_in(tmp):
    """The runs of the input kinds, with their inputs placed under tmp."""
    runs = []
    for index, (name, kind) in enumerate(INPUT_CASES):
        file, before, after, input_name = READERS[name]
        folder = tmp / str(index)
        folder.mkdir()
        runs.append((str(ROOT / file), [*before, str(place(kind, folder, input_name)), *after], "devnull"))
    return runs


@pytest.fixture(scope="module")
def all_runs(tmp_path_factory):
    """{"input": {(name, kind): result}, "stdout": {(name, stdout): result}}: both families in one interpreter."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "inputs").mkdir()
    (tmp / "stdout").mkdir()
    inputs, stdouts = input_runs_in(tmp / "inputs"), stdout_runs_in(tmp / "stdout")
    results = run_all(inputs + stdouts, tmp)
    return {"input": dict(zip(INPUT_CASES, results[:len(inputs)])),
            "stdout": dict(zip(STDOUT_CASES, results[len(inputs):]))}


@pytest.fixture(scope="module")
def input_runs(all_runs):
    return all_runs["input"]


@pytest.mark.parametrize("name, kind", INPUT_CASES, ids=[f"{name}: {kind}" for name, kind in INPUT_CASES])
def test_an_input_that_is_not_a_readable_file_is_one_line(name, kind, input_runs):
    run = input_runs[(name, kind)]
    err = run["stderr"]
    assert "Traceback" not in err, err
    if (name, kind) in MAY_REPORT and run["code"] in (0, 1):
        return
    assert run["code"] == 2, run
    assert len(err.strip().splitlines()) == 1, err


def test_every_command_that_reads_a_file_is_in_the_generator():
    """A new reading command joins READERS (and so every input kind); a new model check joins through cli_main."""
    tried = {file for file, *_ in READERS.values()}
    readers = {"bad_samples", "capture", "doctor", "lint", "loss_surface", "metric_stuck", "pinn_check",
               "resume_check", "rl_probes", "spikes", "sweeps", *(name[:-3] for name in MODEL_CHECKS)}
    assert {f"diagnostics/{name}.py" for name in readers} <= tried
    assert {"ml_debug/cli.py", "tools/install_skill.py"} <= tried
    assert len(MODEL_CHECKS) >= 15


# --- a stdout that cannot take the report --------------------------------------------------------------------

TINY_SCRIPT = """import torch
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
TINY_CASE = """import torch


def make_case():
    torch.manual_seed(0)
    return {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            "loss_fn": torch.nn.functional.cross_entropy}
"""
# command -> (file, argv): a short run of each command that prints a report (the model checks share cli_main: one
# stands for them; the in-loop demos have their own tests)
PRINTERS = {
    "doctor --case": ("diagnostics/doctor.py", ["--case", "{case}"]),
    "doctor --case --json": ("diagnostics/doctor.py", ["--case", "{case}", "--json"]),
    "init_loss (cli_main)": ("diagnostics/init_loss.py", ["--healthy"]),
    "init_loss --json": ("diagnostics/init_loss.py", ["--healthy", "--json"]),
    "sweeps": ("diagnostics/sweeps.py", []),
    "sweeps --json": ("diagnostics/sweeps.py", ["--json"]),
    "pinn_check": ("diagnostics/pinn_check.py", ["--healthy"]),
    "metric_stuck": ("diagnostics/metric_stuck.py", ["--healthy"]),
    "loss_surface": ("diagnostics/loss_surface.py", ["--healthy", "--grid", "5"]),
    "capture": ("diagnostics/capture.py", ["{script}"]),
    "spike_lab": ("diagnostics/spike_lab.py", ["--steps", "150", "--at", "50", "--out", "{out}"]),
    "hf_case": ("diagnostics/hf_case.py", []),
    "bad_samples": ("diagnostics/bad_samples.py", []),
    "spikes": ("diagnostics/spikes.py", ["{log}"]),
    "synthetic_curves": ("diagnostics/synthetic_curves.py", ["--out", "{out}.csv", "--rows", "200"]),
    "lint --json": ("diagnostics/lint.py", ["--json", "{script}"]),
    "ml-debug --version": ("ml_debug/cli.py", ["--version"]),
    "ml-debug --help": ("ml_debug/cli.py", ["--help"]),
}
STDOUT_CASES = [(name, stdout) for name in PRINTERS for stdout in ("closed", "full")]


def stdout_runs_in(tmp):
    """The runs of the stdout kinds, with the files they read and write under tmp."""
    script, log, case = tmp / "train.py", tmp / "log.csv", tmp / "case.py"
    script.write_text(TINY_SCRIPT)
    case.write_text(TINY_CASE)
    log.write_text("step,loss\n" + "".join(f"{step},{2.0 - step / 1000:.4f}\n" for step in range(300)))
    runs = []
    for index, (name, stdout) in enumerate(STDOUT_CASES):
        file, argv = PRINTERS[name]
        argv = [a.format(script=script, log=log, case=case, out=tmp / f"out{index}") for a in argv]
        runs.append((str(ROOT / file), argv, stdout))
    return runs


@pytest.fixture(scope="module")
def stdout_runs(all_runs):
    return all_runs["stdout"]


@pytest.mark.parametrize("name, stdout", STDOUT_CASES, ids=[f"{name}: {stdout} stdout" for name, stdout in STDOUT_CASES])
def test_a_stdout_that_cannot_take_the_report_is_no_traceback(name, stdout, stdout_runs):
    run = stdout_runs[(name, stdout)]
    assert isinstance(run["code"], int), run  # not an exception, nor an unflushed stdout at exit
    assert "Traceback" not in run["stderr"] and len(run["stderr"].strip().splitlines()) <= 1, run["stderr"]
    if stdout == "full":
        assert run["code"] in (1, 2), run  # the report was lost: never a success
