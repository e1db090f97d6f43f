"""Which column plays which role (DESIGN.md, "A training log"), and rows turned into chunks.

A chunk holds a stretch of rows column by column: (steps, losses, grads, lrs, [extra series], complete),
None for a role the log lacks; complete when no value is missing (None) in steps, losses, grads and extras.
"""
import collections
import itertools
import operator
import re

from .. import CliError


STEP_NAMES = ("step", "global_step", "trainer/global_step", "_step", "current_steps", "num_updates", "time/iterations",
              "iter", "iteration", "time/total_timesteps", "total_timesteps", "total timesteps", "total/steps")
# current_steps: LLaMA-Factory; time/iterations: stable-baselines3 (its time/total_timesteps, OpenAI baselines'
# total/steps and an RL script's `total timesteps` count environment steps: a step too, when no iteration counter is)
LOSS_NAMES = ("total_loss", "loss", "train_loss", "train/loss", "lm_loss", "xent")  # a loss in parts: its total first
# (detectron2's total_loss, mmdetection's loss); lm_loss: Megatron-LM's `lm loss`; xent: OpenNMT-py
GRAD_NAMES = ("grad_norm", "train/grad_norm", "gnorm")  # train/...: the HF Trainer's TensorBoard tags; gnorm: fairseq
LR_NAMES = ("lr", "learning_rate", "train/learning_rate")
PART = re.compile(r"^train/\w+_loss$")  # YOLOv8's train/box_loss, train/cls_loss, ...: with no total, their sum
COMPONENT = re.compile(r"(^|/)loss_\w+$|_loss$")  # loss_cls, train/value_loss: a part of the total
DATASET = re.compile(r"(^|[/.])loss([/.]|$)")  # loss/cm4, cm4/loss: one dataset's loss; loss_cls, nll_loss are
# parts or variants of the loss, not datasets
# Validation losses are sampled sparsely and reflect no single batch: they are never a dataset's series;
# nor is an fp16 loss scale.
VALIDATION = re.compile(r"(^|[/_.\- ])(val|valid|validation|eval|test)([/_.\- ]|$)", re.IGNORECASE)
CAMEL_VALIDATION = re.compile(r"(Val|Valid|Eval|Test)[A-Z]")  # ValLoss, TestLoss
# Summary columns: a W&B export's min/max envelope of each series, Lightning's per-epoch means. Not datasets.
SUMMARY = re.compile(r"(__min|__max|_epoch)$", re.IGNORECASE)
SUMMARY_SHARE = 10  # a loss logged 10x as often as every other is the per-step one, the others summaries (an
# epoch's average): an epoch of fewer than 10 logged steps gives too few values for spikes to judge anyway
PREVIEW_ROWS = 1000  # JSONL and event files name their columns row by row: the first rows decide
TEXT_SCAN = 100_000  # plain text: the first 1000 lines with a loss decide, looked for among this many (ours)


def base_name(name):
    """The metric a column holds, lower case: a W&B export writes '<run name> - train/loss', Lightning's
    CSVLogger 'train_loss_step' for the per-step values of train_loss."""
    low = name.strip().lower()
    if " - " in low:
        low = low.rsplit(" - ", 1)[1]
    if low.endswith("_step") and low not in STEP_NAMES:
        low = low[:-5]
    return "_".join(low.split())  # Megatron-LM's `lm loss`, `grad norm`


