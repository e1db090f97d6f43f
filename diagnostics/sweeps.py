"""sweeps: is A really better than B? Paired-by-seed comparisons of a sweep's runs, with exact t statistics.

Symptom
    A sweep says lr=1e-3 beats lr=3e-4 by 0.02 in validation loss, on three seeds, and you are
    about to write it down as a result. Seeds alone move a run a lot: Henderson et al. found
    "statistically different distributions just from varying random seeds"
    (evidence/henderson-rl-matters.md#seeds-different-distributions), and the tuning playbook
    warns that "often the trial variance alone can produce statistically significant
    differences" (evidence/tuning-playbook.md#trial-variance).

What it checks
    Reads a CSV or JSONL of runs, one row per run: a parameter column, a seed column, a metric
    column, other columns ignored (a W&B or MLflow export works as it is). Each value of the
    parameter is compared with a baseline value, seed by seed: only seeds that both arms ran
    count, and the difference value - baseline is taken per seed, so what a seed does to both
    arms cancels out. Values and seeds that are numbers match as exact numbers (3e-4 and 0.0003
    are one value; 0, 0.0 and 00 one seed), any other text as it is written.

      statistic      paired t on the per-seed differences, n - 1 degrees of freedom; p two-sided
                     from the exact t distribution (regularized incomplete beta, standard library)
      ci95           mean difference +- t(0.975, n - 1) x sd / sqrt(n)
      seeds_needed   seeds for 80% power at p < 0.05 if the true effect were the observed one
                     (exact noncentral t, by quadrature); a planning figure: an effect measured
                     on few seeds is itself noisy
      t_crit         the |t| that p < 0.05 needs at this df: 12.7 at 1 df, 4.30 at 2, 2.78 at 4;
                     the `|t| > 2` rule of thumb holds only from 61 df (62 seeds)
      trend          numeric parameters: each seed's least-squares slope of the metric against
                     the parameter (log10 of it when the values span a decade or more), then a t
                     on those slopes across seeds; a U shape shows as a flat trend
      problems       runs with the metric missing, NaN (the run diverged or crashed), infinite,
                     or a state column saying crashed/failed/killed/running are left out of the
                     statistics and listed; so are duplicate (value, seed) rows (averaged) and
                     seeds that only one arm ran

    With one seed per arm there is no spread to compare a difference with: exit 2.

Command
    python diagnostics/sweeps.py RUNS.csv --param lr --seed seed --metric val_loss [--baseline 3e-4] [--json]
    python diagnostics/sweeps.py                       # the embedded demo: 3 seeds and a diverged run
    python diagnostics/sweeps.py --healthy             # its healthy twin: 5 seeds, nothing lost
    python diagnostics/sweeps.py --write-demo /tmp/sweep.csv   # the demo as a CSV, to see the format

Output
    $ python diagnostics/sweeps.py --write-demo /tmp/sweep.csv
    wrote /tmp/sweep.csv (12 runs)
    (exit code 0)
    $ python diagnostics/sweeps.py /tmp/sweep.csv --param lr --seed seed --metric val_loss --baseline 3e-4
    /tmp/sweep.csv: 12 runs, lr: 4 values, seeds: 3; baseline lr=3e-4
    statistic: paired t over the seeds both arms ran (n-1 df), 95% CI of the mean difference (value - baseline)
      lr        n   mean diff  95% CI                      t   df  p        t_crit  seeds for 80% power
      1e-4      3    +0.09833  [+0.08378, +0.1129]     29.07    2  0.0012     4.30  2
      1e-3      3      -0.024  [-0.04191, -0.006087]   -5.76    2  0.029      4.30  3
      3e-3      2      +0.049  [-0.09077, +0.1888]      4.45    1  0.14      12.71  -
    trend: val_loss -0.06515 per decade of lr, 95% CI [-0.1961, 0.06579], t -2.14, 2 df, p 0.17 (3 seeds)
    problems (2):
      line 13 (lr=3e-3, seed=2): metric is NaN (diverged or crashed): left out
      lr=3e-4: seed(s) 2 not run (or lost) at lr=3e-3: left out of that comparison
    |t| > 2 is not p < 0.05 here: lr=3e-3 (|t| 4.45, p 0.14)
    (exit code 0)
    $ python diagnostics/sweeps.py /tmp/sweep.csv --param lr --seed nope --metric val_loss
    error: /tmp/sweep.csv has no column 'nope' (columns: lr, seed, val_loss)
    (exit code 2)

How to read it
    A difference is worth writing down when its 95% CI excludes 0 and the sign is the one you
    claim; p is the same statement as a number. `seeds for 80% power` says how many seeds a
    rerun needs before a difference this size would show reliably; `-` when n is too small to
    estimate the spread. Every problem is a run the statistics did not see: a diverged arm that
    looks good on its surviving seeds is survivorship, not a result. The last line names the
    comparisons where the `|t| > 2` habit would have called noise a result.

Next step
    Rerun the arms that matter with the suggested number of seeds, the same seeds in every arm
    (refs/sweeps.md); investigate every diverged run before reading the others.
"""
import argparse
import csv
import decimal
import io
import json
import math
import os
import random
import statistics
import sys

