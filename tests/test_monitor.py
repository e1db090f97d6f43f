"""monitor.py: its log is what spikes.py reads, its numbers are the right ones, and it leaves the run alone.

The distributed behaviour (loss averaged over ranks, one all_reduce per logged step, only rank 0
writes) is tested with SpikeGuard in 2 gloo processes: tests/test_spike_guard.py.
"""
import json
import math
import os

import pytest
import torch

import gloo
import monitor
import spikes
from conftest import assert_one_line_error, run_cli
from state_snapshot import differences, snapshot

COLUMNS = {"step", "loss", "grad_norm", "param_norm", "adam_v_norm", "lr", "tokens_per_s", "accuracy"}


def test_broken_demo_log_shows_the_planted_spike_to_spikes_py(tmp_path):
    path = tmp_path / "run.jsonl"
    records = monitor.demo_run(path, broken=True)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == json.loads(json.dumps(records)) and len(lines) == monitor.DEMO_STEPS
    assert set(lines[0]) == COLUMNS
    report = spikes.analyze(path)
    assert [(s.start, s.step) for s in report.spikes] == [(monitor.BAD_STEP, monitor.BAD_STEP)]
    spike = report.to_json()["spikes"][0]
    assert spike["grad_norm_lead"] == 0  # the grad norm jumped on the same step
    assert report.columns.grad == "grad_norm" and report.columns.lr == "lr"


def test_healthy_demo_log_has_no_spike(tmp_path):
    path = tmp_path / "run.jsonl"
    monitor.demo_run(path, broken=False)
    report = spikes.analyze(path)
    assert report.spikes == [] and report.nan_step is None


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return model, optimizer, loss


def test_logged_values_are_the_global_norms_lr_and_loss(tmp_path):
    model, optimizer, loss = _tiny()
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    optimizer.step()
    with monitor.TrainingMonitor(tmp_path / "log.jsonl", model, optimizer) as mon:
        record = mon.log(0, loss, tokens=16, scalars={"loss/web": 2.5})
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    v = torch.cat([s["exp_avg_sq"].flatten() for s in optimizer.state.values()])
    assert record["loss"] == pytest.approx(loss.item())
    assert record["grad_norm"] == pytest.approx(grad_norm.item(), rel=1e-6)
    assert record["param_norm"] == pytest.approx(params.norm().item(), rel=1e-6)
    assert record["adam_v_norm"] == pytest.approx(v.norm().item(), rel=1e-6)
    assert record["lr"] == 1e-2 and record["loss/web"] == 2.5 and record["tokens_per_s"] > 0
    assert json.loads((tmp_path / "log.jsonl").read_text()) == record


def test_a_passed_grad_norm_wins_over_the_clipped_gradients(tmp_path):
    model, optimizer, loss = _tiny()
    pre_clip = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    with monitor.TrainingMonitor(tmp_path / "log.jsonl", model) as mon:
        measured = mon.log(0, loss)["grad_norm"]
        passed = mon.log(1, loss, grad_norm=pre_clip)["grad_norm"]
    assert measured == pytest.approx(1e-3, rel=1e-4)  # what it finds: the clipped gradients
    assert passed == pytest.approx(pre_clip.item()) and passed > 10 * measured


class Untouchable:
    """A loss that fails on any use: a step the monitor does not log must not look at it."""

    def __getattr__(self, name):
        raise AssertionError(f"the monitor touched the loss on a step it does not log ({name})")


def test_steps_between_logged_ones_cost_nothing_and_tokens_add_up(tmp_path):
    path = tmp_path / "log.jsonl"
    with monitor.TrainingMonitor(path, every=5) as mon:
        for step in range(12):
            loss = float(step) if step % 5 == 0 else Untouchable()
            mon.log(step, loss, tokens=torch.tensor(100))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 5, 10]
    assert set(records[0]) == {"step", "loss", "tokens_per_s"}  # no model, no optimizer: no norms, no lr


