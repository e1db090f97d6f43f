"""The healthy-stretch screen with numpy, for the columns of a big CSV that the accelerated reader gives.

Series.feed_run takes a healthy stretch a refresh at a time in Python. Here many refreshes are computed at
once, with exactly the same arithmetic: for each stretch of REFRESH values the threshold it is held to
(the previous refresh's), the window after it (its sorted order statistics: median, interquartile range),
the block median and spread for the falling test, the running scale, the next threshold and the level-shift
limits (rows above the band; a block median above its limit, Series._block_shift; the window's median above
its limit, Series._window_shift). The leading stretches that are finite, under their threshold and whose refresh
does not find the loss falling fast are taken in one go; the series is left exactly as feed_run would leave it
(window, thresholds, block medians, scale, on_block calls), and the first stretch that is not plain healthy goes
to the scalar path. Only
order statistics, one halving, one division and the threshold's sums and products are computed, each a
single IEEE operation on the same doubles as in Python, so the verdicts and the numbers reported are the same
(tests/test_spikes.py compares both paths on every test log).

numpy is imported only when the accelerated reader is used (spikelog/read/table.py).
"""
import math

import numpy as np

from .series import log_spread, tail_distance
from .thresholds import (BAND_Z, BLOCK, BLOCK_SIGMAS, FALLING_Z, HEAVY_SPREAD, IQR_PER_SIGMA, REFRESH,
                         SETTLED_REFRESHES, SHIFT_ROWS, SPIKE_ABS, SPIKE_REL, SPIKE_Z, TREND_BLOCKS, WINDOW,
                         WINDOW_SIGMAS)

FIRST_SPAN = 1024  # values screened at the first try; each success quadruples it, so a stretch that ends
# soon (the next spike) costs little, and a long healthy one is screened in a few large numpy calls (ours)
SCALAR_SPAN = 64  # values fed in Python before the numpy screen is tried again (a spike's follow-up is short)
W_LOW, W_MID, W_HIGH = WINDOW >> 2, WINDOW >> 1, (3 * WINDOW) >> 2  # the window's quartiles, as Series._refresh
B_LOW, B_MID, B_HIGH = BLOCK >> 2, BLOCK >> 1, (3 * BLOCK) >> 2  # ...and the block's (its median: mean of two)
assert BLOCK == REFRESH and WINDOW == 2 * REFRESH  # every refresh is a block refresh, as Series assumes, and a
# window is two refresh stretches


HEAVY_RATIO = math.exp(HEAVY_SPREAD * IQR_PER_SIGMA) * (1 - 1e-9)  # quartiles this far apart may be heavy-tailed:
# tail_distance decides (the margin: numpy's and Python's exp and log may differ in the last bit)


def increasing(steps):
    """Steps strictly increasing (a numpy column, or the row range of a log without steps)."""
    return isinstance(steps, range) or len(steps) < 2 or bool((np.diff(steps) > 0).all())


def as_list(column, start, stop):
    """column[start:stop] as Python numbers (a range stays a range)."""
    part = column[start:stop]
    return part if isinstance(part, range) else part.tolist()


def feed(series, steps, values, row, start, stop, lists=None):
    """Feed all of values[start:stop] to a series that nothing waits on (the grad norm, a dataset's loss): in
    numpy while it is plainly healthy, in Python around its own spikes, then in numpy again. `lists`: the same
    (steps, values) as lists, once the chunk has them."""
    i = start
    while i < stop:
        i = advance(series, steps, values, row, i, stop, lists)
        if i < stop:
            i = _in_python(series, steps, values, lists, row, i, min(stop, i + SCALAR_SPAN), strict=False)


