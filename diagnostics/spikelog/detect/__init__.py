"""Detection: a log's chunks, fed row by row (healthy stretches a block at a time), into spikes and events."""
import bisect
import itertools
import math
import operator
import statistics
from pathlib import Path

from .. import CliError, json_clean, json_int
from ..read import open_log
from ..read.columns import Unparsed, number
from .events import Creep, ResumeWatch, grad_only_events, link_grad_leads, resume_spike_events, series_spike_events
from .series import Series
from .thresholds import BLOCK, MIN_POINTS, REFRESH


class Curve:
    """A bounded copy of one series for the plot: buckets keep their lowest and highest value."""

    LIMIT = 4000  # buckets; two points each is plenty for a 10-inch wide figure

    def __init__(self):
        self.buckets = []  # [segment, step_lo, lo, step_hi, hi, count]
        self.size = 1

    def add(self, segment, step, x):
        b = self.buckets[-1] if self.buckets else None
        if b is None or b[0] != segment or b[5] >= self.size:
            self.buckets.append([segment, step, x, step, x, 1])
            if len(self.buckets) > self.LIMIT:
                self._halve()
            return
        if x < b[2]:
            b[1], b[2] = step, x
        if x > b[4]:
            b[3], b[4] = step, x
        b[5] += 1

    def _halve(self):
        merged = []
        for b in self.buckets:
            last = merged[-1] if merged else None
            if last is not None and last[0] == b[0] and last[5] < 2 * self.size:
                if b[2] < last[2]:
                    last[1], last[2] = b[1], b[2]
                if b[4] > last[4]:
                    last[3], last[4] = b[3], b[4]
                last[5] += b[5]
            else:
                merged.append(list(b))
        self.buckets = merged
        self.size *= 2

    def segments(self):
        """{segment: (steps, values)} in step order."""
        out = {}
        for seg, s_lo, lo, s_hi, hi, _ in self.buckets:
            steps, values = out.setdefault(seg, ([], []))
            for s, v in sorted({(s_lo, lo), (s_hi, hi)}):
                steps.append(s)
                values.append(v)
        return out


class Report:
    """Everything found in one log; `to_json()` is the DESIGN.md contract (plus a `log` summary)."""

    def __init__(self, path, fmt, cols):
        self.path, self.format, self.columns = Path(path), fmt, cols
        self.spikes, self.events, self.nan_step = [], [], None
        self.values = 0
        self.first_step = self.last_step = None
        self.curves = {}
        self.resumes = []  # (row, step, step before the resume)
        self.runs = 1  # runs written one after another into the log, each read on its own
        self.run_rows = []  # the row each run after the first starts at
        self.dataset_spikes = {}  # series name -> its own spikes, when there are per-dataset losses

    def run_of(self, row):
        """The number of the run a row belongs to (1 for the first), None for no row (a log-wide event)."""
        return None if row < 0 else bisect.bisect_right(self.run_rows, row) + 1

    def to_json(self):
        events = sorted(self.events, key=lambda e: e["_row"])
        spikes = [s.to_json() for s in self.spikes]
        events = [{k: json_clean(v) for k, v in e.items() if k != "_row"} for e in events]
        if self.runs > 1:  # a log split into runs: each spike and event says which run it is in
            for spike, found in zip(spikes, self.spikes):
                spike["run"] = self.run_of(found.start_row)
            for event, found in zip(events, sorted(self.events, key=lambda e: e["_row"])):
                event["run"] = self.run_of(found["_row"])
        return {
            "spikes": spikes,
            "events": events,
            "nan_step": json_int(self.nan_step),
            "log": {"path": str(self.path), "format": self.format, "loss_column": self.columns.loss,
                    "loss_parts": self.columns.parts[1:] and self.columns.parts,
                    "grad_norm_column": self.columns.grad, "lr_column": self.columns.lr,
                    "dataset_columns": self.columns.extras, "values": self.values,
                    "first_step": json_int(self.first_step), "last_step": json_int(self.last_step),
                    "runs": self.runs},
        }


