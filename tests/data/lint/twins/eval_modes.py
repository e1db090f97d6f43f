# eval-mode-missing: evaluation with autograd off while a trained model with dropout or batch norm is in train mode
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.body(x), 1))


class Tiny(nn.Module):  # no dropout, no batch norm: the mode changes nothing
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)


def accuracy(model, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()  # BUG: eval-mode-missing
    return correct


def accuracy_in_eval(model, loader):
    model.eval()
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)


def fit(train_loader, val_loader):
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        accuracy(model, val_loader)


def fit_and_switch(train_loader, val_loader):
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        accuracy_in_eval(model, val_loader)
        model.eval()
        with torch.no_grad():
            for x, y in val_loader:
                model(x)


def fit_tiny(train_loader, val_loader, mode):
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            model(x)
    other = Classifier()
    other.train(mode)  # a mode this file cannot read
    with torch.no_grad():
        for x, y in val_loader:
            other(x)


def seq2seq(train_loader, val_loader):
    encoder = nn.Sequential(nn.Embedding(100, 32), nn.Dropout(0.1))
    decoder = nn.Sequential(nn.Linear(32, 32), nn.Dropout(0.1), nn.Linear(32, 100))
    optimizer = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()))
    for epoch in range(5):
        encoder.train()
        decoder.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(decoder(encoder(x)).flatten(0, 1), y.flatten()).backward()
            optimizer.step()
        encoder.eval()
        with torch.no_grad():
            for x, y in val_loader:
                decoder(encoder(x))  # BUG: eval-mode-missing the decoder was left in train mode


def mc_dropout(model, loader, passes=20):  # a function no caller of this file shows: its mode is unknown
    with torch.no_grad():
        return [torch.stack([model(x) for _ in range(passes)]) for x, _ in loader]


def pseudo_labels(train_loader, unlabeled_loader):
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters())
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            model(x)  # inside the training loop: not an evaluation loop


def script_style(train_loader, test_loader):
    net = Classifier()
    optimizer = torch.optim.Adam(net.parameters())
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()
    correct = 0
    for x, y in test_loader:  # the 2018 style: no no_grad either
        correct += (net(x).argmax(1) == y).sum().item()  # BUG: eval-mode-missing
    return correct


def recalibrate_batch_norm(loader):
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    with torch.no_grad():
        for x, _ in loader:  # forward passes in train mode on purpose: new running statistics
            model(x)
    for x, y in loader:  # training comes after the recalibration, not before it
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def train_and_score(model, train_loader, val_loader):
    optimizer = torch.optim.Adam(model.parameters())
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)


def compare_initialisations(models, train_loader, val_loader):
    for model in models:  # a new model each time: the last one's eval mode does not carry over
        train_and_score(model, train_loader, val_loader)


def build_mlp(hidden):
    return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden, 2))


def build_linear():
    return nn.Sequential(nn.Linear(8, 2))


def fit_built(train_loader, val_loader):
    mlp = build_mlp(64)
    linear = build_linear()
    plain = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.Adam([*mlp.parameters(), *linear.parameters(), *plain.parameters()])
    for x, y in train_loader:
        optimizer.zero_grad()
        (F.cross_entropy(mlp(x), y) + F.cross_entropy(linear(x), y) + F.cross_entropy(plain(x), y)).backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            linear(x)  # neither has dropout nor batch norm: the mode changes nothing
            plain(x)
            mlp(x)  # BUG: eval-mode-missing the factory's model has dropout


def fit_given(model, train_loader, val_loader):  # whose layers this file cannot see
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            model(x)


shared = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))
shared_optimizer = torch.optim.SGD(shared.parameters(), lr=0.1)


def report(loader):  # no caller in this file: it may run after shared.eval()
    with torch.no_grad():
        for x, _ in loader:
            shared(x)
