# loss-accumulated-with-graph: the backpropagated value itself (losses.backward()) counts as a loss
import math


def train_one_epoch(model, criterion, data_loader, optimizer):
    running, graphs = [], []
    for samples, targets in data_loader:
        loss_dict = criterion(model(samples), targets)
        losses = sum(loss_dict[k] * criterion.weight_dict[k] for k in loss_dict if k in criterion.weight_dict)
        loss_value = losses.item()
        if not math.isfinite(loss_value):
            raise SystemExit(1)
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
        running.append(loss_value)
        graphs.append(losses)  # BUG: loss-accumulated-with-graph


def train_accumulating(model, optimizer, data, steps, accumulate=2):
    for step in range(steps):
        total_loss, kept = 0.0, 0.0
        for _ in range(accumulate):
            loss = model(next(data)) / accumulate
            total_loss += loss.item()
            loss.backward()
            kept += loss  # BUG: loss-accumulated-with-graph
        optimizer.step()
        optimizer.zero_grad()
