"""Decisions pinned at their boundaries, found by mutation testing: rl_probes' evaluation interval, spike_lab's easy
start, spikes.py's early trend, fall pace, creep, repeat data and plot colours, spike_guard's default skip_z and
update_ratio's low gate."""
import math
import types

import pytest
import torch

import rl_probes
import spike_guard
import spike_lab
import update_ratio
from spikelog.detect.events import Creep, ResumeWatch
from spikelog.detect.series import Episode, Series


class _Probe:
    """A stand-in probe whose targets are met at every evaluation, or at none; it counts its evaluations."""

    n_actions = 2

    def __init__(self, met):
        self.met, self.evaluations = met, 0

    def start(self, n, generator):
        return None

    def rollout(self, agent, state, generator):
        return None, state

    def measure(self, agent, gamma):
        self.evaluations += 1
        return self.met, "measured"


def _idle_agent(n_actions, gamma):
    return types.SimpleNamespace(update=lambda rollout: None)


def test_a_probe_met_from_the_start_is_learned_at_its_first_evaluation_after_10_updates():
    result = rl_probes.run_probe(_Probe(met=True), _idle_agent)
    assert result == {"passed": True, "measured": "measured", "updates": 10}


def test_a_probe_never_met_is_evaluated_every_10_of_its_150_updates():
    probe = _Probe(met=False)
    assert rl_probes.run_probe(probe, _idle_agent)["passed"] is False
    assert probe.evaluations == 15


def test_the_easy_start_serves_the_sharper_chain_for_the_first_48_batches_only():
    easy, plain = spike_lab.Stream(0, easy_start=True), spike_lab.Stream(0)
    assert not torch.equal(easy.batch(47)[1], plain.batch(47)[1])  # the last batch of the easy prefix
    assert torch.equal(easy.batch(48)[1], plain.batch(48)[1])  # the first batch after it


def _creep_events(levels):
    events = []
    creep = Creep(events)
    for k, level in enumerate(levels):
        creep.add_block(32 * k, 32 * k + 31, 32 * k + 31, level, 2.0, 0.0)
    return events


def test_a_level_10_5_percent_above_the_lowest_is_a_creep():
    # CREEP_REL is 10%: 2.21 is past 2.0's limit of 2.2 (and under the 2.22 that 11% would make it)
    assert [e["kind"] for e in _creep_events([2.0] * 4 + [2.21] * 6)] == ["non_spike_divergence"]


@pytest.mark.parametrize("wiggle, slope", [(0.038, -0.01), (0.042, 0.0)])
def test_an_early_falling_line_is_the_baseline_only_while_its_residuals_spread_under_half_the_values(wiggle, slope):
    """32 values falling 0.01 a row, alternately `wiggle` above and below the line: the values spread (robust sigma)
    0.16 / 1.349, the line's residuals 2 x wiggle / 1.349; under half (EARLY_TREND) at 0.038, over it at 0.042."""
    series = Series("loss")
    for i in range(32):
        series.feed(i, i, 3.0 - 0.01 * i + (wiggle if i % 2 else -wiggle))
    assert series.slope == pytest.approx(slope)


@pytest.mark.parametrize("pace, kind", [(-0.0052, "no_recovery"), (-0.0048, "fast_recovery")])
def test_after_a_spike_in_a_fast_fall_the_fall_goes_on_from_half_its_pre_spike_pace(pace, kind):
    """Before the spike the loss fell by a factor exp(-0.01) a row; after it, back at 1.0, it falls by exp(pace).
    At 0.52 of the pre-spike pace (FALL_PACE: 0.5 or more) the fall goes on, and the loss is judged against it: well
    above where it would have taken the loss, a lasting offset. At 0.48 the fall has flattened, and the loss is judged
    against the pre-spike level, which it is below: recovered."""
    episode = Episode(0, 0, 3.0, 1.0, 0.01, 1.06, [], trend=(0.0, 0, -0.01))
    verdict = next(v for k in range(1, 400) if (v := episode.add(k, k, math.exp(pace * k))))
    assert verdict[:2] == (kind, 1)


