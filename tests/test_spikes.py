"""spikes.py: scored against synthetic curves with known spikes, run on a real log, fed every format and
every kind of bad input."""
import json
import math
import os
import random
import subprocess
import sys
import tracemalloc
import types

import pytest

import spikes
from spikelog.detect import _increasing
from spikelog.detect.events import Creep, ResumeWatch
from spikelog.detect.series import Episode, Series, tail_distance
from spikelog.detect.thresholds import CREEP_ABS, CREEP_REL, CREEP_Z, MEDIAN_SE, REFRESH
from spikelog.read import general, open_log, table
from spikelog.read.columns import Unparsed, epoch_steps, repeated_rows
from spikelog.report import spike_height
import synthetic_curves
from conftest import ROOT, assert_one_line_error, run_cli

MIXED_SEEDS = range(12)  # 12 curves, about 180 planted spikes of all four types
TOLERANCE = synthetic_curves.MATCH_STEPS  # steps: "spike positions within a few steps"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def synthetic(tmp_path, scenario, seed, rows=None):
    curve = synthetic_curves.make_curve(scenario, seed, rows)
    path = tmp_path / f"{scenario}-{seed}.csv"
    curve.write_csv(path)
    return curve, path


@pytest.fixture(scope="module")
def mixed_scores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed")
    planted = found = 0
    pairs, kinds = [], set()
    for seed in MIXED_SEEDS:
        curve, path = synthetic(tmp, "mixed", seed)
        report = spikes.analyze(path)
        planted += len(curve.truth["spikes"])
        found += len(report.spikes)
        pairs += synthetic_curves.match(report.spikes, curve.truth["spikes"])
        kinds |= {e["kind"] for e in report.to_json()["events"]}
    return planted, found, pairs, kinds


def test_synthetic_spikes_are_found_with_high_precision_and_recall(mixed_scores):
    planted, found, pairs, kinds = mixed_scores
    assert planted > 150
    precision, recall = len(pairs) / found, len(pairs) / planted
    assert precision >= 0.95 and recall >= 0.95, (precision, recall)
    assert kinds == {"resume", "nonfinite"}  # rollbacks and NaN were planted; nothing else was


def test_synthetic_spike_types_are_right_at_least_9_in_10(mixed_scores):
    _, _, pairs, _ = mixed_scores
    right = sum(truth["type"] == spike.type for truth, spike in pairs)
    assert right / len(pairs) >= 0.9, [(t, s.to_json()) for t, s in pairs if t["type"] != s.type]
    for kind in spikes.TYPES:  # and no type is sacrificed to the others
        planted = [s for t, s in pairs if t["type"] == kind]
        assert len(planted) >= 10 and sum(s.type == kind for s in planted) / len(planted) >= 0.85, kind


def test_synthetic_peaks_are_within_a_few_steps(mixed_scores):
    _, _, pairs, _ = mixed_scores
    settled = [(t, s) for t, s in pairs if t["type"] != "divergence"]  # a divergence keeps rising: no one peak
    close = sum(abs(s.step - t["step"]) <= TOLERANCE for t, s in settled)
    assert close / len(settled) >= 0.95


def test_grad_norm_lead_is_measured(mixed_scores):
    _, _, pairs, _ = mixed_scores
    # the planted loss spike rises over up to 2 rows, so the measured lead may exceed the planted one by 2
    right = sum(s.grad_norm_lead is not None and 0 <= s.grad_norm_lead - t["grad_norm_lead"] <= 2 for t, s in pairs)
    assert right / len(pairs) >= 0.9


@pytest.mark.parametrize("seed", range(5))
def test_clean_noisy_curve_has_no_spike_and_no_event(tmp_path, seed):
    _, path = synthetic(tmp_path, "clean", seed)
    report = spikes.analyze(path)
    assert report.spikes == [] and report.to_json()["events"] == [] and report.nan_step is None


def test_outliers_do_not_poison_the_baseline(tmp_path):
    """A burst of 80 one-step spikes, 3 steps apart: with spike values kept out of the window, all are found."""
    lines = ["step,loss"]
    burst = set(range(600, 840, 3))
    for step in range(1200):
        loss = 3.0 * (1 + 0.01 * math.sin(step * 1.7))  # deterministic wiggle, no spike
        lines.append(f"{step},{loss * (1.6 if step in burst else 1.0):.5f}")
    report = spikes.analyze(write(tmp_path, "burst.csv", "\n".join(lines) + "\n"))
    assert sorted(s.step for s in report.spikes) == sorted(burst)
    assert {s.type for s in report.spikes} == {"fast_recovery"}


def test_a_log_that_ends_at_the_peak_or_on_the_way_down(tmp_path):
    flat = [f"{i},3.0" for i in range(100)]
    at_peak = spikes.analyze(write(tmp_path, "peak.csv", "step,loss\n" + "\n".join(flat + ["100,6.0"]))).spikes
    assert [(s.type, s.end, s.ended_by) for s in at_peak] == [("divergence", None, "log_end")]
    descending = flat + [f"{100 + i},{3.0 + 3.0 * 0.95 ** i:.4f}" for i in range(40)]
    on_way = spikes.analyze(write(tmp_path, "down.csv", "step,loss\n" + "\n".join(descending))).spikes
    assert [(s.type, s.ended_by) for s in on_way] == [("no_recovery", "log_end")]  # 13% up when the log ends


def test_a_lone_low_value_does_not_end_a_slow_recovery(tmp_path):
    """Real logs have heavy tails: one value back at the baseline mid-recovery is not the recovery."""
    lines = [f"{i},{3.0 + 0.01 * math.sin(i * 1.7):.4f}" for i in range(200)]
    for i in range(300):
        loss = 3.0 + 3.0 * math.exp(-i / 60)  # back within 1% after about 330 steps
        lines.append(f"{200 + i},{3.0 if i % 25 == 24 else loss:.4f}")  # every 25th value dips to the baseline
    lines += [f"{500 + i},3.0" for i in range(200)]
    found = spikes.analyze(write(tmp_path, "dips.csv", "step,loss\n" + "\n".join(lines))).spikes
    assert [(s.step, s.type) for s in found] == [(200, "slow_recovery")]
    assert found[0].recovery_steps > 200


@pytest.mark.parametrize("seed", range(3))
def test_divergence_without_a_spike(tmp_path, seed):
    curve, path = synthetic(tmp_path, "creep", seed)
    report = spikes.analyze(path)
    events = report.to_json()["events"]
    assert report.spikes == []
    assert [e["kind"] for e in events] == ["non_spike_divergence"]
    assert abs(events[0]["step"] - curve.truth["events"][0]["step"]) <= 150  # the rise starts gently
    assert events[0]["to"] > 1.2 * events[0]["from"]


@pytest.mark.parametrize("seed", range(3))
def test_nan_after_a_diverging_spike(tmp_path, seed):
    curve, path = synthetic(tmp_path, "nan", seed)
    out = spikes.analyze(path).to_json()
    assert out["nan_step"] == curve.truth["nan_step"]
    assert out["spikes"][-1]["type"] == "divergence" and out["spikes"][-1]["ended_by"] == "nonfinite"
    nonfinite = [e for e in out["events"] if e["kind"] == "nonfinite"]
    assert nonfinite[0]["step"] == out["nan_step"] and nonfinite[0]["series"] == "loss"


@pytest.mark.parametrize("seed", range(3))
def test_resumes_and_the_spikes_right_after_them(tmp_path, seed):
    curve, path = synthetic(tmp_path, "resume", seed)
    events = spikes.analyze(path).to_json()["events"]
    resumes = [(e["step"], e["from_step"]) for e in events if e["kind"] == "resume"]
    assert resumes == [(e["step"], e["from_step"]) for e in curve.truth["events"] if e["kind"] == "resume"]
    found = [(e["resume_step"], e["step"]) for e in events if e["kind"] == "resume_spike"]
    planted = [(e["resume_step"], e["step"]) for e in curve.truth["events"] if e["kind"] == "resume_spike"]
    assert len(found) == len(planted)
    assert all(r == pr and abs(s - ps) <= TOLERANCE for (r, s), (pr, ps) in zip(found, planted))


@pytest.mark.parametrize("seed", range(4))
def test_lower_loss_after_a_resume_then_a_jump_back_is_repeated_data(tmp_path, seed):
    curve, path = synthetic(tmp_path, "repeat_data", seed)
    events = {e["kind"]: e for e in spikes.analyze(path).to_json()["events"]}
    planted = {e["kind"]: e for e in curve.truth["events"]}
    assert events["resume_drop"]["step"] == planted["resume_drop"]["step"]
    assert events["resume_drop"]["drop_pct"] > 3
    assert abs(events["repeat_data"]["step"] - planted["repeat_data"]["step"]) <= TOLERANCE
    assert events["repeat_data"]["resume_step"] == planted["repeat_data"]["resume_step"]


@pytest.mark.parametrize("seed", range(4))
def test_the_jump_back_after_repeated_data_is_no_spike(tmp_path, seed):
    """Bekman's repeat-data puzzle: the loss never went up, it was under-reported while the data repeated."""
    _, path = synthetic(tmp_path, "repeat_data", seed)
    pm = tmp_path / "pm.md"
    proc = run_cli("spikes.py", path, "--json", "--postmortem", pm)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["spikes"] == []
    jump = next(e for e in out["events"] if e["kind"] == "repeat_data")
    assert jump["spike"] is False and abs(jump["high"] / jump["expected"] - 1) < 0.02  # back to the trend
    text = pm.read_text()
    assert "## Spike #" not in text and "## Repeated data after a resume (1)" in text
    assert f"at step {jump['step']}" in text and "not a spike" in text


def repeat_data_with_spike(tmp_path, excess):
    """The repeat_data curve of seed 1 with `excess(steps since the jump)` added on top from the jump on."""
    curve = synthetic_curves.make_curve("repeat_data", 1)
    jump = next(e for e in curve.truth["events"] if e["kind"] == "repeat_data")["step"]
    rows = list(curve.rows())
    resumed = next(i for i in range(1, len(rows)) if rows[i]["step"] <= rows[i - 1]["step"])
    lines = ["step,loss"]
    for i, r in enumerate(rows):
        d = r["step"] - jump
        lines.append(f"{r['step']},{r['loss'] * (1 + excess(d) if i >= resumed and d >= 0 else 1):.6g}")
    return jump, spikes.analyze(write(tmp_path, "spiked.csv", "\n".join(lines) + "\n"))


@pytest.mark.parametrize("kind, excess", [
    ("no_recovery", lambda d: 0.2 + 0.4 * math.exp(-d / 5)),  # settles 20% above the pre-resume trend
    ("fast_recovery", lambda d: 0.5 * math.exp(-d / 1.5)),  # back on the trend within a few steps
])
def test_a_real_spike_where_repeated_data_ends_is_still_a_spike(tmp_path, kind, excess):
    jump, report = repeat_data_with_spike(tmp_path, excess)
    event = next(e for e in report.to_json()["events"] if e["kind"] == "repeat_data")
    assert [(s.type, s.start) for s in report.spikes] == [(kind, jump)] and event["spike"] is True
    assert report.spikes[0].baseline == pytest.approx(event["expected"])  # measured from the true level,
    assert report.spikes[0].baseline == pytest.approx(synthetic_curves.trend(jump), rel=0.02)  # not the repeat's


def test_a_plain_rollback_is_not_taken_for_repeated_data(tmp_path):
    curve, path = synthetic(tmp_path, "mixed", 3)  # five rollbacks to before a spike, no repeated data
    kinds = [e["kind"] for e in spikes.analyze(path).to_json()["events"]]
    assert kinds.count("resume") >= 3
    assert "resume_drop" not in kinds and "repeat_data" not in kinds


@pytest.mark.parametrize("seed", range(2))
def test_spikes_shared_by_datasets_or_confined_to_one(tmp_path, seed):
    curve, path = synthetic(tmp_path, "datasets", seed)
    report = spikes.analyze(path)
    assert report.columns.extras == ["loss/cm4", "loss/pmd"]
    found = [(e["step"], e["scope"], e["series"]) for e in report.to_json()["events"] if e["kind"] == "series_spike"]
    planted = [(e["step"], e["scope"], e["series"]) for e in curve.truth["events"]]
    assert len(found) == len(planted)
    for (step, scope, series), (p_step, p_scope, p_series) in zip(found, planted):
        assert abs(step - p_step) <= TOLERANCE and scope == p_scope and series == p_series


def test_a_spike_in_one_dataset_is_confined_to_it_among_the_datasets_with_a_baseline(tmp_path):
    """loss/a spikes at row 300 with the loss, loss/b stays flat: confined to loss/a, loss/b quiet. loss/c has a value
    every 50 rows only (6 in all), no baseline: it is no dataset the spike could have been in."""
    rows = ["step,loss,loss/a,loss/b,loss/c"]
    for s in range(600):
        wobble = 0.01 * ((s * 7) % 5 - 2)
        jump = 3.0 if s == 300 else 1.0
        rows.append(f"{s},{(2.0 + wobble) * jump},{(1.0 + wobble) * jump},{1.5 + wobble},{'1.2' if s % 100 == 0 else ''}")
    report = spikes.analyze(write(tmp_path, "datasets.csv", "\n".join(rows) + "\n"))
    assert report.columns.extras == ["loss/a", "loss/b", "loss/c"]
    shared = [(e["step"], e["scope"], e["series"], e["quiet"]) for e in report.to_json()["events"]
              if e["kind"] == "series_spike"]
    assert shared == [(300, "confined", ["loss/a"], ["loss/b"])]


# --- the real log --------------------------------------------------------------------------------


