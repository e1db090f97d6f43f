"""Decisions of the spike plot (spikelog/plot.py): when the y axis is logarithmic, which spikes get a label; found by
mutation testing."""
from types import SimpleNamespace

import pytest

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
