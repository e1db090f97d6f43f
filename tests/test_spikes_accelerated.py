"""spikes.py's accelerated path (pandas reads a big CSV, numpy screens its healthy stretches; a big JSONL log's
numbers go to numpy too) gives the same report as the pure-Python path, and really takes the bulk of a healthy log."""
import json
import math
import random
import warnings

import pytest

import synthetic_curves
from conftest import ROOT
from spikelog.detect import analyze, screen
from spikelog.detect.series import Series
from spikelog.detect.thresholds import SPIKE_Z
from spikelog.read import jsonl, open_log, table

np = pytest.importorskip("numpy")
pytest.importorskip("pandas")

SMALL_BLOCK = 8 << 10  # bytes: ~250 rows per pandas block, so chunk edges fall inside spikes and refreshes


def both_ways(path, monkeypatch, block=None, **options):
    """The report read without and with the accelerator, as the JSON text --json prints: compared as text, a step read
    as 10.0 differs from 10 (as Python values they are equal)."""
    if block:
        monkeypatch.setattr(table, "ACCELERATED_BLOCK_BYTES", block)
    return tuple(json.dumps(analyze(path, accelerate=fast, **options).to_json()) for fast in (False, True))


def numpy_chunks(path):
    """How many chunks of the log the accelerated reader gave as numpy columns, and how many in all."""
    chunks = list(open_log(path, accelerate=True)[2])
    return sum(not isinstance(chunk[1], list) for chunk in chunks), len(chunks)


@pytest.mark.parametrize("block", [None, SMALL_BLOCK])
@pytest.mark.parametrize("scenario", synthetic_curves.SCENARIOS)
def test_every_synthetic_scenario_gives_the_same_report(tmp_path, monkeypatch, scenario, block):
    path = tmp_path / f"{scenario}.csv"
    synthetic_curves.make_curve(scenario, seed=1).write_csv(path)
    pure, fast = both_ways(path, monkeypatch, block)
    assert fast == pure
    assert numpy_chunks(path)[0] > 0  # the accelerated path was really taken


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "tests" / "data" / "logs").glob("*.csv")))
def test_every_csv_of_the_real_format_corpus_gives_the_same_report(monkeypatch, name):
    pure, fast = both_ways(ROOT / "tests" / "data" / "logs" / name, monkeypatch, SMALL_BLOCK)
    assert fast == pure


