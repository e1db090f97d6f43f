"""ml-debug in the Hugging Face Trainer: monitor, spike guard and NaN watch as one TrainerCallback.

    from ml_debug.integrations.hf import MLDebugCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[MLDebugCallback()])

At every optimizer step, before optimizer.step(): NanWatch checks the loss and the gradient norm
(no hook inside the model), and on a step that made NaN/inf replays its micro-batches with
per-module hooks to name the first module (forward or backward); SpikeGuard skips the step (every gradient set to None, on every
rank alike) when the loss or the pre-clip gradient norm is non-finite or an outlier. After the
step, TrainingMonitor writes the step's line to the JSONL log that `ml-debug spikes` reads
(default: <output_dir>/ml_debug_log.jsonl; appended to when the run resumes). Each tool is
switchable: MLDebugCallback(monitor=False), guard=False, nan_watch=False. The Trainer's own
logging, saving and evaluation are left as they are. Steps are numbered as the Trainer numbers them
in its own logs (state.global_step after the update).

The loss is read from the model's output (output.loss, which the Trainer's default compute_loss
also uses); a model that returns no loss leaves the monitor and the guard without input: they then
log and decide nothing, and say so once. With gradient accumulation the step's loss is the mean of
its micro-batches' losses, however many the step had (an epoch's last step may have fewer), or
their sum when the model divided each by the tokens of the whole step (num_items_in_batch); under
DDP those are every rank's tokens (average_tokens_across_devices, the default), and each rank's sum
counts world-size times before the ranks are averaged, as the Trainer does for its own log. The
gradient norm is taken at the end of each backward, before the Trainer clips; under fp16 it is
divided by the GradScaler's scale, and an inf/NaN gradient is the scaler's to skip while its scale is
above 1 (NanWatch and SpikeGuard are given the scaler). The learning-rate
scheduler still advances on a skipped step.
"""
import logging
import os

import torch
from transformers import TrainerCallback

from ml_debug.integrations._session import Session, grad_norm

log = logging.getLogger("ml_debug")
LOG_NAME = "ml_debug_log.jsonl"


class _Probe:
    """A forward hook on the model: the loss of each training forward; at the end of its backward, the grad norm."""

    def __init__(self, model, session, ranks=1):
        self.model, self.session, self.ranks = model, session, ranks
        self.grad_norm, self.warned = None, False
        self.handle = model.register_forward_hook(self.on_forward, with_kwargs=True)

    def on_forward(self, module, args, kwargs, output):
        if not module.training or not torch.is_grad_enabled() or self.session.checking:  # not NanWatch's replay
            return
        self.session.add_replay(lambda: module(*args, **kwargs))  # the same micro-batch again, for NanWatch's replay
        loss = output.get("loss") if isinstance(output, dict) else None
        if not torch.is_tensor(loss):
            if not self.warned:
                log.warning("ml_debug: the model returned no loss (output.loss): the monitor and the guard get no input")
                self.warned = True
            return
        # with num_items_in_batch the model divides by the tokens of the whole accumulated step: the shares add up;
        # without it, the step's loss is the mean over its micro-batches (the Trainer divides by the number the step had)
        # (of every rank's tokens when the Trainer averages them across ranks: this rank's share is 1/ranks of the
        # loss the guard and the monitor average over ranks, so it counts ranks times, as the Trainer's own log does)
        ids, share = kwargs.get("input_ids"), kwargs.get("num_items_in_batch") is not None
        self.session.add_loss(loss.detach() * self.ranks if share else loss, tokens=ids.numel() if torch.is_tensor(ids) else None,
                              share=share)
        if loss.requires_grad:
            loss.register_hook(self.on_loss_grad)

    def on_loss_grad(self, grad):
        torch.autograd.Variable._execution_engine.queue_callback(self.after_backward)  # runs when backward ends

    def after_backward(self):  # before the Trainer clips (and, under fp16, unscales): summed over micro-batches
        self.grad_norm = grad_norm(self.model, self.session.scaler)

    def remove(self):
        self.handle.remove()


class MLDebugCallback(TrainerCallback):
    """Monitor, spike guard and NaN watch for transformers.Trainer; see the module docstring."""

    def __init__(self, log_path=None, monitor=True, guard=True, nan_watch=True, every=1, guard_options=None,
                 nan_watch_every=1):
        self.log_path, self.every = log_path, every
        self.switches = {"monitor": monitor, "guard": guard, "nan_watch": nan_watch}
        self.guard_options, self.nan_watch_every = guard_options, nan_watch_every
        self.session = self.probe = None

    @property
    def reports(self):
        """NanWatch's reports so far (dicts: step, module, phase, source, summary, frames)."""
        return self.session.reports if self.session is not None else []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        path = self.log_path or os.path.join(args.output_dir, LOG_NAME)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.session = Session(model, optimizer, path, every=self.every, append=state.global_step > 0,
                               guard_options=self.guard_options, nan_watch_every=self.nan_watch_every,
                               scaler=getattr(optimizer, "scaler", None), **self.switches)  # accelerate's, under fp16
        ranks = args.world_size if getattr(args, "average_tokens_across_devices", False) else 1
        self.probe = _Probe(model, self.session, ranks)

    def on_step_begin(self, args, state, control, **kwargs):
        self.session.begin()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        clipped = (args.max_grad_norm or 0) > 0  # the Trainer's clip unscales the gradients first (fp16)
        self.session.before_step(state.global_step + 1, grad_norm=self.probe.grad_norm, scaled=not clipped)

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.session.after_step(state.global_step + 1, grad_norm=self.probe.grad_norm)
        self.probe.grad_norm = None

    def on_train_end(self, args, state, control, **kwargs):
        if self.session is not None:
            self.probe.remove()
            self.session.close()
