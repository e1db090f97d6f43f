"""Reading a log: which format it is (by content), and its chunks.

Each format is one module here. Plain text is read by general.py (named numbers on any line); a trainer
whose lines it cannot read (llm.c names its loss `trl`) has a line parser, `parse(line)`, that returns a
record (a dict of named numbers) or None for a line it does not know (the trainer's other output, skipped).
To add one: write its module and add one line to TEXT_FORMATS.
"""
import itertools
import json
import stat
from pathlib import Path

from .. import CliError
from . import general, jsonl, llmc, table, tensorboard, trainer_state
from .columns import TEXT_SCAN, Unparsed, batched, from_records
from .text import text_lines

SNIFF_BYTES = 65536  # the format is recognised from the first 64 KB...
SNIFF_LINES = 200  # ...and at most 200 lines
TEXT_FORMATS = {  # name -> line parser; the format whose parser knows most of the first lines wins
    "llm.c": llmc.parse_file,
    "llm.c-stdout": llmc.parse_stdout,
}
FORMATS = ("csv", "tsv", "jsonl", "json", "tensorboard", "text", *TEXT_FORMATS)


def sniff(path):
    """The format of a log file, recognised from its first lines (the suffix only breaks ties)."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    if b"brain.Event" in head[:128] or "tfevents" in path.name:
        return "tensorboard"
    if not head.strip():
        raise CliError("the file is empty")
    if b"\0" in head:
        raise CliError("holds NUL bytes: a binary file, not a text log")
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    lines = [ln.strip() for ln in text.split("\n")[:SNIFF_LINES] if ln.strip()]
    if len(head) == SNIFF_BYTES and len(lines) > 1:
        lines.pop()  # the last line may be cut
    first = lines[0]
    if first.startswith("[") and _json_document(first, text):
        return "json"
    if first.startswith("{") and not first.startswith("{'"):
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            return "json"  # a document over several lines, such as trainer_state.json
        return "json" if isinstance(record, dict) and ("log_history" in record or _golden(record)) else "jsonl"
    known = {name: sum(parse(line) is not None for line in lines) for name, parse in TEXT_FORMATS.items()}
    best = max(known, key=known.get)
    if known[best]:
        return best
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if any(general.parse(line) for line in lines) or _table(lines) or any(_box_value(line) for line in lines):
        return "text"
    if "\t" in first:
        return "tsv"
    if "," in first:
        return "csv"
    scanned = _named_number_line(path)
    if scanned is None:
        return "text"
    raise CliError(f"not a training log this tool knows: no number next to a name and no table in its first "
                   f"{scanned} lines; formats: {', '.join(FORMATS)} (recognised by content; --format NAME forces one)")


def _named_number_line(path):
    """None when a line general.parse reads comes among the first TEXT_SCAN lines (a log can open with thousands of
    lines of preamble: DiT's log.txt of a compressed model lists its 5,000 weights first), else the lines looked at."""
    scanned = 0
    for line in itertools.islice(text_lines(path, Unparsed()), TEXT_SCAN):
        if general.parse(line):
            return None
        scanned += 1
    return scanned


def open_log(path, loss_name=None, fmt=None, accelerate=None):
    """(format, Columns, chunk iterator, Unparsed) for a log file; raises CliError when unreadable. A chunk holds
    a stretch of rows column by column: (steps, losses, grads, lrs, [extra series], complete), None for an
    absent role; complete when no value is missing. The columns are lists, or numpy arrays from the accelerated
    CSV reader (`accelerate`: None uses it for a big CSV when pandas is installed; True, False force it) or, for a
    big JSONL log, where numpy is installed, the records' numbers."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise CliError("no such file or directory") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO or a device would block or never end
        raise CliError("not a regular file (a FIFO, socket or device): refused")
    unparsed = Unparsed()
    if stat.S_ISDIR(mode):
        if fmt not in (None, "tensorboard"):
            raise CliError(f"a directory, not a {fmt} file")
        fmt = "tensorboard"
    fmt = fmt or sniff(path)
    if fmt == "tensorboard":
        cols, rows = from_records(batched(tensorboard.records(path)), loss_name, unparsed)
    elif fmt in ("csv", "tsv"):
        cols, rows = table.read(path, "\t" if fmt == "tsv" else ",", loss_name, unparsed, accelerate)
    elif fmt == "jsonl":
        numpy = table.accelerator(path, accelerate, "numpy")  # (a big log: its columns as arrays, screened in numpy)
        cols, rows = from_records(jsonl.batches(path, unparsed), loss_name, unparsed, numpy=numpy)
    elif fmt == "json":
        cols, rows = from_records(batched(trainer_state.records(path)), loss_name, unparsed)
    else:
        parse = general.parse if fmt == "text" else TEXT_FORMATS[fmt]
        cols, rows = from_records(batched(general.records(path, unparsed, parse)), loss_name, unparsed, need_loss=True)
    if len(cols.parts) > 1:
        rows = _summed(rows, len(cols.parts) - 1)
    return fmt, cols, rows, unparsed


def _summed(chunks, more):
    """Chunks whose loss is the sum of its parts: the loss column plus the first `more` extra series (Columns.order
    puts the other parts there); a row missing a part has no loss."""
    for steps, losses, grads, lrs, extra, complete in chunks:
        parts, extra = extra[:more], extra[more:]
        if isinstance(losses, list):
            losses = [None if None in values else sum(values) for values in zip(losses, *parts)]
        else:
            losses = sum(parts, losses)
        yield steps, losses, grads, lrs, extra, complete


def _table(lines):
    """Whether a table of numbers under a header of names (general.table_row) is among these lines."""
    header = None
    for line in lines:
        header, record = general.table_row(line, header)
        if record is not None:
            return True
    return False


def _box_value(line):
    """A `| name | value |` row of a box (stable-baselines3's console)."""
    m = general.BOX_ROW.match(line)
    return m is not None and m.group(2) is not None


def _json_document(first, text):
    """A line that opens with `[`: a JSON list (of records), or a log line such as `[04/01 12:00:00 d2...]`."""
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        try:  # a document over several lines: its start parses, or it breaks only where the first 64 KB end
            json.loads(text)
        except RecursionError:
            return True
        except ValueError as exc:
            return exc.pos > len(text) // 2  # cut where the head ends, not broken at its start like a log line
        return True
    return True


def _golden(record):
    """Megatron-LM's golden values: {"lm loss": {"start_step": 0, "end_step": 100, "step_interval": 5, "values": ...}}."""
    return any(isinstance(v, dict) and "values" in v and "start_step" in v for v in record.values())
