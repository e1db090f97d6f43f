"""spikes.py --plot, decision by decision (issue 27: its figure had no test but "a PNG is written"): the panels, the
NaN line, a creep's shaded span, the faded rolled-back data, the log scale's threshold and the labels kept. The figure
is read back from matplotlib instead of the PNG; the report is a stand-in with the fields plot() reads."""
from pathlib import Path
from types import SimpleNamespace

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from spikelog import plot as spike_plot  # noqa: E402


def curve(*segments):
    """A stand-in for a Report curve: segments() gives {segment: (steps, values)}."""
    return SimpleNamespace(buckets=[None], segments=lambda: dict(enumerate(segments)))


def report(grad=False, nan_step=None, events=(), spikes=(), loss=None):
    steps = list(range(100))
    loss = loss or curve((steps, [2.0 - 0.001 * s for s in steps]))
    curves = {"loss": loss, **({"grad_norm": curve((steps, [1.0] * 100))} if grad else {})}
    return SimpleNamespace(columns=SimpleNamespace(loss="loss", extras=[], grad="grad_norm" if grad else None,
                                                   loss_label="loss"),
                           curves=curves, dataset_spikes={}, resumes=[], nan_step=nan_step, spikes=list(spikes),
                           events=list(events), path=Path("run.csv"))


@pytest.fixture
def drawn(monkeypatch):
    """plot() on a report; returns the figure it would have written."""
    figures = []
    monkeypatch.setattr(spike_plot, "write_output", lambda out, write, force: figures.append(plt.gcf()))

    def draw(rep):
        spike_plot.plot(rep, "run.png")
        return figures[-1]
    return draw


def labels(fig):
    return [line.get_label() for ax in fig.axes for line in [*ax.lines, *ax.patches, *ax.collections]]


@pytest.mark.parametrize("grad, panels, height", [(True, 2, 5.4), (False, 1, 4.0)])
def test_a_logged_grad_norm_gets_its_own_panel(drawn, grad, panels, height):
    fig = drawn(report(grad=grad))
    assert len(fig.axes) == panels and tuple(fig.get_size_inches()) == pytest.approx((9, height))


def test_the_first_nan_is_a_red_line_at_its_step_and_no_nan_draws_none(drawn):
    assert "first NaN/inf (step 30)" in labels(drawn(report(nan_step=30)))
    assert not any(label.startswith("first NaN") for label in labels(drawn(report())))


def test_a_creep_is_shaded_from_its_start_to_its_last_step(drawn):
    creep = {"kind": "non_spike_divergence", "step": 40, "last_step": 70}
    [span] = [p for p in drawn(report(events=[creep])).axes[0].patches if p.get_label() == "divergence without a spike"]
    left = span.get_x() if hasattr(span, "get_width") else min(x for x, _ in span.get_xy())  # a Rectangle, or a Polygon
    right = left + span.get_width() if hasattr(span, "get_width") else max(x for x, _ in span.get_xy())  # (older)
    assert (left, right) == (40, 70)


@pytest.mark.parametrize("spike, notes", [(False, 1), (True, 0)])
def test_repeated_data_is_shaded_and_its_jump_back_noted_unless_a_spike_marks_it(drawn, spike, notes):
    """A resume over repeated data: shaded from the resume to the jump back, which is noted as the true level; a creep's
    span gets no such note, nor does a jump back that is a spike of its own (its label says so)."""
    repeat = {"kind": "repeat_data", "resume_step": 30, "step": 60, "high": 1.9, "spike": spike}
    creep = {"kind": "non_spike_divergence", "step": 70, "last_step": 90}
    ax = drawn(report(events=[repeat, creep])).axes[0]
    assert "repeated data after a resume" in [p.get_label() for p in ax.patches]
    noted = [t for t in ax.texts if t.get_text() == "new data: back to the true level, no spike"]
    assert [t.xy for t in noted] == [(60, 1.9)] * notes


def test_data_a_later_resume_went_back_over_is_drawn_faded_from_the_resume_step_on():
    calls = []
    ax = SimpleNamespace(plot=lambda xs, ys, **style: calls.append((list(xs), style.get("alpha"))))
    spike_plot._draw(ax, curve((list(range(10)), [1.0] * 10), (list(range(5, 12)), [2.0] * 7)), "tab:blue", "loss")
    assert [(xs[0], xs[-1], alpha) for xs, alpha in calls] == [(0, 4, None), (5, 9, 0.25), (5, 11, None)]


@pytest.mark.parametrize("high, log", [(5.0, True), (4.99, False)])
def test_a_curve_spanning_5x_or_more_gets_a_log_scale(high, log):
    fig, ax = plt.subplots()
    spike_plot._scale(ax, [1.0, high], 5, ticker)
    assert (ax.get_yscale() == "log") == log
    plt.close(fig)


def test_labels_alternate_below_and_above_their_spikes(drawn):
    """Neighbouring labels would overlap on one side: the first goes below its marker, the next above, and so on."""
    spikes = [SimpleNamespace(type="slow_recovery", step=10 * n, peak=3.0, baseline=1.0) for n in range(1, 4)]
    texts = [t for t in drawn(report(spikes=spikes)).axes[0].texts if t.get_text() == "slow recovery"]
    assert [t.xyann[1] for t in texts] == [-10, 5, -10]


def test_of_many_spikes_the_12_tallest_that_are_not_fast_recoveries_are_labelled():
    spikes = [SimpleNamespace(type="slow_recovery", step=s, peak=2.0 + s, baseline=1.0) for s in range(14)]
    spikes.append(SimpleNamespace(type="fast_recovery", step=99, peak=100.0, baseline=1.0))
    kept = spike_plot._labelled(spikes)
    assert [s.step for s in kept] == list(range(13, 1, -1))  # tallest first, the fast one left out
    assert spike_plot._labelled(spikes[:6]) == spikes[:6]  # a few: all of them


def test_each_spike_type_gets_a_marker_in_its_colour_and_a_legend_count(drawn):
    spikes = [SimpleNamespace(type=kind, step=10 * n, peak=3.0, baseline=1.0)
              for n, kind in enumerate(["fast_recovery", "fast_recovery", "no_recovery"], 1)]
    fig = drawn(report(spikes=spikes))
    marked = {c.get_label(): [tuple(p) for p in c.get_offsets()] for c in fig.axes[0].collections}
    assert marked == {"fast_recovery (2)": [(10.0, 3.0), (20.0, 3.0)], "no_recovery (1)": [(30.0, 3.0)]}


def test_the_plots_curve_keeps_where_a_tied_extreme_first_appears_when_it_merges_buckets(monkeypatch):
    """A bucket draws its lowest and highest value at the step each first appears, before and after buckets merge: a
    flat stretch is one point per bucket, not two."""
    from spikelog.detect import Curve

    monkeypatch.setattr(Curve, "LIMIT", 4)
    curve = Curve()
    for step in range(20):
        curve.add(0, step, 1.0)
    steps, values = curve.segments()[0]
    assert steps == [b[1] for b in curve.buckets] == list(range(0, 20, curve.size)) and set(values) == {1.0}
