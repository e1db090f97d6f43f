"""Healthy cases: every diagnostic must give them no `fail`.

Each factory returns a case dict (DESIGN.md, "A case") built under a fixed seed, without touching
the caller's RNG. They are small on purpose: the whole battery on one case runs in a few seconds on
CPU. Broken twins (tests/zoo/broken_*.py) reuse these models and change one line, marked `# BUG:`.

Run one through the doctor: `python diagnostics/doctor.py --case tests/zoo/healthy.py:make_mlp_classifier`.
"""
import contextlib
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


@contextlib.contextmanager
def seeded(seed):
    """Fork the global RNG (CPU) and seed it, so building a case never disturbs the caller's stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class MLP(nn.Module):
    def __init__(self, n_in, n_hidden, n_out, logit_scale=1.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, n_hidden), nn.ReLU(),
            nn.Linear(n_hidden, n_hidden), nn.ReLU(),
            nn.Linear(n_hidden, n_out),
        )
        self.logit_scale = logit_scale

    def forward(self, x):
        return self.net(x) * self.logit_scale


class CNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, n_classes))

    def forward(self, x):  # x: (B, 3, H, W)
        return self.head(self.features(x))


class Block(nn.Module):
    """Pre-LayerNorm transformer block with causal self-attention."""

    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, allowed=None):  # x: (B, T, d); allowed: a boolean mask (True = may attend), else causal
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None)  # (B, heads, T, d/heads)
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """GPT-style LM with a tied head; embeddings at std d**-0.5 keep the tied logits at unit scale."""

    def __init__(self, vocab=32, d=64, n_layers=2, n_heads=2, block=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        nn.init.normal_(self.tok.weight, std=d ** -0.5)
        nn.init.normal_(self.pos.weight, std=d ** -0.5)
        self.blocks = nn.Sequential(*[Block(d, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):  # idx: (B, T) token ids -> logits (B, T, vocab)
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.ln_f(self.blocks(x)) @ self.tok.weight.T


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def progression_tokens(batch, length, vocab):
    """Rows of arithmetic progressions mod vocab: learnable from two tokens of context."""
    start = torch.randint(0, vocab, (batch, 1))
    step = torch.randint(1, 4, (batch, 1))
    return (start + step * torch.arange(length)) % vocab


def make_mlp_classifier():
    with seeded(0):
        x = torch.randn(32, 20)
        y = (x @ torch.randn(20, 5)).argmax(dim=1)  # a linear teacher: learnable labels
        model = MLP(20, 64, 5)
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy,
            "task": {"kind": "classification", "num_classes": 5}}


def make_cnn_classifier():
    """No task hints on purpose: the checks must infer a 4-class classification."""
    with seeded(1):
        y = torch.randint(0, 4, (16,))
        x = torch.randn(16, 3, 12, 12)
        for i, quadrant in enumerate(y.tolist()):  # the label says which quadrant is brighter
            r, c = divmod(quadrant, 2)
            x[i, :, 6 * r:6 * r + 6, 6 * c:6 * c + 6] += 1.0
        x = (x - x.mean()) / x.std()
        model = CNN(4)
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy}


def make_causal_lm():
    with seeded(2):
        tokens = progression_tokens(8, 17, 32)
        inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
        targets[:2, -3:] = -100  # padding in two rows, masked out of the loss
        model = TinyLM(vocab=32)
    return {"model": model, "batch": (inputs, targets), "loss_fn": lm_loss,
            "task": {"kind": "causal_lm", "vocab_size": 32, "ignore_index": -100}}


def make_regression_mlp():
    with seeded(3):
        x = torch.randn(64, 8)
        y = torch.sin(x @ torch.randn(8, 1)) + 0.5 * x[:, :1]
        y = (y - y.mean()) / y.std()  # standardised targets
        model = MLP(8, 32, 1)
    return {"model": model, "batch": (x, y), "loss_fn": F.mse_loss, "task": {"kind": "regression"}}


class ModelOutput(OrderedDict):
    """A stand-in for transformers' ModelOutput: an OrderedDict whose fields are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def hf_lm_loss(output, labels):
    """The loss of a Hugging Face causal LM: labels are the input ids (padding -100), shifted here by one."""
    logits = output["logits"][:, :-1]  # the prediction at t is scored against the token at t + 1
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)


class HFStyleLM(TinyLM):
    """TinyLM called the Hugging Face way: model(input_ids=..., attention_mask=..., labels=...) -> output.logits."""

    def position_ids(self, attention_mask):  # (B, T) -> (B, T): counted over the tokens, as transformers does with padding
        return (attention_mask.cumsum(-1) - 1).clamp_min(0)

    def attention_allowed(self, attention_mask):  # (B, T), 1 = token, 0 = padding -> (B, 1, T, T), True = may attend
        T = attention_mask.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=attention_mask.device).tril()
        itself = torch.eye(T, dtype=torch.bool, device=attention_mask.device)  # a pad attends to itself: no empty softmax row
        return causal & (attention_mask.bool()[:, None, None, :] | itself)

    def forward(self, input_ids, attention_mask, labels=None):  # (B, T) each
        x = self.tok(input_ids) + self.pos(self.position_ids(attention_mask))
        allowed = self.attention_allowed(attention_mask)
        for block in self.blocks:
            x = block(x, allowed)
        output = ModelOutput(logits=self.ln_f(x) @ self.tok.weight.T)  # (B, T, vocab)
        if labels is None:
            return output
        return ModelOutput(loss=hf_lm_loss(output, labels), logits=output.logits)  # as in transformers: the loss comes first


def make_hf_style_lm():
    """Dict inputs, a dict-like output, labels shifted inside the loss, right padding masked twice."""
    with seeded(5):
        input_ids = progression_tokens(8, 16, 32)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[:3, -4:] = 0  # three rows are shorter: right padding
        input_ids = input_ids.masked_fill(attention_mask == 0, 0)  # the pad token id, 0
        labels = input_ids.masked_fill(attention_mask == 0, -100)  # padding is never a target
        model = HFStyleLM(vocab=32)
    return {"model": model, "batch": ({"input_ids": input_ids, "attention_mask": attention_mask}, labels),
            "loss_fn": hf_lm_loss, "task": {"kind": "causal_lm", "vocab_size": 32, "ignore_index": -100}}


def make_hf_style_lm_labels_inside():
    """The usual Hugging Face loop, `loss = model(**batch).loss`: the labels go into the model, the loss comes out."""
    case = make_hf_style_lm()
    inputs, labels = case["batch"]
    case["batch"] = ({**inputs, "labels": labels}, labels)
    case["loss_fn"] = lambda output, labels: output.loss
    return case


HEALTHY = ["make_mlp_classifier", "make_cnn_classifier", "make_causal_lm", "make_regression_mlp", "make_hf_style_lm",
           "make_hf_style_lm_labels_inside"]