from ml_debug_contract import (ArgumentParser, OutputRefused, json_text, output_file, run_command, single_line,
                               stdout_lost)

ALPHA = 0.05  # two-sided 5%: the convention the `|t| > 2` rule of thumb approximates
POWER = 0.8  # the usual planning target (Cohen); our choice, printed with the figure
MAX_SEEDS = 100_000  # seeds_needed beyond this is reported as null: no affordable rerun shows the effect
DECADE = 10.0  # numeric values spanning this ratio or more are compared on log10 (learning rates, batch sizes)
BAD_STATES = {"crashed", "failed", "killed", "running", "preempted", "error"}  # W&B and MLflow run states
STATE_COLUMNS = ("state", "State", "status", "Status")


class SweepError(Exception):
    """Input the user can fix: one line on stderr, exit code 2."""


# --- the t distribution, standard library only --------------------------------------------------


def betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz), for a, b > 0."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast below the mean; use the symmetry above it
        return 1.0 - betainc(b, a, 1.0 - x)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * result


def t_two_sided_p(t, df):
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_critical(df, alpha=ALPHA):
    """The |t| whose two-sided p is alpha (bisection on the exact p; p falls as |t| grows)."""
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > alpha:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        low, high = (mid, high) if t_two_sided_p(mid, df) > alpha else (low, mid)
    return (low + high) / 2.0


def normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def paired_power(effect, n, alpha=ALPHA):
    """Power of a two-sided paired t test with n pairs when the true mean difference is effect x sd.

    T = (Z + delta) / S with delta = effect sqrt(n) and S = sqrt(chi2_k / k), k = n - 1; the power
    P(|T| > t_crit) is integrated over the density of S by Simpson's rule (exact up to quadrature).
    """
    k, delta, crit = n - 1, abs(effect) * math.sqrt(n), t_critical(n - 1, alpha)
    lo, hi = max(0.0, 1.0 - 12.0 / math.sqrt(k)), 1.0 + 12.0 / math.sqrt(k)
    log_norm = math.log(2.0 * k) + (k / 2.0 - 1.0) * math.log(k) - (k / 2.0) * math.log(2.0) - math.lgamma(k / 2.0)
    steps = 2000

    def integrand(s):
        if s <= 0:  # the density of S at 0 is finite only for k = 1, where the rejection probability is 1
            return math.exp(log_norm) if k == 1 else 0.0
        density = math.exp(log_norm + (k - 1) * math.log(s) - k * s * s / 2.0)
        return density * (1.0 - normal_cdf(crit * s - delta) + normal_cdf(-crit * s - delta))

    width = (hi - lo) / steps
    total = integrand(lo) + integrand(hi)
    total += sum((4 if i % 2 else 2) * integrand(lo + i * width) for i in range(1, steps))
    return total * width / 3.0


