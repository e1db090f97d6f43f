"""init_loss: does the loss start where chance says it should?

Symptom
    The first logged loss is far from what a model that knows nothing should score (e.g. 23.5
    on a 10-class problem instead of ln 10 = 2.30), the curve has a long "hockey stick" start,
    or the loss at step 0 is suspiciously low. Karpathy's recipe ("verify loss @ init" (evidence/karpathy-recipe.md#verify-loss-at-init)) and
    cs231n ("Look for correct loss at chance performance"
    (evidence/cs231n-nn3.md#loss-at-chance)) both make this the first check.

What it checks
    Runs the model on the case's batch (no gradients, in the mode the model is in: train mode,
    the default after construction, is what your first training step reports; dropout makes it
    noisy, so train mode averages 3 passes) and compares the case's own loss with:

      chance          what a model that knows nothing scores: ln C for C classes (C is the
                      size of the output's class dimension, what the softmax runs over; a
                      num_classes or vocab_size hint that differs is a warn), also for soft
                      labels (probability rows); ln 2 per element for 0/1 targets with a
                      logits loss; the mean square of the targets for MSE regression (the
                      score of an all-zero output).
      best constant   the best any input-blind predictor can do on this batch: the entropy of
                      the batch's labels (ignore_index excluded), or the targets' variance.

    It also scores an all-zero output with your loss_fn (uniform log-probabilities -ln C instead
    when the model ends in log_softmax, as the MNIST example does). A mean MSE or cross-entropy gives
    exactly chance; anything else means the loss is not what chance assumes (summed over the
    batch, scaled, extra terms, or another loss such as L1), and the model is then judged
    against that all-zero score instead, so a scaled loss is not mistaken for scaled outputs.

    fail   loss > 1.5x chance (outputs too large at init: logits scaled up, init too wide), or
           loss < 0.75x the best constant (the model already knows the targets: leakage, an
           off-by-one that feeds the target in as input, or pretrained weights), or a NaN loss,
           or a negative loss (a flipped sign; or probability outputs fed to NLLLoss, named as
           such when the loss is exactly -mean(p[target])), or regression outputs whose shape differs from
           the targets' (MSE broadcasts).
    warn   a loss summed instead of averaged; a classification loss_fn whose all-zero score
           is not ln C (a scale factor, extra terms); regression targets far from zero mean
           (the start is a hockey stick: init the final bias to the mean or standardise); a
           num_classes hint disagreeing with the output.
    skip   task kind "other", a task that cannot be inferred, or task["pretrained"] true.

Command
    python diagnostics/init_loss.py                      # embedded demo (planted bug)
    python diagnostics/init_loss.py --healthy            # its healthy twin
    python diagnostics/init_loss.py --case my_case.py --json

Output
    $ python diagnostics/init_loss.py --healthy
    [PASS] init_loss: loss at init 2.34 (train mode) vs chance 2.3 (ln 10): 1.02x chance
    (exit code 0)
    $ python diagnostics/init_loss.py --json
    {
      "id": "init_loss",
      "status": "fail",
      "summary": "loss at init 7.71 (train mode) vs chance 2.3 (ln 10): 3.35x chance, the outputs are too large at init",
      "details": {
        "loss": 7.70895528793335,
        "loss_per_pass": [
          7.70895528793335,
          7.70895528793335,
          7.70895528793335
        ],
        "mode": "train",
        "zero_output_loss": 2.3025851249694824,
        "kind": "classification",
        "num_classes": 10,
        "num_classes_hint": 10,
        "chance": 2.302585092994046,
        "chance_formula": "ln 10",
        "best_constant": 2.1342371749153575,
        "n_targets": 64,
        "ratio_to_chance": 3.347956742788347,
        "ratio_to_best_constant": 3.612042456452424,
        "next": "find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale"
      }
    }
    (exit code 1)

How to read it
    ratio_to_chance is the headline: about 1 is healthy (the test zoo measures 0.99 to 1.23).
    Above 1.5 the model's outputs are too large at init: find what scales them (a
    temperature, an init std, a missing normalisation). Below 0.75x best_constant the model
    already knows the targets. zero_output_loss is your loss_fn on an all-zero output; when
    it differs from chance, the ratios are taken against it and the summary says so.

Next step
    PLAYBOOK.md#init-loss. Then run init_scale (per-layer init std) and, for a low loss, labels
    and causal_dependency (a target that is also an input).
"""
import argparse
import contextlib
import copy
import dataclasses
import importlib.util
import json
import os
import random
import signal
import sys
import threading

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

