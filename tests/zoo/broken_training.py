"""Broken twins for the training-dynamics checks: each factory plants one bug, marked `# BUG:`.

Most are a healthy case from tests/zoo/healthy.py with one thing changed; the first line of each
factory's docstring names the check that must flag it (EXPECTED maps factory -> (check id, status)). Run one
through the doctor: `python diagnostics/doctor.py --case tests/zoo/broken_training.py:make_lr_zero`.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from healthy import (MLP, Block, HFStyleLM, TinyLM, make_causal_lm, make_cnn_classifier, make_hf_style_lm_labels_inside,
                     make_mlp_classifier, make_regression_mlp, seeded)


# --- overfit_one_batch ---------------------------------------------------------------------------

def make_lr_zero():
    """overfit_one_batch (flat): the optimizer's learning rate is 0."""
    case = make_mlp_classifier()
    case["optimizer"] = lambda params: torch.optim.Adam(params, lr=0.0)  # BUG: lr 0 (a warmup schedule that starts at 0, a config typo)
    return case


def make_flipped_loss_sign():
    """overfit_one_batch (diverging): the loss is negated, so the optimizer maximises cross-entropy."""
    case = make_mlp_classifier()
    case["loss_fn"] = lambda logits, y: -F.cross_entropy(logits, y)  # BUG: minus sign: gradient ascent on the loss
    return case


class SoftmaxMLP(MLP):
    def forward(self, x):
        return super().forward(x).softmax(dim=-1)  # BUG: probabilities into F.cross_entropy, which applies log-softmax itself


def make_double_softmax():
    """overfit_one_batch (plateau): the model outputs probabilities and the loss expects logits."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = SoftmaxMLP(20, 64, 5)
    return case


def make_optimizer_on_other_model():
    """overfit_one_batch (flat): the optimizer holds the parameters of another instance of the model."""
    case = make_mlp_classifier()
    with seeded(0):
        stale = MLP(20, 64, 5)
    case["optimizer"] = lambda params: torch.optim.Adam(stale.parameters(), lr=3e-4)  # BUG: the other instance is optimised
    return case


# --- gradient_flow -------------------------------------------------------------------------------

class DetachedCNN(nn.Module):
    def __init__(self, cnn):
        super().__init__()
        self.features, self.head = cnn.features, cnn.head

    def forward(self, x):
        return self.head(self.features(x).detach())  # BUG: .detach() cuts the graph: the conv layers never learn


def make_detached_features():
    """gradient_flow (None grads): the CNN's features are detached before the head."""
    case = make_cnn_classifier()
    case["model"] = DetachedCNN(case["model"])
    return case


def make_dead_relu():
    """gradient_flow (dead ReLUs, zero grads): the first layer's bias starts at -10, every unit is off."""
    case = make_mlp_classifier()
    with torch.no_grad():
        case["model"].net[0].bias.fill_(-10.0)  # BUG: a large negative bias init: the first ReLU never fires
    return case


class SigmoidMLP(nn.Module):
    def __init__(self, n_in, n_hidden, n_out, depth):
        super().__init__()
        layers = []
        for i in range(depth):
            layers += [nn.Linear(n_in if i == 0 else n_hidden, n_hidden), nn.Sigmoid()]  # BUG: 12 stacked sigmoids, no normalisation
        self.net = nn.Sequential(*layers, nn.Linear(n_hidden, n_out))

    def forward(self, x):
        return self.net(x)


