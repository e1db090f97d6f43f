"""registration: are all the model's submodules and tensors registered?

Symptom
    Part of the model never changes: its layers keep their initial weights, the loss plateaus
    higher than the architecture should allow, `model.to("cuda")` is followed by
    `Expected all tensors to be on the same device`, a reloaded checkpoint misses layers, or
    the parameter count printed at start-up is smaller than the design says. The cause: blocks
    kept in a plain Python list or dict (`self.blocks = [Block() for _ in range(n)]`) or a
    tensor assigned as a plain attribute. nn.Module registers only modules, nn.Parameter and
    buffers assigned directly, and ModuleList / ModuleDict / ParameterList contents.

What it checks
    Walks every module's own attributes (not the ones nn.Module keeps) and the lists, tuples
    and dicts inside them (three levels deep), for modules and tensors that model.modules(),
    model.parameters() and model.buffers() do not reach. Then runs one forward pass (no
    gradients, the mode as found) under a TorchFunctionMode that records every tensor handed
    to a torch function, to see which of them the forward pass uses:

      fail   a tensor that requires grad, not registered and used in forward: the optimizer,
             built from model.parameters(), never updates it.
      warn   a tensor that does not require grad (a mask, a table, a frozen module in a
             list), not registered and used in forward: `.to(device)` leaves it behind and
             the state_dict does not save it.
      pass   nothing unregistered, or unregistered objects the forward pass does not use
             (listed in details: a reference list of registered layers is fine).

    Unregistered modules are not in model.modules(), so the check restores them too.

Command
    python diagnostics/registration.py                      # embedded demo (planted bug)
    python diagnostics/registration.py --healthy            # its healthy twin
    python diagnostics/registration.py --case my_case.py --json

Output
    $ python diagnostics/registration.py
    [FAIL] registration: 6 trainable tensors (816 values) used in forward are not registered, in hidden (a plain list of 3 Linear): model.parameters() and the optimizer never see them, so they are never trained, nor moved by .to(), nor saved in the state_dict
    (exit code 1)
    $ python diagnostics/registration.py --healthy
    [PASS] registration: all 14 modules and tensors reached are registered; none is held in a plain list, dict or attribute
    (exit code 0)

How to read it
    The summary names the attribute (`hidden`) and what it holds. details["unregistered_used"]
    lists each unregistered tensor the forward pass used, by path (`hidden[0].weight`);
    details["unregistered_unused"] the ones it did not use; details["untrained_parameters"]
    the number of values the optimizer never sees.

Next step
    PLAYBOOK.md#registration. Use nn.ModuleList / nn.ModuleDict for submodules, nn.Parameter
    (or nn.ParameterList) for trainable tensors, self.register_buffer(name, tensor) for the
    rest, then compare sum(p.numel() for p in model.parameters()) with the size you expect.
    Run gradient_flow and overfit_one_batch afterwards.
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

MAX_ITEMS = 10_000  # our assumption: containers are walked up to this many items, so a huge cached list cannot stall the check
MODULE_ATTRIBUTES = set(vars(torch.nn.Module()))  # what nn.Module itself keeps in an instance: not the user's attributes


class TensorsSeen(torch.overrides.TorchFunctionMode):
    """Records the id of every tensor handed to a torch function (or method) during the forward pass."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, torch.Tensor):
                    self.ids.add(id(item))
        return func(*args, **kwargs)


def held_outside(model):
    """[(where, object, holder)] for the modules and tensors a module attribute holds outside the module tree: a
    plain tensor attribute (holder "tensor attribute"), or modules and tensors inside a list, tuple or dict attribute
    (holder "list", "tuple" or "dict")."""
    found, budget = [], [MAX_ITEMS]

    def walk(where, value, depth, holder):
        budget[0] -= 1
        if budget[0] < 0:
            return
        if isinstance(value, (torch.nn.Module, torch.Tensor)):
            found.append((where, value, holder))
        elif isinstance(value, (list, tuple)) and depth < 3:
            for i, item in enumerate(value):
                walk(f"{where}[{i}]", item, depth + 1, holder)
        elif isinstance(value, dict) and depth < 3:
            for key, item in value.items():
                walk(f"{where}[{key!r}]", item, depth + 1, holder)

    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr not in MODULE_ATTRIBUTES:
                walk(f"{name}.{attr}" if name else attr, value, 0,
                     type(value).__name__ if isinstance(value, (list, tuple, dict)) else "tensor attribute")
    return found


