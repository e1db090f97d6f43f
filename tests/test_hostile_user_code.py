"""User code that fights the doctor: each hostile kind, fed to every way the doctor runs user code.

DESIGN.md "Safety": user code (a case file, a training script) runs in a supervised child; the parent owns the
terminal, the output and the exit code, and kills the child's process group at the time limit whatever the code
does. Each kind below is planted once at the top of a case file (`--case`, run at import) and once at the top of a
training script (`--script`, run before its first step); the generator applies every kind to every mode, so a new
kind or a new mode is covered by one line.
"""
import re
import sys
import time

import pytest
import torch

import doctor
import ml_debug_contract

pytestmark = pytest.mark.hostile

CASE_BODY = """
import torch
def make_case():
    torch.manual_seed(0)
    return {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(16, 4), torch.randint(0, 3, (16,))),
            "loss_fn": torch.nn.functional.cross_entropy}
"""
SCRIPT_BODY = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
HANG_LIMIT = 0.2  # seconds: --start-timeout for the kinds that never finish (each such run lasts it plus KILL_GRACE)
KILL_GRACE = 0.05  # seconds past the limit before the parent kills (the kinds that ignore the alarm wait it out); a
# child that answers its own alarm later than this is killed with the same line, so a loaded machine changes nothing
START_LIMIT = 120.0  # seconds: for the kinds that finish (a loaded 2-core machine must not make them time out)

# kind -> (code planted first, expected exit code, pattern the one stderr line must match; None: a normal report)
KINDS = {
    "sys-exit": ("import sys\nsys.exit(0)\n", 2, r"SystemExit|sys\.exit"),
    "os-exit": ("import os\nos._exit(0)\n", 2, r"ended \(exit status 0"),
    "own-base-exception": ("class Boom(BaseException):\n    pass\nraise Boom('line one\\nline two')\n", 2,
                           r"Boom.*line one line two"),
    "keyboard-interrupt": ("raise KeyboardInterrupt('raised by the code')\n", 2, r"KeyboardInterrupt"),
    "reads-stdin": ("import sys\nsys.stdin.read()\n", 0, None),
    "non-daemon-thread": ("import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n", 0, None),
    "forks": ("import os\nos.fork()\n", 0, None),
    "loops": ("while True:\n    pass\n", 2, r"time limit"),
    "ignores-the-alarm": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n", 2,
                          r"time limit"),
    "swallows-everything": ("import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n"
                            "        pass\n", 2, r"time limit"),
}


@pytest.fixture
def fast_kill(monkeypatch):
    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", KILL_GRACE)
    monkeypatch.setattr(doctor, "CHECKS", [("data_sanity", "data_sanity")])


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
@pytest.mark.parametrize("mode", ["--case", "--script"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hostile_user_code_ends_in_one_line_or_a_report(kind, mode, tmp_path, capfd, fast_kill):
    planted, code, pattern = KINDS[kind]
    path = tmp_path / ("case.py" if mode == "--case" else "train.py")
    path.write_text(planted + (CASE_BODY if mode == "--case" else SCRIPT_BODY))
    limit = HANG_LIMIT if pattern == r"time limit" else START_LIMIT
    started = time.monotonic()
    exit_code = doctor.main([mode, str(path), "--start-timeout", str(limit)])
    seconds = time.monotonic() - started
    out, err = capfd.readouterr()
    assert exit_code == code, (out, err)
    assert seconds < 30, "the parent must not wait on the user's threads, forks or loops"
    if pattern is None:
        assert out.count("doctor: ") == 1, "one report, also when the user's code forked"
        assert "data_sanity" in out
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and re.search(pattern, lines[0]), err
        assert "Traceback" not in err and "usage:" not in err


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
def test_no_process_of_the_users_is_left_behind(tmp_path, capfd, fast_kill):
    """A case file that forks and starts a sleeping thread: after the report, its processes are gone."""
    pids = tmp_path / "pids"
    planted = (f"import os, threading, time\nchild = os.fork()\nif child == 0:\n    time.sleep(3600)\n"
               f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child}}')\n"
               "threading.Thread(target=time.sleep, args=(3600,)).start()\n")
    path = tmp_path / "case.py"
    path.write_text(planted + CASE_BODY)
    assert doctor.main(["--case", str(path)]) == 0
    capfd.readouterr()
    left = [int(pid) for pid in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in left):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in left)


