"""JSON Lines: one JSON object per line (our TrainingMonitor, many trainers' metrics files)."""
import json

from .text import text_blocks

BLOCK_BYTES = 1 << 20  # 1 MB of lines (~11k records of four numbers) per json.loads call
DICT = frozenset((dict,))


def batches(path, unparsed):
    """(line numbers, records) of the lines that hold a JSON object, a block of lines at a time; a line that does not
    is counted in unparsed. A block is decoded as one JSON list when it can be (one call instead of one a line),
    else line by line."""
    for first, text in text_blocks(path, BLOCK_BYTES, unparsed=unparsed):
        numbers = range(first, first + text.count("\n") + 1)
        decoded = _all(text.replace("\n", ","), len(numbers))
        if decoded is None:  # a blank line (JSON has no empty item), or a line that is no JSON
            numbered = [(number, line) for number, line in zip(numbers, text.split("\n")) if line.strip()]
            numbers, lines = [number for number, _ in numbered], [line for _, line in numbered]
            decoded = _all(",".join(lines), len(lines)) or [_one(line) for line in lines]
        if DICT.issuperset(map(type, decoded)):
            yield numbers, decoded
            continue
        for number, record in zip(numbers, decoded):
            if type(record) is not dict:
                unparsed.add("<line>", number)
        yield [n for n, r in zip(numbers, decoded) if type(r) is dict], [r for r in decoded if type(r) is dict]


def _all(items, count):
    """`count` lines joined by commas, decoded as one JSON list of as many items; None when they are not that."""
    try:
        decoded = json.loads("[" + items + "]")
    except (ValueError, RecursionError):  # RecursionError: a record nested thousands deep
        return None
    return decoded if len(decoded) == count else None  # (a line such as `1, 2` would be two items)


def _one(line):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None
