"""Decisions pinned at their boundaries, found by mutation testing: spikelog's column roles (read/columns.py), the
text scan's line limit, the refusal's list of series and the loss's description."""
import json

import pytest

from spikelog import CliError
from spikelog.read import open_log, sniff
from spikelog.read.columns import Columns


def test_a_loss_line_within_the_first_100000_lines_is_text_and_one_after_them_is_refused(tmp_path):
    # TEXT_SCAN is 100_000: the loss line is line 100_000, then line 100_001
    within, after = tmp_path / "within.log", tmp_path / "after.log"
    within.write_text("x\n" * 99_999 + "step 1 loss 2.0\n")
    after.write_text("x\n" * 100_000 + "step 1 loss 2.0\n")
    assert sniff(within) == "text"
    with pytest.raises(CliError, match="first 100000 lines"):
        sniff(after)


def test_a_lightning_step_suffix_is_dropped_but_a_step_counter_keeps_its_name():
    # CSVLogger's grad_norm_step holds grad_norm per step; global_step is a step name ending in _step
    cols = Columns(["global_step", "train_loss_step", "grad_norm_step", "train_loss_epoch"])
    assert (cols.step, cols.loss, cols.grad) == ("global_step", "train_loss_step", "grad_norm_step")


def test_a_loss_named_without_the_wandb_run_prefix_is_found_by_its_metric():
    cols = Columns(["Step", "my-run - train/loss"], loss_name="train/loss")
    assert cols.loss == "my-run - train/loss"


def _refusal(n_series):
    names = ["step", *(f"metric_{i}" for i in range(n_series))]
    with pytest.raises(CliError) as exc:
        Columns(names)
    return str(exc.value)


def test_a_refusal_lists_twelve_series_whole_and_counts_a_thirteenth_as_one_more():
    twelve, thirteen = _refusal(12), _refusal(13)
    assert "metric_11" in twelve and "more" not in twelve
    assert "metric_11" in thirteen and "metric_12" not in thirteen and "and 1 more" in thirteen


def test_a_single_loss_part_is_the_loss_itself_and_two_parts_are_their_sum():
    # YOLOv8's train/<x>_loss with no total: one part is read as it is, two are added
    assert Columns(["epoch", "train/box_loss"], epoch_rows=True).loss_words() == "'train/box_loss'"
    two = Columns(["epoch", "train/box_loss", "train/cls_loss"], epoch_rows=True)
    assert two.loss_label == "train/box_loss + train/cls_loss"
    assert "sum of its 2 parts" in two.loss_words()


def test_a_total_with_three_parts_names_them_all_and_a_fourth_is_one_more():
    three = Columns(["step", "loss", "loss_cls", "loss_bbox", "loss_mask"]).loss_words()
    four = Columns(["step", "loss", "loss_cls", "loss_bbox", "loss_mask", "loss_rpn"]).loss_words()
    assert three == "'loss' (the total of its parts loss_cls, loss_bbox, loss_mask)"
    assert four == "'loss' (the total of its parts loss_cls, loss_bbox, loss_mask and 1 more)"


def test_a_jsonl_log_of_only_evaluation_records_is_refused_as_holding_no_records(tmp_path):
    # mmdetection's "mode": "val" records are no training rows: none is left, which is not a log without a loss
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"mode": "val", "iter": i, "loss": 1.0}) + "\n" for i in range(3)))
    with pytest.raises(CliError, match="no records with values found"):
        open_log(path)
