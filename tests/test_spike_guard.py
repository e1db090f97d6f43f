"""spike_guard.py: skips the planted bad batch and nothing in a healthy run, keeps its statistics clean,
gives up after K skips in a row, and takes the same decision on every rank (2 gloo processes, with the
monitor logging the same run)."""
import copy
import io
import json
import math
import os
import sys

import pytest
import torch
import torch.distributed as dist

import gloo
import spike_guard
from conftest import DIAGNOSTICS, assert_one_line_error, run_cli
from state_snapshot import differences, snapshot

BAD = spike_guard.BAD_STEP


@pytest.fixture(scope="module")
def broken_demo():
    return spike_guard.demo(broken=True)


def test_broken_demo_skips_the_planted_batch_and_stays_on_its_curve(broken_demo):
    events, unguarded, guarded = broken_demo["events"], broken_demo["unguarded"], broken_demo["guarded"]
    assert [(e["step"], e["event"]) for e in events] == [(BAD, "skip")]
    assert events[0]["reason"] in ("loss_outlier", "grad_norm_outlier") and events[0]["value"] > events[0]["threshold"]
    assert guarded[:BAD + 1] == unguarded[:BAD + 1]  # the same run up to and including the bad batch
    before = sorted(unguarded[BAD - 50:BAD])[25]  # median loss of the 50 steps before it
    assert max(guarded[BAD + 1:]) < 1.5 * before < max(unguarded[BAD + 1:]) / 2


def test_healthy_demo_flags_nothing():
    result = spike_guard.demo(broken=False)
    assert result["events"] == [] and result["skipped"] == 0
    assert result["guarded"] == result["unguarded"]
    assert result["peak_z"]["loss"] < 6 and result["peak_z"]["grad_norm"] < 6


def feed(guard, values, start=0):
    """(loss, grad norm) pairs through should_skip; returns the decisions."""
    return [guard.should_skip(start + i, loss, grad_norm=norm) for i, (loss, norm) in enumerate(values)]


def healthy(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, 2, generator=gen).mul(0.05).add(1.0).tolist()
    return [(2.0 * a, b) for a, b in noise]


def stats(guard):
    return [(s.mean, s.var, len(s.buffer)) for s in (guard.loss_stat, guard.norm_stat)]


def test_nan_or_inf_is_skipped_even_during_warmup():
    guard = spike_guard.SpikeGuard(warmup=25)
    assert feed(guard, [(math.nan, 1.0), (2.0, math.inf), (math.inf, 1.0), (2.0, 1.0)]) == [True, True, True, False]
    assert [e["reason"] for e in guard.events] == ["nonfinite_loss", "nonfinite_grad_norm", "nonfinite_loss"]


def test_outliers_do_not_poison_the_statistics():
    values = healthy(60)
    clean, spiked = spike_guard.SpikeGuard(), spike_guard.SpikeGuard()
    assert not any(feed(clean, values))
    decisions = feed(spiked, values[:40] + [(50.0, 1.0), (2.0, 80.0)] + values[40:])
    assert decisions[40:42] == [True, True] and not any(decisions[:40] + decisions[42:])
    assert [e["reason"] for e in spiked.events] == ["loss_outlier", "grad_norm_outlier"]
    assert stats(spiked) == stats(clean)  # as if the two outliers had never been seen


def test_k_consecutive_skips_raise_restart_from_checkpoint():
    guard = spike_guard.SpikeGuard(max_consecutive=3)
    feed(guard, healthy(30))
    assert feed(guard, [(9.0, 1.0), (9.0, 1.0), (2.0, 1.0), (9.0, 1.0), (9.0, 1.0)], start=30) == [True, True, False,
                                                                                                   True, True]
    with pytest.raises(spike_guard.RestartFromCheckpoint, match="3 consecutive steps skipped") as info:
        guard.should_skip(35, 9.0, grad_norm=1.0)
    assert info.value.step == 35 and [e["step"] for e in info.value.events] == [33, 34, 35]
    assert guard.events[-1]["event"] == "restart" and "PLAYBOOK.md#loss-spikes" in str(info.value)
    guard.reset()
    assert guard.consecutive == 0 and not guard.should_skip(36, 9.0, grad_norm=1.0)  # warming up again


