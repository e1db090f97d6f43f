"""Bugs written through aliases, module-level objects, attributes and helper functions."""
import torch
import torch.optim as optim
from torch import nn
from torch.nn import functional as fn
from torch.nn.functional import cross_entropy as ce
from torch.nn.utils import clip_grad_norm_ as clip
from torch.optim.lr_scheduler import OneCycleLR

loss_fn = nn.CrossEntropyLoss()
softmax_head = nn.Sequential(nn.Linear(128, 10), nn.Softmax(dim=1))


class ProbNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return fn.softmax(self.fc(x), dim=-1)


class Trainer:
    def __init__(self, model):
        self.model = model
        self.criterion = nn.CrossEntropyLoss()
        self.bce = nn.BCEWithLogitsLoss()
        self.opt = optim.SGD(model.parameters(), lr=0.1)
        self.sched = OneCycleLR(self.opt, max_lr=0.1, total_steps=1000)

    def step(self, x, y):
        log_probs = fn.log_softmax(self.model(x), dim=-1)
        loss = self.criterion(log_probs, y)  # BUG: softmax-into-ce
        gate = self.model(x)[:, 0].sigmoid()
        loss = loss + self.bce(gate, y.float())  # BUG: sigmoid-into-bce-logits
        return loss

    def fit(self, loader):
        for x, y in loader:
            self.sched.step()  # BUG: scheduler-before-optimizer
            self.opt.zero_grad()
            loss = self.step(x, y)
            loss.backward()
            self.opt.step()


def train(loader, optimizer):
    net = ProbNet()
    for x, y in loader:
        optimizer.zero_grad()
        loss = ce(net(x), y)  # BUG: softmax-into-ce
        loss.backward()
        optimizer.step()
        loss = loss_fn(softmax_head(x), y)  # BUG: softmax-into-ce
        probs = torch.log(fn.softmax(net.fc(x), 1))
        print(loss_fn(probs, y).item())  # BUG: softmax-into-ce


def backward_step(model, x, y):
    loss = ce(model(x), y)
    loss.backward()


def helper_loop(model, loader, opt):
    while True:
        for x, y in loader:
            backward_step(model, x, y)  # BUG: missing-zero-grad
            clip(model.parameters(), 1.0)
            opt.step()


