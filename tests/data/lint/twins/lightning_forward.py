# softmax-into-ce: through self.forward(x) and a loss stored as an attribute
import torch.nn as nn
import lightning as L


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(32, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss(self.forward(x), y)


class SoftmaxClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(32, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.net(x).softmax(dim=-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        probs = self.forward(x)
        return self.loss(probs, y)  # BUG: softmax-into-ce
