"""Synthetic training logs with known spikes, resumes, repeated data, NaN and creep: ground truth.

A curve is a slowly decaying power law with Gaussian noise (what a pretraining loss looks like past
its first few thousand steps). A scenario plants patterns on it at known places and keeps a record
of what it planted, so that `spikes.py` can be scored against it:

| scenario | what is planted |
| --- | --- |
| `clean` | nothing: noise only (a detector must report no spike) |
| `mixed` | spikes of all four types with a grad-norm spike 0-3 steps ahead of each; most lasting and diverging spikes are followed by a rollback to before them |
| `fast_recovery`, `slow_recovery`, `no_recovery`, `divergence` | like `mixed`, with spikes of that one type only |
| `lasting_offset` | fast, slow and not recovering spikes, the last settling only 3-10% above the curve: an offset inside the noise band of a noisy run |
| `grad_spikes` | grad-norm spikes (4-9x) with no loss spike |
| `creep` | the loss climbs slowly without a spike (divergence without a spike) |
| `nan` | a spike that diverges and turns into NaN until the end of the log |
| `resume` | crash-resumes, each followed by a small spike (a data loader restored badly) |
| `repeat_data` | a rollback after which the loss is lower (memorised, repeated data), then jumps back up to the trend: no spike, the truth lists none |
| `datasets` | per-dataset losses `loss/cm4` and `loss/pmd` with shared and confined spikes; `loss` is their mean |

Use it from Python:

    from synthetic_curves import make_curve
    curve = make_curve("mixed", seed=3)
    curve.truth        # {"spikes": [{"step", "start", "type", "grad_norm_lead"}], "events": [...], "nan_step"}
    curve.write_csv("mixed.csv")
    pairs = match(found_spikes, curve.truth["spikes"])   # (planted, found) whose starts are within 5 steps

or from the command line (stdlib only):

    python diagnostics/synthetic_curves.py --scenario mixed --seed 3 --out mixed.csv --truth truth.json

`--rows N` sets the length; the planted patterns keep their spacing, so a longer curve holds more of them.
The lines that plant a pattern carry a `# BUG:` comment; `clean` is the healthy twin.
"""
import csv
import json
import math
import os
import random
import sys

from ml_debug_contract import ArgumentParser, OutputRefused, output_file

SPIKE_TYPES = ("fast_recovery", "slow_recovery", "no_recovery", "divergence")
SCENARIOS = ("clean", "mixed", *SPIKE_TYPES, "lasting_offset", "grad_spikes", "creep", "nan", "resume", "repeat_data", "datasets")
DEFAULT_ROWS = {"clean": 6000, "mixed": 12000, "fast_recovery": 4000, "slow_recovery": 5000, "no_recovery": 5000,
                "divergence": 4000, "lasting_offset": 12000, "grad_spikes": 4000, "creep": 5000, "nan": 4000, "resume": 7000, "repeat_data": 6000,
                "datasets": 6000}
WARMUP_ROWS = 1500  # no pattern before this row: the curve still falls fast and the baseline fills


def trend(step):
    """The noiseless loss: 5.0 at step 0, 2.9 at step 10k, decaying like a power law towards 2.0."""
    return 2.0 + 3.0 * (1.0 + max(step, 0) / 1000.0) ** -0.5


def grad_trend(step):
    return 0.5 * (1.0 + max(step, 0) / 2000.0) ** -0.3


class Shape:
    """A planted spike: relative excess over the curve, `ramp` rows of rise, peak at row `peak`."""

    def __init__(self, kind, peak, height, tau=1.0, offset=0.0, ramp=0, rise=0.0, nan_after=None, step=0):
        self.kind, self.peak, self.height, self.tau = kind, peak, height, tau
        self.offset, self.ramp, self.rise, self.nan_after = offset, ramp, rise, nan_after
        self.step = step  # the step at which the spike begins: a rollback to before it undoes it
        self.settled_after = math.inf if kind == "divergence" else 40 * tau  # rows; exp(-40) is nothing

    def excess(self, row):
        d = row - self.peak
        if d < -self.ramp:
            return 0.0
        if d < 0:
            return self.height * (self.ramp + d + 1) / (self.ramp + 1)
        if self.kind == "divergence":
            return self.height + self.rise * d
        return self.offset + (self.height - self.offset) * math.exp(-d / self.tau)

    def is_nan(self, row):
        return self.nan_after is not None and row - self.peak >= self.nan_after


