"""Correct code that looks like the bugs the linter hunts. Every rule must stay silent here."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, DistributedSampler

criterion = nn.CrossEntropyLoss()


def dcgan(netG, netD, loader, optimizerG, optimizerD, nz):
    """Two optimizers, each model zeroed with model.zero_grad(); the fake batch detached for D."""
    bce = nn.BCELoss()
    for real, _ in loader:
        netD.zero_grad()
        output = torch.sigmoid(netD(real)).view(-1)
        errD_real = bce(output, torch.ones_like(output))
        errD_real.backward()
        fake = netG(torch.randn(real.size(0), nz, 1, 1))
        output = torch.sigmoid(netD(fake.detach())).view(-1)
        errD_fake = bce(output, torch.zeros_like(output))
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        output = torch.sigmoid(netD(fake)).view(-1)
        errG = bce(output, torch.ones_like(output))
        errG.backward()
        optimizerG.step()


def dqn(policy_net, target_net, memory, optimizer, gamma=0.99):
    """The target is detached on purpose; the target network stays in eval mode and is never trained."""
    for step in range(10_000):
        state, action, reward, next_state = memory.sample(128)
        q = policy_net(state).gather(1, action)
        with torch.no_grad():
            next_q = target_net(next_state).max(1).values
        target = reward + gamma * next_q
        loss = F.smooth_l1_loss(q.squeeze(1), target.detach())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        if step % 1000 == 0:
            target_net.load_state_dict(policy_net.state_dict())
            target_net.eval()


def distill(student, teacher, loader, optimizer, T=4.0):
    """The teacher runs under no_grad and stays in eval mode; the student is what trains."""
    teacher.eval()
    student.train()
    for x, y in loader:
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        soft = F.kl_div(F.log_softmax(s_logits / T, dim=-1), F.softmax(t_logits / T, dim=-1), reduction="batchmean")
        loss = soft * T * T + F.cross_entropy(s_logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def lbfgs(model, x, y):
    optimizer = torch.optim.LBFGS(model.parameters())

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss

    for _ in range(20):
        optimizer.step(closure)


def accumulate(model, loader, optimizer, accum=8):
    """Gradients are accumulated over micro-batches and cleared by setting them to None."""
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            for p in model.parameters():
                p.grad = None


def accelerated(model, loader, optimizer, lr_scheduler):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    total_loss = 0
    for batch in loader:
        outputs = model(**batch)
        loss = outputs.loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
        total_loss += loss.detach().float()
    return total_loss


def summed_micro_batches(model, loader, optimizer):
    """Losses summed on purpose, then backpropagated once."""
    for xs, ys in loader:
        optimizer.zero_grad()
        total = 0
        for x, y in zip(xs.split(4), ys.split(4)):
            total += criterion(model(x), y)
        total.backward()
        losses = []
        for x, y in zip(xs.split(4), ys.split(4)):
            losses.append(F.mse_loss(model(x), y))
        torch.stack(losses).mean().backward()
        optimizer.step()


def reinforce(policy, episodes, optimizer):
    for states, actions, returns in episodes:
        log_probs = torch.distributions.Categorical(logits=policy(states)).log_prob(actions)
        loss = -(log_probs * torch.tensor(returns)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def metrics_beside_the_loss(model, loader, optimizer):
    correct = 0
    for x, y in loader:
        out = model(x)
        probs = out.softmax(-1)
        loss = criterion(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        out = out.softmax(-1)
        correct += (probs.argmax(-1) == y).sum().item()
        log_probs = F.log_softmax(out, dim=-1)
        nll = F.nll_loss(log_probs, y)
        bce = F.binary_cross_entropy(torch.sigmoid(out[:, 0]), y.float())
        print(nll.item(), bce.item())
    return correct


def weighted(model, x, y, weights):
    per_sample = F.cross_entropy(model(x), y, reduction="none")
    (per_sample * weights).mean().backward()
    masked = F.cross_entropy(model(x), y, reduction="none")
    masked = (masked * weights).sum() / weights.sum()
    masked.backward()


def epochs_with_validation(model, train_loader, val_loader, optimizer, scheduler, epochs):
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        model.eval()
        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                val_loss += criterion(model(x), y).item()
        scheduler.step(val_loss)


def train_with_periodic_eval(model, loader, optimizer, max_steps):
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
        if step == max_steps:
            model.eval()
            break


def linear_probe(model, loader):
    for p in model.backbone.parameters():
        p.requires_grad = False
    optimizer = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()


class Residual(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self):
        self.fc.weight.data.normal_(0, 0.02)
        self.gate.bias.data.fill_(1.0)

    def forward(self, x):
        h = F.gelu(self.fc(x))
        h += x
        g = torch.sigmoid(self.gate(x))
        g = g * 2
        g += 1
        return F.dropout(h * g, 0.1, self.training)


@torch.no_grad()
def ema_update(ema, model, decay=0.999):
    for e, p in zip(ema.parameters(), model.parameters()):
        e.data.mul_(decay).add_(p.data, alpha=1 - decay)
        e.lerp_(p, 1 - decay)


@torch.no_grad()
def predict(model, x):
    probs = torch.sigmoid(model(x))
    probs[probs < 0.5] = 0
    probs += 0.1
    return probs


def loaders(train_set, val_set, world_size, rank):
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False)
    train_loader = DataLoader(train_set, batch_size=64, shuffle=False,
                              sampler=DistributedSampler(train_set, num_replicas=world_size, rank=rank))
    return train_loader, val_loader


def checkpoints(path, model):
    trusted = torch.load(path, map_location="cpu", weights_only=False)  # noqa: torch-load-unsafe (a file we wrote)
    model.load_state_dict(torch.load(path, weights_only=True))
    snapshot = [p.data.clone() for p in model.parameters()]
    return trusted, snapshot


def manual_sgd(model, loader, lr=0.1):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                p.grad.zero_()


def backward_inside_no_grad_block(model, x, y, optimizer):
    loss = criterion(model(x), y)
    with torch.no_grad():
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def inference_script(model, loader):
    model.eval()
    with torch.inference_mode():
        outputs = [model(x) for x in loader]
    torch.set_grad_enabled(False)
    for x in loader:
        outputs.append(model(x))
    return outputs




def pgd_attack(model, x, y, eps=8 / 255, alpha=2 / 255, steps=10):
    """Eval mode on purpose, and gradients on purpose: with respect to the input."""
    model.eval()
    x_adv = x.clone().detach()
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = criterion(model(x_adv), y)
        grad = torch.autograd.grad(loss, x_adv)[0]
        x_adv = (x_adv + alpha * grad.sign()).clamp(x - eps, x + eps).detach()
    return x_adv


def augment(x, p=0.1):
    return F.dropout(x, p)


class Augment:
    def __call__(self, x):
        return F.dropout(x, 0.1)


def finetune_tutorial(model, dataloaders, optimizer, scheduler, num_epochs=25):
    """The train/val phase loop of the classic transfer-learning tutorial."""
    for epoch in range(num_epochs):
        for phase in ["train", "val"]:
            if phase == "train":
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    loss = criterion(outputs, labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
            if phase == "train":
                scheduler.step()


def amp_accumulation(model, loader, optimizer, accum=4):
    scaler = torch.cuda.amp.GradScaler()
    for i, (x, y) in enumerate(loader):
        with torch.no_grad(), torch.autocast("cuda"):
            teacher = model(x).softmax(-1)
        with torch.autocast("cuda"):
            loss = F.cross_entropy(model(x), teacher) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


def per_step_total(model, loader, optimizer):
    """The sum is reset every iteration, so no graph outlives its step."""
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        step_total = 0.0
        step_total += loss
        print(step_total)


def evaluate_then_refresh_bn(model, val_batches, loader):
    """Back in train mode before the loop: forward passes that only refresh batch-norm statistics."""
    model.eval()
    with torch.no_grad():
        accuracy = sum((model(x).argmax(1) == y).float().mean().item() for x, y in val_batches)
    model.train()
    for x, _ in loader:
        model(x)
    return accuracy


def comprehension_names(model, xs, ys, heads):
    out = model(xs[0]).softmax(-1)
    loss = sum(criterion(out, y) for out, y in zip([h(xs[0]) for h in heads], ys))
    return loss, out


def deferred_step(model, loader, optimizer, scheduler, accum=4, steps_per_epoch=1000):
    """The optimizer steps at the top of the next iteration, for the window that just ended."""
    for i, (x, y) in enumerate(loader):
        if i > 0 and i % steps_per_epoch == 0:
            scheduler.step()
        if i > 0 and i % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        (criterion(model(x), y) / accum).backward()


def skip_spiky_steps(model, loader, optimizer, threshold=10.0):
    """A step is skipped by clearing its gradients and moving on to the next batch."""
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        if loss.item() > threshold:
            optimizer.zero_grad(set_to_none=True)
            continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