def analyze(path, loss_name=None, keep_curves=False, fmt=None, accelerate=None):
    """Read one log and return its Report. Memory: one window per series plus what is found. `accelerate`: read
    a CSV with pandas and screen it with numpy (None: for a big file when pandas is installed); same report."""
    fmt, cols, rows, unparsed = open_log(path, loss_name, fmt, accelerate)

    report = Report(path, fmt, cols)
    events = report.events
    creep = Creep(events)
    main = Series(cols.loss, on_block=creep.add_block, on_reset=creep.reset)
    grad = Series(cols.grad)
    extras = [Series(name) for name in cols.extras]
    curves = report.curves
    if keep_curves:
        curves.update((name, Curve()) for name in [cols.loss, cols.grad, *cols.extras] if name)
    watch = None  # the ResumeWatch of the latest resume, while it still has something to say
    has_step, has_grad, has_lr = cols.step is not None, cols.grad is not None, cols.lr is not None
    first_step = run_first = run_start = None  # the first step of the log, and of the run now read; its first loss
    last_step = -math.inf
    values = segment = 0
    row = 0  # the row of the file (data rows only) at the start of the chunk
    screen = None  # detect/screen.py, once the reader gives numpy columns
    feed_loss, feed_grad = main.feed, grad.feed  # bound once: the loop below runs once per row
    for steps, losses, grads, lrs, extra, complete in _increasing_pieces(rows) if has_step else rows:
        n = len(losses)
        if not has_step:
            steps = range(row, row + n)
        arrays = None  # numpy columns from the accelerated CSV reader: screened in numpy, lists made when needed
        if not isinstance(losses, list):
            if screen is None:
                from . import screen  # numpy: imported only when the reader already has (once: ~20 us a time)
            arrays = (steps, losses, grads, lrs, extra)
            fast = not curves and steps[0] > last_step and screen.increasing(steps)
        else:
            fast = complete and not curves and steps[0] > last_step and _increasing(steps)
        listed = arrays is None  # the columns are lists (made from the arrays on the first need)
        sides = _sides(grad, extras, grads, extra)  # (series, column) fed alongside the loss
        i = 0
        while i < n:
            stuck = False  # the stretch from i to the next refresh holds a spike: row by row to there
            if fast and watch is None and main.episode is None:  # healthy stretches, a block at a time
                done = i
                if arrays is not None:  # as many refreshes at once as are plainly healthy
                    done = screen.advance(main, arrays[0], arrays[1], row, i, n, (steps, losses) if listed else None)
                if done < n:
                    if not listed:
                        steps, losses, grads, lrs, extra = _lists(arrays)
                        listed = True
                    scalar_to = n if arrays is None else min(n, done + screen.SCALAR_SPAN)  # then numpy again
                    done = main.feed_run(steps, losses, row, done, scalar_to, strict=True)
                    stuck = done < scalar_to
                if done > i:  # (numpy steps become Python ints; list steps stay as the log wrote them)
                    if first_step is None:
                        first_step = run_first = steps[i] if listed else int(steps[i])
                        run_start = float(losses[i])
                    last_step = steps[done - 1] if listed else int(steps[done - 1])
                    values += done - i
                    i = done
                    if i == n:
                        break
            if not listed:
                steps, losses, grads, lrs, extra = _lists(arrays)
                listed = True
            while i < n:  # row by row: spikes, resumes, missing values, NaN, the plot's curves
                if has_lr and main.episode is not None and main.episode.lr is None:
                    _start_lr(main.episode, lrs, row, n, cols.lr)
                if fast and watch is not None and watch.gap is None and main.episode is None and main.med is not None:
                    done = main.feed_run(steps, losses, row, i, min(n, i + watch.quiet()), strict=True)
                    if done > i:  # healthy values after a resume, before the block that tells a drop: at once
                        watch.keep(losses[i:done])
                        values += done - i
                        last_step = steps[done - 1]
                        i = done
                        continue
                if fast and watch is None and main.episode is not None and main.episode.count > 1:
                    done = main.follow_run(steps, losses, row, i, n)  # what the open spike only queues: at once
                    if done > i:
                        if has_grad:
                            _grad_peak(main.episode, grads[i:done])
                        values += done - i
                        last_step = steps[done - 1]
                        i = done
                        continue
                r = row + i
                step, loss = steps[i], losses[i]
                gnorm = grads[i] if grads is not None else None
                if step is None:
                    step = last_step + 1 if values else r
                if loss is not None:
                    if step <= last_step and _new_run(step, loss, run_first, run_start, main):  # runs one after another
                        events.append({"kind": "new_run", "step": step, "from_step": last_step, "run": report.runs + 1,
                                       "_row": r})
                        report.runs += 1
                        report.run_rows.append(r)
                        for series in (main, grad, *extras):
                            series.restart(r)
                        creep.reset()
                        segment += 1
                        watch = None
                        run_first, run_start = step, loss
                    elif step <= last_step:  # a resume or a rollback
                        events.append({"kind": "resume", "step": step, "from_step": last_step,
                                       "rollback_steps": last_step - step, "_row": r})
                        report.resumes.append((r, step, last_step))
                        main.rollback(step, r)
                        creep.reset()
                        segment += 1
                        recent = list(main.window)[-BLOCK:]  # the level just before the resume
                        watch = None
                        if recent and main.med is not None:
                            watch = ResumeWatch(step, r, statistics.median(recent), main, events)
                    elif first_step is None:
                        first_step = run_first = step
                        run_start = loss
                    last_step = step
                    values += 1
                    feed_loss(step, r, loss)
                    if watch is not None and watch.add(step, r, loss):
                        watch = None
                    episode = main.episode
                    if episode is not None:
                        if has_lr and episode.lr is None:
                            _start_lr(episode, lrs, row, n, cols.lr)
                        if has_grad and gnorm is not None and gnorm - gnorm == 0:
                            episode.grad_peak = gnorm if episode.grad_peak is None else max(episode.grad_peak, gnorm)
                    if curves and loss - loss == 0:
                        curves[cols.loss].add(segment, step, loss)
                if not fast:  # (in a complete chunk the other series take it whole, below)
                    if gnorm is not None:
                        feed_grad(step, r, gnorm)
                        if curves and gnorm - gnorm == 0:
                            curves[cols.grad].add(segment, step, gnorm)
                    for series, column in zip(extras, extra):
                        x = column[i]
                        if x is not None:
                            series.feed(step, r, x)
                            if curves and x - x == 0:
                                curves[series.name].add(segment, step, x)
                i += 1
                if main.episode is not None:
                    stuck = False  # once it closes, back to the blocks at once
                elif fast and watch is None and (not stuck or main.until_refresh == REFRESH):
                    break  # back to the blocks
        if fast:  # the other series do not wait on the loss: the whole chunk at once, their own spikes value by value
            for (series, column), (_, listed_column) in zip(sides, _sides(grad, extras, grads, extra)):
                if arrays is None:
                    series.feed_run(steps, listed_column, row, 0, n)
                else:
                    screen.feed(series, arrays[0], column, row, 0, n, (steps, listed_column) if listed else None)
        row += n
    row -= 1  # the last row
    if values == 0:
        bad = unparsed.columns.get(cols.loss)
        why = (" (header only)" if row < 0 else
               f" ({bad[0]} cells are not numbers, the first on line {bad[1]})" if bad else "")
        raise CliError(f"no numeric values in loss column '{cols.loss}'{why}")
    report.values, report.first_step, report.last_step = values, first_step, last_step
    if values <= MIN_POINTS:  # say so: "spikes: 0" alone would read as a clean run
        events.append({"kind": "too_short", "step": None, "values": values, "needed": MIN_POINTS + 1, "_row": -1})
    for series in (main, grad, *extras):
        series.finish(row)
    report.spikes = main.spikes
    report.dataset_spikes = {series.name: series.spikes for series in extras}
    report.nan_step = main.nonfinite[0][0] if main.nonfinite else None
    link_grad_leads(main.spikes, grad.spikes, report.resumes)
    grad_only_events(main.spikes, grad.spikes, events)
    resume_spike_events(main.spikes, report.resumes, events)
    series_spike_events(main, extras, events)
    for series in (main, grad, *extras):
        for first, last, count, first_row in series.nonfinite:
            events.append({"kind": "nonfinite", "step": first, "last_step": last, "count": count,
                           "series": series.name, "_row": first_row})
    if unparsed.repeated is not None:
        events.append({"kind": "repeated_rows", "step": None, "count": unparsed.repeated[0],
                       "first_line": unparsed.repeated[1], "_row": -1})
    for name, (count, line) in unparsed.columns.items():
        events.append({"kind": "unparsed", "step": None, "column": name, "count": count, "first_line": line,
                       "_row": -1})
    return report