def clip_after_step(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        ce(model(x), y).backward()
        opt.step()
        clip(model.parameters(), max_norm=1.0)  # BUG: clip-grad-order


def graphs_kept(model, loader, opt):
    history = []
    for x, y in loader:
        opt.zero_grad()
        loss = ce(model(x), y)
        loss.backward()
        opt.step()
        history.append(loss)  # BUG: loss-accumulated-with-graph
    return history


def data_attribute_cut(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        output = model(x)
        loss = loss_fn(output.data, y)  # BUG: detached-loss
        loss.backward()
        opt.step()


def numpy_round_trip(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        pred = model(x).cpu().numpy()  # BUG: detached-loss
        loss = torch.nn.functional.mse_loss(torch.from_numpy(pred), y)
        loss.backward()
        opt.step()


def forward_under_no_grad(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        with torch.no_grad():
            logits = model(x)
        loss = ce(logits, y)
        loss.backward()  # BUG: backward-under-no-grad
        opt.step()


def step_before_backward(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()  # BUG: zero-grad-before-step
        opt.step()
        ce(model(x), y).backward()


def amp_no_update(model, loader, opt):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        opt.zero_grad()
        with torch.autocast("cuda"):
            loss = ce(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        clip(model.parameters(), 1.0)
        scaler.step(opt)  # BUG: scaler-without-update


def amp_clip_first(model, loader, opt):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        opt.zero_grad()
        with torch.autocast("cuda"):
            log_probs = torch.log(fn.softmax(model(x), dim=-1))
            probs = log_probs.exp()
            loss = fn.nll_loss(log_probs, y) + 0.1 * fn.nll_loss(fn.softmax(model(x), -1), y)  # BUG: probs-into-nll
        scaler.scale(loss).backward()
        clip(model.parameters(), 1.0)  # BUG: clip-before-unscale
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        print(probs.max().item())


def per_token(model, tokens, targets):
    crit = nn.CrossEntropyLoss(reduction="none", ignore_index=-100)
    loss = crit(model(tokens).flatten(0, 1), targets.flatten())
    loss = loss * (targets.flatten() != -100)
    loss.backward()  # BUG: backward-non-scalar


def rebuilt_loss(model, x, y):
    value = ce(model(x), y).item()  # BUG: detached-loss
    loss = torch.tensor(value, requires_grad=True)
    loss.backward()


def gan_one_zeroed(model, loader):
    opt_g, opt_d = model.configure()
    for x in loader:
        d_loss, g_loss = model(x)
        opt_g.zero_grad()
        d_loss.backward(retain_graph=True)
        opt_d.step()  # BUG: missing-zero-grad
        g_loss.backward()
        opt_g.step()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Sigmoid()
        self.softmax = nn.Softmax()  # BUG: softmax-no-dim

    def forward(self, x):
        h = self.act(x)
        h.mul_(2)  # BUG: inplace-on-saved-output
        e = torch.exp(h)
        e[:, 0] = 0  # BUG: inplace-on-saved-output
        s = fn.alpha_dropout(e, 0.1)  # BUG: dropout-missing-training
        return fn.dropout2d(s)  # BUG: dropout-missing-training

    def attend(self, scores, batch, time):
        return self.softmax(scores.view(batch, time, -1))  # the 3-D input the softmax above is applied to


def clamped_output(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        out = model(x)
        out.data.clamp_(0, 1)  # BUG: data-write
        ce(out, y).backward()
        opt.step()


def weight_clipping(critic, loader, opt):
    for x in loader:
        opt.zero_grad()
        critic(x).mean().backward()
        opt.step()
        for p in critic.parameters():
            p.data = p.data.clamp(-0.01, 0.01)


def resume(path, model):
    state = torch.load(path, weights_only=False)  # BUG: torch-load-unsafe
    model.load_state_dict(state)
    model.head = nn.Linear(512, 2)
    optimizer = optim.Adam(model.parameters())
    model.classifier = nn.Linear(512, 2)  # BUG: layer-replaced-after-optimizer
    return optimizer


def head_only(loader):
    model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    model.out = nn.Identity()
    opt = optim.Adam(model.out.parameters())  # BUG: optimizer-param-subset
    for x, y in loader:
        opt.zero_grad()
        ce(model(x), y).backward()
        opt.step()


def loaders(model, dataset, opt):
    train_data, val_data = torch.utils.data.random_split(dataset, [0.9, 0.1])
    train_dl = torch.utils.data.DataLoader(train_data, 32, False)  # BUG: train-loader-no-shuffle
    for epoch in range(10):
        one_epoch(model, train_dl, opt)


def predict_all(model, loader):
    model.train(False)
    preds = []
    for x, _ in loader:
        preds.append(model(x))  # BUG: eval-without-no-grad
    return preds


def one_epoch(model, loader, opt):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        ce(model(x), y).backward()
        opt.step()


def epochs(model, loader, opt, scheduler, val_x, val_y):
    running = 0.0
    for epoch in range(10):
        scheduler.step()  # BUG: scheduler-before-optimizer
        one_epoch(model, loader, opt)
        for x, y in loader:
            opt.zero_grad()
            loss = ce(model(x), y)
            loss.backward()
            opt.step()
            running = running + loss  # BUG: loss-accumulated-with-graph
            val_total += ce(model(val_x), val_y)  # BUG: loss-accumulated-with-graph
    return running


class TwoPartNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(128, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.encoder(x).relu())

    def training_step(self, batch, batch_idx):
        x, y = batch
        return ce(self(x), y)

    def configure_optimizers(self):
        return optim.Adam(self.head.parameters())  # BUG: optimizer-param-subset


def eval_inside(model, loader, opt, val_x, val_y):
    model.train()
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        ce(model(x), y).backward()
        opt.step()
        if step % 100 == 0:
            model.eval()  # BUG: eval-mode-not-restored
            with torch.no_grad():
                print(ce(model(val_x), val_y).item())


def zeroed_before_a_guarded_step(model, loader, opt):
    for x, y in loader:
        ce(model(x), y).backward()
        opt.zero_grad()  # BUG: zero-grad-before-step
        if x.numel() > 0:
            opt.step()