def seeds_needed(effect, power=POWER, alpha=ALPHA):
    """The smallest n (>= 2) whose paired t test reaches `power` for a true effect of effect x sd; None past MAX_SEEDS."""
    if effect == 0 or not math.isfinite(effect):
        return None
    z = statistics.NormalDist()
    guess = ((z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) / abs(effect)) ** 2  # the normal approximation, a lower bound
    if guess > MAX_SEEDS:
        return None
    n = max(2, math.floor(guess))
    while n > 2 and paired_power(effect, n - 1, alpha) >= power:
        n -= 1
    while paired_power(effect, n, alpha) < power:
        n += 1
    return n


def headroom(values):
    """A power of two that brings the largest of `values` to about 2**500, or 1 when they are smaller: divided by it,
    differences, sums and squares of them stay finite (metrics of +-1e308 overflowed to a traceback), exactly."""
    big = max((abs(v) for v in values), default=0.0)
    return 2.0 ** max(0, math.frexp(big)[1] - 500) if math.isfinite(big) else 1.0


def t_summary(values, unit=1.0):
    """Mean, sd, n, t, df, p and 95% CI of the mean of `values` (in units of `unit`) against 0 (n >= 2); the effect
    size mean/sd. t, p and the effect are computed where nothing overflows; a mean, sd or bound beyond a float is inf."""
    n = len(values)
    scale = headroom(values)
    values = [v / scale for v in values]
    mean = statistics.fmean(values)
    sd = statistics.stdev(values)
    se = sd / math.sqrt(n)
    t = mean / se if se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    crit = t_critical(n - 1)
    unit *= scale
    return {"n": n, "mean": mean * unit, "sd": sd * unit, "t": t, "df": n - 1, "p": t_two_sided_p(t, n - 1),
            "ci95": [(mean - crit * se) * unit, (mean + crit * se) * unit], "t_crit": crit,
            "effect": mean / sd if sd > 0 else math.inf}


# --- reading runs --------------------------------------------------------------------------------


def read_text(path):
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise SweepError(f"{path}: not a regular file (a device or a pipe): expected a CSV or JSONL file of runs")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:  # -sig: drops a byte-order mark (Excel writes one)
            return handle.read()
    except FileNotFoundError:
        raise SweepError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SweepError(f"{path}: is a directory, expected a CSV or JSONL file of runs") from None
    except UnicodeDecodeError:
        raise SweepError(f"{path}: not UTF-8 text: expected a CSV or JSONL file of runs") from None
    except OSError as exc:
        raise SweepError(f"{path}: cannot read: {exc.strerror or exc}") from None


def parse_rows(text, path):
    """The runs as (line number, {column: text}) and the column names: CSV/TSV, or JSONL (one object a line)."""
    if not text.strip():
        raise SweepError(f"{path}: the file is empty")
    if "\x00" in text:
        raise SweepError(f"{path}: binary data: expected a CSV or JSONL file of runs")
    if text.lstrip().startswith("{"):
        rows, columns = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SweepError(f"{path}: line {number} is not JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise SweepError(f"{path}: line {number} is not a JSON object")
            columns += [key for key in record if key not in columns]
            rows.append((number, {key: "" if value is None else str(value) for key, value in record.items()}))
        return rows, columns
    dialect = csv.excel_tab if path.endswith(".tsv") or "\t" in text.splitlines()[0] else csv.excel
    limit = csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # no field is longer than the file, read already
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), dialect=dialect)  # not splitlines(): it also splits at \f, \x1c, \u2028
        rows = [(number, row) for number, row in enumerate(reader, 2)]
    except csv.Error as exc:
        raise SweepError(f"{path}: not a readable CSV: {exc}") from None
    finally:
        csv.field_size_limit(limit)
    return rows, list(reader.fieldnames or [])


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def value_key(text):
    """What the spellings of one parameter value or seed share: the exact number when the text is one (3e-4 and 0.0003,
    0, 0.0 and 00 alike; 9007199254740993 and 9007199254740992 not, though they are one float), else the text."""
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return text
    return text if value.is_nan() else value


