"""llm.c: its -o log file (`s:100 trl:3.21 lr:... norm:...`) and its stdout (`step 1/74 | loss 11.01 ...`)."""
import re

from .text import KEY_VALUE, NUM


LLMC_FILE = re.compile(r"s:(\d+)((?:\s+\w+:" + NUM + r")+)\s*$")  # llm.c's -o log: s:100 trl:3.21 lr:... norm:...
LLMC_OUT = re.compile(r"step\s+(\d+)/\d+ \| loss (" + NUM + r")[^|]*\|(?: norm (" + NUM + r")[^|]*\|)?"
                      r"(?: lr (" + NUM + r") \|)?")  # llm.c's stdout: step   1/74 | loss 11.01 (+nanz)| norm ...


def parse_file(line):
    m = LLMC_FILE.match(line)
    if m is None:
        return None
    names = {"trl": "loss", "tel": "val_loss", "norm": "grad_norm", "lr": "lr"}
    record = {"step": m.group(1)}
    for key, value in KEY_VALUE.findall(m.group(2)):
        if key in names:
            record[names[key]] = value
    return record


def parse_stdout(line):
    m = LLMC_OUT.match(line)
    if m is None:
        return None
    return {k: v for k, v in zip(("step", "loss", "grad_norm", "lr"), m.groups()) if v is not None}