def make_vanishing_sigmoid():
    """gradient_flow (vanishing): twelve sigmoid layers; each one shrinks the gradient by 4x or more."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = SigmoidMLP(20, 64, 5, depth=12)
    return case


# --- update_ratio --------------------------------------------------------------------------------

def make_lr_too_high():
    """update_ratio (too high): Adam at lr 0.3, a typo for 3e-4."""
    case = make_mlp_classifier()
    case["optimizer"] = lambda params: torch.optim.Adam(params, lr=0.3)  # BUG: 3e-1 where 3e-4 was meant
    return case


def make_bf16_weights_at_a_fine_tuning_lr():
    """update_ratio (lost to rounding): the whole model cast to bfloat16, Adam at a fine-tuning lr of 2e-5."""
    case = make_mlp_classifier()
    case["model"] = case["model"].to(torch.bfloat16)  # BUG: bf16 weights, no fp32 master copy: a 2e-5 step is under half a bf16 unit
    x, y = case["batch"]
    case["batch"] = (x.to(torch.bfloat16), y)
    case["loss_fn"] = lambda logits, y: F.cross_entropy(logits.float(), y)
    case["optimizer"] = lambda params: torch.optim.Adam(params, lr=2e-5)
    return case


# --- nan_watch -----------------------------------------------------------------------------------

class LogLink(nn.Module):
    """Predict a positive quantity as the log of the network's output."""

    def forward(self, x):
        return torch.log(x)  # BUG: the input is not guaranteed positive: log of a negative number is NaN


def make_log_of_negative():
    """nan_watch (forward): a log link applied to an unconstrained output."""
    case = make_regression_mlp()
    case["model"] = nn.Sequential(case["model"], LogLink())
    return case


class Distance(nn.Module):
    def forward(self, a, b):
        return ((a - b) ** 2).sum(-1).sqrt()  # BUG: sqrt'(0) is inf: a pair of identical inputs gives 0 * inf = NaN in backward


class SiameseMLP(nn.Module):
    """Is the pair (x1, x2) the same item? A logit from the distance between their embeddings."""

    def __init__(self, n_in, n_hidden):
        super().__init__()
        self.encoder = MLP(n_in, n_hidden, n_hidden)
        self.distance = Distance()
        self.scale = nn.Linear(1, 1)

    def forward(self, pairs):  # pairs: (B, 2, n_in)
        d = self.distance(self.encoder(pairs[:, 0]), self.encoder(pairs[:, 1]))  # (B,)
        return self.scale(d[:, None]).squeeze(-1)


def make_sqrt_at_zero():
    """nan_watch (backward): finite forward, NaN gradient from a hand-written distance at 0 (duplicate pairs)."""
    with seeded(4):
        first = torch.randn(32, 20)
        same = torch.rand(32) < 0.5
        second = torch.where(same[:, None], first, torch.randn(32, 20))  # half the pairs are exact duplicates
        model = SiameseMLP(20, 32)
    return {"model": model, "batch": (torch.stack([first, second], dim=1), (~same).float()),
            "loss_fn": F.binary_cross_entropy_with_logits, "task": {"kind": "classification", "num_classes": 2}}


def make_log_softmax_by_hand():
    """nan_watch (in the loss): log(softmax(x)) written out underflows to log(0) = -inf on large logits."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = MLP(20, 64, 5, logit_scale=300.0)  # large logits, as after a few steps at a high lr
    case["loss_fn"] = lambda logits, y: F.nll_loss(torch.log(F.softmax(logits, dim=-1)), y)  # BUG: use F.log_softmax / F.cross_entropy
    return case


def make_fp16_headroom():
    """nan_watch (warn, not fail): outputs around 2e5 fit fp32 but would overflow fp16 (max 65504)."""
    case = make_regression_mlp()
    x, y = case["batch"]
    case["batch"] = (x, y * 1e4 + 2e5)  # BUG: raw targets around 2e5 (prices in dollars), never standardised
    with torch.no_grad():
        case["model"].net[-1].bias.fill_(2e5)  # the final bias set to the target mean, as Karpathy advises: the activations follow
    return case


# --- batch_independence --------------------------------------------------------------------------

class SeqFirstLM(nn.Module):
    """A causal LM on nn.TransformerEncoderLayer, which expects (T, B, d) unless batch_first=True."""

    def __init__(self, vocab=32, d=64, block=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.layer = nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=4 * d, dropout=0.0)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):  # idx: (B, T)
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=idx.device)
        h = self.layer(x.view(T, B, -1), src_mask=mask, is_causal=True)  # BUG: view is not transpose(0, 1): mixes the rows
        return self.head(h.transpose(0, 1))


def make_seq_first_view():
    """batch_independence: (B, T, d) reshaped to the layer's (T, B, d) with view instead of transpose."""
    case = make_causal_lm()
    with seeded(2):
        case["model"] = SeqFirstLM()
    return case


