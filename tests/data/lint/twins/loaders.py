# train-loader-no-shuffle: judged by what the loader feeds, shuffle=False or left out
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


def extract_features(model, train_set):
    train_loader = DataLoader(train_set, batch_size=256, shuffle=False)  # a fixed order for the feature bank
    feats = []
    with torch.no_grad():
        for x, _ in train_loader:
            feats.append(model(x))
    return torch.cat(feats)


def fit(model, optimizer, train_set, val_set):
    loader = DataLoader(train_set, batch_size=64, num_workers=4)  # BUG: train-loader-no-shuffle
    val_loader = DataLoader(val_set, batch_size=256)
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in val_loader:
                model(x)


def fit_stream(model, optimizer, values, streaming):
    if streaming:
        dataset = ShardedIterableDataset(values)  # an IterableDataset shuffles itself, or not at all
    else:
        dataset = torch.utils.data.TensorDataset(torch.as_tensor(values))
    loader = DataLoader(dataset, batch_size=16)
    for (x,) in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def fit_lightning(trainer, module, train_set, val_set):
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=4)
    val_loader = DataLoader(val_set, batch_size=64)
    trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader)


def fit_lightning_broken(trainer, module, train_set):
    loader = DataLoader(train_set, batch_size=32, num_workers=4)  # BUG: train-loader-no-shuffle
    trainer.fit(module, loader)


def train_epoch(model, optimizer, batches):
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def score(model, batches):
    with torch.no_grad():
        return sum(F.cross_entropy(model(x), y).item() for x, y in batches)


def fit_by_helper(model, optimizer, train_set, val_set):
    train_loader = DataLoader(train_set, batch_size=64, shuffle=False)  # BUG: train-loader-no-shuffle
    val_loader = DataLoader(val_set, batch_size=256)
    for epoch in range(10):
        train_epoch(model, optimizer, batches=train_loader)
        score(model, val_loader)


def make_train_loader(train_set):
    train_loader = DataLoader(train_set, batch_size=64, shuffle=False)  # only named train: this file never trains on it
    return train_loader


def features_by_helper(model, train_set):
    train_loader = DataLoader(train_set, batch_size=256)  # handed to a function that only evaluates
    return score(model, train_loader)


class Runner:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def epoch(self, loader):
        for x, y in loader:
            self.optimizer.zero_grad()
            F.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()

    def run(self, train_set):
        loader = DataLoader(train_set, batch_size=32)  # BUG: train-loader-no-shuffle
        for epoch in range(3):
            self.epoch(loader)


def throughput(model, optimizer, dataset, num_steps):
    loader = DataLoader(dataset, batch_size=1)  # one pass of a benchmark: no order repeats
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step == num_steps:
            break


def run_epochs(model, optimizer, loader, epochs):
    for epoch in range(epochs):
        train_epoch(model, optimizer, loader)


def fit_two_calls_deep(model, optimizer, train_set):
    loader = DataLoader(train_set, batch_size=64, drop_last=True)  # BUG: train-loader-no-shuffle
    run_epochs(model, optimizer, loader, epochs=10)


def show(batches, *rest):
    print(batches, rest)


def fit_and_show(model, optimizer, train_set):
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    show(loader, model, optimizer)  # more arguments than named parameters
    for epoch in range(2):
        train_epoch(model, optimizer, loader)
