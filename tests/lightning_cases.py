"""The small Lightning classifier the callback tests train (imported by them after pytest.importorskip("lightning"))."""
import lightning
import torch


class ScaleNorm(torch.nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)  # BUG: no eps: an all-zero row divides 0 by 0


class Classifier(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), ScaleNorm(), torch.nn.Linear(16, 16),
                                           torch.nn.GELU())
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.encoder(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class Recorded(Classifier):
    """The classifier, keeping what training_step returned at each global step, trained by AdamW (fused or not)."""

    def __init__(self, fused=False):
        super().__init__()
        self.fused, self.losses = fused, {}

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.losses[self.trainer.global_step] = float(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2, fused=self.fused)


def batches_with_a_zero_row(steps, bad):
    """steps batches of 8 rows; the first row of batch `bad` all zeros (ScaleNorm divides 0 by 0 there)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(steps * 8, 8, generator=g), torch.randint(0, 3, (steps * 8,), generator=g)
    x[bad * 8] = 0.0
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
