"""capture: run your own training script (or function) to its first optimizer step and hand the doctor what it was doing.

Symptom
    You have a training script, not a case file, and writing one by hand (model, batch, loss
    function, optimizer) takes minutes per model. Or you are in a notebook with a training
    function and want the doctor to look at exactly what it trains.

What it checks
    Nothing by itself: it captures the case the doctor checks. It runs the script as
    `python train.py ARGS` would (as __main__, with sys.argv set, its folder first on sys.path,
    in your working directory) and watches:

      the model     the outermost nn.Module whose call produced the tensor that reached
                    backward() (DDP, DataParallel and torch.compile wrappers unwrapped);
      the batch     the inputs of that call, and the targets of the loss call (or the model's
                    argument named labels / targets when the model returns its loss);
      the loss      how to recompute it from the model's output: the loss the model returns
                    (nanoGPT `logits, loss = model(x, y)`, Hugging Face models given labels),
                    or the torch.nn loss module / F.* loss function the script calls on the
                    output: as is, flattened to (-1, classes), after the next-token shift
                    [:, :-1] (targets then aligned with the output, the last position
                    ignored), or after log_softmax; a cross-entropy or NLL loss on some rows
                    only (node classification's `output[idx_train]`, token classification's
                    `logits.view(-1, V)[active]`) is replayed on every row, the rows it did
                    not read given the loss's ignore_index: the same loss;
                    the batch's targets are copied when backward() runs (a loop may refill
                    its label tensor in place before it steps, as DCGAN's does);
      the optimizer its class and every param group's settings, rebuilt on demand, with
                    the lr each group was built with (a warmup's value at step 0 is not
                    what the run trains at);
      the task      causal_lm when the targets are the inputs shifted by one (or the inputs
                    themselves, for models that shift inside), else what the loss implies;
                    target_inputs names the model's argument that is the loss's target
                    (nanoGPT's `model(x, y)`: position 1), which no check judges as an input;
                    graph when an input is an adjacency or edge list over the rows (a graph's
                    nodes: batch_independence skips, no check cuts the nodes apart).

    It stops the script when its first optimizer.step() begins, before the weights change (a
    closure given to step(), as Lightning and LBFGS do, runs first: it holds the forward pass).
    While it runs, torch.save writes nothing and torch.compile is skipped (the checks run
    eager). Under `doctor --script` the script runs in a supervised child whose every write goes
    to a scratch folder, removed afterwards, or is refused (ml_debug_contract.WriteGuard): there
    torch.save writes into that folder, and the script reads back what it wrote. Everything it patched is restored afterwards, also when the script raises.
    What it cannot capture is one line saying what, and how to write the case file instead:
    a loss written by hand (no torch.nn loss or F.* call), a loss input it cannot trace back
    to the model's output, a script that exits, raises or does not step within 300 s. When the
    script loaded gym (a reinforcement-learning loop, whose policy-gradient loss has no batch to
    replay), the line names diagnostics/rl_probes.py, which checks such an agent instead.

Command
    python diagnostics/doctor.py --script train.py -- --batch_size 8    # capture, then every check
    python diagnostics/capture.py train.py -- --batch_size 8            # only show the capture
    python diagnostics/capture.py                                       # an embedded demo loop
    # in a notebook (torch + this file):
    #   case = capture_case(train, model, loader)    # train() stops at its first step
    #   with capturing() as captured: train(model, loader)
    #   doctor.run_checks(captured.case)

Output
    $ python diagnostics/capture.py
    captured the embedded demo loop at its first optimizer step: model TinyClassifier(float32[32, 12]), targets int64[32], loss F.cross_entropy(output, targets), optimizer SGD lr 0.1, task classification
    (exit code 0)

How to read it
    The line says which module was taken for the model and how it was called, what the targets
    are, the loss as the doctor will recompute it (`output` is the model's return value), the
    optimizer settings at the first step and the task inferred. If it picked the wrong module
    or loss, write a case file (DESIGN.md "A case"): the line tells you its parts. The script's
    own prints show as usual; in the doctor's --json mode they go to stderr.

Next step
    python diagnostics/doctor.py --script train.py -- ARGS runs every check on this capture.
    Checks run in float32 on the captured batch even when the script used autocast.
"""
import argparse
import collections
import contextlib
import inspect
import math
import os
import runpy
import signal
import sys
import threading

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ml_debug_contract import ArgumentParser, map_tensors, run_command, single_line

TIME_LIMIT = 300.0  # seconds a script gets to reach its first step; our assumption: a small-model script steps within a minute
KEPT_CALLS = 8  # model and loss calls remembered between two backward() calls (a validation pass without no_grad)
LOSS_FUNCTIONS = ("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
                  "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "poisson_nll_loss", "gaussian_nll_loss",
                  "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss", "multilabel_margin_loss")
KINDS = {"cross_entropy": "classification", "nll_loss": "classification", "binary_cross_entropy": "classification",
         "binary_cross_entropy_with_logits": "classification", "mse_loss": "regression", "l1_loss": "regression",
         "smooth_l1_loss": "regression", "huber_loss": "regression"}
MODULE_NAMES = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "BCELoss": "binary_cross_entropy",
                "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "MSELoss": "mse_loss", "L1Loss": "l1_loss",
                "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss"}