def _new_run(step, loss, run_first, run_start, main):
    """The steps went back to the start of the run (or before it) and the loss with them, nearer the run's start (its
    first loss, or its highest baseline) than its latest baseline: another run was written after this one, not a
    resume. (The first loss counts where a short run fell before its first baseline: DiT's log of 50 rows.)"""
    if run_first is None or step > max(run_first, 1):
        return False
    return main.med is None or min(abs(loss - main.scale), abs(loss - run_start)) < abs(loss - main.med)


def _increasing_pieces(chunks):
    """The chunks cut where the steps go back (a resume, a rollback), that row alone: the stretches between are
    read a block at a time, and only the row that goes back is read on its own (a chunk holds up to ~120k rows)."""
    previous = None  # the last step of the previous complete chunk
    for chunk in chunks:
        steps, complete = chunk[0], chunk[5]
        if not complete or len(steps) < 2:
            previous = steps[-1] if complete and len(steps) else None
            yield chunk
            continue
        if isinstance(steps, list):
            back = [] if _increasing(steps) else [j for j in range(1, len(steps)) if steps[j] <= steps[j - 1]]
        else:
            import numpy
            back = (numpy.flatnonzero(numpy.diff(steps) <= 0) + 1).tolist()
        if previous is not None and steps[0] <= previous:
            back.insert(0, 0)
        previous = steps[-1]
        if not back:
            yield chunk
            continue
        cuts = sorted({0, *back, *(j + 1 for j in back), len(steps)})
        for a, b in zip(cuts, cuts[1:]):
            yield tuple(None if column is None else column[a:b] for column in chunk[:4]) + ([x[a:b] for x in chunk[4]], True)


