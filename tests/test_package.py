"""The wheel, built from this checkout and installed into a fresh virtual environment, gives the
`ml-debug` command (every subcommand) and the import API, from the files in diagnostics/.

The fresh environment has nothing installed but the wheel; it sees the test environment's
site-packages through a .pth file, so torch is found without downloading it again (the wheel is
installed with --no-deps, offline). Every command runs from a temporary folder, never from the
checkout, so nothing is imported from the repo by accident (the test asserts where ml_debug comes from).
"""
import json
import math
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import ROOT

pytest.importorskip("hatchling", reason="hatchling builds the wheel (requirements-test.txt pins it)")
pytest.importorskip("build", reason="the build frontend (requirements-test.txt pins it)")
SUBCOMMANDS = ("doctor", "spikes", "lint", "resume-check", "install-skill")
FRAMEWORKS = ("transformers", "lightning", "pytorch_lightning")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(bin folder of a fresh venv with the wheel installed, the wheel's path, a scratch folder)."""
    tmp = tmp_path_factory.mktemp("package")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp / "dist", ROOT],
                   check=True, capture_output=True, timeout=120)
    wheel = next((tmp / "dist").glob("ml_debug-*.whl"))
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter this test venv was made from
    subprocess.run([base, "-m", "venv", "--without-pip", tmp / "venv"], check=True, timeout=120)
    python = tmp / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "_test_env.pth"), "w") as pth:  # torch and the rest, without a download
        pth.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet",
                    "--disable-pip-version-check", wheel], check=True, capture_output=True, timeout=120)
    work = tmp / "work"
    work.mkdir()
    return python.parent, wheel, work


def run(venv, *args, timeout=120):
    bin_dir, _, work = venv
    return subprocess.run([bin_dir / args[0], *map(str, args[1:])], capture_output=True, text=True, cwd=work,
                          timeout=timeout, env=dict(os.environ, PYTHONHASHSEED="0"))


def test_the_wheel_carries_the_diagnostics_and_the_skill_pack_as_they_are(venv):
    names = set(zipfile.ZipFile(venv[1]).namelist())
    for path in [*ROOT.glob("diagnostics/**/*.py"), ROOT / "SKILL.md", ROOT / "PLAYBOOK.md", *ROOT.glob("refs/**/*.md"),
                 *ROOT.glob("evidence/*.md"), ROOT / "tools" / "install_skill.py", ROOT / "tools" / "check_pack.py"]:
        if "__pycache__" not in path.parts:
            assert f"ml_debug/{path.relative_to(ROOT).as_posix()}" in names, path
    assert not any("__pycache__" in name or name.startswith("tests/") for name in names)
    metadata = zipfile.ZipFile(venv[1]).read("ml_debug-0.1.0.dist-info/METADATA").decode()
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert required == ["Requires-Dist: torch>=2.1"]


