import copy
import statistics

import torch


def update_ratio(model, x, y, loss_fn, make_optimizer):
    """One optimizer step on a copy: per parameter, |update| / |weight|. Returns the median; ~1e-3 is healthy."""
    model = copy.deepcopy(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    opt = make_optimizer(model.parameters())  # e.g. lambda params: torch.optim.Adam(params, lr=3e-4)
    with torch.random.fork_rng(devices=[]):
        loss_fn(model(x), y).backward()
    opt.step()
    ratios = []
    for name, p in model.named_parameters():
        if before[name].norm() > 0:  # a zero-initialised bias has no scale to compare with
            ratios.append((p.detach() - before[name]).norm().item() / before[name].norm().item())
            print(f"{name:40s} {ratios[-1]:.1e}")
    median = statistics.median(ratios)
    if median < 1e-4:  # cs231n: "somewhere around 1e-3"; a decade either side is our assumption
        print(f"FAIL: median update/weight {median:.1e}, too small: the LR is too low (or 0)")
    elif median > 1e-2:
        print(f"FAIL: median update/weight {median:.1e}, too large: the LR is too high")
    else:
        print(f"ok: median update/weight {median:.1e}, about 1e-3")
    return median
