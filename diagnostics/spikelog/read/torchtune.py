"""torchtune's DiskLogger: `Step 100 | loss:1.23 lr:2e-05 ...`."""
import re

from .text import KEY_VALUE


TORCHTUNE = re.compile(r"Step (\d+) \| ((?:\w+:\S+\s*)+)$")  # torchtune's DiskLogger: Step 100 | loss:1.23 lr:2e-05 ...


def parse(line):
    m = TORCHTUNE.match(line)
    if m is None:
        return None
    record = {"step": m.group(1)}
    record.update((key, value) for key, value in KEY_VALUE.findall(m.group(2)) if key in ("loss", "lr", "grad_norm"))
    return record
