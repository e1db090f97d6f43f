"""diagnostics/metric_stuck.py: the healthy demo passes; each broken twin fails the question that names its bug; the
user's model is left as found; bad problem files exit 2 with one line."""
import pytest
import torch

from state_snapshot import assert_unchanged, snapshot

import metric_stuck  # noqa: E402  (conftest puts diagnostics/ on sys.path)


@pytest.mark.parametrize("bug,status,failed", [
    (None, "pass", None),
    ("saturated", "fail", "gradient"),
    ("ceiling", "fail", "ceiling"),
    ("fight", "fail", "fight"),
])
def test_each_twin_fails_its_own_question(bug, status, failed):
    problem = metric_stuck.make_demo_problem(bug)
    before = snapshot(problem["model"])
    result = metric_stuck.check_metric_stuck(problem)
    assert (result["status"], result["details"].get("failed")) == (status, failed), result["summary"]
    assert_unchanged(before, snapshot(problem["model"]))
    d = result["details"]
    if bug is None:
        assert d["saturated_share"] == 0 and d["progress_alone"] > 0.95 and d["progress_all_terms"] > 0.95
    if bug == "fight":
        assert d["progress_alone"] > 0.95 and d["progress_all_terms"] < 0.5
        assert d["cosine_with_other_terms"] < 0 and d["other_to_term_norm_ratio"] > 1


def nan_metric(problem):
    problem["metric"] = lambda out, targets: (out - targets).pow(2).mean() * float("nan")  # a metric that is NaN throughout


def nan_target(problem):
    problem["batch"][1][5] = float("nan")  # one target missing, read as NaN


def nan_gradient(problem):
    mse = problem["terms"]["mse"]  # plus a square root of exactly 0: the value stays finite, its gradient is 0 * inf
    problem["terms"]["mse"] = lambda out, targets: mse(out, targets) + ((out - targets) * 0).pow(2).mean().sqrt()


def nan_metric_once_fitted(problem):
    mse = problem["metric"]  # NaN below 0.01, which the start (0.94) is not and 'mse' alone reaches
    problem["metric"] = lambda out, targets: torch.where(mse(out, targets) < 0.01, float("nan"), mse(out, targets))


def nan_in_training(problem):
    problem["terms"]["root"] = lambda out, _: torch.sqrt(out.mean() + 0.2)  # finite at the start; NaN once the mean passes -0.2


@pytest.mark.parametrize("plant,phase,step,what", [
    (nan_metric, "start", 0, "the metric is nan before any training"),
    (nan_target, "start", 0, "'mse' is nan on sample 5 before any training"),
    (nan_gradient, "start", 0, "the gradient of 'mse' has norm nan on sample 0 before any training"),
    (nan_metric_once_fitted, "term_alone", 100, "the metric is nan after 100 steps of training on 'mse' alone"),
    (nan_in_training, "all_terms", 2, "the loss is nan at step 2 of training on every term"),
])
def test_a_nan_metric_or_loss_is_a_fail_that_names_where_it_first_appears(plant, phase, step, what):
    problem = metric_stuck.make_demo_problem(None)
    plant(problem)
    result = metric_stuck.check_metric_stuck(problem)
    d = result["details"]
    assert (result["status"], d.get("failed")) == ("fail", "nonfinite"), result["summary"]
    assert (d["nonfinite"]["phase"], d["nonfinite"]["step"]) == (phase, step)
    assert result["summary"] == f"NaN/inf: {what}"