SYMMETRIC = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")  # loss(a, b) == loss(b, a): a script may write
# F.mse_loss(x, model(x)) (Lightning's autoencoder example), the output in the target's slot
TARGET_NAMES = ("labels", "targets", "target", "label", "y")  # a model argument that holds the targets
GRADS_FIT = 1e-3  # relative residual under which .grad at the second step is "first + fresh" (or "fresh alone"): float64
# sums of float32 gradients agree to ~1e-6; the other hypothesis misses by the whole first gradient (our assumption)
HOW_TO_CASE = "write a case file instead (DESIGN.md, \"A case\")"
RL_HINT = ("; the script loaded gym: a reinforcement-learning loss (a policy gradient, a value target from a rollout) "
           "has no batch to replay, and diagnostics/rl_probes.py checks such an agent on probe environments instead")


class CaptureError(Exception):
    """Nothing usable was captured; the message is one line saying what and what to do instead."""


class _Stop(BaseException):
    """Raised when the first optimizer step begins: a BaseException, so the script's `except Exception` lets it through."""


class _TimeUp(BaseException):
    """The time limit ran out before the first optimizer step."""


def _tensors(obj, path=()):
    """(path, tensor) for every tensor in a tensor / tuple / list / dict (ModelOutput included)."""
    if torch.is_tensor(obj):
        yield path, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, path + (key,))
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            yield from _tensors(value, path + (i,))


def _pick(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def _copy(obj, memo):
    """A detached copy of every tensor in obj (structure kept); a tensor seen twice is copied once."""
    def copied(tensor):
        if id(tensor) not in memo:
            memo[id(tensor)] = tensor.detach().clone()
        return memo[id(tensor)]
    return map_tensors(obj, copied)


def _mode_dependent(module):
    """Whether a module computes differently in train and eval mode: dropout with p > 0, batch statistics."""
    return (isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0
            or isinstance(module, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.instancenorm._InstanceNorm))
            and module.track_running_stats)


def _context(module):
    """What a model call ran under: the autocast dtype, and the modes of the modules whose output depends on them."""
    dependent = [(name, m.training) for name, m in _unwrap(module).named_modules() if _mode_dependent(m)]
    return {"autocast": next((torch.get_autocast_dtype(d) for d in ("cuda", "cpu") if torch.is_autocast_enabled(d)), None),
            "training": _unwrap(module).training, "mode_dependent": len(dependent),
            "in_eval": [name for name, training in dependent if not training]}


def _shape(obj):
    """int64[4, 16] for a tensor; the shapes of the tensors in a structure, comma-separated."""
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for _, t in _tensors(obj)) or type(obj).__name__


def _path_text(path):
    return "output" + "".join(f"[{key!r}]" for key in path)


def _unwrap(model):
    """The module itself under DDP / DataParallel / torch.compile wrappers."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers) or isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
        model = model.module if isinstance(model, wrappers) else model._orig_mod
    return model


def _ancestors(tensor):
    """Every autograd node `tensor` was computed through."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return seen


def _other_terms(loss, call_output):
    """How many terms the backward()'d `loss` adds beyond the loss call's output (scaling it by a constant adds none).

    The nodes of the loss's graph that are not in the call's own graph form the arithmetic on top of the call: those
    through which the call is reached are the path (a division by the accumulation steps, say); every other branch
    hanging off that path is a term the replayed loss_fn does not compute (a KL term or a penalty written by hand).
    """
    if loss is call_output or call_output.grad_fn is None:
        return 0
    above = _ancestors(loss) - _ancestors(call_output)
    parents = collections.defaultdict(list)  # within the arithmetic on top of the call: child -> the nodes that use it
    for node in above:
        for child, _ in node.next_functions:
            parents[child].append(node)
    path, todo = set(), [call_output.grad_fn]
    while todo:  # up from the call: every node through which the loss reaches it
        for parent in parents[todo.pop()]:
            if parent not in path:
                path.add(parent)
                todo.append(parent)
    return sum(1 for node in path for child, _ in node.next_functions
               if child is not None and child is not call_output.grad_fn and child not in path)


def _recipes(out, pred, shift):
    """The ways a loss input `pred` is commonly made from a model output tensor `out`.

    Yields (prefix, suffix, shifted, function): log_softmax or not, the next-token shift `[:, :-1]` or not (only when
    `shift`: a loss with an ignore_index), flattened to (-1, classes) or not.
    """
    rest = tuple(pred.shape[1:])
    flat = (f".reshape(-1{''.join(f', {n}' for n in rest)})", lambda t: t.reshape(-1, *rest))
    cuts = [("", False, lambda t: t)] + ([("[:, :-1]", True, lambda t: t[:, :-1])] if shift and out.dim() >= 3 else [])
    for prefix, first in (("", lambda t: t), ("log_softmax", lambda t: torch.log_softmax(t, -1))):
        for cut, shifted, sliced in cuts:
            kept = sliced(out)
            shapes = ([] if shifted else [("", lambda t: t)]) \
                + ([flat] if kept.numel() == pred.numel() and kept.shape != pred.shape else [])  # a shift is then flattened
            for suffix, then in shapes:
                yield prefix, cut + suffix, shifted, (lambda t, first=first, sliced=sliced, then=then: then(sliced(first(t))))


