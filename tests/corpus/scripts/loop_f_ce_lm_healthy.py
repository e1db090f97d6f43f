"""A tiny causal LM whose loop computes F.cross_entropy on flattened logits, with next-token targets from the loader.

The healthy twin of loop_f_ce_lm.py: the mask allows tril(), each position and the ones before it.
"""
import torch
import torch.nn.functional as F
from torch import nn

from tinydata import token_stream

VOCAB, CONTEXT, WIDTH = 32, 16, 32


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CONTEXT, WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):  # (B, T) -> (B, T, VOCAB)
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))
        allowed = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
        h, _ = self.attn(x, x, x, attn_mask=~allowed, need_weights=False)
        x = x + h
        x = x + self.mlp(self.norm(x))
        return self.out(x)


def batches(stream, batch_size=8):
    windows = stream.unfold(0, CONTEXT + 1, CONTEXT)  # (N, CONTEXT + 1)
    for start in range(0, len(windows) - batch_size + 1, batch_size):
        chunk = windows[start:start + batch_size]
        yield chunk[:, :-1], chunk[:, 1:]  # inputs, next-token targets


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    for step, (x, y) in enumerate(batches(token_stream())):
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(step, loss.item())
