"""What the whole log shows beyond one series' spikes: creeping divergence, resumes and repeated data,
grad-norm leads, grad-norm spikes alone, resume spikes, spikes per dataset."""
import bisect
import math
import statistics
from collections import deque

from .thresholds import (BLOCK, CREEP_ABS, CREEP_BLOCKS, CREEP_REL, CREEP_SMOOTH, CREEP_Z, MEDIAN_SE, DROP_REL, DROP_Z,
                         GRAD_ALONE_RATIO, JUMP_CONFIRM, LEAD_STEPS, RESUME_NEAR, SHARED_GAP)


class Creep:
    """Divergence without a spike: healthy block medians climbing well above their lowest level."""

    def __init__(self, events):
        self.events, self.event = events, None
        self.reset()

    def reset(self, why=None):
        """Start afresh after a resume or a re-based baseline; after a divergence, stay quiet until a resume.
        After repeat_data a rise already reported is withdrawn: it was the loss leaving the repeated data."""
        if why == "repeat_data" and self.event is not None:
            self.events.remove(self.event)
        self.low, self.low_step, self.above, self.event = None, None, 0, None
        self.latest = deque(maxlen=CREEP_SMOOTH)  # the medians of the latest healthy blocks
        self.rise = self.least = 0.0  # since the low: the blocks' medians summed above the noise edge (a CUSUM),
        self.onset = None  # ...its least value so far, and the first step of the block after it (see add_block)
        self.paused = why == "divergence"  # its further climb is the divergence already reported

    def add_block(self, first_step, step, row, level, scale, spread):
        """A healthy block's median `level` (its steps first_step..step), the run's scale, and the robust sigma of
        the block's logs (0 unless positive). The level watched is the median of the latest CREEP_SMOOTH block
        medians: the lowest of many single block medians is an extreme of their noise, which later blocks rise from
        by chance (a segmentation batch loss with 25% noise a row read as a creep). A rise within CREEP_Z standard
        errors of a block median, in logs, is that median's noise.

        Where the rise began is a change point (a CUSUM, like Series' level shift): the first block of the latest
        stretch since the low whose medians sum the most above the noise edge, the low plus CREEP_Z standard
        errors (and CREEP_ABS of the scale). A creep leaves the low there; a lasting step up, the noise before it
        long after the low, at the step (the low alone could be thousands of steps earlier)."""
        if self.paused:
            return
        self.latest.append(level)
        if len(self.latest) < CREEP_SMOOTH:
            return
        smooth = statistics.median(self.latest)
        if self.low is None or smooth < self.low:
            if self.event is not None:  # a new low: the rise was not a divergence after all
                self.events.remove(self.event)
                self.event = None
            self.low, self.low_step, self.above = smooth, step, 0
            self.rise = self.least = 0.0
            self.onset = None
            return
        noise = self.low * math.exp(CREEP_Z * MEDIAN_SE * spread)  # (a block median up to here: its own noise)
        if self.rise <= self.least:  # (the first block after the low too: both are 0 there)
            self.least, self.onset = self.rise, first_step
        self.rise += level - max(noise, self.low + CREEP_ABS * scale)
        if smooth <= self.low + max(CREEP_REL * abs(self.low), CREEP_ABS * scale) or smooth <= noise:
            self.above = 0
            return
        self.above += 1
        if self.event is None and self.above >= CREEP_BLOCKS:
            self.event = {"kind": "non_spike_divergence", "step": self.onset, "detected_step": step,
                          "last_step": step, "from": self.low, "low_step": self.low_step, "to": smooth, "_row": row}
            self.events.append(self.event)
        if self.event is not None:
            self.event["step"], self.event["last_step"] = self.onset, step
            self.event["to"] = max(self.event["to"], smooth)


