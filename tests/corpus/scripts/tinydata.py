"""Small synthetic data the corpus scripts import from their own folder, as real scripts import a data.py."""
import torch


def token_stream(n=4096, vocab=32, seed=0):
    """A stream of ids with structure to learn: mostly counting up by one, with random jumps."""
    g = torch.Generator().manual_seed(seed)
    steps = torch.where(torch.rand(n, generator=g) < 0.8, torch.ones(n, dtype=torch.long), torch.randint(0, vocab, (n,), generator=g))
    return steps.cumsum(0) % vocab


def features(n=512, dim=16, classes=4, seed=0):
    """Standardised features and the labels of a random linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    y = (x @ torch.randn(dim, classes, generator=g)).argmax(1)
    return x, y
