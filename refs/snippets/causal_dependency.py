import copy

import torch


def causal_dependency(model, tokens, vocab_size):
    """Change the tokens after position t: outputs up to t must not move. Returns the positions that see the future."""
    model = copy.deepcopy(model).eval()
    leaks = []
    with torch.no_grad():
        out = model(tokens)
        for t in range(tokens.shape[1] - 1):
            changed = tokens.clone()
            changed[:, t + 1:] = (tokens[:, t + 1:] + 1) % vocab_size  # every later token becomes another one
            moved = (model(changed)[:, :t + 1] - out[:, :t + 1]).abs().max().item()
            if moved > 1e-5 * max(out.abs().max().item(), 1.0):
                leaks.append(t)
    if leaks:
        print(f"FAIL: outputs at positions {leaks} change when later tokens change: the model sees the future")
    else:
        print("ok: no output depends on a later token")
    return leaks
