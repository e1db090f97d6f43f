"""diagnostics/metric_stuck.py: its decisions at their boundaries (Adam's lr, the 0.8 share of the way, a gradient of
exactly 1e-7 x the loss, the demo run in this process, the exit code of a fail), found by mutation testing."""
import os

import torch

import metric_stuck  # noqa: E402  (conftest puts diagnostics/ on sys.path)


class _Shift(torch.nn.Module):
    """One scalar parameter w, starting at 0, output for every sample. A term linear in w has a constant gradient, so
    Adam moves w by exactly lr per step: 100 steps at lr 1e-2 take it to 1.0."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.0))

    def forward(self, x):
        return self.w * torch.ones_like(x)


def _shift_problem(terms, metric):
    x = torch.zeros(4)
    return {"model": _Shift(), "batch": (x, x), "terms": terms, "target_term": "push", "metric": metric,
            "goal": "min", "best": 0.0}


def _distance_to(goal):
    return lambda out, _: abs(goal - float(out.mean()))


def _push_up(out, _):
    return -out.mean()


def test_the_term_alone_trains_at_lr_1e_2_so_a_goal_1_3_away_is_a_ceiling_fail():
    # w ends at 1.0 (77% of the way to 1.3, under 0.8); at lr 1.1e-2 it would end at 1.1 (85%) and pass
    result = metric_stuck.check_metric_stuck(_shift_problem({"push": _push_up}, _distance_to(1.3)))
    assert (result["status"], result["details"].get("failed")) == ("fail", "ceiling"), result["summary"]
    assert abs(result["details"]["metric_term_alone"] - 0.3) < 1e-3


def _levels(out, _):
    """5 at the start (w = 0), 1 once w is under -0.5, 0 once it is over 0.5: a share of the way of exactly 0.8 or 1."""
    w = float(out.mean())
    return 0.0 if w > 0.5 else 1.0 if w < -0.5 else 5.0


def test_exactly_0_8_of_the_way_with_the_term_alone_is_not_the_ceiling_fail():
    # the term drags w down to -1: the metric goes 5 -> 1, (5 - 1) / 5 == 0.8 exactly: 'under 0.8' is the fail
    result = metric_stuck.check_metric_stuck(_shift_problem({"push": lambda out, _: out.mean()}, _levels))
    assert result["details"]["progress_alone"] == 0.8
    assert result["status"] == "pass", result["summary"]


def test_exactly_0_8_of_the_way_with_every_term_on_is_not_the_fight_fail():
    # alone, w goes up to 1 (the whole way); the other term pulls twice as hard down, so together w goes to -1: 0.8
    problem = _shift_problem({"push": _push_up, "pull": lambda out, _: 2 * out.mean()}, _levels)
    result = metric_stuck.check_metric_stuck(problem)
    d = result["details"]
    assert (d["progress_alone"], d["progress_all_terms"]) == (1.0, 0.8)
    assert result["status"] == "pass", result["summary"]


def test_a_gradient_norm_of_exactly_1e_minus_7_times_the_loss_is_not_saturated():
    # each sample's loss is 1e7 (exact in float32) and its gradient norm 1.0, which is 1e-7 * 1e7 exactly in doubles:
    # saturated is a norm *below* that
    problem = _shift_problem({"push": lambda out, _: out.mean() + 1e7}, _distance_to(-1.0))
    result = metric_stuck.check_metric_stuck(problem)
    assert result["details"]["saturated_share"] == 0
    assert result["status"] == "pass", result["summary"]


def test_the_demo_runs_in_this_process_not_in_a_supervised_child(monkeypatch, capsys):
    """Only a --problem file is the user's code, run in a forked child; the demo is ours and runs here."""
    ran_in = []
    make_demo_problem = metric_stuck.make_demo_problem

    def recording(bug=None):
        ran_in.append(os.getpid())
        return make_demo_problem(bug)

    monkeypatch.setattr(metric_stuck, "make_demo_problem", recording)
    metric_stuck.main(["--healthy", "--json"])
    capsys.readouterr()
    assert ran_in == [os.getpid()]


def test_a_failing_problem_exits_1(capsys):
    assert metric_stuck.main(["--bug", "saturated"]) == 1
    assert capsys.readouterr().out.startswith("[FAIL]")
