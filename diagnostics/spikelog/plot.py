"""A Report as a figure: the loss with every spike marked by type, grad norm below it when logged."""
import math
from pathlib import Path

from . import CliError, json_int
from .output import write_output
from .report import spike_height


TYPE_COLORS = {"fast_recovery": "tab:green", "slow_recovery": "tab:orange",
               "no_recovery": "tab:purple", "divergence": "tab:red"}
MAX_LABELS = 12  # more text labels than this hide the curve


def plot(report, out, force=False):
    """Write a PNG: the loss with every spike marked by type; grad norm below it when logged."""
    try:  # lazy: only --plot needs matplotlib
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install matplotlib") from None
    cols = report.columns
    grad_curve = report.curves.get(cols.grad) if cols.grad else None
    has_grad = bool(grad_curve and grad_curve.buckets)
    fig, axes = plt.subplots(2 if has_grad else 1, 1, figsize=(9, 5.4 if has_grad else 4), sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": [3, 1] if has_grad else [1]})
    ax = axes[0][0]
    shown = []
    for n, name in enumerate([cols.loss, *cols.extras]):
        color = "tab:blue" if n == 0 else f"C{n + 1}"
        shown += _draw(ax, report.curves[name], color, name)
        marked = report.dataset_spikes.get(name)
        if marked:  # a dataset's own spikes: shared with the other datasets or confined to this one
            ax.scatter([s.step for s in marked], [s.peak for s in marked], s=14, marker="v", color=color, zorder=3)
    for _, step, _ in report.resumes:
        ax.axvline(step, color="grey", ls=":", lw=1)
    if report.resumes:
        ax.plot([], [], color="grey", ls=":", label="resume (steps go back; faded: rolled-back data)")
    if report.nan_step is not None:
        ax.axvline(report.nan_step, color="red", ls="--", lw=1, label=f"first NaN/inf (step {json_int(report.nan_step)})")
    for kind, color in TYPE_COLORS.items():
        marked = [s for s in report.spikes if s.type == kind]
        if marked:
            ax.scatter([s.step for s in marked], [s.peak for s in marked], s=26, color=color, zorder=3,
                       edgecolor="black", linewidth=0.5, label=f"{kind} ({len(marked)})")
    for n, s in enumerate(_labelled(report.spikes)):
        ax.annotate(s.type.replace("_", " "), (s.step, s.peak), textcoords="offset points",
                    xytext=(4, 5 if n % 2 else -10), fontsize=7, color=TYPE_COLORS[s.type])
    shades = {"non_spike_divergence": ("tab:red", "divergence without a spike"),
              "repeat_data": ("tab:cyan", "repeated data after a resume")}
    for e in report.events:
        if e["kind"] in shades:
            color, label = shades[e["kind"]]
            creep = e["kind"] == "non_spike_divergence"
            start, end = (e["step"], e["last_step"]) if creep else (e["resume_step"], e["step"])
            ax.axvspan(start, end, color=color, alpha=0.12, label=label)
            shades[e["kind"]] = (color, None)
            if not creep and not e["spike"]:  # the jump back up is marked as what it is, not as a spike
                ax.annotate("new data: back to the true level, no spike", (e["step"], e["high"]),
                            textcoords="offset points", xytext=(6, 8), fontsize=7, color="teal")
    _scale(ax, shown, 5, ticker)  # early training and big spikes can span a decade
    ax.set_ylabel(cols.loss_label)
    ax.set_title(f"{report.path.name}: {len(report.spikes)} spikes", fontsize=10)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    ax.grid(alpha=0.3)
    if has_grad:
        gax = axes[1][0]
        _scale(gax, _draw(gax, grad_curve, "tab:gray", None), 10, ticker)
        alone = [e for e in report.events if e["kind"] == "grad_norm_spike"]
        if alone:  # the loss did not move: marked on the grad-norm panel only
            gax.scatter([e["step"] for e in alone], [e["peak"] for e in alone], s=22, marker="^", color="tab:red",
                        zorder=3, label=f"grad-norm spike, no loss spike ({len(alone)})")
            gax.legend(fontsize=7, loc="best", framealpha=0.85)
        gax.set_ylabel(cols.grad)
        gax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    try:
        write_output(out, lambda handle: fig.savefig(handle, dpi=90, format=Path(out).suffix[1:].lower()), force)
    finally:
        plt.close(fig)


def _draw(ax, curve, color, label):
    """Plot each resume segment; data a later rollback went back over is drawn faded. Returns the values."""
    segments = sorted(curve.segments().items())
    values = []
    for i, (seg, (steps, vals)) in enumerate(segments):
        cut = min((s[0] for _, (s, _) in segments[i + 1:] if s), default=math.inf)
        live = [(s, v) for s, v in zip(steps, vals) if s < cut]
        dead = [(s, v) for s, v in zip(steps, vals) if s >= cut]
        if live:
            ax.plot(*zip(*live), lw=0.7, color=color, label=label)
            label = None
        if dead:
            ax.plot(*zip(*dead), lw=0.6, color=color, alpha=0.25)
        values += vals
    return values


def _scale(ax, values, ratio, ticker):
    """Log scale when all values are positive and span `ratio` or more, with 1-2-5 ticks labelled plainly."""
    if values and min(values) > 0 and max(values) / min(values) >= ratio:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _labelled(spikes):
    """Which spikes get a text label: all of a few; of many, the tallest that are not fast recoveries."""
    if len(spikes) <= 6:
        return spikes
    return sorted((s for s in spikes if s.type != "fast_recovery"), key=spike_height, reverse=True)[:MAX_LABELS]
