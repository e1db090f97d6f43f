import copy

import torch


def batch_independence(model, x, row=0):
    """Change every row but one: that row's output must not move. Returns the largest change (0 is healthy)."""
    model = copy.deepcopy(model).eval()  # eval: BatchNorm mixes rows in train mode by design
    others = torch.arange(len(x)) != row
    changed = x.clone()
    changed[others] = x[others].flip(-1)  # the other rows' features (or tokens) reversed
    with torch.no_grad():
        before, after = model(x)[row], model(changed)[row]
    moved = (after - before).abs().max().item()
    scale = before.abs().max().item()
    if moved > 1e-5 * max(scale, 1.0):  # float noise is ~1e-7 of the output scale
        print(f"FAIL: row {row}'s output moved by {moved:.2e} when only the other rows changed")
    else:
        print(f"ok: row {row}'s output does not depend on the other rows")
    return moved
