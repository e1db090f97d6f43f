"""diagnostics/sweeps.py: its stdlib t distribution against scipy, its comparisons against scipy's paired t, its
problems and refusals, and the CLI contract of issue 13."""
import json
import math
import random

import pytest

from conftest import assert_one_line_error, run_cli

import sweeps  # conftest puts diagnostics/ on sys.path


@pytest.fixture(scope="module")
def stats():
    """scipy computes the reference values; imported by the tests that compare with it (0.8 s: not at collection)."""
    return pytest.importorskip("scipy.stats", reason="scipy computes the reference values (requirements-test.txt has it)")


@pytest.fixture(scope="module")
def special():
    return pytest.importorskip("scipy.special", reason="scipy computes the reference values (requirements-test.txt has it)")


def write(tmp_path, text, name="runs.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def sweep_csv(rows, extra=""):
    header = "lr,seed,val_loss" + ("," + extra if extra else "")
    return header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)


def noisy_sweep(values, seeds, effect, seed=1):
    """Rows of (value, seed, metric): a per-seed offset every arm shares, an effect per value, run noise."""
    rng = random.Random(seed)
    offsets = {s: rng.gauss(0, 0.3) for s in seeds}
    return [(v, s, 3.0 + offsets[s] + effect[v] + rng.gauss(0, 0.02)) for v in values for s in seeds]


# -- the t distribution, standard library only, against scipy -----------------------------------


@pytest.mark.parametrize("a,b", [(0.5, 0.5), (0.5, 30.0), (2.0, 0.5), (7.5, 0.5), (40.0, 0.5), (3.0, 9.0)])
def test_incomplete_beta_matches_scipy(a, b, special):
    for x in (1e-6, 0.01, 0.2, 0.5, 0.77, 0.99, 1 - 1e-9):
        assert sweeps.betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 29, 60, 61, 200])
