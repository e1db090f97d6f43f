"""A Lightning-style module: the framework runs the loop, training_step returns the loss. Clean."""
import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F


class LitClassifier(L.LightningModule):
    def __init__(self, num_classes=10, lr=1e-3, dropout=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 256), nn.ReLU())
        self.head = nn.Linear(256, num_classes)
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x):
        h = self.backbone(x)
        h = F.dropout(h, p=self.hparams.dropout, training=self.training)
        return self.head(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = self.criterion(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = self.criterion(logits, y)
        preds = logits.softmax(dim=-1).argmax(dim=-1)
        self.log("val_loss", loss)
        self.log("val_acc", (preds == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class LitGAN(L.LightningModule):
    """Manual optimization: two optimizers, each zeroed, stepped and scheduled in order."""

    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt_g, opt_d = self.optimizers()
        real = batch
        z = torch.randn(real.size(0), 100, device=self.device)
        fake = self.generator(z)

        opt_d.zero_grad()
        d_real = self.discriminator(real)
        d_fake = self.discriminator(fake.detach())
        d_loss = F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real)) + \
            F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
        self.manual_backward(d_loss)
        opt_d.step()

        opt_g.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), torch.ones_like(d_fake))
        self.manual_backward(g_loss)
        opt_g.step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss})

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        return [opt_g, opt_d]
