"""What both callbacks do at each optimizer step, whatever the framework: NaN watch, spike guard, monitor."""
import logging
import math

import torch

from ml_debug import load

log = logging.getLogger("ml_debug")


class Session:
    """The three tools on one model and optimizer; each one switchable (None when off)."""

    def __init__(self, model, optimizer, path, monitor=True, guard=True, nan_watch=True, every=1, append=False,
                 guard_options=None, nan_watch_every=1, scaler=None):
        self.model = model
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None  # fp16's GradScaler
        self.monitor = load("monitor").TrainingMonitor(path, model, optimizer, every=every, append=append) if monitor else None
        self.guard = load("spike_guard").SpikeGuard(model, monitor=self.monitor, scaler=self.scaler,
                                                    **(guard_options or {})) if guard else None
        self.watch = load("nan_watch").NanWatch(model, every=nan_watch_every, scaler=self.scaler) if nan_watch else None
        self.reports = []  # NanWatch reports, one per bad step found
        self.loss = self.tokens = None  # summed over the micro-batches of the step
        self.micro_batches, self.shares = 0, False
        self.replays = []  # per micro-batch of the step: a function that recomputes its loss, for NanWatch's replay
        self.skipped = self.checking = False

    def begin(self):
        """At the start of a step, before its first forward: NanWatch remembers the RNG state the step starts from."""
        self.replays = []
        if self.watch is not None:
            self.watch.begin()

    def add_replay(self, replay):
        """One micro-batch's way to recompute its loss from the same batch (forward only); see NanWatch.check."""
        self.replays.append(replay)

    def add_loss(self, loss, tokens=None, share=False):
        """One micro-batch's loss as the user's code computed it (detached, on its device: no sync).

        The step's loss is the mean of its micro-batches' losses, however many the step had (an epoch's
        last step may have fewer); share=True says each loss is already a share of the step's loss (HF's
        loss over the tokens of the whole step), and the shares add up to it.
        """
        loss = loss.detach()
        self.loss = loss if self.loss is None else self.loss + loss
        self.micro_batches += 1
        self.shares = share
        if tokens is not None:
            self.tokens = tokens if self.tokens is None else self.tokens + tokens

    def step_loss(self):
        """The step's loss from its micro-batches (see add_loss), on the device; None before any."""
        if self.loss is None:
            return None
        return self.loss if self.shares else self.loss / self.micro_batches

    def before_step(self, step, grad_norm=None, scaled=False):
        """Before optimizer.step(), gradients not yet clipped: skip the step if the guard says so, and name a NaN.

        Skipping sets every gradient to None, so the optimizer leaves every parameter and its state
        alone; the guard takes the same decision on every rank. scaled: the gradients still carry the fp16
        GradScaler's scale (a fused optimizer unscales them in its step()). Then scaler.step() must find an inf
        check to record, or scaler.update() raises: the gradients are set to NaN instead, and the scaler skips
        the step itself (and halves its scale, as on any overflow). NanWatch, too, decides on every rank
        alike and returns the same report everywhere, with the rank that made the NaN: rank 0's log
        names it, whichever rank that was. While NanWatch replays a bad step, self.checking is True.
        """
        self.skipped = False
        loss = self.step_loss()
        report = None
        if self.watch is not None:
            self.checking = True
            try:
                report = self.watch.check(step, loss, replay=self.replays or None, grad_norm=grad_norm)
            finally:
                self.checking = False
        if self.guard is not None and loss is not None:
            if self.guard.should_skip(step, loss, grad_norm=grad_norm):
                self.skipped = True
                event = self.guard.events[-1]
                log.warning("ml_debug SpikeGuard: step %s skipped (%s, value %s)", step, event["reason"], event["value"])
                nan = scaled and self.scaler is not None
                for p in self.model.parameters():
                    p.grad = p.grad.fill_(math.nan) if nan and p.grad is not None else None
        if report is not None:
            self.reports.append(report)
            log.warning("ml_debug NanWatch: rank %s: %s", report["rank"], report["summary"])
            if self.monitor is not None:  # rank 0 writes the line, whichever rank made the NaN
                self.monitor.event(step, "nan", module=report["module"], phase=report["phase"], source=report["source"],
                                   rank=report["rank"])
        return self.skipped

    def after_step(self, step, grad_norm=None):
        """After optimizer.step(): log the step (a skipped step is in the log as the guard's event)."""
        loss, tokens = self.step_loss(), self.tokens
        self.loss, self.tokens, self.micro_batches, self.replays = None, None, 0, []
        if self.monitor is not None and loss is not None and not self.skipped:
            if grad_norm is None and self.guard is not None and self.guard.grad_norm is not None:
                grad_norm = self.guard.grad_norm
            self.monitor.log(step, loss, grad_norm=grad_norm, tokens=tokens)

    def close(self):
        if self.watch is not None:
            self.watch.remove()
        if self.monitor is not None:
            self.monitor.close()


def grad_norm(model, scaler=None):
    """The global L2 norm of the model's gradients, on the device (no host sync); None without gradients.

    scaler: an fp16 GradScaler whose scale the gradients still carry (not unscaled yet): the norm is divided by it."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return None
    norm = torch.nn.utils.get_total_norm(grads)
    return norm if scaler is None else norm / load("nan_watch").scale_of(scaler, norm.device)
