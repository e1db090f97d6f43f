"""ml_debug_contract: the one contract every ml-debug command keeps, in one module beside the checks.

Every command in diagnostics/ imports what it shares from here, from beside itself, so
`python diagnostics/<command>.py` runs from a checkout, from the installed skill folder
(install_skill copies this file with the commands) and from the wheel. Loading it takes only the
standard library: the functions that handle a model import torch when they run, so the commands
that read logs, runs or code (spikes, sweeps, lint, bad_samples) need no torch.

What it holds
    ArgumentParser                 argparse's, but bad usage is one line on stderr and exit 2
    json_text                      strict JSON for --json: null for NaN/inf, listed in "non_finite"
    CheckResult, CaseError         a check's verdict, and a case that cannot be used
    load_case, validate_case       DESIGN.md "A case": load the file, check its keys, fill defaults
    to_device, forward             call the model the way the case contract says
    preserved                      the user's model, optimizer, RNG, mode and hooks as they were
    time_limit, CheckTimeout       a check that runs past its limit is stopped
    cli_main                       the CLI every model check shares (--case, --json, --healthy)

The contract itself is DESIGN.md, "Safety" and "A verdict".
"""
import argparse
import contextlib
import copy
import dataclasses
import importlib.util
import json
import math
import os
import random
import re
import signal
import sys
import threading


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a one-line error: `<prog>: error: <message>` on stderr, exit 2, no usage block.

    Bad usage is bad input (DESIGN.md, "Safety"); `--help` is argparse's own.
    """

    def error(self, message):
        one_line = re.sub(r"\s*\n\s*", " ", str(message).strip())
        self.exit(2, f"{self.prog}: error: {one_line}\n")


def json_text(obj, indent=2):
    """`obj` as strict JSON text, for every command's --json (DESIGN.md, "Safety").

    JSON has no NaN or Infinity (Python's json writes them, and strict readers refuse the result), so a
    non-finite number becomes null and the top-level object gets "non_finite": the JSON Pointers of the
    values that were replaced (RFC 6901: "/details/loss"); the key is there only when something was. Torch
    and numpy scalars become numbers; anything else JSON cannot hold is written as its str().
    """
    replaced = []
    strict = _finite(obj, "", replaced)
    if replaced:
        strict = {**strict, "non_finite": replaced}
    return json.dumps(strict, indent=indent, allow_nan=False, default=str)


def _finite(value, pointer, replaced):
    """`value` with every NaN or infinity inside it as None, each one's JSON Pointer appended to `replaced`."""
    torch = sys.modules.get("torch")  # a tensor exists only once torch is loaded
    if (torch is not None and isinstance(value, torch.Tensor) and value.ndim == 0) or \
            (type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        replaced.append(pointer)
        return None
    if isinstance(value, dict):
        return {key: _finite(item, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}", replaced)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, f"{pointer}/{index}", replaced) for index, item in enumerate(value)]
    return value


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
    import torch

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
    import torch

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
    import torch

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
    parser = ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        print(json_text(result.to_dict()))
    else:
        print(f"[{result.status.upper()}] {result.id}: {result.summary}")
    return 1 if result.status == "fail" else 0