# --- shared block: byte-identical in every model diagnostic (tests/test_diagnostic_conventions.py compares them) ---
@dataclasses.dataclass
class CheckResult:
    """One check's verdict, the shape `doctor --json` prints for each check."""

    id: str
    status: str  # "pass" | "warn" | "fail" | "skip"
    summary: str
    details: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        return dataclasses.asdict(self)


class CaseError(Exception):
    """A case that cannot be loaded or used; the CLI prints it as one line and exits 2."""


def load_case(spec):
    """Load `path/to/file.py[:factory]` and return the validated case dict (factory default `make_case`)."""
    path, _, factory_name = spec.partition(":")
    factory_name = factory_name or "make_case"
    if not os.path.exists(path):
        raise CaseError(f"case file not found: {path}")
    if not os.path.isfile(path):  # a FIFO or a device would block the read; a folder is no case
        raise CaseError(f"case file {path} is not a regular file")
    case_dir = os.path.dirname(os.path.abspath(path))
    if case_dir not in sys.path:  # the case may import modules beside it; appended, so its labels.py is not our labels
        sys.path.append(case_dir)
    module_spec = importlib.util.spec_from_file_location(f"_mld_case_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the user's file: anything it raises is a bad case, in one line
        raise CaseError(f"case file {path} raised {type(exc).__name__} on import: {exc}") from exc
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise CaseError(f"case file {path} has no function {factory_name}()")
    try:
        case = factory()
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        raise CaseError(f"{factory_name}() in {path} raised {type(exc).__name__}: {exc}") from exc
    return validate_case(case, f"{path}:{factory_name}")


def validate_case(case, where="case"):
    """Check the case contract of DESIGN.md ("A case") and fill in defaults."""
    if not isinstance(case, dict):
        raise CaseError(f"{where} returned {type(case).__name__}, expected a dict with model, batch, loss_fn")
    missing = [key for key in ("model", "batch", "loss_fn") if key not in case]
    if missing:
        raise CaseError(f"{where} is missing {', '.join(missing)}")
    if not isinstance(case["model"], torch.nn.Module):
        raise CaseError(f"{where}: model is {type(case['model']).__name__}, expected torch.nn.Module")
    batch = case["batch"]
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise CaseError(f"{where}: batch must be (inputs, targets)")
    if not callable(case["loss_fn"]):
        raise CaseError(f"{where}: loss_fn is not callable")
    if "optimizer" in case and not callable(case["optimizer"]):
        raise CaseError(f"{where}: optimizer must be a function params -> torch.optim.Optimizer")
    task = case.get("task", {})
    if not isinstance(task, dict):
        raise CaseError(f"{where}: task must be a dict of hints")
    kinds = ("classification", "regression", "causal_lm", "seq2seq", "other")
    if task.get("kind", "other") not in kinds:
        raise CaseError(f"{where}: task kind {task['kind']!r} is not one of {', '.join(kinds)}")
    case = dict(case)
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    if isinstance(case["model"], wrappers):
        case["model"] = case["model"].module  # checks run locally: going through DDP's forward would start collectives
    device = next(case["model"].parameters(), torch.empty(0)).device
    case["batch"] = to_device(tuple(batch), device)
    case.setdefault("optimizer", lambda params: torch.optim.Adam(params, lr=3e-4))  # Karpathy's forgiving baseline
    case.setdefault("task", {})
    return case


def to_device(obj, device):
    """Move a tensor, or the tensors inside a tuple/list/dict, to `device` (no copy when already there)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {key: to_device(value, device) for key, value in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(value, device) for value in obj)
    return obj


def forward(model, inputs):
    """Call the model the way the case contract says: tensor, tuple (*args) or dict (**kwargs)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


@contextlib.contextmanager
def preserved(model, optimizer=None):
    """Restore everything a check may touch, also when the check raises.

    Covers parameter and buffer values, requires_grad flags, .grad tensors, train/eval mode of
    every submodule, module hooks, optimizer state, and the Python and torch RNG streams (CPU,
    plus every CUDA device once CUDA is initialised).
    """
    modules = list(model.modules())
    params = list(model.parameters())
    tensors = params + list(model.buffers())
    saved_values = [t.detach().clone() for t in tensors]
    saved_requires_grad = [p.requires_grad for p in params]
    saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    saved_modes = [m.training for m in modules]
    hook_attrs = [name for name, value in vars(torch.nn.Module()).items() if "hook" in name and isinstance(value, dict)]
    saved_hooks = [{name: dict(getattr(m, name)) for name in hook_attrs} for m in modules]
    saved_optimizer = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    saved_python_rng = random.getstate()
    saved_torch_rng = torch.get_rng_state()
    cuda_live = torch.cuda.is_available() and torch.cuda.is_initialized()
    saved_cuda_rng = torch.cuda.get_rng_state_all() if cuda_live else None
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, value in zip(tensors, saved_values):
                tensor.copy_(value)
        for p, flag, grad in zip(params, saved_requires_grad, saved_grads):
            p.requires_grad_(flag)
            p.grad = grad
        for m, mode, hooks in zip(modules, saved_modes, saved_hooks):
            m.training = mode
            for name, saved in hooks.items():
                live = getattr(m, name)
                live.clear()
                live.update(saved)
        if optimizer is not None:
            optimizer.load_state_dict(saved_optimizer)
        random.setstate(saved_python_rng)
        torch.set_rng_state(saved_torch_rng)
        if saved_cuda_rng is not None:
            torch.cuda.set_rng_state_all(saved_cuda_rng)


CHECK_TIMEOUT = 120.0  # seconds per check: the slowest healthy real-model case's slowest check takes ~10 s on one busy CPU thread (measured)


class CheckTimeout(BaseException):
    """A check ran past its time limit (a BaseException: the user's `except Exception` must not swallow it)."""


@contextlib.contextmanager
def time_limit(seconds):
    """Raise CheckTimeout in the running check after `seconds` of wall time (SIGALRM: POSIX main thread; else no limit)."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CheckTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli_main(check, demo_case, description, argv=None):
    """The CLI every model diagnostic shares: --case FILE[:factory], --json, --healthy; exit 0/1/2."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help="path/to/case.py[:factory] returning the case dict (default factory: make_case); "
                        "without it, runs the embedded demo with a planted bug")
    parser.add_argument("--healthy", action="store_true", help="run the embedded demo's healthy twin instead")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=CHECK_TIMEOUT,
                        help=f"seconds the check may run (default {CHECK_TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")
    try:
        case = load_case(args.case) if args.case else validate_case(demo_case(broken=not args.healthy), "demo")
        with time_limit(args.timeout):
            result = check(case)
    except CheckTimeout:  # preserved() inside the check restored the model on the way out
        print(f"error: the check ran past its {args.timeout:g} s time limit and was stopped: the model or loss hangs, "
              f"or is far slower than one batch should be (raise --timeout for a big model)", file=sys.stderr)
        return 2
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: quietly, as a shell expects
        return 130
    except (Exception, SystemExit) as exc:  # the user's model or loss raised inside the check: one line, not a traceback
        print(f"error: the check could not run on this case: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print(f"[{result.status.upper()}] {result.id}: {result.summary}")
    return 1 if result.status == "fail" else 0
# --- end shared block ---

HIGH_RATIO = 1.5  # our assumption, tuned on the test zoo: healthy cases measure 0.99-1.23x chance, the scaled-logits twin 2.7x
LOW_RATIO = 0.75  # our assumption, tuned on the test zoo: a random-init model cannot beat the best constant; the unshifted-LM twin measures 0.6x
TRAIN_MODE_PASSES = 3  # dropout makes a train-mode loss noisy; 3 passes keep the check cheap
LOSS_FN_TOLERANCE = 0.1  # a standard mean loss scores an all-zero output at chance to float precision; 10% leaves room for auxiliary terms
CLASS_KINDS = ("classification", "causal_lm", "seq2seq")


def main_tensor(output):
    """The prediction tensor inside a model output: the tensor itself, output["logits"], or output[0]."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def class_dim(out, targets):
    """The dimension of `out` that holds class scores for integer `targets`, or None."""
    if out.ndim == targets.ndim + 1 and out.shape[:-1] == targets.shape:
        return out.ndim - 1  # (B, C) or (B, T, V)
    if out.ndim == targets.ndim + 1 and out.ndim >= 3 and out.shape[:1] + out.shape[2:] == targets.shape:
        return 1  # (B, C, H, W) against (B, H, W): the layout cross_entropy expects
    return None


def probabilities_into_nll(out, targets, loss):
    """True when `out` holds probability rows (non-negative, summing to 1 over the last dim) and `loss` is exactly
    -mean(p[target]): what NLLLoss computes from probabilities given in place of log-probabilities."""
    if not (out.is_floating_point() and out.ndim >= 2 and not targets.is_floating_point()
            and tuple(targets.shape) == tuple(out.shape[:-1]) and bool((out >= 0).all())
            and bool(((out.sum(-1) - 1).abs() < 1e-3).all())):
        return False
    kept = targets >= 0  # NLLLoss leaves out ignore_index (-100 by default)
    picked = out.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[kept]
    return picked.numel() > 0 and abs(float(-picked.double().mean()) - loss) <= 1e-4 * max(1.0, abs(loss))  # float noise


def entropy(p):
    """Entropy in nats of a distribution given as (unnormalised) non-negative weights."""
    p = p[p > 0].double() / p.sum()
    return float(-(p * p.log()).sum())


def ln(x):
    return float(torch.tensor(float(x), dtype=torch.float64).log())


def fmt(x):
    return f"{x:.3g}"


def neutral_output(output):
    """An uninformative output: all zeros, or uniform log-probabilities when the model ends in log_softmax (NLL loss)."""
    for dim in range(output.ndim):  # to NLL an all-zero output is certainty (log 1), not chance: give it log(1/C)
        if output.shape[dim] > 1 and bool((output <= 0).all()) and bool((output.logsumexp(dim).abs() < 1e-3).all()):
            return torch.full_like(output, -ln(output.shape[dim]))
    return torch.zeros_like(output)


def task_reference(out, targets, task, zero_loss):
    """Work out the task and its reference losses: a dict, or a string saying why there is none.

    chance: the analytic loss of an uninformative output (uniform probabilities, or zeros for
    regression); best_constant: the lowest loss any input-blind prediction reaches on this batch.
    zero_loss (the case's loss on an all-zero output) only tells 0/1 and soft-label targets with a
    logits loss apart from regression targets when the task kind is not given.
    """
    kind = task.get("kind")
    if kind == "other":
        return "task kind is 'other': there is no chance level to compare with"
    integer_targets = not targets.is_floating_point() and targets.dtype != torch.bool
    same_shape = targets.is_floating_point() and targets.shape == out.shape and out.ndim > 0

    def zero_output_scores(value):  # the loss_fn on an all-zero output reveals which loss it is
        return zero_loss is not None and abs(zero_loss - value) < 1e-3 * max(1.0, value)

    def loss_says(value):
        return zero_output_scores(value) if zero_loss is not None else kind in CLASS_KINDS

    if integer_targets and kind in (None, *CLASS_KINDS):
        dim = class_dim(out, targets)
        if dim is None:
            return f"output {tuple(out.shape)} has no class dimension matching targets {tuple(targets.shape)}"
        n_classes = out.shape[dim]
        kept = targets[targets != task.get("ignore_index", -100)]
        counts = torch.bincount(kept.clamp(0, n_classes - 1).flatten().cpu(), minlength=n_classes)
        return {"kind": kind or "classification (inferred)", "num_classes": n_classes,
                "num_classes_hint": task.get("num_classes", task.get("vocab_size")),
                "chance": ln(n_classes), "chance_formula": f"ln {n_classes}",
                "best_constant": entropy(counts) if kept.numel() else 0.0, "n_targets": kept.numel()}
    if kind != "regression" and same_shape and out.shape[-1] > 1 and bool((targets >= 0).all()) \
            and float((targets.sum(-1) - 1).abs().max()) < 1e-3 and loss_says(ln(out.shape[-1])):
        n_classes = out.shape[-1]  # soft labels (probability rows) under a cross-entropy loss
        return {"kind": kind or "classification (inferred: soft labels)", "num_classes": n_classes,
                "num_classes_hint": task.get("num_classes"), "chance": ln(n_classes), "chance_formula": f"ln {n_classes}",
                "best_constant": entropy(targets.reshape(-1, n_classes).mean(0).cpu()), "n_targets": targets.numel() // n_classes}
    if kind != "regression" and same_shape and bool(((targets == 0) | (targets == 1)).all()) and loss_says(ln(2)):
        rate = float(targets.double().mean())  # 0/1 targets under a logits loss (BCEWithLogits)
        return {"kind": kind or "classification (inferred: 0/1 targets)", "num_classes": 2, "num_classes_hint": None,
                "chance": ln(2), "chance_formula": "ln 2 per element",
                "best_constant": entropy(torch.tensor([rate, 1 - rate])), "n_targets": targets.numel()}
    if kind in CLASS_KINDS:
        return f"task kind {kind} but the targets are neither class indices, probability rows nor 0/1 per output element"
    if targets.is_floating_point():
        flat = targets.double().reshape(targets.shape[0], -1)
        return {"kind": kind or "regression (inferred)", "chance": float((flat ** 2).mean()), "chance_formula": "mean(targets**2)",
                "best_constant": float(flat.var(dim=0, unbiased=False).mean()), "target_mean": float(flat.mean()),
                "shapes_differ": tuple(out.shape) != tuple(targets.shape), "n_targets": targets.numel()}
    return f"cannot infer the task from output {tuple(out.shape)} and {targets.dtype} targets {tuple(targets.shape)}: pass task={{'kind': ...}}"


def check_init_loss(case):
    """Compare the loss at initialisation with chance and with the best input-blind constant."""
    case = validate_case(case)
    model, loss_fn, task = case["model"], case["loss_fn"], case["task"]
    if task.get("pretrained"):
        return CheckResult("init_loss", "skip", "task says the weights are pretrained: the loss is not at chance by design")
    mode = "train" if model.training else "eval"
    with preserved(model):
        inputs, targets = case["batch"]
        with torch.no_grad():
            losses = []
            for _ in range(TRAIN_MODE_PASSES if model.training else 1):
                output = forward(model, inputs)
                losses.append(float(loss_fn(output, targets)))
            out = main_tensor(output)
            zero_loss = float(loss_fn(neutral_output(output), targets)) if isinstance(output, torch.Tensor) else None
    if out is None or not isinstance(targets, torch.Tensor):
        return CheckResult("init_loss", "skip", "cannot find the prediction tensor in the output, or the targets are not a tensor")
    loss = sum(losses) / len(losses)
    details = {"loss": loss, "loss_per_pass": losses, "mode": mode, "zero_output_loss": zero_loss}
    if loss != loss or abs(loss) == float("inf"):
        all_ignored = bool((targets == task.get("ignore_index", -100)).all())
        details["next"] = ("every target equals ignore_index: run labels" if all_ignored else
                           "run nan_watch to find the first module that produces NaN/inf")
        return CheckResult("init_loss", "fail", f"loss at init is {loss}{' (every target is ignore_index)' if all_ignored else ''}: "
                           "nothing can be learned from it", details)
    ref = task_reference(out.detach(), targets, task, zero_loss)
    if isinstance(ref, str):
        return CheckResult("init_loss", "skip", ref, details)
    details.update(ref)
    if ref.get("shapes_differ"):
        details["next"] = "make the output and target shapes equal (e.g. output.squeeze(-1) or targets.unsqueeze(-1))"
        return CheckResult("init_loss", "fail", f"regression output {tuple(out.shape)} and targets {tuple(targets.shape)} differ "
                           "in shape: MSE broadcasts them and compares every output with every target", details)
    if loss < 0 and probabilities_into_nll(out.detach(), targets, losses[-1]):
        details["next"] = "use log_softmax before NLLLoss, or return the logits to CrossEntropyLoss"
        return CheckResult("init_loss", "fail", f"loss at init {fmt(loss)} is negative: the outputs are probabilities (a "
                           "softmax) fed to NLLLoss, which expects log-probabilities, so the loss is -mean(p[target])",
                           details)
    if loss < 0:
        details["next"] = "check the sign of the loss: the optimizer maximises a negated loss"
        return CheckResult("init_loss", "fail", f"loss at init {fmt(loss)} is negative, which cross-entropy and MSE cannot be: "
                           "is the sign flipped?", details)
    chance, best = ref["chance"], ref["best_constant"]
    loss_fn_off = zero_loss is not None and zero_loss > 0 and chance > 0 and abs(zero_loss / chance - 1) > LOSS_FN_TOLERANCE
    scale = zero_loss / chance if loss_fn_off else 1.0  # judge the model against its own loss function's chance level
    summed = loss_fn_off and any(abs(scale / n - 1) < 0.01 for n in {targets.shape[0], ref["n_targets"]} if n)
    other_regression_loss = loss_fn_off and not summed and "target_mean" in ref  # L1, Huber: their all-zero score is chance
    details.update(ratio_to_chance=loss / (scale * chance) if chance > 0 else None,
                   ratio_to_best_constant=loss / (scale * best) if best > 0 else None)
    measured = f"loss at init {fmt(loss)} ({mode} mode) vs chance {fmt(scale * chance)}"
    measured += (f" (your loss_fn on an all-zero output; a mean loss would give {ref['chance_formula']} = {fmt(chance)})"
                 if loss_fn_off else f" ({ref['chance_formula']})")
    if loss > HIGH_RATIO * scale * chance:
        details["next"] = "find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale"
        return CheckResult("init_loss", "fail", f"{measured}: {fmt(details['ratio_to_chance'])}x chance, "
                           "the outputs are too large at init", details)
    if best > 0 and loss < LOW_RATIO * scale * best:
        details["next"] = "look for the target inside the inputs (an unshifted LM target, a label column); run causal_dependency"
        return CheckResult("init_loss", "fail", f"{measured}: below {fmt(scale * best)}, the best any input-blind prediction "
                           "scores on this batch, so the model already knows the targets: leakage, or pretrained weights "
                           "(then set task['pretrained'])", details)
    if summed:
        details["next"] = "average the loss (reduction='mean'): a sum makes the step size grow with the batch size"
        return CheckResult("init_loss", "warn", f"{measured}: the loss is summed over the batch, not averaged", details)
    if loss_fn_off and not other_regression_loss:
        details["next"] = "check the loss function for a scale factor or extra terms (fine if it is deliberately another loss)"
        return CheckResult("init_loss", "warn", f"{measured}: the loss function is not a plain mean cross-entropy", details)
    if ref.get("num_classes_hint") not in (None, ref.get("num_classes")):
        details["next"] = "make the output size equal the number of classes"
        return CheckResult("init_loss", "warn", f"{measured}; but the task hints say {ref['num_classes_hint']} classes "
                           f"and the output has {ref['num_classes']}", details)
    if "target_mean" in ref and chance > HIGH_RATIO * best:
        details["next"] = "standardise the targets or initialise the final bias to their mean (Karpathy, init well)"
        return CheckResult("init_loss", "warn", f"{measured}: the targets have mean {fmt(ref['target_mean'])}, so the first "
                           f"steps only learn the bias (predicting the mean would score {fmt(best)})", details)
    return CheckResult("init_loss", "pass", f"{measured}: {fmt(details['ratio_to_chance'])}x chance", details)


class DemoClassifier(torch.nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        self.temperature = temperature

    def forward(self, x):
        return self.net(x) / self.temperature


def make_demo_case(broken=True):
    """A 10-class MLP on a linear teacher's labels; the broken twin divides its logits by a tiny temperature."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(64, 20)
        y = (x @ torch.randn(20, 10)).argmax(dim=1)
        temperature = 1.0
        if broken:
            temperature = 0.05  # BUG: dividing the logits by 0.05 multiplies them by 20
        model = DemoClassifier(temperature)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}


if __name__ == "__main__":
    sys.exit(cli_main(check_init_loss, make_demo_case, __doc__))
