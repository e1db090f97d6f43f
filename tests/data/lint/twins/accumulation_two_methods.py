# gradient accumulation split over two methods of a trainer that a controller calls (the RL-trainer way: one call
# per micro-batch runs forward and backward, one call after them steps), and steps guarded by a remainder:
# healthy look-alikes and their broken twins
import torch.nn.functional as F


class PolicyTrainer:
    """Healthy: forward_backward only adds into .grad; optim_step steps, then zeroes for the next step."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def forward_backward(self, micro_batch, num_micro_batches):
        x, y = micro_batch
        loss = F.cross_entropy(self.model(x), y) / num_micro_batches
        loss.backward()
        return loss.item()

    def optim_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class EagerTrainer:
    """Broken: forward_backward zeroes before each backward, so only the last micro-batch reaches the step."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def forward_backward(self, micro_batch, num_micro_batches):
        x, y = micro_batch
        loss = F.cross_entropy(self.model(x), y) / num_micro_batches
        self.optimizer.zero_grad()
        loss.backward()
        return loss.item()

    def optim_step(self):
        self.optimizer.step()


class Controller:
    def __init__(self, model, optimizer, eager):
        self.trainer = None  # built in setup, as actors are
        self.model, self.optimizer, self.eager = model, optimizer, eager

    def setup(self):
        self.trainer = PolicyTrainer(self.model, self.optimizer)
        self.eager_trainer = EagerTrainer(self.model, self.optimizer)

    def train(self, steps):
        for micro_batches in steps:
            for micro_batch in micro_batches:
                self.trainer.forward_backward(micro_batch, len(micro_batches))
            self.trainer.optim_step()

    def train_eager(self, steps):
        for micro_batches in steps:
            for micro_batch in micro_batches:
                self.eager_trainer.forward_backward(micro_batch, len(micro_batches))  # BUG: zero-grad-every-micro-batch
            self.eager_trainer.optim_step()

    def train_one_batch_per_step(self, loader):
        for batch in loader:  # no accumulation: zeroing in forward_backward is right here
            self.eager_trainer.forward_backward(batch, 1)
            self.eager_trainer.optim_step()


class Learner:
    """One class: a method per micro-batch that zeroes first, a step method, and loops that call them."""

    def __init__(self, model, optimizer, accumulation_steps):
        self.model, self.optimizer, self.k = model, optimizer, accumulation_steps

    def micro_step(self, batch):
        self.optimizer.zero_grad()
        (F.cross_entropy(self.model(batch[0]), batch[1]) / self.k).backward()

    def step(self):
        self.optimizer.step()

    def train_every_batch(self, loader):
        for batch in loader:
            self.micro_step(batch)
            self.step()

    def train_accumulating(self, loader):
        for i, batch in enumerate(loader):
            self.micro_step(batch)  # BUG: zero-grad-every-micro-batch
            if (i + 1) % self.k == 0:
                self.step()


def train_remainder(model, optimizer, loader, accumulation_steps):
    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if not (i + 1) % accumulation_steps:
            optimizer.step()
            optimizer.zero_grad()


def train_remainder_inverted(model, optimizer, loader, accumulation_steps):
    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if i % accumulation_steps:  # BUG: accumulation-step-inverted
            optimizer.step()
            optimizer.zero_grad()
