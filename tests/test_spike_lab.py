"""spike_lab: each injected failure is found by spikes.py at its step with the type it should have, the guard
saves the pocket run, and bad usage is one line. Runs are short (300 steps) and in-process to keep CI fast."""
import contextlib
import io
import json

import pytest

import spike_lab
import spikes
from conftest import assert_one_line_error, run_cli

STEPS, AT, POCKET = 300, 150, 8
NAN_STEPS = AT + 10  # nan_batch's run: from its NaN on every loss and weight is NaN; more steps only lengthen that


@pytest.fixture(scope="module")
def logs(tmp_path_factory, demo):
    """One short run per scenario; {scenario: spikes.py's report of its log}. The pocket run is the demo's unguarded
    one (the same scenario, steps and seed; its --pocket is the default, POCKET)."""
    out = tmp_path_factory.mktemp("spike_lab")
    reports = {}
    for scenario in spike_lab.SCENARIOS:
        path = out / f"{scenario}.jsonl"
        if scenario == "pocket":
            path = demo["out"] / "train_log.jsonl"
        else:
            spike_lab.train(scenario, AT, NAN_STEPS if scenario == "nan_batch" else STEPS, pocket=POCKET, log_path=path)
        reports[scenario] = spikes.analyze(path).to_json()
    return reports


def _spike_at(report, lo, hi):
    found = [s for s in report["spikes"] if lo <= s["start"] <= hi or lo <= s["step"] <= hi]
    assert found, report["spikes"]
    return found[0]


def test_pocket_is_a_slow_recovery_at_its_step(logs):
    spike = _spike_at(logs["pocket"], AT, AT + 2)
    assert spike["type"] == "slow_recovery"
    assert spike["peak"] > 3 * spike["baseline"]


def test_a_run_of_n_steps_logs_steps_0_to_n_minus_1(logs):
    log = logs["lr_jump"]["log"]
    assert (log["first_step"], log["last_step"], log["values"]) == (0, STEPS - 1, STEPS)


def test_lr_jump_diverges_from_its_step(logs):
    spike = _spike_at(logs["lr_jump"], AT, AT + 10)
    assert spike["type"] == "divergence"


def test_lr_jump_multiplies_the_lr_from_its_step_on(logs):
    with open(logs["lr_jump"]["log"]["path"]) as log:
        lrs = {record["step"]: record["lr"] for record in map(json.loads, log)}
    assert lrs[AT] == pytest.approx(lrs[AT - 1] * spike_lab.LR_JUMP) and lrs[AT + 1] == pytest.approx(lrs[AT])


def test_nan_batch_is_the_first_nan(logs):
    assert logs["nan_batch"]["nan_step"] == AT


def test_repeat_resume_shows_the_repeat_data_signature(logs):
    kinds = {event["kind"]: event for event in logs["repeat_resume"]["events"]}
    assert kinds["resume"]["step"] == AT - spike_lab.RESUME_BACK
    assert kinds["resume_drop"]["step"] == AT - spike_lab.RESUME_BACK
    assert "repeat_data" in kinds
    assert "non_spike_divergence" not in kinds  # the climb off the repeated data is not a creep (it once read as one)


def test_the_healthy_stretch_before_the_failure_is_quiet(logs):
    for scenario, report in logs.items():
        early = [s for s in report["spikes"] if s["step"] < AT - (spike_lab.RESUME_BACK if scenario == "repeat_resume" else 0)]
        assert not early, (scenario, early)


DEMO = ["--scenario", "pocket", "--at", str(AT), "--steps", str(STEPS), "--guard", "--out", "/tmp/lab"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The docstring's command, run once: its printed lines (tmp dir shown as /tmp/lab) and its two logs."""
    out = tmp_path_factory.mktemp("lab")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = spike_lab.main([str(out) if arg == "/tmp/lab" else arg for arg in DEMO])
    logs = {name: [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
            for name in ("train_log", "guarded_log")}
    return {"code": code, "printed": buffer.getvalue().replace(str(out), "/tmp/lab"), "logs": logs, "out": out}


def test_docstring_output_is_the_demo_run(demo):
    """tests/test_docstring_outputs.py leaves this file to us: the demo is compared here, from the same run."""
    doc = spike_lab.__doc__.split("\nOutput\n", 1)[1].split("\nHow to read it\n", 1)[0]
    lines = [line[4:] for line in doc.strip("\n").splitlines()]
    assert lines[0] == "$ python diagnostics/spike_lab.py " + " ".join(DEMO)
    assert demo["code"] == 0
    assert lines[1:] == demo["printed"].rstrip("\n").splitlines()


def test_the_guard_ends_the_pocket_run_lower(demo):
    losses = {name: {r["step"]: r["loss"] for r in records if "loss" in r} for name, records in demo["logs"].items()}
    events = [r for r in demo["logs"]["guarded_log"] if "event" in r]
    # the pocket's batches never reach the weights: skipped until the guard asks for a restart, then skipped over
    assert [e["step"] for e in events if e["event"] == "skip"] == list(range(AT, AT + 5))
    assert [e["step"] for e in events if e["event"] == "restart"] == [AT + 4]
    assert "guard skipped 5 steps: 150, 151, 152, 153, 154; asked for a restart at step 154" in demo["printed"]
    window = range(AT + POCKET, AT + 40)  # just after the pocket: where the unguarded run is still recovering
    mean = {name: sum(run[s] for s in window) / len(window) for name, run in losses.items()}
    assert mean["guarded_log"] < 0.9 * mean["train_log"]


@pytest.mark.hostile
@pytest.mark.parametrize("args, words", [
    (["--at", "10"], "--at must be between"),
    (["--pocket", "0"], "--pocket must be between"),
    (["--scenario", "repeat_resume", "--at", "40"], "--at must be between 61"),
])
def test_bad_usage_is_one_line(args, words, capsys, tmp_path):
    assert spike_lab.main([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err


@pytest.mark.hostile
def test_files_of_the_users_are_not_replaced(tmp_path):
    (tmp_path / "train_log.jsonl").write_text("my own log\n")
    proc = run_cli("spike_lab.py", "--steps", "200", "--at", "60", "--out", tmp_path, timeout=120)
    assert_one_line_error(proc)
    assert (tmp_path / "train_log.jsonl").read_text() == "my own log\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert spike_lab.main(["--out", str(a_file)]) == 2
    assert a_file.read_text() == "x"