def _saved_dim(fn, ndim):
    """The dim a backward node saved, counted from 0: torch hands a negative dim back as an unsigned 64-bit number
    (log_softmax's dim=-1 reads 2 ** 64 - 1)."""
    dim = fn._saved_dim
    return (dim - 2 ** 64 if dim >= 2 ** 63 else dim) % ndim


def _selected_rows(pred):
    """The rows of `pred = whole[rows]` (a mask or an index list on dim 0: node classification's
    `output[idx_train]`, token classification's `logits.view(-1, V)[active]`) as unique indices, or None."""
    fn = pred.grad_fn
    if type(fn).__name__ == "LogSoftmaxBackward0" and _saved_dim(fn, pred.dim()) == pred.dim() - 1:
        fn = fn.next_functions[0][0]  # log_softmax over each row: the same rows selected before or after it
    if type(fn).__name__ == "IndexSelectBackward0" and _saved_dim(fn, pred.dim()) == 0:
        rows = fn._saved_index
    elif type(fn).__name__ == "IndexBackward0" and len(fn._saved_indices) >= 1 \
            and all(index is None for index in fn._saved_indices[1:]) and torch.is_tensor(fn._saved_indices[0]):
        rows = fn._saved_indices[0]
        rows = rows.nonzero().flatten() if rows.dtype == torch.bool else rows
    else:
        return None
    rows = rows.flatten().long()
    return rows if rows.dim() == 1 and rows.unique().numel() == rows.numel() else None  # a row twice weighs twice


def _selection_recipes(out, pred):
    """Yields (prefix, suffix, function): the tensor `out` becomes before its rows are selected, as in _recipes."""
    rest = tuple(pred.shape[1:])
    for prefix, first in (("", lambda t: t), ("log_softmax", lambda t: torch.log_softmax(t, -1))):
        yield prefix, "", first
        if out.dim() > pred.dim() and out.numel() % max(1, math.prod(rest)) == 0:
            yield (prefix, f".reshape(-1{''.join(f', {n}' for n in rest)})",
                   lambda t, first=first: first(t).reshape(-1, *rest))


def _matches(candidate, pred):
    return candidate.shape == pred.shape and torch.allclose(candidate.detach().float(), pred.detach().float(),
                                                            rtol=1e-4, atol=1e-5, equal_nan=True)


