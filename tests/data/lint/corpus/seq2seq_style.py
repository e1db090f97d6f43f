"""A transformer translation model's training and greedy decoding, in the style of the PyTorch tutorials (our own text)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def generate_square_subsequent_mask(sz, device):
    mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)


def train_epoch(model, optimizer, train_iter, collate_fn, pad_idx, device, batch_size=128):
    model.train()
    loss_fn = nn.CrossEntropyLoss(ignore_index=pad_idx, label_smoothing=0.1)
    train_dataloader = DataLoader(train_iter, batch_size=batch_size, shuffle=True, collate_fn=collate_fn)
    losses = 0
    for src, tgt in train_dataloader:
        src, tgt = src.to(device), tgt.to(device)
        tgt_input = tgt[:-1, :]
        tgt_mask = generate_square_subsequent_mask(tgt_input.shape[0], device)
        logits = model(src, tgt_input, tgt_mask=tgt_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        losses += loss.item()
    return losses / len(train_dataloader)


@torch.no_grad()
def greedy_decode(model, src, max_len, start_symbol, end_symbol, device):
    memory = model.encode(src.to(device))
    ys = torch.full((1, 1), start_symbol, dtype=torch.long, device=device)
    for _ in range(max_len - 1):
        tgt_mask = generate_square_subsequent_mask(ys.size(0), device).bool()
        out = model.decode(ys, memory, tgt_mask)
        prob = model.generator(out[:, -1]).softmax(dim=-1)
        next_word = prob.argmax(dim=1).item()
        ys = torch.cat([ys, torch.full((1, 1), next_word, dtype=torch.long, device=device)], dim=0)
        if next_word == end_symbol:
            break
    return ys
