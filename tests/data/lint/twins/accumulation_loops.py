# gradient accumulation, written by hand: healthy look-alikes of the styles public scripts use (a remainder
# guard around the step, an inner loop of micro-batches, Lightning, DeepSpeed), and their broken twins
import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_


def train_amp(model, optimizer, loader, args):
    scaler = torch.amp.GradScaler()
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
            loss = loss / args.gradient_accumulation_steps
        scaler.scale(loss).backward()
        if (step + 1) % args.gradient_accumulation_steps == 0 or step + 1 == len(loader):
            scaler.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


def train_zero_at_window_start(model, optimizer, loader, accum_iter):
    for it, (x, y) in enumerate(loader):
        if it % accum_iter == 0:
            optimizer.zero_grad()
        outputs = model(**x)
        loss = outputs.loss / accum_iter
        loss.backward()
        last = (it + 1) % accum_iter == 0
        if last:
            optimizer.step()


class Trainer:
    """A trainer whose step runs k micro-batches, then clips and steps (the torchtitan and denoising-diffusion way)."""

    def __init__(self, model, optimizer, batches, gradient_accumulate_every):
        self.model, self.opt, self.batches = model, optimizer, batches
        self.gradient_accumulate_every = gradient_accumulate_every

    def forward_backward(self, data):
        loss = self.model(data)
        loss.backward()
        return loss.detach()

    def train_step(self):
        self.opt.zero_grad()
        losses = []
        for _ in range(self.gradient_accumulate_every):
            losses.append(self.forward_backward(next(self.batches)))
        clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return torch.stack(losses).mean()

    def train(self, steps):
        for _ in range(steps):
            for _ in range(self.gradient_accumulate_every):
                data = next(self.batches)
                loss = self.model(data)
                (loss / self.gradient_accumulate_every).backward()
            self.opt.step()
            self.opt.zero_grad()

    def train_no_scale(self, steps):
        for _ in range(steps):
            for _ in range(self.gradient_accumulate_every):
                loss = self.model(next(self.batches))
                loss.backward()  # BUG: accumulated-loss-not-scaled
            self.opt.step()
            self.opt.zero_grad()

    def train_zero_inside(self, steps):
        for _ in range(steps):
            for _ in range(self.gradient_accumulate_every):
                self.opt.zero_grad()  # BUG: zero-grad-every-micro-batch
                loss = self.model(next(self.batches)) / self.gradient_accumulate_every
                loss.backward()
                clip_grad_norm_(self.model.parameters(), 1.0)  # BUG: clip-every-micro-batch
            self.opt.step()


def train_multitask(model, optimizer, loader, heads):
    for x, ys in loader:
        optimizer.zero_grad()
        for head, y in zip(heads, ys):
            F.cross_entropy(head(model(x)), y).backward()  # one graph per head: summing their gradients is the point
        optimizer.step()


def train_gan(generator, discriminator, opt_g, opt_d, loader, n_critic):
    for i, real in enumerate(loader):
        opt_d.zero_grad()
        fake = generator(torch.randn(real.size(0), 128)).detach()
        d_loss = discriminator(fake).mean() - discriminator(real).mean()
        d_loss.backward()
        opt_d.step()
        if i % n_critic == 0:
            opt_g.zero_grad()
            g_loss = -discriminator(generator(torch.randn(real.size(0), 128))).mean()
            g_loss.backward()
            opt_g.step()


def train_deepspeed(model_engine, loader):
    for batch in loader:
        loss = model_engine(batch)
        model_engine.backward(loss)  # the engine divides by its gradient_accumulation_steps
        model_engine.step()  # and steps, clips and zeroes at the accumulation boundary


def train_loss_unscaled(model, optimizer, criterion, loader, accumulation_steps):
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()  # BUG: accumulated-loss-not-scaled
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def train_zero_every_batch(model, optimizer, loader, accumulation_steps):
    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
        optimizer.zero_grad()  # BUG: zero-grad-every-micro-batch


def train_clip_each_micro_step(model, optimizer, loader, accumulation_steps, max_norm):
    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if max_norm:
            clip_grad_norm_(model.parameters(), max_norm)  # BUG: clip-every-micro-batch
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def train_micro_steps_then_clip(model, optimizer, scaler, next_batch, grad_accum_steps, grad_clip, iters):
    """An inner loop of micro-steps, fp16 scaling, then unscale and clip before the step (the nanoGPT way)."""
    for _ in range(iters):
        for micro_step in range(grad_accum_steps):
            x, y = next_batch()
            logits, loss = model(x, y)
            loss = loss / grad_accum_steps
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


def train_micro_steps_then_clip_unscaled(model, optimizer, scaler, next_batch, grad_accum_steps, grad_clip, iters):
    for _ in range(iters):
        for micro_step in range(grad_accum_steps):
            x, y = next_batch()
            logits, loss = model(x, y)
            scaler.scale(loss).backward()  # BUG: accumulated-loss-not-scaled
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
