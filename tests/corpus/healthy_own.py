"""Healthy re-implementations of public designs, written here from their published structure.

nanoGPT's GPT (scaled residual init, learned position table, tied head), pytorch/examples'
word_language_model LSTM (time-major: (T, B) token ids), a ResNet-style conv net with BatchNorm,
a small U-Net, a ViT in timm's layout (cls token and position table as raw parameters), ConvNeXt
(layer scale at 1e-6), a DDPM noise predictor (the objective draws t and the noise), DiT
(adaLN-Zero: zero gates and a zero final layer), pytorch/examples' VAE (samples noise in
forward) and its MNIST net (log_softmax + NLL). Sizes are tiny; the structure and the initialisation are the designs' own.

Run one: `python diagnostics/doctor.py --case tests/corpus/healthy_own.py:make_nanogpt`.
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@contextlib.contextmanager
def seeded(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def progression_tokens(batch, length, vocab):
    start = torch.randint(0, vocab, (batch, 1))
    step = torch.randint(1, 4, (batch, 1))
    return (start + step * torch.arange(length)) % vocab


# --- nanoGPT (karpathy/nanoGPT model.py) ---
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):  # (B, T, C)
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLPBlock(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class GPTBlock(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention(n_embd, n_head)
        self.ln_2, self.mlp = nn.LayerNorm(n_embd), MLPBlock(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([GPTBlock(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # scaled init of the residual projections, per GPT-2
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):  # (B, T) -> logits (B, T, vocab), the training path of nanoGPT's forward
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def make_nanogpt():
    with seeded(20):
        data = progression_tokens(8, 17, 64)
        model = GPT()
    return {"model": model, "batch": (data[:, :-1].contiguous(), data[:, 1:].contiguous()), "loss_fn": lm_loss,
            "task": {"kind": "causal_lm", "vocab_size": 64, "ignore_index": -1, "clip_grad_norm": 1.0}}


# --- word_language_model (pytorch/examples), LSTM, time-major ---
class RNNModel(nn.Module):
    def __init__(self, ntoken=64, ninp=32, nhid=32, nlayers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)  # batch_first=False: (T, B, C)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))

    def forward(self, input, hidden=None):  # input (T, B) -> log-probs (T, B, ntoken), hidden
        hidden = self.init_hidden(input.size(1)) if hidden is None else hidden
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output))
        return F.log_softmax(decoded, dim=-1), hidden


def lstm_loss(output, targets):
    log_probs, hidden = output  # the example's train(): output, hidden = model(data, hidden)
    return F.nll_loss(log_probs.view(-1, log_probs.size(-1)), targets.reshape(-1))


def make_lstm_lm():
    """batchify() lays the corpus out as (T, B); get_batch() gives source rows i..i+T and targets one further."""
    with seeded(21):
        data = progression_tokens(8, 13, 64).t().contiguous()  # (T + 1, B)
        model = RNNModel()
    return {"model": model, "batch": (data[:-1], data[1:]),
            "loss_fn": lstm_loss,
            "task": {"kind": "causal_lm", "vocab_size": 64, "batch_dim": 1, "time_dim": 0, "clip_grad_norm": 0.25},
            "optimizer": lambda params: torch.optim.SGD(params, lr=20.0)}


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)  # (T, 1, C): time-major
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):  # (T, B, C)
        return self.dropout(x + self.pe[:x.size(0)])


class TransformerModel(nn.Module):
    """word_language_model's TransformerModel: nn.TransformerEncoder without batch_first, a causal src_mask."""

    def __init__(self, ntoken=64, ninp=32, nhead=2, nhid=64, nlayers=2, dropout=0.2):
        super().__init__()
        self.ninp = ninp
        self.encoder = nn.Embedding(ntoken, ninp)
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.transformer_encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout), nlayers,
                                                         enable_nested_tensor=False)
        self.decoder = nn.Linear(ninp, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, src):  # (T, B) -> log-probs (T, B, ntoken)
        mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(src.device)
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.transformer_encoder(src, mask)), dim=-1)


def make_transformer_lm():
    with seeded(27):
        data = progression_tokens(8, 13, 64).t().contiguous()  # (T + 1, B)
        model = TransformerModel()
    return {"model": model, "batch": (data[:-1], data[1:]),
            "loss_fn": lambda output, targets: F.nll_loss(output.view(-1, output.size(-1)), targets.reshape(-1)),
            "task": {"kind": "causal_lm", "vocab_size": 64, "batch_dim": 1, "time_dim": 0, "clip_grad_norm": 0.25}}