@pytest.mark.parametrize("highs, repeat", [(8, False), (9, True)])
def test_a_jump_back_whose_median_is_exactly_halfway_up_is_no_repeat_data(highs, repeat):
    """Level 10.0 before the resume, 8.0 after it: a drop of 2. The jump back needs the median of 16 values above the
    midpoint, 11.0: eight values at 12 and eight at 10 have a median of exactly 11.0; nine at 12, of 12."""
    events = []
    series = types.SimpleNamespace(med=10.0, sigma=0.5, repeat_ended=lambda gap, row: None)
    watch = ResumeWatch(100, 100, 10.0, series, events)
    for k in range(32):
        watch.add(100 + k, 100 + k, 8.0)
    for k, x in enumerate([12.0] * highs + [10.0] * (16 - highs)):
        watch.add(132 + k, 132 + k, x)
    assert [e["kind"] for e in events] == ["resume_drop"] + (["repeat_data"] if repeat else [])


def test_the_plotted_loss_is_blue_and_a_dataset_series_takes_the_next_colour_but_one(monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.colors
    import matplotlib.pyplot as plt
    from test_spikes_plot import curve, report
    from spikelog import plot as spike_plot

    figures = []
    monkeypatch.setattr(spike_plot, "write_output", lambda out, write, force: figures.append(plt.gcf()))
    rep = report()
    rep.columns.extras = ["eval"]
    rep.curves["eval"] = curve((list(range(100)), [3.0] * 100))
    spike_plot.plot(rep, "run.png")
    colours = {line.get_label(): matplotlib.colors.to_hex(line.get_color()) for line in figures[-1].axes[0].lines}
    assert colours == {"loss": matplotlib.colors.to_hex("tab:blue"), "eval": matplotlib.colors.to_hex("C2")}


@pytest.mark.parametrize("loss, skipped", [(1.57, False), (1.63, True)])
def test_the_guard_skips_a_loss_past_6_standard_deviations_by_default(loss, skipped):
    guard = spike_guard.SpikeGuard(warmup=2)
    for step, x in enumerate([0.9, 1.1]):  # mean 1.0, standard deviation 0.1: the limit is 1.6
        assert guard.should_skip(step, x, grad_norm=1.0) is False
    assert guard.should_skip(2, loss, grad_norm=1.0) is skipped


def _two_by_one_case(lr):
    """A (2, 1) float64 weight of ones under loss = sum of outputs at input 1: its gradient is ones, so SGD at `lr`
    moves it by exactly `lr` of its norm (float64 keeps the ratio exact to 3 significant digits)."""
    model = torch.nn.Linear(1, 2, bias=False, dtype=torch.float64)
    torch.nn.init.ones_(model.weight)
    return {"model": model, "batch": (torch.ones(1, 1, dtype=torch.float64), torch.zeros(1)),
            "loss_fn": lambda out, targets: out.sum(), "optimizer": lambda params: torch.optim.SGD(params, lr=lr)}


def test_update_ratio_warns_a_weight_moving_exactly_a_millionth_of_its_norm_and_does_not_fail_it():
    result = update_ratio.check_update_ratio(_two_by_one_case(1e-6))  # LOW_FAIL: a fail only below it
    assert result.details["ratios"] == {"weight": 1e-6}
    assert result.status == "warn"


def test_update_ratio_judges_a_low_weight_outside_a_zero_init_gate_in_its_spread():
    """Not behind a gate, a weight at 1e-5 (under LOW_WARN) is judged: the warning's spread counts it."""
    result = update_ratio.check_update_ratio(_two_by_one_case(1e-5))
    assert result.status == "warn" and result.details["gated"] == []
    assert result.summary.endswith("ratios 1e-05 .. 1e-05 over 1 weight matrices")


def test_update_ratio_reports_a_weight_at_lr_0_as_not_moved_and_not_as_too_slow():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1, 2, bias=False), torch.nn.Linear(2, 2, bias=False))
    case = {"model": model, "batch": (torch.ones(4, 1), torch.zeros(4)), "loss_fn": lambda out, targets: out.sum(),
            "optimizer": lambda params: torch.optim.SGD([{"params": params[:1], "lr": 0.0}, {"params": params[1:]}],
                                                        lr=1e-3)}
    result = update_ratio.check_update_ratio(case)
    assert result.status == "fail" and result.details["not_updated"] == ["0.weight"]
    assert result.details["ratios"]["0.weight"] == 0
    assert "lr too low" not in result.summary  # a ratio of 0 is no step too small: the low gate starts above 0