class Columns:
    """Which column plays which role: names as written in the log, None when absent."""

    def __init__(self, names, loss_name=None, epoch_rows=False, counts=None):
        """`counts`: {name: numbers among the first records}, where the log names its values record by record: the
        numeric series a refusal lists (a table lists its columns)."""
        kept = [n for n in names if not SUMMARY.search(n.strip())]  # min/max envelopes, epoch means
        self.names = kept
        exact, base = {}, {}
        for name in kept:
            exact.setdefault(name.strip().lower(), name)
            base.setdefault(base_name(name), name)
        if loss_name:
            self.loss = exact.get(loss_name.strip().lower()) or base.get(base_name(loss_name))
        else:
            self.loss = next((base[n] for n in LOSS_NAMES if n in base), None)
        self.step = next((exact[n] for n in STEP_NAMES if n in exact), None)
        if self.step is None and epoch_rows:  # a table of one row per epoch (Keras CSVLogger, timm, ultralytics)
            self.step = exact.get("epoch")
        self.parts = []  # the loss is the sum of these (the first is self.loss), when the log has no total
        if self.loss is None and not loss_name:
            self.parts = [name for low, name in base.items() if PART.match(low)]
            self.loss = self.parts[0] if self.parts else self._only_loss(base, counts)
        if self.loss is None:
            self._refuse(kept, loss_name, counts)
        self.grad = next((base[n] for n in GRAD_NAMES if n in base), None)
        self.lr = next((base[n] for n in LR_NAMES if n in base), None)
        taken = {n for n in LOSS_NAMES} | {base_name(self.loss)}
        self.extras = [  # every other loss named loss/<x> or <x>/loss is taken for one dataset's loss (cm4, pmd, ...)
            name for low, name in base.items()
            if DATASET.search(low) and low not in taken and name != self.loss and not VALIDATION.search(low)
            and "scale" not in low
        ]

    def _only_loss(self, base, counts):
        """No loss by a name we know: the one column named like a loss (`avg_loss`, `TrainLoss`) that is no validation
        loss, loss scale or loss weight (a config's LOSS_WEIGHT: 1.0), or the one of those named for training, or,
        where records name their values, the one logged SUMMARY_SHARE times as often as each other (`Batch loss`
        beside an epoch's `Average Train Loss`); else a column named `train` (build-nanogpt's `1200 train 3.21`);
        else None."""
        named = [name for low, name in base.items() if "loss" in low and not VALIDATION.search(low)
                 and not CAMEL_VALIDATION.match(name.strip()) and "scale" not in low and "weight" not in low
                 and not name.isupper()]
        train = [name for name in named if base_name(name).startswith("train")]
        if len(named) == 1:
            return named[0]
        if len(train) == 1:
            return train[0]
        most = max(named, key=lambda n: counts.get(n, 0)) if named and counts else None
        if most is not None and all(counts[most] >= SUMMARY_SHARE * counts.get(n, 0) for n in named if n != most):
            return most
        return base.get("train")

    def _refuse(self, kept, loss_name, counts):
        """No loss: say which series the log holds (numeric ones, with their counts, where records name them)."""
        if counts is not None:
            kept = [n for n in kept if counts.get(n)]
        hints = [n for n in kept if "loss" in n.lower()] + [n for n in kept if "loss" not in n.lower() and n != self.step]
        shown = [f"{n} ({counts[n]})" if counts is not None else n for n in hints]
        seen = ", ".join(shown[:12]) + (f" and {len(shown) - 12} more" if len(shown) > 12 else "") or "none"
        asked = f"no column '{loss_name}'" if loss_name else "no loss found"
        what = "numeric series (values in the first records)" if counts is not None else "columns"
        raise CliError(f"{asked}: {what}: {seen}; use --loss NAME")

    @property
    def loss_label(self):
        """The loss as the report names it: its column, or the sum of its parts."""
        return " + ".join(self.parts) if len(self.parts) > 1 else self.loss

    def loss_words(self):
        """What the loss read is, for the report: its column; the sum of its parts; or a total with its parts."""
        if len(self.parts) > 1:
            return f"'{self.loss_label}' (no total logged: the sum of its {len(self.parts)} parts)"
        components = self.components()
        if len(components) > 1:
            shown = ", ".join(components[:3]) + (f" and {len(components) - 3} more" if len(components) > 3 else "")
            return f"'{self.loss}' (the total of its parts {shown})"
        return f"'{self.loss}'"

    def components(self):
        """The logged parts of a total loss (loss_cls, loss_bbox, train/value_loss, ...): losses named with an
        underscore that are no dataset, validation loss or loss scale."""
        if base_name(self.loss) not in LOSS_NAMES or self.parts:
            return []
        return [name for name in self.names if name != self.loss and COMPONENT.search(base_name(name))
                and not VALIDATION.search(base_name(name)) and "scale" not in name.lower()]

    def order(self):
        """Column names in row-tuple order: step, loss, grad, lr, the loss's other parts, extras (None where absent)."""
        return [self.step, self.loss, self.grad, self.lr, *self.parts[1:], *self.extras]


