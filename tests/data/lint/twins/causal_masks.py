# causal-mask-offset: the diagonal of a causal mask
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, block_size):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)).masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v


def square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)


def sdpa(q, k, v):
    T = q.size(-2)
    blocked = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
    causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)  # BUG: causal-mask-offset
    scores = (q @ k.transpose(-2, -1)).masked_fill(blocked, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask), scores


def additive(scores):
    T = scores.size(-1)
    mask = torch.triu(torch.full((T, T), float("-inf")))  # BUG: causal-mask-offset
    return scores + mask
