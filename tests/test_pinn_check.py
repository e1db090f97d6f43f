"""diagnostics/pinn_check.py: the healthy PINN passes; a PDE term in physical units fails on gradient balance, points in
half the domain fail on coverage, inputs in physical units warn; the model is left as found; bad input exits 2."""
import pytest
import torch

from state_snapshot import assert_unchanged, snapshot

import pinn_check  # noqa: E402  (conftest puts diagnostics/ on sys.path)


@pytest.mark.parametrize("bug,status,summary_start", [
    (None, "pass", "terms balanced within 32x"),
    ("scale", "fail", "gradient imbalance: 'pde' pulls 3.2e+07x harder than 'boundary'"),
    ("coverage", "fail", "50% of the domain's cells have no collocation point"),
])
def test_twins(bug, status, summary_start):
    problem = pinn_check.make_demo_pinn(bug)
    before = snapshot(problem["model"])
    outcome = pinn_check.check_pinn(problem)
    assert (outcome["status"], outcome["summary"][:len(summary_start)]) == (status, summary_start)
    assert_unchanged(before, snapshot(problem["model"]))


def test_inputs_in_physical_units_warn():
    points = torch.linspace(0, 1000, 200)[:, None]  # metres, not x / L

    def term(shift):
        return lambda net: (net(points / 1000) - shift).pow(2).mean()

    problem = {"model": pinn_check.MLP(), "terms": {"a": term(0.0), "b": term(0.1)}, "collocation": points,
               "domain": [(0.0, 1000.0)]}
    outcome = pinn_check.check_pinn(problem)
    assert outcome["status"] == "warn" and outcome["summary"] == "not non-dimensionalised: input dimension 0 spans [0, 1e+03]"


def test_coverage_in_two_dimensions_counts_joint_cells():
    grid = torch.cartesian_prod(torch.linspace(0, 1, 16), torch.linspace(0, 1, 16))
    diagonal = torch.rand(256, 1, generator=torch.Generator().manual_seed(0)).repeat(1, 2)  # all on x == y: 8 of 64 cells
    assert pinn_check.empty_share(grid, [(0, 1), (0, 1)]) == 0
    assert pinn_check.empty_share(diagonal, [(0, 1), (0, 1)]) == pytest.approx(1 - 8 / 64)