# --- ResNet-style conv net with BatchNorm (torchvision resnet BasicBlock) ---
class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, num_classes=4, widths=(8, 16, 32)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, inplanes = [], widths[0]
        for i, planes in enumerate(widths):
            layers.append(BasicBlock(inplanes, planes, stride=1 if i == 0 else 2))
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):  # (B, 3, H, W)
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def quadrant_images(n, channels, size, seed_labels):
    x = torch.randn(n, channels, size, size)
    half = size // 2
    for i, quadrant in enumerate(seed_labels.tolist()):
        r, c = divmod(quadrant % 4, 2)
        x[i, :, half * r:half * r + half, half * c:half * c + half] += 1.0
    return (x - x.mean()) / x.std()


def make_resnet():
    with seeded(22):
        y = torch.arange(16) % 4
        x = quadrant_images(16, 3, 16, y)
        model = ResNet()
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4},
            "optimizer": lambda params: torch.optim.SGD(params, lr=0.1 * 16 / 256, momentum=0.9, weight_decay=1e-4)}  # lr 0.1 per 256 rows


# --- U-Net (milesial/Pytorch-UNet structure) ---
class DoubleConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.double_conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x1, x2):
        return self.conv(torch.cat([x2, self.up(x1)], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=2, width=8):
        super().__init__()
        self.inc = DoubleConv(n_channels, width)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(width, 2 * width))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(2 * width, 2 * width))
        self.up1 = Up(4 * width, width)
        self.up2 = Up(2 * width, width)
        self.outc = nn.Conv2d(width, n_classes, 1)

    def forward(self, x):  # (B, C, H, W) -> per-pixel logits (B, n_classes, H, W)
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


def make_unet():
    """Segment the bright square: the mask is where it was drawn."""
    with seeded(23):
        x = torch.randn(8, 3, 16, 16) * 0.5
        mask = torch.zeros(8, 16, 16, dtype=torch.long)
        for i in range(8):
            r, c = torch.randint(0, 10, (2,)).tolist()
            mask[i, r:r + 6, c:c + 6] = 1
        x = x + mask[:, None].float()
        x = (x - x.mean()) / x.std()
        model = UNet()
    return {"model": model, "batch": (x, mask), "loss_fn": F.cross_entropy,
            "task": {"kind": "classification", "num_classes": 2},
            "optimizer": lambda params: torch.optim.RMSprop(params, lr=1e-5, weight_decay=1e-8, momentum=0.999)}  # its defaults


# --- VAE (pytorch/examples vae/main.py), samples noise in forward ---
class VAE(nn.Module):
    def __init__(self, n_in=64, hidden=32, latent=8):
        super().__init__()
        self.n_in = n_in
        self.fc1, self.fc21, self.fc22 = nn.Linear(n_in, hidden), nn.Linear(hidden, latent), nn.Linear(hidden, latent)
        self.fc3, self.fc4 = nn.Linear(latent, hidden), nn.Linear(hidden, n_in)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def forward(self, x):  # (B, n_in) in [0, 1] -> reconstruction (B, n_in), mu, logvar
        h1 = F.relu(self.fc1(x.view(-1, self.n_in)))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        z = self.reparameterize(mu, logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_loss(output, x):
    recon_x, mu, logvar = output
    bce = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.size(1)), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def make_vae():
    with seeded(24):
        x = (torch.rand(32, 64) < torch.rand(32, 1) * 0.5 + 0.1).float()  # binarised pixels, like MNIST
        model = VAE()
    return {"model": model, "batch": (x, x), "loss_fn": vae_loss, "task": {"kind": "other"},
            "optimizer": lambda params: torch.optim.Adam(params, lr=1e-3)}


