import copy

import torch


def nan_hooks(model, x, y, loss_fn):
    """The first module whose forward output holds NaN/inf, else the parameters whose gradient does."""
    model, found = copy.deepcopy(model), []

    def hook(module, inputs, output):
        outputs = output if isinstance(output, (tuple, list)) else [output]
        if not found and any(isinstance(t, torch.Tensor) and not torch.isfinite(t).all() for t in outputs):
            found.append(f"forward: {module.name} ({type(module).__name__})")

    for name, module in model.named_modules():
        module.name = name or "(the model)"
        module.register_forward_hook(hook)  # modules run in order, so the first hit is the source
    with torch.random.fork_rng(devices=[]):
        loss_fn(model(x), y).backward()
    if not found:
        found = [f"backward: {name}" for name, p in model.named_parameters()
                 if p.grad is not None and not torch.isfinite(p.grad).all()]
    print(f"FAIL: first non-finite value in {found[0]}" if found else "ok: every output and gradient is finite")
    return found[0] if found else None
