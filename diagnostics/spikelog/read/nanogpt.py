"""nanoGPT's train.py: `iter 100: loss 3.2100, time 12.34ms, mfu 0.50%`."""
import re

from .text import NUM


NANOGPT = re.compile(r"iter (\d+): loss (" + NUM + "),")  # iter 100: loss 3.2100, time 12.34ms, mfu 0.50%


def parse(line):
    m = NANOGPT.match(line)
    return None if m is None else {"step": m.group(1), "loss": m.group(2)}