def container_of(where):
    """`blocks[3].mlp` -> `blocks`: the attribute a finding is grouped under."""
    return where.split("[", 1)[0]


def describe(outside, groups):
    """`blocks (a plain list of 4 Block), scale (a plain tensor attribute)`."""
    parts = []
    for group in groups:
        inside = [(obj, holder) for where, obj, holder in outside if container_of(where) == group]
        holder = inside[0][1]
        if holder == "tensor attribute":
            parts.append(f"{group} (a plain tensor attribute)")
        else:
            names = sorted({type(obj).__name__ for obj, _ in inside})
            parts.append(f"{group} (a plain {holder} of {len(inside)} {'/'.join(names)})")
    return ", ".join(parts)


def check_registration(case):
    """Modules and tensors used in forward that model.parameters(), .buffers() and .modules() do not reach."""
    case = validate_case(case)
    model = case["model"]
    registered = {id(t) for t in (*model.parameters(), *model.buffers())} | {id(m) for m in model.modules()}
    outside = [found for found in held_outside(model) if id(found[1]) not in registered]
    tensors = {}  # id -> (where, tensor): every tensor the unregistered objects hold, parameters and buffers included
    for where, obj, _ in outside:
        if isinstance(obj, torch.nn.Module):
            for name, t in (*obj.named_parameters(), *obj.named_buffers()):
                if id(t) not in registered:
                    tensors.setdefault(id(t), (f"{where}.{name}", t))
        else:
            tensors.setdefault(id(obj), (where, obj))
    if not tensors:
        return CheckResult("registration", "pass", f"all {len(registered)} modules and tensors reached are registered; "
                           "none is held in a plain list, dict or attribute")
    loose = torch.nn.ModuleList([obj for _, obj, _ in outside if isinstance(obj, torch.nn.Module)])
    with preserved(model), preserved(loose):  # the loose modules are not in model.modules(): restore them too
        seen = TensorsSeen()
        with torch.no_grad(), seen:
            forward(model, case["batch"][0])
    used = {key: value for key, value in tensors.items() if key in seen.ids}
    trainable = {key: value for key, value in used.items() if value[1].requires_grad}
    groups = sorted({container_of(where) for where, _ in (trainable or used).values()})
    details = {"unregistered_used": sorted(where for where, _ in used.values()),
               "unregistered_unused": sorted(where for key, (where, _) in tensors.items() if key not in used),
               "containers": groups}
    if trainable:
        count = sum(t.numel() for _, t in trainable.values())
        details.update(untrained_parameters=count,
                       next="hold submodules in nn.ModuleList / nn.ModuleDict and trainable tensors in nn.Parameter")
        return CheckResult("registration", "fail", f"{len(trainable)} trainable tensors ({count} values) used in forward are "
                           f"not registered, in {describe(outside, groups)}: "
                           "model.parameters() and the optimizer never see them, so they are never trained, "
                           "nor moved by .to(), nor saved in the state_dict", details)
    if used:
        details["next"] = "register them: self.register_buffer(name, tensor) (persistent=False if not to be saved)"
        return CheckResult("registration", "warn", f"{len(used)} tensors used in forward are not registered, in "
                           f"{describe(outside, groups)}: "
                           ".to(device) leaves them behind and the state_dict does not save them", details)
    holders = sorted({container_of(where) for where, _ in tensors.values()})
    return CheckResult("registration", "pass", f"{len(tensors)} unregistered tensors ({', '.join(holders)}) are not used in "
                       "forward", details)


class DemoMLP(torch.nn.Module):
    def __init__(self, broken):
        super().__init__()
        layers = [torch.nn.Linear(16, 16) for _ in range(3)]
        hidden = torch.nn.ModuleList(layers)
        if broken:
            hidden = layers  # BUG: a plain list: the three layers are not registered
        self.hidden = hidden
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):  # (B, 16) -> (B, 4)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


def make_demo_case(broken=True):
    """A 4-class MLP whose hidden layers sit in a list; the broken twin's list is a plain Python list."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(32, 16)
        y = (x @ torch.randn(16, 4)).argmax(dim=1)
        model = DemoMLP(broken)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_registration, make_demo_case, __doc__))