def load_runs(text, path, param, seed, metric, baseline=None):
    """{value: {seed: metric}} of the usable runs, the value order, the baseline and the problems."""
    rows, columns = parse_rows(text, path)
    for name in (param, seed, metric):
        if name not in columns:
            raise SweepError(f"{path} has no column {name!r} (columns: {', '.join(columns)})")
    if not rows:
        raise SweepError(f"{path}: no runs, only a header")
    state_column = next((name for name in STATE_COLUMNS if name in columns), None)
    problems, spellings, seed_spellings, found = [], {}, {}, {}  # {value_key: the first spelling seen}
    for line, row in rows:
        value, seed_id, text = ((row.get(name) or "").strip() for name in (param, seed, metric))
        where = f"line {line} ({param}={value}, {seed}={seed_id})"
        if not value or not seed_id:
            problems.append({"kind": "unlabelled", "row": line, "detail": f"{where}: no {param if not value else seed}: left out"})
            continue
        value = spellings.setdefault(value_key(value), value)
        seed_id = seed_spellings.setdefault(value_key(seed_id), seed_id)
        state = (row.get(state_column) or "").strip().lower() if state_column else ""
        metric_value = number(text)
        kind, detail = None, None
        if state in BAD_STATES:
            kind, detail = "not_finished", f"run state is {state!r}"
        elif not text.strip():
            kind, detail = "missing", "metric is missing"
        elif metric_value is None:
            kind, detail = "missing", f"metric {text.strip()!r} is not a number"
        elif math.isnan(metric_value):
            kind, detail = "nan", "metric is NaN (diverged or crashed)"
        elif math.isinf(metric_value):
            kind, detail = "diverged", f"metric is {metric_value} (diverged)"
        if kind:
            problems.append({"kind": kind, "row": line, "value": value, "seed": seed_id, "detail": f"{where}: {detail}: left out"})
            continue
        found.setdefault(value, {}).setdefault(seed_id, []).append(metric_value)
    values = list(spellings.values())
    if baseline is not None:
        match = spellings.get(value_key(baseline))
        if match is None:
            raise SweepError(f"baseline {param}={baseline} is not in {path} (values: {', '.join(values)})")
        baseline = match
    elif values:
        baseline = values[0]
    if len(values) < 2:
        raise SweepError(f"{path}: {param} has {len(values)} value(s), nothing to compare")
    runs = {}
    for value in values:
        runs[value] = {}
        for seed_id, metrics in found.get(value, {}).items():
            if len(metrics) > 1:
                problems.append({"kind": "duplicate", "value": value, "seed": seed_id,
                                 "detail": f"{param}={value}, {seed}={seed_id}: {len(metrics)} runs, averaged"})
            runs[value][seed_id] = statistics.fmean(metrics)
    return runs, values, baseline, problems, len(rows)


# --- the analysis --------------------------------------------------------------------------------


def trend(runs, values):
    """Per-seed least-squares slopes of the metric on the (log10) parameter, t-tested across seeds; None if not numeric."""
    xs = {value: number(value) for value in values}
    if any(x is None or not math.isfinite(x) for x in xs.values()):
        return None
    log_scale = all(x > 0 for x in xs.values()) and max(xs.values()) / min(xs.values()) >= DECADE
    if log_scale:
        xs = {value: math.log10(x) for value, x in xs.items()}
    x_scale = headroom(xs.values())
    y_scale = headroom([y for per_seed in runs.values() for y in per_seed.values()])
    slopes = []  # in units of y_scale / x_scale: the sums below stay finite whatever the numbers
    for seed_id in sorted({s for per_seed in runs.values() for s in per_seed}):
        points = [(xs[value] / x_scale, runs[value][seed_id] / y_scale) for value in values if seed_id in runs[value]]
        if len({x for x, _ in points}) >= 2:
            mean_x = statistics.fmean(x for x, _ in points)
            mean_y = statistics.fmean(y for _, y in points)
            slopes.append(sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points))
    if len(slopes) < 2:
        return None
    summary = t_summary(slopes, unit=y_scale / x_scale)
    return {"x": "log10" if log_scale else "linear", "slope": summary["mean"], "ci95": summary["ci95"],
            "t": summary["t"], "df": summary["df"], "p": summary["p"], "n_seeds": summary["n"]}


