"""The in-loop classes (SpikeGuard, TrainingMonitor) and their demo CLIs under hostile input and faults.

Corrupt guard state, an all-zero warmup, scalars that shadow the monitor's columns, use after close, log
paths that hold the user's files, folders, devices and FIFOs, Ctrl-C, and a stdout that is closed or full.
"""
import json
import math
import os

import pytest

import monitor
import spike_guard

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


def test_monitor_cli_keeps_an_existing_out_file_without_force(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    path.write_text("my notes\n")
    for args in (["--out", str(path)], ["--out", str(tmp_path)], ["--out", "/dev/full"]):
        with pytest.raises(SystemExit) as exit_info:
            monitor.main(args)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert path.read_text() == "my notes\n"
    assert monitor.main(["--out", str(path), "--force", "--every", "10"]) == 0
    assert path.read_text().startswith('{"step": 0')


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
