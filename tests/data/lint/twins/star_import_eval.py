# eval-without-no-grad: no_grad from `from torch import *` is torch.no_grad
from torch import *


def evaluate(model, loader):
    model.eval()
    correct = 0
    with no_grad():
        for x, y in loader:
            correct += (model(x).argmax(-1) == y).sum().item()
    return correct


def evaluate_broken(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(-1) == y).sum().item()  # BUG: eval-without-no-grad
    return correct