def analyze(path, param, seed, metric, baseline=None, text=None):
    """The whole analysis as a dict (the --json output); `text` stands in for the file's contents when given."""
    text = read_text(path) if text is None else text
    runs, values, baseline, problems, n_rows = load_runs(text, path, param, seed, metric, baseline)
    comparisons = []
    for value in values:
        if value == baseline:
            continue
        shared = sorted(set(runs[value]) & set(runs[baseline]))
        for arm, other in ((value, baseline), (baseline, value)):
            alone = sorted(set(runs[arm]) - set(runs[other]))
            if alone:
                problems.append({"kind": "unpaired", "value": arm, "detail": f"{param}={arm}: seed(s) {', '.join(alone)} "
                                 f"not run (or lost) at {param}={other}: left out of that comparison"})
        if len(shared) < 2:
            problems.append({"kind": "too_few_seeds", "value": value, "detail": f"{param}={value}: {len(shared)} seed(s) "
                             f"shared with the baseline, a paired t needs 2 or more: not compared"})
            continue
        summary = t_summary([runs[value][s] / 2 - runs[baseline][s] / 2 for s in shared], unit=2.0)  # halves: finite
        effect = summary["effect"]
        comparisons.append({"value": value, "baseline": baseline, "n_pairs": summary["n"], "mean_diff": summary["mean"],
                            "ci95": summary["ci95"], "t": summary["t"], "df": summary["df"], "p": summary["p"],
                            "t_crit": summary["t_crit"], "sd_diff": summary["sd"],
                            "seeds_needed": seeds_needed(effect) if summary["n"] >= 3 else None})
    if not comparisons:
        most = max(len(per_seed) for per_seed in runs.values())
        raise SweepError(f"{path}: {most} usable seed(s) per arm at most, so there is no seed-to-seed spread to test a "
                         f"difference against: run every arm with the same 2 or more seeds (5 or more for a useful interval)")
    seen = set()
    problems = [p for p in problems if not (p["detail"] in seen or seen.add(p["detail"]))]
    return {"runs": path, "n_rows": n_rows, "param": param, "seed": seed, "metric": metric, "baseline": baseline,
            "values": values, "n_seeds": len({s for per_seed in runs.values() for s in per_seed}),
            "statistic": "paired t over shared seeds, n-1 df, two-sided, exact t distribution",
            "comparisons": comparisons, "trend": trend(runs, values), "problems": problems}


def fmt(x, sign=False):
    return f"{x:+.4g}" if sign else f"{x:.4g}"


def report_text(result):
    param = result["param"]
    lines = [f"{result['runs']}: {result['n_rows']} runs, {param}: {len(result['values'])} values, seeds: "
             f"{result['n_seeds']}; baseline {param}={result['baseline']}",
             "statistic: paired t over the seeds both arms ran (n-1 df), 95% CI of the mean difference (value - baseline)",
             f"  {param:<8} {'n':>2}  {'mean diff':>10}  {'95% CI':<22} {'t':>6} {'df':>4}  {'p':<8} {'t_crit':>6}  seeds for 80% power"]
    for c in result["comparisons"]:
        ci = f"[{fmt(c['ci95'][0], True)}, {fmt(c['ci95'][1], True)}]"
        lines.append(f"  {c['value']:<8} {c['n_pairs']:>2}  {fmt(c['mean_diff'], True):>10}  {ci:<22} {c['t']:>6.2f} "
                     f"{c['df']:>4}  {c['p']:<8.2g} {c['t_crit']:>6.2f}  {c['seeds_needed'] or '-'}")
    tr = result["trend"]
    if tr:
        unit = f"per decade of {param}" if tr["x"] == "log10" else f"per unit of {param}"
        lines.append(f"trend: {result['metric']} {fmt(tr['slope'], True)} {unit}, 95% CI [{fmt(tr['ci95'][0])}, "
                     f"{fmt(tr['ci95'][1])}], t {tr['t']:.2f}, {tr['df']} df, p {tr['p']:.2g} ({tr['n_seeds']} seeds)")
    if result["problems"]:
        lines.append(f"problems ({len(result['problems'])}):")
        lines += [f"  {p['detail']}" for p in result["problems"]]
    misled = [c for c in result["comparisons"] if abs(c["t"]) > 2 and c["p"] >= ALPHA]
    if misled:
        lines.append("|t| > 2 is not p < 0.05 here: " + ", ".join(
            f"{param}={c['value']} (|t| {abs(c['t']):.2f}, p {c['p']:.2g})" for c in misled))
    return "\n".join(lines)