def test_an_exploding_grad_norm_is_logged_as_its_number_not_inf(tmp_path):
    """Squares are summed in float64 off MPS: a norm of 1e20 squares to 1e40, past float32's 3.4e38."""
    path = tmp_path / "log.jsonl"
    with monitor.TrainingMonitor(path) as mon:
        mon.log(0, torch.tensor(2.5), grad_norm=torch.tensor(1e20))
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["grad_norm"] == pytest.approx(1e20, rel=1e-6)


def test_nan_loss_and_events_reach_spikes_py(tmp_path):
    path = tmp_path / "log.jsonl"
    with monitor.TrainingMonitor(path) as mon:
        for step in range(60):
            mon.log(step, math.nan if step >= 50 else 2.0 + 0.01 * (step % 3))
            if step == 20:
                mon.event(step, "skip", reason="loss_outlier", value=9.0, threshold=3.0)
    text = path.read_text()
    assert "NaN" in text and '"event": "skip"' in text
    report = spikes.analyze(path)
    assert report.nan_step == 50 and report.values == 60  # the event line is not a loss value


def test_append_after_a_resume_shows_spikes_py_the_resume(tmp_path):
    path = tmp_path / "log.jsonl"
    for steps, append in ((range(60), False), (range(40, 80), True)):
        with monitor.TrainingMonitor(path, append=append) as mon:
            for step in steps:
                mon.log(step, 2.0 + 0.01 * (step % 3))
    resumes = [e for e in spikes.analyze(path).to_json()["events"] if e["kind"] == "resume"]
    assert [(e["step"], e["from_step"]) for e in resumes] == [(40, 59)]


def test_log_leaves_model_optimizer_and_rng_alone(tmp_path):
    model, optimizer, loss = _tiny()
    optimizer.step()
    before = snapshot(model, optimizer)
    with monitor.TrainingMonitor(tmp_path / "log.jsonl", model, optimizer) as mon:
        mon.log(0, loss, tokens=16)
    assert differences(before, snapshot(model, optimizer)) == []


def test_bad_every_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="every"):
        monitor.TrainingMonitor(tmp_path / "log.jsonl", every=0)


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        monitor.main(["--help"])
    assert exit_info.value.code == 0 and "--healthy" in capsys.readouterr().out


def test_demo_cli_prints_the_log_and_spikes_view(tmp_path, capsys):
    assert monitor.main(["--out", str(tmp_path / "run.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "wrote 300 records" in out and "spikes: 1 " in out


def test_bad_every_on_the_command_line_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        monitor.main(["--every", "0"])
    assert exit_info.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_unwritable_log_is_one_line_and_exit_2():
    assert_one_line_error(run_cli("monitor.py", "--out", "/nonexistent-dir/run.jsonl"))


def _refused_on_every_rank(rank, world, port, out_dir):
    gloo.join(rank, world, port)
    try:
        monitor.TrainingMonitor(os.path.join(out_dir, "run.jsonl"))
        outcome = "opened"
    except FileExistsError as error:
        outcome = f"FileExistsError: {error}"
    gloo.report(rank, out_dir, {"outcome": outcome})


@pytest.mark.hostile
def test_a_log_refused_on_rank_0_is_refused_on_every_rank(tmp_path):
    """Rank 0 alone opens the log; when it refuses (here: an earlier run's log), the other ranks must raise too
    instead of waiting at the first all_reduce until torchrun ends them."""
    (tmp_path / "run.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    ranks = gloo.run_on_ranks(_refused_on_every_rank, tmp_path, "a rank waited for a log rank 0 refused")
    assert [r["outcome"].split(":")[0] for r in ranks] == ["FileExistsError", "FileExistsError"], ranks
    assert ranks[1]["outcome"].startswith("FileExistsError: rank 0: ")
    assert (tmp_path / "run.jsonl").read_text() == '{"step": 0, "loss": 1.0}\n'
