"""batchnorm's count of the values each channel's statistics are over, found by mutation testing: N for a 2-D input,
N x L for a 3-D one, and an input with no channels judged, not divided by zero."""
import pytest
import torch

from batchnorm import check_batchnorm


def _check(shape, layer):
    return check_batchnorm({"model": torch.nn.Sequential(layer), "batch": (torch.randn(*shape), torch.zeros(shape[0])),
                            "loss_fn": lambda output, targets: output.sum()})


@pytest.mark.parametrize("shape, values", [((4, 3), 4), ((2, 3, 5), 10)])
def test_a_channel_is_over_its_samples_times_its_positions(shape, values):
    result = _check(shape, torch.nn.BatchNorm1d(3))
    assert result.status == "pass" and result.details["calls"][0]["values_per_channel"] == values


def test_an_input_with_no_channels_is_one_value_per_channel_not_a_division_by_zero():
    """torch refuses BatchNorm1d(0) on one row as one value per channel: the check says so too (it raised
    ZeroDivisionError, dividing the input's size by its channels)."""
    result = _check((1, 0), torch.nn.BatchNorm1d(0))
    assert result.status == "fail" and result.details["calls"][0]["values_per_channel"] == 1
