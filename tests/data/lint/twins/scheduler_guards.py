# scheduler-before-optimizer: `if scheduler:` only asks whether there is one; an `if` whose branch holds the optimizer
# step too runs them together
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


def train_accumulated_broken(model, optimizer, loader, scheduler, accumulation=4):
    for step, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation).backward()
        if (step + 1) % accumulation == 0:  # one branch holds both: they run together, the scheduler first
            scheduler.step()  # BUG: scheduler-before-optimizer
            optimizer.step()
            optimizer.zero_grad()


def train_with_a_frozen_phase(model, optimizer, loader, scheduler, frozen_steps=10):
    for step, (x, y) in enumerate(loader):
        F.cross_entropy(model(x), y).backward()
        if step < frozen_steps:  # the other branch holds the step: the frozen phase only moves the schedule
            scheduler.step()
        else:
            optimizer.step()
        optimizer.zero_grad()


def train_broken_when_given(model, optimizer, loader, scheduler=None):
    for x, y in loader:
        if scheduler is not None:  # asks only whether there is one: no pass is skipped
            scheduler.step()  # BUG: scheduler-before-optimizer
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