class BatchStandardisedMLP(MLP):
    def forward(self, x):
        x = (x - x.mean(0)) / x.std(0)  # BUG: standardises with the batch's own statistics, in eval mode too
        return super().forward(x)


def make_batch_stats_in_forward():
    """batch_independence: inputs standardised inside forward with statistics of the batch."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = BatchStandardisedMLP(20, 64, 5)
    return case


# --- causal_dependency ---------------------------------------------------------------------------

class UnmaskedBlock(Block):
    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v)  # BUG: is_causal=True forgotten: every position sees the whole sequence
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln2(x))


class OffByOneBlock(Block):
    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(diagonal=1)  # BUG: diagonal=1 lets t see t+1 (meant tril())
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln2(x))


def _lm_with_blocks(block_class):
    case = make_causal_lm()
    with seeded(2):
        model = TinyLM(vocab=32)
        model.blocks = nn.Sequential(*[block_class(64, 2) for _ in range(2)])
    case["model"] = model
    return case


def make_no_causal_mask():
    """causal_dependency: attention without the causal mask."""
    return _lm_with_blocks(UnmaskedBlock)


def make_mask_off_by_one():
    """causal_dependency: a causal mask built one diagonal too high, so position t also sees t+1."""
    return _lm_with_blocks(OffByOneBlock)


class PaddingMaskOnlyLM(HFStyleLM):
    def attention_allowed(self, attention_mask):
        T = attention_mask.shape[1]
        itself = torch.eye(T, dtype=torch.bool, device=attention_mask.device)
        return attention_mask.bool()[:, None, None, :] | itself  # BUG: the padding mask alone, the causal tril() dropped


def make_padding_mask_without_causal():
    """causal_dependency: an HF-style LM's attention mask is the padding mask alone: every token sees the whole sequence.
    Built on the labels-inside case: the output's first tensor is the loss, the check must find the logits."""
    case = make_hf_style_lm_labels_inside()
    with seeded(5):
        case["model"] = PaddingMaskOnlyLM(vocab=32)
    return case


class BatchCumsumLM(HFStyleLM):
    def position_ids(self, attention_mask):
        return (attention_mask.cumsum(0) - 1).clamp_min(0)  # BUG: cumsum over dim 0, the batch (meant -1, the positions)


def make_positions_summed_over_batch():
    """batch_independence: an HF-style LM counts its position ids down the batch, so each row's positions depend on the
    padding of the rows before it. On the labels-inside case, as make_padding_mask_without_causal."""
    case = make_hf_style_lm_labels_inside()
    with seeded(5):
        case["model"] = BatchCumsumLM(vocab=32)
    return case


EXPECTED = {  # factory -> (check id, status it must get)
    "make_lr_zero": ("overfit_one_batch", "fail"),
    "make_flipped_loss_sign": ("overfit_one_batch", "fail"),
    "make_double_softmax": ("overfit_one_batch", "fail"),
    "make_optimizer_on_other_model": ("overfit_one_batch", "fail"),
    "make_detached_features": ("gradient_flow", "fail"),
    "make_dead_relu": ("gradient_flow", "fail"),
    "make_vanishing_sigmoid": ("gradient_flow", "fail"),
    "make_lr_too_high": ("update_ratio", "fail"),
    "make_bf16_weights_at_a_fine_tuning_lr": ("update_ratio", "fail"),
    "make_log_of_negative": ("nan_watch", "fail"),
    "make_sqrt_at_zero": ("nan_watch", "fail"),
    "make_log_softmax_by_hand": ("nan_watch", "fail"),
    "make_fp16_headroom": ("nan_watch", "warn"),
    "make_seq_first_view": ("batch_independence", "fail"),
    "make_batch_stats_in_forward": ("batch_independence", "fail"),
    "make_no_causal_mask": ("causal_dependency", "fail"),
    "make_mask_off_by_one": ("causal_dependency", "fail"),
    "make_padding_mask_without_causal": ("causal_dependency", "fail"),
    "make_positions_summed_over_batch": ("batch_independence", "fail"),
}
