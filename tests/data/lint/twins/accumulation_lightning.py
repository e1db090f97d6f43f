# gradient accumulation in Lightning: automatic (the Trainer's accumulate_grad_batches scales, steps and
# zeroes) and manual optimization with a remainder guard; and the manual one's broken twin
import lightning as L
import torch.nn.functional as F


class Classifier(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)


class ManualClassifier(L.LightningModule):
    def __init__(self, accumulate):
        super().__init__()
        self.automatic_optimization = False
        self.accumulate = accumulate

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y) / self.accumulate
        self.manual_backward(loss)
        if (batch_idx + 1) % self.accumulate == 0:
            self.clip_gradients(opt, gradient_clip_val=1.0)
            opt.step()
            opt.zero_grad()


class ManualClassifierBroken(ManualClassifier):
    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        opt.zero_grad()  # BUG: zero-grad-every-micro-batch
        self.manual_backward(F.cross_entropy(self(x), y) / self.accumulate)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()


trainer = L.Trainer(accumulate_grad_batches=8, gradient_clip_val=1.0)
trainer.fit(Classifier())
