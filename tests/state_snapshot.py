"""Snapshot everything a diagnostic must leave as it found it, and compare two snapshots.

    before = snapshot(model, optimizer)
    run_the_check(...)
    assert_unchanged(before, snapshot(model, optimizer))

Covers parameter values and identity, requires_grad, .grad, buffers, train/eval mode of every
submodule, module hooks and global module hooks, optimizer state, the Python and torch RNG
streams (CPU, and CUDA once it is in use), the device of every parameter and buffer, and whether
autograd is enabled. Written independently of the diagnostics' own
`preserved()` guard, so that a bug in the guard shows up here.
"""
import copy
import random

import torch
from torch.nn.modules import module as module_globals


def drawing(loss_fn):
    """The user's loss_fn, drawing a random number first (a loss with noise or sampling): the RNG must come back too."""
    def loss(output, targets):
        torch.rand(1)
        return loss_fn(output, targets)
    return loss


def _hook_dicts(obj):
    return {name: value for name, value in vars(obj).items() if "hook" in name and isinstance(value, dict)}


def snapshot(model, optimizer=None):
    params = dict(model.named_parameters())
    return {
        "param_values": {name: p.detach().clone() for name, p in params.items()},
        "param_objects": {name: id(p) for name, p in params.items()},
        "requires_grad": {name: p.requires_grad for name, p in params.items()},
        "grads": {name: None if p.grad is None else p.grad.detach().clone() for name, p in params.items()},
        "buffers": {name: b.detach().clone() for name, b in model.named_buffers()},
        "devices": {name: str(t.device) for name, t in [*params.items(), *model.named_buffers()]},
        "modes": {name: m.training for name, m in model.named_modules()},
        "hooks": {name: {attr: list(hooks.items()) for attr, hooks in _hook_dicts(m).items()}
                  for name, m in model.named_modules()},
        "global_hooks": {attr: list(hooks.items()) for attr, hooks in _hook_dicts(module_globals).items()},
        "optimizer": None if optimizer is None else copy.deepcopy(optimizer.state_dict()),
        "python_rng": random.getstate(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
        "grad_enabled": torch.is_grad_enabled(),
    }


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        if a.is_floating_point():
            nan_a, nan_b = a.isnan(), b.isnan()
            return torch.equal(nan_a, nan_b) and torch.equal(a[~nan_a], b[~nan_b])
        return torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def differences(before, after):
    """Names of what changed, e.g. ['param_values: net.0.weight', 'modes: net.1', 'torch_rng']."""
    changed = []
    for key in before:
        a, b = before[key], after[key]
        if isinstance(a, dict) and isinstance(b, dict) and key != "optimizer":
            changed += [f"{key}: {name}" for name in sorted(a.keys() | b.keys())
                        if name not in a or name not in b or not _same(a[name], b[name])]
        elif not _same(a, b):
            changed.append(key)
    return changed


def assert_unchanged(before, after):
    changed = differences(before, after)
    assert not changed, "the diagnostic changed: " + ", ".join(changed)