def _alive(pid):
    """Whether a process runs (a zombie waiting to be reaped by init does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
def test_a_check_whose_process_dies_is_that_checks_fail_and_the_rest_are_skipped(tmp_path, capfd, monkeypatch):
    """The model calls os._exit inside forward: the check running then fails, the later ones say why they did not run."""
    monkeypatch.setattr(doctor, "CHECKS", [("data_sanity", "data_sanity"), ("init_loss", "init_loss"),
                                           ("gradient_flow", "gradient_flow")])
    path = tmp_path / "case.py"
    path.write_text("import os, torch\n"
                    "class Dies(torch.nn.Linear):\n"
                    "    def forward(self, x):\n"
                    "        os._exit(3)\n"
                    "def make_case():\n"
                    "    return {'model': Dies(4, 3), 'batch': (torch.randn(16, 4), torch.randint(0, 3, (16,))),\n"
                    "            'loss_fn': torch.nn.functional.cross_entropy}\n")
    assert doctor.main(["--case", str(path), "--json"]) == 1
    import json
    checks = {check["id"]: check for check in json.loads(capfd.readouterr().out)["checks"]}
    assert checks["data_sanity"]["status"] == "pass"
    assert checks["init_loss"]["status"] == "fail" and "exit status 3" in checks["init_loss"]["summary"]
    assert checks["gradient_flow"]["status"] == "skip" and "init_loss" in checks["gradient_flow"]["summary"]


# --- every other tool that runs a user's file: the same kinds, through each tool's own CLI -------------------------
# tool -> (module, flag, a healthy file body built from the tool's own demo, the exit code of that healthy body)
TOOLS = {
    "init_loss --case": ("init_loss", "--case",
                         "from init_loss import make_demo_case\ndef make_case():\n    return make_demo_case(broken=False)\n", 0),
    "nan_watch --case": ("nan_watch", "--case",
                         "from nan_watch import make_demo_case\ndef make_case():\n    return make_demo_case(broken=False)\n", 0),
    "metric_stuck --problem": ("metric_stuck", "--problem",
                               "from metric_stuck import make_demo_problem\ndef make_problem():\n"
                               "    return make_demo_problem(None)\n", 0),
    "pinn_check --problem": ("pinn_check", "--problem",
                             "from pinn_check import make_demo_pinn\ndef make_pinn():\n    return make_demo_pinn(None)\n", 0),
    "loss_surface --surface": ("loss_surface", "--surface",
                               "from loss_surface import make_demo_surface\ndef make_surface():\n"
                               "    return make_demo_surface(None)\n", 0),
    "rl_probes --agent": ("rl_probes", "--agent", "from rl_probes import ReferenceAgent as make_agent\n", 0),
    "resume_check --trainer": ("resume_check", "--trainer",
                               "from resume_check import make_demo_trainer\ndef make_trainer():\n"
                               "    return make_demo_trainer(None)\n", 0),
}
ENDING = [kind for kind, (_, code, _) in KINDS.items() if code == 2]  # the kinds that end the run: exit 2, one line
REPORTING = ["reads-stdin", "non-daemon-thread", "forks"]  # the kinds after which the tool must still report


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("kind", sorted(ENDING) + REPORTING)
def test_every_tool_that_runs_a_users_file_survives_it(tool, kind, tmp_path, capfd, monkeypatch):
    import importlib
    module_name, flag, body, healthy_code = TOOLS[tool]
    planted, code, pattern = KINDS[kind]
    if code == 0:
        code = healthy_code
    limit = HANG_LIMIT if pattern == r"time limit" else START_LIMIT
    monkeypatch.setattr(ml_debug_contract, "USER_CODE_LIMIT", limit)  # the --case tools' start limit
    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", KILL_GRACE)
    module = importlib.import_module(module_name)
    path = tmp_path / "user_file.py"
    path.write_text(planted + body)
    argv = [flag, str(path), "--timeout", str(limit)]
    started = time.monotonic()
    exit_code = module.main(argv) if hasattr(module, "main") else module.cli_main(
        getattr(module, f"check_{module_name}"), module.make_demo_case, module.__doc__, argv)
    seconds = time.monotonic() - started
    out, err = capfd.readouterr()
    assert exit_code == code, (out, err)
    assert seconds < 60, "the parent must not wait on the user's threads, forks or loops"
    if pattern is None:
        assert out.strip() and "Traceback" not in err
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and re.search(pattern, lines[0]), err
        if pattern == r"time limit" and flag != "--case":  # the tool's --timeout covers the file: the line says so
            assert "--timeout" in lines[0], err


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_tool_imports_a_users_file_without_writing_beside_it_and_refuses_a_folder(tool, tmp_path, capfd,
                                                                                       monkeypatch):
    """The file is imported with no __pycache__ written beside it (here a file with no factory: refused after its
    import), and a folder given as the file is not a regular file: one line, exit 2 each."""
    import importlib
    module_name, flag, _, _ = TOOLS[tool]
    module = importlib.import_module(module_name)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as where PYTHONDONTWRITEBYTECODE is not set
    path = tmp_path / "user_file.py"
    path.write_text("import json\nVALUE = 1\n")
    for target, says in ((path, "has no function"), (tmp_path, "is not a regular file")):
        argv = [flag, str(target)]
        exit_code = module.main(argv) if hasattr(module, "main") else module.cli_main(
            getattr(module, f"check_{module_name}"), module.make_demo_case, module.__doc__, argv)
        err = capfd.readouterr().err
        assert exit_code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user_file.py"]


TRAINER_BODY = """
import resume_check
class Trainer(resume_check.DemoTrainer):
    def train_step(self):
{planted}
        return super().train_step()
