"""In-place bugs planted in real architectures, each beside its healthy twin (the line marked `# BUG:` written the
right way):

    nanoGPT-style GPT      the residual added in place: x += attn(ln_1(x)); ln_1 saved x   | x = x + attn(ln_1(x))
    MLP with torch modules nn.ReLU(inplace=True) after nn.Sigmoid, whose backward needs its output | inplace=False

Run one: `python diagnostics/inplace.py --case tests/corpus/broken_inplace.py:make_gpt_inplace_residual`.
"""
import torch
import torch.nn as nn
from broken_registration import GPT, Block, lm_loss


class InplaceResidualBlock(Block):
    def forward(self, x):
        x += self.attn(self.ln_1(x))  # BUG: ln_1 saved x for its backward; the in-place add overwrites it
        return x + self.mlp(self.ln_2(x))


def gpt_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tokens = torch.randint(0, 64, (4, 17))
        model = GPT(broken=False)
        if broken:
            for block in model.h:
                block.__class__ = InplaceResidualBlock
    return {"model": model, "batch": (tokens[:, :-1], tokens[:, 1:]), "loss_fn": lm_loss,
            "task": {"kind": "causal_lm", "vocab_size": 64}}


def make_gpt():
    return gpt_case(broken=False)


def make_gpt_inplace_residual():
    return gpt_case(broken=True)


def mlp_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        x, y = torch.randn(16, 10), torch.randint(0, 3, (16,))
        inplace = False
        if broken:
            inplace = True  # BUG: the ReLU overwrites the sigmoid's output, which the sigmoid's backward needs
        model = nn.Sequential(nn.Linear(10, 32), nn.Sigmoid(), nn.ReLU(inplace=inplace), nn.Linear(32, 3))
    return {"model": model, "batch": (x, y), "loss_fn": nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 3}}


def make_sequential():
    return mlp_case(broken=False)


def make_sequential_inplace_relu():
    return mlp_case(broken=True)


HEALTHY = ["make_gpt", "make_sequential"]
BROKEN = {"make_gpt_inplace_residual": "make_gpt", "make_sequential_inplace_relu": "make_sequential"}