def advance(series, steps, values, row, start, stop, lists=None):
    """Feed values[start:stop] (numpy, finite or not) to `series` while it is plainly healthy; returns the index
    it got to. The caller goes on from there value by value (a spike, a NaN, a fast fall, a short window)."""
    i = start
    span = FIRST_SPAN
    while i < stop:
        if series.episode is not None or series.med is None or len(series.window) < WINDOW:
            return i  # a spike is open, or the window is not full: the scalar path's own rules
        if series.until_refresh != REFRESH:  # in the middle of a refresh stretch: finish it in Python
            k = min(i + series.until_refresh, stop)
            done = _in_python(series, steps, values, lists, row, i, k, strict=True)
            if done < k:
                return done
            i = done
            continue
        end = min(stop, i + span)
        whole = i + (end - i) // REFRESH * REFRESH
        if whole == i:  # the end of the chunk: less than a stretch, fed as it is
            return _in_python(series, steps, values, lists, row, i, end, strict=True)
        with np.errstate(all="ignore"):  # inf and NaN are data here, as in Python: no warnings
            got = _screen(series, steps, values, row, i, whole)
        if got < whole:
            return got
        i = got
        span *= 4
    return i


def _in_python(series, steps, values, lists, row, start, stop, strict):
    """Series.feed_run over [start, stop), on the chunk's lists if it has them, else on a slice made a list."""
    if lists is not None:
        return series.feed_run(lists[0], lists[1], row, start, stop, strict)
    return start + series.feed_run(as_list(steps, start, stop), values[start:stop].tolist(), row + start, 0,
                                   stop - start, strict)


