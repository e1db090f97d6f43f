"""doctor: run every check that applies to a training case, cheapest first, and say what to fix first.

Symptom
    The model "doesn't learn", learns too slowly, or the loss does something odd, and you do not
    know where to start. As Karpathy's recipe puts it, a misconfigured net "will train but
    silently work a bit worse" (evidence/karpathy-recipe.md#fails-silently): a wrong init,
    label or mask rarely crashes. The doctor runs the classic checks for those silent bugs on
    one batch and one model, in seconds, before you spend a real run.

What it checks
    Every check in the list CHECKS below, in that order (cheapest first: the data alone, then
    the weights, then forward passes, then gradients and training steps). To add a check, write
    diagnostics/<id>.py exposing check_<id>(case) and append (id, module name) to CHECKS; a
    one-line hint in details["next"] of a warn or fail is printed under it. Each check says
    pass, warn, fail or skip (with the reason it cannot apply, e.g. no chance level
    for task kind "other"). A check that raises on your model (its forward or loss errors, say)
    is reported as that check's `fail` with the error and the line in details, not as a crash:
    the error is a finding about your case. A check whose file is not next to doctor.py is a
    skip (copy the files you need together). The case itself must load: a missing file, a
    missing factory, a factory that raises or returns the wrong shape is a one-line error and
    exit code 2. Every check leaves the model as it found it (parameters, buffers, .grad, mode,
    hooks, RNG).

    A case is a Python file with a factory (default name make_case) returning
    {"model": nn.Module, "batch": (inputs, targets), "loss_fn": fn(output, targets),
     "optimizer": fn(params) (optional), "task": {"kind": ..., "num_classes": ...} (optional)};
    see DESIGN.md "A case". Task kinds: classification, regression, causal_lm, seq2seq, other.
    Other task hints the checks honour:
      batch_dim       where the rows are (default 0); 1 for a time-major (T, B) model, e.g. an
                      nn.LSTM or nn.Transformer without batch_first
      time_dim        where the positions are (default 1; 0 for time-major)
      clip_grad_norm  the max norm your loop clips gradients to (update_ratio, overfit_one_batch)
      lr_schedule     your LambdaLR's lr_lambda (step -> factor); the checks use its peak factor
                      over the first 10,000 steps, i.e. the lr after warmup
      target_inputs   the positions (tuple inputs) or names (dict inputs) of the model's arguments
                      that hold the loss's targets, e.g. [1] for nanoGPT's model(x, y); not judged
                      as inputs (input_dependence); --script sets it from the capture
      num_classes, vocab_size, ignore_index, pretrained   as in DESIGN.md
    A transformers user writes one line: `return case_from_hf(model, batch)` (diagnostics/
    hf_case.py) reads the kind, classes and vocabulary from the model and uses output.loss.

    Each check runs under a time limit (--timeout, default 120 s): one that runs past it is a
    fail naming it, and the others still run. Its wall time is details["seconds"] in --json and
    [N s] at the end of its line. A raising check names the innermost line of your own files
    (details["where"]); later checks that raise the same error at the same line are skips that
    point at the first. Ctrl-C ends the run with exit code 130; the case's folder is searched
    after ours, so its own labels.py cannot replace our labels check.

Command
    python diagnostics/doctor.py                          # embedded demo (planted bug)
    python diagnostics/doctor.py --healthy                # its healthy twin
    python diagnostics/doctor.py --case my_case.py:make_case --json
    python diagnostics/doctor.py --script train.py -- --lr 3e-4   # no case file: your script, stopped at its first step (capture.py)
    python diagnostics/doctor.py --case my_case.py --timeout 600    # a big model: more time per check

Output
    $ python diagnostics/doctor.py
    doctor: embedded demo (planted bug; --healthy for its twin)
      PASS  data_sanity        no NaN/inf, scale or dtype surprises in inputs float32[64, 20], targets int64[64] [0.1 s]
      PASS  init_scale         3 weights at 0.56x-0.58x 1/sqrt(fan_in) [0.0 s]
      PASS  labels             64 labels in 0..9, 0% masked, majority class 6 at 17%; most-confident wrong predictions in details [0.1 s]
      PASS  registration       all 13 modules and tensors reached are registered; none is held in a plain list, dict or attribute [0.0 s]
      PASS  batchnorm          no BatchNorm layer in the model: no batch statistics to go wrong [0.0 s]
      FAIL  init_loss          loss at init 13 (train mode) vs chance 2.3 (ln 10): 5.64x chance, the outputs are too large at init [0.0 s]
                               next: find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale
                               see PLAYBOOK.md#init-loss
      PASS  label_alignment    64 of 64 positions scored; no padding scored, no real class dropped [0.1 s]
      PASS  input_dependence   changing the input changes the output by 0.738 (relative) [0.0 s]
      PASS  inplace            forward and backward ran; no in-place op on a tensor autograd tracks [0.1 s]
      PASS  nan_watch          forward and backward finite over 7 module calls; largest activation 21 (fp16 headroom limit 10000) [0.1 s]
      PASS  gradient_flow      all 6 trainable parameters get finite, non-zero gradients [0.0 s]
      PASS  update_ratio       ratios 0.0024 .. 0.0042 over 3 weight matrices, all within 0.0001 .. 0.1 (~0.001) [5.8 s]
      PASS  batch_independence row 32 of 64 influences no other row (poison and gradient tests) [0.1 s]
      SKIP  causal_dependency  applies to task kind causal_lm; this case is 'classification' [0.0 s]
      PASS  overfit_one_batch  memorised 8 rows: loss 12.75 -> 0.1009 in 36 steps [0.2 s]
    1 fail, 0 warn, 13 pass, 1 skip. Fix the first fail first: later fails are often its consequences.
    (exit code 1)

How to read it
    Read the first fail first: checks run cheapest first, and a later fail is often a
    consequence of an earlier one (too-wide weights make the loss at init too high, for one). Each line
    is the check's summary; "next" says what to try, and the playbook entry explains the
    hypotheses behind it. --json prints {"checks": [{"id", "status", "summary", "details"}]}
    with the measurements in details. Exit code: 0 no fail, 1 at least one fail, 2 the case
    could not be loaded.

Next step
    Fix the first fail, then rerun the doctor. Each check is also a standalone file (e.g.
    python diagnostics/init_loss.py --case my_case.py) with its own tutorial in its docstring,
    and each has a playbook entry: PLAYBOOK.md#init-loss, PLAYBOOK.md#init-scale and so on
    (the check id with hyphens).
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

import sysconfig  # where installed libraries live (doctor only: the shared imports come first)
import time

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

CHECKS = [  # (id, module) in cost order; the module defines check_<id>(case) -> CheckResult
    ("data_sanity", "data_sanity"),  # the batch alone
    ("init_scale", "init_scale"),  # the weights alone
    ("labels", "labels"),  # one forward pass
    ("registration", "registration"),  # one forward pass, no gradients
    ("batchnorm", "batchnorm"),  # one forward pass, no gradients
    ("init_loss", "init_loss"),  # one to three forward passes
    ("label_alignment", "label_alignment"),  # one forward pass and a backward pass to the logits
    ("input_dependence", "input_dependence"),  # two or more forward passes
    ("inplace", "inplace"),  # one forward and backward pass (twice, with anomaly detection, when it fails)
    ("nan_watch", "nan_watch"),  # one forward and backward pass, hooked
    ("gradient_flow", "gradient_flow"),  # one backward pass (two if some grads are zero)
    ("update_ratio", "update_ratio"),  # one backward pass and one optimizer step
    ("batch_independence", "batch_independence"),  # two forward passes and one backward pass
    ("causal_dependency", "causal_dependency"),  # three forward passes and three backward passes
    ("overfit_one_batch", "overfit_one_batch"),  # up to 2 x 300 training steps
]


def user_frame(traceback):
    """The innermost frame of the traceback in the user's files (not Python's, torch's, an installed package's or ours)."""
    library = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    library = tuple(os.path.realpath(path) + os.sep for path in library | {os.path.dirname(os.path.abspath(__file__))} if path)
    frames = []
    while traceback is not None:
        frames.append(traceback)
        traceback = traceback.tb_next
    ours = [tb for tb in frames if not os.path.realpath(tb.tb_frame.f_code.co_filename).startswith(library)]
    frame = (ours or frames)[-1]
    code = frame.tb_frame.f_code
    return f"{code.co_filename}:{frame.tb_lineno} in {code.co_name}"


class Interrupted(BaseException):
    """Ctrl-C (a real SIGINT to the doctor), told apart from a KeyboardInterrupt that the user's code raises itself."""


