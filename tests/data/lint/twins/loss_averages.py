# loss-average-mismatch: a running loss divided by the count its reduction does not go with
import torch
import torch.nn as nn
import torch.nn.functional as F


def test(model, test_loader):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for data, target in test_loader:
            test_loss += F.nll_loss(model(data), target).item()
    test_loss /= len(test_loader.dataset)  # BUG: loss-average-mismatch batch means over the number of samples
    return test_loss


def test_summed(model, test_loader):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for data, target in test_loader:
            test_loss += F.nll_loss(model(data), target, reduction="sum").item()
    test_loss /= len(test_loader.dataset)
    return test_loss


def test_legacy(model, test_loader):
    test_loss = 0
    with torch.no_grad():
        for data, target in test_loader:
            test_loss += F.nll_loss(model(data), target, size_average=False).item()
    return test_loss / len(test_loader.dataset)


def validate(model, loader):
    criterion = nn.CrossEntropyLoss(reduction="sum")
    total = 0.0
    with torch.no_grad():
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            total += loss.item()
    return total / len(loader)  # BUG: loss-average-mismatch sums per sample over the number of batches


def validate_weighted(model, loader):
    criterion = nn.CrossEntropyLoss()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += criterion(model(x), y).item() * x.size(0)
    return total / len(loader.dataset)


def validate_batches(model, loader, reduction):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += F.cross_entropy(model(x), y).item()
            total_unknown = F.cross_entropy(model(x), y, reduction=reduction).item()
    return total / len(loader), total_unknown


def evaluate_counted(model, loader):
    total, seen, batches = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            total += F.cross_entropy(model(x), y).item()
            seen += x.size(0)
            batches += 1
    return total / batches, total / seen  # BUG: loss-average-mismatch the second divides batch means by samples


def test_legacy_batches(model, test_loader):
    test_loss = 0
    for data, target in test_loader:
        test_loss += float(F.nll_loss(model(data), target, size_average=False))
    return test_loss / len(test_loader)  # BUG: loss-average-mismatch the old size_average=False sums per sample



def evaluate_sizes(model, loader):
    total, summed_total, by_len, by_shape, batches = 0.0, 0.0, 0, 0, 0
    summed = nn.CrossEntropyLoss(reduction="sum")
    with torch.no_grad():
        for x, y in loader:
            total += F.cross_entropy(model(x), y).item()
            summed_total += summed(model(x), y).item()
            by_len += len(y)
            by_shape += x.shape[0]
            batches += 1
    per_len = total / by_len  # BUG: loss-average-mismatch batch means over a count of samples
    per_shape = total / by_shape  # BUG: loss-average-mismatch the same count, kept with shape[0]
    per_batch = summed_total / batches  # BUG: loss-average-mismatch sums per sample over a count of batches
    return per_len, per_shape, per_batch, summed_total / by_len, total / batches
