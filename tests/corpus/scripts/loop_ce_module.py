"""A feature classifier with the loss computed in the loop by nn.CrossEntropyLoss, the PyTorch-tutorial shape.

Planted bug: the head is initialised with std 1 instead of 1/sqrt(fan_in), so the logits start ~11x too large.
"""
import torch
from torch import nn

from tinydata import features


class Classifier(nn.Module):
    def __init__(self, dim=16, hidden=128, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, classes)
        nn.init.normal_(self.head.weight, std=1.0)  # BUG: std 1 on a 128-wide head: logits ~11x what 1/sqrt(128) gives

    def forward(self, x):  # (B, dim) -> (B, classes)
        return self.head(self.body(x))


def main():
    torch.manual_seed(0)
    x, y = features()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32, shuffle=True)
    model = Classifier()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(20):
        for inputs, labels in loader:
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