def run_checks(case, checks=None, timeout=None):
    """Run the checks on a case in order, each within `timeout` seconds; a check that raises becomes its own `fail`, once.

    Each result gets details["seconds"], the check's wall time.
    """
    results, errors = [], {}  # errors: (error type, where) -> the first check that raised it
    for check_id, module_name in checks or CHECKS:
        started = time.perf_counter()
        try:
            with time_limit(timeout):
                result = getattr(importlib.import_module(module_name), f"check_{check_id}")(case)
        except CheckTimeout:  # preserved() inside the check restored the model on the way out
            result = CheckResult(check_id, "fail", f"ran past the {timeout:g} s time limit (--timeout) and was stopped",
                                 {"next": "a forward or loss that hangs or is far slower than one batch should be; "
                                          "or raise --timeout for a big model"})
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the user's code raised inside the check: a finding
            if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
                result = CheckResult(check_id, "skip", f"{module_name}.py is not next to doctor.py: copy it there to run this check")
            else:
                error, where = f"{type(exc).__name__}: {exc}", user_frame(exc.__traceback__)
                first = errors.setdefault((type(exc).__name__, where), check_id)  # same type at the same line: same bug
                if first != check_id:  # one bug, one line: the same error again is not a second finding
                    result = CheckResult(check_id, "skip", f"raised the same error as {first}", {"error": error, "where": where})
                else:
                    result = CheckResult(check_id, "fail", f"the check raised {error} at {where}",
                                         {"error": error, "where": where,
                                          "next": "fix this error first: the model or loss cannot run on the batch as given"})
        result.details["seconds"] = round(time.perf_counter() - started, 2)
        results.append(result)
    return results


