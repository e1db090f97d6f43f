"""Registration bugs planted in real architectures, each beside its healthy twin (the line marked `# BUG:` written
the right way):

    nanoGPT-style GPT    the transformer blocks kept in a plain list   | nn.ModuleList
    CLIP-style towers    the learnable temperature a plain tensor      | nn.Parameter

The GPT follows nanoGPT's model.py (Karpathy): pre-LayerNorm blocks, causal attention via
F.scaled_dot_product_attention, a tied head, residual projections initialised at 0.02 / sqrt(2 * n_layer).
Run one: `python diagnostics/registration.py --case tests/corpus/broken_registration.py:make_gpt_blocks_in_list`.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):  # (B, T, d)
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, d))


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, broken, vocab=64, block_size=16, d=32, n_layer=2, n_head=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        blocks = [Block(d, n_head) for _ in range(n_layer)]
        h = nn.ModuleList(blocks)
        if broken:
            h = blocks  # BUG: a plain list; nn.Module does not see these blocks
        self.h = h
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):  # (B, T) -> logits (B, T, vocab)
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


def gpt_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tokens = torch.randint(0, 64, (4, 17))
        model = GPT(broken)
    return {"model": model, "batch": (tokens[:, :-1], tokens[:, 1:]), "loss_fn": lm_loss,
            "task": {"kind": "causal_lm", "vocab_size": 64}}


def make_gpt():
    return gpt_case(broken=False)


def make_gpt_blocks_in_list():
    return gpt_case(broken=True)


class TwoTowers(nn.Module):
    """CLIP-style contrastive model: image and text towers, a learnable temperature on the similarity logits."""

    def __init__(self, broken, d_image=24, d_text=16, d=128):  # CLIP embeds in 512 dims
        super().__init__()
        self.image = nn.Sequential(nn.Linear(d_image, 32), nn.GELU(), nn.Linear(32, d))
        self.text = nn.Sequential(nn.Linear(d_text, 32), nn.GELU(), nn.Linear(32, d))
        logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # CLIP's initial temperature
        if broken:
            logit_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)  # BUG: a plain tensor, never trained
        self.logit_scale = logit_scale

    def forward(self, images, texts):  # (B, d_image), (B, d_text) -> (B, B) image-to-text logits
        a, b = F.normalize(self.image(images), dim=-1), F.normalize(self.text(texts), dim=-1)
        return self.logit_scale.exp() * a @ b.T


def towers_case(broken):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        images, texts = torch.randn(8, 24), torch.randn(8, 16)
        model = TwoTowers(broken)
    return {"model": model, "batch": ((images, texts), torch.arange(8)), "loss_fn": F.cross_entropy,
            "task": {"kind": "classification", "num_classes": 8}}


def make_two_towers():
    return towers_case(broken=False)


def make_two_towers_plain_temperature():
    return towers_case(broken=True)


HEALTHY = ["make_gpt", "make_two_towers"]
BROKEN = {"make_gpt_blocks_in_list": "make_gpt", "make_two_towers_plain_temperature": "make_two_towers"}
