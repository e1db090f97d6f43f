"""pinn_check's decisions pinned at their boundaries (mutation testing's survivors): the empty-cell share, a problem
missing a field, which non-finite quantity is named, and the CLI's timeout, demo twin, phase and exit code."""
import pytest
import torch

import pinn_check  # noqa: E402  (conftest puts diagnostics/ on sys.path)
from test_pinn_check import NAN_TERM  # noqa: E402


def _covering(cells_filled, dims):
    """A balanced problem whose collocation points sit at the centres of the first `cells_filled` of 8**dims cells."""
    centres = (torch.arange(8, dtype=torch.float32) + 0.5) / 8
    points = torch.cartesian_prod(*[centres] * dims).reshape(-1, dims)[:cells_filled]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = pinn_check.MLP(d_in=dims)
    terms = {name: (lambda net, k=k: k * net(points).pow(2).mean()) for name, k in (("pde", 1.0), ("boundary", 2.0))}
    return {"model": model, "terms": terms, "collocation": points, "domain": [(0.0, 1.0)] * dims}


def test_a_quarter_of_the_cells_empty_is_still_covered():
    outcome = pinn_check.check_pinn(_covering(6, 1))  # 2 of 8 cells empty: exactly EMPTY_SHARE, which is allowed
    assert outcome["details"]["empty_cells"] == 0.25
    assert outcome["status"] == "pass"


def test_just_over_a_quarter_of_the_cells_empty_is_a_coverage_fail():
    outcome = pinn_check.check_pinn(_covering(47, 2))  # 17 of 64 cells empty: 26.6%, under EMPTY_SHARE * 1.1
    assert outcome["details"]["empty_cells"] == pytest.approx(17 / 64)
    assert outcome["status"] == "fail" and outcome["details"]["next"].startswith("sample collocation points")


def test_a_problem_missing_a_field_is_refused_naming_it():
    problem = pinn_check.make_demo_pinn(None)
    del problem["domain"]
    with pytest.raises(pinn_check.ProblemError, match="missing domain"):
        pinn_check.check_pinn(problem)


@pytest.mark.parametrize("kind, named", [("nan value", "(value nan)"), ("nan gradient", "(gradient norm nan)")])
def test_a_non_finite_term_names_the_quantity_that_is_not_finite(kind, named):
    problem = pinn_check.make_demo_pinn(None)
    problem["terms"]["boundary"] = NAN_TERM[kind]
    outcome = pinn_check.check_pinn(problem)
    assert outcome["status"] == "fail" and named in outcome["summary"], outcome["summary"]


@pytest.fixture
def calls(monkeypatch):
    """Records the phase and time limit main() hands run_user_code, then runs it as before."""
    seen = []
    real = pinn_check.run_user_code

    def spy(work, phase, limit, *args, **kwargs):
        seen.append((phase, limit))
        return real(work, phase, limit, *args, **kwargs)

    monkeypatch.setattr(pinn_check, "run_user_code", spy)
    return seen


@pytest.mark.parametrize("argv, code, status", [
    (["--healthy"], 0, "pass"),
    ([], 1, "fail"),  # the demo's default bug: a PDE term in physical units
    (["--bug", "coverage"], 1, "fail"),
])
def test_the_demo_runs_here_under_the_default_timeout_and_a_fail_exits_1(argv, code, status, calls, capsys):
    assert pinn_check.main(argv) == code
    assert capsys.readouterr().out.startswith(f"[{status.upper()}] pinn_check:")
    assert calls == [(None, 300.0)]  # the demo is our code: no supervised child; 300 s is the documented default


def test_a_timeout_of_zero_means_no_limit_and_is_accepted(calls, capsys):
    assert pinn_check.main(["--healthy", "--timeout", "0"]) == 0
    assert calls == [(None, 0.0)]


def test_a_warn_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(pinn_check, "run_user_code", lambda *args, **kwargs: pinn_check.result("warn", "", {}))
    assert pinn_check.main(["--json"]) == 0


def test_a_problem_file_runs_in_a_phase_named_after_it(tmp_path, calls, capsys):
    path = tmp_path / "pinn.py"
    path.write_text("from pinn_check import make_demo_pinn\ndef make_pinn():\n    return make_demo_pinn(None)\n")
    assert pinn_check.main(["--problem", str(path), "--json"]) == 0
    assert calls == [(f"running {path}", 300.0)]