class ResumeWatch:
    """After a resume: is the loss suspiciously lower than before it, and does it then jump back up?"""

    def __init__(self, step, row, ref, series, events):
        self.step, self.row, self.ref, self.series, self.events = step, row, ref, series, events
        self.sigma = series.sigma
        self.after = []  # the first BLOCK values after the resume
        self.gap = None  # how much lower they were, once the drop is seen; then we watch for the jump back
        self.recent = deque(maxlen=JUMP_CONFIRM)  # (step, row, value, threshold)

    def quiet(self):
        """How many finite values add() would only keep, while the baseline has a median and no drop is known yet:
        the caller may hand that many (or fewer) to keep() at once."""
        return BLOCK - 1 - len(self.after)

    def keep(self, values):
        """What add() does with each of these finite values while quiet() lasts: keep it, and say nothing."""
        self.after.extend(values)

    def add(self, step, row, x):
        """Take one loss value (after the series took it); True once there is nothing more to watch for."""
        level_now = self.series.med  # the baseline median follows the curve while the data repeats
        if x - x != 0 or level_now is None:
            return False
        if self.gap is None:
            self.after.append(x)
            if len(self.after) < BLOCK:
                return False
            low = statistics.median(self.after)
            drop = self.ref - low
            if drop < max(DROP_Z * self.sigma, DROP_REL * abs(self.ref)):
                return True
            self.gap, self.low = drop, low
            self.events.append({"kind": "resume_drop", "step": self.step, "before": self.ref, "after": low,
                                "drop_pct": 100.0 * drop / abs(self.ref), "_row": self.row})
            return False
        self.recent.append((step, row, x, level_now + self.gap / 2))  # half the drop back up
        first_step, first_row, first, threshold = self.recent[0]
        if len(self.recent) == JUMP_CONFIRM and first > threshold:
            level = statistics.median(v for _, _, v, _ in self.recent)
            if level > threshold:
                spike = self.series.repeat_ended(self.gap, row)
                self.events.append({"kind": "repeat_data", "step": first_step, "resume_step": self.step,
                                    "before": self.ref, "low": self.low, "high": level,
                                    "expected": level_now + self.gap, "spike": spike, "_row": first_row})
                return True
        return False


def link_grad_leads(spikes, grad_spikes, resumes):
    """grad_norm_lead: steps from the start of the latest grad-norm spike to the start of the loss spike."""
    grad_spikes = sorted(grad_spikes, key=lambda g: g.start_row)
    grad_rows = [g.start_row for g in grad_spikes]
    resume_rows = [r for r, _, _ in resumes]
    for spike in spikes:
        k = bisect.bisect_right(resume_rows, spike.start_row)
        since = resume_rows[k - 1] if k else -1  # a grad-norm spike before the last resume belongs elsewhere
        i = bisect.bisect_right(grad_rows, spike.start_row) - 1
        while i >= 0 and grad_rows[i] >= since:
            lead = spike.start - grad_spikes[i].start
            if lead > LEAD_STEPS and spike.start_row - grad_rows[i] > 1:
                break
            if lead >= 0:
                spike.grad_norm_lead = lead
                break
            i -= 1


def grad_only_events(spikes, grad_spikes, events):
    """Grad-norm spikes that neither led a loss spike nor came during one: events of their own."""
    starts = [s.start_row for s in spikes]
    for g in grad_spikes:
        i = bisect.bisect_left(starts, g.start_row - 1)
        led = i < len(spikes) and (spikes[i].start_row - g.start_row <= 1 or spikes[i].start - g.start <= LEAD_STEPS)
        during = i > 0 and spikes[i - 1].end_row >= g.start_row
        if not (led or during) and g.peak >= GRAD_ALONE_RATIO * g.baseline:
            events.append({"kind": "grad_norm_spike", "step": g.step, "start": g.start, "baseline": g.baseline,
                           "peak": g.peak, "type": g.type, "_row": g.start_row})


def resume_spike_events(spikes, resumes, events):
    resume_rows = [r for r, _, _ in resumes]
    for spike in spikes:
        i = bisect.bisect_right(resume_rows, spike.start_row) - 1
        if i >= 0 and spike.start_row - resume_rows[i] <= RESUME_NEAR:
            row, step, _ = resumes[i]
            events.append({"kind": "resume_spike", "step": spike.step, "resume_step": step,
                           "rows_after_resume": spike.start_row - row, "type": spike.type, "_row": spike.start_row})


def series_spike_events(main, extras, events):
    """With two or more dataset series: is each spike shared by several or confined to one?"""
    extras = [s for s in extras if s.med is not None or s.spikes]  # the series that had a baseline
    if len(extras) < 2:
        return
    found = sorted((sp.start_row, sp.end_row, s.name, sp) for s in extras for sp in s.spikes)
    clusters = []
    for start_row, end_row, name, spike in found:
        if clusters and start_row <= clusters[-1]["end_row"] + SHARED_GAP:
            cluster = clusters[-1]
            cluster["end_row"] = max(cluster["end_row"], end_row)
            cluster["spikes"][name] = spike
        else:
            clusters.append({"start_row": start_row, "end_row": end_row, "spikes": {name: spike}})
    names = [s.name for s in extras]
    for c in clusters:
        spiked = [n for n in names if n in c["spikes"]]
        in_main = any(sp.start_row <= c["end_row"] + SHARED_GAP and c["start_row"] <= sp.end_row + SHARED_GAP
                      for sp in main.spikes)
        events.append({"kind": "series_spike", "step": min(sp.step for sp in c["spikes"].values()),
                       "series": spiked, "quiet": [n for n in names if n not in spiked],
                       "scope": "shared" if len(spiked) > 1 else "confined", "in_main": in_main,
                       "types": {n: c["spikes"][n].type for n in spiked}, "_row": c["start_row"]})
