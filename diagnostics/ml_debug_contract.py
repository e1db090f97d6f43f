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
    user_function, users_error     a function of the user's file (a case, a problem, a trainer), and what the
                                   user's code raised that is its own error to report in one line
    to_device, forward             call the model the way the case contract says
    named_tensors, replace_tensor  the tensors of the inputs by name; one of them swapped (an experiment)
    main_tensor, class_dim         the prediction tensor of a model's output, and which of its dims holds the classes
    step_optimizer, loss_closure   a training step that gives LBFGS the closure it needs
    preserved                      the user's model, optimizer, RNG, mode and hooks as they were
    time_limit, CheckTimeout       a check that runs past its limit is stopped
    cli_main                       the CLI every model check shares (--case, --json, --healthy)
    supervised, SupervisedError    user code in a child process: killed at its time limit, one line
                                   for whatever ends it (exit, os._exit, fork, a BaseException)
    run_user_code                  the same for a tool that wants the value, or CaseError
    in_supervised_child            whether a KeyboardInterrupt here is the user's code's (no Ctrl-C reaches it)
    WriteGuard                     a script's or trainer's writes go to a scratch folder or are refused
                                   (Landlock, where the kernel has it, refuses the rest)
    output_file, OutputRefused     an output path checked before any work: never an input (also through a
                                   link), a folder, a device, a FIFO, a kernel file, or an existing file
                                   without --force
    OutputFolder                   a folder a command writes named files into: only the files it wrote
                                   there (its manifest says which) are ever replaced, with or without --force
    sha256                         a file's digest, what those manifests (and install_skill's) record

