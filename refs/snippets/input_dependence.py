import copy

import torch


def input_dependence(model, x):
    """How much the outputs change when the inputs are zeroed, relative to their size. Near 0: the input is ignored."""
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        real = model(x).float()
        blind = model(torch.zeros_like(x)).float()
    change = ((real - blind).norm() / real.norm().clamp_min(1e-12)).item()
    spread = (real.std(0).mean() / real.abs().mean().clamp_min(1e-12)).item()  # do the rows differ at all?
    if change < 1e-3 or spread < 1e-3:
        print(f"FAIL: the outputs barely depend on the input (change {change:.1e}, spread across rows {spread:.1e})")
    else:
        print(f"ok: zeroing the input changes the outputs by {change:.0%}; rows differ by {spread:.0%}")
    return min(change, spread)
