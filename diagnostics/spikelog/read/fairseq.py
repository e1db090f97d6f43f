"""fairseq's train_inner lines: `epoch 001:  100 / 8000 loss=3.21, ..., num_updates=100, lr=..., gnorm=...`."""
import re

from .text import NUM


FAIRSEQ = re.compile(r"epoch \d+:\s+\d+ / \d+ (.*\bnum_updates=\d+.*)$")  # fairseq train_inner: ... loss=4.1, ..., num_updates=100, ...
FAIRSEQ_PAIR = re.compile(r"(\w+)=(" + NUM + ")")


def parse(line):
    m = FAIRSEQ.search(line)  # after the logging prefix: 2024-01-01 00:00:00 | INFO | train_inner |
    if m is None:
        return None
    names = {"num_updates": "step", "loss": "loss", "gnorm": "grad_norm", "lr": "lr"}  # the step: updates, not the epoch's count
    return {names[key]: value for key, value in FAIRSEQ_PAIR.findall(m.group(1)) if key in names}