@pytest.mark.hostile
@pytest.mark.parametrize("source,says", [
    (None, "problem file not found"),
    ("raise ValueError('broken import')\n", "raised ValueError on import: broken import"),
    ("def make_other():\n    return {}\n", "has no function make_problem()"),
    ("def make_problem():\n    raise KeyError('seed')\n", "raised KeyError: 'seed'"),
    ("def make_problem():\n    return {'model': 1}\n", "the problem is missing batch, terms"),
    ("import torch\ndef make_problem():\n    return {'model': torch.nn.Linear(2, 1), 'batch': (torch.randn(4, 2), torch.randn(4)),"
     " 'terms': {'a': lambda o, y: o.sum()}, 'target_term': 'b', 'metric': lambda o, y: 0.0, 'goal': 'min', 'best': 0}\n",
     "target_term 'b' is not one of the terms (a)"),
    ("import torch\ndef make_problem():\n    return {'model': torch.nn.Linear(2, 1), 'batch': (torch.randn(4, 3), torch.randn(4)),"
     " 'terms': {'a': lambda o, y: o.sum()}, 'target_term': 'a', 'metric': lambda o, y: 0.0, 'goal': 'min', 'best': 0}\n",
     "the check could not run on this problem: RuntimeError"),
    ("import torch\ndef make_problem():\n    return {'model': torch.nn.Linear(2, 1), 'batch': (torch.randn(4, 2), torch.randn(4)),"
     " 'terms': {'a': lambda o, y: o.sum()}, 'target_term': 'a', 'metric': lambda o, y: 0.0, 'goal': 'min', 'best': float('nan')}\n",
     "best must be a finite number"),
    ("import torch\ndef make_problem():\n    return {'model': torch.nn.Linear(2, 1), 'batch': (torch.randn(4, 2), torch.randn(4)),"
     " 'terms': {'a': lambda o, y: o.sum()}, 'target_term': 'a', 'metric': lambda o, y: 0.0, 'goal': 'lower', 'best': 0}\n",
     "goal must be 'min' or 'max'"),
])
def test_bad_problems_exit_2_with_one_line(tmp_path, capsys, source, says):
    path = tmp_path / "problem.py"
    if source is not None:
        path.write_text(source)
    assert metric_stuck.main(["--problem", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err



def test_exactly_a_quarter_of_the_samples_saturated_is_not_the_gradient_fail():
    """SATURATED_SHARE is 'more than a quarter'; a saturated sample with a loss of 1 still counts (any loss above 0)."""
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.zero_()
    x, y = torch.tensor([[-1.0], [1.0], [2.0], [3.0]]), torch.tensor([[1.0], [2.0], [3.0], [4.0]])  # sample 0: ReLU off, loss 1
    mse = torch.nn.functional.mse_loss
    problem = {"model": model, "batch": (x, y), "terms": {"mse": mse}, "target_term": "mse", "metric": mse, "goal": "min",
               "best": 0.0}
    d = metric_stuck.check_metric_stuck(problem)["details"]
    assert (d["saturated_share"], d.get("failed")) == (0.25, "ceiling")  # sample 0 is out of reach: question 2, not 1


def test_a_term_with_no_gradient_gets_no_cosine_with_the_metrics_term():
    """The cosine compares the terms where both have gradient; a term whose gradient is zero everywhere (at its floor,
    or multiplied by 0) shares no parameter with the metric's term, so none is given, and the run passes."""
    problem = metric_stuck.make_demo_problem()
    problem["terms"] = {"mse": problem["terms"]["mse"], "idle": lambda out, _: 0.0 * out.mean()}
    result = metric_stuck.check_metric_stuck(problem)
    assert result["status"] == "pass"
    assert "cosine_with_other_terms" not in result["details"] and "other_to_term_norm_ratio" not in result["details"]


class _ThreeScales(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Parameter(torch.tensor(1.0)) for _ in range(3))

    def forward(self, x):
        return torch.stack([self.a * x, self.b * x, self.c * x], dim=-1)


def test_the_cosine_compares_the_terms_only_on_the_parameters_both_move():
    """The metric's term moves a and b, the other term a and c: only a is shared, so the cosine is +-1 exactly. A
    parameter only one term moves would pull it toward 0 although the terms agree on every parameter they share."""
    x, y = torch.tensor([1.0, 2.0, -1.0, 0.5]), torch.tensor([3.0, 1.0, 2.0, -1.0])
    problem = {"model": _ThreeScales(), "batch": (x, y), "target_term": "mine", "goal": "min", "best": 0.0,
               "terms": {"mine": lambda o, y: ((o[:, 0] + o[:, 1] - y) ** 2).mean(),
                         "other": lambda o, y: ((o[:, 0] + o[:, 2] - y) ** 2).mean()},
               "metric": lambda o, y: ((o[:, 0] + o[:, 1] - y) ** 2).mean()}
    details = metric_stuck.check_metric_stuck(problem)["details"]
    assert abs(details["cosine_with_other_terms"]) == pytest.approx(1.0)


def _problem(**changes):
    return {"model": torch.nn.Linear(2, 1), "batch": (torch.randn(4, 2), torch.randn(4)),
            "terms": {"a": lambda o, y: o.sum()}, "target_term": "a", "metric": lambda o, y: 0.0, "goal": "min", "best": 0,
            **changes}


@pytest.mark.parametrize("problem, says", [
    ([1, 2], "the problem is list, expected a dict"),
    (_problem(model=1), "model must be a torch.nn.Module"),
    (_problem(terms={}), "terms must be a dict"),
    (_problem(terms={"a": 1}), "terms must be a dict"),
    (_problem(terms=[("a", len)]), "terms must be a dict"),
    (_problem(metric=0.5), "metric must be a function"),
    (_problem(best="high"), "best must be a finite number"),
])
def test_each_part_of_a_problem_is_checked_before_any_of_it_runs(problem, says):
    with pytest.raises(metric_stuck.ProblemError, match=says):
        metric_stuck.validate(problem)
    assert metric_stuck.validate(_problem()) is not None


def test_a_timeout_of_0_is_no_limit_and_a_negative_one_is_refused(tmp_path, capsys):
    missing = str(tmp_path / "none.py")  # accepted options reach the problem file, and stop there
    assert metric_stuck.main(["--problem", missing, "--timeout", "0"]) == 2
    assert "problem file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        metric_stuck.main(["--problem", missing, "--timeout", "-1"])
    assert refused.value.code == 2 and "--timeout must be" in capsys.readouterr().err


def test_the_healthy_flag_runs_the_demo_without_its_bug(capsys):
    assert metric_stuck.main(["--healthy", "--json"]) == 0
    assert '"status": "pass"' in capsys.readouterr().out