class Unparsed:
    """Cells that are present but not numbers: counted per column, then treated as missing."""

    def __init__(self):
        self.columns = {}  # name -> [count, first line]
        self.repeated = None  # [count, first line] of rows left out as a step logged again (repeated_rows)

    def add(self, name, line):
        entry = self.columns.setdefault(name, [0, line])
        entry[0] += 1

    def repeat(self, line, count=1):
        self.repeated = self.repeated or [0, line]
        self.repeated[0] += count


def number(value, name, line, unparsed):
    """A float, None for an empty cell; text that is not a number is counted and treated as empty."""
    if isinstance(value, str):
        value = value.strip()
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        unparsed.add(name, line)
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        unparsed.add(name, line)
        return None


def row_tuple(line, cells, names, unparsed):
    """Row tuple (step, loss, grad, lr, extras) from cells aligned with `names`."""
    values = [None if name is None else number(cell, name, line, unparsed) for name, cell in zip(names, cells)]
    step = values[0]
    if isinstance(cells[0], str) and step is not None:
        try:
            return int(cells[0]), values[1], values[2], values[3], tuple(values[4:])  # exact, however large
        except ValueError:
            pass
    if step is not None:
        if step - step != 0:  # a NaN or infinite step says nothing about where the row is: read as missing
            unparsed.add(names[0], line)
            step = None
        elif step.is_integer():
            step = int(step)
    return step, values[1], values[2], values[3], tuple(values[4:])


def to_chunk(rows, cols):
    """A chunk (steps, losses, grads, lrs, [extra series], complete) from row tuples; None for a role the log
    lacks; complete: no value is missing (None) in steps, losses, grads and extra series."""
    steps, losses, grads, lrs, extras = zip(*rows) if rows else ((),) * 5
    chunk = (list(steps) if cols.step else None, list(losses), list(grads) if cols.grad else None,
             list(lrs) if cols.lr else None, [list(x) for x in zip(*extras)] if cols.extras else [])
    complete = all(c is None or None not in c for c in (chunk[0], chunk[1], chunk[2], *chunk[4]))
    return chunk + (complete,)


def from_records(batches, loss_name, unparsed, need_loss=False, numpy=None):
    """Columns and row tuples from batches of records (lists of line numbers and of dicts: `batched` makes them
    from (line, dict) pairs); the first PREVIEW_ROWS decide the columns. `need_loss` (plain text): a record without
    the loss is no row, and its names are not the log's series. A step counter that starts again when the epoch moves
    on is composed into a global step (epoch_steps). Each stage takes a batch in a few calls at C speed where it can
    (a JSONL log of a million rows has no time for Python work per record), else record by record. With `numpy`, a
    chunk of plain numbers is given as numpy columns (detect/screen.py takes their healthy stretches)."""
    batches = (_training(lines, records) for lines, records in batches)
    preview, counts, seen, rest = [], {}, 0, None
    for lines, records in batches:
        for k, record in enumerate(records):
            seen += 1
            for name, v in record.items():
                counts[name] = counts.get(name, 0) + _numeric(v)
            if need_loss and seen < TEXT_SCAN and not any(_may_be_loss(name, loss_name) for name in record):
                continue  # a config dump or a banner before the training lines (detectron2 prints thousands)
            preview.append((lines[k], record))
            if len(preview) >= PREVIEW_ROWS:
                rest = lines[k + 1:], records[k + 1:]
                break
        if rest is not None:
            break
    if not seen:
        raise CliError("no records with values found")
    batches = itertools.chain([rest] if rest else [], batches)
    cols = Columns(list(counts), loss_name, counts=counts)
    if need_loss:  # (a line with the loss but no step, where the log has steps, is a summary or an evaluation)
        step = cols.step

        def rows_only(lines, records):
            kept = [(line, record) for line, record in zip(lines, records)
                    if cols.loss in record and (step is None or step in record)]
            return [line for line, _ in kept], [record for _, record in kept]

        preview = list(zip(*rows_only(*_unzip(preview))))
        batches = (rows_only(lines, records) for lines, records in batches)
        cols = Columns(list(dict.fromkeys(k for _, record in preview for k in record)), loss_name, counts=counts)
    wanted = cols.order()
    batches = itertools.chain([_unzip(preview)], batches)
    epoch = next((name for name in counts if name.strip().lower() == "epoch"), None)
    if cols.step is not None and epoch is not None:
        batches = epoch_steps(batches, cols.step, epoch)
    if cols.step is not None:
        batches = repeated_rows(batches, cols.step, cols.loss, unparsed)
    return cols, record_chunks(batches, wanted, cols, unparsed, numpy)


