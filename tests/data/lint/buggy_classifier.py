"""A small image classifier with four silent bugs, each marked on its line."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 32 * 32, 10)

    def forward(self, x):
        h = self.drop(F.relu(self.conv(x)).flatten(1))
        return F.softmax(self.fc(h), dim=1)


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)


def main(train_set, val_set, epochs=10):
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=256)
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for x, y in train_loader:
            loss = criterion(model(x), y)  # BUG: softmax-into-ce
            loss.backward()  # BUG: missing-zero-grad
            optimizer.step()
            total += loss  # BUG: loss-accumulated-with-graph
        scheduler.step()
        accuracy = evaluate(model, val_loader)  # BUG: eval-mode-not-restored
        print(f"epoch {epoch}: loss {total / len(train_loader):.3f}, accuracy {accuracy}")
