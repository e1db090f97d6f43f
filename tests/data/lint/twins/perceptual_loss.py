# loss-accumulated-with-graph: terms of one loss summed in one forward pass are not an accumulation
import torch.nn as nn
import torch.nn.functional as F


class PerceptualLoss(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x, y):
        loss = 0.0
        for layer in self.layers:
            x, y = layer(x), layer(y)
            loss += F.l1_loss(x, y)
        return loss


def chunked_loss(model, hidden, labels, chunk):
    total = 0.0
    for start in range(0, hidden.size(1), chunk):
        logits = model.lm_head(hidden[:, start:start + chunk])
        total = total + F.cross_entropy(logits.flatten(0, 1), labels[:, start:start + chunk].flatten())
    return total


def fit(model, loader, optimizer, criterion):
    history = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss)  # BUG: loss-accumulated-with-graph