@pytest.mark.hostile
@pytest.mark.parametrize("source,says", [
    (None, "problem file not found"),
    ("raise ValueError('broken import')\n", "raised ValueError on import: broken import"),
    ("def make_other():\n    return {}\n", "has no function make_pinn()"),
    ("def make_pinn():\n    raise KeyError('seed')\n", "raised KeyError: 'seed'"),
    ("def make_pinn():\n    return []\n", "the problem is list, expected a dict"),
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {'a': 1},"
     " 'collocation': torch.rand(5, 1), 'domain': [(0, 1)]}\n", "terms must be a dict of name -> function"),
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {},"
     " 'collocation': torch.rand(5, 1), 'domain': [(0, 1)]}\n", "terms must be a dict of name -> function"),
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {'a': lambda m: m.weight.sum()},"
     " 'collocation': torch.rand(5, 1), 'domain': [(0, 1), (0, 1)]}\n", "domain must be one (low, high) pair per input dimension (1)"),
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {'a': lambda m: m(torch.rand(3, 2)).sum()},"
     " 'collocation': torch.rand(5, 1), 'domain': [(0, 1)]}\n", "the check could not run on this problem: RuntimeError"),
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {'a': lambda m: m.weight.sum()},"
     " 'collocation': torch.rand(5), 'domain': [(0, 1)]}\n", "collocation must be a (N, d) tensor"),  # 1-D
    ("import torch\ndef make_pinn():\n    return {'model': torch.nn.Linear(1, 1), 'terms': {'a': lambda m: m.weight.sum()},"
     " 'collocation': torch.rand(0, 1), 'domain': [(0, 1)]}\n", "collocation must be a (N, d) tensor"),  # no point
])
def test_bad_problems_exit_2_with_one_line(tmp_path, capsys, source, says):
    path = tmp_path / "pinn.py"
    if source is not None:
        path.write_text(source)
    assert pinn_check.main(["--problem", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err


NAN_TERM = {  # issue 22 (silently wrong): a term whose gradient is NaN was a PASS when it was the smaller term
    "nan gradient": lambda net: net(torch.tensor([[0.5]])).pow(2).mean() + torch.sqrt(net(torch.zeros(1, 1)).pow(2).sum() * 0),
    "nan value": lambda net: net(torch.tensor([[0.0], [1.0]])).pow(2).mean() * float("nan"),
    "inf value": lambda net: net(torch.tensor([[0.0], [1.0]])).pow(2).mean() + float("inf"),
}


@pytest.mark.hostile
@pytest.mark.parametrize("kind", NAN_TERM)
def test_a_term_or_gradient_that_is_not_finite_is_a_fail_naming_it(kind):
    problem = pinn_check.make_demo_pinn(None)
    problem["terms"]["boundary"] = NAN_TERM[kind]
    outcome = pinn_check.check_pinn(problem)
    assert outcome["status"] == "fail" and outcome["summary"].startswith("term 'boundary' is not finite"), outcome
    assert outcome["details"]["not_finite"] == ["boundary"]


@pytest.mark.hostile
@pytest.mark.parametrize("where, says", [("collocation", "collocation holds a NaN or infinity (row 3)"),
                                         ("targets", "targets hold a NaN or infinity"),
                                         ("domain", "domain must be one (low, high) pair")])
def test_nan_in_the_problems_numbers_is_refused_in_one_line(where, says, tmp_path, capsys):
    path = tmp_path / "pinn.py"
    plant = {"collocation": "p['collocation'][3, 0] = float('nan')", "targets": "p['targets'] = torch.tensor([float('nan'), 0.])",
             "domain": "p['domain'] = [(0.0, float('inf'))]"}[where]
    path.write_text(f"import torch\nfrom pinn_check import make_demo_pinn\ndef make_pinn():\n    p = make_demo_pinn(None)\n"
                    f"    {plant}\n    return p\n")
    assert pinn_check.main(["--problem", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.hostile
@pytest.mark.parametrize("source, says", [
    ("def make_pinn():\n    raise RuntimeError('no mesh')\n", "make_pinn() in"),
    ("import torch\ndef make_pinn():\n    return {'model': 1, 'terms': {'a': lambda m: m.weight.sum()},"
     " 'collocation': torch.rand(5, 1), 'domain': [(0, 1)]}\n", "model must be a torch.nn.Module"),
])
def test_a_factory_that_raises_or_a_model_that_is_no_module_is_one_line(tmp_path, capsys, source, says):
    path = tmp_path / "pinn.py"
    path.write_text(source)
    assert pinn_check.main(["--problem", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.parametrize("span, target, summary", [
    (10.0, 10.0, "terms balanced"),  # exactly at INPUT_MAX and TARGET_MAX: still order 1
    (10.5, 10.0, "not non-dimensionalised: input dimension 0 spans [0, 10.5]"),  # the targets at 10 are not named
    (10.0, 10.5, "not non-dimensionalised: targets reach 10.5"),
], ids=["both at 10", "inputs past it", "targets past it"])
def test_inputs_and_targets_are_of_order_1_up_to_10(span, target, summary):
    points = torch.linspace(0, span, 200)[:, None]

    def term(shift):
        return lambda net: (net(points / span) - shift).pow(2).mean()

    problem = {"model": pinn_check.MLP(), "terms": {"a": term(0.0), "b": term(0.1)}, "collocation": points,
               "domain": [(0.0, span)], "targets": torch.tensor([0.0, target])}
    outcome = pinn_check.check_pinn(problem)
    said = outcome["summary"] if outcome["status"] == "warn" else outcome["summary"][:len(summary)]
    assert said == summary, outcome["summary"]


def test_coverage_in_three_dimensions_counts_joint_cells_and_beyond_only_each_dimension():
    diagonal = torch.rand(512, 1, generator=torch.Generator().manual_seed(0))
    assert pinn_check.empty_share(diagonal.repeat(1, 3), [(0, 1)] * 3) == pytest.approx(1 - 8 / 512)
    assert pinn_check.empty_share(diagonal.repeat(1, 4), [(0, 1)] * 4) == 0  # each dimension alone is covered
