"""A classifier script driven by argparse that writes checkpoints (one before training, one per epoch).

The healthy twin of train_args_ckpt.py: the linear lr scaling rule divides.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

from tinydata import features


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base_lr", type=float, default=0.1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out_dir", required=True)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)
    x, y = features(dim=16, classes=4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    lr = args.base_lr * args.batch_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    torch.save(model.state_dict(), os.path.join(args.out_dir, "init.pt"))
    for epoch in range(args.epochs):
        for inputs, labels in loader:
            loss = F.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                   os.path.join(args.out_dir, f"epoch{epoch}.pt"))


if __name__ == "__main__":
    main()