BATCH = 4096  # records per batch, where a reader gives them one at a time


def batched(pairs, size=BATCH):
    """Batches (line numbers, records) of `size` (line, record) pairs."""
    pairs = iter(pairs)
    while True:
        batch = list(itertools.islice(pairs, size))
        if not batch:
            return
        yield _unzip(batch)


def _unzip(pairs):
    return [line for line, _ in pairs], [record for _, record in pairs]


def _column(records, name):
    """The value of `name` in each record, None where it is absent (one call at C speed)."""
    return list(map(dict.get, records, itertools.repeat(name)))


def _rising(values):
    """Strictly increasing (False at a NaN)."""
    return all(map(operator.lt, values, itertools.islice(values, 1, None)))


INT, FLOAT, NUMBER = frozenset((int,)), frozenset((float,)), frozenset((int, float))  # (bool is none of them)


def record_chunks(batches, wanted, cols, unparsed, numpy=None):
    """A chunk from each batch of records: where every value wanted is a JSON number (an int step), the columns are
    taken as they are (the same as row_tuple gives, several times faster; a column of floats as it is, one with ints
    made floats); else row by row."""
    for lines, records in batches:
        if not records:
            continue
        columns = [None if name is None else _column(records, name) for name in wanted]
        types = [None if column is None else set(map(type, column)) for column in columns]
        steps = columns[0]
        if (steps is None or types[0] <= INT) and all(kinds is None or kinds <= NUMBER for kinds in types[1:]):
            losses, grads, lrs, *extras = (c if kinds is None or kinds <= FLOAT else [*map(float, c)]
                                           for c, kinds in zip(columns[1:], types[1:]))
            yield _arrays(numpy, steps, losses, grads, lrs, extras) if numpy else (steps, losses, grads, lrs, extras, True)
            continue
        yield to_chunk([row_tuple(line, [None if n is None else record.get(n) for n in wanted], wanted, unparsed)
                        for line, record in zip(lines, records)], cols)


def _arrays(numpy, steps, losses, grads, lrs, extras):
    """A chunk of numpy columns (int64 steps, float64 values): the same numbers; lists where a step overflows int64.
    The learning rate stays a list: it is read only where a spike starts."""
    try:
        steps = steps if steps is None else numpy.array(steps, dtype=numpy.int64)
    except OverflowError:  # a step of 2**63 or more: Python's ints
        return steps, losses, grads, lrs, extras, True
    return (steps, numpy.array(losses), grads if grads is None else numpy.array(grads), lrs,
            [numpy.array(x) for x in extras], True)


PHASE_KEYS = ("mode", "phase", "split", "stage")  # mmdetection's "mode": "val" records


PHASES = frozenset(PHASE_KEYS)


def _training(lines, records):
    """The batch less the records that say they are an evaluation's."""
    if all(map(PHASES.isdisjoint, records)):  # (most batches: at C speed)
        return lines, records
    kept = [(line, record) for line, record in zip(lines, records) if not _validation(record)]
    return [line for line, _ in kept], [record for _, record in kept]


def _validation(record):
    """A record that says it is an evaluation's ({"mode": "val", ...}): no training row."""
    for k in PHASE_KEYS:
        value = record.get(k)
        if isinstance(value, str) and VALIDATION.search(value):
            return True
    return False


def _may_be_loss(name, loss_name):
    low = base_name(name)
    return low == base_name(loss_name) if loss_name else low in LOSS_NAMES or "loss" in low or low == "train"


def _numeric(value):
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return 1
    try:
        float(value)
    except (TypeError, ValueError):
        return 0
    return 1


LAG = 6  # a lagging writer repeats one of the 6 latest steps read (rameyjm7/SFT-Training-LLM's two writers: up to 4)
LAG_ROWS = 2  # ...in up to 2 rows in a row; where the writer ahead paused (a checkpoint), those can reach its step


