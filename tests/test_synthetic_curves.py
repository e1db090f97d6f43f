"""synthetic_curves.py: deterministic curves whose ground truth matches what was written."""
import csv
import json
import math

import pytest

import synthetic_curves
from conftest import run_cli


def read(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_same_seed_same_curve_other_seed_other_curve():
    first = list(synthetic_curves.make_curve("mixed", 3, rows=2000).rows())
    assert first == list(synthetic_curves.make_curve("mixed", 3, rows=2000).rows())
    assert first != list(synthetic_curves.make_curve("mixed", 4, rows=2000).rows())


def test_clean_curve_decays_with_noise_and_nothing_planted():
    curve = synthetic_curves.make_curve("clean", 0)
    rows = list(curve.rows())
    assert curve.truth == {"spikes": [], "events": [], "nan_step": None}
    assert len(rows) == synthetic_curves.DEFAULT_ROWS["clean"]
    assert [r["step"] for r in rows] == list(range(len(rows)))
    assert all(math.isfinite(r["loss"]) for r in rows)
    early, late = rows[100:200], rows[-100:]
    assert sum(r["loss"] for r in early) > sum(r["loss"] for r in late)  # it decays
    assert max(abs(r["loss"] / synthetic_curves.trend(r["step"]) - 1) for r in rows) < 0.07  # noise only


def test_planted_spikes_are_where_the_truth_says():
    curve = synthetic_curves.make_curve("mixed", 2)
    rows = list(curve.rows())
    by_step = {}
    for r in rows:  # after a rollback a step appears twice: the spike lives in the first pass
        by_step.setdefault(r["step"], r)
    kinds = {t["type"] for t in curve.truth["spikes"]}
    assert kinds == {"fast_recovery", "slow_recovery", "no_recovery", "divergence"}
    for t in curve.truth["spikes"]:
        peak = by_step[t["step"]]["loss"]
        assert math.isnan(peak) or peak > 1.1 * synthetic_curves.trend(t["step"]), t


def test_resumes_in_the_truth_are_the_steps_going_back_in_the_log():
    curve = synthetic_curves.make_curve("resume", 1)
    steps = [r["step"] for r in curve.rows()]
    backwards = [(b, a) for a, b in zip(steps, steps[1:]) if b <= a]
    assert backwards == [(e["step"], e["from_step"]) for e in curve.truth["events"] if e["kind"] == "resume"]


def test_nan_scenario_turns_nan_at_the_truth_step_and_stays_nan():
    curve = synthetic_curves.make_curve("nan", 0)
    rows = list(curve.rows())
    first = next(r["step"] for r in rows if math.isnan(r["loss"]))
    assert first == curve.truth["nan_step"]
    assert all(math.isnan(r["loss"]) for r in rows if r["step"] >= first)


def test_repeat_data_is_lower_until_the_truth_says_it_ends():
    curve = synthetic_curves.make_curve("repeat_data", 0)
    rows = list(curve.rows())
    assert curve.truth["spikes"] == []  # the jump back up is the true loss showing again, not a spike
    jump = next(e for e in curve.truth["events"] if e["kind"] == "repeat_data")
    resumed_at = next(i for i in range(1, len(rows)) if rows[i]["step"] <= rows[i - 1]["step"])
    assert rows[resumed_at]["step"] == jump["resume_step"]
    after = rows[resumed_at:]
    repeated = [r["loss"] / synthetic_curves.trend(r["step"]) for r in after if r["step"] < jump["step"]]
    fresh = [r["loss"] / synthetic_curves.trend(r["step"]) for r in after if r["step"] >= jump["step"]]
    assert sum(repeated) / len(repeated) < 0.93 < 0.98 < sum(fresh) / len(fresh)


def test_dataset_scenario_has_per_dataset_columns_and_their_mean():
    curve = synthetic_curves.make_curve("datasets", 0)
    row = next(iter(curve.rows()))
    assert curve.columns == ["step", "loss", "loss/cm4", "loss/pmd"]
    assert row["loss"] == pytest.approx((row["loss/cm4"] + row["loss/pmd"]) / 2)
    assert {e["scope"] for e in curve.truth["events"]} == {"shared", "confined"}


def test_cli_writes_csv_and_truth(tmp_path):
    out, truth = tmp_path / "c.csv", tmp_path / "t.json"
    proc = run_cli("synthetic_curves.py", "--scenario", "nan", "--seed", "1", "--out", out, "--truth", truth)
    assert proc.returncode == 0, proc.stderr
    rows = read(out)
    assert list(rows[0]) == ["step", "loss", "grad_norm", "lr"]
    assert json.loads(truth.read_text())["nan_step"] == next(int(r["step"]) for r in rows if r["loss"] == "nan")


def test_cli_help_and_bad_usage():
    assert run_cli("synthetic_curves.py", "--help").returncode == 0
    proc = run_cli("synthetic_curves.py", "--out", "x.csv", "--rows", "5")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert run_cli("synthetic_curves.py", "--scenario", "nope", "--out", "x.csv").returncode == 2


def test_match_pairs_each_found_spike_once_and_only_near_its_plant():
    from types import SimpleNamespace
    near, far = SimpleNamespace(start=102), SimpleNamespace(start=300)
    planted = [{"start": 100}, {"start": 101}]  # two plants near one found spike: it pairs with the first alone
    assert synthetic_curves.match([far, near], planted) == [(planted[0], near)]
    assert synthetic_curves.match([far], planted) == []  # 200 steps off: no pair