The contract itself is DESIGN.md, "Safety" and "A verdict".
"""
import argparse
import contextlib
import copy
import dataclasses
import errno
import gc
import hashlib
import importlib.util
import io
import json
import math
import os
import random
import re
import select
import signal
import stat
import sys
import tempfile
import threading
import time


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


def users_error(exc):
    """True when `exc`, raised inside the user's code, is the user's error to report: any Exception, SystemExit, and a
    KeyboardInterrupt no Ctrl-C sent: in the supervised child, or off the main thread (a real Ctrl-C reaches the main
    thread of the process the terminal runs; there it stops the command)."""
    interrupt = isinstance(exc, KeyboardInterrupt) and (
        in_supervised_child() or threading.current_thread() is not threading.main_thread())
    return isinstance(exc, (Exception, SystemExit)) or interrupt


def user_function(spec, default, what, error=CaseError, arguments=""):
    """(path, name, function) of the user's file `path/to/file.py[:name]` (name default `default`): the file imported
    as `python file.py` would (its folder on the import path, after ours, so its labels.py is not our labels), with no
    __pycache__ written beside it or the modules it imports. Every refusal is `error`, one line naming the file as
    `what` ("case file"): no such file, not a regular one (a FIFO would block the read), what its import raised
    (SystemExit too), no function of that name (`arguments` shows what it takes)."""
    path, _, name = spec.partition(":")
    name = name or default
    if not os.path.exists(path):
        raise error(f"{what} not found: {path}")
    if not os.path.isfile(path):
        raise error(f"{what} {path} is not a regular file")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.append(folder)
    module_spec = importlib.util.spec_from_file_location(f"_mld_user_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(module_spec)
    bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        if not users_error(exc):
            raise
        raise error(f"{what} {path} raised {type(exc).__name__} on import: {exc}") from exc
    finally:
        sys.dont_write_bytecode = bytecode
    function = getattr(module, name, None)
    if not callable(function):
        raise error(f"{what} {path} has no function {name}({arguments})")
    return path, name, function


def call_user_function(path, name, function, error=CaseError):
    """function(), what it raises (see users_error) as `error`: one line naming the function and its file."""
    try:
        return function()
    except BaseException as exc:
        if not users_error(exc):
            raise
        raise error(f"{name}() in {path} raised {type(exc).__name__}: {exc}") from exc


def load_case(spec):
    """Load `path/to/file.py[:factory]` and return the validated case dict (factory default `make_case`)."""
    path, name, factory = user_function(spec, "make_case", "case file")
    return validate_case(call_user_function(path, name, factory), f"{path}:{name}")


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
    case["task"] = dict(task)
    if "graph" not in task and one_graph(case["batch"][0]):
        case["task"]["graph"] = True
    return case


def graph_edges(inputs):
    """(N, the inputs holding the edges) when the batch is one graph whose rows are its nodes (node classification):
    an adjacency matrix (N, N), dense or sparse, or an integer edge list (2, E) of node numbers below N, where N is the
    rows of another input, the node features; (0, []) when it is not."""
    import torch

    tensors = [t for t in (inputs.values() if isinstance(inputs, dict) else inputs if isinstance(inputs, (tuple, list))
                           else [inputs]) if isinstance(t, torch.Tensor)]
    for nodes in (t for t in tensors if t.dim() == 2 and t.is_floating_point() and not t.is_sparse):
        n = nodes.shape[0]
        edges = [other for other in tensors if other is not nodes and other.dim() == 2 and (
            other.shape == (n, n) and n > 1 or other.shape[0] == 2 and other.shape[1] > 0 and not other.is_floating_point()
            and other.dtype != torch.bool and not other.is_sparse and 0 <= int(other.min()) and int(other.max()) < n)]
        if edges:
            return n, edges
    return 0, []


def one_graph(inputs):
    """Whether the batch is one graph (graph_edges): message passing mixes its rows by design, so they are not
    independent examples."""
    return bool(graph_edges(inputs)[1])


def map_tensors(obj, fn):
    """obj with fn applied to every tensor in it: a tensor, or tuples, lists and dicts of them, nested, the structure
    kept (a namedtuple is rebuilt from its fields); anything else as it is."""
    import torch

    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: map_tensors(value, fn) for key, value in obj.items()}
    if isinstance(obj, (tuple, list)):
        items = [map_tensors(value, fn) for value in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return obj


def to_device(obj, device):
    """Move a tensor, or the tensors inside a tuple/list/dict, to `device` (no copy when already there)."""
    return map_tensors(obj, lambda tensor: tensor.to(device))


def named_tensors(obj, name="inputs"):
    """[(name, tensor)] for a tensor or every tensor inside a tuple / list / dict: inputs, inputs[1], inputs['ids']."""
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and not isinstance(obj, (dict, tuple, list)):
        return [(name, obj)]
    if isinstance(obj, dict):
        return [pair for key, value in obj.items() for pair in named_tensors(value, f"{name}[{key!r}]")]
    if isinstance(obj, (tuple, list)):
        return [pair for i, value in enumerate(obj) for pair in named_tensors(value, f"{name}[{i}]")]
    return []


def class_dim(out, targets):
    """The dimension of `out` that holds class scores for integer `targets`, or None (init_loss, labels and
    label_alignment read the classes with it)."""
    if out.ndim == targets.ndim + 1 and out.shape[:-1] == targets.shape:
        return out.ndim - 1  # (B, C) or (B, T, V)
    if out.ndim == targets.ndim + 1 and out.ndim >= 3 and out.shape[:1] + out.shape[2:] == targets.shape:
        return 1  # (B, C, H, W) against (B, H, W): the layout cross_entropy expects
    return None


def main_tensor(output):
    """The prediction tensor inside a model output: the tensor itself, output["logits"], or output[0]; else None."""
    import torch

    if torch.is_tensor(output):
        return output
    if isinstance(output, dict) and torch.is_tensor(output.get("logits")):
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and torch.is_tensor(output[0]):
        return output[0]
    return None


def first_tensor(obj):
    """The first tensor in a tensor / tuple / list / dict, or None."""
    import torch

    if torch.is_tensor(obj):
        return obj
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    return next((t for t in map(first_tensor, values) if t is not None), None)


def count_rows(inputs, bdim=0):
    """The batch's rows: the size of the first input tensor's batch dimension (bdim); 0 when it has none."""
    first = first_tensor(inputs)
    return first.shape[bdim] if first is not None and first.dim() > bdim else 0


def batch_rows(obj, n, start, count, bdim=0, flattened=False):
    """Rows start .. start+count of every tensor in obj whose batch dimension (bdim) has the batch size n; the other
    tensors as they are.

    flattened (for the targets): a tensor of B*T rows that a model flattening (B, T) to B*T itself scores against
    (the Lightning demo's transformer) gives the matching T rows per batch row, batch-first.
    """
    def rows(tensor):
        if tensor.dim() > bdim and tensor.shape[bdim] == n:
            return tensor.narrow(bdim, start, count)
        if flattened and bdim == 0 and tensor.dim() >= 1 and tensor.shape[0] % n == 0:
            per_row = tensor.shape[0] // n
            return tensor.narrow(0, start * per_row, count * per_row)
        return tensor  # another size: not a tensor of the batch
    return map_tensors(obj, rows)


def replace_tensor(obj, old, new):
    """obj (a tensor, or a tuple / list / dict of them) with the tensor `old` swapped for `new`, the structure kept."""
    return map_tensors(obj, lambda tensor: new if tensor is old else tensor)


def needs_closure(optimizer):
    """Whether optimizer.step() must be given a closure (LBFGS re-evaluates the loss several times a step)."""
    import inspect
    closure = inspect.signature(optimizer.step).parameters.get("closure")
    return closure is not None and closure.default is inspect.Parameter.empty


def loss_closure(case, model, inputs, targets):
    """What an optimizer such as LBFGS calls, several times a step: zero the gradients, the case's loss, backward()."""
    def closure():
        model.zero_grad(set_to_none=True)
        loss = case["loss_fn"](forward(model, inputs), targets)
        loss.backward()
        return loss
    return closure


def step_optimizer(optimizer, closure):
    """optimizer.step(), or optimizer.step(closure) for an optimizer that needs one (loss_closure(): the gradients
    already there serve a plain step)."""
    return optimizer.step(closure) if needs_closure(optimizer) else optimizer.step()


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
    try:
        with rng_preserved():
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


@contextlib.contextmanager
def rng_preserved():
    """Give back the global RNG streams as they were, also when the code inside raises: Python's, torch's (CPU, plus
    every CUDA device once CUDA is initialised) and numpy's when the user's code imported numpy (the check never
    does). Alone: around a user's function called with no model to restore (a loss_fn may draw random numbers)."""
    import torch

    numpy = sys.modules.get("numpy")
    python_state, torch_state = random.getstate(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        random.setstate(python_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


CHECK_TIMEOUT = 120.0  # seconds per check: the slowest healthy real-model case's slowest check takes ~10 s on one busy CPU thread (measured)


class CheckTimeout(BaseException):
    """A check ran past its time limit (a BaseException: the user's `except Exception` must not swallow it)."""


NO_LIMIT_FROM = 1e9  # seconds (31 years): a limit this long is none, and a POSIX timer cannot hold much more (1e12
# overflows time_t here, measured), so `--timeout inf` or 1e300 means no limit instead of an OverflowError


@contextlib.contextmanager
def time_limit(seconds):
    """Raise CheckTimeout in the running check after `seconds` of wall time (SIGALRM: POSIX main thread; else no limit)."""
    if (not seconds or seconds >= NO_LIMIT_FROM or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
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

    def load():  # with --case, in the supervised child: the case file is the user's code
        return load_case(args.case) if args.case else validate_case(demo_case(broken=not args.healthy), "demo")

    try:
        result = CheckResult(**run_user_code(lambda case: check(case).to_dict(), args.case and f"loading {args.case}",
                                             args.timeout, args.json, raised="the check could not run on this case",
                                             subject="the check", load=load))
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: quietly, as a shell expects
        return 130
    code = 1 if result.status == "fail" else 0
    try:
        if args.json:
            print(json_text(result.to_dict()))
        else:
            print(f"[{result.status.upper()}] {result.id}: {result.summary}")
        sys.stdout.flush()
    except OSError as exc:
        return stdout_lost(exc, code)
    return code


# --- how a command ends ------------------------------------------------------------------------------------


def stdout_lost(exc, code):
    """The exit code when writing the report to stdout raised `exc`: a reader that left (`| head`, `| true`) is no
    fault, the command's own `code`; a stdout that cannot take it (`> /dev/full`) is 1. Either way nothing more goes
    there (stdout becomes /dev/null, so Python's last flush has nothing to complain of). Other errors are raised."""
    if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
        raise exc
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code if exc.errno == errno.EPIPE else 1


def run_command(main, *args):
    """What a command runs as a script: main(*args)'s exit code, with stdout flushed before it counts.
    Ctrl-C is 130, quietly; a stdout closed by its reader or full ends as stdout_lost() says, without a traceback."""
    try:
        code = main(*args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        return stdout_lost(exc, 0)


# --- user code in a supervised child process -------------------------------------------------------------
# DESIGN.md "Safety": user code (case files, scripts) runs in a child; the parent owns the terminal, the output
# and the exit code, and kills the child's whole process group at the time limit, whatever the code does.
SUPERVISED = sys.platform.startswith("linux") and hasattr(os, "fork")  # fork: the child starts with torch loaded
# (an exec'd child would import torch again: ~3 s on a 2-core VM, measured). Elsewhere user code runs in-process.
KILL_GRACE = 10.0  # seconds past a phase's own limit before the parent kills: the child's own timer speaks first
EXIT_GRACE = 1.0  # seconds a child that answered gets to end on its own (a coverage tool saves its data in os._exit)


class SupervisedError(CaseError):
    """The child gave no answer: killed at its time limit, or its process ended. The message is one line."""

    def __init__(self, message, phase, timed_out=False):
        super().__init__(message)
        self.phase = phase
        self.timed_out = timed_out  # killed at the limit (a budget run out), not ended by the code itself


_child_pid = None  # set in the supervised child itself (not in the processes the user's code forks from it)


def in_supervised_child():
    """Whether this process is the supervised child: a KeyboardInterrupt here was raised by the user's code, for the
    terminal's Ctrl-C reaches the parent only (the child has its own process group)."""
    return _child_pid == os.getpid()


def one_line(exc):
    """An exception as `Type: message` on one line (a user's message may hold newlines); a CaseError as its message."""
    return single_line(str(exc) if isinstance(exc, CaseError) else f"{type(exc).__name__}: {exc}")


def single_line(text):
    """Text for one stderr line: its whitespace runs, newlines included (a path or a user's message may hold them),
    as one space."""
    return " ".join(str(text).split())


def _child_main(work, read_fd, write_fd, stdout_to_stderr):
    """The child's whole life: run work(send) and tell the parent what came of it, then end at once."""
    global _child_pid
    me = _child_pid = os.getpid()
    try:
        os.close(read_fd)
        os.setpgid(0, 0)  # its own process group: the terminal's Ctrl-C reaches the parent, which kills this group
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # a read of stdin ends at once instead of waiting for a terminal
        sys.stdin = open(0, closefd=False)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                getattr(sys, name).fileno()
                continue
            # an in-memory stream (pytest's capsys, a notebook): its copy in the child would keep the prints
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False, errors="backslashreplace"))
        if stdout_to_stderr:  # --json: stdout carries only the parent's JSON; the user's prints go to stderr
            os.dup2(2, 1)
            sys.stdout = sys.stderr

        def send(kind, payload):
            if os.getpid() != me:  # a process the user's code forked: only the child itself speaks
                return
            data = (json.dumps([kind, payload], default=str) + "\n").encode()
            while data:
                data = data[os.write(write_fd, data):]

        try:
            send("done", work(send))
        except BaseException as exc:  # whatever the user's code let through (SystemExit, KeyboardInterrupt...): one line
            send("error", one_line(exc))
    finally:
        if os.getpid() == me:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
        os._exit(0)  # no atexit, no waiting for the user's non-daemon threads


def _ended(status):
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"ended (exit status {os.waitstatus_to_exitcode(status)}: sys.exit or os._exit in the user's code?)"


def _await_exit(pid, seconds):
    """Wait up to `seconds` for the child to end, without reaping it: its pid stays its group's until the kill."""
    end = time.monotonic() + seconds
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None and time.monotonic() < end:
        time.sleep(0.005)


def supervised(work, phase, limit, stdout_to_stderr=False):
    """Run work(send) in a child process; yield each (kind, payload) it sends, ending with ("done", value) or ("error", line).

    `send("phase", [name, seconds])` from the child names what it runs now and sets its time limit (None: no limit);
    the first phase is `phase` with `limit`. When a phase runs KILL_GRACE seconds past its limit, or the child ends
    without an answer, SupervisedError(one line) is raised. The child's process group is killed on every way out (a
    child that answered first gets EXIT_GRACE to end on its own).
    Without fork (not Linux) work runs here, in this process, unsupervised.
    """
    if not SUPERVISED:
        try:
            with contextlib.redirect_stdout(sys.stderr) if stdout_to_stderr else contextlib.nullcontext():
                value = work(lambda kind, payload: None)
        except (Exception, SystemExit) as exc:
            yield "error", one_line(exc)
            return
        yield "done", value
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child would print what the parent had buffered
    read_fd, write_fd = os.pipe()
    freeze = gc.get_freeze_count() == 0  # (a process that froze its own heap keeps it as it was)
    if freeze:
        gc.freeze()  # the child's collections skip what it inherits: no pass over torch's objects, no copy of their pages
    try:
        pid = os.fork()
    except BaseException:
        if freeze:
            gc.unfreeze()
        raise
    if pid == 0:
        _child_main(work, read_fd, write_fd, stdout_to_stderr)
    if freeze:
        gc.unfreeze()  # here only: the child never gets this far
    os.close(write_fd)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also here: the kill below must find the group even if the child has not run yet
    status, buffer, eof, answered = None, b"", False, False
    deadline = None if not limit else time.monotonic() + limit + KILL_GRACE
    try:
        while True:
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            if not eof and select.select([read_fd], [], [], wait)[0]:
                chunk = os.read(read_fd, 1 << 16)
                eof = not chunk  # every writer closed it: the child ended (or closed it), and no fork of it holds it
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    kind, payload = json.loads(line)
                    if kind == "phase":
                        phase, limit = payload
                        deadline = None if not limit else time.monotonic() + limit + KILL_GRACE
                    answered = kind in ("done", "error")
                    yield kind, payload
                    if answered:
                        return
                if chunk:
                    continue
            elif eof:
                time.sleep(0.05)
            if status is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                status = status if done else None
            if status is not None and (eof or not select.select([read_fd], [], [], 0)[0]):
                raise SupervisedError(f"{phase}: the process {_ended(status)} before it answered", phase)
            if deadline is not None and time.monotonic() >= deadline:
                raise SupervisedError(f"{phase} ran past its {limit:g} s time limit and was stopped", phase, timed_out=True)
    finally:
        if answered and status is None:  # also when the caller stopped at the answer (the generator closed)
            _await_exit(pid, EXIT_GRACE)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the child and whatever it started: threads, forks, its own children
        if status is None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os.close(read_fd)


def run_user_code(work, phase, limit, stdout_to_stderr=False, refusals=(), raised="your code raised",
                  subject="your code", load=None):
    """work() under time_limit(limit), in the supervised child when `phase` names the user's file (else here, for a demo).

    Returns work's JSON-able value, or raises CaseError with one line for whatever ended it: the time limit (the
    alarm, or the kill at limit + KILL_GRACE when the code ignores it: `subject` ran past it), one of the tool's own
    `refusals` (its message), any other exception or exit (`raised`: Type: message), os._exit. With `load` (a model
    check's case file), load() runs first, as `phase`, under the parent's USER_CODE_LIMIT alone; then work(its value)
    runs as the phase `subject`, under `limit`: what load() raises is its own line, never the check's error.
    """
    stopped = (f"{subject} ran past the {limit:g} s time limit and was stopped (it hangs, or is far slower than "
               "expected: raise --timeout)")

    def guarded(send):
        loaded = ()
        if load is not None:
            loaded = (load(),)
            send("phase", [subject, limit or None])
        try:
            with time_limit(limit):
                return work(*loaded)
        except CheckTimeout:
            raise CaseError(stopped) from None
        except refusals as exc:
            raise CaseError(" ".join(str(exc).split())) from None
        except (Exception, SystemExit) as exc:  # the user's code raised or exited: one line, not a traceback
            raise CaseError(f"{raised}: {one_line(exc)}") from None

    if phase is None:
        return guarded(lambda kind, payload: None)
    try:
        outcome = dict(supervised(guarded, phase, USER_CODE_LIMIT if load is not None else limit or None,
                                  stdout_to_stderr))
    except SupervisedError as exc:  # killed past the limit (the code ignored the alarm): the same line as the alarm's
        if exc.timed_out and exc.phase == (subject if load is not None else phase):
            raise CaseError(stopped) from None
        raise
    if "error" in outcome:
        raise CaseError(outcome["error"])
    return outcome["done"]


# --- a user's script writes nothing of the user's -------------------------------------------------------
# DESIGN.md "Safety": a script run for capture touches nothing of the user's; its writes go to a scratch folder
# or are refused, and the user's files are byte-identical afterwards.
USER_CODE_LIMIT = 300.0  # seconds a case file gets to load, or a script to reach its first optimizer step (our
# assumption: a small-model script steps within a minute on a CPU)
PSEUDO_FILESYSTEMS = ("/dev", "/proc")  # /dev/null, a terminal, shared memory for DataLoader workers: nothing of the user's
LANDLOCK_MACHINES = ("x86_64", "aarch64", "riscv64")  # where the landlock syscalls are numbered 444-446


def landlock_write_rights(abi):
    """The Landlock rights that create, change or remove, as the bit mask a kernel of Landlock ABI `abi` knows:
    WRITE_FILE and REMOVE_DIR .. MAKE_SYM (ABI 1), REFER (2), TRUNCATE (3). A kernel refuses a ruleset that names a right
    it does not know; REFER, known but left out, would forbid every move of a file to another folder, scratch ones too."""
    rights = (1 << 1) | sum(1 << bit for bit in range(4, 13))
    if abi >= 2:
        rights |= 1 << 13
    if abi >= 3:
        rights |= 1 << 14
    return rights


def landlock_writes_only_under(roots):
    """Ask the kernel to refuse every write outside `roots`, for this process and all it starts; True when it holds.

    Landlock (Linux 5.13+) needs no privileges and cannot be undone: call it only in a child process. Reads are not
    restricted. False where the kernel lacks it; then only the Python-level redirects of WriteGuard hold.
    """
    import ctypes
    import platform
    if not sys.platform.startswith("linux") or platform.machine() not in LANDLOCK_MACHINES:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return False
    handled = landlock_write_rights(abi)
    attr = ctypes.c_uint64(handled)
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for root in roots:
            try:
                fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = PathBeneath(handled, fd)
                if libc.syscall(445, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:  # LANDLOCK_RULE_PATH_BENEATH
                    return False
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: what an unprivileged process needs to restrict itself
            return False
        return libc.syscall(446, ruleset, ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)


class WriteGuard:
    """In the child that runs a user's script: every write it attempts lands in `scratch`, or is refused.

    Python's file functions are redirected: a write to PATH outside scratch goes to its stand-in, scratch/files/PATH
    (an append or an update starts from a copy of the original), and later reads, stats and access checks of PATH
    see the stand-in, so a script finds the folders and files it made; removing, renaming, truncating or chmod-ing a
    file of the user's is refused with PermissionError. torch.save, np.save, logging's file handlers and TensorBoard's
    writers all write through these functions. Where the kernel offers Landlock, it refuses every other write
    outside scratch too (C code, subprocesses). It cannot be uninstalled: a child only.
    """

    def __init__(self, scratch):
        self.scratch = os.path.realpath(scratch)
        self.written = []  # the user's paths (absolute) the script wrote to, in order: the report names them
        self.kernel = False  # whether Landlock enforces it too

    @staticmethod
    def _absolute(path, dir_fd=None):
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        return os.path.abspath(path)  # a string operation: no stat, so the patched stat below cannot recurse

    def _ours(self, path, dir_fd=None):
        real = os.path.realpath(self._absolute(path, dir_fd))
        return any(real == root or real.startswith(root + os.sep) for root in (self.scratch, *PSEUDO_FILESYSTEMS))

    def _mapped(self, path, dir_fd=None):
        return os.path.join(self.scratch, "files", self._absolute(path, dir_fd).lstrip(os.sep))

    def _refuse(self, what, path):
        return PermissionError(13, f"ml-debug refused to {what} a path of yours while it runs your script (a script's "
                                   f"writes go to a scratch folder; nothing of yours is changed)", os.fsdecode(path))

    def summary(self, cwd):
        """One phrase for the report: which of the user's paths were written to scratch instead ('' when none)."""
        shown = [os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path for path in dict.fromkeys(self.written)]
        if not shown:
            return ""
        more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
        return f"its writes to {', '.join(shown[:3])}{more} went to a scratch folder, removed afterwards"

    def install(self):
        """Redirect for good (the child ends after the run); then ask the kernel to hold the line. Returns self."""
        import builtins
        import io
        import shutil
        import tempfile

        import torch
        guard, original = self, {name: getattr(os, name) for name in (
            "open", "remove", "unlink", "rmdir", "rename", "replace", "mkdir", "makedirs", "truncate", "chmod", "utime",
            "link", "symlink", "stat", "lstat", "access")}
        builtin_open, rmtree, save, load = builtins.open, shutil.rmtree, torch.save, torch.load
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

        def exists(path):  # with the original lstat: the patched one would ask the guard again
            try:
                original["lstat"](path)
            except OSError:
                return False
            return True

        def stand_in_of(path, dir_fd=None, ours_checked=True):
            """The stand-in of a user's path when the script made one (or one inside a folder it made), else None.

            ours_checked=False for the stat family, which realpath (in _ours) calls itself: a path of ours maps to a
            stand-in that never exists, so skipping the check changes nothing and cannot recurse."""
            if isinstance(path, int) or (ours_checked and guard._ours(path, dir_fd)):
                return None
            mapped = guard._mapped(path, dir_fd)
            return mapped if exists(mapped) else None

        def read_path(path, dir_fd=None):
            return stand_in_of(path, dir_fd) or path

        def write_path(path, dir_fd=None, copy_original=False):
            """Where a write to `path` lands: itself when ours, else its stand-in (made from the original when asked)."""
            if guard._ours(path, dir_fd):
                return path
            mapped = guard._mapped(path, dir_fd)
            if not exists(mapped):
                original["makedirs"](os.path.dirname(mapped), exist_ok=True)
                source = guard._absolute(path, dir_fd)
                if copy_original and os.path.isfile(source):
                    with builtin_open(source, "rb") as old, builtin_open(mapped, "wb") as new:
                        new.write(old.read())
            guard.written.append(guard._absolute(path, dir_fd))
            return mapped

        def user_exists(path, dir_fd=None):  # what the script would see: the stand-in, else the original
            return stand_in_of(path, dir_fd) is not None or exists(guard._absolute(path, dir_fd))

        def guarded_open(file, mode="r", *args, **kwargs):
            if isinstance(file, int):
                return builtin_open(file, mode, *args, **kwargs)
            if any(flag in mode for flag in "wax+"):
                if "x" in mode and not guard._ours(file) and user_exists(file):
                    raise FileExistsError(17, "File exists", os.fsdecode(file))
                file = write_path(file, copy_original="a" in mode or ("+" in mode and "w" not in mode))
            else:
                file = read_path(file)
            return builtin_open(file, mode, *args, **kwargs)

        def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
            if not flags & write_flags:
                stand_in = stand_in_of(path, dir_fd)
                return original["open"](stand_in, flags, mode) if stand_in else original["open"](path, flags, mode, dir_fd=dir_fd)
            if guard._ours(path, dir_fd):
                return original["open"](path, flags, mode, dir_fd=dir_fd)
            if flags & os.O_EXCL and user_exists(path, dir_fd):
                raise FileExistsError(17, "File exists", os.fsdecode(path))
            if user_exists(path, dir_fd):  # the stand-in of an existing file exists too, also for flags without O_CREAT
                flags |= os.O_CREAT
            return original["open"](write_path(path, dir_fd, copy_original=not flags & os.O_TRUNC), flags, mode)

        def on_own_or_stand_in(name, what):
            """os.remove and the like: on our files as asked, on a stand-in instead of the user's path, else refused."""
            function = original[name]

            def guarded(path, *args, dir_fd=None, **kwargs):
                if isinstance(path, int):  # a file descriptor: it was opened through the guard
                    return function(path, *args, **kwargs)
                if guard._ours(path, dir_fd):
                    return function(path, *args, dir_fd=dir_fd, **kwargs) if dir_fd is not None else function(path, *args, **kwargs)
                stand_in = stand_in_of(path, dir_fd)
                if stand_in is not None:
                    return function(stand_in, *args, **kwargs)
                raise guard._refuse(what, path)
            return guarded

        def looked_up(name):
            """os.stat, os.lstat, os.access: on the stand-in when the script made one, so it finds what it wrote."""
            function = original[name]

            def guarded(path, *args, dir_fd=None, **kwargs):
                stand_in = stand_in_of(path, dir_fd, ours_checked=False)
                if stand_in is not None:
                    return function(stand_in, *args, **kwargs)
                return function(path, *args, dir_fd=dir_fd, **kwargs) if dir_fd is not None else function(path, *args, **kwargs)
            return guarded

        def guarded_move(name):
            function = original[name]

            def guarded(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
                if guard._ours(src, src_dir_fd):
                    source = guard._absolute(src, src_dir_fd)
                else:
                    source = stand_in_of(src, src_dir_fd)
                    if source is None:
                        raise guard._refuse("move", src)
                return function(source, write_path(dst, dst_dir_fd))
            return guarded

        def guarded_mkdir(path, mode=0o777, *, dir_fd=None):
            if guard._ours(path, dir_fd):
                return original["mkdir"](path, mode, dir_fd=dir_fd)
            if user_exists(path, dir_fd):
                raise FileExistsError(17, "File exists", os.fsdecode(path))
            return original["makedirs"](write_path(path, dir_fd), mode, exist_ok=True)

        def guarded_makedirs(name, mode=0o777, exist_ok=False):
            if guard._ours(name):
                return original["makedirs"](name, mode, exist_ok)
            if not exist_ok and user_exists(name):
                raise FileExistsError(17, "File exists", os.fsdecode(name))
            return original["makedirs"](write_path(name), mode, exist_ok=True)

        def guarded_link(name):
            function = original[name]

            def guarded(src, dst, *args, **kwargs):
                return function(read_path(src) if name == "link" else src, write_path(dst), *args, **kwargs)
            return guarded

        def guarded_rmtree(path, *args, **kwargs):
            if guard._ours(path):
                return rmtree(path, *args, **kwargs)
            stand_in = stand_in_of(path)
            if stand_in is not None:
                return rmtree(stand_in, *args, **kwargs)
            if not kwargs.get("ignore_errors", args[0] if args else False):
                raise guard._refuse("remove", path)

        def guarded_save(obj, f, *args, **kwargs):
            return save(obj, write_path(f) if isinstance(f, (str, os.PathLike)) else f, *args, **kwargs)

        def guarded_load(f, *args, **kwargs):
            return load(read_path(f) if isinstance(f, (str, os.PathLike)) else f, *args, **kwargs)

        builtins.open = io.open = guarded_open
        os.open = guarded_os_open
        for name, what in (("remove", "remove"), ("unlink", "remove"), ("rmdir", "remove"),
                           ("truncate", "truncate"), ("chmod", "chmod"), ("utime", "touch")):
            setattr(os, name, on_own_or_stand_in(name, what))
        os.stat, os.lstat, os.access = looked_up("stat"), looked_up("lstat"), looked_up("access")
        os.rename, os.replace = guarded_move("rename"), guarded_move("replace")
        os.mkdir, os.makedirs = guarded_mkdir, guarded_makedirs
        os.link, os.symlink = guarded_link("link"), guarded_link("symlink")
        shutil.rmtree = guarded_rmtree
        torch.save = torch.serialization.save = guarded_save
        torch.load = torch.serialization.load = guarded_load
        scratch_tmp = os.path.join(self.scratch, "tmp")
        original["makedirs"](scratch_tmp, exist_ok=True)
        tempfile.tempdir = os.environ["TMPDIR"] = scratch_tmp  # temporary files: in scratch, also a subprocess's
        sys.dont_write_bytecode = True  # no __pycache__ beside the user's modules
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        self.kernel = landlock_writes_only_under([self.scratch, *PSEUDO_FILESYSTEMS])
        return self


# --- output paths: nothing of the user's is replaced -----------------------------------------------------
# DESIGN.md "Safety": an output path that is an input (also through a symlink or a hard link), a folder or a device is
# refused; an existing file is replaced only when told --force; in a folder of ours, only the files we wrote are ever
# removed, with or without --force.
KERNEL_TREES = ("/proc", "/sys", "/dev")  # the kernel's files and devices: never an output
OUTPUT_MANIFEST = ".ml-debug-files.json"  # in an output folder: the files the commands wrote there, with their sha256
OUTPUT_MANIFEST_KIND = "ml-debug output folder"


class OutputRefused(CaseError):
    """An output path that will not be written: its message is the one line to print, and the exit code is 2."""


def _shown(option, path):
    text = os.fsdecode(path).replace("\n", "\\n")  # a newline in a path must not make the message two lines
    return f"{option} {text}" if option else text


def _kernel_tree(path):
    real = os.path.realpath(path)
    return next((root for root in KERNEL_TREES if real == root or real.startswith(root + os.sep)), None)


def _where_problem(path, shown):
    """Why a path that does not exist cannot be made there (a folder above it is a file, or missing), or None."""
    tree = _kernel_tree(path)
    if tree:
        return f"{shown} is in {tree}, the kernel's files, not a place for an output: choose another path"
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        return f"{shown} is under {_shown(None, above)}, which is a file, not a folder: choose another path"
    return None


def output_file(path, force=False, inputs=(), option=None):
    """Check, before any work, that the command may write the file `path`; return it, or raise OutputRefused.

    Refused: a path in a folder that does not exist or under a file; in /proc, /sys or /dev; a dangling symlink;
    anything but a regular file (a folder, a device, a FIFO); one of `inputs` (compared by device and inode, so also
    through a symlink or a hard link), even with force; an existing file without force.
    """
    shown = _shown(option, path)
    if not os.fspath(path):
        raise OutputRefused(f"{option or 'the output'}: an empty path; give a file path")
    if not os.path.lexists(path):
        problem = _where_problem(path, shown)
        if problem is None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            problem = f"{shown}: the folder {_shown(None, os.path.dirname(os.path.abspath(path)))} does not exist"
        if problem:
            raise OutputRefused(problem)
        return path
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise OutputRefused(f"{shown} is a symlink to {_shown(None, os.readlink(path))}, which does not exist: remove "
                            "the link, or choose another path") from None
    except OSError as exc:
        raise OutputRefused(f"{shown}: cannot use it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise OutputRefused(f"{shown} is not a regular file (a folder, a device or a FIFO): give a file path")
    tree = _kernel_tree(path)
    if tree:
        raise OutputRefused(f"{shown} is in {tree}, the kernel's files, not a place for an output: choose another path")
    for source in inputs:
        try:
            same = os.path.samestat(os.stat(source), info)
        except (OSError, ValueError):
            continue
        if same:
            raise OutputRefused(f"{shown} is the input {_shown(None, source)} (the same file, also through a link): "
                                "refused, with or without --force")
    if not force:
        raise OutputRefused(f"{shown} exists; pass --force to replace it, or choose another path")
    return path


def sha256(path):
    """The file's SHA-256 as hex, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class OutputFolder:
    """A folder a command writes named files into, where only the files it wrote are ever replaced or removed.

    The folder's manifest (OUTPUT_MANIFEST) lists the files the commands wrote there, each with its sha256 when the
    command was done with it: such a file, a regular file still holding those bytes, is ours. Every other entry is
    the user's, and is never replaced or removed, with or without --force. The constructor checks and writes nothing:
    OutputRefused for a path that is not a folder (or cannot become one), for one of `names` (the files this run
    writes) that is there and not ours, and, without force, for a folder of the user's (no manifest) that holds
    anything. prepare() makes the folder and removes this command's earlier files among `names`; a file written
    with writing(name) is recorded in the manifest when the block ends, however it ends; record() records others.
    """

    def __init__(self, path, names, force=False, option="--out", tool=None):
        self.path, self.names = os.fspath(path), list(names)
        self.tool = tool or os.path.basename(sys.argv[0])
        self.shown = _shown(option, path)
        if not os.path.lexists(self.path):
            problem = _where_problem(self.path, self.shown)
            if problem:
                raise OutputRefused(problem)
            return
        if not os.path.exists(self.path):
            raise OutputRefused(f"{self.shown} is a symlink to {_shown(None, os.readlink(self.path))}, which does not "
                                "exist: remove the link, or choose another path")
        if not os.path.isdir(self.path):
            raise OutputRefused(f"{self.shown} is not a folder (a file, a device or a FIFO): give a folder path")
        tree = _kernel_tree(self.path)
        if tree:
            raise OutputRefused(f"{self.shown} is in {tree}, the kernel's files, not a place for an output")
        manifest = self._manifest()
        for name in self.names:
            entry = os.path.join(self.path, name)
            if os.path.lexists(entry) and not self.ours(name, manifest):
                kind = "a file" if os.path.isfile(entry) and not os.path.islink(entry) else "a folder or a device (or a link)"
                raise OutputRefused(f"{_shown(None, entry)} is {kind} that {self.tool} did not write: it is never "
                                    f"replaced, with or without --force; move it away, or choose another {option}")
        try:
            holds = os.listdir(self.path)
        except OSError as exc:
            raise OutputRefused(f"{self.shown}: cannot read the folder: {exc.strerror or exc}") from None
        if manifest is None and not force and holds:
            raise OutputRefused(f"{self.shown} already holds files that no ml-debug command wrote: choose an empty or "
                                "new folder, or pass --force to write into it (nothing of yours is replaced)")

    def _manifest(self):
        """{name: {"sha256", "tool"}} from the folder's manifest; None when there is none. OutputRefused when the
        manifest's name holds something else (a file of the user's by that name)."""
        where = os.path.join(self.path, OUTPUT_MANIFEST)
        if not os.path.lexists(where):
            return None
        try:
            with open(where, encoding="utf-8") as handle:
                data = json.load(handle) if os.path.isfile(where) and not os.path.islink(where) else None
        except (OSError, ValueError):
            data = None
        files = data.get("files") if isinstance(data, dict) and data.get("kind") == OUTPUT_MANIFEST_KIND else None
        if not isinstance(files, dict) or not all(isinstance(entry, dict) for entry in files.values()):
            raise OutputRefused(f"{_shown(None, where)} is not a manifest an ml-debug command wrote: the folder is not "
                                f"ours to write into; choose another {self.shown.split(' ')[0]}")
        return files

    def ours(self, name, manifest=None):
        """Whether the folder's `name` is a file a command wrote, unchanged since."""
        manifest = self._manifest() if manifest is None else manifest
        entry, where = (manifest or {}).get(name), os.path.join(self.path, name)
        if not entry or os.path.islink(where) or not os.path.isfile(where):
            return False
        try:
            return sha256(where) == entry.get("sha256")
        except OSError:
            return False

    def prepare(self):
        """Make the folder and remove this command's earlier files among `names`; returns the folder's path."""
        try:
            os.makedirs(self.path, exist_ok=True)
            with self._locked():
                manifest = self._manifest() or {}
                for name in self.names:
                    if name in manifest and manifest[name].get("tool") == self.tool and self.ours(name, manifest):
                        os.remove(os.path.join(self.path, name))
                        del manifest[name]
                self._write_manifest(manifest)
        except OSError as exc:
            raise OutputRefused(f"{self.shown}: cannot write into the folder: {exc.strerror or exc}") from None
        return self.path

    @contextlib.contextmanager
    def writing(self, name):
        """The path to write `name` at; recorded as ours when the block ends (also by an exception or Ctrl-C)."""
        try:
            yield os.path.join(self.path, name)
        finally:
            self.record(name)

    def record(self, *names):
        """Record the folder's `names` (regular files this command wrote) as ours, with their bytes as they are now."""
        try:
            with self._locked():
                manifest = self._manifest() or {}
                for name in names:
                    where = os.path.join(self.path, name)
                    if os.path.isfile(where) and not os.path.islink(where):
                        manifest[name] = {"sha256": sha256(where), "tool": self.tool}
                self._write_manifest(manifest)
        except OSError as exc:  # a full disk: the files are written, but the next run will take them for the user's
            raise OutputRefused(f"{self.shown}: cannot record the files written there in {OUTPUT_MANIFEST}: "
                                f"{exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _locked(self):
        """The manifest to ourselves: the ranks of dist_check record into one folder at once."""
        try:
            import fcntl
        except ImportError:  # not POSIX: one process at a time is all there is
            yield
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_manifest(self, manifest):
        """Replace the manifest in one rename: a run stopped half-way leaves the old one whole."""
        fd, temporary = tempfile.mkstemp(prefix=OUTPUT_MANIFEST + ".", dir=self.path)
        try:
            os.fchmod(fd, 0o644)  # as readable as the files it lists (mkstemp makes it private)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"kind": OUTPUT_MANIFEST_KIND, "files": manifest}, handle, indent=1, sort_keys=True)
            os.replace(temporary, os.path.join(self.path, OUTPUT_MANIFEST))
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise
