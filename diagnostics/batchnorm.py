"""batchnorm: does each BatchNorm layer train on a real batch?

Symptom
    A conv net that trains (the training loss falls) but is poor or erratic in eval mode, or
    whose eval accuracy is far below its training accuracy from the first epoch; or training
    stops with `Expected more than 1 value per channel when training`. The cause: BatchNorm in
    train mode on a batch of one (batch_size=1, a last batch of one without drop_last, or
    gradient accumulation over single samples). Each sample is then normalised by its own
    mean and variance, and the running statistics that eval mode uses are averages of
    per-sample ones, which no sample was ever trained with.

What it checks
    One forward pass (no gradients, the mode as found) with a pre-hook on each BatchNorm
    layer (BatchNorm1d/2d/3d, SyncBatchNorm, lazy ones) that is in train mode, recording the
    shape of its input (N, C, ...):

      fail   one value per channel (N x the spatial size = 1, e.g. BatchNorm1d on (1, C)):
             torch refuses it; the check names the layer.
      fail   one sample (N = 1) with more values per channel (a feature map): the layer
             normalises each sample by its own statistics.
      pass   every train-mode BatchNorm layer sees 2 samples or more, or there is no
             BatchNorm layer at all.
      skip   every BatchNorm layer is in eval mode (frozen BatchNorm, or a model
             put in eval mode: train it in train mode to check).

Command
    python diagnostics/batchnorm.py                      # embedded demo (planted bug)
    python diagnostics/batchnorm.py --healthy            # its healthy twin
    python diagnostics/batchnorm.py --case my_case.py --json

Output
    $ python diagnostics/batchnorm.py
    [FAIL] batchnorm: 1 of 1 BatchNorm layers train on a batch of one (first: layer 1, input (1, 8, 8, 8)): each normalises the sample by its own statistics, and the running statistics used in eval mode never match what it trained with
    (exit code 1)
    $ python diagnostics/batchnorm.py --healthy
    [PASS] batchnorm: 1 train-mode BatchNorm layers, each over 16 samples or more (1024+ values per channel)
    (exit code 0)

How to read it
    details["calls"] lists every call of a train-mode BatchNorm layer in call order, with its
    input shape, samples (N) and values per channel (N times the spatial size). The summary
    names the first layer that trains on one sample, or the one that gets one value per
    channel.

Next step
    PLAYBOOK.md#batchnorm. Batch more than one sample (drop_last=True on the DataLoader stops
    a last batch of one); when memory allows only tiny batches, freeze BatchNorm (eval mode on
    the BatchNorm layers, as detection fine-tunes do) or replace it by GroupNorm or LayerNorm,
    which do not depend on the batch. Then run batch_independence: train-mode BatchNorm mixes
    the rows of a batch by design.
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


def check_batchnorm(case):
    """The number of samples and values each train-mode BatchNorm layer computes its statistics over."""
    case = validate_case(case)
    model = case["model"]
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not layers:
        return CheckResult("batchnorm", "pass", "no BatchNorm layer in the model: no batch statistics to go wrong")
    training = [(name, m) for name, m in layers if m.training]
    if not training:
        return CheckResult("batchnorm", "skip", f"all {len(layers)} BatchNorm layers are in eval mode: they normalise with "
                           "their running statistics (put the model in train mode, as the training loop does, to check)")
    calls = []  # (layer name, input shape) per call, in call order

    def recorder(name):
        return lambda module, args: calls.append((name, tuple(args[0].shape))) if args and isinstance(args[0], torch.Tensor) else None

    raised = None
    with preserved(model):
        for name, m in training:
            m.register_forward_pre_hook(recorder(name))
        try:
            with torch.no_grad():
                forward(model, case["batch"][0])
        except ValueError as exc:  # F.batch_norm refuses one value per channel in train mode; the hook has the shape
            raised = exc
    per_call = [{"layer": name, "input": list(shape), "samples": shape[0],
                 "values_per_channel": (torch.Size(shape).numel() // shape[1]) if len(shape) > 1 else shape[0]}
                for name, shape in calls]
    if raised is not None and not (per_call and per_call[-1]["values_per_channel"] == 1):
        raise raised
    details = {"layers": len(training), "calls": per_call}
    one_value = [c for c in per_call if c["values_per_channel"] == 1]
    one_sample = [c for c in per_call if c["samples"] == 1 and c["values_per_channel"] > 1]
    if one_value:
        c = one_value[0]
        details["next"] = ("train with more than one sample per batch (drop_last=True avoids a last batch of one), "
                           "or use GroupNorm / LayerNorm")
        return CheckResult("batchnorm", "fail", f"{c['layer']} gets input {tuple(c['input'])} in train mode: its per-channel "
                           "statistics are over one value (torch raises: Expected more than 1 value per channel when training)",
                           details)
    if one_sample:
        names = list(dict.fromkeys(c["layer"] for c in one_sample))  # in call order
        details["next"] = ("batch more than one sample (BatchNorm needs a real batch: 16+ is comfortable), freeze BatchNorm "
                           "(eval mode) when fine-tuning with tiny batches, or use GroupNorm / LayerNorm")
        return CheckResult("batchnorm", "fail", f"{len(names)} of {len(training)} BatchNorm layers train on a batch of one "
                           f"(first: layer {names[0]}, input {tuple(one_sample[0]['input'])}): each normalises the sample by its own "
                           "statistics, and the running statistics used in eval mode never match what it trained with", details)
    smallest = min(per_call, key=lambda c: c["samples"], default=None)
    if smallest is None:
        return CheckResult("batchnorm", "skip", f"none of the {len(training)} train-mode BatchNorm layers ran in the forward pass")
    return CheckResult("batchnorm", "pass", f"{len(training)} train-mode BatchNorm layers, each over {smallest['samples']} samples "
                       f"or more ({min(c['values_per_channel'] for c in per_call)}+ values per channel)", details)


def make_demo_case(broken=True):
    """A small conv net with BatchNorm on 4-class images; the broken twin's loader yields one image per batch."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        batch_size = 16
        if broken:
            batch_size = 1  # BUG: a batch of one: BatchNorm's statistics come from a single image
        x = torch.randn(batch_size, 3, 8, 8)
        y = torch.randint(0, 4, (batch_size,))
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_batchnorm, make_demo_case, __doc__))
