import math

import torch


def init_loss(model, x, y, loss_fn, num_classes):
    """Loss at step 0 against chance, ln(num_classes). Near 1x is healthy; returns the ratio."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # dropout draws leave your RNG alone
        loss = loss_fn(model(x), y).item()
    chance = math.log(num_classes)
    ratio = loss / chance
    if ratio > 1.5:  # our assumption, as diagnostics/init_loss.py: its test zoo measures 0.99-1.23x when healthy
        verdict = "FAIL: too high, the outputs are too large at init (logit scale, init std)"
    elif ratio < 0.75:  # uniform outputs score ln(C) whatever the labels; lower means informed outputs
        verdict = "FAIL: too low, the model already knows the targets (leakage)"
    else:
        verdict = "ok"
    print(f"{verdict} (loss at init {loss:.3f}, chance ln({num_classes}) = {chance:.3f}, {ratio:.2f}x chance)")
    return ratio
