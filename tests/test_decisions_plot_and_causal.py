"""Decisions of the spike plot (spikelog/plot.py: when the y axis is logarithmic, which spikes get a label) and of
causal_dependency (which input is the sequence, the least shape of an output it judges), found by mutation testing."""
from types import SimpleNamespace

import pytest
import torch

import causal_dependency
from spikelog import plot


class _Axes:
    def __init__(self):
        self.scales, self.yaxis = [], SimpleNamespace(set_major_locator=id, set_major_formatter=id, set_minor_formatter=id)

    def set_yscale(self, scale):
        self.scales.append(scale)


_TICKER = SimpleNamespace(LogLocator=lambda subs: None, FormatStrFormatter=str, NullFormatter=lambda: None)


@pytest.mark.parametrize("low, top, scales", [(1.0, 10.0, ["log"]), (1.0, 9.99, []), (0.0, 10.0, [])])
def test_the_loss_axis_is_logarithmic_from_a_span_of_exactly_the_ratio_of_positive_values(low, top, scales):
    ax = _Axes()
    plot._scale(ax, [low, top], 10.0, _TICKER)  # a loss of 0 has no log: a linear axis, not a division by zero
    assert ax.scales == scales


def test_of_seven_spikes_the_fast_recoveries_get_no_label():
    """Six or fewer are all labelled; from seven, only the tallest that are not fast recoveries."""
    spikes = [SimpleNamespace(type="slow_recovery", peak=2.0 + k, baseline=1.0) for k in range(6)]
    spikes.append(SimpleNamespace(type="fast_recovery", peak=50.0, baseline=1.0))
    assert [s.type for s in plot._labelled(spikes)] == ["slow_recovery"] * 6


def test_the_sequence_of_a_dict_is_its_input_ids_wherever_they_stand():
    ids = torch.tensor([[3, 4, 5]])
    assert causal_dependency._sequence({"attention_mask": torch.ones(1, 3), "input_ids": ids}) is ids


class _Causal(torch.nn.Module):
    """A running sum over time: output t reads inputs 0..t only."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return (x * self.scale).cumsum(1)


@pytest.mark.parametrize("shape", [(2, 2), (2, 2, 3)])
def test_a_sequence_of_two_positions_with_an_output_of_two_dims_or_more_is_checked_not_skipped(shape):
    """(batch, time) is the least an output can be shaped like its input: a 2-D output is judged."""
    case = {"model": _Causal(), "batch": (torch.randn(*shape), torch.zeros(*shape)),
            "loss_fn": lambda out, y: (out - y).pow(2).mean(), "task": {"kind": "causal_lm"}}
    assert causal_dependency.check_causal_dependency(case).status == "pass"