# --- MNIST example (pytorch/examples mnist/main.py): log_softmax + nll_loss ---
class MnistNet(nn.Module):
    def __init__(self, size=12):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * ((size - 4) // 2) ** 2, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):  # (B, 1, H, W) -> log-probabilities (B, 10)
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(torch.flatten(F.max_pool2d(x, 2), 1))
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def make_mnist():
    with seeded(25):
        y = torch.arange(20) % 10
        x = torch.rand(20, 1, 12, 12) * 0.3
        x[torch.arange(20), 0, y + 1, 2:10] = 1.0  # the digit is the row of the stroke
        x = (x - 0.1307) / 0.3081  # the example's Normalize((0.1307,), (0.3081,))
        model = MnistNet()
    return {"model": model, "batch": (x, y), "loss_fn": F.nll_loss, "task": {"kind": "classification", "num_classes": 10},
            "optimizer": lambda params: torch.optim.Adadelta(params, lr=1.0)}


# --- ViT in timm's layout (vision_transformer.py): a (1, 1, D) cls token and a (1, N + 1, D) position table ---
class ViTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):  # (B, N + 1, D)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TimmViT(nn.Module):
    def __init__(self, img_size=16, patch=4, dim=32, depth=2, heads=2, num_classes=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():  # timm's init_weights_vit_timm
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x):  # (B, 3, H, W) -> logits (B, classes)
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def make_timm_vit():
    with seeded(26):
        y = torch.arange(16) % 4
        x = quadrant_images(16, 3, 16, y)
        model = TimmViT(num_classes=4)
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy, "task": {"kind": "classification", "num_classes": 4},
            "optimizer": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05)}


# --- DDPM (Ho et al. 2020): a small noise-prediction U-Net and its training objective ---
def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimeBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class DiffusionUNet(nn.Module):
    """A DDPM-style noise predictor: GroupNorm + SiLU residual blocks with a timestep embedding, zero-init output."""

    def __init__(self, ch=16, tdim=32):
        super().__init__()
        self.tdim = tdim
        self.tmlp = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inc = nn.Conv2d(3, ch, 3, padding=1)
        self.down = TimeBlock(ch, 2 * ch, tdim)
        self.pool = nn.AvgPool2d(2)
        self.mid = TimeBlock(2 * ch, 2 * ch, tdim)
        self.up = TimeBlock(4 * ch, ch, tdim)
        self.out = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))
        nn.init.zeros_(self.out[-1].weight)
        nn.init.zeros_(self.out[-1].bias)

    def forward(self, x, t):
        temb = self.tmlp(timestep_embedding(t, self.tdim))
        h0 = self.inc(x)
        h1 = self.down(h0, temb)
        h2 = self.mid(self.pool(h1), temb)
        h = self.up(torch.cat([F.interpolate(h2, scale_factor=2), h1], 1), temb)
        return self.out(h)


class Diffusion(nn.Module):
    """DDPM's training objective as a module (as diffusers' training scripts write the step): noise x0 at a random t,
    return the prediction and the noise it must match."""

    def __init__(self, steps=1000):
        super().__init__()
        self.net = DiffusionUNet()
        betas = torch.linspace(1e-4, 0.02, steps)
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0))

    def forward(self, x0):
        t = torch.randint(0, len(self.alphas_cumprod), (x0.shape[0],), device=x0.device)
        noise = torch.randn_like(x0)
        a = self.alphas_cumprod[t][:, None, None, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return self.net(xt, t), noise


def make_ddpm():
    """A noise-prediction objective: t and the noise are drawn in forward, so the loss is random by design."""
    with seeded(29):
        x0 = torch.rand(8, 3, 16, 16) * 2 - 1
        model = Diffusion()
    return {"model": model, "batch": (x0, None), "loss_fn": lambda output, _: F.mse_loss(output[0], output[1]),
            "task": {"kind": "regression"}, "optimizer": lambda params: torch.optim.AdamW(params, lr=2e-4)}


# --- DiT (Peebles & Xie 2023): patches, adaLN-Zero blocks conditioned on t and the class ---
def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x, c):
        s1, g1, a1, s2, g2, a2 = self.adaLN(c).chunk(6, dim=1)
        h = modulate(self.norm1(x), s1, g1)
        x = x + a1.unsqueeze(1) * self.attn(h, h, h, need_weights=False)[0]
        return x + a2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, g2))


