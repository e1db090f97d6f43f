"""The training script of a two-file project (our own text)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from models import MLP


def main(train_set, val_set, epochs=10):
    model = MLP(784, 256, 10)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_loader = DataLoader(train_set, batch_size=128, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=512)
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = sum((model(x).argmax(-1) == y).float().mean().item() for x, y in val_loader) / len(val_loader)
        print(f"epoch {epoch} accuracy {accuracy:.3f}")
