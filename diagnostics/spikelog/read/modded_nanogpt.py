"""modded-nanogpt's log lines: `step:100/1000 train_loss:3.28 train_time:...ms`."""
import re

from .text import KEY_VALUE, NUM


MODDED = re.compile(r"step:(\d+)(?:/\d+)?((?:\s+\w+:" + NUM + r"\w*)+)")  # step:100/1000 train_loss:3.28 ...


def parse(line):
    m = MODDED.match(line)
    if m is None:
        return None
    record = {"step": m.group(1)}
    for key, value in KEY_VALUE.findall(m.group(2)):
        record["loss" if key == "train_loss" else key] = value
    return record
