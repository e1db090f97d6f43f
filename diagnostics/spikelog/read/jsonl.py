"""JSON Lines: one JSON object per line (our TrainingMonitor, many trainers' metrics files)."""
import json

from .text import text_lines


def records(path, unparsed):
    for line, text in enumerate(text_lines(path), 1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: a record nested thousands deep
            record = None
        if isinstance(record, dict):
            yield line, record
        else:
            unparsed.add("<line>", line)