def _screen(series, steps, values, row, start, stop):
    """Take the leading healthy refresh stretches of values[start:stop] (a whole number of them) at once."""
    count = (stop - start) // REFRESH
    new = values[start:stop]
    blocks = new.reshape(count, REFRESH).copy()
    blocks.sort(axis=1)  # each stretch in order: a sort of 32 is a SIMD network
    # The window after each stretch is that stretch and the one before it (the first: the old window's last).
    joined = np.concatenate((np.fromiter(series.window, float, WINDOW), new))
    halves = joined.reshape(count + 2, REFRESH)
    windows = np.concatenate((halves[1:-1], halves[2:]), axis=1)
    windows.sort(axis=1)  # (in place: 9x faster than a partition)
    med = windows[:, W_MID]
    sigma = (windows[:, W_HIGH] - windows[:, W_LOW]) / IQR_PER_SIGMA
    level = (blocks[:, B_MID - 1] + blocks[:, B_MID]) / 2
    base = np.minimum(med, level)  # the level a shift is measured from (Series._refresh)
    distance, shift, block_shift = SPIKE_Z * sigma, BAND_Z * sigma, BLOCK_SIGMAS * sigma
    window_shift = WINDOW_SIGMAS * sigma
    low, high = windows[:, W_LOW], windows[:, W_HIGH]
    for i in np.flatnonzero((low > 0) & (high > low * HEAVY_RATIO)).tolist():  # the few heavy-tailed windows,
        spread = log_spread(float(high[i]), float(low[i]))  # (in Python's math, as Series._refresh)
        distance[i] = tail_distance(float(med[i]), float(distance[i]), spread)
        shift[i] = tail_distance(float(base[i]), float(shift[i]), spread, BAND_Z)
        block_shift[i] = tail_distance(float(base[i]), float(block_shift[i]), spread, BLOCK_SIGMAS)
        window_shift[i] = tail_distance(float(med[i]), float(window_shift[i]), spread, WINDOW_SIGMAS)
    local = (blocks[:, B_HIGH] - blocks[:, B_LOW]) / IQR_PER_SIGMA
    # Falling: the block median two blocks back is far above this one (the scalar path then fits a line); -inf
    # where there is none. Only the stretches up to the first that fails count: there, all of this is finite.
    known = series.blocks
    two_back = np.concatenate(([known[-2][1] if len(known) > 1 else -np.inf, known[-1][1] if known else -np.inf],
                               level))[:count]
    size = np.abs(med)
    scale = np.maximum(np.maximum.accumulate(size), series.scale)  # (the running maximum from the series' own)
    floor = np.maximum(SPIKE_REL * size, SPIKE_ABS * scale)
    threshold_after = med + np.maximum(distance, floor)
    held_to = np.concatenate(((series.threshold,), threshold_after[:-1]))
    shift_after = base + np.maximum(shift, floor)
    shift_held = np.concatenate(((series.shift_limit,), shift_after[:-1]))
    block_latest = base + np.maximum(block_shift, floor)  # a stretch's median above the limit it was held to: a
    block_after = np.minimum(block_latest, np.concatenate(((series.block_latest,), block_latest[:-1])))  # level shift
    block_held = np.concatenate(((series.block_limit,), block_after[:-1]))  # (Series._block_shift, _refresh)
    # The window's median above the lower limit of the two refreshes before the latest (Series._window_shift), once
    # three are known; none after a divergence (the scalar path's inf)
    window_latest = np.full(count, np.inf) if series.diverged else med + np.maximum(window_shift, floor)
    known = [limit for limit, _ in series.window_limits]
    limits = np.concatenate((np.full(3 - len(known), np.inf), known, window_latest))
    window_held = np.minimum(limits[:count], limits[1:count + 1])
    window_held[:3 - len(known)] = np.inf
    # A stretch with more than half of SHIFT_ROWS values above the shift limit it was held to may hold a level
    # shift: it goes to Series._shifted (which needs them in a row).
    steady = (blocks > shift_held[:, None]).sum(axis=1) <= SHIFT_ROWS >> 1
    finite = blocks[:, -1] - blocks[:, 0] < np.inf  # (NaN sorts last, -inf first)
    settled = np.arange(series.refreshes + 1, series.refreshes + 1 + count) >= SETTLED_REFRESHES  # (else a line)
    healthy = (finite & (blocks[:, -1] <= held_to) & (two_back - level <= FALLING_Z * local) & settled & steady
               & (level <= block_held) & (med <= window_held))
    first_bad = int(healthy.argmin())
    taken = count if healthy[first_bad] else first_bad
    if taken == 0:
        return start
    last = taken - 1
    series.window.extend(joined[taken * REFRESH:taken * REFRESH + WINDOW].tolist())
    series.med, series.sigma, series.slope = float(med[last]), float(sigma[last]), 0.0
    series.threshold, series.scale = float(threshold_after[last]), float(scale[last])
    series.shift_limit, series.shift_base = float(shift_after[last]), float(base[last])
    series.block_limit, series.block_latest = float(block_after[last]), float(block_latest[last])
    series.window_limits.extend(zip(window_latest[:taken].tolist(), med[:taken].tolist()))
    series.falling = False
    series.refreshes += taken
    series.until_refresh = series.period = REFRESH
    end = start + taken * REFRESH  # (step, row) of the latest window's values: where a shift in them would start
    first = max(start, end - WINDOW)
    series.at.extend(zip(as_list(steps, first, end), range(row + first, row + end)))
    ends = range(start + REFRESH - 1, start + taken * REFRESH, REFRESH)  # the index of each stretch's last value
    levels = level[:taken].tolist()
    series.blocks.extend(zip(range(row + ends[0], row + ends[-1] + 1, REFRESH)[-TREND_BLOCKS:], levels[-TREND_BLOCKS:]))
    series.last_step = int(steps[ends[-1]])
    if series.on_block is not None:
        spreads = [log_spread(h, lo) for h, lo in zip(blocks[:taken, B_HIGH].tolist(), blocks[:taken, B_LOW].tolist())]
        block_steps = as_list(steps, ends[0] - REFRESH + 1, ends[-1] + 1)  # each block's first and last step from these
        for k, first, step, lv, sc, sp in zip(ends, block_steps[::REFRESH], block_steps[REFRESH - 1::REFRESH], levels,
                                              scale[:taken].tolist(), spreads):
            series.on_block(first, step, row + k, lv, sc, sp)
    return start + taken * REFRESH
