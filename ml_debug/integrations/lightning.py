"""ml-debug in Lightning: monitor, spike guard and NaN watch as one Callback.

    from ml_debug.integrations.lightning import MLDebugCallback
    trainer = lightning.Trainer(callbacks=[MLDebugCallback()])

At every optimizer step, in on_before_optimizer_step (gradients not yet clipped): NanWatch checks
the loss and the gradient norm (no hook inside the model), and on a step that made NaN/inf replays
its batches through training_step with per-module hooks to name the first module (forward or
backward; self.log and self.log_dict do nothing during the replay); SpikeGuard skips the step (every
gradient set to None, on every rank alike) when the loss or the gradient norm is non-finite or an
outlier. After the step, TrainingMonitor writes the step's line to the JSONL log that
`ml-debug spikes` reads (default: <trainer.log_dir or default_root_dir>/ml_debug_log.jsonl;
appended to when the run resumes). Each tool is switchable: MLDebugCallback(monitor=False),
guard=False, nan_watch=False. Lightning's own logging is left as it is. Steps are numbered as
Lightning numbers them (trainer.global_step before the update). Automatic optimization with one
optimizer; the loss logged and guarded is the mean of what training_step returned for the step's
batches (Lightning hands backward each one divided by accumulate_grad_batches, also in an epoch's
last, shorter window; the callback multiplies that back). With fp16 ("16-mixed") the loss and the
gradient norm are read unscaled, and an inf/NaN gradient is the GradScaler's to skip while its scale is
above 1 (NanWatch and SpikeGuard are given the scaler); with a fused optimizer, which unscales in its
step(), a guard's skip sets the gradients to NaN so that the scaler skips the step (and halves its
scale). The learning-rate scheduler still advances on a skipped step.
"""
import os

from lightning.pytorch import Callback

from ml_debug import load
from ml_debug.integrations._session import Session, grad_norm

LOG_NAME = "ml_debug_log.jsonl"


def _unlogged(pl_module, batch, batch_idx):
    """training_step again on the same batch, its self.log / self.log_dict calls dropped (logged once, in the step)."""
    pl_module.log = pl_module.log_dict = lambda *args, **kwargs: None  # instance attributes over the methods
    try:
        return pl_module.training_step(batch, batch_idx)
    finally:
        del pl_module.log, pl_module.log_dict


class MLDebugCallback(Callback):
    """Monitor, spike guard and NaN watch for lightning.Trainer; see the module docstring."""

    def __init__(self, log_path=None, monitor=True, guard=True, nan_watch=True, every=1, guard_options=None,
                 nan_watch_every=1):
        self.log_path, self.every = log_path, every
        self.switches = {"monitor": monitor, "guard": guard, "nan_watch": nan_watch}
        self.guard_options, self.nan_watch_every = guard_options, nan_watch_every
        self.session, self.grad_norm, self.stepped = None, None, None

    @property
    def reports(self):
        """NanWatch's reports so far (dicts: step, module, phase, source, summary, frames)."""
        return self.session.reports if self.session is not None else []

    def on_train_start(self, trainer, pl_module):
        path = self.log_path or os.path.join(trainer.log_dir or trainer.default_root_dir, LOG_NAME)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)  # fp16 ("16-mixed"): a GradScaler
        self.session = Session(pl_module, trainer.optimizers[0], path, every=self.every, append=trainer.global_step > 0,
                               guard_options=self.guard_options, nan_watch_every=self.nan_watch_every,
                               scaler=scaler, **self.switches)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.session.micro_batches == 0:  # the first batch of an optimizer step
            self.session.begin()
        self.session.add_replay(lambda: _unlogged(pl_module, batch, batch_idx))  # for NanWatch's replay

    def on_before_backward(self, trainer, pl_module, loss):
        loss = loss.detach() * trainer.accumulate_grad_batches  # training_step's loss, before Lightning's division
        scaler = self.session.scaler
        if scaler is not None:  # and before the GradScaler multiplied it by its scale
            loss = loss / load("nan_watch").scale_of(scaler, loss.device)
        self.session.add_loss(loss)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        # the whole step's gradients, not clipped yet, and unscaled by now, unless the optimizer unscales in its step()
        scaler = self.session.scaler
        still_scaled = scaler is not None and getattr(optimizer, "_step_supports_amp_scaling", False)
        self.grad_norm = grad_norm(pl_module, scaler if still_scaled else None)
        self.stepped = trainer.global_step
        self.session.before_step(self.stepped, grad_norm=self.grad_norm, scaled=still_scaled)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.stepped is not None:  # an optimizer step ended with this batch
            self.session.after_step(self.stepped, grad_norm=self.grad_norm)
            self.stepped = self.grad_norm = None

    def on_train_end(self, trainer, pl_module):
        if self.session is not None:
            self.session.close()
