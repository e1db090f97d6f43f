"""Thresholds pinned at their boundary (issue 27, part 3): mutants that tools/mutate.py --map found surviving, each
killed by a direct, in-process call that puts a number exactly at a limit and just past it."""
import pytest
import torch

import bad_samples
import batch_independence

CLEAN = {"top_char": 0.1, "run": 3, "zlib": 0.5, "symbols": 0.1, "control": 0.0}


@pytest.mark.parametrize("number, at_limit, past_limit", [
    ("top_char", 0.5, 0.52),  # TOP_CHAR: more than half the sample is one character
    ("run", 199, 200),  # RUN: a run of 200 or more repeats
    ("zlib", 0.1, 0.09),  # ZLIB: compresses below a tenth
    ("symbols", 0.5, 0.52),  # SYMBOLS
    ("control", 0.01, 0.011),  # CONTROL
])
def test_bad_samples_flags_a_number_just_past_its_limit_and_not_one_at_it(number, at_limit, past_limit):
    assert bad_samples.reasons(CLEAN) == {}
    assert number not in bad_samples.reasons({**CLEAN, number: at_limit})
    assert number in bad_samples.reasons({**CLEAN, number: past_limit})


def test_batch_independence_has_no_sequence_to_test_when_the_output_stops_before_that_dim():
    model = torch.nn.Linear(3, 1)
    inputs = torch.randn(4, 3)  # a dim 1 to poison, but the output (4,) has none: nothing to compare along it
    assert batch_independence._carries_a_sequence(model, inputs, torch.zeros(4), 1) is None
