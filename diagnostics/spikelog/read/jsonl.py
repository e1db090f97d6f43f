"""JSON Lines: one JSON object per line (our TrainingMonitor, many trainers' metrics files)."""
import json

from .text import text_blocks


def records(path, unparsed):
    """(line, record) of every line that holds a JSON object; a line that does not is counted in unparsed. A block of
    lines is decoded as one JSON list when it can be (one call instead of one a line), else line by line."""
    for first, text in text_blocks(path, unparsed=unparsed):
        lines = [(number, line) for number, line in enumerate(text.split("\n"), first) if line.strip()]
        try:
            decoded = json.loads("[" + ",".join(line for _, line in lines) + "]")
        except (ValueError, RecursionError):  # RecursionError: a record nested thousands deep
            decoded = None
        if decoded is None or len(decoded) != len(lines):  # (a line such as `1, 2` would be two items)
            decoded = [_one(line) for _, line in lines]
        for (number, _), record in zip(lines, decoded):
            if isinstance(record, dict):
                yield number, record
            else:
                unparsed.add("<line>", number)


def _one(line):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None
