"""One logged series: its rolling baseline, and each spike followed from its start to its verdict."""
import itertools
import math
import statistics
from collections import deque

from .. import json_float, json_int
from .thresholds import (BAND_REL, BAND_Z, BLOCK, BLOCK_SIGMAS, CONFIRM, DIVERGE_RATIO, EARLY_RECENT, EARLY_TREND,
                         HEAVY_SPREAD, FALLING_Z, FALL_PACE, FALL_REFRESH, FALL_Z, FAST_STEPS, IQR_PER_SIGMA, MAX_FOLLOW,
                         MEDIAN_SE, MIN_POINTS, MIN_SETTLE_BLOCKS, OFFSET_REL, OFFSET_Z, REFRESH, SETTLE_FACTOR,
                         SETTLE_TOL, SETTLED_REFRESHES, SHIFT_ROWS, SPIKE_ABS, SPIKE_REL, SPIKE_Z, TREND_BLOCKS, VERIFY,
                         WINDOW, WINDOW_SIGMAS)


class Spike:
    """A finished spike. Steps come from the log; rows count data rows of the file."""

    __slots__ = ("step", "start", "end", "type", "baseline", "peak", "recovery_steps", "grad_norm_lead",
                 "level_after", "ended_by", "grad_norm_peak", "lr", "start_row", "peak_row", "end_row")

    def __init__(self, episode, kind, end, level_after, ended_by, end_row):
        self.step = episode.peak_step
        self.start = episode.start
        self.end = end
        self.type = kind
        self.baseline = episode.baseline
        self.peak = episode.peak
        self.recovery_steps = None if kind in ("no_recovery", "divergence") or end is None else end - episode.peak_step
        self.grad_norm_lead = None
        self.level_after = level_after
        self.ended_by = ended_by
        self.grad_norm_peak = episode.grad_peak
        self.lr = episode.lr
        self.start_row, self.peak_row, self.end_row = episode.start_row, episode.peak_row, end_row

    def to_json(self):
        return {
            "step": json_int(self.step), "start": json_int(self.start), "end": json_int(self.end), "type": self.type,
            "baseline": json_float(self.baseline), "peak": json_float(self.peak),
            "recovery_steps": json_int(self.recovery_steps), "grad_norm_lead": json_int(self.grad_norm_lead),
            "level_after": json_float(self.level_after), "ended_by": self.ended_by,
            "grad_norm_peak": json_float(self.grad_norm_peak), "lr": json_float(self.lr),
        }