def test_a_run_of_gradient_norm_outliers_alone_is_taken_and_the_norm_learnt_again():
    """The H200 GPT-2 run: five batches in a row at the same weights, each a norm ~100x the usual, the loss in its band."""
    guard = spike_guard.SpikeGuard(max_consecutive=3)
    feed(guard, healthy(30))
    loss_before = stats(guard)[0]
    assert feed(guard, [(2.0, 100.0), (2.0, 90.0), (2.0, 95.0)], start=30) == [True, True, False]  # no restart
    assert [(e["step"], e["event"]) for e in guard.events] == [(30, "skip"), (31, "skip"), (32, "rewarm")]
    assert guard.consecutive == 0 and not guard.norm_stat.ready and guard.norm_stat.buffer == []  # 95 not learnt
    assert stats(guard)[0] != loss_before  # the step was taken: its loss entered the loss statistics
    assert feed(guard, [(2.0, 100.0)], start=33) == [False]  # warming up again: only NaN/inf count
    mixed = spike_guard.SpikeGuard(max_consecutive=3)
    feed(mixed, healthy(30))
    assert feed(mixed, [(2.0, 100.0), (9.0, 1.0)], start=30) == [True, True]
    with pytest.raises(spike_guard.RestartFromCheckpoint):  # a loss outlier in the run: damage, roll back
        mixed.should_skip(32, 2.0, grad_norm=100.0)
    once = spike_guard.SpikeGuard(max_consecutive=1)
    feed(once, healthy(30))
    with pytest.raises(spike_guard.RestartFromCheckpoint):  # one batch says nothing about the weights
        once.should_skip(30, 2.0, grad_norm=100.0)


