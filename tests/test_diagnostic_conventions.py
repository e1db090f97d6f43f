"""Conventions every file in diagnostics/ keeps (CONTRIBUTING.md, "Diagnostics")."""
import ast
import concurrent.futures
import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import COMMANDS, CONTRACT, DIAGNOSTICS, ROOT

MODEL_DIAGNOSTICS = [p for p in COMMANDS if "\ndef make_demo_case(" in p.read_text()]
SECTIONS = ["Symptom", "What it checks", "Command", "Output", "How to read it", "Next step"]
TORCH_FIRST = ("try:\n    import torch\nexcept KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, "
               "end quietly like main() does\n    if __name__ == \"__main__\":\n        sys.exit(130)\n    raise\n")


def top_level_names(tree):
    """The names a module's top level defines: its functions, classes and assigned names."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


CONTRACT_NAMES = {name for name in top_level_names(ast.parse(CONTRACT.read_text())) if not name.startswith("_")}


@pytest.fixture(scope="module")
def help_runs(usage_runs):
    """`diagnostics/<file> --help` for every file, each run as __main__ (usage_runs: one interpreter for all)."""
    return usage_runs["help"]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_help_exits_0(path, help_runs):
    run = help_runs[str(path)]
    assert run["code"] == 0, run["code"]
    assert run["help"].strip()


ENTRY_POINTS = [*COMMANDS, ROOT / "ml_debug" / "cli.py", ROOT / "tools" / "install_skill.py"]  # and `ml-debug` itself


def typed_option(source):
    """The first option that argparse converts or checks (type=int or float, or choices=) in this source; or None."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args \
                and isinstance(node.args[0], ast.Constant):
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            kind = keywords.get("type")
            if "choices" in keywords or (isinstance(kind, ast.Name) and kind.id in ("int", "float")):
                return node.args[0].value
    return None


def bad_usages(path):
    """The argument lists argparse must refuse: an unknown flag, and a bad value for the first typed option (the
    contract's --timeout for a check whose CLI is cli_main)."""
    source = path.read_text()
    option = typed_option(source) or (typed_option(CONTRACT.read_text()) if "cli_main(" in source else None)
    usages = [["--no-such-flag"]]
    if option:
        usages.append([option, "not-a-value"] if option.startswith("-") else ["not-a-value"])
    return usages


BAD_USAGES = [(path, argv) for path in ENTRY_POINTS for argv in bad_usages(path)]

RUN_USAGE = """
import contextlib, io, json, os, runpy, sys
helps, bad_usages = json.loads(sys.argv[1]), json.loads(sys.argv[2])


def run(path, argv, kept):
    # `python path argv...` as __main__, with path's folder first on sys.path: (exit code, what it wrote on `kept`)
    sys.path.insert(0, os.path.dirname(path))
    sys.argv, streams = [path, *argv], {"stdout": io.StringIO(), "stderr": io.StringIO()}
    try:
        with contextlib.redirect_stdout(streams["stdout"]), contextlib.redirect_stderr(streams["stderr"]):
            runpy.run_path(path, run_name="__main__")
        code = "returned without exiting"
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = f"{type(exc).__name__}: {exc}"
    sys.path.remove(os.path.dirname(path))
    return code, streams[kept].getvalue()


help_results = {path: dict(zip(("code", "help"), run(path, ["--help"], "stdout"))) for path in helps}
sys.path.append(os.getcwd())  # the ml_debug package of this checkout, for ml_debug/cli.py
bad_usage_results = [dict(zip(("code", "stderr"), run(path, argv, "stderr"))) for path, argv in bad_usages]
print(json.dumps({"help": help_results, "bad_usage": bad_usage_results}))
"""


