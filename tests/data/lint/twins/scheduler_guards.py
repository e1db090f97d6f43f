# scheduler-before-optimizer: `if scheduler:` only asks whether there is one
import torch.nn.functional as F


def train(model, optimizer, loader, scheduler=None, accumulation=4):
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y) / accumulation
        loss.backward()
        if (step + 1) % accumulation == 0:
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad()


def train_broken(model, optimizer, loader, scheduler=None):
    for x, y in loader:
        if scheduler:
            scheduler.step()  # BUG: scheduler-before-optimizer
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