class Episode:
    """A spike from the value that crossed the threshold until it is classified."""

    def __init__(self, step, row, x, baseline, sigma, threshold, snapshot, trend=(0.0, 0, 0.0), block_band=None):
        self.start, self.start_row = step, row
        self.baseline, self.threshold = baseline, threshold
        self.slope, self.lag, self.rate = trend  # the trend the run was on: per row (<= 0), rows the baseline lags
        # behind, and in a fast fall the factor per row it fell by there (as a rate, < 0; else 0)
        self.band = baseline + max(BAND_Z * sigma, BAND_REL * abs(baseline))
        self.noise = (self.band - baseline) / BAND_Z  # sigma, floored like the band
        self.coarse = block_band is not None  # a level shift seen in a block median only (Series._block_shift): its
        if self.coarse:  # rows are in the row band, so it is followed by its block medians, back when one is in
            self.band = block_band  # the noise band of a block median
        self.snapshot = snapshot  # the pre-spike window, to restore after a rollback past the spike
        self.peak, self.peak_step, self.peak_row = x, step, row
        self.tail = []  # (step, row, value) after the peak, CONFIRM at most: the recovery test
        self.recent = deque(maxlen=BLOCK)  # (step, row, value): the latest values, for a verdict by level
        self.recent.append((step, row, x))
        self.rows = [(step, row, x)]  # every value since the start (MAX_FOLLOW at most): read again once settled
        self.block, self.block_step = [x], step
        self.blocks = []  # (first step, median) of each full block since the start
        self.last_block = None  # the values of the latest full block: the new baseline after settling
        self.count = 1
        self.grad_peak = None
        self.lr = None
        self.pending = None  # a recovery verdict while the level after it is checked against the trend
        self.after = []  # (step, row, value) after the first value back in the band: fed again afterwards
        self.dropped = []  # ...those the check slid past (only the last WINDOW of them are fed again)
        self.back_step = None  # where the loss came back into the band

    def add(self, step, row, x):
        """Feed one finite value; returns a verdict (type, end, level_after, ended_by) or None."""
        self.count += 1
        value = (step, row, x)  # one tuple for recent, after, tail and rows
        self.recent.append(value)
        self.rows.append(value)
        if self.pending is not None:
            self.after.append(value)
            if x <= self.threshold + max(self.pending[2] - self.baseline, 0.0):
                if len(self.after) < VERIFY:
                    return None
                verdict = self._offset()
                if verdict is None:  # still coming down: slide on by a block (any spike in it ended the check)
                    if self.count >= MAX_FOLLOW:
                        return self.pending
                    self.dropped.extend(self.after[:BLOCK])
                    del self.after[:BLOCK]
                return verdict
            # A new spike (over the level the loss came back to) before the level could be checked: the recovery
            # stands, unless it came back within a block and the loss was not back (_back_yet); then the same spike
            if len(self.dropped) + len(self.after) > BLOCK or self._back_yet():  # goes on from this value
                return self.pending
            since = self.dropped + self.after
            for s, _, v in since[CONFIRM - 2:-1]:  # (the first few went into the blocks before the recovery)
                self._into_block(s, v)
            self.pending, self.after, self.dropped, self.back_step = None, [], [], None
            self.tail.clear()
        tail = self.tail
        if self.coarse:  # (no tail: followed by its block medians, below)
            if x > self.peak and not self.blocks:  # (its peak: the highest row of the block that showed it)
                self.peak, self.peak_step, self.peak_row = x, step, row
        elif tail and x > self.threshold and all(v <= self.band for _, _, v in tail) and self._back_yet():
            level = statistics.median(v for _, _, v in tail)  # back in the band, then up again: a new spike
            tail.append(value)
            return self._recovered(tail[0][0], tail[0][1], level)
        elif x > self.peak:
            self.peak, self.peak_step, self.peak_row = x, step, row
            self.tail.clear()
        else:
            tail.append(value)
            if len(tail) == CONFIRM:
                values = [v for _, _, v in tail]
                if values[0] <= self.band and statistics.median(values) <= self.band:
                    self.pending = self._recovered(tail[0][0], tail[0][1], statistics.median(values))
                    self.after, self.back_step = tail[1:], tail[0][0]
                    return None
                del tail[0]
        if self._into_block(step, x):
            if self.coarse and self.blocks[-1][1] <= self.band:  # (recent holds the block: every value went in)
                return self._recovered(*self.recent[0][:2], self.blocks[-1][1])
            verdict = self._settled(step)
            if verdict:
                return verdict
        if self.count >= MAX_FOLLOW:
            return self.by_level("horizon")
        return None

    def _into_block(self, step, x):
        """Add a value to the block being filled; True when that completes it (its median joins self.blocks)."""
        if not self.block:
            self.block_step = step
        self.block.append(x)
        if len(self.block) < BLOCK:
            return False
        self.blocks.append((self.block_step, statistics.median(self.block)))
        self.last_block, self.block = self.block, []
        return True

    def _trend_at(self, row, rate=0.0):
        """Where the pre-spike trend would have taken the loss by `row`: a line (slope <= 0, lagging by self.lag), or
        in a fast fall that goes on a factor per row (`rate` < 0); never extrapolated over 2 windows."""
        rows = min(row - self.start_row, 2 * WINDOW)
        return self.baseline * math.exp(rate * rows) if rate else self.baseline + self.slope * (rows + self.lag)

    def _back_yet(self):
        """A value past the threshold after rows back in the band: was the loss back? Its rows may dip into the band
        while a bump a few sigma high decays. The latest values before this one (BLOCK at most, the peak among them)
        have a median in the noise band of such a median over the pre-spike level (BAND_Z of its standard errors,
        and OFFSET_REL): back, a new spike; else the same spike goes on."""
        values = list(itertools.islice(self.recent, len(self.recent) - 1))  # (the peak at least)
        level = statistics.median(v for _, _, v in values)
        margin = max(BAND_Z * MEDIAN_SE * (BLOCK / len(values)) ** 0.5 * self.noise,
                     OFFSET_REL * abs(self.baseline))
        return level - self.baseline <= margin

    def pending_run(self, steps, values, row, start, stop):
        """While a recovery waits for its check: the values before the check at once, when each is finite and under
        the new-spike limit (add() would take them one by one and say nothing); returns the index it got to."""
        end = min(stop, start + VERIFY - 1 - len(self.after))
        limit = self.threshold + max(self.pending[2] - self.baseline, 0.0)
        if end <= start or not values[start] <= limit:  # (the first value alone settles most refusals)
            return start
        stretch = values[start:end]
        total = sum(stretch)
        if total - total != 0 or max(stretch) > limit:
            return start
        taken = list(zip(steps[start:end], range(row + start, row + end), stretch))
        self.after.extend(taken)
        self.recent.extend(taken[-BLOCK:])
        self.rows.extend(taken)
        self.count += end - start
        return end

    def descent_run(self, steps, values, row, start, stop):
        """No recovery in sight yet: the values above the band and not over the peak (so finite) that come first,
        before the block ends, that add() would only queue (recent, tail, block), at once; returns the index it
        got to."""
        end = min(stop, start + BLOCK - 1 - len(self.block), start + MAX_FOLLOW - 1 - self.count)
        band, peak = self.band, self.peak
        if self.coarse or end <= start:  # (a coarse spike is followed value by value)
            return start
        if not band < values[start] <= peak:  # (the first value alone settles most refusals)
            return start  # (the checks below would refuse it too, only slower)
        if any(v <= band for _, _, v in self.tail):  # a tail in the band may confirm a recovery
            return start
        stretch = values[start:end]
        total = sum(stretch)
        if total - total != 0 or min(stretch) <= band or max(stretch) > peak:  # (at C speed when all qualify)
            end = start + next((j for j, v in enumerate(stretch) if not band < v <= peak), len(stretch))
            stretch = stretch[:end - start]
        self.count += end - start
        self.rows.extend(zip(steps[start:end], range(row + start, row + end), stretch))
        first = max(start, end - BLOCK)  # (only the latest BLOCK are kept in recent, and fewer in the tail)
        taken = list(zip(steps[first:end], range(row + first, row + end), values[first:end]))
        self.recent.extend(taken)
        self.tail.extend(taken[-(CONFIRM - 1):])
        del self.tail[:-(CONFIRM - 1)]  # add() drops the oldest whenever CONFIRM are queued and do not confirm
        if not self.block:
            self.block_step = steps[start]
        self.block.extend(stretch)
        return end

    def _recovered(self, step, row, level):
        """Back in the band at `step`: fast within FAST_STEPS steps, or on the very next row of a sparse log."""
        kind = "fast_recovery" if step - self.peak_step <= FAST_STEPS or row - self.peak_row <= 1 else "slow_recovery"
        return kind, step, level, "recovered"

    def _offset(self):
        """Back in the band, but is it back on the trend? The medians of the two halves of the last VERIFY values
        against the pre-spike trend: higher by OFFSET_Z noise sigma and OFFSET_REL, and no longer coming down
        faster than that trend, is a lasting offset however noisy the run (no_recovery); within that, the
        recovery stands (from where the loss was back on the trend, see _back_on_trend); still coming down: None,
        look again a block later."""
        values = [v for _, _, v in self.after]
        half = len(values) // 2
        early, late = statistics.median(values[:half]), statistics.median(values[half:])
        margin = max(OFFSET_Z * self.noise, OFFSET_REL * abs(self.baseline))
        later = len(values) - half
        quarter = later // 2
        third, fourth = statistics.median(values[half:half + quarter]), statistics.median(values[half + quarter:])
        pace = math.log(fourth / third) / (later - quarter) if 0 < third and 0 < fourth else 0.0  # (per row)
        if self.rate and pace <= FALL_PACE * self.rate:
            # A fast fall that goes on after the spike, by a factor per row (a line in logs) at half its pre-spike
            # pace or more: a lasting offset rides on it, below the pre-spike level. Its pace may slow, and the later
            # values show by how much: from the pre-spike pace to theirs, half-way on average, is where the fall
            # would have taken the loss by the middle of the later half.
            pace = (self.rate + pace) / 2

            def back(level, row, margin):
                return level - self._trend_at(row, pace) <= margin
            falling = early * math.exp(pace * later) - late  # beyond that pace
            if back(late, self.after[half + later // 2][1], margin):
                return self._back_on_trend(back)
        else:
            # A fast fall slows down and a straight line overshoots it: below its pre-spike level, a loss was not set
            def back(level, row, margin):  # back.
                return level - self._trend_at(row) <= margin or level <= self.baseline
            falling = (early - late) + self.slope * half  # beyond the trend's own fall over those rows
            if back(late, self.after[-1][1], margin):
                return self._back_on_trend(back)
        if falling > FALL_Z * self.noise:
            return None
        self.last_block = values[half:]
        return "no_recovery", self.back_step, late, "settled"

    def _back_on_trend(self, back):
        """The recovery, fast only if the level was back on the pre-spike trend too: the first BLOCK values since
        the loss came back into the band (a row band: a decaying bump a few sigma high is inside it long before its
        level is back) have a median within BLOCK_SHIFT_Z standard errors of a block median (and OFFSET_REL) of
        the trend (`back(level, row, margin)`: a level at a row is back); else a slow_recovery, back at the middle
        of the first BLOCK values in a row that are (or the last)."""
        if self.pending[0] != "fast_recovery":
            return self.pending
        since = self.dropped + self.after
        margin = max(BLOCK_SIGMAS * self.noise, OFFSET_REL * abs(self.baseline))
        for j in range(len(since) - BLOCK + 1):
            level = statistics.median(v for _, _, v in since[j:j + BLOCK])
            step, row, _ = since[j + (BLOCK >> 1)]
            if back(level, row, margin):
                break
        return self.pending if j == 0 else self._recovered(step, row, level)

    def _settled(self, step):
        """At the end of a block: has the level stopped coming down above the band?"""
        if len(self.blocks) < MIN_SETTLE_BLOCKS:
            return None
        first_step, level = self.blocks[-1]
        earlier_step, earlier = self.blocks[(len(self.blocks) - 1) // 2]
        if level <= self.band:
            return None  # on its way back: the tail test will call the recovery
        tol = SETTLE_TOL * self.noise
        descent = earlier - level
        if descent > tol:
            rate = descent / max(first_step - earlier_step, 1)
            if (level - self.band) / rate <= SETTLE_FACTOR * max(step - self.peak_step, 1):
                return None  # still coming down at a pace that brings it back: keep following
        if descent < -tol or self._diverged(statistics.median(median for _, median in self._at_level(level))):
            return "divergence", None, level, "settled"  # (a multiple of the baseline where it settled: by every
        return "no_recovery", first_step, level, "settled"  # block at that level, not by the latest alone)

    def _diverged(self, level):
        return self.baseline > 0 and level >= DIVERGE_RATIO * self.baseline

    def _at_level(self, level):
        """The trailing blocks (first step, median) whose medians are at `level`, within SETTLE_TOL noise sigma (the
        latest block at least)."""
        tol = SETTLE_TOL * self.noise
        count = next((k for k, (_, median) in enumerate(reversed(self.blocks)) if abs(median - level) > tol),
                     len(self.blocks))
        return self.blocks[-max(count, 1):]

    def settled_rows(self, level):
        """The values at the settled `level`, where a spike of their own was never looked for: those of the trailing
        blocks at it (_at_level), the start's value aside."""
        first = self._at_level(level)[0][0]
        return [value for value in self.rows if value[0] >= first and value[1] > self.start_row]

    def by_level(self, ended_by):
        """Verdict when the follow-up is cut short (log end, resume, horizon): judge by the last level."""
        if self.pending is not None:
            verdict = (self._offset() if len(self.after) >= BLOCK else None) or self.pending
            return verdict[:3] + (ended_by,) if verdict[3] == "recovered" else verdict
        after = [value for value in self.recent if value[1] > self.peak_row]
        if not after:
            return "divergence", None, None, ended_by  # the log ends (or rolls back) at the peak
        level = statistics.median(x for _, _, x in after)
        if level <= self.band:
            back = next((s, r) for s, r, x in after if x <= self.band)
            return self._recovered(*back, level)[:3] + (ended_by,)
        if self._diverged(level):
            return "divergence", None, level, ended_by
        return "no_recovery", after[-1][0], level, ended_by


def _trend(values, log=True):
    """(level at the newest value, robust sigma of the residuals, slope per row, that sigma in logs or 0) of a
    window that falls: a line
    through the medians of its two halves, so the baseline follows a fast-falling loss instead of lagging. A
    positive loss is fitted in logs (a loss that falls fast falls by a factor per step, a straight line there) and
    the result given back at the newest value: a 3x spike stands out however steep and curved the fall."""
    if log and min(values) > 0:
        level, sigma, slope = _line([math.log(v) for v in values])
        level = math.exp(level)
        return level, level * sigma, min(level * slope, 0.0), sigma
    level, sigma, slope = _line(values)
    return level, sigma, min(slope, 0.0), 0.0


def _onset(values, end, half):
    """Where a level shift that values[end] is in began: the start of the run up to `end` whose values sum the most
    above `half`, half-way from the baseline to the shift limit (a CUSUM change point: a shift of 3 sigma puts most
    of its values past half-way and few of the noise before it, and one value that falls short does not cut it)."""
    best, total, start = -math.inf, 0.0, end
    for j in range(end, -1, -1):
        total += values[j] - half
        if total > best:
            best, start = total, j
    return start


def log_spread(high, low):
    """The robust sigma of the logs of values whose quartiles are high and low; 0 unless both are positive."""
    return math.log(high / low) / IQR_PER_SIGMA if low > 0 else 0.0


def tail_distance(level, distance, spread, z=SPIKE_Z):
    """How far above `level` a value is `z` sigma out, for a positive loss whose logs spread by `spread` (robust
    sigma) and whose quartiles give `distance` (z sigma): that distance up to HEAVY_SPREAD; from 2 * HEAVY_SPREAD
    on, the distance to a log-normal's z-sigma point, level * (exp(z * spread) - 1); between, a blend of the two
    (continuous). A batch loss near zero, whose logs spread by ~1, then has its ordinary tail (rows 20x and 50x
    the median) below the spike threshold."""
    if spread <= HEAVY_SPREAD:
        return distance
    lognormal = level * math.expm1(min(z * spread, 50.0))
    weight = min(1.0, (spread - HEAVY_SPREAD) / HEAVY_SPREAD)
    return distance + weight * (lognormal - distance) if lognormal > distance else distance


def _line(values):
    n, half = len(values), len(values) // 2
    slope = (sorted(values[half:])[half >> 1] - sorted(values[:half])[half >> 1]) / half
    r = sorted(v - slope * i for i, v in enumerate(values))
    return r[n >> 1] + slope * (n - 1), (r[(3 * n) >> 2] - r[n >> 2]) / IQR_PER_SIGMA, slope


class Series:
    """One logged series: a rolling window that spike values never enter, and its spike episodes.

    Like llm.c's outlier detector (which takes a flagged value back out of its window) and ZClip
    (which does not let a spike update its running statistics), values inside a spike never reach
    the baseline, so a spike cannot lift the threshold for the next one. Unlike them we use the
    median and the interquartile range, which a few outliers cannot move, instead of mean and variance.
    """

    def __init__(self, name, on_block=None, on_reset=None):
        self.name = name
        self.on_block, self.on_reset = on_block, on_reset  # hooks: a block median; the baseline was rebuilt (why)
        self.window = deque(maxlen=WINDOW)
        self.med = self.sigma = None
        self.slope = 0.0  # per row: the trend of the window when it falls clearly, else 0
        self.scale = 0.0  # the highest baseline so far: the run's own unit for the absolute floors
        self.blocks = deque(maxlen=TREND_BLOCKS)  # (row, median) of the latest healthy blocks: the trend
        self.falling = False  # the latest block median is far below the one two blocks earlier
        self.threshold = math.inf
        self.shift_limit = math.inf  # the median of SHIFT_ROWS values in a row above this: a level shift
        self.shift_base = None  # ...from this level: the baseline of the spike it opens
        self.block_limit = math.inf  # the median of the next block above this: a level shift (_block_shift)
        self.block_latest = math.inf  # ...the limit of the latest block refresh alone
        self.window_limits = deque(maxlen=3)  # (limit, base) of the last three settled block refreshes: the window's
        # median above the lower of the two older ones is a level shift too small for one block (_window_shift)
        self.diverged = False  # re-based at the level of a divergence: its further climb is no level shift (until a
        # resume or another run; the creep watch keeps quiet the same way)
        self.until_refresh = self.period = 1  # healthy values to the next refresh; and between the last two
        self.at = deque(maxlen=WINDOW)  # (step, row) of the latest values of the window (as far as they are
        # known): where a level shift started
        self.refreshes = 0
        self.minis = 0  # refreshes still to come before the next block, in a fast fall
        self.episode = None
        self.spikes = []
        self.snapshot = None  # (start step, window) before the last spike that re-based the window
        self.last_step = -math.inf
        self.nonfinite = []  # [first step, last step, count, first row] per run of NaN/inf values

    def _refresh(self, step, row):
        """Recompute median, robust sigma and threshold from the window (every REFRESH healthy values, every
        FALL_REFRESH in a fast fall); every BLOCK values also a block median, for the trend, the creep watch, and to
        tell a fast fall."""
        window = self.window
        w = sorted(window)
        n = len(w)
        if n < MIN_POINTS:
            self.med = self.sigma = None
            self.threshold, self.shift_limit, self.until_refresh = math.inf, math.inf, 1
            self.block_limit = self.block_latest = math.inf
            self.window_limits.clear()
            return
        block = not self.minis  # (else a refresh between two blocks, in a fast fall)
        if block:
            self.refreshes += 1
            b = sorted(itertools.islice(window, n - BLOCK, n))
            level = (b[(BLOCK >> 1) - 1] + b[BLOCK >> 1]) / 2
            blocks = self.blocks
            blocks.append((row, level))
            local = (b[(3 * BLOCK) >> 2] - b[BLOCK >> 2]) / IQR_PER_SIGMA  # noise, and a little of the trend
            block_spread = log_spread(b[(3 * BLOCK) >> 2], b[BLOCK >> 2])
            self.falling = n == WINDOW and len(blocks) >= 3 and blocks[-3][1] - level > FALLING_Z * local
        if self.falling:  # the median lags above a fast-falling curve and the trend widens the IQR: a line instead
            med, sigma, slope, spread = _trend(list(window))
            last_row, last = self.blocks[-1]  # a drop is a step, not a slope: never below the latest block,
            recent = sorted(itertools.islice(window, n - FALL_REFRESH, n))  # nor the latest values (a fall that
            med = max(med, last + slope * ((BLOCK >> 1) + row - last_row), recent[FALL_REFRESH >> 1])  # stops)
        else:
            med, sigma, slope = w[n >> 1], (w[(3 * n) >> 2] - w[n >> 2]) / IQR_PER_SIGMA, 0.0
            spread = log_spread(w[(3 * n) >> 2], w[n >> 2])
            if n < WINDOW or self.refreshes < SETTLED_REFRESHES:  # a short log (one row per epoch) may be all descent, and so may
                # the start of a run before the falling test has three blocks: a line, if it explains the spread,
                values = list(window)  # through the whole window or, on a curve that bends, its newer half
                full = n == WINDOW  # (in logs once the window is full: a short table's few rows keep the straight line
                fits = [fit for fit in (_trend(values, full), _trend(values[n >> 1:], full))  # tuned on them)
                        if fit[2] < 0  # falling (a rising line is clamped to slope 0)
                        and fit[1] < EARLY_TREND * sigma]
                if fits:
                    med, sigma, slope, spread = min(fits, key=lambda fit: fit[1])  # the line that leaves the least spread,
                    recent = sorted(values[-EARLY_RECENT:])  # never under the latest values: a bending curve leaves a
                    med = max(med, recent[len(recent) >> 1])  # line below it
        self.med, self.sigma, self.slope = med, sigma, slope
        size = med if med >= 0 else -med
        if size > self.scale:
            self.scale = size
        floor = max(SPIKE_REL * size, SPIKE_ABS * self.scale)
        self.threshold = med + max(tail_distance(med, SPIKE_Z * sigma, spread), floor)
        base = min(med, level) if block else med  # the latest block's median lags a falling curve less than the
        self.shift_base = base  # window's (in a fast fall the line through it is the level already)
        self.shift_limit = base + max(tail_distance(base, BAND_Z * sigma, spread, BAND_Z), floor)
        if block:  # the next block's median above this: a level shift too small for its rows (none on a line); the
            latest = math.inf if slope else base + max(tail_distance(base, BLOCK_SIGMAS * sigma, spread, BLOCK_SIGMAS),
                                                       floor)  # limit a block before holds when lower: a shift
            self.block_limit = math.inf if slope or self.diverged else min(latest, self.block_latest)  # from the
            self.block_latest = latest  # middle of a block lifts the next limit by half of it before it is seen
            if self.refreshes >= SETTLED_REFRESHES:  # (a start's early line is no level to measure a shift from)
                self.window_limits.append((math.inf if slope or self.diverged else
                                           med + max(tail_distance(med, WINDOW_SIGMAS * sigma, spread, WINDOW_SIGMAS),
                                                     floor), med))
        if not block:
            self.minis -= 1
        elif self.falling:
            self.minis = REFRESH // FALL_REFRESH - 1
        self.until_refresh = self.period = FALL_REFRESH if self.minis or not block else REFRESH
        if block and self.on_block is not None:
            first = self.at[-BLOCK][0] if len(self.at) >= BLOCK else step  # (the block's first step, where known)
            self.on_block(first, step, row, level, self.scale, block_spread)

    def trend(self):
        """(slope per row, lag in rows) of the run before now: from the two oldest and two newest of the last
        TREND_BLOCKS block medians (the median of 64 values over 200 rows: far steadier than the window's own
        halves), 0 when it rises or there is too little; the lag is the plain median's, unless it followed a fall."""
        b = self.blocks
        if len(b) < TREND_BLOCKS:
            return 0.0, 0, self._rate()
        slope = ((b[-1][1] + b[-2][1]) - (b[0][1] + b[1][1])) / (b[-1][0] + b[-2][0] - b[0][0] - b[1][0])
        return min(slope, 0.0), 0 if self.slope else WINDOW // 2, self._rate()

    def _rate(self):
        return self.slope / self.med if self.falling and self.slope < 0 < self.med else 0.0

    def feed(self, step, row, x):
        """Take one value of the series at `step` (`row`: the row of the file, a clock shared by all series)."""
        previous = self.last_step
        if step <= previous:
            self.rollback(step, row)
            previous = -math.inf
        self.last_step = step
        if x - x != 0:  # NaN or inf
            self._nonfinite(step, row, previous)
        elif self.episode is not None:
            self._follow(step, row, x)
        elif x > self.threshold:
            self._open(step, row, x)
        else:  # healthy: the common case, kept short
            self.window.append(x)
            self.at.append((step, row))
            self.until_refresh -= 1
            if not self.until_refresh:
                self._stretch_done(step, row)

    def _stretch_done(self, step, row):
        """The end of a refresh stretch: a level shift in it opens a spike where it started, else a refresh."""
        if self.refreshes >= SETTLED_REFRESHES:
            count = self._shifted()
            if count:
                self._open_shift(count)
                return
            count = self._block_shift()
            if count:  # followed by its block medians: back in their band, half-way to the limit (3 standard
                self._open_shift(count, (self.shift_base + self.block_limit) / 2)  # errors, as the row band is
                return  # half-way to the threshold)
            shift = self._window_shift()
            if shift:  # followed by its block medians too, back in the band half-way to the window's limit
                count, base, limit = shift
                self._open_shift(count, (base + limit) / 2, base)
                return
        self._refresh(step, row)

    def _block_shift(self):
        """How many of the latest values belong to a level shift seen in the median of the block just ended, above
        block_limit: BLOCK_SHIFT_Z standard errors of a block median over the baseline (1.33 sigma), or SPIKE_REL
        (a lasting 1.3x offset at 1.5 sigma a row stays under every row test); from its onset (see _onset) on,
        in the window (a shift that began in the block before lifted that block's median too little); 0 for none."""
        limit, values = self.block_limit, self._latest(WINDOW)
        k = len(values)
        if k < BLOCK:
            return 0
        b = sorted(values[k - BLOCK:])
        if (b[(BLOCK >> 1) - 1] + b[BLOCK >> 1]) / 2 <= limit:  # (the median as _refresh takes it)
            return 0
        return k - _onset(values, k - 1, (self.shift_base + limit) / 2)

    def _window_shift(self):
        """A level shift seen in the median of the whole window (its two blocks), too small for one block: above
        WINDOW_SIGMAS (0.94 sigma, the same 6 standard errors as a block median's 1.33) over the window median of a
        refresh before both blocks, the lower limit of the two before them (a shift that began in the older block
        lifted the refresh after it). (count, base, limit): how many of the latest values belong to it, from its
        onset (see _onset) on, and the level and limit it was measured by; None for none."""
        if len(self.window_limits) < 3:  # (three refreshes since the baseline settled, a resume or a slow recovery)
            return None
        limit, base = min(self.window_limits[0], self.window_limits[1])
        values = self._latest(WINDOW)
        k = len(values)
        if k < WINDOW or sorted(values)[k >> 1] <= limit:  # (the median as _refresh takes it)
            return None
        return k - _onset(values, k - 1, (base + limit) / 2), base, limit

    def _shifted(self):
        """How many of the latest values belong to a level shift: the median of SHIFT_ROWS values in a row above
        shift_limit among the stretch just ended, from its onset (see _onset) on; 0 for none. Only the values
        logged after the limit was set are held to it: on a falling curve the older ones are above it."""
        limit, values = self.shift_limit, self._latest(self.period)
        k, middle = len(values), SHIFT_ROWS >> 1
        if sum(x > limit for x in values) <= middle:  # (the common case: a few or none above it)
            return 0  # (the windows below need more than `middle` values above it)
        for p in range(k - SHIFT_ROWS + 1):
            if sorted(values[p:p + SHIFT_ROWS])[middle] > limit:
                return k - _onset(values, p + SHIFT_ROWS - 1, (self.shift_base + limit) / 2)
        return 0

    def _lead_in(self, x):
        """How many of the latest values led into a value past the threshold as a level shift: from their onset
        (see _onset) among those logged since the last refresh, at least half of SHIFT_ROWS of them, with their
        median above shift_limit; 0 for none (a spike out of the noise)."""
        limit, values = self.shift_limit, self._latest(self.period - self.until_refresh)
        k = len(values)
        count = k - _onset(values + [x], k, (self.shift_base + limit) / 2)
        return count if count >= SHIFT_ROWS >> 1 and statistics.median(values[k - count:]) > limit else 0

    def _latest(self, count):
        """The latest `count` values of the window, or as many of them as have a (step, row) in self.at."""
        k = min(len(self.at), count)
        return list(itertools.islice(self.window, len(self.window) - k, None))

    def _open(self, step, row, x):
        """A value past the threshold opens a spike there, or where the values that led into it left the band."""
        count = self._lead_in(x) if self.refreshes >= SETTLED_REFRESHES else 0
        if not count:
            self.episode = Episode(step, row, x, self.med, self.sigma, self.threshold, list(self.window), self.trend())
            return
        self._open_shift(count)
        self.feed(step, row, x)

    def _open_shift(self, count, block_band=None, base=None):
        """Open a spike at the first of the latest `count` values of the window, and feed it the rest of them; one
        seen in a block median (block_band: the noise band of a block median) is followed by its block medians.
        `base`: the level it is measured from, when not the latest refresh's."""
        values = [self.window.pop() for _ in range(count)][::-1]  # out of the baseline: they are the spike
        at = [self.at.pop() for _ in range(count)][::-1]
        self.until_refresh += count  # the window refreshes once it is as full again
        (first_step, first_row), first = at[0], values[0]
        self.episode = Episode(first_step, first_row, first, self.shift_base if base is None else base, self.sigma,
                               self.threshold, list(self.window), self.trend(), block_band)
        self.last_step = first_step
        for (s, r), x in zip(at[1:], values[1:]):
            self.feed(s, r, x)

    def feed_run(self, steps, values, row, start, stop, strict=False):
        """Feed values[start:stop] (values[i] is at row + i; steps increasing, no None). A stretch up to the next
        refresh that is all finite and under the threshold, with no spike open, goes into the window at once: the
        same result as one value at a time, several times faster; in a stretch that is not, the values before
        the first that opens a spike or is not finite go in at once too, and so do the values an open spike only
        queues (follow_run). Anything else is fed value by value, or, when `strict`, left to the caller: returns
        the index it got to."""
        i = start
        while i < stop:
            if self.episode is None:
                k = min(self.until_refresh, stop - i)
                stretch = values[i:i + k]
                total = sum(stretch)
                threshold = self.threshold
                if total - total == 0 and max(stretch) <= threshold:
                    take = k
                else:  # (a sum can overflow to inf with every value finite: then none is found and all go in)
                    take = next((j for j, x in enumerate(stretch) if not (x - x == 0 and x <= threshold)), k)
                if take:
                    self.window.extend(stretch if take == k else stretch[:take])  # (not a local: a spike closed in
                    # this call may have rebuilt the window)
                    self.at.extend(zip(steps[i:i + take], range(row + i, row + i + take)))
                    i += take
                    self.last_step = steps[i - 1]
                    self.until_refresh -= take
                    if not self.until_refresh:
                        self._stretch_done(self.last_step, row + i - 1)
                    if take == k:
                        continue
            if strict:
                return i
            if self.episode is not None and self.episode.count > 1:  # what the open spike only queues: at once
                done = self.follow_run(steps, values, row, i, stop)
                if done > i:
                    i = done
                    continue
            self.feed(steps[i], row + i, values[i])
            i += 1
        return i

    def follow_run(self, steps, values, row, start, stop):
        """Feed values[start:stop] (steps increasing) to an open spike, as many at once as Episode.pending_run (a
        recovery waits for its check) or Episode.descent_run take; returns the index it got to (value by value
        from there)."""
        episode = self.episode
        run = episode.descent_run if episode.pending is None else episode.pending_run
        done = run(steps, values, row, start, stop)
        if done > start:
            self.last_step = steps[done - 1]
        return done

    def _follow(self, step, row, x):
        """Feed the open spike; close it once it has a verdict."""
        episode = self.episode
        verdict = episode.add(step, row, x)
        if verdict:
            self._close(verdict, row)
            if verdict[3] == "recovered":  # the values that confirmed the recovery come after it and
                self.last_step = -math.inf  # may hold the next spike: take them again as new values
                later = ((episode.dropped + episode.after)[-WINDOW:] if episode.pending
                         else list(episode.recent)[1:] if episode.coarse else episode.tail[1:])  # (coarse: the block)
                if later and later[-1][1] - later[0][1] == len(later) - 1:  # rows in a row: as a run
                    self.feed_run([s for s, _, _ in later], [x for _, _, x in later], later[0][1], 0, len(later))
                else:
                    for value in later:
                        self.feed(*value)

    def _nonfinite(self, step, row, previous):
        if self.nonfinite and self.nonfinite[-1][1] == previous:  # the run goes on
            run = self.nonfinite[-1]
            run[1] = step
            run[2] += 1
        else:
            self.nonfinite.append([step, step, 1, row])
        if self.episode is not None:
            self._close(self.episode.pending or ("divergence", None, None, "nonfinite"), row)

    def _close(self, verdict, row):
        kind, end, level, ended_by = verdict
        episode = self.episode
        spike = Spike(episode, kind, end, level, ended_by, row)
        self.spikes.append(spike)
        self.episode = None
        if kind == "slow_recovery":  # back by a block median's margin while its tail still comes down: that tail is
            self.window_limits.clear()  # no shift from the pre-spike level (the window test starts afresh)
        if kind in ("no_recovery", "divergence") and ended_by in ("settled", "horizon"):
            self.snapshot = (episode.start, episode.snapshot)  # the level moved: rebuild the baseline there
            settled = (episode.settled_rows(level) if ended_by == "settled" and episode.pending is None and episode.blocks
                       else [])  # (settled by its blocks, not as the lasting offset of a recovery: see Episode._offset)
            if len(settled) > BLOCK:  # the first block of the new level is the baseline the rest is read against
                self._reset([x for _, _, x in settled[:BLOCK]], row, kind)
                self._read_settled_again(spike, episode, settled[BLOCK:])
            else:
                self._reset(episode.last_block, row, kind)

    def _read_settled_again(self, spike, episode, values):
        """The values at the level a spike settled at were only its follow-up: read them again, as they came, from
        that level's first block on, so that a spike of their own (a 3x row after a level shift) is its own, and
        not the shifted level's peak."""
        found = len(self.spikes)
        self.last_step = -math.inf
        for value in values:
            self.feed(*value)
        taken = [(s.start_row, s.end_row) for s in self.spikes[found:]]
        if self.episode is not None:
            taken.append((self.episode.start_row, math.inf))
        if not taken:
            return
        kept = [v for v in episode.rows if not any(first <= v[1] < last for first, last in taken)]  # (its end: back)
        spike.step, spike.peak_row, spike.peak = max(kept, key=lambda v: v[2])

    def _reset(self, values, row, why):
        self.diverged = why == "divergence"
        self.window = deque(values, maxlen=WINDOW)
        self.at.clear()
        self.blocks.clear()
        self.window_limits.clear()
        self.falling = False
        self.refreshes = 0
        self.minis = 0
        self._refresh(self.last_step, row)
        if self.on_reset is not None:
            self.on_reset(why)

    def repeat_ended(self, gap, row):
        """The data stopped repeating: the values before the jump read `gap` too low.

        An open spike is measured from the level the loss really had, its baseline plus the gap. If its
        peak stays under the threshold of that level, it was only the jump back up and is no spike.
        The window, held at the repeated level since the spike opened, moves up by the gap as well.
        Returns whether a spike stays open.
        """
        episode = self.episode
        if episode is None:  # the jump stayed under the threshold: the window follows it on its own
            if self.on_reset is not None:
                self.on_reset("repeat_data")  # but the low of the repeated stretch is no level to climb from
            return False
        episode.baseline += gap
        episode.threshold += gap
        episode.band += gap
        if episode.peak <= episode.threshold:
            self.episode = None
        self._reset([x + gap for x in self.window], row, "repeat_data")  # the pre-spike window, corrected
        return self.episode is not None

    def rollback(self, step, row):
        """Steps went backwards. Close an open spike; restore the pre-spike baseline if we went past it."""
        self.last_step = -math.inf
        self.diverged = False
        self.blocks.clear()  # the trend before a resume is another run's; a drop right after it is a step
        self.window_limits.clear()  # (and so is the level a shift would be measured from)
        self.at.clear()  # (a level shift starts after the resume)
        self.falling = False
        self.minis = 0
        if self.episode is not None:
            self._close(self.episode.by_level("resume"), row)
        if self.snapshot is not None and step <= self.snapshot[0]:
            self._reset(self.snapshot[1], row, "rollback")
            self.snapshot = None

    def restart(self, row):
        """Another run begins (its steps start again, and its loss at its start): close an open spike where this
        run ends, and read on as a new log (the spikes found stay)."""
        if self.episode is not None:
            self._close(self.episode.by_level("run_end"), row)
        self.window = deque(maxlen=WINDOW)
        self.at.clear()
        self.med = self.sigma = None
        self.slope = self.scale = 0.0
        self.blocks.clear()
        self.falling = False
        self.threshold, self.shift_limit, self.until_refresh, self.refreshes, self.minis = math.inf, math.inf, 1, 0, 0
        self.block_limit = self.block_latest = math.inf
        self.window_limits.clear()
        self.diverged = False
        self.snapshot = None
        self.last_step = -math.inf

    def finish(self, row):
        if self.episode is not None:
            self._close(self.episode.by_level("log_end"), row)
