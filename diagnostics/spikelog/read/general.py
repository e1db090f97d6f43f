"""Any plain-text log: the numbers next to names on each line, stepped by the line's own counter.

A line gives a record of every `name: 1.23`, `name=1.23`, `name 1.23`, `'name': 1.23`, `"name": 1.23` (dict
and JSON fragments), `lm loss: 1.2E+00` (a name of a few words) and `np.float64(1.23)` or `tensor(1.23)`;
colour codes (ANSI) are stripped first. A number glued to a unit (`12ms`, `38%`, `3000M`), a clock (`0:10:00`)
or a word is no value. The step is the line's own counter: a global one (`global_step`, `num_updates`,
`current_steps`, `time/iterations`) first, then the i of `Epoch [e][i/N]` (mmdetection, mmengine, torchvision's
references; with e as the epoch) or `Iter [i/N]`, then `step`, `iteration`, `iter`, `it`. A counter that starts
again each epoch is composed into a global step by columns.epoch_steps. A line that says it is validation (`valid`, `eval`,
`(val)`, `test` outside its names) is no training row, and lines in a row with the same step are one row (a
trainer's own summary of that step adds what the row lacks). Which name is the loss is decided after, by
the Columns of all records (read/columns.py); records that do not hold it are no rows.
"""
import re

from .text import NUM, text_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # colour and cursor codes (OpenNMT, detectron2, loguru)
NAME = r"[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*){0,4}"  # up to five words: `lm loss`, `grad norm`
PAIR = re.compile(r"(?<![\w./-])[\"']?(" + NAME + r")[\"']?\s*(?:[:=]\s*|\s+)(?:np\.float\d*\(|tensor\(|[\"'])?("
                  + NUM + r")(?![\w.%]|:\d)")
EPOCH_ITER = re.compile(r"\bepoch\s*(?:\(\w+\))?\s*:?\s*\[\s*(\d+)\s*\]\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]", re.IGNORECASE)
ITER_OF = re.compile(r"\biter\s*(?:\(\w+\))?\s*:?\s*\[\s*(\d+)\s*/\s*\d+\s*\]", re.IGNORECASE)  # Iter(train) [50/90000]
PHASE = re.compile(r"(?<![\w/.-])(?:val|valid|validation|validating|eval|evaluation|evaluating|test|testing)(?![\w/.-])",
                   re.IGNORECASE)
GLOBAL_STEPS = ("global_step", "num_updates", "current_steps", "time/iterations")  # whole-run counters first
LOCAL_STEPS = ("step", "iteration", "iter", "it")  # ...then these (an epoch-local one is composed by columns.py)


def key(name):
    return "_".join(name.lower().split())


def parse(line):
    """A record {name: number text, "step": ...} of one line, or None (no named number, or a validation line)."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    pairs = PAIR.findall(line)
    if not pairs:
        return None
    if PHASE.search(line) and PHASE.search(PAIR.sub(" ", line)):  # the word outside the names: a validation line
        return None
    record = {" ".join(name.split()): value for name, value in pairs}
    keys = {key(name): name for name in record}
    found = next((keys[k] for k in GLOBAL_STEPS if k in keys), None)
    if found is None:
        m = EPOCH_ITER.search(line) or ITER_OF.search(line)
        if m is not None:  # the counter in the brackets; columns.epoch_steps goes on across epochs
            epoch_local = m.re is EPOCH_ITER
            if epoch_local:
                record.setdefault("epoch", m.group(1))
            record["step"] = m.group(2 if epoch_local else 1)
            return record
        found = next((keys[k] for k in LOCAL_STEPS if k in keys), None)
    if found is not None:
        record["step"] = record.pop(found)
    return record


def records(path, unparsed, parse_line=parse):
    """(line, record) of every line `parse_line` reads (this reader's parse, or a framework's own); lines in a
    row with the same step make one record, the first value of each name kept."""
    held, held_line = None, 0
    for line, text in enumerate(text_lines(path, unparsed), 1):
        record = parse_line(text)
        if record is None:
            continue
        if held is not None and "step" in record and held.get("step") == record["step"]:
            for name, value in record.items():
                held.setdefault(name, value)
            continue
        if held is not None:
            yield held_line, held
        held, held_line = record, line
    if held is not None:
        yield held_line, held
