"""spikelog/read/columns.py: a text log's preview of loss lines, a number past the float range, the lagging writer's
reach and an epoch counter's interval, each decision at its boundary (found by mutation testing)."""
import pytest

import spikes
from spikelog.read.columns import PREVIEW_ROWS, Unparsed, epoch_steps, from_records, repeated_rows

TRAINING = [{"step": k, "loss": 3.0, "grad_norm": 0.5} for k in range(1, 21)]


@pytest.mark.parametrize("loss_name", [None, "loss"])
def test_a_preamble_as_long_as_the_preview_does_not_use_it_up(loss_name):
    """A config dump of PREVIEW_ROWS lines that name no loss (`lr 0.1`) before the training lines is passed over:
    the preview is the training lines, whose loss and grad norm are read (with --loss, only lines naming that loss
    fill the preview)."""
    preamble = [{"lr": 0.1, "warmup": 100}] * PREVIEW_ROWS
    records = preamble + TRAINING
    cols, chunks = from_records([(list(range(len(records))), records)], loss_name, Unparsed(), need_loss=True)
    assert (cols.step, cols.loss, cols.grad) == ("step", "loss", "grad_norm")
    assert [step for chunk in chunks for step in chunk[0]] == list(range(1, 21))


def test_an_integer_beyond_the_float_range_is_counted_as_a_number():
    """A JSON integer too large for a float (10**400 tokens) is a number among the first records, no crash: the
    log is read by its other columns."""
    records = [{"step": k, "loss": 3.0, "tokens": 10 ** 400} for k in range(3)]
    cols, chunks = from_records([([1, 2, 3], records)], None, Unparsed())
    assert cols.loss == "loss"
    assert [chunk[1] for chunk in chunks] == [[3.0, 3.0, 3.0]]


@pytest.mark.parametrize("steps, kept", [
    ([10, 20, 30, 40, 50, 60, 70, 80, 30, 90], [10, 20, 30, 40, 50, 60, 70, 80, 90]),  # 30: the 6th latest, a repeat
    ([10, 20, 30, 40, 50, 60, 70, 80, 20, 90], [10, 20, 30, 40, 50, 60, 70, 80, 20, 90]),  # 20: the 7th, a resume
])
def test_a_lagging_writer_reaches_back_six_steps_and_no_further(steps, kept):
    """LAG: a step logged again among the 6 latest steps read is the lagging writer's (left out); one step further
    back is a resume to a step not read lately, and stays."""
    records = [{"step": step, "loss": 1.0} for step in steps]
    batches = repeated_rows([(list(range(len(records))), records)], "step", "loss", Unparsed())
    assert [record["step"] for _, batch in batches for record in batch] == kept


def test_a_step_logged_twice_in_an_epoch_is_no_logging_interval():
    """A step written again in the same epoch (0, 10, 10) leaves the interval at 10: the next epoch's counter, back
    at 0, goes on at 20, not at 10 again."""
    records = [{"iter": i, "epoch": e} for e, i in [(0, 0), (0, 10), (0, 10), (1, 0), (1, 10)]]
    batches = epoch_steps([([0] * len(records), records)], "iter", "epoch")
    assert [record["iter"] for _, batch in batches for record in batch] == [0, 10, 10, 20, 30]


def test_a_step_past_the_float_range_beside_an_epoch_column_is_read_as_written(tmp_path):
    """A JSONL log whose integer steps pass the float range (10**400) reads the same with an epoch column as without:
    the epoch counter is not composed with a step no float holds (it raised OverflowError before)."""
    big = 10 ** 400
    for epoch in ("", ', "epoch": 0'):
        path = tmp_path / "big.jsonl"
        path.write_text("".join(f'{{"step": {big + k}, "loss": 3.0{epoch}}}\n' for k in range(20)))
        report = spikes.analyze(path)
        assert (report.values, report.first_step, report.last_step) == (20, big, big + 19)