def plain(value):
    """True when `value` holds only what a checkpoint needs no pickled classes for: dicts, lists, str, numbers."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(map(plain, value))
    return value is None or isinstance(value, (str, int, float))


def resumed(guard, **options):
    """A new SpikeGuard(**options) loaded from guard.state_dict() saved and loaded as a checkpoint is."""
    state = guard.state_dict()
    assert plain(state)
    buffer = io.BytesIO()
    torch.save({"guard": state}, buffer)
    buffer.seek(0)
    restored = spike_guard.SpikeGuard(**options)
    restored.load_state_dict(torch.load(buffer, weights_only=True)["guard"])
    return restored


OUTLIER = 40  # the run below: a loss outlier here, the first step after a resume at OUTLIER
RUN_OF_SKIPS = (55, 56)  # two outliers in a row


def spiky(n=70):
    values = healthy(n)
    values[OUTLIER] = (50.0, 1.0)
    values[RUN_OF_SKIPS[0]], values[RUN_OF_SKIPS[1]] = (2.0, 80.0), (50.0, 1.0)
    return values


@pytest.mark.parametrize("resume_at", [10, OUTLIER, RUN_OF_SKIPS[1]],
                         ids=["during-warmup", "before-an-outlier", "inside-a-run-of-skips"])
def test_a_guard_restored_from_its_state_dict_decides_as_the_uninterrupted_one(resume_at):
    values = spiky()
    straight, interrupted = spike_guard.SpikeGuard(), spike_guard.SpikeGuard()
    decisions = feed(straight, values)
    assert [i for i, skip in enumerate(decisions) if skip] == [OUTLIER, *RUN_OF_SKIPS]
    feed(interrupted, values[:resume_at])
    restored = resumed(interrupted)
    assert feed(restored, values[resume_at:], start=resume_at) == decisions[resume_at:]
    assert restored.state_dict() == straight.state_dict()  # statistics, peak_z, counts: all the same
    assert list(restored.events) == [e for e in straight.events if e["step"] >= resume_at]


def test_right_after_a_resume_the_restored_guard_skips_an_outlier_a_fresh_one_misses():
    values = spiky()
    interrupted = spike_guard.SpikeGuard()
    feed(interrupted, values[:OUTLIER])
    fresh = spike_guard.SpikeGuard()
    assert feed(resumed(interrupted), values[OUTLIER:OUTLIER + 1], start=OUTLIER) == [True]
    assert feed(fresh, values[OUTLIER:OUTLIER + 1], start=OUTLIER) == [False]  # warming up: only NaN/inf count


def test_a_run_of_skips_carries_over_a_resume():
    values = spiky()
    interrupted = spike_guard.SpikeGuard(max_consecutive=3)
    feed(interrupted, values[:RUN_OF_SKIPS[1]])
    restored = resumed(interrupted, max_consecutive=3)
    assert feed(restored, values[RUN_OF_SKIPS[1]:RUN_OF_SKIPS[1] + 1], start=RUN_OF_SKIPS[1]) == [True]
    with pytest.raises(spike_guard.RestartFromCheckpoint, match="3 consecutive steps skipped") as info:
        restored.should_skip(57, 50.0, grad_norm=1.0)
    assert [e["step"] for e in info.value.events] == [*RUN_OF_SKIPS, 57]


def test_the_state_dict_is_a_copy():
    guard = spike_guard.SpikeGuard()
    feed(guard, healthy(10))
    state = guard.state_dict()
    saved = copy.deepcopy(state)
    feed(guard, healthy(30), start=10)  # completes the warmup: the buffer empties, mean and var appear
    assert state == saved
    restored = spike_guard.SpikeGuard()
    restored.load_state_dict(state)
    state["loss"]["buffer"].append(99.0)
    assert len(restored.loss_stat.buffer) == 10


def _valid():
    guard = spike_guard.SpikeGuard()
    feed(guard, healthy(30))
    return guard.state_dict()


def _with(**changes):
    state = _valid()
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = state
        for parent in parents:
            target = target[parent]
        target[key] = value
    return state


MALFORMED = {
    "not-a-dict": [1, 2],
    "an-optimizer-state": torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).state_dict(),
    "a-whole-checkpoint": {"model": {}, "guard": {}},
    "a-missing-key": {k: v for k, v in _valid().items() if k != "run"},
    "an-extra-key": {**_valid(), "events": []},
    "a-statistic-of-other-keys": _with(grad_norm={"mean": 1.0, "var": 0.1}),
    "mean-without-var": _with(loss__var=None),
    "a-string-mean": _with(grad_norm__mean="1.0"),
    "a-negative-var": _with(loss__var=-1.0),
    "a-buffer-of-strings": _with(loss__buffer=["a"]),
    "peak-z-of-one-name": _with(peak_z={"loss": 1.0}),
    "a-negative-count": _with(skipped=-1),
    "a-float-count": _with(clipped=1.0),
    "a-run-of-numbers": _with(run=[40]),
}


@pytest.mark.parametrize("state", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_state_dict_raises_value_error_and_changes_nothing(state):
    guard = spike_guard.SpikeGuard()
    feed(guard, healthy(30))
    before = guard.state_dict()
    with pytest.raises(ValueError, match="^not a SpikeGuard state_dict: "):
        guard.load_state_dict(state)
    assert guard.state_dict() == before


def test_demo_with_a_skip_z_too_low_skips_healthy_steps_and_learns_the_norm_again(capsys):
    assert spike_guard.main(["--skip-z", "0.5", "--json"]) == 0
    events = [e["event"] for e in json.loads(capsys.readouterr().out)["events"]]
    assert events.count("skip") > 20 and "rewarm" in events and "restart" not in events


def test_demo_that_raises_restart_from_checkpoint_says_so_and_exits_1(capsys, monkeypatch):
    def restarting(*args, **options):
        raise spike_guard.RestartFromCheckpoint(35, 5, [{"step": 31, "event": "skip", "reason": "loss_outlier",
                                                         "value": 9.0, "threshold": 2.2}])
    monkeypatch.setattr(spike_guard, "demo", restarting)
    assert spike_guard.main([]) == 1
    assert "stopped with RestartFromCheckpoint: step 35: 5 consecutive steps skipped" in capsys.readouterr().out


def test_with_a_grad_scaler_an_inf_grad_norm_is_the_scalers_business():
    guard = spike_guard.SpikeGuard(scaler=torch.amp.GradScaler("cpu"))
    feed(guard, healthy(30))
    before = stats(guard)
    assert feed(guard, [(2.0, math.inf)], start=30) == [False] and len(guard.events) == 0
    assert stats(guard) == before and guard.consecutive == 0


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(1)
    return model, gen


def _backward(model, gen, grad_scale=1.0):
    x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 1, generator=gen)
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    for p in model.parameters():
        p.grad.mul_(grad_scale)
    return loss


def grad_norm(model):
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()


def test_a_decision_leaves_model_grads_and_rng_alone():
    model, gen = _tiny()
    guard = spike_guard.SpikeGuard(model, warmup=5)
    decisions = []
    for step in range(8):
        loss = _backward(model, gen, grad_scale=1e3 if step == 7 else 1.0)
        before = snapshot(model)
        decisions.append(guard.should_skip(step, loss))
        assert differences(before, snapshot(model)) == []
    assert decisions == [False] * 7 + [True]  # a skip changes nothing either


def test_adaptive_clip_scales_the_gradients_to_zclips_threshold():
    model, gen = _tiny()
    guard = spike_guard.SpikeGuard(model, clip_z=2.5, warmup=5)
    for step in range(6):
        _backward(model, gen)
        assert not guard.should_skip(step, 1.0)
    stat = guard.norm_stat
    _backward(model, gen)
    factor = (stat.mean + 4 * stat.std()) / grad_norm(model)
    for p in model.parameters():
        p.grad.mul_(factor)  # now z = 4
    norm, mean_before = grad_norm(model), stat.mean
    z = stat.z(norm)
    expected = stat.mean + 2.5 * stat.std() / (z / 2.5)  # ZClip's adaptive_scaling threshold
    assert not guard.should_skip(6, 1.0)
    assert grad_norm(model) == pytest.approx(expected, rel=1e-4) and expected < norm
    assert guard.events[-1]["event"] == "clip" and guard.grad_norm == pytest.approx(norm)
    assert stat.mean == pytest.approx(0.97 * mean_before + 0.03 * expected)  # the clipped norm enters the stats


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        spike_guard.main(["--help"])
    assert exit_info.value.code == 0 and "--healthy" in capsys.readouterr().out


def test_bad_option_values_are_one_line_and_exit_2(capsys):
    for args in (["--skip-z", "0"], ["--warmup", "0"], ["--steps", "10"]):
        with pytest.raises(SystemExit) as exit_info:
            spike_guard.main(args)
        assert exit_info.value.code == 2 and capsys.readouterr().err.count("\n") == 1, args


def test_bad_usage_on_the_real_command_line():
    assert_one_line_error(run_cli("spike_guard.py", "--skip-z", "-1"))


# --- under torch.distributed: 2 gloo processes ---------------------------------------------------

STEPS, WARMUP = 40, 10
HUGE, INF, NAN = 20, 26, 32  # steps where rank 1 alone sees a huge grad, an inf grad, a NaN loss


def _rank_main(rank, world, port, out_dir):
    gloo.join(rank, world, port)
    sys.path.insert(0, str(DIAGNOSTICS))
    import monitor
    import spike_guard as guard_module

    torch.manual_seed(0)  # the same initial replica on both ranks
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    calls = []
    all_reduce = dist.all_reduce

    def counting_all_reduce(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)

    dist.all_reduce = counting_all_reduce  # DDP's gradient sync does not go through this function
    mon = monitor.TrainingMonitor(os.path.join(out_dir, f"log_rank{rank}.jsonl"), model, optimizer)
    guard = guard_module.SpikeGuard(model, warmup=WARMUP, monitor=mon)
    local_losses, skipped, grad_norms, param_norms = [], [], {}, {}
    for step in range(STEPS):
        x = torch.randn(32, 8, generator=gen)
        y = x[:, :1] * 0.5
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP averages the gradients: both replicas hold the same ones
        checked = loss
        if rank == 1 and step == HUGE:
            for p in model.parameters():
                p.grad.mul_(1e4)  # a rank-local fault after the sync: only rank 1 sees it
        if rank == 1 and step == INF:
            next(model.parameters()).grad[0, 0] = math.inf
        if rank == 1 and step == NAN:
            checked = torch.tensor(math.nan)
        local_losses.append(loss.item())
        if guard.should_skip(step, checked):
            skipped.append(step)
            optimizer.zero_grad(set_to_none=True)
            continue
        grad_norms[step] = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
        optimizer.step()
        param_norms[step] = torch.nn.utils.get_total_norm([p.detach() for p in model.parameters()]).item()
        mon.log(step, loss, grad_norm=guard.grad_norm)
        optimizer.zero_grad(set_to_none=True)
    mon.close()
    dist.all_reduce = all_reduce
    gloo.report(rank, out_dir, {"skipped": skipped, "losses": local_losses, "calls": len(calls), "grad_norms": grad_norms,
                   "param_norms": param_norms, "guard": guard.state_dict(),
                   "params": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()})


def test_every_rank_skips_what_one_rank_sees_and_the_monitor_logs_the_mean(tmp_path):
    ranks = gloo.run_on_ranks(_rank_main, tmp_path, "the ranks did not finish: a collective hangs")
    assert ranks[0]["skipped"] == ranks[1]["skipped"] == [HUGE, INF, NAN]
    assert ranks[0]["params"] == ranks[1]["params"]  # bit for bit: the replicas never drifted apart
    assert ranks[0]["guard"] == ranks[1]["guard"]  # the same statistics: rank 0's state_dict is enough to save
    assert all(math.isfinite(v) for v in ranks[0]["params"])
    logged = STEPS - 3
    assert ranks[0]["calls"] == ranks[1]["calls"] == STEPS + logged  # guard: 1 per step, monitor: 1 per logged step
    assert not (tmp_path / "log_rank1.jsonl").exists()  # only rank 0 writes
    lines = [json.loads(line) for line in (tmp_path / "log_rank0.jsonl").read_text().splitlines()]
    records = [r for r in lines if "loss" in r]
    assert len(records) == logged
    for record in records:
        step = record["step"]
        assert record["loss"] == pytest.approx((ranks[0]["losses"][step] + ranks[1]["losses"][step]) / 2, rel=1e-6)
        for name in ("grad_norm", "param_norm"):  # the replicas agree: the global norm is each rank's own
            assert record[name] == pytest.approx(ranks[0][name + "s"][str(step)], rel=1e-5)
    assert ranks[0]["losses"] != ranks[1]["losses"]  # the mean is not just rank 0's loss
    events = [(e["step"], e["reason"]) for e in lines if "event" in e]
    assert events == [(HUGE, "grad_norm_outlier"), (INF, "nonfinite_grad_norm"), (NAN, "nonfinite_loss")]


def _fsdp_rank_main(rank, world, port, out_dir):
    """FSDP2 (fully_shard) on two gloo ranks: each rank holds half of every parameter and of its gradient."""
    gloo.join(rank, world, port)
    sys.path.insert(0, str(DIAGNOSTICS))
    import spike_guard as guard_module
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    replica = copy.deepcopy(model)  # unsharded: the gradient the sharded one stands for
    fully_shard(model)
    batches = [torch.randn(5, 8, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    loss = model(batches[rank]).pow(2).mean()
    loss.backward()  # FSDP reduce-scatters the mean over ranks: each rank holds its shard of it
    guard = guard_module.SpikeGuard(model, sharded=True)
    guard.should_skip(0, loss)
    import monitor
    with monitor.TrainingMonitor(os.path.join(out_dir, "fsdp_log.jsonl"), model, sharded=True) as mon:
        mon.log(0, loss)  # its own norms of the sharded parameters and gradients
    for x in batches:
        (replica(x).pow(2).mean() / world).backward()
    full = torch.nn.utils.get_total_norm([p.grad for p in replica.parameters()]).item()
    weights = torch.nn.utils.get_total_norm([p.detach() for p in replica.parameters()]).item()
    gloo.report(rank, out_dir, {"guard": guard.grad_norm, "full": full, "weights": weights,
                                "sharded": type(next(model.parameters()).grad).__name__})


def test_under_fsdp2_the_guard_reads_the_global_norm_of_the_sharded_gradients(tmp_path):
    """sharded=True sums the squared norms of each rank's shard: the norm of the whole gradient (and, in the monitor's
    log, of the whole weights), the same on both ranks; taking the DTensors as they are would count it once per rank."""
    ranks = gloo.run_on_ranks(_fsdp_rank_main, tmp_path, "the FSDP ranks did not finish: a collective hangs")
    assert ranks[0]["sharded"] == "DTensor"
    assert ranks[0]["guard"] == ranks[1]["guard"] == pytest.approx(ranks[0]["full"], rel=1e-5)
    [record] = [json.loads(line) for line in (tmp_path / "fsdp_log.jsonl").read_text().splitlines()]  # the monitor too
    assert record["grad_norm"] == pytest.approx(ranks[0]["full"], rel=1e-5)
    assert record["param_norm"] == pytest.approx(ranks[0]["weights"], rel=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_an_ema_weight_of_0_or_1_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha must be between 0 and 1"):
        spike_guard.SpikeGuard(alpha=alpha)


def test_a_warmup_of_one_step_is_accepted_and_of_none_refused():
    assert spike_guard.SpikeGuard(warmup=1).warmup == 1
    with pytest.raises(ValueError, match="warmup must be a positive integer"):
        spike_guard.SpikeGuard(warmup=0)