def report(results, title):
    """The short readable report: one line per check, what to try next and the playbook entry for warn/fail."""
    lines = [f"doctor: {title}"]
    width = max((len(result.id) for result in results), default=0)
    indent = " " * (2 + 5 + 1 + width + 1)  # under the summary
    for result in results:
        seconds = result.details.get("seconds")
        lines.append(f"  {result.status.upper():5} {result.id:{width}} {result.summary}"
                     + (f" [{seconds:.1f} s]" if seconds is not None else ""))
        if result.status in ("fail", "warn"):
            if result.details.get("next"):
                lines.append(f"{indent}next: {result.details['next']}")
            lines.append(f"{indent}see PLAYBOOK.md#{result.id.replace('_', '-')}")
    counts = {status: sum(r.status == status for r in results) for status in ("fail", "warn", "pass", "skip")}
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items()) + "."
                 + (" Fix the first fail first: later fails are often its consequences." if counts["fail"] else ""))
    return "\n".join(lines)


class DemoClassifier(torch.nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 10))
        self.temperature = temperature

    def forward(self, x):
        return self.net(x) / self.temperature


def make_demo_case(broken=True):
    """A 10-class MLP on a linear teacher's labels; the broken twin divides its logits by a sampling temperature."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(64, 20)
        y = (x @ torch.randn(20, 10)).argmax(dim=1)
        temperature = 1.0
        if broken:
            temperature = 0.02  # BUG: a sampling temperature used in training: the logits come out 50x too large
        model = DemoClassifier(temperature)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help="path/to/case.py[:factory] returning the case dict (default factory: make_case); "
                        "without it, runs the embedded demo with a planted bug")
    parser.add_argument("--healthy", action="store_true", help="run the embedded demo's healthy twin instead")
    parser.add_argument("--json", action="store_true", help='print {"checks": [...]} as JSON')
    parser.add_argument("--script", help="path/to/train.py [-- ARGS...]: run your training script until its first optimizer "
                        "step and check the model, batch, loss and optimizer it was using (capture.py)")
    parser.add_argument("--timeout", type=float, default=CHECK_TIMEOUT, help=f"seconds each check may run (default {CHECK_TIMEOUT:g}; 0: no limit)")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the arguments of the --script
    args = parser.parse_args(argv[:cut])
    if args.script and args.case:
        parser.error("give --script or --case, not both")
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")

    def interrupt(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGINT, interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        # with --json, stdout carries only the JSON object: whatever the case prints goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            try:
                if args.script:
                    import capture  # only --script needs capture.py next to doctor.py
                    try:
                        case = validate_case(capture.capture_script(args.script, argv[cut + 1:]), args.script)
                    except capture.CaptureError as exc:
                        raise CaseError(exc) from None
                else:
                    case = load_case(args.case) if args.case else validate_case(make_demo_case(broken=not args.healthy), "demo")
            except CaseError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            results = run_checks(case, timeout=args.timeout or None)
        title = case.get("captured") or args.case or f"embedded demo ({'healthy twin' if args.healthy else 'planted bug; --healthy for its twin'})"
        text = json.dumps({"checks": [r.to_dict() for r in results]}, indent=2, default=str) if args.json else report(results, title)
        try:
            print(text, flush=True)
        except (BrokenPipeError, OSError):  # `| head` closed stdout, or /dev/full: nothing left to say it on
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1 if any(r.status == "fail" for r in results) else 0
    except Interrupted:
        return 130  # Ctrl-C: quietly, as a shell expects
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