# --- the embedded demo ---------------------------------------------------------------------------


def demo_rows(broken=True):
    """A learning-rate sweep's val_loss: a per-seed offset shared by every arm, plus a little run noise."""
    rng = random.Random(0)
    true_loss = {"1e-4": 3.30, "3e-4": 3.20, "1e-3": 3.18, "3e-3": 3.24}
    seeds = range(5) if not broken else range(3)  # BUG: three seeds: 2 df, where |t| must pass 4.30, not 2
    rows = []
    for value, loss in true_loss.items():
        for seed in seeds:
            rows.append({"lr": value, "seed": seed, "val_loss": round(loss + 0.05 * seed + rng.gauss(0, 0.01), 3)})
    if broken:
        rows[-1]["val_loss"] = "nan"  # BUG: the last run diverged; its arm is judged on the survivors
    return rows


def demo_csv(broken=True):
    rows = demo_rows(broken)
    return "lr,seed,val_loss\n" + "".join(f"{row['lr']},{row['seed']},{row['val_loss']}\n" for row in rows)


def write_demo(path, broken):
    """Write the demo's CSV to a new file (never over an existing one); returns the number of runs."""
    try:
        output_file(path, option="--write-demo")
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(demo_csv(broken))
    except OutputRefused as exc:
        raise SweepError(str(exc)) from None
    except OSError as exc:  # also a file made since output_file looked: "x" never replaces it
        raise SweepError(f"cannot write {path}: {exc.strerror or exc}") from None
    return len(demo_rows(broken))


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", help="CSV/TSV or JSONL of runs, one row per run; without it, the embedded demo")
    parser.add_argument("--param", help="the column of the parameter being compared (e.g. lr)")
    parser.add_argument("--seed", help="the column holding each run's seed")
    parser.add_argument("--metric", help="the column of the metric to compare (e.g. val_loss)")
    parser.add_argument("--baseline", help="the parameter value the others are compared with (default: the first in the file)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--healthy", action="store_true", help="with no RUNS: the embedded demo's healthy twin")
    parser.add_argument("--write-demo", metavar="PATH", help="write the embedded demo (or --healthy twin) as a CSV and stop")
    args = parser.parse_args(argv)
    try:
        if args.write_demo:
            count = write_demo(args.write_demo, broken=not args.healthy)
            print(f"wrote {args.write_demo} ({count} runs)")
            return 0
        if args.runs is None:
            result = analyze("<demo>", "lr", "seed", "val_loss", "3e-4", text=demo_csv(broken=not args.healthy))
        else:
            missing = [flag for flag in ("param", "seed", "metric") if getattr(args, flag) is None]
            if missing:
                raise SweepError(f"missing {', '.join('--' + flag for flag in missing)}: say which columns hold what")
            result = analyze(args.runs, args.param, args.seed, args.metric, args.baseline)
    except SweepError as exc:
        print(f"error: {single_line(exc)}", file=sys.stderr)
        return 2
    try:
        print(json_text(result) if args.json else report_text(result))
        sys.stdout.flush()
    except OSError as exc:  # `sweeps.py runs.csv | head`: the reader left, which is fine; `> /dev/full`: exit 1
        return stdout_lost(exc, 0)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
