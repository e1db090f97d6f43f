"""How far one outlier gradient moves Adam's weights, for beta2 = 0.999 and 0.95.

    python benchmarks/adam_beta2_outlier.py

Setup (the table in refs/stability.md, section "Mechanism", comes from this run): torch.optim.Adam,
lr 1, beta1 0.9, eps 1e-8, 4000 independent coordinates; 3000 steps of unit Gaussian gradient
noise, then one gradient of +100 in every coordinate, then 50 more noise steps. Reported, averaged
over coordinates and in units of lr: the typical step before the outlier, the outlier step, and
the extra displacement over the next 50 steps relative to a run without the outlier.
"""
import platform

import torch

COORDINATES = 4000
WARMUP_STEPS = 3000  # long enough for v to reach its steady state even at beta2 = 0.999 (window ~1000)
AFTER_STEPS = 50
OUTLIER = 100.0  # 100x the noise scale, the "100x gradient" of the course notes


def run(beta2, with_outlier):
    generator = torch.Generator().manual_seed(0)
    weight = torch.zeros(COORDINATES, requires_grad=True)
    optimizer = torch.optim.Adam([weight], lr=1.0, betas=(0.9, beta2), eps=1e-8)
    steps = []
    for step in range(WARMUP_STEPS + 1 + AFTER_STEPS):
        noise = torch.randn(COORDINATES, generator=generator)
        weight.grad = torch.full_like(weight, OUTLIER) if with_outlier and step == WARMUP_STEPS else noise
        before = weight.detach().clone()
        optimizer.step()
        steps.append((weight.detach() - before).abs().mean().item())
    return weight.detach().clone(), steps


def main():
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print("beta2   typical step   outlier step   extra displacement over next 50 steps (units of lr)")
    for beta2 in (0.999, 0.95):
        final_with, steps = run(beta2, with_outlier=True)
        final_without, _ = run(beta2, with_outlier=False)
        typical = sum(steps[WARMUP_STEPS - 100:WARMUP_STEPS]) / 100
        outlier = steps[WARMUP_STEPS]
        extra = (final_with - final_without).abs().mean().item() - outlier
        print(f"{beta2:<7} {typical:<14.2f} {outlier:<14.2f} {extra:.1f}")


if __name__ == "__main__":
    main()