def repeated_rows(batches, step, loss, unparsed):
    """The records less a lagging writer's: two processes of one LLaMA-Factory run can write each step into one file,
    one writer a row or two behind the other. Its rows go back, each to one of the LAG latest steps read, rising
    among themselves: they are left out and counted in unparsed.repeated. A resume's replay goes back the same way
    but climbs to the highest step again in more than LAG_ROWS rows (the lagging writer's rows stop short of it,
    or catch up in one or two): it stays. A resume to a step not read lately stays too, and the steps count up
    again from it, so that each step of the replay written twice is a repeat (rameyjm7/SFT-Training-LLM resumes
    from step 5240 to 5010, both writers then side by side). A second run written after a first (DiT's log.txt)
    stays whole. A resume by up to LAG_ROWS logged rows, a replay that ends the log, and the latest row written
    again read as repeats. A batch whose steps are numbers rising past the highest so far, each record with a
    loss, is kept whole."""
    top = None  # the step of the last row kept: the highest since the latest resume
    held = []  # (line, record, step) of rows that went back to recent steps: a lagging writer's, or a resume's
    recent = collections.deque(maxlen=LAG)  # the latest steps read
    for lines, records in batches:
        steps = _column(records, step)
        if (not held and records and NUMBER.issuperset(map(type, steps))
                and _rising(steps if top is None else [top, *steps])
                and all(map(dict.__contains__, records, itertools.repeat(loss)))):
            top = steps[-1]
            recent.extend(steps[-LAG:])
            yield lines, records
            continue
        kept = []
        for line, record in zip(lines, records):
            s = record.get(step)
            if loss not in record:  # an evaluation record at a logged step: no row
                s = None
            elif type(s) is not int:
                s = float(s) if _numeric(s) else None
            if s is None:
                kept.append((line, record))
                continue
            if held:
                climbed = len(held) > LAG_ROWS and held[-1][2] == top  # back, then on to the highest step again
                if not climbed and s in recent and held[-1][2] < s <= top:
                    held.append((line, record, s))
                    recent.append(s)
                    continue
                if climbed:  # a resume's replay: the rows stay
                    kept.extend(h[:2] for h in held)
                else:  # the lagging writer's rows
                    unparsed.repeat(held[0][0], len(held))
                held = []
            if top is not None and s <= top:
                if s in recent:
                    held.append((line, record, s))
                    recent.append(s)
                    continue
            top = s  # (below the highest: a resume to a step not read lately; the steps count up again from it)
            recent.append(s)
            kept.append((line, record))
        yield _unzip(kept)
    if held:  # the log ends on rows that went back to recent steps: the lagging writer's last rows
        unparsed.repeat(held[0][0], len(held))


def epoch_steps(batches, step, epoch):
    """Records whose step counts from the start of each epoch (mmdetection's `iter`, DeepSpeed-Chat's `Step`, an
    epoch's batch index) with a global step: where the step goes back as the epoch moves on, the counter goes on
    from the epoch's last logged step plus the logging interval (the step before the last one to the last). A step
    that goes back without a new epoch is a resume and stays as it is. A batch whose steps and epochs are numbers,
    the steps rising past the last one, before any epoch went back, is kept whole."""
    offset, last, interval, last_epoch = 0, None, 1, None
    for lines, records in batches:
        raw = _column(records, step)
        if (offset == 0 and records and NUMBER.issuperset(map(type, raw))
                and NUMBER.issuperset(map(type, _column(records, epoch)))):
            try:  # (a step or an epoch past the float range, 10**400: record by record, below)
                steps = [*map(float, raw)] if last is None else [last, *map(float, raw)]
                final_epoch = float(records[-1][epoch])
            except OverflowError:
                steps = None
            if steps is not None and _rising(steps):
                if len(steps) > 1:
                    interval = steps[-1] - steps[-2]
                last, last_epoch = steps[-1], final_epoch
                yield lines, records
                continue
        changed = []
        for record in records:
            s, e = _float(record.get(step)), _float(record.get(epoch))
            if s is not None and e is not None:
                if last is not None and e > last_epoch and s + offset <= last:
                    offset = last + interval - s
                if offset:
                    record = {**record, step: s + offset}
                if last is not None and s + offset > last:
                    interval = s + offset - last
                last, last_epoch = s + offset, e
            changed.append(record)
        yield lines, changed


def _float(value):
    """A number as a float; None for no number, or for one past the float range (a step of 10**400 stays as the
    log wrote it)."""
    try:
        return float(value) if _numeric(value) else None
    except OverflowError:
        return None
