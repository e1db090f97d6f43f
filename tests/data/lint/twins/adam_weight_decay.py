"""Adam with weight decay, as real training scripts write it: the decoupled forms and L2 of the size papers choose
as L2 stay clean; a decoupled decay's value under Adam is found (positional too, and imported by name)."""
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


def graph_network_paper_l2(model):
    return torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)  # GCN's L2, chosen as L2


def gan_l2(model):
    return torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999), weight_decay=1e-5)


def adamw_default_under_adam(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01)  # BUG: adam-coupled-weight-decay AdamW's default


def positional(model):
    return torch.optim.Adam(model.parameters(), 1e-3, (0.9, 0.999), 1e-8, 1e-2)  # BUG: adam-coupled-weight-decay


def imported_by_name(model):
    return Adam(model.parameters(), lr=2e-4, weight_decay=0.05)  # BUG: adam-coupled-weight-decay
