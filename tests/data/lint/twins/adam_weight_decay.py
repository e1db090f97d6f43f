"""Adam with weight decay, as real training scripts write it: the decoupled forms stay clean, L2 under Adam is
found (positional too, and imported by name)."""
import torch
from torch.optim import Adam


def pretraining_style(model, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
                             lr=6e-4, betas=(0.9, 0.95))


def decoupled_adam(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01, decoupled_weight_decay=True)


def adam_without_decay(model):
    return torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=0)


def configurable(model, args):
    return torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)  # a config value: may be 0


def legacy_image_classifier(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=5e-4)  # BUG: adam-coupled-weight-decay L2 under Adam


def positional(model):
    return torch.optim.Adam(model.parameters(), 1e-3, (0.9, 0.999), 1e-8, 1e-2)  # BUG: adam-coupled-weight-decay


def imported_by_name(model):
    return Adam(model.parameters(), lr=2e-4, weight_decay=0.05)  # BUG: adam-coupled-weight-decay
