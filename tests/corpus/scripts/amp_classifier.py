"""An image-feature classifier trained under autocast (bfloat16 on CPU, no GradScaler), with an nn loss module.

Planted bug: the hand-written normalisation standardises each feature over the batch (dim 0), as BatchNorm does in
training, but in eval mode too: every row's output depends on the other rows.
"""
import torch
from torch import nn

from tinydata import features


class Standardise(nn.Module):
    def forward(self, h):  # (B, C)
        return (h - h.mean(0, keepdim=True)) / (h.std(0, keepdim=True) + 1e-5)  # BUG: statistics over the batch (dim 0)


class Net(nn.Module):
    def __init__(self, dim=16, hidden=64, classes=4):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.norm = Standardise()
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def train(model, loader, optimizer, criterion, device="cpu"):
    model.train()
    for inputs, targets in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(inputs)
            loss = criterion(logits, targets)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = features(dim=16, classes=4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32, shuffle=True)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for epoch in range(5):
        train(model, loader, optimizer, nn.CrossEntropyLoss(label_smoothing=0.0))
