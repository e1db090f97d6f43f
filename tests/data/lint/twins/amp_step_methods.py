# clip-before-unscale: in per-batch functions and optimizer wrappers, not only in loops
import torch


class AmpOptimizer:
    def __init__(self, optimizer, params, max_norm):
        self.optimizer, self.params, self.max_norm = optimizer, list(params), max_norm
        self.scaler = torch.amp.GradScaler()

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)


class UnscalingHelperOptimizer(AmpOptimizer):
    def unscale(self):
        self.scaler.unscale_(self.optimizer)

    def step(self):
        self.unscale()
        torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()


class BrokenAmpOptimizer(AmpOptimizer):
    def step(self):
        torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)  # BUG: clip-before-unscale
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)


def train_step(model, batch, optimizer, scaler, loss_fn):
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = loss_fn(model(batch["x"]), batch["y"])
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: clip-before-unscale
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def train_step_no_update(model, batch, optimizer, scaler, loss_fn):
    optimizer.zero_grad()
    scaler.scale(loss_fn(model(batch["x"]), batch["y"])).backward()
    scaler.step(optimizer)  # BUG: scaler-without-update


def optimizer_step(scaler, optimizer):
    scaler.step(optimizer)  # the caller runs backward() and scaler.update()
