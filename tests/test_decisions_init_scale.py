"""init_scale's residual-projection tolerance pinned at its value (issue 27): mutation testing's survivor on
RESIDUAL_TOLERANCE, killed by small layers whose std x sqrt(k) sits just inside and just past 1.5x of the others';
then SAME_STD, the table test, the all-zero test and the summary's count of further layers above and below."""
import pytest
import torch

import init_scale


def _stack(factor):
    """Four 64x64 layers at std 0.015 (0.12x 1/sqrt(64)) and four at 0.015 x factor / sqrt(4) (0.087x-0.093x)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 64) for _ in range(8)]
    with torch.no_grad():
        for i, layer in enumerate(layers):
            std = 0.015 if i % 2 == 0 else 0.015 * factor / 2
            layer.weight.mul_(std / layer.weight.std())
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("factor, status", [(1.45, "pass"), (1.55, "warn")])
def test_init_scale_takes_small_layers_for_residual_projections_only_within_one_and_a_half_times(factor, status):
    # RESIDUAL_TOLERANCE = ln 1.5: the small layers' std x sqrt(4) at 1.45x the others' median is the scaled
    # init; at 1.55x it is not, and the small layers warn
    case = {"model": _stack(factor), "batch": (torch.randn(4, 64), torch.zeros(4, 64)),
            "loss_fn": torch.nn.functional.mse_loss}
    assert init_scale.check_init_scale(case).status == status


def _scaled(stds, fan_in=64):
    """Linear layers of this fan-in, each weight rescaled to its std."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(fan_in, fan_in) for _ in stds]
    with torch.no_grad():
        for std, layer in zip(stds, layers):
            layer.weight.mul_(std / layer.weight.std())
    return torch.nn.Sequential(*layers)


def _check(model):
    return init_scale.check_init_scale({"model": model, "batch": (torch.randn(4, 64), torch.zeros(4, 64)),
                                        "loss_fn": torch.nn.functional.mse_loss})


@pytest.mark.parametrize("factor, status", [(1.19, "pass"), (1.21, "warn")])
def test_init_scale_groups_small_layers_whose_stds_are_within_20_percent(factor, status):
    # four layers at 0.02 and four small ones (under 0.0125, 0.1x 1/sqrt(64)): three at 0.01 and one at 0.01 x
    # factor. Within SAME_STD (ln 1.2) of 0.01 the four share a std and 0.01 x sqrt(4) is the others' 0.02: the
    # scaled init, pass; at 1.21x the fourth is no part of the group, and the small layers warn
    assert _check(_scaled([0.02] * 4 + [0.01] * 3 + [0.01 * factor])).status == status


class _Table(torch.nn.Module):
    """A default Linear(64, 64) and a raw parameter of std 1.0 with `rows` rows."""

    def __init__(self, rows):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(64, 64)
        self.table = torch.nn.Parameter(torch.randn(rows, 16, 64))


@pytest.mark.parametrize("rows, status", [(1, "pass"), (2, "fail")])
def test_init_scale_lists_a_raw_parameter_with_one_row_as_a_table_and_judges_one_with_two(rows, status):
    # a (1, 16, 64) table is looked up, not judged; a (2, 16, 64) raw weight at std 1.0 is 8x 1/sqrt(64)
    assert _check(_Table(rows)).status == status


@pytest.mark.parametrize("value, status", [(0.0, "pass"), (0.5, "fail")])
def test_init_scale_notes_an_all_zero_weight_and_fails_an_all_constant_one(value, status):
    model = _scaled([0.07, 0.07])
    with torch.no_grad():
        model[1].weight.fill_(value)
    result = _check(model)
    assert result.status == status
    assert ("zero-initialised: 1.weight" in result.summary) is (status == "pass")  # a pass names the zeroed weight


@pytest.mark.parametrize("big, more", [(1, False), (2, True)])
def test_init_scale_counts_the_further_layers_above_2x(big, more):
    # the summary names the widest layer; a second one above TOO_BIG is counted after it, one alone is not
    result = _check(_scaled([0.3] * big + [0.07]))
    assert ("(+1 more layers above 2x)" in result.summary) is more


@pytest.mark.parametrize("small, more", [(1, False), (2, True)])
def test_init_scale_counts_the_further_layers_below_0_1x(small, more):
    # the summary names the smallest layer; a second one under TOO_SMALL (at a different std: no residual group)
    # is counted after it, one alone is not
    result = _check(_scaled([0.005, 0.01][:small] + [0.07] * 3))
    assert result.status == "warn"
    assert ("more below" in result.summary) is more
