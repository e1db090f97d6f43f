"""The HF Trainer's stdout: `{'loss': 3.21, 'grad_norm': ..., 'learning_rate': ..., 'epoch': 0.1}`."""
import re

from .text import NUM


HF_DICT = re.compile(r"\{'(?:loss|eval_\w+|train_runtime)'[^{}]*\}")  # {'loss': 3.21, 'grad_norm': ..., ...}
HF_PAIR = re.compile(r"'(\w+)': (?:np\.float\d*\(|tensor\()?(" + NUM + ")")


def parse(line):
    m = HF_DICT.search(line)  # the Trainer's progress bar may share the line
    if m is None:
        return None
    record = dict(HF_PAIR.findall(m.group(0)))  # no step: the training records are numbered in order
    return record if "loss" in record else None  # eval and end-of-training summaries are not training steps
