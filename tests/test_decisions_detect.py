"""Decisions of the spike log analyser's main pass (spikelog/detect/__init__.py) pinned at their boundaries, found by
mutation testing: the plot curve's bucket limit, the run each finding is in, and which chunks take the fast road of
healthy blocks (none that repeats the last step, none while the plot's curves are kept)."""
import pytest

from spikelog.detect import Curve, analyze


def _log(tmp_path, steps):
    """A CSV loss log with these steps, the loss a flat 2.0 with a little wobble."""
    path = tmp_path / "log.csv"
    path.write_text("step,loss\n" + "".join(f"{step},{2.0 + 0.01 * (step % 3)}\n" for step in steps))
    return path


@pytest.mark.parametrize("points, size", [(Curve.LIMIT, 1), (Curve.LIMIT + 1, 2)])
def test_a_curve_halves_its_buckets_only_past_its_limit(points, size):
    """LIMIT buckets of one point each are kept as they are; the next one halves them (two points a bucket)."""
    curve = Curve()
    for step in range(points):
        curve.add(0, step, float(step))
    assert curve.size == size


def test_a_resume_in_the_second_run_of_a_log_says_it_is_in_run_2(tmp_path):
    """Steps 1-10, again 1-10 (another run), then back to 5: the resume is in run 2, with two runs in the log."""
    report = analyze(_log(tmp_path, [*range(1, 11), *range(1, 11), *range(5, 9)]), accelerate=False).to_json()
    assert [e.get("run") for e in report["events"] if e["kind"] == "resume"] == [2]


def test_a_repeated_step_in_numpy_columns_is_a_resume(tmp_path):
    """Step 9 logged twice, read as numpy columns: the second one goes back 0 steps, a resume, not a healthy row."""
    pytest.importorskip("pandas")  # the numpy columns come from the pandas reader
    report = analyze(_log(tmp_path, [*range(10), 9, *range(10, 20)]), accelerate=True).to_json()
    assert [(e["step"], e["rollback_steps"]) for e in report["events"] if e["kind"] == "resume"] == [(9, 0)]


def test_the_kept_loss_curve_holds_every_step_of_a_healthy_log(tmp_path):
    """With the plot's curves kept, a healthy log read as lists goes row by row: its loss curve has each step."""
    report = analyze(_log(tmp_path, range(40)), keep_curves=True, accelerate=False)
    assert report.curves["loss"].segments()[0][0] == list(range(40))