def test_every_subcommand_has_help(venv):
    """`ml-debug <command> --help` for each command, in one process (one torch import, not five)."""
    code = f"""
import contextlib, io, sys
from ml_debug.cli import main
for command in {SUBCOMMANDS!r}:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main([command, "--help"])
    except SystemExit as exc:
        assert exc.code in (0, None), (command, exc.code)
    else:
        raise AssertionError(command + " --help did not exit")
    assert out.getvalue().startswith("usage:"), (command, out.getvalue()[:200])
print("ok")
"""
    proc = run(venv, "python", "-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout[-2000:] + proc.stderr[-2000:]
    top = run(venv, "ml-debug", "--help")
    assert top.returncode == 0 and all(command in top.stdout for command in SUBCOMMANDS)


@pytest.mark.hostile
def test_unknown_subcommand_is_one_line_and_exit_2(venv):
    proc = run(venv, "ml-debug", "fix-my-model")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "doctor" in proc.stderr


def test_doctor_runs_the_demo_and_finds_its_planted_bug(venv):
    proc = run(venv, "ml-debug", "doctor", "--json")
    assert proc.returncode == 1, proc.stderr
    statuses = {check["id"]: check["status"] for check in json.loads(proc.stdout)["checks"]}
    assert statuses["init_loss"] == "fail"
    assert [check for check, status in statuses.items() if status == "fail"] == ["init_loss"]


def test_doctor_on_a_script_from_the_installed_command(venv, tmp_path):
    """`ml-debug doctor --script train.py -- ARGS`: the capture works from the wheel, and the script writes nothing."""
    script = ROOT / "tests" / "corpus" / "scripts" / "train_args_ckpt.py"
    proc = run(venv, "ml-debug", "doctor", "--script", script, "--json", "--", "--batch_size", "128", "--out_dir", tmp_path)
    assert proc.returncode == 1, proc.stderr
    statuses = {check["id"]: check["status"] for check in json.loads(proc.stdout)["checks"]}
    assert statuses["overfit_one_batch"] == "fail"  # the script's lr is 0 (`//`), as in tests/test_doctor_script.py
    assert list(tmp_path.iterdir()) == []


def test_spikes_reads_a_log(venv):
    log = venv[2] / "small.jsonl"
    with open(log, "w") as f:
        for step in range(120):
            wiggle = 0.01 * math.sin(step * 1.7)
            f.write(json.dumps({"step": step, "loss": 2.0 * math.exp(-step / 200) + wiggle + (3.0 if step == 80 else 0.0)}) + "\n")
    proc = run(venv, "ml-debug", "spikes", "--json", log)
    assert proc.returncode == 0, proc.stderr
    assert [spike["step"] for spike in json.loads(proc.stdout)["spikes"]] == [80]


def test_install_skill_from_the_installed_package(venv):
    proc = run(venv, "ml-debug", "install-skill", venv[2] / "skills")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = venv[2] / "skills" / "ml-debug"
    assert (installed / "SKILL.md").read_text() == (ROOT / "SKILL.md").read_text()
    assert (installed / "diagnostics" / "doctor.py").read_text() == (ROOT / "diagnostics" / "doctor.py").read_text()


def test_import_api_comes_from_the_wheel_and_never_imports_the_frameworks(venv):
    """`import ml_debug`, its API and a CLI run load neither transformers nor Lightning (optional extras)."""
    log = venv[2] / "api.jsonl"
    code = f"""
import sys, torch
import ml_debug
from ml_debug import TrainingMonitor, SpikeGuard, NanWatch, run_doctor
from ml_debug.cli import main
assert ml_debug.__file__.startswith(sys.prefix), ml_debug.__file__
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
watch = NanWatch(model)
with TrainingMonitor({str(log)!r}, model) as mon:
    guard = SpikeGuard(model, monitor=mon)
    for step in range(3):
        loss = model(torch.randn(5, 4)).square().mean()
        loss.backward()
        assert watch.check(step) is None and not guard.should_skip(step, loss)
        mon.log(step, loss)
        model.zero_grad()
watch.remove()
case = {{"model": model, "batch": (torch.randn(8, 4), torch.randint(0, 2, (8,))),
        "loss_fn": torch.nn.functional.cross_entropy, "task": {{"kind": "classification", "num_classes": 2}}}}
results = run_doctor(case, checks=[("data_sanity", "data_sanity"), ("nan_watch", "nan_watch")])
assert [r.status for r in results] == ["pass", "pass"], results
try:
    main(["lint", "--help"])
except SystemExit as exc:
    assert exc.code == 0
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r})
assert not loaded, loaded
print("ok")
"""
    proc = run(venv, "python", "-c", code)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [0, 1, 2]


@pytest.mark.hostile
def test_install_skill_without_the_skill_extra_says_what_to_install(venv):
    dest = venv[2] / "no-extra"
    code = ("import sys; sys.modules['skills_ref'] = None  # as if ml-debug[skill] were not installed\n"
            f"from ml_debug.cli import main; sys.exit(main(['install-skill', {str(dest)!r}]))")
    proc = run(venv, "python", "-c", code)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "ml-debug[skill]" in proc.stderr and not dest.exists()


def test_the_arguments_after_a_command_reach_its_file_unchanged(monkeypatch):
    """`ml-debug lint -- -odd.py`: the `--` is lint's to read, not the dispatcher's."""
    from ml_debug import cli

    seen = []
    monkeypatch.setattr(cli, "run_file", lambda path, args: seen.append((path.name, args)) or 0)
    assert cli.main(["lint", "--", "-odd.py", "--json"]) == 0
    assert seen == [("lint.py", ["--", "-odd.py", "--json"])]
    assert cli.main(["lint", "--no-such-flag"]) == 0 and seen[-1] == ("lint.py", ["--no-such-flag"])


def test_the_dispatcher_refuses_no_command_or_an_option_first_and_passes_an_unrelated_import_error_on(monkeypatch, capsys):
    from ml_debug import cli

    monkeypatch.setattr(cli, "run_file", lambda path, args: 0)
    for argv in ([], ["--json"], ["-x", "lint"]):
        assert cli.main(argv) == 2
        assert "a command comes first" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # install_skill names the program in sys.argv
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "install_skill", None)  # its import fails, for a reason not the [skill] extra's
    with pytest.raises(ModuleNotFoundError):
        cli.main(["install-skill", "dest"])
    assert "ml-debug[skill]" not in capsys.readouterr().err


def test_the_package_api_loads_its_tools_and_a_file_that_fails_to_load_leaves_no_half_module(tmp_path, monkeypatch,
                                                                                              capsys):
    import ml_debug
    from ml_debug import cli

    assert ml_debug.SpikeGuard.__name__ == "SpikeGuard"  # the lazy API: diagnostics/spike_guard.py's class
    broken = tmp_path / "broken_tool.py"
    broken.write_text("raise ValueError('not loadable')\n")
    monkeypatch.setattr(ml_debug, "DIAGNOSTICS", tmp_path)
    with pytest.raises(ValueError, match="not loadable"):
        ml_debug.load("broken_tool")
    assert "ml_debug.broken_tool" not in sys.modules
    monkeypatch.undo()
    assert cli.main(["--version"]) == 0 and capsys.readouterr().out.startswith("ml-debug ")