def _start_lr(episode, lrs, row, n, name):
    """The learning rate on the spike's first row, when this chunk holds it: a level shift opens its spike rows
    after the row it started on (the rows that showed the shift), maybe a chunk later (then none is known)."""
    k = episode.start_row - row
    if 0 <= k < n:
        episode.lr = number(lrs[k], name, None, Unparsed())


def _grad_peak(episode, grads):
    """The highest finite grad norm logged while the spike is open, as the row loop keeps it."""
    total = sum(grads)
    if total - total != 0:  # some are not finite (or the sum overflowed): skip those
        grads = [g for g in grads if g - g == 0]
        if not grads:
            return
    top = max(grads)
    episode.grad_peak = top if episode.grad_peak is None else max(episode.grad_peak, top)


def _sides(grad, extras, grads, extra):
    """(series, column) of the series fed alongside the loss: the grad norm (if logged) and the dataset losses."""
    return ([(grad, grads)] if grads is not None else []) + list(zip(extras, extra))


def _lists(arrays):
    """A chunk's numpy columns as lists. Evenly spaced steps (and the row range of a log without steps) become a
    range, the same Python ints (4 ms less per 120k rows); the learning rate, read only where a spike starts
    (number() makes that one value a float), stays numpy."""
    steps, losses, grads, lrs, extra = arrays
    if not isinstance(steps, range):
        stride = int(steps[1] - steps[0]) if len(steps) > 1 else 1
        spaced = stride > 0 and bool((steps[1:] - steps[:-1] == stride).all())
        steps = range(int(steps[0]), int(steps[0]) + stride * len(steps), stride) if spaced else steps.tolist()
    return steps, losses.tolist(), None if grads is None else grads.tolist(), lrs, [x.tolist() for x in extra]


def _increasing(steps):
    """Steps strictly increasing: no resume inside. Evenly spaced ones (most logs) are checked at C speed."""
    if isinstance(steps, range):  # the row numbers of a log without a step column
        return True
    if len(steps) < 2:
        return True
    stride = steps[1] - steps[0]  # (an int only between int steps; a float last step would not make a range)
    if type(stride) is int and type(steps[-1]) is int and stride > 0 and steps[-1] == steps[0] + stride * (len(steps) - 1):
        return steps == list(range(steps[0], steps[-1] + 1, stride))
    return all(map(operator.lt, steps, itertools.islice(steps, 1, None)))
