"""Which column plays which role (DESIGN.md, "A training log"), and rows turned into chunks.

A chunk holds a stretch of rows column by column: (steps, losses, grads, lrs, [extra series], complete),
None for a role the log lacks; complete when no value is missing (None) in steps, losses, grads and extras.
"""
import itertools
import re

from .. import CliError


STEP_NAMES = ("step", "global_step", "trainer/global_step", "_step", "iter", "iteration")
LOSS_NAMES = ("loss", "train_loss", "train/loss")
GRAD_NAMES = ("grad_norm", "train/grad_norm")  # train/...: the HF Trainer's TensorBoard tags
LR_NAMES = ("lr", "learning_rate", "train/learning_rate")
# Validation losses are sampled sparsely and reflect no single batch: they are never a dataset's series;
# nor is an fp16 loss scale.
VALIDATION = re.compile(r"(^|[/_.\- ])(val|valid|validation|eval|test)([/_.\- ]|$)", re.IGNORECASE)
# Summary columns: a W&B export's min/max envelope of each series, Lightning's per-epoch means. Not datasets.
SUMMARY = re.compile(r"(__min|__max|_epoch)$", re.IGNORECASE)
PREVIEW_ROWS = 1000  # JSONL and event files name their columns row by row: the first rows decide


def base_name(name):
    """The metric a column holds, lower case: a W&B export writes '<run name> - train/loss', Lightning's
    CSVLogger 'train_loss_step' for the per-step values of train_loss."""
    low = name.strip().lower()
    if " - " in low:
        low = low.rsplit(" - ", 1)[1]
    if low.endswith("_step") and low not in STEP_NAMES:
        low = low[:-5]
    return low


class Columns:
    """Which column plays which role: names as written in the log, None when absent."""

    def __init__(self, names, loss_name=None, epoch_rows=False):
        kept = [n for n in names if not SUMMARY.search(n.strip())]  # min/max envelopes, epoch means
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
        if self.loss is None:
            hints = [n for n in kept if "loss" in n.lower()] or [n for n in kept if n != self.step]
            seen = ", ".join(hints[:8]) + (f" and {len(hints) - 8} more" if len(hints) > 8 else "") or "none"
            asked = f"no column '{loss_name}'" if loss_name else "no loss found"
            raise CliError(f"{asked}: candidates {seen}; use --loss COLUMN")
        self.grad = next((base[n] for n in GRAD_NAMES if n in base), None)
        self.lr = next((base[n] for n in LR_NAMES if n in base), None)
        taken = {n for n in LOSS_NAMES} | {base_name(self.loss)}
        self.extras = [  # every other loss is taken for one dataset's loss (cm4, pmd, ...)
            name for low, name in base.items()
            if "loss" in low and low not in taken and name != self.loss and not VALIDATION.search(low)
            and "scale" not in low
        ]

    def order(self):
        """Column names in row-tuple order: step, loss, grad, lr, extras (None where absent)."""
        return [self.step, self.loss, self.grad, self.lr, *self.extras]


class Unparsed:
    """Cells that are present but not numbers: counted per column, then treated as missing."""

    def __init__(self):
        self.columns = {}  # name -> [count, first line]

    def add(self, name, line):
        entry = self.columns.setdefault(name, [0, line])
        entry[0] += 1


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


def chunks_of(rows, cols, size=4096):
    """Chunks from row tuples (the readers of records: JSONL, JSON, TensorBoard, plain text)."""
    while True:
        batch = list(itertools.islice(rows, size))
        if not batch:
            return
        yield to_chunk(batch, cols)


def from_records(records, loss_name, unparsed):
    """Columns and row tuples from (line, dict) records; the first PREVIEW_ROWS decide the columns."""
    preview = []
    for record in records:
        preview.append(record)
        if len(preview) >= PREVIEW_ROWS:
            break
    if not preview:
        raise CliError("no records with values found")
    names = []
    for _, record in preview:
        names.extend(k for k in record if k not in names)
    cols = Columns(names, loss_name)
    wanted = cols.order()

    rows = (row_tuple(line, [None if n is None else record.get(n) for n in wanted], wanted, unparsed)
            for line, record in itertools.chain(preview, records))
    return cols, chunks_of(rows, cols)