make_trainer = Trainer
"""


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
@pytest.mark.parametrize("kind", sorted(ENDING))
def test_a_trainer_hostile_in_its_train_step_ends_resume_check_in_one_line(kind, tmp_path, capfd, monkeypatch):
    """resume_check calls into the trainer after its import: each kind that ends a run, planted in train_step."""
    import resume_check
    planted, code, pattern = KINDS[kind]
    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", KILL_GRACE)
    path = tmp_path / "trainer.py"
    path.write_text(TRAINER_BODY.format(planted="\n".join(" " * 8 + line for line in planted.splitlines())))
    resume_check.DemoTrainer().train_step()  # torch's lazy imports done here: the child reaches train_step at once
    started = time.monotonic()
    limit = HANG_LIMIT if pattern == r"time limit" else START_LIMIT
    exit_code = resume_check.main(["--trainer", str(path), "--timeout", str(limit)])
    out, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert (exit_code, out) == (code, ""), err
    assert len(lines) == 1 and lines[0].startswith("error: ") and re.search(pattern, lines[0]), err
    assert time.monotonic() - started < 30, "the parent must not wait on the user's loops"


STUCK_CASE = """import signal, torch
class Stuck(torch.nn.Linear):
    def forward(self, x):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            pass
def make_case():
    return {'model': Stuck(4, 3), 'batch': (torch.randn(16, 4), torch.randint(0, 3, (16,))),
            'loss_fn': torch.nn.functional.cross_entropy}
"""


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
def test_one_check_whose_model_ignores_the_alarm_is_stopped_and_says_to_raise_the_timeout(tmp_path, capfd, monkeypatch):
    """cli_main: the check's phase, killed by the parent, gives the same line as the alarm: the check, --timeout."""
    import init_loss
    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", KILL_GRACE)
    path = tmp_path / "case.py"
    path.write_text(STUCK_CASE)
    exit_code = init_loss.cli_main(init_loss.check_init_loss, init_loss.make_demo_case, "init_loss",
                                   ["--case", str(path), "--timeout", "1"])
    out, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert (exit_code, out, len(lines)) == (2, "", 1), err
    assert lines[0].startswith("error: the check ran past the 1 s time limit") and "raise --timeout" in lines[0], err


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
def test_a_check_killed_at_its_time_limit_is_inconclusive_not_a_fail(tmp_path, capfd, monkeypatch):
    """A forward that ignores the alarm and loops: the parent kills the child; a budget run out is no verdict."""
    monkeypatch.setattr(ml_debug_contract, "KILL_GRACE", KILL_GRACE)
    monkeypatch.setattr(doctor, "CHECKS", [("data_sanity", "data_sanity"), ("init_loss", "init_loss"),
                                           ("gradient_flow", "gradient_flow")])
    path = tmp_path / "case.py"
    path.write_text(STUCK_CASE)
    assert doctor.main(["--case", str(path), "--json", "--timeout", "1"]) == 0
    import json
    checks = {check["id"]: check for check in json.loads(capfd.readouterr().out)["checks"]}
    assert checks["init_loss"]["status"] == "skip" and checks["init_loss"]["summary"].startswith("inconclusive")
    assert checks["gradient_flow"]["status"] == "skip" and "init_loss" in checks["gradient_flow"]["summary"]


def test_loading_a_case_writes_no_bytecode_beside_the_users_files(tmp_path, monkeypatch):
    """Importing a case file (and the module beside it that it imports) must not leave __pycache__ in the user's folder."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as Python runs by default (PYTHONDONTWRITEBYTECODE unset)
    (tmp_path / "helper_net_for_case.py").write_text("import torch\ndef net():\n    return torch.nn.Linear(3, 2)\n")
    (tmp_path / "case.py").write_text("import torch\nimport helper_net_for_case\ndef make_case():\n"
                                      "    return {'model': helper_net_for_case.net(), 'batch': (torch.randn(4, 3), "
                                      "torch.randint(0, 2, (4,))), 'loss_fn': torch.nn.functional.cross_entropy}\n")
    before = sys.dont_write_bytecode
    case = ml_debug_contract.load_case(str(tmp_path / "case.py"))
    assert isinstance(case["model"], torch.nn.Linear)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.py", "helper_net_for_case.py"]
    assert sys.dont_write_bytecode is before