class Capture:
    """What `capturing()` saw; `.case` is the doctor case (set when the script reached its first step)."""

    def __init__(self, source):
        self.source = source
        self.case = None
        self.error = None  # one line: why nothing usable was captured
        self.skipped_saves = []
        self.built_lrs = {}  # id(optimizer) -> each group's lr when the optimizer was built
        self._model_calls = collections.deque(maxlen=KEPT_CALLS)  # (module, args, kwargs, output, context: _context())
        self._loss_calls = collections.deque(maxlen=KEPT_CALLS)  # (name, function, args, kwargs, output)
        self._inner_loss_calls = collections.deque(maxlen=KEPT_CALLS)  # the same, made inside a model (its own loss)
        self._found = None  # what the first backward() was traced to
        self.backwards = 0  # backward() calls seen: a script that never steps may update its weights by hand
        self._watch = None  # between the first and second step (second_step): what _second_step() compares
        self._local = threading.local()  # module-call depth, per thread

    def _watch_first_step(self, optimizer):
        """Let the first step run: keep the weights to put back, its gradients, and a sum of the fresh ones after it.

        The sum restarts when a gradient arrives at a .grad found cleared (None or zeros), so it holds what .grad
        would hold if the loop clears it: the fresh gradients since the last clearing.
        """
        model = self.case["model"]
        params = [p for p in model.parameters() if p.grad is not None and not p.grad.is_sparse]
        fresh = [torch.zeros_like(p.grad, dtype=torch.float64) for p in params]

        def adder(p, total):
            def add(grad):  # before the gradient is added to .grad; returns None: it flows on unchanged
                if p.grad is None or not p.grad.any():  # cleared since: the sum starts again (a GAN clears mid-way)
                    total.zero_()
                total.add_(grad.detach().to(total.dtype))
            return add

        hooks = [p.register_hook(adder(p, total)) for p, total in zip(params, fresh)]
        self._watch = {"optimizer": optimizer, "params": params, "fresh": fresh, "hooks": hooks,
                       "first": [p.grad.detach().to(torch.float64).clone() for p in params],
                       "weights": [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]}

    def _second_step(self):
        """At the same optimizer's second step: were the gradients cleared after the first one?

        If the loop never clears them, .grad is (first + every fresh gradient since), up to one scale (clipping or a
        GradScaler's unscale multiply it); if it clears them, .grad is the fresh gradients alone, up to a scale.
        Each hypothesis gets the relative residual of its least-squares fit over all parameters at once.
        """
        watch = self._watch
        now = torch.cat([(p.grad.detach().to(torch.float64) if p.grad is not None else torch.zeros_like(first)).flatten()
                         for p, first in zip(watch["params"], watch["first"])]) if watch["params"] else None
        if now is None or not now.norm() > 0:
            return None, None
        fresh = torch.cat([total.flatten() for total in watch["fresh"]])
        kept = fresh + torch.cat([first.flatten() for first in watch["first"]])

        def residual(model):  # ||now - c * model|| / ||now|| for the best c
            scale = (now @ model) / (model @ model) if model @ model > 0 else 0.0
            return float((now - scale * model).norm() / now.norm())

        return residual(kept), residual(fresh)

    def _end_watch(self, residuals=None):
        """Put the weights of the first step back and remove the hooks; record what the second step showed."""
        watch, self._watch = self._watch, None
        for hook in watch["hooks"]:
            hook.remove()
        with torch.no_grad():
            for tensor, value in watch["weights"]:
                tensor.copy_(value)
        for p in self.case["model"].parameters():
            p.grad = None
        kept, fresh = residuals if residuals is not None else (None, None)
        stale = kept is not None and kept < GRADS_FIT and fresh > 10 * GRADS_FIT
        cleared = fresh is not None and fresh < GRADS_FIT
        self.case["loop"]["grads"] = "kept" if stale else "cleared" if cleared else None
        self.case["loop"]["grads_residuals"] = None if kept is None else {"kept": kept, "cleared": fresh}

    def no_step(self):
        """Why a run that never called optimizer.step() may have learned all the same, for the one-line error."""
        if not self.backwards:
            return " (and no backward())"
        return (f" ({self.backwards} backward() calls and no torch.optim optimizer.step(): the weights updated by hand, "
                "as `p.data.add_(p.grad, alpha=-lr)`, cannot be captured)")

    # --- what the patched functions report ---------------------------------------------------
    def _depth(self):
        return getattr(self._local, "depth", 0)

    def _on_call(self, module, args, kwargs, output):
        if not torch.is_grad_enabled():
            return
        if isinstance(module, torch.nn.modules.loss._Loss) or next(module.parameters(), None) is None:
            self._loss_calls.append((MODULE_NAMES.get(type(module).__name__, type(module).__name__), module, args, kwargs,
                                     output))
        else:
            self._model_calls.append((module, args, kwargs, output, _context(module)))

    def _on_backward(self, tensors):
        self.backwards += 1
        if self._found is not None and not isinstance(self._found, str):
            return
        loss = tensors if torch.is_tensor(tensors) else next((t for t in tensors if torch.is_tensor(t)), None)
        try:
            self._found = self._trace(loss)
        except Exception as exc:  # a capture bug must not break the user's script: it becomes the one-line reason
            self._found = f"the capture could not trace the loss ({type(exc).__name__}: {exc}); {HOW_TO_CASE}"
        self._model_calls.clear()
        self._loss_calls.clear()
        self._inner_loss_calls.clear()

    # --- from the backward()'d tensor to model, batch and loss -------------------------------------
    def _trace(self, loss):
        if loss is None or loss.grad_fn is None:
            return f"backward() ran on a tensor with no graph; {HOW_TO_CASE}"
        above = _ancestors(loss)

        def feeds(t):
            return t is loss or (t.grad_fn is not None and t.grad_fn in above)

        losses = [call for call in self._loss_calls if torch.is_tensor(call[4]) and call[4].dim() == 0 and feeds(call[4])]
        if len(losses) > 1:
            return (f"the loss adds {len(losses)} loss calls ({', '.join(c[0] for c in losses)}): the doctor takes one "
                    f"loss_fn; {HOW_TO_CASE}")
        if losses:
            found = self._trace_loss_call(losses[0], feeds)
            if isinstance(found, dict):
                found["other_terms"] = _other_terms(loss, losses[0][4])
            return found
        for module, args, kwargs, output, context in reversed(self._model_calls):
            scalars = [(path, t) for path, t in _tensors(output) if t.dim() == 0 and t.is_floating_point() and feeds(t)]
            if scalars:
                path, _ = next((s for s in scalars if s[0][-1:] == ("loss",)), scalars[0])
                found = self._found_model(module, args, kwargs, output, context, path=path)
                inner = [call for call in self._inner_loss_calls if torch.is_tensor(call[4]) and feeds(call[4])]
                if isinstance(found, dict) and len(inner) == 1 and inner[0][0] in ("cross_entropy", "nll_loss"):
                    name, function, _, inner_kwargs, _ = inner[0]  # nanoGPT, makemore: F.cross_entropy(..., ignore_index=-1)
                    found["inner_loss"] = (name, inner_kwargs.get("ignore_index", getattr(function, "ignore_index", -100)))
                return found
        return ("no torch.nn loss or F.* loss call and no loss returned by a model reached backward(): a loss written by "
                f"hand cannot be replayed; {HOW_TO_CASE}")

    def _trace_loss_call(self, call, feeds):
        name, function, args, kwargs, _ = call
        kwargs = dict(kwargs)
        pred = args[0] if args else kwargs.pop("input", None)
        target = args[1] if len(args) > 1 else kwargs.pop("target", None)
        extra = args[2:]
        if name in SYMMETRIC and torch.is_tensor(target) and feeds(target) and not (torch.is_tensor(pred) and feeds(pred)):
            pred, target = target, pred  # the model's output came second: the same loss either way round
        ignore_index = (kwargs.get("ignore_index", getattr(function, "ignore_index", -100))
                        if name in ("cross_entropy", "nll_loss") else None)
        if not torch.is_tensor(pred):
            return f"the loss call {name} got no tensor input; {HOW_TO_CASE}"
        rows = _selected_rows(pred) if ignore_index is not None and torch.is_tensor(target) \
            and not target.is_floating_point() and target.dim() >= 1 else None
        for module, margs, mkwargs, output, context in reversed(self._model_calls):
            for path, out in _tensors(output):
                if not feeds(out):
                    continue
                for prefix, suffix, shifted, recipe in _recipes(out, pred, shift=ignore_index is not None):
                    with torch.no_grad():
                        if not _matches(recipe(out.detach()), pred):
                            continue
                    return self._found_model(module, margs, mkwargs, output, context, path=path, loss=(
                        name, function, extra, kwargs, target, recipe, prefix, suffix, out, pred, shifted, ignore_index))
                for prefix, suffix, recipe in _selection_recipes(out, pred) if rows is not None else ():
                    with torch.no_grad():
                        whole = recipe(out.detach())
                        if rows.numel() != target.shape[0] or not len(whole) > int(rows.max()) \
                                or not _matches(whole[rows], pred):
                            continue
                    # The loss reads some rows: the rest get the loss's ignore_index, so the replay on the whole
                    # output is the same loss (the mean over the rows not ignored) and rows slice like the batch's.
                    targets = torch.full((len(whole), *target.shape[1:]), ignore_index, dtype=target.dtype)
                    targets[rows] = target.detach().cpu()
                    found = self._found_model(module, margs, mkwargs, output, context, path=path, loss=(
                        name, function, extra, kwargs, targets.to(target.device), recipe, prefix, suffix, out, whole,
                        False, ignore_index))
                    if isinstance(found, dict):
                        found["selected"] = (rows.numel(), len(whole))
                    return found
        return (f"the input of {name} is not the model's output as is, flattened, shifted by one position or "
                f"log_softmax'ed (another slice made outside the model?); {HOW_TO_CASE}")

    def _found_model(self, module, args, kwargs, output, context, path, loss=None):
        memo = {}
        named = self._named_inputs(module, args, kwargs)
        if any(t.requires_grad and t.grad_fn is not None for _, t in _tensors((args, kwargs))):
            return (f"the input of {type(module).__name__} was computed with gradients outside it (by another module?): "
                    f"wrap the modules in one nn.Module, or {HOW_TO_CASE}")
        if kwargs and named is None:
            return f"cannot bind the arguments of {type(module).__name__}.forward by name; {HOW_TO_CASE}"
        inputs = _copy(named if kwargs else args[0] if len(args) == 1 and torch.is_tensor(args[0]) else tuple(args), memo)
        if loss is not None:  # copied now: DCGAN's loop refills its label tensor in place (fill_) before the step
            _copy(loss[4], memo)
        return {"module": module, "inputs": inputs, "named": _copy(named or {}, memo), "output": output,
                "autocast": context["autocast"], "context": context, "path": path, "loss": loss, "memo": memo}

    @staticmethod
    def _named_inputs(module, args, kwargs):
        """The call's arguments by parameter name (keyword catch-alls spread out), or None when they cannot be bound."""
        try:
            bound = inspect.signature(module.forward).bind(*args, **kwargs)
        except (TypeError, ValueError):
            return None
        named = {}
        for name, value in bound.arguments.items():
            kind = bound.signature.parameters[name].kind
            if kind == inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            elif kind == inspect.Parameter.VAR_POSITIONAL:
                if value:
                    return None
            else:
                named[name] = value
        return named

    # --- the case ------------------------------------------------------------------------------------
    def _finish(self, optimizer, keep_grads=False):
        found = self._found
        if found is None:
            self.error = f"{self.source} reached optimizer.step() before any backward(); {HOW_TO_CASE}"
            return
        if isinstance(found, str):
            self.error = found
            return
        model = _unwrap(found["module"])
        for p in model.parameters() if not keep_grads else ():
            p.grad = None  # the script's own backward filled them; the checks start from a clean model (or the watch does)
        output, path = found["output"], found["path"]
        if found["loss"] is None:  # the model returns its loss
            target_name = next((name for name in TARGET_NAMES if torch.is_tensor(found["named"].get(name))), None)
            targets = found["named"][target_name] if target_name else None
            loss_text = f"{_path_text(path)} (the model's own loss)"

            def loss_fn(out, targets, path=path):
                return _pick(out, path)

            prediction = next((t for p, t in _tensors(output) if p != path and t.dim() >= 2), None)
            inner = found.get("inner_loss")  # the model's own loss made by one cross_entropy / nll_loss call inside it
            kind, ignore_index = (KINDS[inner[0]], inner[1]) if inner else (None, None)
        else:
            name, function, extra, kwargs, target, recipe, prefix, suffix, prediction, pred, shifted, ignore_index = found["loss"]
            given = found["memo"].get(id(target))  # the loss's target tensor, when the model was given it too
            target_name = next((key for key in TARGET_NAMES if given is not None and found["named"].get(key) is given), None)
            targets, unflatten = self._targets(target, prediction[:, :-1] if shifted else prediction, pred, found["memo"])
            if shifted:  # targets aligned with the output positions: the last one predicts nothing (ignore_index)
                targets = torch.cat([targets, torch.full_like(targets[:, :1], ignore_index)], dim=1)
                unflatten = (f"[:, :-1]{unflatten[0]}", lambda t, then=unflatten[1]: then(t[:, :-1]))
            shown = f"{prefix}({_path_text(path)})" if prefix else _path_text(path)
            loss_text = (f"{type(function).__name__ if isinstance(function, torch.nn.Module) else 'F.' + name}"
                         f"({shown}{suffix}, targets{unflatten[0]})")

            def loss_fn(out, targets, path=path, recipe=recipe, unflatten=unflatten[1], function=function):
                return function(recipe(_pick(out, path)), unflatten(targets), *extra, **kwargs)

            kind = KINDS.get(name)
        task = self._task(kind, ignore_index, found["inputs"], targets, prediction)
        target_inputs = self._target_inputs(found["inputs"], found["named"], target_name)
        if target_inputs:
            task["target_inputs"] = target_inputs  # model(x, y): y is the loss's target, not an input the output reads
        context = found["context"]
        self.case = {"model": model, "batch": (found["inputs"], targets), "loss_fn": loss_fn,
                     "optimizer": _optimizer_factory(optimizer, self.built_lrs), "task": task,
                     "loop": {"training": context["training"], "mode_dependent": context["mode_dependent"],
                              "in_eval": context["in_eval"], "grads": None}}
        inputs = found["inputs"]
        call = _shape(inputs) if not isinstance(inputs, dict) else ", ".join(f"{k}={_shape(v)}" for k, v in inputs.items())
        parts = [f"model {type(model).__name__}({call})",
                 f"targets {_shape(targets)}" if targets is not None else "no targets", f"loss {loss_text}",
                 f"optimizer {_optimizer_text(optimizer, self.built_lrs)}",
                 f"task {task.get('kind', 'inferred by each check')}"
                 + (" (time-major: batch_dim 1, time_dim 0)" if task.get("batch_dim") == 1 else "")]
        if found["autocast"] is not None:
            parts.append(f"the script ran the model under autocast {str(found['autocast']).removeprefix('torch.')} "
                         "(the checks run in float32)")
        if found.get("selected"):
            parts.append(f"the loss reads {found['selected'][0]} of the output's {found['selected'][1]} rows (a mask "
                         f"or index list): the other rows' targets are its ignore_index {found['loss'][-1]}")
        if found.get("other_terms"):
            parts.append(f"the loss that reached backward() adds {found['other_terms']} term(s) besides "
                         f"{found['loss'][0]} (written by hand, e.g. a KL term or a penalty): the checks judge "
                         f"{found['loss'][0]} alone")
        if self.skipped_saves:
            parts.append(f"skipped torch.save to {', '.join(self.skipped_saves)}")
        self.case["captured"] = f"{self.source} at its first optimizer step: " + ", ".join(parts)
        found.clear()  # the script's graph and outputs: not kept alive by the capture

    @staticmethod
    def _targets(target, out, pred, memo):
        """The targets batch-first, and how the loss call flattened them: (targets, (text, function)).

        When the loss input merged the output's k leading dims (B, T, V) -> (B*T, V), targets of B*T rows are
        viewed back as (B, T): the shape the checks compare with the output, and what slicing rows of the batch needs.
        """
        if not torch.is_tensor(target):
            return target, ("", lambda t: t)
        target = _copy(target, memo)
        k = out.dim() - pred.dim() + 1
        if out.shape != pred.shape and k >= 2 and target.dim() >= 1 and target.shape[0] == out.shape[:k].numel():
            rest = tuple(target.shape[1:])
            text = f".reshape(-1{''.join(f', {n}' for n in rest)})"
            return target.reshape(*out.shape[:k], *rest), (text, lambda t: t.reshape(-1, *rest))
        return target, ("", lambda t: t)

    @staticmethod
    def _target_inputs(inputs, named, target_name):
        """Where the model call's target argument sits in the case's inputs: [name] for a dict, [position] for a tuple."""
        if target_name is None:
            return []
        if isinstance(inputs, dict):
            return [target_name] if target_name in inputs else []
        position = list(named).index(target_name)
        return [position] if isinstance(inputs, tuple) and position < len(inputs) else []

    @staticmethod
    def _task(kind, ignore_index, inputs, targets, prediction):
        """Task hints: causal_lm when the targets are the inputs shifted by one (or the inputs themselves).

        Shifted along dim 0 instead of dim 1, the tokens run down the first dim: a time-major (T, B) model, as an
        nn.LSTM without batch_first is fed; the hints then say so (batch_dim 1, time_dim 0).
        """
        task = {} if kind is None else {"kind": kind}
        if ignore_index is not None:
            task["ignore_index"] = ignore_index
        ids = next((t for _, t in _tensors(inputs) if t.dim() == 2 and not t.is_floating_point() and t.dtype != torch.bool),
                   None)
        if kind in (None, "classification") and ids is not None and torch.is_tensor(targets) and torch.is_tensor(prediction) \
                and targets.shape == ids.shape and prediction.dim() == 3 and prediction.shape[:2] == ids.shape:
            kept = targets != task.get("ignore_index", -100)

            def shifted(time_dim):  # targets[t] == ids[t + 1] wherever the target is kept, along time_dim
                a, b = targets.movedim(time_dim, 1), ids.movedim(time_dim, 1)
                keep = kept.movedim(time_dim, 1)[:, :-1]
                return bool(((a[:, :-1] == b[:, 1:]) | ~keep).all()) and bool(keep.any())

            same = bool(((targets == ids) | ~kept).all()) and bool(kept.any())
            if shifted(1) or same:
                task.update(kind="causal_lm", vocab_size=prediction.shape[-1])
            elif shifted(0):
                task.update(kind="causal_lm", vocab_size=prediction.shape[-1], batch_dim=1, time_dim=0)
        return task