class Curve:
    """A planned synthetic log: `truth` says what was planted, `rows()` yields the log row by row."""

    def __init__(self, scenario, seed=0, rows=None):
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
        self.scenario, self.seed = scenario, seed
        self.n_rows = rows or DEFAULT_ROWS[scenario]
        self.rng = random.Random(seed)
        self.noise = self.rng.uniform(0.005, 0.012)  # relative standard deviation of the loss noise
        self.actions = {}  # row -> list of (action, argument)
        self.offset = 0  # step = row - offset; resumes move it
        self.truth = {"spikes": [], "events": [], "nan_step": None}
        self.columns = ["step", "loss", "grad_norm", "lr"]
        if scenario in SPIKE_TYPES:
            self._plan_spikes([scenario])
        else:
            getattr(self, "_plan_" + scenario)()

    # --- planning: decide every pattern and record the truth ---------------------------------

    def _at(self, row, action, arg=None):
        self.actions.setdefault(row, []).append((action, arg))

    def _step(self, row):
        return row - self.offset

    def _spike(self, kind, start, **shape):
        """Plant a spike whose rise begins at row `start`; returns its Shape."""
        ramp = shape.pop("ramp", self.rng.randint(0, 2))
        s = Shape(kind, start + ramp, ramp=ramp, step=self._step(start), **shape)
        self._at(start, "spike", s)
        lead = self.rng.randint(0, 3)
        self._at(start - lead, "grad_spike", self.rng.uniform(4, 15))
        self.truth["spikes"].append({"step": self._step(s.peak), "start": self._step(start), "type": kind,
                                     "grad_norm_lead": lead})
        return s

    def _resume(self, row, back, repeat=None):
        """At `row` the log goes back `back` steps (a restart from an earlier checkpoint)."""
        before = self._step(row - 1)
        self.offset += back + 1
        self._at(row, "resume", (self._step(row), repeat))
        self.truth["events"].append({"kind": "resume", "step": self._step(row), "from_step": before})

    def _plan_clean(self):
        pass

    def _plan_mixed(self):
        self._plan_spikes(["fast_recovery"] * 3 + ["slow_recovery"] * 2 + ["no_recovery"] * 2 + ["divergence"])

    def _plan_lasting_offset(self):
        self.noise = self.rng.uniform(0.012, 0.02)  # a noisy run: its noise band is wider than the offsets
        self._plan_spikes(["fast_recovery", "slow_recovery", "no_recovery", "no_recovery"], offsets=(0.03, 0.10))

    def _plan_spikes(self, kinds, offsets=(0.12, 0.35)):
        """Spikes of the given kinds, drawn in shuffled rounds, one after the other to the end of the log."""
        rng = self.rng
        bag = []
        row = WARMUP_ROWS
        while row < self.n_rows - 900:
            if not bag:
                bag = list(kinds)
                rng.shuffle(bag)
            kind = bag.pop()
            if kind == "fast_recovery":
                self._spike(kind, row, height=rng.uniform(0.15, 1.5), tau=rng.uniform(1.0, 2.5))
                row += rng.randint(250, 500)
            elif kind == "slow_recovery":
                height = rng.uniform(0.3, 1.5)
                back_in = rng.randint(80, 800)  # rows until the excess is down to 1% (seed 001: ~500)
                self._spike(kind, row, height=height, tau=back_in / math.log(height / 0.01))
                row += back_in + rng.randint(250, 400)
            elif kind == "no_recovery":
                start = row
                self._spike(kind, row, height=rng.uniform(0.3, 1.5), offset=rng.uniform(*offsets),
                            tau=rng.uniform(3, 15))
                row += rng.randint(600, 900)
                if rng.random() < 0.7:  # usually someone restarts from a checkpoint before the spike
                    self._resume(row, back=row - start + rng.randint(20, 200))
                row += rng.randint(300, 500)
            else:
                start = row
                variant = rng.choice(["flat", "rising", "nan"])
                if variant != "nan":  # settles at 1.8x to 3x the curve, flat or still climbing
                    rise = 0.0 if variant == "flat" else rng.uniform(0.0005, 0.002)
                    self._spike(kind, row, height=rng.uniform(0.8, 2.0), rise=rise)
                    row += rng.randint(400, 700)
                else:
                    nan_after = rng.randint(3, 15)
                    s = self._spike(kind, row, height=rng.uniform(0.5, 1.5), rise=0.1, nan_after=nan_after)
                    if self.truth["nan_step"] is None:
                        self.truth["nan_step"] = self._step(s.peak + nan_after)
                    row = s.peak + nan_after + rng.randint(10, 30)
                self._resume(row, back=row - start + rng.randint(20, 200))
                row += rng.randint(300, 500)

    def _plan_grad_spikes(self):
        row = WARMUP_ROWS
        while row < self.n_rows - 300:
            self._at(row, "grad_spike", self.rng.uniform(3, 8))
            self.truth["events"].append({"kind": "grad_norm_spike", "step": self._step(row)})
            row += self.rng.randint(300, 600)

    def _plan_creep(self):
        start = self.rng.randint(2500, 3000)
        self._at(start, "creep", self.rng.uniform(0.3, 0.6) / 1500)  # +30-60% over 1500 rows
        self.truth["events"].append({"kind": "non_spike_divergence", "step": self._step(start)})

    def _plan_nan(self):
        start = self.rng.randint(2500, 3000)
        nan_after = self.rng.randint(5, 20)
        s = self._spike("divergence", start, height=self.rng.uniform(0.5, 1.5), rise=0.1, nan_after=nan_after)
        self.truth["nan_step"] = self._step(s.peak + nan_after)
        self.n_rows = s.peak + nan_after + 100

    def _plan_resume(self):
        rng = self.rng
        row = WARMUP_ROWS
        while row < self.n_rows - 600:
            self._resume(row, back=rng.randint(0, 100))
            resume_step = self._step(row)
            start = row + rng.randint(1, 5)
            height = rng.uniform(0.08, 0.3)
            if rng.random() < 0.5:
                self._spike("fast_recovery", start, height=height, tau=rng.uniform(1.0, 2.5))
            else:
                back_in = rng.randint(60, 150)
                self._spike("slow_recovery", start, height=height, tau=back_in / math.log(height / 0.01))
            self.truth["events"].append({"kind": "resume_spike", "step": self.truth["spikes"][-1]["step"],
                                         "resume_step": resume_step})
            row += rng.randint(900, 1300)

    def _plan_repeat_data(self):
        rng = self.rng
        row = rng.randint(2500, 3000)
        length = rng.randint(400, 1200)
        self._resume(row, back=rng.randint(100, 400), repeat=(rng.uniform(0.08, 0.15), length))
        self.truth["events"].append({"kind": "resume_drop", "step": self._step(row)})
        self.truth["events"].append({"kind": "repeat_data", "step": self._step(row + length),
                                     "resume_step": self._step(row)})
        self.n_rows = max(self.n_rows, row + length + 1500)

    def _plan_datasets(self):
        rng = self.rng
        self.columns = ["step", "loss", "loss/cm4", "loss/pmd"]
        row = WARMUP_ROWS
        while row < self.n_rows - 300:
            scope = rng.choice(["shared", "loss/cm4", "loss/pmd"])
            ramp = rng.randint(0, 1)
            s = Shape("fast_recovery", row + ramp, rng.uniform(0.4, 1.2), tau=rng.uniform(1.0, 2.0), ramp=ramp)
            self._at(row, "dataset_spike", (scope, s))
            series = ["loss/cm4", "loss/pmd"] if scope == "shared" else [scope]
            self.truth["events"].append({"kind": "series_spike", "step": self._step(s.peak), "series": series,
                                         "scope": "shared" if scope == "shared" else "confined"})
            row += rng.randint(300, 500)

    # --- generating ---------------------------------------------------------------------------

    def rows(self):
        """Yield one dict per logged step, with the columns of `self.columns`."""
        rng = random.Random(self.seed * 7919 + 1)  # the noise stream, apart from the planning stream
        gauss = rng.gauss
        noise = self.noise
        active, grad_spikes, dataset_spikes = [], [], []
        settled = []  # (start step, factor) of lasting offsets whose decay is over
        creep_from, creep_rate, repeat = None, 0.0, None
        step = 0
        for row in range(self.n_rows):
            for action, arg in self.actions.get(row, ()):
                if action == "spike":
                    active.append(arg)
                elif action == "grad_spike":
                    grad_spikes.append((row, arg))
                elif action == "dataset_spike":
                    dataset_spikes.append(arg)
                elif action == "creep":
                    creep_from, creep_rate = row, arg
                elif action == "resume":  # a rollback undoes what happened after the checkpoint
                    step, planted = arg
                    active = [s for s in active if s.step <= step]
                    settled = [(at, f) for at, f in settled if at <= step]
                    repeat = None if planted is None else (planted[0], row + planted[1])
            if active:  # retire spikes that are over; a lasting offset stays as a plain factor
                done = [s for s in active if row - s.peak > s.settled_after]
                if done:
                    settled.extend((s.step, 1.0 + s.offset) for s in done if s.offset)
                    active = [s for s in active if s not in done]
            if grad_spikes:
                grad_spikes = [(at, h) for at, h in grad_spikes if row - at < 3]
            if dataset_spikes:
                dataset_spikes = [(scope, s) for scope, s in dataset_spikes if row - s.peak <= s.settled_after]
            level = trend(step)
            if creep_from is not None:
                level *= 1.0 + creep_rate * (row - creep_from)  # BUG: a slow climb, no spike
            if repeat is not None and row < repeat[1]:
                level *= 1.0 - repeat[0]  # BUG: repeated data, seen before: the loss looks better than it is
            factor = 1.0
            for _, f in settled:
                factor *= f
            for s in active:
                factor *= 1.0 + s.excess(row)  # BUG: the planted spikes
            loss = level * factor * (1.0 + noise * gauss(0.0, 1.0))
            if any(s.is_nan(row) for s in active):
                loss = float("nan")  # BUG: a divergence that ends in NaN
            out = {"step": step}
            if self.scenario == "datasets":
                cm4 = 1.3 * level * (1.0 + noise * gauss(0.0, 1.0))
                pmd = 0.7 * level * (1.0 + noise * gauss(0.0, 1.0))
                for scope, s in dataset_spikes:
                    if scope in ("shared", "loss/cm4"):
                        cm4 *= 1.0 + s.excess(row)  # BUG: a spike in one dataset, or in both
                    if scope in ("shared", "loss/pmd"):
                        pmd *= 1.0 + s.excess(row)  # BUG: a spike in one dataset, or in both
                out.update({"loss": (cm4 + pmd) / 2, "loss/cm4": cm4, "loss/pmd": pmd})
            else:
                grad = grad_trend(step) * math.exp(0.1 * gauss(0.0, 1.0))
                for at, height in grad_spikes:  # those of the last 3 rows (pruned above)
                    grad *= 1.0 + height * math.exp(-(row - at))  # BUG: a grad-norm spike (a loss spike's, or alone)
                out.update({"loss": loss, "grad_norm": grad, "lr": 3e-4 * min(1.0, (step + 1) / 500)})
            yield out
            step += 1

    def write_csv(self, path, overwrite=True):
        """Write the log as CSV; overwrite=False refuses (FileExistsError) a path that exists."""
        with open(path, "w" if overwrite else "x", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(self.columns)
            for r in self.rows():
                writer.writerow([r["step"]] + [_cell(r[c]) for c in self.columns[1:]])


def _cell(value):
    return "nan" if value != value else f"{value:.6g}"


def make_curve(scenario, seed=0, rows=None):
    """Plan a synthetic log. `scenario` is one of SCENARIOS; `rows` overrides its default length."""
    return Curve(scenario, seed, rows)


MATCH_STEPS = 5  # a found spike is the planted one when their starts are this close: "within a few steps"


def match(found, planted, tolerance=MATCH_STEPS):
    """Pairs (planted, found) of spikes (found: objects with .start) whose starts are within `tolerance` steps,
    greedily in planted order: how the tests and benchmarks/spikes_scores.py score spikes.py."""
    pairs, used = [], set()
    for truth in planted:
        near = [s for s in found if id(s) not in used and abs(s.start - truth["start"]) <= tolerance]
        if near:
            used.add(id(near[0]))
            pairs.append((truth, near[0]))
    return pairs


def main(argv=None):
    parser = ArgumentParser(description="Write a synthetic training log (CSV) with known, planted "
                                            "loss patterns, and optionally its ground truth (JSON).")
    parser.add_argument("--scenario", choices=SCENARIOS, default="mixed", help="what to plant (default: mixed)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--rows", type=int, help="number of logged steps (default depends on the scenario)")
    parser.add_argument("--out", required=True, help="the CSV file to write (an existing file is refused without --force)")
    parser.add_argument("--truth", help="also write what was planted to this JSON file")
    parser.add_argument("--force", action="store_true", help="replace --out and --truth files that exist")
    args = parser.parse_args(argv)
    problem = None
    if args.rows is not None and args.rows < 100:
        problem = "--rows must be at least 100"
    elif args.truth and os.path.realpath(args.truth) == os.path.realpath(args.out):
        problem = "--out and --truth name the same file"
    else:
        try:
            output_file(args.out, args.force, inputs=[args.truth] if args.truth else [], option="--out")
            if args.truth:
                output_file(args.truth, args.force, inputs=[args.out], option="--truth")
        except OutputRefused as exc:
            problem = str(exc)
    if problem is not None:
        print(f"synthetic_curves.py: {problem}", file=sys.stderr)
        return 2
    curve = make_curve(args.scenario, args.seed, args.rows)
    try:
        curve.write_csv(args.out, overwrite=args.force)
        if args.truth:
            with open(args.truth, "w" if args.force else "x") as handle:
                json.dump(curve.truth, handle, indent=1)
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130
    except OSError as exc:
        print(f"synthetic_curves.py: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(f"wrote {curve.n_rows} rows ({args.scenario}, seed {args.seed}) to {args.out}\n")
        sys.stdout.flush()
    except OSError as exc:  # `... | head` closed the pipe, or stdout is a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return 0 if isinstance(exc, BrokenPipeError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
