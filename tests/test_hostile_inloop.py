"""The in-loop classes (SpikeGuard, TrainingMonitor), their demo CLIs and resume_check under hostile input and faults.

Corrupt guard state, an all-zero warmup, scalars that shadow the monitor's columns, use after close, log
paths that hold the user's files, folders, devices and FIFOs, Ctrl-C, and a stdout that is closed or full;
trainers that raise SystemExit or KeyboardInterrupt, hang, or share their model and optimizer across builds.
"""
import json
import math
import os
import select
import signal
import subprocess
import sys
import time

import pytest
import torch

import monitor
import resume_check
import spike_guard
from conftest import DIAGNOSTICS
from state_snapshot import differences, snapshot

pytestmark = pytest.mark.hostile


# --- SpikeGuard ------------------------------------------------------------------------------------------


def _trained_guard():
    guard = spike_guard.SpikeGuard(warmup=5)
    for step in range(20):
        guard.should_skip(step, 2.0 + 0.01 * (step % 3), grad_norm=1.0 + 0.01 * (step % 5))
    return guard


def _corrupt(path, value):
    state = _trained_guard().state_dict()
    *parents, key = path
    target = state
    for parent in parents:
        target = target[parent]
    target[key] = value
    return state


CORRUPT = {
    "nan-mean": _corrupt(("loss", "mean"), math.nan),
    "inf-mean": _corrupt(("grad_norm", "mean"), math.inf),
    "inf-var": _corrupt(("loss", "var"), math.inf),
    "nan-in-buffer": _corrupt(("loss", "buffer"), [1.0, math.nan]),
    "int-too-big-for-a-float": _corrupt(("grad_norm", "buffer"), [10 ** 400]),
    "nan-peak-z": _corrupt(("peak_z", "loss"), math.nan),
    "run-with-a-string-step": _corrupt(("run",), [{"step": "7", "event": "skip", "reason": "loss_outlier",
                                                   "value": 9.0, "threshold": 3.0}]),
    "run-with-a-restart-event": _corrupt(("run",), [{"step": 7, "event": "restart", "reason": "x",
                                                     "value": 5, "threshold": 5}]),
}