def _built_lrs(optimizer, built):
    """Each group's lr as the optimizer was built (what a warmup ramps toward), else a torch scheduler's initial_lr."""
    lrs = built.get(id(optimizer))
    if lrs is None or len(lrs) != len(optimizer.param_groups):
        lrs = [group.get("initial_lr", group["lr"]) for group in optimizer.param_groups]
    return lrs


def _optimizer_factory(optimizer, built):
    """params -> a new optimizer of the same class, each parameter in the group it had, with that group's settings."""
    cls = type(optimizer)
    settings = [dict({key: value for key, value in group.items() if key != "params"}, lr=lr)
                for group, lr in zip(optimizer.param_groups, _built_lrs(optimizer, built))]
    where = {id(p): i for i, group in enumerate(optimizer.param_groups) for p in group["params"]}
    defaults = dict(optimizer.defaults)

    def make(params):
        accepted = inspect.signature(cls.__init__).parameters
        params = list(params)
        groups = [[] for _ in settings]
        for p in params:
            if id(p) in where:  # a parameter the script left out of its optimizer stays out
                groups[where[id(p)]].append(p)
        if not any(groups):  # parameters of a copy of the model: the first group's settings for all
            groups[0] = params
        return cls([dict(setting, params=group) for setting, group in zip(settings, groups) if group],
                   **{key: value for key, value in defaults.items() if key in accepted})
    return make