@pytest.fixture(scope="module")
def usage_runs():
    """Every command with --help, then every entry point with each of its bad usages, as __main__, all in one
    interpreter (torch imports once): {"help": {path: run}, "bad_usage": {index: run}}."""
    runs = [(str(path), argv) for path, argv in BAD_USAGES]
    proc = subprocess.run([sys.executable, "-c", RUN_USAGE, json.dumps(list(map(str, COMMANDS))), json.dumps(runs)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    return {"help": results["help"], "bad_usage": dict(zip(map(str, range(len(runs))), results["bad_usage"]))}


@pytest.fixture(scope="module")
def bad_usage_runs(usage_runs):
    return usage_runs["bad_usage"]


@pytest.mark.hostile
@pytest.mark.parametrize("index", range(len(BAD_USAGES)),
                         ids=[f"{path.name} {' '.join(argv)}" for path, argv in BAD_USAGES])
def test_bad_usage_is_one_line_and_exit_2(index, bad_usage_runs):
    """Issue 22: argparse printed its usage block on every bad flag; the contract's ArgumentParser says one line."""
    run = bad_usage_runs[str(index)]
    lines = run["stderr"].splitlines()
    assert run["code"] == 2, run
    assert len(lines) == 1 and lines[0].strip() and "usage:" not in run["stderr"], run["stderr"]


@pytest.mark.hostile
def test_every_entry_point_is_tried_with_a_bad_value():
    tried = {path.name for path, argv in BAD_USAGES if argv != ["--no-such-flag"]}
    assert {"doctor.py", "init_loss.py", "spikes.py", "bad_samples.py", "monitor.py", "cli.py"} <= tried
    assert len(tried) > 25


def refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_json_text_writes_null_for_a_non_finite_number_and_lists_where():
    import numpy
    import torch

    from ml_debug_contract import json_text

    text = json_text({"id": "x", "loss": float("nan"), "details": {
        "per_pass": [1.0, float("inf"), torch.tensor(float("-inf"))], "a/b": numpy.float32("nan"),
        "scalar": torch.tensor(2.5), "count": numpy.int64(3), "pair": (float("nan"), 1)}})
    parsed = json.loads(text, parse_constant=refuse)
    assert parsed["loss"] is None and parsed["details"]["per_pass"] == [1.0, None, None]
    assert parsed["details"]["a/b"] is None and parsed["details"]["pair"] == [None, 1]
    assert parsed["details"]["scalar"] == 2.5 and parsed["details"]["count"] == 3
    assert parsed["non_finite"] == ["/loss", "/details/per_pass/1", "/details/per_pass/2", "/details/a~1b",
                                    "/details/pair/0"]
    assert json.loads(json_text({"loss": 1.0, "steps": [1, 2]})) == {"loss": 1.0, "steps": [1, 2]}  # no flag when finite


NAN_CASE = """
import torch

def make_case():
    torch.manual_seed(0)
    return {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            "loss_fn": lambda out, y: torch.nn.functional.cross_entropy(out, y) * float("nan"),
            "task": {"kind": "classification"}}
"""


def test_a_check_with_a_nan_loss_prints_strict_json(tmp_path):
    """init_loss's details hold the NaN loss it fails on: Python's json wrote `NaN`, which strict readers refuse."""
    (tmp_path / "nan_case.py").write_text(NAN_CASE)
    proc = subprocess.run([sys.executable, str(DIAGNOSTICS / "init_loss.py"), "--case", str(tmp_path / "nan_case.py"),
                           "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout, parse_constant=refuse)
    assert result["status"] == "fail" and result["details"]["loss"] is None
    assert {"/details/loss", "/details/loss_per_pass/0"} <= set(result["non_finite"])


JSON_COMMANDS = [p for p in COMMANDS if '"--json"' in p.read_text() or "cli_main(" in p.read_text()]


@pytest.mark.parametrize("path", JSON_COMMANDS, ids=lambda p: p.name)
def test_every_json_output_goes_through_json_text(path):
    tree = ast.parse(path.read_text())
    dumps = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in ("dump", "dumps")
             and isinstance(node.value, ast.Name) and node.value.id == "json"]
    assert not dumps, f"json.dumps at line {dumps}: print --json with the contract's json_text"
    imported = {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                and node.module == "ml_debug_contract" for alias in node.names}
    assert imported & {"json_text", "cli_main"}


def test_there_are_model_diagnostics():
    assert {"doctor.py", "init_loss.py"} <= {p.name for p in MODEL_DIAGNOSTICS}


def test_no_file_holds_a_copy_of_the_contract():
    """The model checks once carried the contract as a copied block; the copies are gone for good."""
    copies = [p.relative_to(DIAGNOSTICS).as_posix() for p in sorted(DIAGNOSTICS.rglob("*.py"))
              if re.search(r"^# --- (end )?shared block", p.read_text(), re.M)]
    assert not copies


def test_the_contract_is_a_module_and_holds_the_names():
    assert {"CheckResult", "CaseError", "load_case", "validate_case", "to_device", "forward", "preserved", "CHECK_TIMEOUT",
            "CheckTimeout", "time_limit", "cli_main"} <= CONTRACT_NAMES
    assert "__main__" not in CONTRACT.read_text(), "the contract is imported, never run"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_commands_import_the_contract_and_define_none_of_it(path):
    tree = ast.parse(path.read_text())
    redefined = top_level_names(tree) & CONTRACT_NAMES
    assert not redefined, f"defines {sorted(redefined)} itself: import them from ml_debug_contract"
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                and node.module == "ml_debug_contract" for alias in node.names}
    parameters = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}  # capture.py's time_limit=
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & CONTRACT_NAMES - parameters
    assert used <= imported, f"uses {sorted(used - imported)} without importing them from ml_debug_contract"
    if path in MODEL_DIAGNOSTICS:
        assert {"CheckResult", "validate_case"} <= imported


RUN_ALONE = """
import contextlib, io, json, runpy, sys
results = {}
for folder, name in json.loads(sys.argv[1]):
    sys.path.insert(0, folder)  # as `python folder/name` puts the script's folder first
    for args in (["--help"], []):
        sys.modules.pop("ml_debug_contract", None)
        sys.argv, out = [f"{folder}/{name}", *args], io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(sys.argv[0], run_name="__main__")
            code = "returned without exiting"
        except SystemExit as exc:
            code = exc.code
        contract = sys.modules.get("ml_debug_contract")
        results[f"{name} {' '.join(args)}".strip()] = {"code": code, "out": out.getvalue(),
                                                       "contract": getattr(contract, "__file__", None)}
    sys.path.remove(folder)
print(json.dumps(results))
"""


def test_a_check_copied_alone_with_the_contract_runs(tmp_path):
    """Each model check with ml_debug_contract.py, and nothing else, in a folder of its own: --help and the demo."""
    folders = []
    for path in MODEL_DIAGNOSTICS:
        folder = tmp_path / f"copy-of-{path.stem}"  # not importable: the doctor must not take the folder for its check
        folder.mkdir()
        shutil.copy(path, folder)
        shutil.copy(CONTRACT, folder)
        if path.name == "training_loop.py":  # its demo is a captured loop: capture.py travels with it (its docstring says)
            shutil.copy(DIAGNOSTICS / "capture.py", folder)
        folders.append((str(folder), path.name))
    proc = subprocess.run([sys.executable, "-c", RUN_ALONE, json.dumps(folders)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    for folder, name in folders:
        helped, demo = results[f"{name} --help"], results[name]
        assert helped["code"] == 0 and "--json" in helped["out"], (name, helped["code"])
        assert demo["contract"] == f"{folder}/ml_debug_contract.py", name
        if name == "doctor.py":  # alone, it finds none of its checks beside it: each one is skipped, none fails
            assert demo["code"] == 0 and "init_loss.py is not next to doctor.py" in demo["out"], demo
        else:  # the embedded demo's planted bug fails
            assert demo["code"] == 1, (name, demo)


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
    assert TORCH_FIRST in after_docstring.split("\nfrom ml_debug_contract import ")[0], \
        "torch must be imported (Ctrl-C there ends quietly) before the contract"
    assert any(line.split("# BUG:")[0].strip() for line in source.splitlines() if "# BUG:" in line), \
        "the broken demo needs a `# BUG:` comment on its planted line"
    if path.name != "doctor.py":
        assert f"\ndef check_{path.stem}(case" in source, f"check_{path.stem}(case, ...) is the function API"
        assert source.rstrip().endswith(f"sys.exit(cli_main(check_{path.stem}, make_demo_case, __doc__))")


CTRL_C = """
import contextlib, io, json, os, runpy, sys
import torch  # loaded before the tracer is set: tracing every call of torch's import took ~10 s per tool
results = {}
for path in sys.argv[1:]:  # one interpreter for all: each tool's own run would import torch again (~3 s)
    sys.path.insert(0, os.path.dirname(path))  # as `python path` does: the contract module is beside it
    def trace(frame, event, arg, path=path):  # Ctrl-C arriving as main() starts: deterministic, unlike a timed SIGINT
        if event == "call" and frame.f_code.co_name == "main" and frame.f_code.co_filename == path:
            raise KeyboardInterrupt
    sys.argv, err = [path], io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            sys.settrace(trace)
            try:
                runpy.run_path(path, run_name="__main__")
            finally:
                sys.settrace(None)
        code = "returned without exiting"
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = f"{type(exc).__name__}: {exc}"
    sys.path.remove(os.path.dirname(path))
    results[path] = {"code": code, "stderr": err.getvalue()}
print(json.dumps(results))
"""


CTRL_C_IN_IMPORT = """
import os, runpy, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))  # as `python path` does: the contract module is beside it
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


TORCH_COMMANDS = [p for p in COMMANDS if imports_torch_on_load(p)]


@pytest.mark.hostile
def test_ctrl_c_while_torch_loads_exits_130_quietly():
    """Issue 8: Ctrl-C during the second or two of `import torch` printed Python's traceback in every tool."""
    assert len(TORCH_COMMANDS) > 20
    for path in TORCH_COMMANDS:
        proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_IMPORT, str(path)], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
        assert (proc.returncode, proc.stderr) == (130, ""), path.name


CTRL_C_TOOLS = ["sweeps.py", "rl_probes.py", "metric_stuck.py", "loss_surface.py", "pinn_check.py", "capture.py"]
FILE_FLAGS = [("rl_probes.py", "--agent"), ("metric_stuck.py", "--problem"), ("loss_surface.py", "--surface"),
              ("pinn_check.py", "--problem")]
STANDALONE_AT_ONCE = 3  # runs at once: all ten at once on a loaded 2-core machine took past the 120 s limit (measured)


@pytest.fixture(scope="module")
def standalone_runs(tmp_path_factory):
    """{(test, tool): (CompletedProcess, its seconds)} for the two tests below, STANDALONE_AT_ONCE at a time: each run is
    mostly torch's import or a wait at the time limit, so they overlap rather than queue. The Ctrl-C runs share one
    interpreter (("ctrl-c", "all"): its stdout is {tool: {code, stderr}})."""
    hangs = tmp_path_factory.mktemp("hangs") / "hangs.py"
    hangs.write_text("import time\ntime.sleep(120)  # a user file that never returns\n")
    commands = {("ctrl-c", "all"): [sys.executable, "-c", CTRL_C, *(str(DIAGNOSTICS / name) for name in CTRL_C_TOOLS)]}
    commands.update({("hangs", name): [sys.executable, str(DIAGNOSTICS / name), flag, str(hangs), "--timeout", "1"]
                     for name, flag in FILE_FLAGS})

    def run(command):
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
        return proc, time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(STANDALONE_AT_ONCE) as pool:
        futures = {key: pool.submit(run, command) for key, command in commands.items()}
    return {key: future.result() for key, future in futures.items()}


@pytest.mark.hostile
@pytest.mark.parametrize("name", CTRL_C_TOOLS)
def test_ctrl_c_in_a_standalone_tool_exits_130_quietly(name, standalone_runs):
    proc, _ = standalone_runs["ctrl-c", "all"]
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout.splitlines()[-1])[str(DIAGNOSTICS / name)]
    assert (run["code"], run["stderr"]) == (130, "")


@pytest.mark.hostile
@pytest.mark.parametrize("name, flag", FILE_FLAGS)
def test_a_user_file_that_hangs_is_stopped_at_the_time_limit(name, flag, standalone_runs):
    proc, seconds = standalone_runs["hangs", name]
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "1 s time limit" in proc.stderr and "Traceback" not in proc.stderr
    assert seconds < 60  # torch's import plus the limit, not the 120 s sleep


@pytest.mark.parametrize("timeout", ["inf", "1e300", "1e12"])
def test_a_timeout_longer_than_a_timer_holds_is_no_limit_not_an_overflow(timeout, capsys):
    """--timeout inf gave "the check could not run: OverflowError" in every tool on the shared time_limit()."""
    import init_loss
    code = init_loss.cli_main(init_loss.check_init_loss, init_loss.make_demo_case, init_loss.__doc__, ["--timeout", timeout])
    assert code == 1 and capsys.readouterr().out.startswith("[FAIL] init_loss: "), code  # the demo's planted bug
