import copy

import torch


def overfit_one_batch(model, x, y, loss_fn, steps=300, lr=1e-3):
    """Train a copy on one small batch: a healthy model drives the loss near zero. Returns last/|first| loss."""
    model = copy.deepcopy(model).train()  # your model and optimizer are not touched
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    with torch.random.fork_rng(devices=[]):
        for _ in range(steps):
            loss = loss_fn(model(x), y)
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
    ratio = losses[-1] / max(abs(losses[0]), 1e-12)  # negative when the loss went below 0
    if not 0 <= ratio < 0.1:  # our assumption: 10x down on one batch; negative: a sign flip
        print(f"FAIL: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps; a bug, not a tuning problem")
    else:
        print(f"ok: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps")
    return ratio