def test_cells_pandas_would_read_otherwise_send_their_block_to_python(tmp_path, monkeypatch):
    rng = random.Random(0)
    odd = ["", "NA", "null", "None", "nan", "NaN", " -nan", "+nan", "1_0", "0x10", "inf", "-Infinity", '"2.5"',
           " 3.25 ", "True", "1e400", "-0"]
    lines = ["step,loss,grad_norm,lr"]
    for step in range(6000):
        loss, grad = 3.0 + 0.05 * rng.gauss(0, 1), 0.4 + 0.02 * rng.gauss(0, 1)
        cells = [str(step), f"{loss:.6f}", f"{grad:.6f}", "0.001"]
        if step % 97 == 50:
            cells[rng.randrange(1, 4)] = rng.choice(odd)
        if step == 2000:
            cells[0] = "2000.0"  # a float step
        if step == 3000:
            cells = cells[:2]  # a ragged row
        if step == 3500:
            cells.append("9")  # one cell too many
        if step == 4000:
            lines.append("")  # a blank line
        lines.append(",".join(cells))
    path = tmp_path / "odd.csv"
    path.write_text("\r\n".join(lines) + "\r\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas says nothing on stderr (a DtypeWarning on mixed cells)
        pure, fast = both_ways(path, monkeypatch, SMALL_BLOCK)
    assert fast == pure
    assert any(event["kind"] == "unparsed" for event in json.loads(pure)["events"])
    numpy_count, total = numpy_chunks(path)
    assert 0 < numpy_count < total  # some blocks went to pandas, the odd ones to Python


def test_huge_steps_and_a_quoted_header_read_the_same(tmp_path, monkeypatch):
    rows = ['"step","loss"'] + [f"{10 ** 20 + k},{3 + 0.01 * (k % 7)}" for k in range(500)]
    path = tmp_path / "huge.csv"
    path.write_text("\n".join(rows))
    pure, fast = both_ways(path, monkeypatch, SMALL_BLOCK)
    assert fast == pure and json.loads(pure)["log"]["first_step"] == 10 ** 20


def curve(kind, count, seed=0):
    """A healthy loss: a power-law fall like a real run's, or one that falls fast from 5 to near zero (where the
    absolute floor, in units of the run's highest baseline, decides the threshold)."""
    rng = random.Random(seed)
    if kind == "power_law":
        return [2.0 + 3.0 * (1 + k / 300) ** -0.5 + 0.02 * rng.gauss(0, 1) for k in range(count)]
    if kind == "heavy_tail":  # a fine-tune's batch loss: log-normal around a fast-falling median (its logs spread by 0.8)
        return [(0.004 + 5.0 * math.exp(-k / 150)) * math.exp(0.8 * rng.gauss(0, 1)) for k in range(count)]
    if kind == "noisy":  # a detection batch loss: 8% noise a row, where a level shift can stay under the threshold
        return [(1 + 2 * (1 + k / 500) ** -0.5) * (1 + 0.08 * rng.gauss(0, 1)) for k in range(count)]
    if kind == "flat":  # a flat batch loss, log-normal 15% a row
        return [math.exp(0.15 * rng.gauss(0, 1)) for k in range(count)]
    return [0.004 + 5.0 * math.exp(-k / 150) + 0.0002 * rng.gauss(0, 1) for k in range(count)]


def state(series):
    return (list(series.window), series.med, series.sigma, series.slope, series.threshold, series.scale,
            list(series.blocks), series.falling, series.refreshes, series.until_refresh, series.last_step,
            series.episode is None, series.shift_limit, series.shift_base, series.period, list(series.at),
            series.block_limit, series.block_latest, list(series.window_limits))


@pytest.mark.parametrize("kind", ["power_law", "near_zero", "heavy_tail", "noisy", "flat"])
@pytest.mark.parametrize("spike_at", [None, 5003])
def test_the_screen_leaves_a_series_exactly_as_feeding_it_in_python(kind, spike_at):
    values = curve(kind, 12000)
    if spike_at and kind in ("noisy", "flat"):  # a lasting offset, 3 sigma (1.25x): a level shift no row
        factor = 1.25 if kind == "noisy" else 1.16  # shows; 1.1 sigma (1.16x): one that only the window's median shows
        values[spike_at:] = [x * factor for x in values[spike_at:]]
    elif spike_at:
        values[spike_at] += 5.0 if kind == "heavy_tail" else 0.5  # beyond a log-normal tail: 1000x its median
    steps = list(range(10, 10 + 10 * len(values), 10))
    calls = {"python": [], "numpy": []}
    python = Series("loss", on_block=lambda *a: calls["python"].append(a + (python.falling,)))
    fast = Series("loss", on_block=lambda *a: calls["numpy"].append(a + (fast.falling,)))
    for i in range(64):  # the window fills; from here on the screen may take over
        python.feed(steps[i], i, values[i])
        fast.feed(steps[i], i, values[i])
    stop_python = python.feed_run(steps, values, 0, 64, len(values), strict=True)
    stop_numpy, screened = 64, 0
    while stop_numpy < len(values):  # as analyze does: the screen, and Python for a while where it stops
        reached = screen.advance(fast, np.array(steps), np.array(values), 0, stop_numpy, len(values))
        screened += reached - stop_numpy
        if reached == stop_numpy:
            reached = fast.feed_run(steps, values, 0, stop_numpy, min(len(values), stop_numpy + 64), strict=True)
            if reached == stop_numpy:
                break
        stop_numpy = reached
    assert stop_numpy == stop_python and state(fast) == state(python)
    assert screened > stop_python / 2  # the screen really took the healthy stretches
    for i in range(stop_python, min(len(values), stop_python + 40)):  # the spike, value by value
        python.feed(steps[i], i, values[i])
        fast.feed(steps[i], i, values[i])
    if spike_at:  # the spike opened where it was planted (a shift: within a row or two, by its noise; one the window
        # median shows: within a block or two), in both
        near = {"noisy": steps[spike_at - 2:spike_at + 3], "flat": steps[spike_at - 32:spike_at + 65]}.get(
            kind, [steps[spike_at]])
        assert python.episode is not None and python.episode.start in near
    assert state(fast) == state(python)
    assert calls["numpy"] == calls["python"] and len(calls["python"]) > 100
    if kind == "heavy_tail":  # the log-normal tail widened the threshold (series.tail_distance), in both
        assert python.threshold - python.med > 2 * SPIKE_Z * python.sigma
    elif kind in ("noisy", "flat"):  # no fast fall: the screen took the healthy stretches up to the shift
        assert stop_python > (spike_at or len(values)) - 2 * 64
    else:
        assert any(falling for *_, falling in calls["python"])  # the fast fall was met, and handed over


def test_the_screen_takes_the_bulk_of_a_healthy_log(tmp_path, monkeypatch):
    path = tmp_path / "clean.csv"
    synthetic_curves.make_curve("clean", seed=2, rows=40000).write_csv(path)
    refreshes = []
    original = Series._refresh
    monkeypatch.setattr(Series, "_refresh", lambda self, *a: (refreshes.append(self.name), original(self, *a))[1])
    analyze(path, accelerate=True)
    in_python = len(refreshes)
    refreshes.clear()
    analyze(path, accelerate=False)
    assert len(refreshes) > 2400  # loss and grad norm: a refresh every 32 values each
    assert in_python < len(refreshes) / 10


@pytest.mark.parametrize("scenario", ["clean", "creep"])
def test_a_big_csv_without_a_step_column_is_stepped_by_its_rows_the_same_way(tmp_path, monkeypatch, scenario):
    """No step column: the rows are the steps (a range, not a numpy column) on both paths, the creep watch's blocks
    too; the numpy screen still takes the bulk."""
    stepped, path = tmp_path / "stepped.csv", tmp_path / "rows.csv"
    synthetic_curves.make_curve(scenario, seed=3, rows=20000).write_csv(stepped)
    path.write_text("".join(line.split(",", 1)[1] for line in stepped.read_text().splitlines(keepends=True)))
    pure, fast = both_ways(path, monkeypatch)
    assert fast == pure
    report = json.loads(pure)
    assert (report["log"]["first_step"], report["log"]["last_step"]) == (0, 19999)
    assert [e["kind"] for e in report["events"]] == ([] if scenario == "clean" else ["non_spike_divergence"])
    assert numpy_chunks(path)[0] > 0


def test_the_accelerator_is_used_for_big_files_only_and_never_without_pandas(tmp_path, monkeypatch):
    path = tmp_path / "small.csv"
    synthetic_curves.make_curve("clean", seed=0, rows=2000).write_csv(path)
    assert table.accelerator(path) is None  # small: importing pandas would cost more than it saves
    assert table.accelerator(path, True) is not None
    monkeypatch.setattr(table, "ACCELERATE_BYTES", 0)
    assert table.accelerator(path) is not None
    assert table.accelerator(path, False) is None
    monkeypatch.setattr(table.importlib.util, "find_spec", lambda name: None)
    assert table.accelerator(path) is None and table.accelerator(path, True) is None
    assert analyze(path).to_json()["log"]["values"] == 2000


def write_jsonl(path, curve):
    path.write_text("".join(json.dumps({c: r[c] for c in curve.columns}) + "\n" for r in curve.rows()))
    return path


@pytest.mark.parametrize("block", [None, SMALL_BLOCK])
@pytest.mark.parametrize("scenario", synthetic_curves.SCENARIOS)
def test_every_synthetic_scenario_as_jsonl_gives_the_same_report(tmp_path, monkeypatch, scenario, block):
    """A big JSONL log's numbers go on as numpy columns (numpy installed) to the report of the pure-Python road;
    SMALL_BLOCK puts chunk edges inside spikes and refreshes."""
    path = write_jsonl(tmp_path / f"{scenario}.jsonl", synthetic_curves.make_curve(scenario, seed=1))
    if block:
        monkeypatch.setattr(jsonl, "BLOCK_BYTES", block)
    assert analyze(path, accelerate=True).to_json() == analyze(path, accelerate=False).to_json()
    assert numpy_chunks(path)[0] > 0  # the numpy road was really taken


def test_jsonl_steps_past_int64_stay_python_ints(tmp_path):
    rows = [{"step": 10**30 + k, "loss": 3.0 + 0.01 * (k % 7)} for k in range(300)]
    rows[200]["loss"] = 9.0
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert numpy_chunks(path)[0] == 0
    report = analyze(path, accelerate=True).to_json()
    assert report == analyze(path, accelerate=False).to_json()
    assert [s["step"] for s in report["spikes"]] == [10**30 + 200]


def test_a_big_jsonl_log_takes_numpy_where_it_is_installed(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "small.jsonl", synthetic_curves.make_curve("clean", seed=0, rows=2000))
    assert numpy_chunks(path)[0] > 0 and table.accelerator(path, None, "numpy") is None  # small: no numpy
    monkeypatch.setattr(table, "ACCELERATE_BYTES", 0)
    assert not isinstance(next(open_log(path)[2])[1], list)
    monkeypatch.setattr(table.importlib.util, "find_spec", lambda name: None)
    assert isinstance(next(open_log(path, accelerate=True)[2])[1], list)
