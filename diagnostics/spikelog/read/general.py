"""Any plain-text log: the numbers next to names on each line, stepped by the line's own counter.

A line gives a record of every `name: 1.23`, `name=1.23`, `name 1.23`, `'name': 1.23`, `"name": 1.23` (dict
and JSON fragments), `lm loss: 1.2E+00` (a name of a few words) and `np.float64(1.23)` or `tensor(1.23)`;
colour codes (ANSI) are stripped first. A number glued to a unit (`12ms`, `38%`, `3000M`), a clock (`0:10:00`)
or a word is no value. The step is the line's own counter: a global one (`global_step`, `num_updates`,
`current_steps`, `time/iterations`) first, then the i of `Epoch [e][i/N]` (mmdetection, mmengine, torchvision's
references; with e as the epoch) or `Iter [i/N]` (after `Epoch: [e/E]`, its epoch), then `step`, `iteration`, `iter`, `it`, then a number that opens
the line before a name (`1200 train 3.21`) or an `[i/N]` that opens it (`[100/200000] Train loss: 0.004`). A counter that starts
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
EPOCH_OF = re.compile(r"\bepoch\s*:?\s*\[\s*(\d+)\s*/\s*\d+\s*\]", re.IGNORECASE)  # Epoch: [ 0/200] (its iter follows)
ITER_OF = re.compile(r"\biter\s*(?:\(\w+\))?\s*:?\s*\[\s*(\d+)\s*/\s*\d+\s*\]", re.IGNORECASE)  # Iter(train) [50/90000]
LEADING_STEP = re.compile(r"(\d+) (?=[A-Za-z_])")
LEADING_OF = re.compile(r"\s*\[\s*(\d+)\s*/\s*\d+\s*\]")  # `[100/200000] Train loss: ...` (deep-text-recognition-benchmark)
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
            else:
                of = EPOCH_OF.search(line)  # Epoch: [ 0/200] Iter [  10/1487]
                if of is not None:
                    record.setdefault("epoch", of.group(1))
            record["step"] = m.group(2 if epoch_local else 1)
            return record
        found = next((keys[k] for k in LOCAL_STEPS if k in keys), None)
    if found is not None:
        record["step"] = record.pop(found)
    else:
        m = LEADING_STEP.match(line) or LEADING_OF.match(line)  # `1200 train 3.21` (build-nanogpt's log.txt),
        # `[100/200000] Train loss: 0.004`: the line opens with its step
        if m is not None:
            record["step"] = m.group(1)
    return record


def table_row(text, header):
    """A table printed with `|` (or two spaces or more, or tabs) between its cells: (header, record) for one line, the
    header the names of the last line whose cells are all names, the record a line whose cells each start with a
    number under them (`50.80%`, `19.6s  <- best`); the step is the column named for one (an epoch table's epoch).
    (header, None) otherwise."""
    cells = [cell.strip() for cell in (text.strip().strip("|").split("|") if "|" in text else GAP.split(text.strip()))]
    if len(cells) < 3:
        return header, None
    if all(CELL_NAME.fullmatch(cell) for cell in cells):
        return cells, None
    if header is None or len(cells) != len(header):
        return header, None
    numbers = [CELL_NUMBER.match(cell) for cell in cells]
    if not all(numbers):
        return header, None
    record = {name: m.group(0) for name, m in zip(header, numbers)}
    keys = {key(name): name for name in header}
    found = next((keys[k] for k in (*GLOBAL_STEPS, *LOCAL_STEPS, "epoch") if k in keys), None)
    if found is not None:
        record["step"] = record.pop(found) if found.lower() != "epoch" else record[found]
    return header, record


GAP = re.compile(r"\s{2,}|\t")  # between the cells of a table aligned with spaces (rl algorithms' log.txt)
CELL_NAME = re.compile(r"[A-Za-z_][\w./ ()-]*")
CELL_NUMBER = re.compile(NUM)


BOX_ROW = re.compile(r"\|\s*([A-Za-z_][\w./ -]*?)\s*\|\s*(" + NUM + r")?\s*\|\s*$")  # | train/ | |, |  loss | 0.277 |


def records(path, unparsed, parse_line=parse):
    """(line, record) of every line `parse_line` reads (this reader's parse, or a framework's own), of a table
    printed with `|` (table_row), or of a box of `| name | value |` rows (stable-baselines3's console: `| train/ |`
    opens a section, its rows are `train/loss`...; the box is one record); lines in a row with the same step make
    one record, the first value of each name kept."""
    held, held_line = None, 0
    for line, record in _line_records(path, unparsed, parse_line):
        if held is not None and "step" in record and held.get("step") == record["step"]:
            for name, value in record.items():
                held.setdefault(name, value)
            continue
        if held is not None:
            yield held_line, held
        held, held_line = record, line
    if held is not None:
        yield held_line, held


def _line_records(path, unparsed, parse_line):
    header, box, box_line, section = None, {}, 0, ""
    for line, text in enumerate(text_lines(path, unparsed), 1):
        m = BOX_ROW.match(text) if text.startswith("|") else None
        if m is not None:
            name, value = m.groups()
            if value is None:
                section = name if name.endswith("/") else ""
            else:
                box_line = box_line or line
                box[section + name] = value
            continue
        if box:  # the box ended: one record
            yield box_line, _stepped(box)
            box, box_line, section = {}, 0, ""
        record = None
        if text.count("|") >= 2 or GAP.search(text):  # what table_row splits on: a line with neither is no table row
            header, record = table_row(text, header)
        if record is None:
            record = parse_line(text)
        if record is not None:
            yield line, record
    if box:
        yield box_line, _stepped(box)


def _stepped(box):
    """A box's record, stepped by its own counter (`time/iterations`)."""
    keys = {key(name): name for name in box}
    found = next((keys[k] for k in GLOBAL_STEPS if k in keys), None)
    if found is not None:
        box["step"] = box.pop(found)
    return box
