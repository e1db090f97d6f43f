"""Conventions every file in diagnostics/ keeps (CONTRIBUTING.md, "Diagnostics")."""
import ast
import json
import re
import subprocess
import sys
import time

import pytest

from conftest import DIAGNOSTICS, ROOT

FILES = sorted(DIAGNOSTICS.glob("*.py"))
MODEL_DIAGNOSTICS = [p for p in FILES if "\ndef make_demo_case(" in p.read_text()]
SECTIONS = ["Symptom", "What it checks", "Command", "Output", "How to read it", "Next step"]
IMPORTS = ("import argparse\nimport contextlib\nimport copy\nimport dataclasses\nimport importlib.util\nimport json\n"
           "import os\nimport random\nimport signal\nimport sys\nimport threading\n\n" + "try:\n    import torch\n")
BLOCK = re.compile(r"^# --- shared block.*?^# --- end shared block ---$", re.S | re.M)


RUN_HELP = """
import contextlib, io, json, runpy, sys
results = {}
for path in sys.argv[1:]:
    sys.argv, out = [path, "--help"], io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        code = "returned without exiting"
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = f"{type(exc).__name__}: {exc}"
    results[path] = {"code": code, "help": out.getvalue()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def help_runs():
    """`diagnostics/<file> --help` for every file, each run as __main__, all in one interpreter (torch imports once)."""
    proc = subprocess.run([sys.executable, "-c", RUN_HELP, *map(str, FILES)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_help_exits_0(path, help_runs):
    run = help_runs[str(path)]
    assert run["code"] == 0, run["code"]
    assert run["help"].strip()


def test_there_are_model_diagnostics():
    assert {"doctor.py", "init_loss.py"} <= {p.name for p in MODEL_DIAGNOSTICS}


def test_shared_blocks_are_byte_identical():
    blocks = {p.name: BLOCK.findall(p.read_text()) for p in FILES}
    holders = {name: found for name, found in blocks.items() if found}
    assert holders, "no file holds the shared block"
    for name, found in holders.items():
        assert len(found) == 1, f"{name} holds the shared block {len(found)} times"
    reference_name, [reference] = next(iter(holders.items()))
    differing = [name for name, [block] in holders.items() if block != reference]
    assert not differing, f"shared block differs from {reference_name}'s in: {', '.join(differing)}"


TIME_LIMIT = re.compile(r"^class CheckTimeout\(BaseException\):.*?^        signal\.signal\(signal\.SIGALRM, previous\)$", re.S | re.M)


def test_every_time_limit_is_the_shared_blocks():
    """Tools that run user code outside the shared block (rl_probes, metric_stuck, ...) carry its time limit verbatim."""
    pieces = {p.name: TIME_LIMIT.findall(p.read_text()) for p in FILES}
    reference = pieces["doctor.py"][0]
    holders = [name for name, found in pieces.items() if found]
    assert {"rl_probes.py", "metric_stuck.py", "loss_surface.py", "pinn_check.py"} <= set(holders)
    assert not [name for name in holders if pieces[name] != [reference]]


@pytest.mark.parametrize("path", MODEL_DIAGNOSTICS, ids=lambda p: p.name)
def test_model_diagnostic_layout(path):
    source = path.read_text()
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    assert docstring, "no module docstring"
    headings = [line.strip() for line in docstring.splitlines() if line.strip() in SECTIONS and not line.startswith(" ")]
    assert headings == SECTIONS, f"tutorial sections {headings}, expected {SECTIONS} in that order"
    output = docstring.split("\nOutput\n", 1)[1].split("\nHow to read it\n", 1)[0]
    assert output.strip() and "#OUTPUT#" not in output, "the Output section must hold a real captured run"
    after_docstring = source.split('"""', 2)[2].lstrip("\n")
    assert after_docstring.startswith(IMPORTS), "the standard imports must come first"
    assert BLOCK.search(source), "no shared block"
    assert any(line.split("# BUG:")[0].strip() for line in source.splitlines() if "# BUG:" in line), \
        "the broken demo needs a `# BUG:` comment on its planted line"
    if path.name != "doctor.py":
        assert f"\ndef check_{path.stem}(case" in source, f"check_{path.stem}(case, ...) is the function API"
        assert source.rstrip().endswith(f"sys.exit(cli_main(check_{path.stem}, make_demo_case, __doc__))")


CTRL_C = """
import runpy, sys
import torch  # loaded before the tracer is set: tracing every call of torch's import took ~10 s per tool
path = sys.argv[1]
def trace(frame, event, arg):  # Ctrl-C arriving as main() starts: deterministic, unlike a timed SIGINT
    if event == "call" and frame.f_code.co_name == "main" and frame.f_code.co_filename == path:
        raise KeyboardInterrupt
sys.argv = [path]
sys.settrace(trace)
runpy.run_path(path, run_name="__main__")
"""


CTRL_C_IN_IMPORT = """
import runpy, sys
class Interrupt:  # Ctrl-C arriving while torch loads: deterministic, unlike a timed SIGINT
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def imports_torch_on_load(path):
    """A top-level `import torch`, bare or in a top-level try (code quoted in strings does not count)."""
    statements = ast.parse(path.read_text()).body
    statements += [s for t in statements if isinstance(t, ast.Try) for s in t.body]
    return any(isinstance(s, ast.Import) and any(a.name == "torch" for a in s.names) for s in statements)


TORCH_COMMANDS = [p for p in FILES if imports_torch_on_load(p)]


@pytest.mark.hostile
def test_ctrl_c_while_torch_loads_exits_130_quietly():
    """Issue 8: Ctrl-C during the second or two of `import torch` printed Python's traceback in every tool."""
    assert len(TORCH_COMMANDS) > 20
    for path in TORCH_COMMANDS:
        proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_IMPORT, str(path)], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
        assert (proc.returncode, proc.stderr) == (130, ""), path.name


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["sweeps.py", "rl_probes.py", "metric_stuck.py", "loss_surface.py", "pinn_check.py",
                                  "capture.py"])
def test_ctrl_c_in_a_standalone_tool_exits_130_quietly(name):
    path = str(DIAGNOSTICS / name)
    proc = subprocess.run([sys.executable, "-c", CTRL_C, path], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "")


@pytest.mark.hostile
@pytest.mark.parametrize("name, flag", [("rl_probes.py", "--agent"), ("metric_stuck.py", "--problem"),
                                        ("loss_surface.py", "--surface"), ("pinn_check.py", "--problem")])
def test_a_user_file_that_hangs_is_stopped_at_the_time_limit(name, flag, tmp_path):
    hangs = tmp_path / "hangs.py"
    hangs.write_text("import time\ntime.sleep(120)  # a user file that never returns\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(DIAGNOSTICS / name), flag, str(hangs), "--timeout", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=100)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "1 s time limit" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 60  # torch's import plus the limit, not the 120 s sleep