def _optimizer_text(optimizer, built):
    def lrs(values):
        return " / ".join(f"{lr:.3g}" for lr in sorted({float(v) for v in values}))
    text = f"{type(optimizer).__name__} lr {lrs(_built_lrs(optimizer, built))}"
    now = lrs(group["lr"] for group in optimizer.param_groups)
    if now != lrs(_built_lrs(optimizer, built)):
        text += f" as built ({now} at the first step: a warmup?)"
    return text + (f", {len(optimizer.param_groups)} param groups" if len(optimizer.param_groups) > 1 else "")


def _where(exc, path=None):
    """file:line of the innermost frame in `path` (else the innermost frame) of an exception's traceback."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    frames = [f for f in frames if os.path.abspath(f.tb_frame.f_code.co_filename) != os.path.abspath(__file__)] or frames
    mine = [f for f in frames if path and os.path.abspath(f.tb_frame.f_code.co_filename) == os.path.abspath(path)]
    frame = (mine or frames)[-1]
    return f"{os.path.basename(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno}"


@contextlib.contextmanager
def capturing(source="the code", time_limit=TIME_LIMIT, skip_saves=True, second_step=False):
    """Run the block until its first optimizer step, then stop it and set `.case` on what this yields.

    The step itself never runs (the weights stay as they were), torch.save writes nothing (unless skip_saves is
    False: in the doctor's child, where a WriteGuard sends every write to a scratch folder), torch.compile returns
    its model unchanged. Everything is restored on the way out, also when the block raises.

    second_step (in the doctor's child, where the script's objects are its own): the first step runs, and at the same
    optimizer's second step the capture tells whether .grad was cleared in between (case["loop"]["grads"]); then
    the weights of the first step are put back. A closure optimizer, or a script that ends first, leaves it None.
    """
    captured = Capture(source)
    module_call = torch.nn.Module.__call__
    module_compile = torch.nn.Module.compile
    optimizer_init = torch.optim.Optimizer.__init__
    functions = {name: getattr(torch.nn.functional, name) for name in LOSS_FUNCTIONS}
    backward, save, compile_ = torch.autograd.backward, torch.save, torch.compile

    def call(module, *args, **kwargs):
        captured._local.depth = captured._depth() + 1
        try:
            output = module_call(module, *args, **kwargs)
        finally:
            captured._local.depth -= 1
        if captured._depth() == 0:
            captured._on_call(module, args, kwargs, output)
        return output

    def loss_function(name):
        original = functions[name]

        def patched(*args, **kwargs):
            output = original(*args, **kwargs)
            if torch.is_grad_enabled():  # inside a model: the model's own loss, whose settings (ignore_index) we keep
                calls = captured._loss_calls if captured._depth() == 0 else captured._inner_loss_calls
                calls.append((name, original, args, kwargs, output))
            return output
        return patched

    def patched_backward(tensors, *args, **kwargs):
        captured._on_backward(tensors)
        return backward(tensors, *args, **kwargs)

    def patched_save(obj, f, *args, **kwargs):
        captured.skipped_saves.append(os.fspath(f) if isinstance(f, (str, os.PathLike)) else type(f).__name__)

    def built(optimizer, *args, **kwargs):
        optimizer_init(optimizer, *args, **kwargs)
        captured.built_lrs[id(optimizer)] = [group.get("lr") for group in optimizer.param_groups]

    def patched_compile(model=None, **kwargs):
        return model if model is not None else (lambda fn: fn)

    def stop(optimizer, args, kwargs):
        if captured._watch is not None:
            if optimizer is not captured._watch["optimizer"]:
                return  # another optimizer (a GAN's other model): its step runs
            captured._end_watch(captured._second_step())
            raise _Stop
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if captured._found is None and callable(closure):  # Lightning, LBFGS: forward and backward run inside step()
            with torch.enable_grad():
                closure()
        watch = second_step and not callable(closure)  # a closure steps again inside step(): no second step to see
        try:
            captured._finish(optimizer, keep_grads=watch)
        except Exception as exc:  # a capture bug: the one-line reason, not a traceback through the user's script
            captured.error = f"the capture failed at the first step ({type(exc).__name__}: {exc}); {HOW_TO_CASE}"
        if captured.case is None or not watch:
            raise _Stop
        captured._watch_first_step(optimizer)

    def time_up(signum, frame):
        raise _TimeUp

    timed = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread() and time_limit
    previous_handler = signal.signal(signal.SIGALRM, time_up) if timed else None
    hook = register_optimizer_step_pre_hook(stop)
    torch.nn.Module.__call__ = call
    torch.nn.Module.compile = lambda self, *args, **kwargs: None
    torch.optim.Optimizer.__init__ = built
    for name in LOSS_FUNCTIONS:
        setattr(torch.nn.functional, name, loss_function(name))
    torch.autograd.backward, torch.compile = patched_backward, patched_compile
    if skip_saves:
        torch.save = patched_save
    try:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, time_limit)
        yield captured
        if captured.case is None:
            captured.error = f"{source} finished without an optimizer step{captured.no_step()}; {HOW_TO_CASE}"
    except _Stop:
        pass
    except _TimeUp:
        if captured.case is None:
            captured.error = f"{source} did not reach an optimizer step within its {time_limit:g} s time limit; {HOW_TO_CASE}"
    except BaseException:
        if captured.case is None:  # after the first step the case stands: what the script did later is not our business
            raise
    finally:
        if captured._watch is not None:  # the script ended, raised or ran out of time before its second step
            captured._end_watch()
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
        hook.remove()
        torch.nn.Module.__call__ = module_call
        torch.nn.Module.compile = module_compile
        torch.optim.Optimizer.__init__ = optimizer_init
        for name, original in functions.items():
            setattr(torch.nn.functional, name, original)
        torch.autograd.backward, torch.save, torch.compile = backward, save, compile_


def _run(source, run, path=None, time_limit=TIME_LIMIT, skip_saves=True, second_step=False):
    """Run `run()` under capturing(); the case, or CaptureError with one line.

    Ctrl-C (KeyboardInterrupt) goes through; any other exception of the user's code is the one line.
    """
    captured = None
    try:
        with capturing(source, time_limit, skip_saves, second_step) as captured:
            run()
    except SystemExit as exc:
        arguments = "if it needs arguments, give them after --; else " if path else ""
        raise CaptureError(f"{source} exited (sys.exit({exc.code!r})) before its first optimizer step"
                           f"{captured.no_step() if captured and captured.backwards else ''}: {arguments}{HOW_TO_CASE}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # Exception, or a BaseException of the user's own: a finding about the script, in one line
        note = captured.no_step() if captured and captured.backwards else ""
        raise CaptureError(f"{source} raised {type(exc).__name__} at {_where(exc, path)} before its first optimizer step"
                           f"{note}: {' '.join(str(exc).split())}") from None
    if captured.case is None:
        raise CaptureError(captured.error + (RL_HINT if any(name in sys.modules for name in ("gymnasium", "gym")) else ""))
    return captured.case


def capture_case(fn, *args, time_limit=TIME_LIMIT, second_step=False, **kwargs):
    """Call fn(*args, **kwargs) (your training function) until its first optimizer step; return the doctor case.

    second_step=True lets the first step change fn's model, to see whether the loop clears .grad (capturing()).
    """
    return _run(f"{getattr(fn, '__name__', 'fn')}()", lambda: fn(*args, **kwargs), time_limit=time_limit,
                second_step=second_step)


def capture_script(path, argv=(), time_limit=TIME_LIMIT, skip_saves=True, second_step=False):
    """Run `python path argv...` in this process until its first optimizer step; return the doctor case.

    skip_saves and second_step: as capturing() says (the doctor's supervised child sets both to what it allows).
    """
    if not os.path.isfile(path):
        raise CaptureError(f"script not found (or not a file): {path}")
    folder = os.path.dirname(os.path.abspath(path))
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, folder)  # as `python train.py` does: the script imports its neighbours
    try:
        return _run(os.path.basename(path), lambda: runpy.run_path(path, run_name="__main__"), path, time_limit, skip_saves,
                    second_step)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


class TinyClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))

    def forward(self, x):  # (B, 12) -> (B, 3)
        return self.net(x)


def demo_training():
    """The embedded demo: the loop of a small classifier, as a notebook would hold it."""
    torch.manual_seed(0)
    model = TinyClassifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(100):
        x = torch.randn(32, 12)
        y = x[:, :3].argmax(1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", nargs="?", help="the training script; its own arguments go after --; "
                        "without it, captures an embedded demo loop")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    try:
        if args.script:
            case = capture_script(args.script, argv[cut + 1:])
        else:
            case = _run("the embedded demo loop", demo_training)
    except CaptureError as exc:
        print(f"error: {single_line(exc)}", file=sys.stderr)
        return 2
    print("captured " + case["captured"])
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
