"""Optimizer set-ups that are correct although they look like a subset or a late layer swap.
(Kept apart from clean_patterns.py, whose linear probe freezes parameters: freezing anywhere in a
file turns optimizer-param-subset off for that file.)"""
import torch
import torch.nn as nn

criterion = nn.CrossEntropyLoss()


def build_then_optimize(model):
    model.fc = nn.Linear(512, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.to("cuda")
    return optimizer


def two_stage(model, new_head):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head = new_head
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return optimizer


def gan_parts(model, loader):
    opt_g = torch.optim.Adam(model.generator.parameters())
    opt_d = torch.optim.Adam(model.discriminator.parameters())
    for x in loader:
        d_loss, g_loss = model(x)
        opt_d.zero_grad()
        d_loss.backward(retain_graph=True)
        opt_d.step()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()


def ddp_wrapped(model, loader):
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.module.parameters(), lr=0.1)
    running = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running = running + loss.item()
    return running


class LitWrapper(nn.Module):
    """The optimizer gets self.model's parameters: the only submodule that has any."""

    def __init__(self, model, metric):
        super().__init__()
        self.model = model
        self.act = nn.ReLU()
        self.loss_fn = nn.CrossEntropyLoss()
        self.metric = metric

    def forward(self, x):
        return self.act(self.model(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.metric(logits, y)
        return self.loss_fn(logits, y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=1e-3)


def grow_head(model, num_classes):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.fc = nn.Linear(512, num_classes)
    optimizer.add_param_group({"params": model.fc.parameters()})
    return optimizer
