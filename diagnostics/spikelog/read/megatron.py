"""Megatron-LM: `iteration 100/ 1000 | ... | lm loss: 3.210E+00 | grad norm: ... |`."""
import re

from .text import NUM


MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)")  # iteration 100/ 1000 | ... | lm loss: ... |
MEGATRON_FIELD = re.compile(r"\s*([a-z][a-z0-9 _-]*?)\s*:\s*(" + NUM + r")\s*$", re.IGNORECASE)


def parse(line):
    m = MEGATRON.search(line)
    if m is None:
        return None
    names = {"lm loss": "loss", "grad norm": "grad_norm", "learning rate": "lr"}
    record = {"step": m.group(1)}
    for field in m.group(2).split("|"):
        f = MEGATRON_FIELD.match(field)
        if f and f.group(1).lower() in names:
            record[names[f.group(1).lower()]] = f.group(2)
    return record
