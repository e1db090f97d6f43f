"""init_scale's residual-projection tolerance pinned at its value (issue 27): mutation testing's survivor on
RESIDUAL_TOLERANCE, killed by small layers whose std x sqrt(k) sits just inside and just past 1.5x of the others'."""
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