def test_real_modded_nanogpt_log_has_recurring_one_step_spikes_that_recover_fast(shared_dir):
    log = shared_dir / "data" / "modded-nanogpt" / "scaleup1b_ad8d7ae5.csv"
    proc = run_cli("spikes.py", log, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["log"]["loss_column"] == "train_loss" and out["log"]["values"] > 20000
    found = {s["step"]: s for s in out["spikes"]}
    assert 536 in found and found[536]["recovery_steps"] <= 2
    assert len(out["spikes"]) >= 50  # many, all through the run
    assert {s["type"] for s in out["spikes"]} == {"fast_recovery"}
    assert sum(s["recovery_steps"] <= 2 for s in out["spikes"]) / len(out["spikes"]) >= 0.9
    assert out["nan_step"] is None and out["events"] == []


# --- readers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_curve():
    """A 3000-step mixed curve: two fast spikes, the first with a grad-norm spike 3 steps ahead."""
    curve = synthetic_curves.make_curve("mixed", seed=1, rows=3000)
    return curve, list(curve.rows())


def spike_summary(report):
    return [(s.step, s.type, s.grad_norm_lead) for s in report.spikes]


@pytest.fixture(scope="module")
def csv_result(small_curve, tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "run.csv"
    small_curve[0].write_csv(path)
    report = spikes.analyze(path)
    assert len(report.spikes) == 2 and report.spikes[0].grad_norm_lead == 3
    return spike_summary(report)


def test_jsonl_reads_like_csv(small_curve, csv_result, tmp_path):
    lines = [json.dumps(r) for r in small_curve[1]]
    path = write(tmp_path, "run.jsonl", "\n".join(lines) + "\n")
    assert spike_summary(spikes.analyze(path)) == csv_result


def test_jsonl_taken_a_block_at_a_time_reads_like_row_by_row(tmp_path):
    """JSON numbers are taken as whole columns; a block with a word, a boolean, a float step or a line that is no
    object is read row by row, to the same values (the odd cells counted as unparsed)."""
    rng = random.Random(5)
    rows = [{"step": s, "loss": 2 + 0.01 * rng.random() + (3 if s == 150 else 0), "lr": 1} for s in range(300)]
    plain = write(tmp_path, "plain.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    odd = [dict(r) for r in rows]
    odd[20]["loss"], odd[21]["loss"], odd[22]["step"] = "abc", True, 22.0
    lines = [json.dumps(r) for r in odd]
    lines.insert(40, "1, 2")
    mixed = write(tmp_path, "mixed.jsonl", "\n".join(lines) + "\n")
    a, b = spikes.analyze(plain), spikes.analyze(mixed)
    assert [(s.step, s.type) for s in a.spikes] == [(s.step, s.type) for s in b.spikes] == [(150, "fast_recovery")]
    assert (a.values, b.values) == (300, 298)
    assert sorted((e["column"], e["count"]) for e in b.to_json()["events"] if e["kind"] == "unparsed") == [("<line>", 1), ("loss", 2)]


def test_tsv_reads_like_csv(small_curve, csv_result, tmp_path):
    rows = ["step\tloss\tgrad_norm"] + [f"{r['step']}\t{r['loss']!r}\t{r['grad_norm']!r}" for r in small_curve[1]]
    assert spike_summary(spikes.analyze(write(tmp_path, "run.tsv", "\n".join(rows)))) == csv_result


def test_hf_trainer_state_reads_like_csv(small_curve, csv_result, tmp_path):
    history = []
    for r in small_curve[1]:
        history.append({"epoch": r["step"] / 1000, "grad_norm": r["grad_norm"], "learning_rate": r["lr"],
                        "loss": r["loss"], "step": r["step"]})
        if r["step"] % 500 == 499:  # the Trainer interleaves evaluation records at the same step
            history.append({"epoch": r["step"] / 1000, "eval_loss": 3.1, "eval_runtime": 1.0, "step": r["step"]})
    history.append({"epoch": 3.0, "step": 2999, "total_flos": 1e15, "train_loss": 3.3, "train_runtime": 99.0})
    path = write(tmp_path, "trainer_state.json", json.dumps({"global_step": 2999, "log_history": history}))
    report = spikes.analyze(path)
    assert (report.columns.loss, report.columns.grad, report.columns.lr) == ("loss", "grad_norm", "learning_rate")
    assert spike_summary(report) == csv_result
    assert [e["kind"] for e in report.to_json()["events"]] == []  # eval rows at the same step are no resume


def write_events(directory, rows, tags):
    """A TensorBoard event file written with tensorboard's own writer, as SummaryWriter does."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for r in rows:
        for tag, key in tags.items():
            value = summary_pb2.Summary.Value(tag=tag, simple_value=r[key])
            writer.add_event(event_pb2.Event(step=r["step"], summary=summary_pb2.Summary(value=[value])))
    writer.close()
    return next(directory.glob("*tfevents*"))


def test_tensorboard_event_file_and_directory_read_like_csv(small_curve, csv_result, tmp_path):
    event_file = write_events(tmp_path, small_curve[1], {"train/loss": "loss", "train/grad_norm": "grad_norm"})
    (tmp_path / "hparams.yaml").write_text("lr: 0.001\n")  # what Lightning writes beside its event files: not read
    (tmp_path / "events.out.tfevents.checkpoints").mkdir()  # a folder, whatever its name
    for target in (event_file, tmp_path):
        report = spikes.analyze(target)
        assert (report.format, report.columns.loss, report.columns.grad) == ("tensorboard", "train/loss",
                                                                              "train/grad_norm")
        assert spike_summary(report) == csv_result  # float32 in the event file changes nothing here


def test_tensorboard_scalars_of_one_step_make_one_row_so_a_spike_finds_its_grad_norm(tmp_path):
    rows = [{"step": s, "loss": 3 * math.exp(-s / 100) + (5 if s == 200 else 0), "grad_norm": 5.0 if s == 200 else 1.0}
            for s in range(300)]
    write_events(tmp_path, rows, {"train/loss": "loss", "train/grad_norm": "grad_norm"})  # one event per tag, same step
    [spike] = spikes.analyze(tmp_path).to_json()["spikes"]
    assert (spike["step"], spike["grad_norm_peak"], spike["grad_norm_lead"]) == (200, 5.0, 0)


def test_an_event_file_with_a_record_that_is_no_event_is_refused_in_a_folder_too(small_curve, tmp_path):
    """A record whose checksum holds but whose bytes are no Event proto: the folder is refused and the file named, not
    read without it."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    write_events(tmp_path, small_curve[1], {"train/loss": "loss"})
    with open(tmp_path / "events.out.tfevents.9999999999.junk", "wb") as f:
        RecordWriter(f).write(b"\xff\xff\xff\xff not an event")
    for target, says in ((tmp_path, "events.out.tfevents.9999999999.junk: not a readable TensorBoard event file"),
                         (tmp_path / "events.out.tfevents.9999999999.junk", "not a readable TensorBoard event file")):
        with pytest.raises(spikes.CliError) as caught:
            spikes.analyze(target)
        assert str(caught.value).startswith(says), caught.value


def test_a_spikes_height_is_relative_to_its_baseline():
    """A jump from 1 to 3 is taller than one from 8 to 10 (2x against 0.25x): the plot labels and the post-mortem rank
    spikes by it; at a baseline of 0 it is the peak itself."""
    spikes_at = [(3.0, 1.0), (10.0, 8.0), (3.0, 0.0), (1.0, -2.0)]  # (peak, baseline)
    assert [spike_height(types.SimpleNamespace(peak=p, baseline=b)) for p, b in spikes_at] == [2.0, 0.25, 3.0, 1.5]


def run_without(package, tmp_path, *args):
    """Run spikes.py with `package` made unimportable, as on a machine where it is not installed."""
    blocker = tmp_path / "blocker" / package
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(f"raise ImportError('{package} is not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    return subprocess.run([sys.executable, str(spikes.__file__), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=60)


def test_tensorboard_missing_is_a_one_line_error(small_curve, tmp_path):
    event_file = write_events(tmp_path, small_curve[1][:50], {"loss": "loss"})
    proc = run_without("tensorboard", tmp_path, event_file)
    assert_one_line_error(proc)
    assert "pip install tensorboard" in proc.stderr


def test_matplotlib_missing_is_a_one_line_error_for_plot_only(tmp_path):
    log = write(tmp_path, "log.csv", "step,loss\n" + "\n".join(f"{i},3.0" for i in range(50)))
    proc = run_without("matplotlib", tmp_path, log, "--plot", tmp_path / "x.png")
    assert_one_line_error(proc)
    assert "pip install matplotlib" in proc.stderr
    assert run_without("matplotlib", tmp_path / "again", log).returncode == 0  # the rest needs no matplotlib


def test_columns_are_matched_by_name(tmp_path):
    rows = ["Step,Train_Loss,val_loss,loss/cm4,loss/pmd,loss_scale,lr"]
    rows += [f"{i},{3 + 0.01 * (i % 3)},,{3.5},{2.5},65536,0.001" for i in range(100)]
    cols = spikes.analyze(write(tmp_path, "named.csv", "\n".join(rows))).columns
    assert (cols.step, cols.loss, cols.grad, cols.lr) == ("Step", "Train_Loss", None, "lr")
    assert cols.extras == ["loss/cm4", "loss/pmd"]  # not the validation loss, not the fp16 loss scale


def test_loss_option_picks_any_column_and_without_step_rows_count(tmp_path):
    path = write(tmp_path, "custom.csv", "nll\n" + "\n".join(["2.0"] * 80 + ["9.0"] + ["2.0"] * 40) + "\n")
    proc = run_cli("spikes.py", path, "--json", "--loss", "nll")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(s["step"], s["type"]) for s in out["spikes"]] == [(80, "fast_recovery")]


# --- the CLI: output, plot, post-mortem -------------------------------------------------------------------


def test_the_output_shown_in_the_docstring_is_what_the_command_prints(tmp_path):
    assert run_cli("synthetic_curves.py", "--scenario", "mixed", "--seed", "8", "--rows", "6000",
                   "--out", tmp_path / "run.csv").returncode == 0
    proc = run_cli("spikes.py", "run.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = spikes.__doc__.split("Output\n------\n")[1].split("\nOn a real log")[0]
    assert [line[4:] for line in shown.strip("\n").splitlines()] == proc.stdout.strip("\n").splitlines()


def test_gallery_page_shows_the_commands_and_pictures_of_the_gallery_tool():
    import make_pattern_gallery

    page = (ROOT / "refs" / "loss_patterns.md").read_text()
    for name, scenario, seed in make_pattern_gallery.PATTERNS:
        for line in make_pattern_gallery.commands(name, scenario, seed):
            assert line in page, line
        assert f"(img/loss_patterns/{name}.png)" in page
        assert 20_000 < (make_pattern_gallery.OUT / f"{name}.png").stat().st_size < 100_000  # small PNGs
    tool = ROOT / "tools" / "make_pattern_gallery.py"
    assert subprocess.run([sys.executable, str(tool), "--help"], capture_output=True).returncode == 0


def test_help_exits_0():
    proc = run_cli("spikes.py", "--help")
    assert proc.returncode == 0 and "--postmortem" in proc.stdout


def test_json_output_follows_the_design_contract(tmp_path):
    _, path = synthetic(tmp_path, "mixed", 5)
    proc = run_cli("spikes.py", path, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"spikes", "events", "nan_step"} <= set(out)
    assert out["nan_step"] is None or isinstance(out["nan_step"], int)
    for spike in out["spikes"]:
        assert spike["type"] in spikes.TYPES
        assert all(isinstance(spike[k], int) for k in ("step", "start"))
        assert all(isinstance(spike[k], float) for k in ("baseline", "peak"))
        assert all(spike[k] is None or isinstance(spike[k], int) for k in ("end", "recovery_steps", "grad_norm_lead"))
        assert (spike["recovery_steps"] is None) == (spike["type"] in ("no_recovery", "divergence"))
    assert all("kind" in e and "step" in e for e in out["events"])


def test_text_output_lists_spikes_and_events(tmp_path):
    _, path = synthetic(tmp_path, "nan", 0)
    proc = run_cli("spikes.py", path)
    assert proc.returncode == 0, proc.stderr
    assert "divergence" in proc.stdout and "nonfinite at step" in proc.stdout and "nan_step: " in proc.stdout


def test_plot_writes_a_small_png(tmp_path):
    _, path = synthetic(tmp_path, "mixed", 2)
    out = tmp_path / "curve.png"
    proc = run_cli("spikes.py", path, "--plot", out)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 150_000


def test_postmortem_has_a_section_per_significant_spike(tmp_path):
    curve, path = synthetic(tmp_path, "mixed", 4)
    out = tmp_path / "pm.md"
    proc = run_cli("spikes.py", path, "--json", "--postmortem", out)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["spikes"]
    text = out.read_text()
    significant = [s for s in found if s["type"] != "fast_recovery"]
    assert text.count("\n## Spike #") == len(significant) > 3
    for n, s in enumerate(significant, 1):
        section = text.split(f"## Spike #{n}: step {s['step']} ({s['type']})")[1].split("\n## ")[0]
        for heading in ("### Symptoms", "### Evidence", "### Classification", "### Recovery action (suggested)",
                        "### Cost", "### Lessons / follow-ups"):
            assert heading in section
        assert f"{s['baseline']:.4g}" in section and f"{s['peak']:.4g}" in section
        assert f"Grad norm peak during the spike: {s['grad_norm_peak']:.4g}" in section
    fast = [s for s in found if s["type"] == "fast_recovery"]
    assert f"## Fast-recovering spikes ({len(fast)})" in text
    assert text.count("\n| ") - 2 == min(len(fast), 20)  # one table row per fast spike, header excluded
    assert '"' not in text  # no quotation marks: the draft is in our own words


def test_postmortem_calls_an_offset_an_offset_and_only_an_offset(tmp_path):
    """A lasting 1.25x offset on a loss of 0.5 (a baseline under 1): its section says by how much it settled above
    the pre-spike level, a lasting offset; a divergence that settled somewhere says where, and is no offset."""
    rng = random.Random(0)
    rows = [f"{s},{0.5 * (1.25 if s >= 2000 else 1.0) * (1 + 0.08 * rng.gauss(0, 1)):.6g}" for s in range(3000)]
    report = spikes.analyze(write(tmp_path, "offset.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    [spike] = report.spikes
    assert (spike.type, spike.baseline < 1) == ("no_recovery", True)
    share = 100 * (spike.level_after / spike.baseline - 1)
    assert f"settled at {spike.level_after:.4g}, {share:.0f}% above the pre-spike level" in spikes.postmortem(report)
    rows = [f"{s},{3.0 + 0.05 * ((s * 7) % 5 - 2) if s < 300 else 6.0 + 0.02 * (s - 300)}" for s in range(1000)]
    report = spikes.analyze(write(tmp_path, "diverges.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    [spike] = report.spikes
    assert (spike.type, spike.level_after is not None) == ("divergence", True)
    draft = spikes.postmortem(report)
    assert f"settled at {spike.level_after:.4g}" in draft and "above the pre-spike level" not in draft


@pytest.mark.parametrize("limit, more", [(2, None), (1, "  ... 1 more events (all are in --json)")])
def test_the_summary_lists_events_up_to_its_limit_and_counts_the_rest(tmp_path, limit, more):
    rows = [f"{s},{2.0 + 0.01 * ((s * 7) % 5 - 2)}" for s in [*range(200), *range(100, 300), *range(150, 400)]]
    report = spikes.analyze(write(tmp_path, "resumed.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [e["kind"] for e in report.to_json()["events"]] == ["resume", "resume"]
    lines = spikes.summary(report, limit=limit).splitlines()
    assert [line for line in lines if line.startswith("  ...")] == ([more] if more else [])


def test_postmortem_of_a_log_without_spikes_is_just_the_summary(tmp_path):
    _, path = synthetic(tmp_path, "clean", 0)
    out = tmp_path / "pm.md"
    assert run_cli("spikes.py", path, "--postmortem", out).returncode == 0
    assert "- Spikes: 0" in out.read_text() and "## Spike #" not in out.read_text()


def test_unwritable_outputs_are_one_line_errors(tmp_path):
    _, path = synthetic(tmp_path, "clean", 0, rows=300)
    assert_one_line_error(run_cli("spikes.py", path, "--plot", tmp_path / "no" / "such" / "dir.png"))
    assert_one_line_error(run_cli("spikes.py", path, "--postmortem", tmp_path / "no" / "such" / "dir.md"))


def test_memory_is_bounded_by_the_window_not_the_log(tmp_path):
    peaks = []
    for rows in (10_000, 100_000):
        lines = [f"{i},{3 + 0.01 * math.sin(i * 1.7):.5f},{1 + 0.1 * math.cos(i):.4f}" for i in range(rows)]
        path = write(tmp_path, f"{rows}.csv", "step,loss,grad_norm\n" + "\n".join(lines) + "\n")
        tracemalloc.start()
        spikes.analyze(path)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] + 100_000, peaks  # ten times the log, (almost) the same memory


# --- bad input ---------------------------------------------------------------------------------------

BAD = {
    "empty.csv": b"",
    "header-only.csv": b"step,loss\n",
    "words.csv": b"step,loss\n1,abc\n2,def\n",
    "no-loss-column.csv": b"step,accuracy\n1,0.5\n2,0.6\n",
    "junk.csv": bytes(range(128, 256)) * 20,
    "junk.json": bytes(range(128, 256)) * 20,
    "junk.jsonl": bytes(range(128, 256)) * 20,
    "events.out.tfevents.1700000000.host": bytes(range(256)) * 20,
    "not-json.json": b"{this is not json",
    "object.json": b'{"no": "log_history"}',
    "empty.jsonl": b"\n\n",
    "run.log": b"Epoch one started\nall good so far\n",
    "notes.txt": b"loss went up at some point\n",
    "long-line.csv": b"x" * 5_000_000,  # no line end in 5 MB: refused at 4 MB, not held whole
}


@pytest.mark.hostile
@pytest.mark.parametrize("name", BAD)
def test_unreadable_input_is_a_one_line_error(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(BAD[name])
    assert_one_line_error(run_cli("spikes.py", path))


def test_a_json_document_over_the_size_limit_is_refused_before_it_is_loaded(tmp_path, monkeypatch):
    from spikelog import CliError
    from spikelog.read import trainer_state
    path = write(tmp_path, "trainer_state.json", json.dumps({"log_history": [{"step": 1, "loss": 1.0}]}))
    monkeypatch.setattr(trainer_state, "MAX_JSON", 16)  # bytes, for the test: 512 MB in use
    with pytest.raises(CliError, match="is not loaded whole; write the log as JSONL"):
        spikes.analyze(path)


def test_missing_file_and_empty_directory_are_one_line_errors(tmp_path):
    assert_one_line_error(run_cli("spikes.py", tmp_path / "missing.csv"))
    assert_one_line_error(run_cli("spikes.py", tmp_path))


def test_nan_and_inf_are_data(tmp_path):
    rows = ["step,loss"] + [f"{i},3.0" for i in range(50)] + ["50,nan", "51,inf", "52,3.0", "53,-inf"]
    out = json.loads(run_cli("spikes.py", write(tmp_path, "nan.csv", "\n".join(rows)), "--json").stdout)
    assert out["nan_step"] == 50
    assert [(e["step"], e["count"]) for e in out["events"] if e["kind"] == "nonfinite"] == [(50, 2), (53, 1)]


def test_odd_cells_and_a_truncated_last_line_give_a_partial_result(tmp_path):
    rows = ["step,loss,grad_norm"] + [f"{i},3.0,1.0" for i in range(60)] + ["60,oops,1.0", "61,3.0,", "62,3."]
    proc = run_cli("spikes.py", write(tmp_path, "crashed.csv", "\n".join(rows)), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["log"]["values"] == 62  # the unreadable cell is left out; the truncated "3." still reads
    assert [e for e in out["events"] if e["kind"] == "unparsed"] == [
        {"kind": "unparsed", "step": None, "column": "loss", "count": 1, "first_line": 62}]


# --- logs as people have them: a corpus of real formats, written by hand from each format's layout ----------

LOGS = ROOT / "tests" / "data" / "logs"
CORPUS = {  # file: (format recognised, loss column, grad-norm column, planted one-row spike: its step)
    "modded_nanogpt.txt": ("text", "train_loss", None, 131),
    "llmc_main.log": ("llm.c", "loss", "grad_norm", 130),
    "llmc_stdout.txt": ("llm.c-stdout", "loss", "grad_norm", 131),
    "nanogpt.txt": ("text", "loss", None, 130),
    "megatron.txt": ("text", "lm loss", "grad norm", 1310),  # logged every 10 steps
    "hf_trainer_stdout.txt": ("text", "loss", "grad_norm", 130),  # no step printed: the 131st record
    "wandb_export.csv": ("csv", "bright-sun-12 - train/loss", "bright-sun-12 - train/grad_norm", 260),
    "lightning_metrics.csv": ("csv", "train_loss_step", None, 6549),  # logged every 50 steps
    "torchtune_disklogger.txt": ("text", "loss", "grad_norm", 131),
    "fairseq_train.log": ("text", "loss", "gnorm", 13100),  # num_updates, logged every 100
}


@pytest.mark.parametrize("name", CORPUS)
def test_every_corpus_log_is_read_with_no_flag(name):
    fmt, loss, grad, step = CORPUS[name]
    report = spikes.analyze(LOGS / name)
    assert (report.format, report.columns.loss, report.columns.grad) == (fmt, loss, grad)
    assert report.values == 220 and report.columns.extras == []  # no __MIN/__MAX/_epoch/val "datasets"
    assert [(s.step, s.type) for s in report.spikes] == [(step, "fast_recovery")]  # one row, whatever the interval
    assert report.to_json()["events"] == []


SHAPES = {  # file: (format, the loss as the report names it, rows read, first step, last step, spikes (step, type))
    "detectron2_stdout.txt": ("text", "total_loss", 80, 19, 1599, [(1119, "fast_recovery")]),  # ANSI, opens with [
    "detectron2_metrics.json": ("jsonl", "total_loss", 80, 19, 1599, [(959, "fast_recovery")]),  # eval records between
    "mmdet_train.log": ("text", "loss", 90, 50, 4500, [(3100, "fast_recovery")]),  # Epoch [e][i/500]: (e-1)*500+i
    "mmdet_log.json": ("jsonl", "loss", 90, 50, 4500, [(3650, "fast_recovery")]),  # iter from 0 each epoch, val records
    "opennmt_train.log": ("text", "xent", 80, 100, 8000, [(5100, "fast_recovery")]),  # ANSI inside the prefix
    "yolox_train_log.txt": ("text", "total_loss", 80, 10, 800, [(450, "fast_recovery")]),  # one byte not UTF-8
    "deepspeed_chat_step1.log": ("text", "loss", 80, 0, 790, [(630, "fast_recovery")]),  # Step counts per epoch
    "yolov8_results.csv": ("csv", "train/box_loss + train/cls_loss + train/dfl_loss", 70, 1, 70, [(46, "fast_recovery")]),
    "sb3_progress.csv": ("csv", "train/loss", 80, 2, 81, [(60, "fast_recovery")]),  # time/iterations
    "sb3_stdout.txt": ("text", "train/loss", 80, 2, 81, [(60, "fast_recovery")]),  # | train/ | boxes, time/iterations
    "llamafactory_trainer_log.jsonl": ("jsonl", "loss", 80, 5, 400, [(265, "fast_recovery")]),  # current_steps
    "megatron_golden_values.json": ("json", "lm loss", 80, 0, 395, [(245, "fast_recovery")]),
    "history_list.json": ("json", "loss", 75, 0, 296, [(160, "fast_recovery")]),  # a list of dicts, iter per epoch
    "llamafactory_two_writers.jsonl": ("jsonl", "loss", 80, 10, 800, [(610, "fast_recovery")]),  # each step twice
    "llamafactory_two_writers_resume.jsonl": ("jsonl", "loss", 90, 10, 800, [(750, "fast_recovery")]),  # and a resume
    "segmentation_epoch_iter.log": ("text", "Loss", 80, 10, 800, [(580, "fast_recovery")]),  # Epoch: [e/E] Iter [i/N]
    "pipe_table_epochs.txt": ("text", "TrainLoss", 80, 1, 80, [(51, "fast_recovery")]),  # a | table, ValLoss beside
    "build_nanogpt_log.txt": ("text", "train", 90, 0, 89, [(70, "fast_recovery")]),  # `<step> train <loss>`
    "dit_two_runs.txt": ("text", "Train Loss", 170, 100, 12000, [(9000, "fast_recovery")]),  # 228 lines before any
    "batch_loss_beside_epoch_average.log": ("text", "Batch loss", 80, 0, 79, [(51, "fast_recovery")]),  # no counter
    "rl_total_timesteps_two_runs.csv": ("csv", "total_loss", 120, 2048, 163840, [(124928, "fast_recovery")]),
}
SHAPE_EVENTS = {  # the events of a shape that has any (all others have none)
    "yolox_train_log.txt": [{"kind": "unparsed", "step": None, "column": "<bytes not UTF-8>", "count": 1, "first_line": 5}],
    "llamafactory_two_writers.jsonl": [{"kind": "repeated_rows", "step": None, "count": 81, "first_line": 2}],
    "llamafactory_two_writers_resume.jsonl": [  # one writer two rows behind, catching up, then a resume: one event
        {"kind": "repeated_rows", "step": None, "count": 91, "first_line": 2},
        {"kind": "resume", "step": 610, "from_step": 700, "rollback_steps": 90},
        {"kind": "resume_spike", "step": 750, "resume_step": 610, "rows_after_resume": 14, "type": "fast_recovery"}],
    "dit_two_runs.txt": [{"kind": "new_run", "step": 100, "from_step": 5000, "run": 2}],  # run 1 fell before a baseline
    "rl_total_timesteps_two_runs.csv": [{"kind": "new_run", "step": 2048, "from_step": 81920, "run": 2}],
}


@pytest.mark.parametrize("steps, kept", [
    ([10, 20, 30, 20, 40], [10, 20, 30, 40]),  # a writer a row behind: 20 again, right after 30
    ([10, 20, 30, 40, 20, 50, 30, 60], [10, 20, 30, 40, 50, 60]),  # two rows behind
    ([10, 20, 30, 40, 50, 60, 70, 10, 20, 30, 40, 50, 60, 70, 80], [10, 20, 30, 40, 50, 60, 70] * 2 + [80]),  # a run
    ([10, 20, 30, 40, 50, 60, 70, 80, 10, 20, 30, 40, 50, 60, 70, 80, 90], [10, 20, 30, 40, 50, 60, 70, 80] * 2 + [90]),
    ([1.0, 2.0, 3.0, 2.0, 4.0], [1.0, 2.0, 3.0, 4.0]),  # float steps: the same
    ([10, 20, 30, 40, 50, 30, 40, 60], [10, 20, 30, 40, 50, 60]),  # two rows behind, in a row
    ([10, 20, 30, 40, 50, 40, 50, 60], [10, 20, 30, 40, 50, 60]),  # catching up where the other saved a checkpoint
    ([10, 20, 30, 40, 50, 40, 50], [10, 20, 30, 40, 50]),  # the lagging writer's rows end the log
    ([10, 20, 30, 40, 50, 60, 70, 80, 50, 60, 70, 80, 90], [10, 20, 30, 40, 50, 60, 70, 80, 50, 60, 70, 80, 90]),
    ([10, 20, 30, 40, 50, 60, 70, 80, 30, 40, 50, 60, 70, 80, 90],  # replays climbing to the highest step: resumes
     [10, 20, 30, 40, 50, 60, 70, 80, 30, 40, 50, 60, 70, 80, 90]),
    ([10, 20, 30, 40, 50, 60, 70, 80, 60, 70, 80, 90], [10, 20, 30, 40, 50, 60, 70, 80, 60, 70, 80, 90]),
    ([10, 20, 30, 40, 50, 60, 70, 80, 90, 20, 20, 30, 30, 40], [10, 20, 30, 40, 50, 60, 70, 80, 90, 20, 30, 40]),
    ([10, 20, 30, 40, 50, 60, 70, 80, 60, 60, 70, 70, 80, 80, 90], [10, 20, 30, 40, 50, 60, 70, 80, 90]),  # a limit
])
def test_a_step_logged_again_is_a_repeat_only_among_the_latest_steps(steps, kept):
    """A lagging writer repeats a step it read a row or two before, up to two rows in a row, also up to the other
    writer's step; a resume's replay climbs back to the highest step in more rows and stays; after a resume both
    writers side by side are repeats again; a second run that passes the first run's last step again (DiT's
    log.txt) keeps every row."""
    records = [{"step": step, "loss": 1.0} for step in steps]
    batches = repeated_rows([(list(range(len(records))), records)], "step", "loss", Unparsed())
    assert [record["step"] for _, batch in batches for record in batch] == kept


def test_a_record_that_went_back_at_the_end_of_a_batch_is_judged_by_the_next_batch():
    """A resume to step 5 closes one batch and the next rises past the highest step: the resume row stays, before
    the next batch's rows. A replay that climbed back to the highest step, held at the end of a batch, stays too,
    before the next batch's rows (the batch's fast road waits for the rows it holds)."""
    first = [{"step": step, "loss": 1.0} for step in (10, 20, 30, 5)]
    second = [{"step": step, "loss": 1.0} for step in (200, 210)]
    batches = repeated_rows([([1, 2, 3, 4], first), ([5, 6], second)], "step", "loss", Unparsed())
    assert [record["step"] for _, batch in batches for record in batch] == [10, 20, 30, 5, 200, 210]
    first = [{"step": step, "loss": 1.0} for step in (10, 20, 30, 40, 50, 60, 70, 80, 50, 60, 70, 80)]
    second = [{"step": step, "loss": 1.0} for step in (90, 100)]  # a replay that climbed back: kept before them
    batches = repeated_rows([(list(range(12)), first), ([12, 13], second)], "step", "loss", Unparsed())
    assert [record["step"] for _, batch in batches for record in batch] == [*range(10, 90, 10), 50, 60, 70, 80, 90, 100]


@pytest.mark.parametrize("name", SHAPES)
def test_the_long_tail_of_log_shapes_is_read_by_its_own_steps(name):
    """Issue 23's shapes, each in a look-alike we wrote (tests/data/logs/README.md): read with no flag, stepped by
    the log's own counter (composed across epochs where it restarts), and the planted spike found and typed; an
    epoch boundary is no resume, a validation line or record no row."""
    fmt, loss, rows, first, last, found = SHAPES[name]
    report = spikes.analyze(LOGS / name)
    assert (report.format, report.columns.loss_label) == (fmt, loss)
    assert (report.values, report.first_step, report.last_step) == (rows, first, last)
    assert [(s.step, s.type) for s in report.spikes] == found
    assert report.to_json()["events"] == SHAPE_EVENTS.get(name, [])


def test_a_box_of_name_value_rows_is_one_record_at_its_first_row():
    """stable-baselines3's console: each box is one record, numbered by the line of its first value (where a later
    event, such as a repeated step, points the reader), its sections prefixed (`time/`), its step time/iterations."""
    records = list(general.records(LOGS / "sb3_stdout.txt", Unparsed()))
    assert len(records) == 81 and [line for line, _ in records[:2]] == [6, 16]
    assert records[0][1] == {"rollout/ep_len_mean": "200", "rollout/ep_rew_mean": "-151", "time/fps": "1500",
                             "time/time_elapsed": "1", "time/total_timesteps": "2048", "step": "1"}


@pytest.mark.parametrize("line, record", [
    ("iter 0: loss 10.8610, time 412.30ms, mfu -100.00%", {"step": "0", "loss": "10.8610"}),  # units are no values
    ("step 3: train loss 2.0, val loss 2.3", {"step": "3", "train loss": "2.0", "val loss": "2.3"}),  # val in a name
    ("| INFO | valid | epoch 001 | valid on 'valid' subset | loss 4.3 | num_updates 8000", None),
    ("Epoch(val) [1][ 50/500]  eta: 0:00:10  loss: 0.91", None),
    ("Epoch: [0]  [50/6]  eta: 0:00:25  lr: 0.001004  loss: 8.2773 (8.2773)", {"epoch": "0", "step": "50", "loss": "8.2773",
                                                                            "lr": "0.001004"}),
    ("Epoch [2][50/500] it: 7 loss: 1.0", {"epoch": "2", "step": "50", "loss": "1.0"}),  # the brackets count first
    ("Iter(train) [  50/90000]  lr: 1e-3  iter: 9  loss: 2.0", {"step": "50", "lr": "1e-3", "loss": "2.0"}),
    ("\x1b[32m[04/01 10:00:00 d2.utils.events]: \x1b[0m eta: 0:10:00  iter: 19  total_loss: 2.1  max_mem: 3000M",
     {"step": "19", "total_loss": "2.1"}),  # a clock and a size are no values
    ("global_step=120 step=7 loss=1.0", {"step": "120", "loss": "1.0"}),  # a whole-run counter first
    ("{'loss': np.float64(1.5), 'grad_norm': tensor(0.3), 'epoch': 0.5}", {"loss": "1.5", "grad_norm": "0.3", "epoch": "0.5"}),
    ('{"lm loss": 1.2E+00, "grad norm": 0.3, "x": NaN}', {"lm loss": "1.2E+00", "grad norm": "0.3", "x": "NaN"}),
    ("Epoch one started", None),
    # deep-text-recognition-benchmark: the iteration of N opens the line, the validation loss is a name on it
    ("[100/200000] Train loss: 0.00414, Valid loss: 0.00665, Elapsed_time: 665.83799",
     {"step": "100", "Train loss": "0.00414", "Valid loss": "0.00665", "Elapsed_time": "665.83799"}),
    ("[3/10] step: 500 loss: 1.2", {"step": "500", "loss": "1.2"}),  # a named counter before an opening [i/N]
])
def test_the_general_reader_takes_named_numbers_and_the_lines_own_step(line, record):
    parsed = general.parse(line)
    if record is None:
        assert parsed is None
    else:
        assert {k: v for k, v in parsed.items() if k in record or k == "step"} == record
        assert set(parsed) - set(record) <= {"Iter", "iter", "it", "time", "eta", "mfu", "epoch", "data_time"}


def test_an_epoch_counted_from_zero_goes_on_from_the_last_epochs_steps(tmp_path):
    """torchvision's reference scripts: `Epoch: [0]  [i/N]` counted from 0 in each 0-based epoch."""
    rng = random.Random(3)
    lines = [f"Epoch: [{e}]  [{i}/40]  eta: 0:00:0{i % 10}  lr: 0.005000  loss: {2 - e * 0.1 + 0.01 * rng.random():.4f} "
             f"(2.0)  time: 1.1  data: 0.2  max mem: 2670" for e in range(3) for i in range(0, 40, 2)]
    lines.insert(20, "Epoch: [0] Total time: 0:00:05 (0.9880 s / it)")
    report = spikes.analyze(write(tmp_path, "torchvision.txt", "\n".join(lines) + "\n"))
    assert (report.values, report.first_step, report.last_step) == (60, 0, 118)
    assert report.to_json()["events"] == [] and report.spikes == []


def test_runs_written_one_after_another_are_each_read_on_their_own(tmp_path):
    """Three runs in one CSV, each from step 0 at its first loss: the seams are new runs, not resumes or spikes; a
    spike in the first and in the third run is found at its own step."""
    report = spikes.analyze(LOGS / "concatenated_runs.csv")
    assert report.runs == 3 and report.values == 300
    assert [(s.step, s.type) for s in report.spikes] == [(70, "fast_recovery"), (60, "fast_recovery")]
    assert [(e["kind"], e["step"], e["from_step"]) for e in report.to_json()["events"]] == [("new_run", 0, 99)] * 2
    assert "3 runs one after another" in spikes.summary(report)
    out = report.to_json()
    assert [(s["step"], s["run"]) for s in out["spikes"]] == [(70, 1), (60, 3)]  # each says its run
    assert [e["run"] for e in out["events"]] == [2, 3]
    assert report.run_of(-1) is None and report.run_of(0) == report.run_of(99) == 1 and report.run_of(100) == 2  # (-1: a
    # log-wide event, null)
    rows = (LOGS / "concatenated_runs.csv").read_text().splitlines()
    from_one = rows[:101] + [f"{int(r.split(',')[0]) + 1},{r.split(',', 1)[1]}" for r in rows[101:200]]
    report = spikes.analyze(write(tmp_path, "from_one.csv", "\n".join(from_one) + "\n"))
    assert [(e["kind"], e["step"]) for e in report.to_json()["events"]] == [("new_run", 1)]  # a run from step 1 too
    low = rows[:101] + [f"{s},{rows[100].split(',')[1]},0.3" for s in range(0, 20)]  # back to 0, the loss as it was
    assert [e["kind"] for e in spikes.analyze(write(tmp_path, "low.csv", "\n".join(low) + "\n")).to_json()["events"]] \
        == ["resume"]
    resumed = rows[:101] + rows[76:101]  # back to step 75, the loss where it was then: a resume, not a new run
    events = spikes.analyze(write(tmp_path, "resumed.csv", "\n".join(resumed) + "\n")).to_json()["events"]
    assert [e["kind"] for e in events] == ["resume"] and "run" not in events[0]  # one run: no run number


def test_a_step_back_to_the_middle_of_a_run_is_a_resume_whatever_the_loss(tmp_path):
    """_new_run: only a step back to the run's start (or before it) can be a new run. Back to step 50 of 100 with the
    loss at the run's first level is a resume (a checkpoint restored with a fresh optimizer, say), not a new run."""
    rows = [f"{s},{1.0 + 1.5 * math.exp(-s / 20) + 0.002 * math.sin(s):.5f}" for s in range(100)]
    rows += [f"{s},{1.0 + 1.5 * math.exp(-(s - 50) / 20) + 0.002 * math.sin(s):.5f}" for s in range(50, 80)]
    report = spikes.analyze(write(tmp_path, "middle.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert report.runs == 1 and [e["kind"] for e in report.to_json()["events"]][0] == "resume"


def test_runs_too_short_for_a_baseline_are_runs_too(tmp_path):
    """_new_run: a run of 20 rows has no baseline yet (the window needs 32); a seam back to step 0 after it is a new
    run all the same, each run read on its own."""
    rows = [f"{s},{2.5 - 0.05 * s:.4f}" for s in range(20)] * 2
    report = spikes.analyze(write(tmp_path, "short_runs.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert report.runs == 2 and [(e["kind"], e["step"], e["run"]) for e in report.to_json()["events"]] \
        == [("new_run", 0, 2)]  # two runs: each event says its run


def test_an_actor_and_a_critic_loss_are_named_for_the_user_to_choose_from(tmp_path):
    """An RL log (a table aligned with spaces) with two losses and no total: the refusal names them with their counts;
    --loss picks one, stepped by the table's Iteration column."""
    proc = run_cli("spikes.py", LOGS / "rl_aligned_table.txt")
    assert_one_line_error(proc)
    assert "no loss found: numeric series (values in the first records): Critic_Loss (40), Actor_Loss (40), " in proc.stderr
    report = spikes.analyze(LOGS / "rl_aligned_table.txt", "Critic_Loss")
    assert (report.format, report.values, report.first_step, report.last_step) == ("text", 40, 0, 1950)
    config = write(tmp_path, "log.txt", "".join(f"[06/01 10:00:0{i} d2.engine]: Rank of current process: 0. World size: 1\n"
                                               f"    BG_CLS_LOSS_WEIGHT: 1.0\n    SMOOTH_L1_BETA: 0.0\n" for i in range(3)))
    proc = run_cli("spikes.py", config)  # a config dump and no training line: its loss weight is no loss
    assert_one_line_error(proc)
    assert "no loss found: numeric series (values in the first records): BG_CLS_LOSS_WEIGHT (3), " in proc.stderr
    junk = write(tmp_path, "notes.log", "deepspeed main.py --lr 3e-4\nall good so far\n")
    proc = run_cli("spikes.py", junk)
    assert_one_line_error(proc)
    assert "no number next to a name and no table in its first 2 lines" in proc.stderr and "deepspeed" not in proc.stderr


def test_golden_values_on_one_line_keyed_by_step_beside_other_keys(tmp_path):
    """Megatron-LM's golden values as newer versions write them: `values` keyed by step, on one line, beside keys that
    are no series (a seed) and a series that is malformed (an interval of 0: left out)."""
    loss = {str(5 * k): 3 + 0.01 * (k % 4) + (2.0 if k == 40 else 0) for k in range(60)}
    golden = {"lm loss": {"start_step": 0, "end_step": 295, "step_interval": 5, "values": loss}, "seed": 1234,
              "num-zeros": {"start_step": 0, "step_interval": 0, "values": [1, 2]}}
    path = write(tmp_path, "golden.json", json.dumps(golden))
    report = spikes.analyze(path)
    assert (report.format, report.columns.loss, report.values, report.last_step) == ("json", "lm loss", 60, 295)
    assert [(s.step, s.type) for s in report.spikes] == [(200, "fast_recovery")]
    two = write(tmp_path, "results.csv", "epoch,train/box_loss,train/cls_loss\n" + "".join(
        f"{e},{1 + 0.01 * (e % 3)},{2 + (4 if e == 50 else 0)}\n" for e in range(1, 80)))
    report = spikes.analyze(two)  # two parts are summed too
    assert report.columns.loss_label == "train/box_loss + train/cls_loss"
    assert [(s.step, round(s.peak, 2)) for s in report.spikes] == [(50, 7.02)]  # 1.02 + 6: the sum
    pretty = write(tmp_path, "object.json", '{\n "seed": 1,\n "losses": [1, 2]\n}\n')
    proc = run_cli("spikes.py", pretty)
    assert_one_line_error(proc)
    assert "JSON log must be a trainer_state.json (with log_history), Megatron-LM golden values" in proc.stderr


def test_a_total_loss_is_read_and_its_parts_are_named_not_taken_for_datasets():
    report = spikes.analyze(LOGS / "detectron2_metrics.json")
    assert report.columns.extras == [] and report.columns.parts == []
    assert "80 values of 'total_loss' (the total of its parts loss_box_reg, loss_cls, loss_rpn_cls and 1 more)" in \
        spikes.summary(report)
    assert report.to_json()["log"]["loss_parts"] == []
    yolo = spikes.analyze(LOGS / "yolov8_results.csv")
    assert yolo.columns.parts == yolo.to_json()["log"]["loss_parts"] == ["train/box_loss", "train/cls_loss", "train/dfl_loss"]
    assert "(no total logged: the sum of its 3 parts)" in spikes.summary(yolo)
    first = (LOGS / "yolov8_results.csv").read_text().splitlines()[1].split(",")
    assert yolo.spikes[0].baseline < 4.5 and sum(map(float, first[1:4])) == pytest.approx(4.5, rel=0.02)


def test_a_refusal_names_the_numeric_series_it_found_never_log_lines(tmp_path):
    path = write(tmp_path, "train.log", "deepspeed main.py --data_path Dahoas/rm-static --learning_rate 9.65e-6\n"
                 + "".join(f"Epoch: 0, Step: {i}, Rank: 0, acc = 0.5, ppl: 12.5\n" for i in range(40)))
    proc = run_cli("spikes.py", path)
    assert_one_line_error(proc)
    assert "no loss found: numeric series (values in the first records): Epoch (40), Rank (40), acc (40), ppl (40); " \
           "use --loss NAME" in proc.stderr
    assert "deepspeed" not in proc.stderr
    assert spikes.analyze(path, "ppl").values == 40


@pytest.mark.parametrize("name, step", [
    ("timm_summary.csv", 40),
    ("keras_csvlogger.csv", 50),  # a steep descent (e every 12 epochs): only the newer half of the window is near a line
])
def test_an_epoch_table_finds_a_spike_in_its_descent(name, step):
    """A table of one row per epoch is short and mostly descent: the epoch column is its step, and before the window
    fills a falling line that explains the spread (through the whole window or its newer half) is the baseline."""
    report = spikes.analyze(LOGS / name)
    assert report.columns.step == "epoch"
    assert [(s.step, s.type) for s in report.spikes] == [(step, "fast_recovery")]


def test_format_can_be_forced_and_a_wrong_one_is_a_one_line_error(tmp_path):
    copy = write(tmp_path, "train.out", (LOGS / "nanogpt.txt").read_text())
    assert spikes.analyze(copy, fmt="text").format == "text"
    assert_one_line_error(run_cli("spikes.py", copy, "--format", "llm.c"))


def test_no_loss_column_names_the_candidates_and_the_flag(tmp_path):
    path = write(tmp_path, "m.csv", "epoch,step,nll_step,nll_epoch,acc\n" + "0,1,2.0,,0.5\n" * 40)
    proc = run_cli("spikes.py", path)
    assert_one_line_error(proc)
    assert "no loss found: columns: epoch, nll_step, acc; use --loss NAME" in proc.stderr
    assert "nll_epoch" not in proc.stderr  # a summary column is no candidate
    assert spikes.analyze(path, "nll_step").values == 40


def test_a_flag_logged_as_true_or_false_is_no_numeric_series(tmp_path):
    """JSON booleans are ints to Python: a refusal that offered `is_best` as a series to pick would send the user to
    --loss is_best."""
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": i, "acc": 0.5, "is_best": i % 10 == 0}) + "\n" for i in range(40)))
    with pytest.raises(spikes.CliError, match=r"numeric series \(values in the first records\): acc \(40\); use --loss"):
        spikes.analyze(path)


def test_a_short_log_says_detection_needs_more_values(tmp_path):
    path = write(tmp_path, "short.csv", "step,loss\n" + "".join(f"{i},{9.0 if i == 20 else 2.0}\n" for i in range(25)))
    proc = run_cli("spikes.py", path, "--json")
    events = json.loads(proc.stdout)["events"]
    assert events == [{"kind": "too_short", "step": None, "values": 25, "needed": spikes.MIN_POINTS + 1}]
    assert "needs at least 33 values" in run_cli("spikes.py", path).stdout


# --- hostile inputs and outputs (DESIGN.md, "Safety") --------------------------------------------------


def spiked_csv(tmp_path, name="run.csv", prefix=""):
    """200 steps from 1200 with a one-step spike at 1300."""
    rows = [f"{s},{6.0 if s == 1300 else 3.0 + 0.01 * math.sin(s * 1.7):.4f}" for s in range(1200, 1400)]
    path = tmp_path / name
    path.write_bytes((prefix + "step,loss\n" + "\n".join(rows) + "\n").encode())
    return path


@pytest.mark.hostile
def test_a_utf8_bom_does_not_lose_the_step_column(tmp_path):
    report = spikes.analyze(spiked_csv(tmp_path, prefix="\ufeff"))
    assert report.columns.step == "step" and [s.step for s in report.spikes] == [1300]


@pytest.mark.hostile
def test_nan_and_huge_steps_are_read_as_missing_or_as_they_are(tmp_path):
    rows = [f"{i},3.0" for i in range(60)] + ["nan,3.0", "inf,3.0", "1e400,3.0", "60,3.0",
                                              f"{10**30},3.0", f"{10**30 + 1},6.0", f"{10**30 + 2},3.0"]
    proc = run_cli("spikes.py", write(tmp_path, "steps.csv", "step,loss\n" + "\n".join(rows) + "\n"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [s["step"] for s in out["spikes"]] == [10**30 + 1]
    assert {"kind": "unparsed", "step": None, "column": "step", "count": 3, "first_line": 62} in out["events"]


@pytest.mark.hostile
def test_evenly_spaced_fractional_steps_and_a_resume_among_them(tmp_path):
    records = [{"step": 0.5 * k, "loss": 3.0 + 0.01 * (k % 5)} for k in range(1, 300)]  # steps 0.5, 1.0, ...
    records += [{"step": 10.25 + 0.5 * k, "loss": 3.0 + 0.01 * (k % 5)} for k in range(100)]  # back to 10.25
    path = write(tmp_path, "fractional.jsonl", "\n".join(json.dumps(r) for r in records))
    proc = run_cli("spikes.py", path, "--json")
    assert proc.returncode == 0, proc.stderr  # the even spacing once made a traceback (range() of floats)
    out = json.loads(proc.stdout)
    assert out["events"] == [{"kind": "resume", "step": 10.25, "from_step": 149.5, "rollback_steps": 139.25}]
    assert out["spikes"] == [] and out["log"]["values"] == 399


@pytest.mark.hostile
def test_a_log_ending_on_one_row_with_a_fractional_step_is_no_traceback(tmp_path):
    # 4097 rows made a last chunk of one row when records were taken 4096 at a time; its step made range() fail
    records = [{"step": 0.5 * k, "loss": 3.0 + 0.01 * (k % 5)} for k in range(1, 4098)]
    proc = run_cli("spikes.py", write(tmp_path, "half.jsonl", "\n".join(json.dumps(r) for r in records)), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["log"]["values"] == 4097


def test_steps_are_increasing_whatever_their_type():
    assert _increasing([59.75]) and _increasing([7]) and _increasing([1, 2, 3.5]) and _increasing([1, 2, 3.0])
    assert not _increasing([1, 2, 2.0]) and not _increasing([1, 2, 3, 3]) and not _increasing([0.5, 0.25])


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["deep.json", "deep.jsonl"])
def test_json_nested_100000_deep_is_no_traceback(tmp_path, name):
    deep = "[" * 100_000 + "]" * 100_000
    good = "".join(json.dumps({"step": i, "loss": 3.0}) + "\n" for i in range(40))
    path = write(tmp_path, name, deep if name.endswith(".json") else good + '{"a": ' + deep + "}\n")
    proc = run_cli("spikes.py", path, "--json")
    if name.endswith(".json"):
        assert_one_line_error(proc)
    else:  # one bad line of a JSONL log is counted and skipped
        assert proc.returncode == 0 and json.loads(proc.stdout)["log"]["values"] == 40


@pytest.mark.hostile
def test_fifo_and_device_are_refused_at_once(tmp_path):
    fifo = tmp_path / "log.csv"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/zero"):
        proc = run_cli("spikes.py", target, timeout=20)  # reading either would never end
        assert_one_line_error(proc)
        assert "not a regular file" in proc.stderr


@pytest.mark.hostile
def test_a_sparse_2_gb_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.csv"
    with open(path, "wb") as handle:
        handle.truncate(2 << 30)  # 2 GB of holes: no disk, no time
    tracemalloc.start()
    with pytest.raises(spikes.CliError, match="NUL bytes"):
        spikes.analyze(path)
    assert tracemalloc.get_traced_memory()[1] < 2_000_000
    tracemalloc.stop()


@pytest.mark.hostile
def test_outputs_never_destroy_what_is_there(tmp_path):
    log = spiked_csv(tmp_path)
    mine = write(tmp_path, "notes.md", "my notes\n")
    for option, out in [("--postmortem", mine), ("--plot", log.with_suffix(".png")), ("--postmortem", log),
                        ("--postmortem", tmp_path), ("--plot", "/dev/full"), ("--plot", tmp_path / "x.jpgx"),
                        ("--postmortem", tmp_path / "pm.csv")]:
        if option == "--plot" and str(out).endswith(".png"):
            out.write_bytes(b"a picture of mine")
        proc = run_cli("spikes.py", log, option, out, *(["--force"] if out in (log, tmp_path) else []))
        assert_one_line_error(proc)
    assert mine.read_text() == "my notes\n" and log.with_suffix(".png").read_bytes() == b"a picture of mine"
    assert log.read_text().startswith("step,loss\n")
    proc = run_cli("spikes.py", log, "--postmortem", mine, "--force")  # told to: it does
    assert proc.returncode == 0 and mine.read_text().startswith("# Post-mortem draft")


@pytest.mark.hostile
def test_ctrl_c_exits_130_quietly(tmp_path):
    code = ("import sys, spikes\n"
            "def interrupted(*a, **k):\n    raise KeyboardInterrupt\n"
            "spikes.analyze = interrupted\nsys.exit(spikes.main([sys.argv[1]]))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(spiked_csv(tmp_path))], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "diagnostics")), timeout=60)
    assert (proc.returncode, proc.stderr) == (130, "")


@pytest.mark.hostile
def test_a_closed_or_full_stdout_ends_quietly(tmp_path):
    log = spiked_csv(tmp_path)
    command = [sys.executable, str(spikes.__file__), str(log), "--json"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (1, "")
    reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader.stdout.close()  # like `| head` that has already left
    assert reader.wait(timeout=60) == 0 and reader.stderr.read() == ""
    reader.stderr.close()


# --- verdicts that hold on real curves ----------------------------------------------------------------------


def test_lasting_offsets_inside_a_noisy_band_are_no_recovery(tmp_path):
    """Offsets of 3-10% on a run whose noise band is 4-6% wide: the level after the spike, against the pre-spike
    trend, tells them from recoveries however noisy the single values."""
    pairs = []
    for seed in range(3):
        curve, path = synthetic(tmp_path, "lasting_offset", seed)
        pairs += synthetic_curves.match(spikes.analyze(path).spikes, curve.truth["spikes"])
    lasting = [s.type for t, s in pairs if t["type"] == "no_recovery"]
    assert len(lasting) >= 15 and lasting.count("no_recovery") / len(lasting) >= 0.9, lasting
    assert sum(t["type"] == s.type for t, s in pairs) / len(pairs) >= 0.9


def test_the_baseline_follows_a_fast_falling_loss(tmp_path):
    """A fine-tune whose loss still falls fast: a 2x spike at step 300 (loss 0.036) stands out once the baseline
    follows the fall; the window's lagging median and trend-widened spread hid it."""
    rng = random.Random(0)
    rows = [f"{s},{(0.011 + 0.5 * math.exp(-s / 100)) * (1 + 0.01 * rng.gauss(0, 1)) * (2 if s == 300 else 1):.6g}"
            for s in range(700)]
    report = spikes.analyze(write(tmp_path, "finetune.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.step, s.type) for s in report.spikes] == [(300, "fast_recovery")]
    assert report.spikes[0].baseline == pytest.approx(0.011 + 0.5 * math.exp(-3), rel=0.1)


@pytest.mark.parametrize("at", [70, 90, 120, 150])
def test_a_3x_spike_while_a_fine_tune_still_falls_by_a_factor_is_found(tmp_path, at):
    """Issue 23: a loss going from 0.3 to 0.002 (by e every 30 steps): a straight line through the window's values
    bends away from the curve and a plain median lags far above it, so a 3x spike went unseen from the moment the
    window filled until the curve flattened (steps 64 to ~190 here). A line through the logarithms follows it."""
    rng = random.Random(at)
    rows = [f"{s},{(0.002 + 0.3 * math.exp(-s / 30)) * (1 + 0.02 * rng.gauss(0, 1)) * (3 if s == at else 1):.6g}"
            for s in range(600)]
    report = spikes.analyze(write(tmp_path, "finetune.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.step, s.type) for s in report.spikes] == [(at, "fast_recovery")]
    def curve(s):
        return 0.002 + 0.3 * math.exp(-s / 30)
    assert 0.85 * curve(at) < report.spikes[0].baseline < 1.15 * curve(at - REFRESH)  # (recomputed every 32 values)
    assert report.to_json()["events"] == []


@pytest.mark.parametrize("at", [150, 250])
def test_a_decaying_bump_while_the_loss_falls_fast_is_a_slow_recovery(tmp_path, at):
    """Issue 23's planted shapes, in a fine-tune that falls by e every 150 steps (20% in 32 rows at step 150): a 2x
    bump that comes back to the curve linearly over 100 rows is found where it starts and is a slow recovery, and
    nothing else is reported (benchmarks/spikes_real_logs.py plants it into real logs too)."""
    rng = random.Random(at)
    def bump(s):
        return 2 - (s - at) / 100 if at <= s < at + 100 else 1
    rows = [f"{s},{(0.002 + 0.3 * math.exp(-s / 150)) * (1 + 0.03 * rng.gauss(0, 1)) * bump(s):.6g}" for s in range(900)]
    report = spikes.analyze(write(tmp_path, "bump.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.start, s.type) for s in report.spikes] == [(at, "slow_recovery")]
    assert report.spikes[0].recovery_steps > 20
    assert report.to_json()["events"] == []


@pytest.mark.parametrize("at", [150, 250, 400])
def test_a_lasting_offset_while_the_loss_falls_fast_is_found_and_typed_no_recovery(tmp_path, at):
    """Issue 23's third planted shape in the same fast fall: from `at` on the loss is 1.3x the curve. The curve lost
    up to 20% between two refreshes of a threshold held for 32 rows, so the offset hid under it (refreshed every 8
    rows in a fast fall, it stands out at its first row); and the loss comes back below its pre-spike level as the
    fall goes on, so it read as a recovery (judged against the fall, by a factor per row, it is an offset)."""
    rng = random.Random(at)
    rows = [f"{s},{(0.002 + 0.3 * math.exp(-s / 150)) * (1 + 0.03 * rng.gauss(0, 1)) * (1.3 if s >= at else 1):.6g}"
            for s in range(900)]
    report = spikes.analyze(write(tmp_path, "offset.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.start, s.type) for s in report.spikes] == [(at, "no_recovery")]
    assert report.to_json()["events"] == []


def noisy_rows(seed, shape, at, count=3000, noise=0.08):
    """A batch loss that falls slowly with noise of 8% a row (`noise`), and one shape planted from row `at` on:
    `offset` 1.25x for good, `bump` 1.35x back to the curve over 200 rows, `none` nothing: each above the 3-sigma
    band of the noise (thresholds.BAND_Z) and under the 6-sigma spike threshold (SPIKE_Z)."""
    rng = random.Random(seed)
    scale = {"offset": lambda k: 1.25, "bump": lambda k: 1.35 - 0.35 * min(k, 200) / 200, "none": lambda k: 1}[shape]
    return [f"{s},{(1 + 2 * (1 + s / 500) ** -0.5) * (1 + noise * rng.gauss(0, 1)) * (scale(s - at) if s >= at else 1):.6g}"
            for s in range(count)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_lasting_offset_under_the_spike_threshold_opens_where_it_starts(tmp_path, seed):
    """A 1.25x offset in a loss with 8% noise a row is 3 sigma: no row of it need pass the 6-sigma threshold, but
    the median of 7 rows in a row above the noise band (thresholds.SHIFT_ROWS) is a level shift, found where it
    started (a row that passes the threshold later opens the spike at that start too) and typed by its level."""
    report = spikes.analyze(write(tmp_path, "offset.csv", "step,loss\n" + "\n".join(noisy_rows(seed, "offset", 2000)) + "\n"))
    [spike] = report.spikes
    assert 2000 <= spike.start <= 2002 and spike.type == "no_recovery"


def test_a_level_shift_reports_the_learning_rate_of_the_row_it_started_on(tmp_path):
    """The spike a shift opens is known rows after its first row; its lr is still the one logged on that row."""
    rows = [f"{row},{lr}" for row, lr in zip(noisy_rows(0, "offset", 2000), (0.001 * (1 - s / 4000) for s in range(3000)))]
    report = spikes.analyze(write(tmp_path, "offset_lr.csv", "step,loss,lr\n" + "\n".join(rows) + "\n"))
    assert [(s.start, s.lr) for s in report.spikes] == [(2000, 0.0005)]


def test_the_learning_rate_of_a_spike_at_a_chunk_edge(tmp_path, monkeypatch):
    """Read 4 KB at a time (chunks of ~180 rows): a shift whose first row opens a chunk, and a one-row spike on a
    chunk's last row, each report the lr of their own first row, taken from the chunk that holds it."""
    monkeypatch.setattr(table, "BLOCK_BYTES", 4096)

    def log(name, shift_at=3000, spike_row=None):
        rows = []
        for k, (row, lr) in enumerate(zip(noisy_rows(0, "offset", shift_at), (0.001 * (1 - s / 4000) for s in range(3000)))):
            step, loss = row.split(",")
            rows.append(f"{step},{float(loss) * 3 if k == spike_row else float(loss):.6g},{lr:.6g}")
        return write(tmp_path, name, "step,loss,lr\n" + "\n".join(rows) + "\n")

    def chunk_starts(path):
        starts, row = [], 0
        for chunk in open_log(path, accelerate=False)[2]:
            starts.append(row)
            row += len(chunk[1])
        return starts

    starts = chunk_starts(log("plain.csv"))
    first = next(x for x in starts if x >= 1900)
    report = spikes.analyze(log("shift.csv", shift_at=first))
    assert [(s.start, s.type, s.lr) for s in report.spikes] == [(first, "no_recovery", float(f"{0.001 * (1 - first / 4000):.6g}"))]
    last = next(x for x in starts if x >= 1500) - 1
    path = log("spike.csv", spike_row=last)
    assert last + 1 in chunk_starts(path)
    assert [(s.start, s.lr) for s in spikes.analyze(path).spikes] == [(last, float(f"{0.001 * (1 - last / 4000):.6g}"))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bump_under_the_spike_threshold_is_a_slow_recovery(tmp_path, seed):
    """A 1.35x bump back to the curve over 200 rows, in a loss with 8% noise a row: 4 sigma at first, its rows stay
    above the band for ~60 rows: a level shift where it starts, then a slow recovery. (Seed 0's second row passes
    the spike threshold, and five rows later one noisy row and the median of five sit in the band: a recovery in
    the row band, fast until the block after it was checked against the trend too.)"""
    report = spikes.analyze(write(tmp_path, "bump.csv", "step,loss\n" + "\n".join(noisy_rows(seed, "bump", 2000)) + "\n"))
    [spike] = report.spikes
    assert 2000 <= spike.start <= 2002 and spike.type == "slow_recovery"


def test_the_first_stretch_after_the_baseline_settles_is_watched_for_a_level_shift():
    """Three refreshes (rows 31, 63, 95) settle the baseline (thresholds.SETTLED_REFRESHES); a shift of 0.5 from row
    100 (above the band's 0.36, every row under the threshold's 0.71) is found at the next refresh (row 127), where
    it began, not a stretch later from inside it."""
    series, blocks = fed([cycle(i, 0.5 if i >= 100 else 0.0) for i in range(400)])
    assert [(s.start, s.type) for s in series.spikes] == [(100, "no_recovery")]
    assert 127 not in [row for _, _, row in blocks]  # (the stretch that showed the shift is no healthy block)


def cycle(i, shift=0.0):
    """A flat loss of 2.0 whose noise cycles through -0.16..0.16 every 5 rows: robust sigma 0.119, so a block median
    is off the baseline from 0.158 up (thresholds.BLOCK_SIGMAS, over the 5% floor) and a row shift needs 0.356."""
    return 2.0 + 0.08 * ((i * 7) % 5 - 2) + shift


def fed(values, steps=None):
    """A Series fed `values` (at rows 0.., steps `steps` or the rows), and the rows of the blocks it reported."""
    rows = []
    series = Series("loss", on_block=lambda first, step, row, *rest: rows.append((first, step, row)))
    for i, x in enumerate(values):
        series.feed(steps[i] if steps else i, i, x)
    series.finish(len(values) - 1)
    return series, rows


@pytest.mark.parametrize("shift, found", [(0.155, False), (0.16, True)])
def test_a_block_median_is_a_level_shift_from_6_of_its_standard_errors(shift, found):
    """A bump over one block (rows 224-255) under every row test: 0.16 (1.34 sigma) puts its block median past 6
    standard errors of a block median (1.33 sigma: 0.158), found where it began and back with the next block (a
    slow recovery); 0.155 is noise, and half a window is too little for the window's median (below)."""
    series, _ = fed([cycle(i, shift if 224 <= i < 256 else 0.0) for i in range(800)])
    expected = [(224, 227, 256, "slow_recovery")] if found else []
    assert [(s.start, s.step, s.end, s.type) for s in series.spikes] == expected


@pytest.mark.parametrize("shift, found", [(0.11, False), (0.115, True)])
def test_a_window_median_is_a_level_shift_from_6_of_its_standard_errors(shift, found):
    """A lasting shift from row 200 under every row test and under a block median's line: 0.115 (0.97 sigma) puts the
    median of the window, two blocks, past 6 of its standard errors (thresholds.WINDOW_SIGMAS: 0.94 sigma, 0.112)
    over the baseline of a refresh before both blocks; found where it began (a change point over the window) and
    followed to no_recovery four blocks on, measured from that baseline; 0.11 is noise. The block that showed it
    is no healthy block: no refresh at 255."""
    series, blocks = fed([cycle(i, shift if i >= 200 else 0.0) for i in range(800)])
    if not found:
        assert series.spikes == []
        return
    assert [(s.start, s.step, s.end, s.type, s.baseline) for s in series.spikes] == [(201, 202, 297, "no_recovery",
                                                                                      2.0)]
    # (223 came before; 265 and 297 from the settled level, read again against its first block)
    assert [row for _, _, row in blocks if 200 < row < 300] == [223, 265, 297]


def test_a_two_block_bump_is_seen_by_the_window_median_from_the_third_settled_refresh_on():
    """A bump of 0.13 (1.1 sigma: over the window's line, under a block's) over rows 128-191, just after the baseline
    settled (refreshes at 31, 63, 95): the window's limits are kept from the third refresh on, so the window of rows
    128-191 is tested against the refresh at 95's and the bump is found where it began, a slow recovery when its
    block medians are back. The refresh stretch that showed it ends no block (none at 191 or 223), and the next
    block is counted from the recovery."""
    series, blocks = fed([cycle(i, 0.13 if 128 <= i < 192 else 0.0) for i in range(600)])
    assert [(s.start, s.step, s.end, s.type) for s in series.spikes] == [(129, 132, 193, "slow_recovery")]
    assert [row for _, _, row in blocks if 100 < row < 420] == [127, 159, 256, 288, 320, 352, 384, 416]


@pytest.mark.parametrize("last, level, kind", [(1.0, 0.9, "no_recovery"), (1.0, 1.0, "divergence")])
def test_a_settled_level_is_a_divergence_by_every_block_at_it(last, level, kind):
    """A spike from row 200 that settles 0.9 or 1.0 above a baseline of 2.0, its fourth block (rows 296-327) at
    +1.0 either way: 1.5x the baseline is a divergence (thresholds.DIVERGE_RATIO) when the blocks at the level (within
    a noise sigma of the latest) have their median there, not when only the latest block reaches it."""
    series, _ = fed([cycle(i, (last if 296 <= i < 328 else level) if i >= 200 else 0.0) for i in range(800)])
    assert [(s.start, s.type, s.baseline) for s in series.spikes] == [(200, kind, 2.0)]


@pytest.mark.parametrize("seed", range(1, 6))
def test_a_lasting_offset_in_a_heavy_tailed_batch_loss_is_found_by_the_window_median(tmp_path, seed):
    """A segmentation-style batch loss (log-normal, 20% a row, and a 2.5x hard batch every ~150 rows: Fast-SCNN's
    look-alike) with a 1.22x offset from row 2000: about 1.1 sigma, under a block median's 6 standard errors, so
    on four of these seeds only the creep watch saw it (non_spike_divergence); the window's median sees it, a
    no_recovery starting from a block before the offset to 2 windows after (a change point in such noise is that
    loose: over 12 seeds, -70 to +66 rows)."""
    rng = random.Random(seed)
    rows = []
    for s in range(3000):
        batch = math.exp(0.2 * rng.gauss(0, 1)) * (2.5 if rng.random() < 1 / 150 else 1)
        rows.append(f"{s},{batch * (1.22 if s >= 2000 else 1):.6g}")
    report = spikes.analyze(write(tmp_path, "offset.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    lasting = [(s.type, s.start) for s in report.spikes if s.type != "fast_recovery"]
    assert len(lasting) == 1 and lasting[0][0] == "no_recovery" and 2000 - 32 <= lasting[0][1] <= 2000 + 128
    assert report.to_json()["events"] == []


@pytest.mark.parametrize("shift", [0.5, 0.17])  # found by its rows (0.5 over the 0.36 band) or its block medians
def test_a_spike_on_the_level_a_shift_settled_at_is_its_own_and_not_the_shifts_peak(shift):
    """A lasting shift from row 200, a 3x row at 300 while the shift is still followed (it settles four blocks on):
    once settled, its level is read again from its first block, so the row is a fast recovery of its own over the
    new level, and the shift's peak stays a value of its own. Before, the shift had one spike, its peak the 3x row."""
    values = [cycle(i, shift if i >= 200 else 0.0) for i in range(800)]
    values[300] = 6.0
    series, _ = fed(values)
    assert [(s.start, s.type) for s in series.spikes] == [(200 if shift == 0.5 else 201, "no_recovery"),
                                                          (300, "fast_recovery")]
    shifted, row = series.spikes
    assert shifted.peak < 2.0 + shift + 0.2 and shifted.step != 300  # (its rows: 2 + shift, noise 0.16)
    assert (row.step, row.peak, row.end) == (300, 6.0, 301) and row.baseline == pytest.approx(2.0 + shift, abs=0.05)


@pytest.mark.parametrize("planted", [None, 264])
def test_a_spike_that_decays_into_a_lasting_offset_stays_one_spike(planted):
    """3x at row 200, decaying over ~40 rows to a lasting +0.5: the decay is the spike's own, not a new spike on the
    level it settled at. That level is its blocks from 232 on (within 1 sigma of the last), read against their
    first block (232-263, where the decay ends): a 5.0 row at 264, the first row read again, is a spike of its own."""
    values = [cycle(i, 0.5 + 3.5 * math.exp(-(i - 200) / 8) if i >= 200 else 0.0) for i in range(800)]
    if planted:
        values[planted] = 5.0
    series, _ = fed(values)
    assert [(s.start, s.step, s.type) for s in series.spikes] == \
        [(200, 200, "no_recovery")] + ([(planted, planted, "fast_recovery")] if planted else [])


def test_a_level_shift_in_block_medians_is_back_when_a_block_median_is_in_their_band():
    """The same shift for 64 rows only: the blocks of the spike (from its start, 32 rows each) are followed by their
    medians, and the first back in their noise band (half-way to the limit) is where it recovered: slow. The rows
    of that block are read again after it, so a 3x row among them (280) is a spike of its own, measured against the
    baseline from before the shift."""
    values = [cycle(i, 0.2 if 200 <= i < 264 else 0.0) for i in range(800)]
    values[280] = 6.0
    series, _ = fed(values)
    assert [(s.start, s.step, s.end, s.type) for s in series.spikes] == [(201, 202, 265, "slow_recovery"),
                                                                         (280, 280, 281, "fast_recovery")]


def test_a_level_shift_in_the_first_block_after_a_resume_opens_at_the_resume():
    """After a resume at a refresh (steps back from 287 to 200) the shift is in the first block read since: its 32
    values, all the window knows the steps of, are enough to find it, from the resume's first row."""
    steps = list(range(288)) + list(range(200, 600))
    series, _ = fed([cycle(i) for i in range(288)] + [cycle(i, 0.2) for i in range(288, 688)], steps)
    assert [(s.start, s.type) for s in series.spikes] == [(200, "no_recovery")]


def test_a_shift_that_opens_at_a_resume_is_told_to_rule_out_repeated_data(tmp_path):
    """The shift above opens on the resume's own row: the post-mortem counts that resume as before it, and says so."""
    steps = list(range(288)) + list(range(200, 600))
    values = [cycle(i) for i in range(288)] + [cycle(i, 0.2) for i in range(288, 688)]
    path = write(tmp_path, "run.csv", "step,loss\n" + "".join(f"{s},{v}\n" for s, v in zip(steps, values)))
    report = spikes.analyze(path)
    assert [(s.start_row, s.type) for s in report.spikes] == [(288, "no_recovery")] and report.resumes[0][0] == 288
    assert "A resume (step 200) came before this shift to a higher level" in spikes.postmortem(report)


def test_the_first_block_reports_its_own_first_step():
    _, blocks = fed([cycle(i) for i in range(100)])
    assert blocks == [(0, 31, 31), (32, 63, 63), (64, 95, 95)]


@pytest.mark.parametrize("rate", [0.002, 0.003])
def test_a_divergence_that_keeps_climbing_is_one_spike(rate):
    """A jump to 4.0 at row 300 that keeps climbing (0.8-1.2% of it a row, about a sigma a block): one divergence.
    Re-based at its level, the window's later blocks climb past the block limit each time: no level shift after a
    divergence (until a resume), as the creep watch keeps quiet (a fast-climbing divergence gave two or three)."""
    series, _ = fed([cycle(i) if i < 300 else (4.0 + rate * 4.0 * (i - 300)) * cycle(i) / 2 for i in range(1500)])
    assert [(s.start, s.type) for s in series.spikes] == [(300, "divergence")]


@pytest.mark.parametrize("since, merged", [(32, True), (33, False)])
def test_a_new_spike_joins_a_recovery_only_within_a_block_of_it(since, merged):
    """Back in the band (rows of 1.25 under its 1.3) from the row after a peak, then a row past the limit with the
    rows since the peak still 0.25 over the baseline: up to the 32nd row after the first one back the same spike goes
    on; from the 33rd, a block later, the recovery stands, whatever the level."""
    episode = Episode(0, 0, 3.0, 1.0, 0.1, 1.6, [])
    verdicts = [episode.add(k, k, 1.25) for k in range(1, 1 + since)]
    assert verdicts == [None] * since and episode.pending is not None
    verdict = episode.add(1 + since, 1 + since, 2.5)
    assert (verdict is None) == merged
    assert verdict is None or verdict[:2] == ("fast_recovery", 1)


@pytest.mark.parametrize("fade, verdict", [(0, (129, "fast_recovery", 1)), (260, (161, "slow_recovery", 138))])
def test_a_recovery_is_checked_128_values_after_it_came_back_and_again_a_block_later(fade, verdict):
    """After a peak of 3.0 on a baseline of 1.0 (band 1.3), the loss back in the band from the next row: flat, the
    level is checked against the trend 128 values after the first one back (row 129) and the recovery stands, fast;
    still coming down through the band (a 0.28 excess fading over 260 rows), the check slides on by a block (row
    161), where it is slow: back on the trend at the middle of the first block of 32 that is."""
    episode = Episode(0, 0, 3.0, 1.0, 0.1, 1.6, [])
    for row in range(1, 600):
        found = episode.add(row, row, 1.0 + 0.28 * max(0.0, 1 - row / fade) if fade else 1.0)
        if found:
            break
    assert (row, *found[:2]) == verdict


def test_a_recovery_still_coming_down_at_the_horizon_stands_there():
    """A spike that takes 3,966 rows to come back into the band (1.01), then is up again and still falling at its
    check: the check would slide on by a block, but the spike has been followed for 4,096 values (MAX_FOLLOW) at
    that check (row 4095): the recovery stands there, slow."""
    episode = Episode(0, 0, 3.0, 1.0, 0.001, 1.05, [])
    for row in range(1, 5000):
        x = (1.01 + 0.4 * math.exp(-row / 500) * (1 - row / 3967) if row < 3967 else 1.005 if row < 3972
             else 1.05 - 0.0002 * (row - 3967))
        found = episode.add(row, row, x)
        if found:
            break
    assert (row, episode.count, *found[:2]) == (4095, 4096, "slow_recovery", 3967)


@pytest.mark.parametrize("block_band", [None, 1.07])
def test_the_peak_of_a_spike_is_its_first_highest_row(block_band):
    """Loss values logged to a few decimals repeat: of two rows at the peak value, the first is the peak (for a level
    shift seen in block medians, the highest row of the block that showed it: not the later one at 35)."""
    episode = Episode(0, 0, 1.2, 1.0, 0.1, 1.6, [], block_band=block_band)
    for k in range(1, 40):
        episode.add(k, k, 1.5 if k in (5, 9, 35) else 1.4)
    assert (episode.peak, episode.peak_step) == (1.5, 5)


@pytest.mark.parametrize("descent, settled", [(0.00065, True), (0.0007, False)])
def test_a_spike_still_coming_down_is_followed_while_its_pace_brings_it_back_within_4x_its_age(descent, settled):
    """After a peak at row 0 the loss falls by `descent` a row from 1.45, above the band (1.03) for 600 rows. At the
    fourth block (row 127) the pace of its block medians would bring it back in about 535 rows at 0.00065 a row,
    over 4x its age (thresholds.SETTLE_FACTOR: 508): settled, no_recovery; at 0.0007, 485 rows: still followed."""
    episode = Episode(0, 0, 3.0, 1.0, 0.01, 1.6, [])
    verdicts = {row: episode.add(row, row, 1.45 - descent * row) for row in range(1, 129)}
    found = {row: v[:2] for row, v in verdicts.items() if v}
    assert found == ({127: ("no_recovery", 96)} if settled else {})


@pytest.mark.parametrize("early, row", [(1.248, 129), (1.252, 161)])
def test_an_offset_still_coming_down_by_half_a_sigma_is_looked_at_again_a_block_later(early, row):
    """Back in the band (1.3) at an offset: 1.2 against a baseline of 1.0, noise 0.1. Its 128 values after the first
    one back: an earlier half at `early` and a later one at 1.2. Coming down by more than half a sigma between the
    halves (thresholds.FALL_Z: 0.05) the check slides on by a block; by less, it is a lasting offset there."""
    episode = Episode(0, 0, 3.0, 1.0, 0.1, 1.6, [])
    found = next((r, v[:2]) for r in range(1, 400) if (v := episode.add(r, r, early if r <= 65 else 1.2)))
    assert found == (row, ("no_recovery", 1))


@pytest.mark.parametrize("after, dropped", [(8.95, True), (9.05, False)])
def test_a_resume_drop_is_two_sigma_below_the_level_before_the_resume(after, dropped):
    """The first 32 values after a resume against the level before it (10.0, sigma 0.5): 1.05 lower is a drop
    (thresholds.DROP_Z: 2 sigma, 1.0), 0.95 lower is not."""
    events = []
    watch = ResumeWatch(100, 100, 10.0, types.SimpleNamespace(med=10.0, sigma=0.5), events)
    done = [watch.add(100 + k, 100 + k, after) for k in range(32)]
    assert [e["kind"] for e in events] == (["resume_drop"] if dropped else [])
    assert done[-1] is not dropped  # (after a drop it goes on watching for the jump back)


def test_the_threshold_widens_toward_a_log_normal_tail_from_a_log_spread_of_one_half():
    """thresholds.HEAVY_SPREAD: up to a spread of 0.5 in logs the threshold is the quartiles' 6 sigma; just past it,
    part of the way to a log-normal's 6-sigma point (level x (e^(6 x spread) - 1)), all the way at twice 0.5."""
    assert tail_distance(1.0, 0.6, 0.5) == 0.6
    assert 0.6 < tail_distance(1.0, 0.6, 0.52) < tail_distance(1.0, 0.6, 0.75) < tail_distance(1.0, 0.6, 1.0) == pytest.approx(
        math.expm1(6.0))


@pytest.mark.parametrize("lead, start", [(3, 100), (2, 103)])
def test_a_spike_led_into_by_three_rows_above_the_band_starts_at_the_first(lead, start):
    """Rows 100-102 at 1.45x (above the noise band, under the threshold) lead into a 2.5x row: a level shift that a
    later row pushed past the threshold, so the spike starts where the shift began. Two such rows are fewer than
    half of SHIFT_ROWS: noise before an ordinary spike, which starts at its own row."""
    rng = random.Random(0)
    values = [2.0 * (1 + 0.1 * rng.gauss(0, 1)) for _ in range(300)]
    values[103 - lead:103], values[103] = [2.9] * lead, 5.0
    series = Series("loss")
    for i, x in enumerate(values):
        series.feed(i, i, x)
    series.finish(299)
    assert [s.start for s in series.spikes] == [start]


def test_the_creep_watch_waits_for_four_blocks_and_compares_their_median():
    """One low block median, at the start or later, is no level: the watch compares the median of the latest 4
    (thresholds.CREEP_SMOOTH); a rise of all of them is a creep."""
    for levels, kinds in (([1.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0], []), ([2.0, 2.0, 2.0, 2.0, 1.5, 2.0, 2.0, 2.0], []),
                          ([2.0] * 4 + [2.5] * 4, ["non_spike_divergence"])):
        events = []
        creep = Creep(events)
        for k, level in enumerate(levels):
            creep.add_block(32 * k, 32 * k + 31, 32 * k + 31, level, 2.0, 0.01)
        assert [e["kind"] for e in events] == kinds, levels


def test_a_creep_names_where_the_lowest_level_was_first_reached_and_where_the_rise_began():
    """A plateau held exactly (the same median block after block) is as low as it gets from its first block: the
    low's step is there, not at the plateau's last block; the rise begins at the first block above the noise
    edge."""
    events = creep_events([2.0] * 8 + [2.5] * 4, 0.01)
    assert [(e["low_step"], e["step"]) for e in events] == [(3 * 32 + 31, 8 * 32)]


def creep_events(levels, spread):
    events = []
    creep = Creep(events)
    for k, level in enumerate(levels):
        creep.add_block(32 * k, 32 * k + 31, 32 * k + 31, level, 2.0, spread)
    return events


def test_a_block_exactly_at_the_noise_edge_is_not_where_the_rise_began():
    edge = 2.0 + CREEP_ABS * 2.0  # (the low plus 1% of the run's scale, 2.0: spread 0 leaves no noise term)
    assert [e["step"] for e in creep_events([2.0] * 8 + [edge] + [2.5] * 5, 0.0)] == [9 * 32]


@pytest.mark.parametrize("spread", [0.0, 0.5])
def test_a_level_exactly_at_the_creep_limit_is_no_creep_and_just_past_it_is(spread):
    """The smoothed level must be past both limits: 10% (CREEP_REL) and, for a noisy loss, CREEP_Z standard errors
    of a block median in logs (with spread 0.5 that one is the higher)."""
    limit = max(2.0 + CREEP_REL * 2.0, 2.0 * math.exp(CREEP_Z * MEDIAN_SE * spread))
    assert creep_events([2.0] * 4 + [limit] * 6, spread) == []
    assert [e["kind"] for e in creep_events([2.0] * 4 + [limit * 1.001] * 6, spread)] == ["non_spike_divergence"]


@pytest.mark.parametrize("noise", [0.08, 0.25])
def test_a_noisy_healthy_loss_has_no_level_shift_and_no_creep(tmp_path, noise):
    """The other side: 20k rows of the same losses with nothing planted give no spike and no event. With 25% noise
    the lowest of ~600 single block medians is an extreme of their noise, and later blocks rose 3 standard errors
    above it by chance: a false non_spike_divergence, before the creep watch compared medians of 4 blocks."""
    rows = noisy_rows(7, "none", 0, count=20000, noise=noise)
    report = spikes.analyze(write(tmp_path, "healthy.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert report.spikes == [] and report.to_json()["events"] == []


def test_a_spike_as_a_fast_fall_flattens_is_a_recovery(tmp_path):
    """The other side of the rule above: a fall that slows to its floor after the spike (the later values no longer
    fall at half the pre-spike pace) is judged against the pre-spike level, and a 3x spike there recovers."""
    rng = random.Random(0)
    rows = [f"{s},{(0.002 + 0.3 * math.exp(-s / 40)) * (1 + 0.01 * rng.gauss(0, 1)) * (3 if s == 140 else 1):.6g}"
            for s in range(900)]
    report = spikes.analyze(write(tmp_path, "floor.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.start, s.type) for s in report.spikes] == [(140, "fast_recovery")]


def test_a_spike_in_a_fast_fall_through_zero_is_judged_in_its_own_units(tmp_path):
    """The later values of a fall that crosses zero after the spike have no factor per row (their medians are not both
    positive): the level is judged as a straight line would, and the log reads (a logarithm of them raised)."""
    rng = random.Random(0)
    rows = [f"{s},{(-0.001 + 0.5 * math.exp(-s / 30)) * (3 if s == 100 else 1) + 0.0002 * rng.gauss(0, 1):.6g}"
            for s in range(400)]
    report = spikes.analyze(write(tmp_path, "through_zero.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.start, s.type) for s in report.spikes] == [(100, "fast_recovery")]


def test_a_loss_that_falls_through_zero_is_fitted_in_its_own_units(tmp_path):
    """A loss may be negative (an RL objective, a GRPO loss): the line through logarithms is only for a positive
    window; one that holds 0 or less is fitted as it is, and a spike on it is found."""
    rows = [f"{s},{0 if s == 191 else (2 - s / 100) + 0.002 * math.sin(s * 1.7) + (3 if s == 400 else 0):.6g}"
            for s in range(600)]
    report = spikes.analyze(write(tmp_path, "objective.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert report.values == 600 and [(s.step, s.type) for s in report.spikes] == [(400, "fast_recovery")]


def near_zero_log(tmp_path, bump):
    """A loss from 2.0 down to ~0.0037, then `bump` on top, then on down to new lows."""
    rng = random.Random(1)
    rows = []
    for s in range(3000):
        level = 0.003 + 2.0 * math.exp(-s / 120) + bump(s)
        rows.append(f"{s},{level * (1 + 0.02 * rng.gauss(0, 1)):.6g}")
    return spikes.analyze(write(tmp_path, "near-zero.csv", "step,loss\n" + "\n".join(rows) + "\n"))


def test_a_near_zero_loss_moving_by_a_hair_is_no_divergence(tmp_path):
    """0.0037 to 0.0041 is 11% up, and 0.0004 in a run that started at 2: the absolute floor keeps it quiet."""
    report = near_zero_log(tmp_path, lambda s: 0.0007 + 0.0004 * min(max(s - 1500, 0), 500) / 500)
    assert report.spikes == [] and report.to_json()["events"] == []


def test_a_creep_is_withdrawn_when_the_loss_makes_new_lows(tmp_path):
    rng = random.Random(2)
    climb = lambda s: 0.4 * min(max(s - 1000, 0), 600) / 600 - 0.7 * min(max(s - 1600, 0), 600) / 600  # noqa: E731
    rows = [f"{s},{(3.0 + climb(s)) * (1 + 0.005 * rng.gauss(0, 1)):.6g}" for s in range(2400)]
    lines = "step,loss\n" + "\n".join(rows) + "\n"
    early = spikes.analyze(write(tmp_path, "climb.csv", "\n".join(lines.splitlines()[:1650])))
    assert [e["kind"] for e in early.to_json()["events"]] == ["non_spike_divergence"]  # while it climbs
    assert spikes.analyze(write(tmp_path, "climb-then-low.csv", lines)).to_json()["events"] == []


@pytest.mark.parametrize("seed", range(4))
def test_a_lasting_step_up_inside_the_row_noise_is_found_from_the_step_not_from_the_low(tmp_path, seed):
    """A flat batch loss with 25% noise a row steps up 1.3x at step 4000 and stays (issue 23's offset plant in a
    segmentation log, 1.2 sigma a row: no row or 7-row shift sees it). At the edge of what a block median sees, it is
    found either as a level shift of the block medians (a no_recovery spike where it began) or by the creep watch;
    either way from where the rise began (a change point, within a block or two of 4000), not from the lowest level:
    that is anywhere in the 4000 flat steps before (the creep watch gave step 1880 for this look-alike)."""
    rng = random.Random(seed)
    rows = [f"{s},{(1.3 if s >= 4000 else 1.0) * (1 + 0.25 * rng.gauss(0, 1)):.5f}" for s in range(6000)]
    report = spikes.analyze(write(tmp_path, "step-up.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    events = report.to_json()["events"]
    if report.spikes:
        assert events == [] and [s.type for s in report.spikes] == ["no_recovery"]
        assert 4000 - 32 <= report.spikes[0].start <= 4000 + 32
        return
    assert [e["kind"] for e in events] == ["non_spike_divergence"]
    creep = events[0]
    assert 4000 - 2 * 32 <= creep["step"] <= 4000 + 2 * 32 < creep["detected_step"]
    assert creep["low_step"] < 4000 and creep["to"] > 1.15 * creep["from"]
    draft = spikes.postmortem(report)
    assert f"(lowest, around step {creep['low_step']})" in draft and f"began around step {creep['step']}." in draft


@pytest.mark.parametrize("seed", range(6))
def test_a_lasting_offset_seen_only_in_block_medians_is_no_recovery_from_its_start(tmp_path, seed):
    """A 1.2x offset from step 2000 in a flat loss with 8% noise a row: 2.5 sigma, so a row passes the threshold
    hardly ever and 7 rows in a row above the band rarely, but the median of a block of 32 is 11 of its standard
    errors up (thresholds.BLOCK_SHIFT_Z: 6): a level shift, opened where it began (within a quarter of a block), and
    followed by its block medians, which stay up: no_recovery (it was a creep from the low, or nothing)."""
    rng = random.Random(seed)
    rows = [f"{s},{(1.2 if s >= 2000 else 1.0) * (1 + 0.08 * rng.gauss(0, 1)):.6g}" for s in range(3000)]
    report = spikes.analyze(write(tmp_path, "offset.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    [spike] = report.spikes
    assert 2000 <= spike.start <= 2008 and spike.type == "no_recovery" and spike.step <= spike.end
    assert report.to_json()["events"] == []


@pytest.mark.parametrize("seed", range(6))
def test_a_decaying_bump_whose_rows_dip_into_the_band_is_one_slow_recovery(tmp_path, seed):
    """A 2x bump back to the curve over 100 rows in a batch loss with 25% noise a row (log-normal), 3 sigma at first:
    its rows dip into the row band within a few rows and cross the threshold again a few rows later. One spike from
    its start, slow: a value past the threshold while the rows since the peak still sit above the band of their
    median is the same spike (it gave two or three fast ones, the second starting before the first ended); and a
    recovery whose next block is still above the trend is not fast."""
    rng = random.Random(seed)
    rows = [f"{s},{math.exp(0.25 * rng.gauss(0, 1)) * (2 - (s - 2000) / 100 if 2000 <= s < 2100 else 1):.6g}"
            for s in range(3000)]
    report = spikes.analyze(write(tmp_path, "bump.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    near = [(s.type, s.start) for s in report.spikes if 1990 <= s.start < 2100]
    assert len(near) == 1 and near[0][0] == "slow_recovery" and 2000 <= near[0][1] <= 2002


@pytest.mark.parametrize("gap, wander", [(4, 0.0), (60, 0.0), (60, 0.035)])
def test_two_one_row_spikes_close_together_stay_two_fast_recoveries(tmp_path, gap, wander):
    """Two 3x rows `gap` rows apart in a loss with 5% noise: the rows between are at the level, so the second is a
    new spike, not the first one going on; after a recovery that held for a block, even a level wandering 0.7 sigma
    up (`wander`) between them does not make them one (a wander read that way joined one-row spikes 70 rows apart
    in a real segmentation log)."""
    for seed in range(3):
        rng = random.Random(seed)
        values = [1 + 0.05 * rng.gauss(0, 1) + (wander if 1001 <= s < 1000 + gap else 0) for s in range(3000)]
        values[1000] = values[1000 + gap] = 3.0
        rows = [f"{s},{x:.6g}" for s, x in enumerate(values)]
        report = spikes.analyze(write(tmp_path, "two.csv", "step,loss\n" + "\n".join(rows) + "\n"))
        assert [(s.start, s.type) for s in report.spikes] == [(1000, "fast_recovery"), (1000 + gap, "fast_recovery")]


def test_a_grad_norm_spike_without_a_loss_spike_is_an_event(tmp_path):
    rows = ["step,loss,grad_norm"]
    for s in range(600):
        loss = 3.0 + 0.01 * math.sin(s * 1.7) + (3.0 if s == 450 else 0.0)  # one loss spike, at 450
        grad = 0.3 + 0.01 * math.cos(s * 1.3) + (1.7 if s in (200, 420) else 0.0)  # grad spikes: 200 alone, 420
        rows.append(f"{s},{loss:.5f},{grad:.5f}")  # 30 steps before the loss spike: too far to have led it
    path = write(tmp_path, "grad.csv", "\n".join(rows) + "\n")
    report = spikes.analyze(path)
    assert [(s.step, s.grad_norm_lead) for s in report.spikes] == [(450, None)]
    alone = [(e["step"], e["type"]) for e in report.to_json()["events"] if e["kind"] == "grad_norm_spike"]
    assert alone == [(200, "fast_recovery"), (420, "fast_recovery")]
    pm = tmp_path / "pm.md"
    assert run_cli("spikes.py", path, "--postmortem", pm).returncode == 0
    assert "## Gradient-norm spikes without a loss spike (2)" in pm.read_text()


def test_the_postmortem_names_a_lasting_offset(tmp_path):
    curve, path = synthetic(tmp_path, "lasting_offset", 0)
    pm = tmp_path / "pm.md"
    assert run_cli("spikes.py", path, "--postmortem", pm).returncode == 0
    section = pm.read_text().split("(no_recovery)")[1].split("\n## ")[0]
    assert "lasting offset, not a recovery" in section


@pytest.mark.parametrize("seed", range(2))
def test_planted_grad_norm_spikes_alone_are_events_not_spikes(tmp_path, seed):
    curve, path = synthetic(tmp_path, "grad_spikes", seed)
    report = spikes.analyze(path)
    found = [e["step"] for e in report.to_json()["events"] if e["kind"] == "grad_norm_spike"]
    assert report.spikes == [] and found == [e["step"] for e in curve.truth["events"]]


def test_a_one_row_spike_in_a_sparse_log_is_a_fast_recovery(tmp_path):
    """Logged every 50 steps: the spike is one row, back on the next one, 50 steps later. Fast, not slow."""
    rows = [f"{s},{6.0 if s == 5000 else 3.0 + 0.01 * math.sin(s * 1.7):.4f}" for s in range(0, 10000, 50)]
    report = spikes.analyze(write(tmp_path, "every50.csv", "step,loss\n" + "\n".join(rows) + "\n"))
    assert [(s.step, s.type, s.recovery_steps) for s in report.spikes] == [(5000, "fast_recovery", 50)]


@pytest.mark.parametrize("after", [2.0, 1.3])  # divergence (2x the level) and no_recovery: both rebuild the window
def test_a_run_fed_at_once_leaves_the_series_as_feeding_it_value_by_value(after):
    """Series.feed_run takes healthy stretches at once; when a spike that closes inside the same call rebuilds
    the window (divergence, no_recovery), the values after it must go into the new window. They went into the
    discarded one: the baseline froze until the call ended, and the pure road (the grad norm fed a chunk at a
    time) disagreed with the accelerated one on a synthetic grad_spikes log."""
    rng = random.Random(0)
    values = [1.0 + 0.01 * rng.gauss(0, 1) for _ in range(400)] + [after + 0.01 * rng.gauss(0, 1) for _ in range(600)]
    steps = list(range(len(values)))
    one_by_one, at_once = Series("loss"), Series("loss")
    for step, x in zip(steps, values):
        one_by_one.feed(step, step, x)
    assert at_once.feed_run(steps, values, 0, 0, len(values)) == len(values)
    for series in (one_by_one, at_once):
        series.finish(len(values) - 1)
    assert [s.to_json() for s in at_once.spikes] == [s.to_json() for s in one_by_one.spikes]
    assert [s.type for s in at_once.spikes] == ["divergence" if after == 2.0 else "no_recovery"]
    assert list(at_once.window) == list(one_by_one.window)
    assert (at_once.med, at_once.sigma, at_once.threshold) == (one_by_one.med, one_by_one.sigma, one_by_one.threshold)


def test_a_sudden_lasting_drop_with_no_resume_is_no_spike_and_no_event(tmp_path):
    """refs/loss_patterns.md#a-sudden-drop-after-a-long-slow-stretch says spikes.py reports nothing for it."""
    rng = random.Random(0)
    rows = ["step,loss"]
    for step in range(3000):  # slow fall, then 4.0 -> 2.5 within 60 steps, then slow again
        level = 4.2 - 0.2 * step / 1500 if step < 1500 else 4.0 - 1.5 * min(1, (step - 1500) / 60) - 0.1 * max(0, step - 1560) / 1440
        rows.append(f"{step},{level * (1 + rng.gauss(0, 0.01)):.5f}")
    log = tmp_path / "drop.csv"
    log.write_text("\n".join(rows) + "\n")
    report = spikes.analyze(log).to_json()
    assert (report["spikes"], report["events"]) == ([], [])


def _spikes_of(tmp_path, values):
    """(step, type) of each spike spikes.py finds in a `step,loss` log of these values, one row a step."""
    path = write(tmp_path, "curve.csv", "step,loss\n" + "".join(f"{i},{v!r}\n" for i, v in enumerate(values)))
    return [(s.step, s.type) for s in spikes.analyze(path).spikes]


@pytest.mark.parametrize("start, bump_at", [(64, 100), (192, 228)])  # refresh 3, where the early fit ends; refresh 7
def test_a_full_window_after_three_blocks_is_judged_by_its_median(tmp_path, start, bump_at):
    """Flat at 1.0, then falling 0.002 a row from `start`, with an 8% bump 36 rows into the fall. From the third block
    on (the window full) the baseline is the window's median, 1.0, and the bump stays under its threshold; the line
    through the window's newer half (the early fit, for a short log or the start of a run) would put the baseline
    near 0.94 and call the bump a spike."""
    values = [max(1.0 - 0.002 * max(i - start, 0), 0.5) for i in range(400)]
    assert _spikes_of(tmp_path, values) == []
    values[bump_at] = 1.08
    assert _spikes_of(tmp_path, values) == []


def test_a_rising_start_is_no_trend_for_the_early_baseline(tmp_path):
    """A loss that climbs 1% a row for 50 rows, then stays: only a falling line is fitted early (a rising one would
    put the baseline under the plateau and call the plateau a spike)."""
    values = [1.0 + 0.01 * i for i in range(50)] + [1.5] * 100
    assert _spikes_of(tmp_path, values) == []
    values[45] = 1.55
    assert _spikes_of(tmp_path, values) == []


@pytest.mark.parametrize("rate, height", [(0.95, 2.0), (0.97, 3.0)])
def test_a_spike_in_an_exponential_fall_before_the_third_block_is_found(tmp_path, rate, height):
    """A loss falling by a factor a row from 3.0, a spike at row 70 (the window full, two blocks read): the early fit
    goes on to the third block, in logs once the window is full, and the spike stands out of it."""
    values = [0.01 + 3.0 * rate ** i for i in range(200)]
    values[70] *= height
    assert _spikes_of(tmp_path, values) == [(70, "fast_recovery")]


def test_the_first_1000_training_lines_decide_the_series(tmp_path):
    """A text log's series are the names of its first PREVIEW_ROWS (1000) lines with a loss: a grad norm that first
    appears on line 1001 is not read, one on line 1000 is."""
    for first_with_grad, read in [(1000, "grad_norm"), (1001, None)]:
        lines = [f"step {k} loss {3.0 + 0.01 * (k % 5):.2f}" + (" grad_norm 0.5" if k >= first_with_grad else "")
                 for k in range(1, 1201)]
        report = spikes.analyze(write(tmp_path, "preview.log", "\n".join(lines) + "\n"))
        assert (report.columns.grad, report.values) == (read, 1200)


@pytest.mark.parametrize("batches, steps", [
    ([[(0, 0), (1, 0), (1, 1)], [(1, 5), (1, 6)]], [0, 1, 2, 6, 7]),  # the offset (exactly 1) goes on into the next batch
    ([[(0, 0), (0, 10)], [(1, 0), (1, 10)]], [0, 10, 20, 30]),  # the interval of a batch of two steps
    ([[(0, 0), (0, 10), (None, 10), (1, 0)]], [0, 10, 10, 20]),  # a record with no epoch is left as it is
])
def test_an_epoch_counter_is_composed_across_batches(batches, steps):
    """epoch_steps takes batches of records: where the counter starts again with the epoch it goes on from the last
    step plus the logging interval, whichever batch the records come in."""
    given = [([0] * len(batch), [{"iter": i, **({} if e is None else {"epoch": e})} for e, i in batch])
             for batch in batches]
    assert [r["iter"] for _, records in epoch_steps(given, "iter", "epoch") for r in records] == steps


def test_a_csv_row_that_logs_its_step_again_is_a_resume_by_no_step(tmp_path):
    """A CSV has no repeated_rows filter: a step written twice (a restart from the checkpoint of that very step) is a
    resume with rollback_steps 0, not a step forward."""
    rows = [(k, 3.0 + 0.01 * (k % 5)) for k in range(100)] + [(99, 3.02)]
    rows += [(k, 3.0 + 0.01 * (k % 5)) for k in range(100, 160)]
    path = write(tmp_path, "again.csv", "step,loss\n" + "".join(f"{s},{v}\n" for s, v in rows))
    assert spikes.analyze(path).to_json()["events"] == [{"kind": "resume", "step": 99, "from_step": 99,
                                                         "rollback_steps": 0}]


@pytest.mark.parametrize("spread, height, found", [
    (1.0, 3000.0, [(2000, "fast_recovery")]),  # a converged fine-tune's batch loss: log-normal, its logs spread by 1
    (0.01, 3.0, [(2000, "fast_recovery")]),  # a pretraining loss's 1% noise: the regime the thresholds were tuned on
])
def test_a_heavy_tailed_batch_loss_near_zero_has_spikes_only_beyond_its_own_tail(tmp_path, spread, height, found):
    """Issue 23's T5 and OCR logs: a batch loss near zero whose median falls 5x, each value the median times
    exp(N(0, spread)). Its ordinary tail (values 50x the median every few hundred rows) is no spike and its block
    medians' wander no creep; a one-row plant beyond the tail is found. With 1% noise a 3x row is found as before."""
    rng = random.Random(23)
    lines = ["step,loss"]
    for step in range(3000):
        median = 0.01 * math.exp(-math.log(5) * step / 3000)
        lines.append(f"{step},{median * (height if step == 2000 else math.exp(rng.gauss(0, spread))):.6g}")
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    report = spikes.analyze(tmp_path / "log.csv")
    assert [(s.step, s.type) for s in report.spikes] == found
    assert report.to_json()["events"] == []


def test_a_loss_at_zero_on_a_quarter_of_its_rows_is_read_without_a_log_of_zero(tmp_path):
    """A hinge or RL loss that is exactly 0 on many rows: the quartile under the heavy-tail test is 0, which has no
    logarithm; the log's spread is then taken as 0 (the linear threshold), in the scalar path and the numpy screen."""
    rng = random.Random(3)
    values = [0.0 if k % 3 == 0 else 0.5 + 0.01 * rng.gauss(0, 1) for k in range(3000)]
    values[2001] = 5.0
    (tmp_path / "log.csv").write_text("step,loss\n" + "".join(f"{k},{v}\n" for k, v in enumerate(values)))
    report = spikes.analyze(tmp_path / "log.csv")
    assert [(s.step, s.type) for s in report.spikes] == [(2001, "fast_recovery")]


def test_a_table_of_three_columns_between_two_bars_reads_by_its_header(tmp_path):
    rows = ["step | loss | acc"] + [f"{i} | {2.0 - i * 0.001:.4f} | 0.5" for i in range(1, 200)]
    report = spikes.analyze(write(tmp_path, "train.log", "\n".join(rows) + "\n"))
    assert (report.columns.loss, report.values, report.last_step) == ("loss", 199, 199)


def test_a_trainer_state_json_that_is_not_utf8_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_bytes(b'{"log_history": [{"step": 1, "loss": 1.0, "note": "\xff"}]}')
    proc = run_cli("spikes.py", path)
    assert_one_line_error(proc)
    assert "not a UTF-8 text file" in proc.stderr


def test_a_spike_in_the_only_dataset_series_is_no_series_event(tmp_path):
    """Shared or confined says something only with two datasets or more to compare."""
    rng = random.Random(0)
    rows = ["step,loss,loss/cm4"]
    for s in range(600):
        base = 2.0 * math.exp(-s / 3000)
        rows.append(f"{s},{base * (1 + rng.gauss(0, 0.01)):.5f},{base * (1 + rng.gauss(0, 0.01)) * (3 if s == 300 else 1):.5f}")
    report = spikes.analyze(write(tmp_path, "one.csv", "\n".join(rows) + "\n")).to_json()
    assert report["log"]["dataset_columns"] == ["loss/cm4"] and report["events"] == []


def test_the_table_gives_the_peak_over_a_baseline_under_1(tmp_path, capsys):
    rng = random.Random(0)
    rows = ["step,loss"] + [f"{s},{0.5 * (1 + rng.gauss(0, 0.01)) * (3 if s == 300 else 1):.5f}" for s in range(600)]
    path = write(tmp_path, "low.csv", "\n".join(rows) + "\n")
    assert spikes.main([str(path)]) == 0
    (row,) = [line.split() for line in capsys.readouterr().out.splitlines() if "fast_recovery " in line]
    assert row[:2] == ["300", "fast_recovery"] and float(row[4]) == pytest.approx(3.05, abs=0.01)  # x base


def test_a_post_mortem_of_a_lasting_rise_from_a_loss_of_0(tmp_path):
    """A baseline of 0 has no ratio: the settled level is said without a percentage, not divided by 0."""
    path = write(tmp_path, "zero.csv", "step,loss\n" + "".join(f"{s},{0.0 if s < 300 else 1.0}\n" for s in range(900)))
    report = spikes.analyze(path)
    assert [(s.type, s.baseline) for s in report.spikes] == [("no_recovery", 0.0)]
    assert "% above the pre-spike" not in spikes.postmortem(report)


@pytest.mark.parametrize("drop, flagged", [(0.0095, False), (0.0105, True)])
def test_a_resume_drop_starts_at_1_percent_below_the_level_before(tmp_path, drop, flagged):
    """DROP_REL: after a resume from step 400 to 300, the loss 0.95% or 1.05% lower (noise 0.05%, far past DROP_Z)."""
    rng = random.Random(0)
    rows = ["step,loss"] + [f"{s},{2.0 * (1 + rng.gauss(0, 0.0005)):.6f}" for s in range(400)]
    rows += [f"{s},{2.0 * (1 - drop) * (1 + rng.gauss(0, 0.0005)):.6f}" for s in range(300, 700)]
    events = spikes.analyze(write(tmp_path, "resumed.csv", "\n".join(rows) + "\n")).to_json()["events"]
    assert [(e["kind"], e["step"]) for e in events] == [("resume", 300)] + [("resume_drop", 300)] * flagged


def test_a_dataset_spike_far_from_the_main_losss_own_spike_is_not_in_main(tmp_path):
    rng = random.Random(0)
    rows = ["step,loss,loss/a,loss/b"]
    for s in range(600):
        main, a, b = (2.0 * (1 + rng.gauss(0, 0.01)) for _ in range(3))
        rows.append(f"{s},{main * (3 if s == 100 else 1):.5f},{a * (3 if s == 400 else 1):.5f},{b:.5f}")
    report = spikes.analyze(write(tmp_path, "datasets.csv", "\n".join(rows) + "\n")).to_json()
    assert [(s["step"], s["type"]) for s in report["spikes"]] == [(100, "fast_recovery")]
    assert [(e["step"], e["scope"], e["in_main"]) for e in report["events"]] == [(400, "confined", False)]


@pytest.mark.parametrize("interval", [0, -5, 2.5])
def test_golden_values_with_a_step_interval_that_is_no_positive_whole_number_are_refused(tmp_path, interval):
    golden = {"lm loss": {"start_step": 0, "end_step": 99, "step_interval": interval, "values": [3.0] * 100}}
    proc = run_cli("spikes.py", write(tmp_path, "golden.json", json.dumps(golden)))
    assert_one_line_error(proc)
    assert "JSON log must be a trainer_state.json (with log_history), Megatron-LM golden values" in proc.stderr


@pytest.mark.parametrize("values, said", [(spikes.MIN_POINTS, True), (spikes.MIN_POINTS + 1, False)])
def test_the_summary_says_when_a_log_is_too_short_to_detect_anything(tmp_path, values, said):
    """MIN_POINTS values make the baseline; detection needs one more."""
    log = write(tmp_path, "log.csv", "step,loss\n" + "\n".join(f"{i},{3.0 - 0.01 * i}" for i in range(values)))
    text = spikes.summary(spikes.analyze(log))
    assert ("detection needs at least" in text) is said, text
