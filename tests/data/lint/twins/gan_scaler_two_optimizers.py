# scaler-without-update: one update after stepping several optimizers is right
import torch


def train(models, optimizers, loader, loss_fn):
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        for opt in optimizers:
            opt.zero_grad()
        with torch.autocast("cuda"):
            loss = sum(loss_fn(m(x), y) for m in models)
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()


def train_broken(models, optimizers, loader, loss_fn):
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        for opt in optimizers:
            opt.zero_grad()
        with torch.autocast("cuda"):
            loss = sum(loss_fn(m(x), y) for m in models)
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.step(opt)  # BUG: scaler-without-update
