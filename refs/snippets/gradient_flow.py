import copy

import torch


def gradient_flow(model, x, y, loss_fn):
    """Per trainable parameter, the gradient norm from one batch. Returns the names that get none."""
    model = copy.deepcopy(model)  # BatchNorm statistics and .grad of yours stay as they are
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    with torch.random.fork_rng(devices=[]):
        loss = loss_fn(model(x), y)
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    dead = []
    for (name, _), grad in zip(named, grads):
        norm = 0.0 if grad is None else grad.norm().item()
        if grad is None or norm == 0:
            dead.append(name)
        print(f"{name:40s} {'None' if grad is None else f'{norm:.2e}':>9}{'  <- no gradient' if norm == 0 else ''}")
    print(f"FAIL: {len(dead)} parameter tensors get no gradient" if dead else "ok: every parameter gets a gradient")
    return dead