@pytest.mark.parametrize("state", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_guard_state_is_refused_and_the_guard_is_unchanged(state):
    guard = _trained_guard()
    before = guard.state_dict()
    with pytest.raises(ValueError, match="^not a SpikeGuard state_dict: "):
        guard.load_state_dict(state)
    assert guard.state_dict() == before


def test_a_skip_of_a_nan_loss_carries_over_a_resume():
    guard = _trained_guard()
    assert guard.should_skip(20, math.nan, grad_norm=1.0)  # the run's event holds value NaN: a valid state
    restored = spike_guard.SpikeGuard(warmup=5)
    restored.load_state_dict(guard.state_dict())
    assert restored.consecutive == 1 and math.isnan(restored.state_dict()["run"][0]["value"])


def test_an_all_zero_gradient_warmup_does_not_end_in_skipping_every_step():
    guard = spike_guard.SpikeGuard(warmup=5)
    for step in range(10):  # a frozen model (or an accumulation bug): gradient norm exactly 0
        assert not guard.should_skip(step, 2.0 + 0.01 * (step % 3), grad_norm=0.0)
    assert not guard.norm_stat.ready  # no scale learnt from zeros
    skips = [guard.should_skip(step, 2.0 + 0.01 * (step % 3), grad_norm=1.0 + 0.05 * (step % 4))
             for step in range(10, 60)]
    assert not any(skips) and guard.norm_stat.ready
    assert guard.should_skip(60, 2.0, grad_norm=50.0)  # and it still catches a real outlier afterwards


def test_a_loaded_all_zero_state_warms_up_again():
    state = _trained_guard().state_dict()
    state["grad_norm"] = {"buffer": [], "mean": 0.0, "var": 0.0}  # what an earlier version could save
    guard = spike_guard.SpikeGuard(warmup=5)
    guard.load_state_dict(state)
    assert not guard.norm_stat.ready
    assert not guard.should_skip(0, 2.0, grad_norm=1.0)


# --- TrainingMonitor ---------------------------------------------------------------------------------------


def test_scalars_cannot_overwrite_the_monitors_columns(tmp_path):
    path = tmp_path / "log.jsonl"
    with monitor.TrainingMonitor(path) as mon:
        for name in ("loss", "step", "grad_norm", "event"):
            with pytest.raises(ValueError, match=f"may not be named {name}"):
                mon.log(0, 1.0, scalars={name: 99.0})
        record = mon.log(1, 1.0, scalars={"loss/web": 2.0})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [record]
    assert record["loss"] == 1.0 and record["step"] == 1


def test_log_and_event_after_close_raise(tmp_path):
    mon = monitor.TrainingMonitor(tmp_path / "log.jsonl")
    mon.log(0, 1.0)
    mon.close()
    mon.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        mon.log(1, 1.0)
    with pytest.raises(RuntimeError, match="closed"):
        mon.log(3, 1.0)  # also on a step it would not have logged
    with pytest.raises(RuntimeError, match="closed"):
        mon.event(1, "skip")


def test_an_existing_log_is_kept_unless_told(tmp_path):
    path = tmp_path / "yesterday.jsonl"
    path.write_text('{"step": 0, "loss": 3.0}\n')
    with pytest.raises(FileExistsError, match="append=True .* overwrite=True"):
        monitor.TrainingMonitor(path)
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    with pytest.raises(FileExistsError):
        monitor.TrainingMonitor(link)
    assert path.read_text() == '{"step": 0, "loss": 3.0}\n'
    with monitor.TrainingMonitor(path, append=True) as mon:
        mon.log(1, 2.0)
    assert len(path.read_text().splitlines()) == 2
    with monitor.TrainingMonitor(path, overwrite=True) as mon:
        mon.log(0, 1.0)
    assert len(path.read_text().splitlines()) == 1
    empty = tmp_path / "empty.jsonl"
    empty.touch()  # an empty file holds nothing to lose, e.g. one from mkstemp
    monitor.TrainingMonitor(empty).close()


def test_folders_devices_and_fifos_are_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # opening it for writing would wait for a reader forever
    for path in (tmp_path, "/dev/null", fifo):
        for options in ({}, {"append": True}, {"overwrite": True}):
            with pytest.raises(ValueError, match="not a regular file"):
                monitor.TrainingMonitor(path, **options)


# --- the demo CLIs -------------------------------------------------------------------------------------------


def short_demo_run(path, broken=True, every=1, overwrite=False):
    """monitor.demo_run's contract (the same TrainingMonitor, the same options) in 40 steps of a made-up loss."""
    with monitor.TrainingMonitor(path, every=every, overwrite=overwrite) as mon:
        return [r for r in (mon.log(step, 2.0 + 0.01 * (step % 3)) for step in range(40)) if r is not None]


def test_monitor_cli_keeps_an_existing_out_file_without_force(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(monitor, "demo_run", short_demo_run)
    path = tmp_path / "run.jsonl"
    path.write_text("my notes\n")
    for args in (["--out", str(path)], ["--out", str(tmp_path)], ["--out", "/dev/full"]):
        with pytest.raises(SystemExit) as exit_info:
            monitor.main(args)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert path.read_text() == "my notes\n"
    assert monitor.main(["--out", str(path), "--force", "--every", "10"]) == 0
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 10, 20, 30]


def _stdout_to(monkeypatch, target):
    """Point sys.stdout at a pipe whose reader has gone, or at /dev/full."""
    if target == "closed pipe":
        read, write = os.pipe()
        os.close(read)
        stream = os.fdopen(write, "w")
    else:
        stream = open("/dev/full", "w")
    monkeypatch.setattr("sys.stdout", stream)
    return stream


@pytest.mark.parametrize("target, code", [("closed pipe", 0), ("/dev/full", 1)])
def test_a_closed_or_full_stdout_ends_the_demos_quietly(tmp_path, monkeypatch, capsys, target, code):
    monkeypatch.setattr(spike_guard, "demo", lambda *args, **kwargs: {"events": []})
    monkeypatch.setattr(monitor, "demo_run", short_demo_run)
    stream = _stdout_to(monkeypatch, target)
    assert spike_guard.main(["--json"]) == code
    stream = _stdout_to(monkeypatch, target)
    assert monitor.main(["--out", str(tmp_path / "run.jsonl"), "--every", "50"]) == code
    assert capsys.readouterr().err == ""
    stream.close()


def test_ctrl_c_ends_the_demos_with_130(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(spike_guard, "demo", interrupted)
    monkeypatch.setattr(monitor, "demo_run", interrupted)
    assert spike_guard.main([]) == 130
    assert monitor.main(["--out", str(tmp_path / "run.jsonl")]) == 130
    assert capsys.readouterr() == ("", "")


# --- resume_check: the user's trainer raises, hangs, is interrupted; the objects it hands in -------------------

TRAINER = '''
import time
{top}


class Trainer:
    def state_dict(self):
        return {{"n": 1}}

    def load_state_dict(self, sd):
        pass

    def train_step(self):
        {step}


def make_trainer():
    return Trainer()
'''


def trainer_file(tmp_path, step="return 1.0", top=""):
    path = tmp_path / "my_trainer.py"
    path.write_text(TRAINER.format(step=step, top=top))
    return path


def resume_main(capsys, *argv):
    """resume_check.main() in this process: (exit code, stdout, stderr)."""
    code = resume_check.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


RAISES = {
    "SystemExit in train_step": ("raise SystemExit(3)", "", "train_step() raised SystemExit: 3 (reference run, step 0)"),
    "KeyboardInterrupt in train_step": ("raise KeyboardInterrupt('stop')", "",
                                        "train_step() raised KeyboardInterrupt: stop (reference run, step 0)"),
    "sys.exit on import": ("return 1.0", "import sys\nsys.exit('needs --config')",
                           "raised SystemExit on import: needs --config"),
    "KeyboardInterrupt on import": ("return 1.0", "raise KeyboardInterrupt", "raised KeyboardInterrupt on import"),
}


@pytest.mark.parametrize("name", RAISES)
def test_a_trainer_that_raises_a_base_exception_is_its_error_in_one_line(name, tmp_path, capsys):
    step, top, words = RAISES[name]
    code, out, err = resume_main(capsys, "--trainer", trainer_file(tmp_path, step, top))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert words in err, err


def test_a_trainer_file_that_is_a_fifo_is_refused_at_once(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    code, _, err = resume_main(capsys, "--trainer", tmp_path / "pipe.py", "--timeout", 30)
    assert code == 2 and "is not a regular file" in err and err.count("\n") == 1


def test_an_import_that_hangs_is_reported_at_the_time_limit(tmp_path, capsys):
    path = trainer_file(tmp_path, top="time.sleep(3)")
    started = time.monotonic()
    code, _, err = resume_main(capsys, "--trainer", path, "--timeout", 0.5)
    assert code == 2 and time.monotonic() - started < 2.5
    assert f"ran past the 0.5 s time limit and was stopped, still in importing {path}" in err, err
    assert err.count("\n") == 1, err


def test_bad_timeouts_are_bad_usage(capsys):
    for value in ("0", "-1", "nan"):
        code, _, err = resume_main(capsys, "--timeout", value)
        assert code == 2 and "--timeout must be a positive number" in err, (value, err)


def _cli(*args, **kwargs):
    return subprocess.Popen([sys.executable, str(DIAGNOSTICS / "resume_check.py"), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_train_step_that_hangs_is_named_and_the_process_ends(tmp_path):
    proc = _cli("--trainer", trainer_file(tmp_path, step="time.sleep(3600)"), "--timeout", 1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == "" and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        "error: resume_check ran past the 1 s time limit and was stopped, still in train_step() (reference run, step 0): "
        "a hang (a collective waiting for another rank, a data loader worker, input()) or a configuration too big for a "
        "check; give a smaller one, or a larger --timeout"]


def test_ctrl_c_while_the_trainer_runs_exits_130_quietly(tmp_path):
    proc = _cli("--trainer", trainer_file(tmp_path, step="print('started', flush=True); time.sleep(3600)"))
    assert select.select([proc.stdout], [], [], 60)[0] and proc.stdout.readline() == "started\n"  # in train_step now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (130, "", "")


class SharedTrainer:
    """A trainer around a model and optimizer built once, outside make_trainer(): the user's own objects."""

    def __init__(self, model, optimizer, fail_at=None):
        self.model, self.opt, self.fail_at, self.steps = model, optimizer, fail_at, 0
        self.x, self.y = torch.randn(8, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(8, 1)

    def train_step(self):
        if self.steps == self.fail_at:
            raise RuntimeError("CUDA out of memory")
        self.steps += 1
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def state_dict(self):
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "steps": self.steps}

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optimizer"])
        self.steps = sd["steps"]


def _users_objects():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.0), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()  # the user's optimizer has state (Adam's moments) before the check
    model.eval()
    return model, optimizer


@pytest.mark.parametrize("style", ["object", "dict of functions"])
def test_the_models_and_optimizers_a_factory_hands_in_get_their_state_back(style):
    model, optimizer = _users_objects()
    before = snapshot(model, optimizer)

    def make_trainer():
        trainer = SharedTrainer(model, optimizer)
        if style == "object":
            return trainer
        return {"train_step": lambda: trainer.train_step(), "state_dict": lambda: trainer.state_dict(),
                "load_state_dict": lambda sd: trainer.load_state_dict(sd)}

    result = resume_check.check_resume(make_trainer)
    assert result.details["verdict"] == "ok", result.summary  # each trainer starts where a fresh process would
    assert differences(before, snapshot(model, optimizer)) == []


def test_the_objects_a_factory_hands_in_get_their_state_back_when_the_trainer_raises():
    model, optimizer = _users_objects()
    before = snapshot(model, optimizer)
    calls = []

    def make_trainer():
        calls.append(1)
        return SharedTrainer(model, optimizer, fail_at=4 if len(calls) == 4 else None)  # the resumed run, 2nd life

    with pytest.raises(resume_check.CheckError, match="CUDA out of memory"):
        resume_check.check_resume(make_trainer)
    assert differences(before, snapshot(model, optimizer)) == []
