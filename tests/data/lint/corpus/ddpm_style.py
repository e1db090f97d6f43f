"""A denoising diffusion trainer with EMA and gradient accumulation, in the style of lucidrains' packages (our own text)."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def extract(a, t, x_shape):
    b = t.shape[0]
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


class GaussianDiffusion(nn.Module):
    def __init__(self, model, timesteps=1000):
        super().__init__()
        self.model, self.num_timesteps = model, timesteps
        betas = torch.linspace(1e-4, 0.02, timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.register_buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt())
        self.register_buffer("sqrt_one_minus_alphas_cumprod", (1.0 - alphas_cumprod).sqrt())

    def q_sample(self, x_start, t, noise):
        return extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start + \
            extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise

    def p_losses(self, x_start, t):
        noise = torch.randn_like(x_start)
        x = self.q_sample(x_start, t, noise)
        model_out = self.model(x, t)
        loss = F.mse_loss(model_out, noise, reduction="none")
        loss = loss.mean(dim=tuple(range(1, loss.ndim)))
        return loss.mean()

    def forward(self, img):
        t = torch.randint(0, self.num_timesteps, (img.shape[0],), device=img.device).long()
        return self.p_losses(img * 2 - 1, t)


class Trainer:
    def __init__(self, diffusion, loader, lr=8e-5, accumulate=2, ema_decay=0.995, max_grad_norm=1.0):
        self.model, self.loader, self.accumulate = diffusion, loader, accumulate
        self.ema = copy.deepcopy(diffusion).eval().requires_grad_(False)
        self.ema_decay, self.max_grad_norm = ema_decay, max_grad_norm
        self.opt = torch.optim.Adam(diffusion.parameters(), lr=lr, betas=(0.9, 0.99))

    @torch.no_grad()
    def update_ema(self):
        for ema_p, p in zip(self.ema.parameters(), self.model.parameters()):
            ema_p.lerp_(p, 1.0 - self.ema_decay)

    def train(self, steps):
        data = iter(self.loader)
        for step in range(steps):
            total_loss = 0.0
            for _ in range(self.accumulate):
                batch = next(data)
                loss = self.model(batch) / self.accumulate
                total_loss += loss.item()
                loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            self.opt.step()
            self.opt.zero_grad()
            self.update_ema()
            if step % 100 == 0:
                print(f"step {step} loss {total_loss:.4f}")