def test_t_p_values_and_critical_values_match_scipy(df, stats):
    for t in (0.0, 0.3, 1.0, 2.0, 2.5, 4.3, 12.7, 40.0):
        assert sweeps.t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-15)
        assert sweeps.t_two_sided_p(-t, df) == sweeps.t_two_sided_p(t, df)
    assert sweeps.t_critical(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_the_abs_t_above_2_shortcut_holds_only_from_61_df(stats):
    """What refs/sweeps.md and the docstring say: |t| > 2 means p < 0.05 only from 61 degrees of freedom on."""
    assert all(sweeps.t_two_sided_p(2.0, df) > 0.05 for df in range(1, 61))
    assert all(sweeps.t_two_sided_p(2.0, df) < 0.05 for df in range(61, 200))
    assert sweeps.t_two_sided_p(2.0, 2) == pytest.approx(2 * stats.t.sf(2.0, 2))  # 0.18: a coin flip away from noise
    assert sweeps.t_two_sided_p(2.0, 2) > 0.18


def exact_seeds_needed(effect, stats, power=0.8):
    """The reference: the smallest n whose exact noncentral-t power (scipy) reaches `power`."""
    n = 2
    while True:
        df, crit = n - 1, stats.t.ppf(0.975, n - 1)
        delta = effect * math.sqrt(n)
        if stats.nct.sf(crit, df, delta) + stats.nct.cdf(-crit, df, delta) >= power:
            return n
        n += 1


@pytest.mark.parametrize("effect", [3.0, 1.2, 0.8, 0.5, -0.5, 0.25])
def test_seeds_needed_matches_scipy_noncentral_t(effect, stats):
    assert sweeps.seeds_needed(effect) == exact_seeds_needed(abs(effect), stats)


@pytest.mark.parametrize("n,effect", [(2, 1.0), (3, 0.7), (8, 0.5), (40, 0.3)])
def test_power_matches_scipy_noncentral_t(n, effect, stats):
    crit, delta = stats.t.ppf(0.975, n - 1), effect * math.sqrt(n)
    reference = stats.nct.sf(crit, n - 1, delta) + stats.nct.cdf(-crit, n - 1, delta)
    assert sweeps.paired_power(effect, n) == pytest.approx(reference, abs=1e-6)


# -- the analysis ---------------------------------------------------------------------------------


def test_comparisons_are_scipys_paired_t(tmp_path, stats):
    seeds = list(range(6))
    effect = {"1e-4": 0.1, "3e-4": 0.0, "1e-3": -0.015, "3e-3": 0.01}
    rows = noisy_sweep(list(effect), seeds, effect)
    result = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss", "3e-4")
    assert result["baseline"] == "3e-4" and result["problems"] == []
    metric = {(v, s): m for v, s, m in rows}
    assert [c["value"] for c in result["comparisons"]] == ["1e-4", "1e-3", "3e-3"]
    for c in result["comparisons"]:
        a = [metric[(c["value"], s)] for s in seeds]
        b = [metric[("3e-4", s)] for s in seeds]
        reference = stats.ttest_rel(a, b)
        diffs = [x - y for x, y in zip(a, b)]
        interval = stats.t.interval(0.95, len(diffs) - 1, loc=sum(diffs) / len(diffs), scale=stats.sem(diffs))
        assert (c["n_pairs"], c["df"]) == (6, 5)
        assert c["t"] == pytest.approx(reference.statistic, rel=1e-9)
        assert c["p"] == pytest.approx(reference.pvalue, rel=1e-7)
        assert c["ci95"] == pytest.approx(list(interval), rel=1e-9)
        assert c["mean_diff"] == pytest.approx(sum(diffs) / 6)


def test_trend_is_the_per_seed_slope_on_log10_tested_across_seeds(tmp_path, stats):
    values, seeds = ["1e-4", "1e-3", "1e-2"], list(range(5))
    effect = {"1e-4": 0.2, "1e-3": 0.1, "1e-2": 0.0}
    rows = noisy_sweep(values, seeds, effect, seed=3)
    trend = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")["trend"]
    slopes = [stats.linregress([-4, -3, -2], [m for v, s, m in rows if s == seed]).slope for seed in seeds]
    reference = stats.ttest_1samp(slopes, 0.0)
    assert trend["x"] == "log10" and trend["n_seeds"] == 5
    assert trend["slope"] == pytest.approx(sum(slopes) / 5) and trend["slope"] == pytest.approx(-0.1, abs=0.02)
    assert trend["t"] == pytest.approx(reference.statistic) and trend["p"] == pytest.approx(reference.pvalue)


def test_a_categorical_parameter_has_no_trend(tmp_path):
    rows = noisy_sweep(["adam", "sgd"], [0, 1, 2], {"adam": 0.0, "sgd": 0.1})
    text = sweep_csv(rows).replace("lr,", "opt,", 1)
    result = sweeps.analyze(str(write(tmp_path, text)), "opt", "seed", "val_loss")
    assert result["trend"] is None and result["comparisons"][0]["value"] == "sgd"


@pytest.mark.hostile
def test_lost_runs_are_reported_never_dropped_silently(tmp_path):
    rows = noisy_sweep(["3e-4", "1e-3"], list(range(7)), {"3e-4": 0.0, "1e-3": -0.05})
    lines = sweep_csv(rows, extra="state").replace("\n", ",finished\n").splitlines()
    assert lines[9].startswith("1e-3,1,")
    lines[9] = "1e-3,1,nan,finished"  # a diverged run
    lines[10] = "1e-3,2,,finished"  # a run that never logged its metric
    lines[11] = "1e-3,3,inf,finished"
    lines[12] = "1e-3,4,3.01,crashed"  # a metric from a crashed run: partial, not comparable
    lines.append("3e-4,0,3.5,finished")  # the same (value, seed) twice
    result = sweeps.analyze(str(write(tmp_path, "\n".join(lines) + "\n")), "lr", "seed", "val_loss")
    kinds = sorted(p["kind"] for p in result["problems"])
    assert kinds == ["diverged", "duplicate", "missing", "nan", "not_finished", "unpaired"]
    assert {p["row"] for p in result["problems"] if "row" in p} == {10, 11, 12, 13}  # file line numbers
    [c] = result["comparisons"]
    metric = {(v, s): m for v, s, m in rows}
    baseline_0 = (metric[("3e-4", 0)] + 3.5) / 2  # the duplicate is averaged, and said so
    diffs = [metric[("1e-3", 0)] - baseline_0] + [metric[("1e-3", s)] - metric[("3e-4", s)] for s in (5, 6)]
    assert c["n_pairs"] == 3 and c["mean_diff"] == pytest.approx(sum(diffs) / 3)


def test_jsonl_reads_like_csv(tmp_path):
    rows = noisy_sweep(["3e-4", "1e-3"], [0, 1, 2], {"3e-4": 0.0, "1e-3": -0.05})
    jsonl = "".join(json.dumps({"config": {"x": 1}, "lr": v, "seed": s, "val_loss": m}) + "\n" for v, s, m in rows)
    from_csv = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    from_jsonl = sweeps.analyze(str(write(tmp_path, jsonl, "runs.jsonl")), "lr", "seed", "val_loss")
    assert from_jsonl["comparisons"] == from_csv["comparisons"]


def test_baseline_matches_numerically(tmp_path):
    rows = noisy_sweep(["0.0003", "0.001"], [0, 1, 2], {"0.0003": 0.0, "0.001": -0.05})
    result = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss", "3e-4")
    assert result["baseline"] == "0.0003" and result["comparisons"][0]["value"] == "0.001"


def test_a_byte_order_mark_is_not_part_of_the_first_columns_name(tmp_path):
    rows = noisy_sweep(["3e-4", "1e-3"], [0, 1, 2], {"3e-4": 0.0, "1e-3": -0.05})
    plain = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    marked = tmp_path / "excel.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + sweep_csv(rows).encode())  # what Excel's "CSV UTF-8" writes
    assert sweeps.analyze(str(marked), "lr", "seed", "val_loss")["comparisons"] == plain["comparisons"]


def test_a_field_longer_than_the_csv_modules_default_limit_is_read_and_the_limit_restored(tmp_path):
    import csv
    rows = noisy_sweep(["3e-4", "1e-3"], [0, 1, 2], {"3e-4": 0.0, "1e-3": -0.05})
    plain = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    limit = csv.field_size_limit()
    noted = sweep_csv([row + ("x" * 200_000 if i == 2 else "",) for i, row in enumerate(rows)], extra="notes")  # a pasted log
    result = sweeps.analyze(str(write(tmp_path, noted, "noted.csv")), "lr", "seed", "val_loss")
    assert result["comparisons"] == plain["comparisons"] and result["problems"] == []
    assert csv.field_size_limit() == limit


def test_a_field_holding_a_form_feed_or_a_unicode_line_separator_stays_in_its_row(tmp_path):
    rows = noisy_sweep(["3e-4", "1e-3"], [0, 1, 2], {"3e-4": 0.0, "1e-3": -0.05})
    plain = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    notes = ["page\x0cbreak", "a\u2028b", "plain", "x\x1cy", "", '"two\nlines"']  # str.splitlines() splits at the first four
    noted = sweep_csv([row + (note,) for row, note in zip(rows, notes)], extra="notes")
    result = sweeps.analyze(str(write(tmp_path, noted, "noted.csv")), "lr", "seed", "val_loss")
    assert (result["n_rows"], result["comparisons"], result["problems"]) == (6, plain["comparisons"], [])


def test_seeds_pair_by_number_as_parameter_values_do(tmp_path):
    rows = [("1e-3", "0", 3.1), ("1e-3", "1", 3.3), ("1e-3", "2", 3.2),
            ("3e-4", "0.0", 3.2), ("3e-4", "01", 3.35), ("3e-4", "2.0", 3.3)]  # a float column in one export, an int in the other
    result = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    [c] = result["comparisons"]
    assert (c["n_pairs"], result["n_seeds"], result["problems"]) == (3, 3, [])
    assert c["mean_diff"] == pytest.approx(((3.2 - 3.1) + (3.35 - 3.3) + (3.3 - 3.2)) / 3)


def test_seeds_that_one_float_cannot_tell_apart_stay_two_seeds(tmp_path):
    big = ["9007199254740992", "9007199254740993"]  # 2**53 and 2**53 + 1: float() makes them equal
    rows = [(lr, seed, 3.0 + i / 10 + (lr == "1e-3") / 100) for lr in ("3e-4", "1e-3") for i, seed in enumerate(big)]
    result = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    assert (result["comparisons"][0]["n_pairs"], result["n_seeds"], result["problems"]) == (2, 2, [])


# -- the CLI --------------------------------------------------------------------------------------


def test_json_contract(tmp_path):
    rows = noisy_sweep(["3e-4", "1e-3"], [0, 1, 2, 3], {"3e-4": 0.0, "1e-3": -0.05})
    proc = run_cli("sweeps.py", write(tmp_path, sweep_csv(rows)), "--param", "lr", "--seed", "seed",
                   "--metric", "val_loss", "--baseline", "3e-4", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    [c] = out["comparisons"]
    assert {"value", "baseline", "n_pairs", "mean_diff", "ci95", "t", "df", "p"} <= set(c)
    assert (c["value"], c["baseline"], c["n_pairs"], c["df"]) == ("1e-3", "3e-4", 4, 3) and len(c["ci95"]) == 2
    assert out["problems"] == [] and "paired t" in out["statistic"]


def test_the_demo_flags_its_lost_run_and_its_shortcut_and_the_healthy_twin_is_clean():
    broken = run_cli("sweeps.py", "--json")
    healthy = run_cli("sweeps.py", "--healthy", "--json")
    assert broken.returncode == healthy.returncode == 0
    broken, healthy = json.loads(broken.stdout), json.loads(healthy.stdout)
    assert [p["kind"] for p in broken["problems"]] == ["nan", "unpaired"] and healthy["problems"] == []
    misled = [c["value"] for c in broken["comparisons"] if abs(c["t"]) > 2 and c["p"] >= 0.05]
    assert misled == ["3e-3"]
    assert all(c["n_pairs"] == 5 for c in healthy["comparisons"])


@pytest.mark.hostile
def test_one_seed_per_arm_is_refused_with_the_number_needed(tmp_path):
    path = write(tmp_path, sweep_csv([("3e-4", 0, 3.2), ("1e-3", 0, 3.1), ("3e-3", 0, 3.3)]))
    proc = run_cli("sweeps.py", path, "--param", "lr", "--seed", "seed", "--metric", "val_loss")
    assert_one_line_error(proc)
    assert "1 usable seed(s) per arm" in proc.stderr and "2 or more" in proc.stderr


@pytest.mark.hostile
@pytest.mark.parametrize("text,args,says", [
    (None, ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "no such file"),
    ("", ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "empty"),
    ("lr,seed,val_loss\n", ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "only a header"),
    ("lr,seed,val_loss\n1e-3,0,3\n", ["--param", "lr", "--seed", "nope", "--metric", "val_loss"], "no column 'nope'"),
    ("lr,seed,val_loss\n1e-3,0,3\n1e-3,1,3\n", ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "nothing to compare"),
    ("lr,seed,val_loss\n1e-3,0,3\n3e-4,0,3\n", ["--param", "lr", "--seed", "seed", "--metric", "val_loss", "--baseline", "5"],
     "baseline lr=5 is not in"),
    ('{"lr": 1}\n{oops\n', ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "line 2 is not JSON"),
    ("lr\x00seed\n", ["--param", "lr", "--seed", "seed", "--metric", "val_loss"], "binary"),
    ("lr,seed,val_loss\n", ["--param", "lr"], "missing --seed, --metric"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, text, args, says):
    path = tmp_path / "runs.csv"
    if text is not None:
        path.write_text(text)
    proc = run_cli("sweeps.py", path, *args)
    assert_one_line_error(proc)
    assert says in proc.stderr


@pytest.mark.hostile
def test_a_device_is_refused_not_read(tmp_path):
    proc = run_cli("sweeps.py", "/dev/zero", "--param", "lr", "--seed", "seed", "--metric", "val_loss", timeout=30)
    assert_one_line_error(proc)
    assert "not a regular file" in proc.stderr


@pytest.mark.hostile
def test_write_demo_never_overwrites(tmp_path):
    path = write(tmp_path, "mine\n", "sweep.csv")
    assert_one_line_error(run_cli("sweeps.py", "--write-demo", path))
    assert path.read_text() == "mine\n"


def page_table(heading):
    """The rows of the first markdown table under `heading` in refs/sweeps.md, as lists of cells."""
    from conftest import ROOT
    text = (ROOT / "refs" / "sweeps.md").read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in row] for row in rows[1:]]  # the header row off


def test_the_pages_tables_are_what_the_code_computes():
    rows = page_table("## Where")
    assert [int(r[0]) for r in rows] == [2, 3, 4, 5, 6, 10, 20, 30]
    for n, df, crit, p in rows:
        assert int(df) == int(n) - 1
        assert crit == f"{sweeps.t_critical(int(df)):.2f}" and p == f"{sweeps.t_two_sided_p(2.0, int(df)):.2f}"
    for effect, seeds in page_table("## How many seeds"):
        assert int(seeds) == sweeps.seeds_needed(float(effect))


# --- issue 22's closing audit: the sweeps findings that had no test of their own ------------------------------


@pytest.mark.hostile
def test_metrics_and_values_of_plus_minus_1e308_are_compared_without_overflow(tmp_path):
    """Issue 22 (tracebacks): `inf - inf in fsum` on the differences, OverflowError in the trend. The statistics are
    scale-free: the same t and p as the sweep divided by 1e300; a mean beyond a float is inf (null in JSON)."""
    rows = [("1e-3", 0, "1e308"), ("1e-3", 1, "-1e308"), ("1e-3", 2, "1e308"),
            ("3e-4", 0, "-1e308"), ("3e-4", 1, "1e308"), ("3e-4", 2, "-1e308")]
    small = [(lr, seed, float(metric) / 1e300) for lr, seed, metric in rows]
    big = sweeps.analyze(str(write(tmp_path, sweep_csv(rows))), "lr", "seed", "val_loss")
    ref = sweeps.analyze(str(write(tmp_path, sweep_csv(small), "small.csv")), "lr", "seed", "val_loss")
    [c], [r] = big["comparisons"], ref["comparisons"]
    assert (c["t"], c["p"]) == pytest.approx((r["t"], r["p"])) and c["mean_diff"] == pytest.approx(1e308 / 3 * -2)
    assert big["trend"]["t"] == pytest.approx(ref["trend"]["t"])
    params = sweep_csv([("1e308", 0, 1.0), ("1e308", 1, 2.0), ("-1e308", 0, 1.5), ("-1e308", 1, 2.25)])
    proc = run_cli("sweeps.py", write(tmp_path, params, "params.csv"), "--param", "lr", "--seed", "seed", "--metric",
                   "val_loss", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    json.loads(proc.stdout)  # strict JSON (json_text's null for a bound beyond a float)


@pytest.mark.hostile
def test_nested_jsonl_values_are_named_problems_not_tracebacks(tmp_path):
    """Issue 22 (tracebacks): a JSONL row whose metric, parameter or seed is an object or a list."""
    rows = [{"lr": 1e-3, "seed": 0, "val_loss": 2.1}, {"lr": 1e-3, "seed": 1, "val_loss": 2.0},
            {"lr": 1e-3, "seed": 2, "val_loss": {"mean": 2.5}}, {"lr": 3e-4, "seed": 0, "val_loss": 3.0},
            {"lr": 3e-4, "seed": 1, "val_loss": 3.2}, {"lr": 3e-4, "seed": 2, "val_loss": [3]},
            {"lr": {"x": [1]}, "seed": 2, "val_loss": 1}, {"lr": 1e-3, "seed": {"s": 3}, "val_loss": 1}]
    path = write(tmp_path, "".join(json.dumps(row) + "\n" for row in rows), "runs.jsonl")
    proc = run_cli("sweeps.py", path, "--param", "lr", "--seed", "seed", "--metric", "val_loss")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "line 3 (lr=0.001, seed=2): metric \"{'mean': 2.5}\" is not a number: left out" in proc.stdout
    assert "line 6 (lr=0.0003, seed=2): metric '[3]' is not a number: left out" in proc.stdout
