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