class DiT(nn.Module):
    """DiT with adaLN-Zero: every block's modulation and the final layer start at zero (the paper's init)."""

    def __init__(self, size=8, patch=2, ch=3, d=64, depth=2, heads=4, classes=4):
        super().__init__()
        self.patch, self.ch = patch, ch
        self.x_embed = nn.Conv2d(ch, d, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, (size // patch) ** 2, d), requires_grad=False)
        self.t_mlp = nn.Sequential(nn.Linear(32, d), nn.SiLU(), nn.Linear(d, d))
        self.y_embed = nn.Embedding(classes + 1, d)
        self.blocks = nn.ModuleList([DiTBlock(d, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_adaLN = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.final = nn.Linear(d, patch * patch * ch)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.y_embed.weight, std=0.02)
        nn.init.normal_(self.t_mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_mlp[2].weight, std=0.02)
        for b in self.blocks:
            nn.init.zeros_(b.adaLN[-1].weight)
            nn.init.zeros_(b.adaLN[-1].bias)
        for m in (self.final_adaLN[-1], self.final):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)
        grid = torch.arange(size // patch).float()
        yy, xx = torch.meshgrid(grid, grid, indexing="ij")
        freqs = torch.exp(-math.log(10000) * torch.arange(d // 4) / (d // 4))
        pe = torch.cat([torch.sin(yy.flatten()[:, None] * freqs), torch.cos(yy.flatten()[:, None] * freqs),
                        torch.sin(xx.flatten()[:, None] * freqs), torch.cos(xx.flatten()[:, None] * freqs)], 1)
        self.pos.data.copy_(pe.unsqueeze(0))

    def forward(self, x, t, y):
        B, C, H, W = x.shape
        h = self.x_embed(x).flatten(2).transpose(1, 2) + self.pos
        c = self.t_mlp(timestep_embedding(t, 32)) + self.y_embed(y)
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.final_adaLN(c).chunk(2, dim=1)
        h = self.final(modulate(self.norm(h), shift, scale))  # (B, N, p*p*C)
        p, n = self.patch, H // self.patch
        return h.reshape(B, n, n, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, H, W)


class DiTDiffusion(nn.Module):
    """The class-conditional noise-prediction objective DiT trains with: t and the noise drawn in forward."""

    def __init__(self):
        super().__init__()
        self.net = DiT()
        self.register_buffer("abar", torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0))

    def forward(self, x0, y):
        t = torch.randint(0, 1000, (x0.shape[0],))
        noise = torch.randn_like(x0)
        a = self.abar[t][:, None, None, None]
        return self.net(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, y), noise


def make_dit():
    with seeded(30):
        x0, y = torch.rand(8, 3, 8, 8) * 2 - 1, torch.randint(0, 4, (8,))
        model = DiTDiffusion()
    return {"model": model, "batch": ((x0, y), None), "loss_fn": lambda output, _: F.mse_loss(output[0], output[1]),
            "task": {"kind": "regression"}, "optimizer": lambda params: torch.optim.AdamW(params, lr=1e-4, weight_decay=0)}


# --- ConvNeXt (facebookresearch/ConvNeXt): depthwise 7x7, channels-last LayerNorm, layer scale at 1e-6 ---
class ChannelsFirstLayerNorm(nn.Module):
    """LayerNorm over the channel dim of a (B, C, H, W) tensor, as ConvNeXt's stem and downsampling layers use."""

    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(channels)), nn.Parameter(torch.zeros(channels)), eps

    def forward(self, x):
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, layer_scale_init=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init * torch.ones(dim))  # the branch starts almost switched off

    def forward(self, x):  # (B, C, H, W)
        branch = self.norm(self.dwconv(x).permute(0, 2, 3, 1))  # channels last for the LayerNorm and the Linears
        branch = self.gamma * self.pwconv2(self.act(self.pwconv1(branch)))
        return x + branch.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, num_classes=4, dims=(40, 80), depths=(1, 1)):  # ConvNeXt-atto's first two stages
        super().__init__()
        self.downsample = nn.ModuleList([nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), ChannelsFirstLayerNorm(dims[0]))])
        for i in range(len(dims) - 1):
            self.downsample.append(nn.Sequential(ChannelsFirstLayerNorm(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, 2)))
        self.stages = nn.ModuleList([nn.Sequential(*[ConvNeXtBlock(d) for _ in range(n)]) for d, n in zip(dims, depths)])
        self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], num_classes)
        for m in self.modules():  # ConvNeXt's _init_weights
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x):  # (B, 3, H, W) -> logits (B, classes)
        for down, stage in zip(self.downsample, self.stages):
            x = stage(down(x))
        return self.head(self.norm(x.mean([-2, -1])))


def make_convnext():
    with seeded(28):
        y = torch.arange(16) % 4
        x = quadrant_images(16, 3, 16, y)
        model = ConvNeXt()
    return {"model": model, "batch": (x, y), "loss_fn": F.cross_entropy, "task": {"kind": "classification", "num_classes": 4},
            "optimizer": lambda params: torch.optim.AdamW(params, lr=4e-3, weight_decay=0.05)}


HEALTHY = ["make_dit", "make_ddpm", "make_convnext", "make_timm_vit", "make_nanogpt", "make_lstm_lm", "make_transformer_lm", "make_resnet", "make_unet", "make_vae", "make_mnist"]
