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
    the error is a finding about your case. A batch whose forward costs more than CHECK_FLOPS (4
    GFLOP: one resnet18 image at 224x224) is cut to its first rows, never below 2, for every
    check from the first forward on (labels) but update_ratio; the report's first line says so,
    and --json's details["batch_cut"] of each check that ran on it.
    A check whose file is not next to doctor.py is a
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
      graph           the batch is one graph whose rows are its nodes (node classification): set
                      by itself when an input is an adjacency (N, N) or an edge list (2, E) of the N
                      rows; batch_independence skips, the row-slicing checks keep every node
      num_classes, vocab_size, ignore_index, pretrained   as in DESIGN.md
    On the command line, --task KEY=VALUE ... sets any of these but lr_schedule, over what the case
    file or the capture says (a time-major script: --task batch_dim=1 time_dim=0).
    A transformers user writes one line: `return case_from_hf(model, batch)` (diagnostics/
    hf_case.py) reads the kind, classes and vocabulary from the model and uses output.loss.

    Your code runs in a child process the doctor supervises (Linux): the case file or script has
    --start-timeout seconds (default 300) to load or reach its first step, and the child is killed
    at a time limit whatever the code does (threads, forks, ignored signals, reads of stdin);
    sys.exit, os._exit or an exception of your code ends in one line and exit code 2. Under
    --script every write the script attempts goes to a scratch folder, removed afterwards, or is
    refused (the kernel refuses the rest where it offers Landlock): your files are as they were.
    Each check runs under a time limit (--timeout, default 120 s): one that runs past it is a
    skip that says it is inconclusive (a budget run out is no verdict), and the others still run. Its wall time is details["seconds"] in --json and
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
      PASS  data_sanity        no NaN/inf, scale or dtype surprises in inputs float32[64, 20], targets int64[64] [0.0 s]
      PASS  init_scale         3 weights at 0.56x-0.58x 1/sqrt(fan_in) [0.0 s]
      PASS  labels             64 labels in 0..9, 0% masked, majority class 6 at 17%; most-confident wrong predictions in details [0.1 s]
      PASS  registration       all 13 modules and tensors reached are registered; none is held in a plain list, dict or attribute [0.0 s]
      PASS  batchnorm          no BatchNorm layer in the model: no batch statistics to go wrong [0.0 s]
      SKIP  training_loop      needs what your training loop did: run it under `doctor --script train.py` (a case file has no loop to look at) [0.0 s]
      FAIL  init_loss          loss at init 13 (train mode) vs chance 2.3 (ln 10): 5.64x chance, the outputs are too large at init: after 20 steps of your optimizer it is at 4.49, where the same model with its outputs scaled by 0.125 starts at 2.64 [0.1 s]
                               next: find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale
                               see PLAYBOOK.md#init-loss
      PASS  label_alignment    64 of 64 positions scored; no padding scored, no real class dropped [0.1 s]
      PASS  input_dependence   changing the input changes the output by 0.738 (relative) [0.1 s]
      PASS  inplace            forward and backward ran; no in-place op on a tensor autograd tracks [0.2 s]
      PASS  nan_watch          forward and backward finite over 7 module calls; largest activation 21 (fp16 headroom limit 10000) [0.2 s]
      PASS  gradient_flow      all 6 trainable parameters get finite, non-zero gradients [0.2 s]
      PASS  update_ratio       ratios 0.0024 .. 0.0042 over 3 weight matrices, all within 0.0001 .. 0.1 (~0.001) [4.0 s]
      PASS  batch_independence row 32 of 64 influences no other row (poison and gradient tests) [0.2 s]
      SKIP  causal_dependency  applies to task kind causal_lm; this case is 'classification' [0.0 s]
      SKIP  target_leak        no input carries the targets: nothing the model could read its answers from [0.0 s]
      PASS  overfit_one_batch  memorised 8 rows: loss 12.75 -> 0.1009 in 36 steps [6.2 s]
    1 fail, 0 warn, 13 pass, 3 skip. Fix the first fail first: later fails are often its consequences.
    (exit code 1)

How to read it
    Read the first fail first: checks run cheapest first, and a later fail is often a
    consequence of an earlier one (too-wide weights make the loss at init too high, for one). Each line
    is the check's summary; "next" says what to try, and the playbook entry explains the
    hypotheses behind it. A check whose code raised is a fail that names your line; on a GPU, a
    device-side assert (an index out of range, such as a label >= the number of classes) leaves
    CUDA unusable in the process, so the checks after it are skips that say so. --json prints
    {"checks": [{"id", "status", "summary", "details"}]} with the measurements in details.
    Exit code: 0 no fail, 1 at least one fail (or a full stdout that lost the report), 2 the case
    could not be loaded.

Next step
    Fix the first fail, then rerun the doctor. Each check is also a file of its own (e.g.
    python diagnostics/init_loss.py --case my_case.py; it imports ml_debug_contract.py from
    beside it) with its own tutorial in its docstring, and each has a playbook entry:
    PLAYBOOK.md#init-loss, PLAYBOOK.md#init-scale and so on (the check id with hyphens).
"""
import argparse
import importlib.util
import os
import shutil
import signal
import sys
import sysconfig  # where installed libraries live
import tempfile
import threading
import time

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (CHECK_TIMEOUT, SUPERVISED, USER_CODE_LIMIT, ArgumentParser, CaseError, CheckResult,
                               CheckTimeout, SupervisedError, WriteGuard, batch_rows, count_rows, forward, json_text,
                               load_case, preserved, stdout_lost, supervised, time_limit, validate_case)

TASK_HINTS = {  # the hints --task may set: what each value must be
    "kind": "one of classification, regression, causal_lm, seq2seq, other", "num_classes": "an integer",
    "vocab_size": "an integer", "ignore_index": "an integer", "batch_dim": "0 or 1", "time_dim": "0 or 1",
    "clip_grad_norm": "a number", "pretrained": "true or false", "graph": "true or false"}


def task_hints(pairs):
    """`--task KEY=VALUE ...` as a dict of typed hints; ValueError (one line) for an unknown key or a bad value."""
    hints = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in TASK_HINTS:
            raise ValueError(f"--task takes KEY=VALUE with KEY one of {', '.join(TASK_HINTS)}; got {pair!r}")
        try:
            if key == "kind":
                if text not in ("classification", "regression", "causal_lm", "seq2seq", "other"):
                    raise ValueError
                value = text
            elif key in ("pretrained", "graph"):
                value = {"true": True, "false": False}[text.lower()]
            elif key == "clip_grad_norm":
                value = float(text)
                if not 0 < value < float("inf"):
                    raise ValueError
            else:
                value = int(text)
                if key in ("batch_dim", "time_dim") and value not in (0, 1) or key in ("num_classes", "vocab_size") and value < 1:
                    raise ValueError
        except (ValueError, KeyError):
            raise ValueError(f"--task {key} must be {TASK_HINTS[key]}; got {text!r}") from None
        hints[key] = value
    return hints


CHECKS = [  # (id, module) in cost order; the module defines check_<id>(case) -> CheckResult
    ("data_sanity", "data_sanity"),  # the batch alone
    ("init_scale", "init_scale"),  # the weights alone
    ("labels", "labels"),  # one forward pass
    ("registration", "registration"),  # one forward pass, no gradients
    ("batchnorm", "batchnorm"),  # one forward pass, no gradients
    ("training_loop", "training_loop"),  # what --script's loop did; two forward passes when it trained in eval mode
    ("init_loss", "init_loss"),  # one to three forward passes
    ("label_alignment", "label_alignment"),  # one forward pass and a backward pass to the logits
    ("input_dependence", "input_dependence"),  # two or more forward passes
    ("inplace", "inplace"),  # one forward and backward pass (twice, with anomaly detection, when it fails)
    ("nan_watch", "nan_watch"),  # one forward and backward pass, hooked
    ("gradient_flow", "gradient_flow"),  # one backward pass (two if some grads are zero)
    ("update_ratio", "update_ratio"),  # one backward pass and one optimizer step
    ("batch_independence", "batch_independence"),  # two forward passes and one backward pass
    ("causal_dependency", "causal_dependency"),  # three forward passes and three backward passes
    ("target_leak", "target_leak"),  # two forward passes per input that carries the targets
    ("overfit_one_batch", "overfit_one_batch"),  # up to 2 x 300 training steps
]


# The checks take some 30 forward and backward passes between them, and overfit_one_batch up to 2 x 300 steps on 8 rows.
# A batch whose forward costs more than CHECK_FLOPS is cut to its first rows for them, counted in FLOPs (the same cut on
# any machine, as a verdict must be), never below MIN_ROWS.
CHECK_FLOPS = 4e9  # one forward of the checks' batch: 4 GFLOP, one resnet18 row at 224x224 (3.6 GFLOP, 0.07 s on one CPU
# core); 4 rows of it took the doctor 36 s on imagenet/main.py --dummy -b 4, 26 s of it in the checks (measured)
MIN_ROWS = 2  # batch_independence compares rows, and BatchNorm needs two to normalise in train mode
ON_THE_BATCH_AS_GIVEN = ("data_sanity", "init_scale")  # they judge the data and the weights, before any forward
WHOLE_BATCH = ("update_ratio",)  # its overshoot experiment needs the batch the run steps on: 10 steps at lr 1.6 (SGD with
# momentum, resnet18) raised the loss on 4 rows from 6.9 to 299 and back to 1e-4 on the first 2 of them, not on all 4 (measured)


def within_budget(case):
    """(case, cut): the case with its batch cut to the rows one forward may cost (CHECK_FLOPS, at least MIN_ROWS), and
    {"rows", "of", "gflop_a_row"}; the case itself and None when the batch fits, is one graph (its nodes need their
    edges), or the forward or the cut batch's loss raises (the checks then meet the batch as given, and the error)."""
    from torch.utils.flop_counter import FlopCounterMode

    inputs, targets = case["batch"]
    bdim = case["task"].get("batch_dim", 0)
    n = count_rows(inputs, bdim)
    if n <= MIN_ROWS or case["task"].get("graph"):
        return case, None
    counter = FlopCounterMode(display=False)
    try:
        with preserved(case["model"]), torch.no_grad():  # BatchNorm's running statistics and the RNG as they were
            with counter:
                forward(case["model"], inputs)
            rows = max(MIN_ROWS, int(CHECK_FLOPS * n // max(counter.get_total_flops(), 1)))
            if rows >= n:
                return case, None
            batch = batch_rows(inputs, n, 0, rows, bdim), batch_rows(targets, n, 0, rows, bdim, flattened=True)
            case["loss_fn"](forward(case["model"], batch[0]), batch[1])
    except Exception:  # the user's forward or loss: the checks meet it and say so
        return case, None
    return dict(case, batch=batch), {"rows": rows, "of": n, "gflop_a_row": round(counter.get_total_flops() / n / 1e9, 3)}


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


# CUDA errors that are sticky: once raised, every later CUDA call in the process fails the same way
DEVICE_LOST = ("device-side assert triggered", "an illegal memory access was encountered", "unspecified launch failure")
DEVICE_LOST_NEXT = ("a device-side assert is most often an index out of range: a label >= the number of classes (see "
                    "labels) or a token id >= the embedding's size; the CPU names it: run the doctor with "
                    "CUDA_VISIBLE_DEVICES= (no GPU), or with CUDA_LAUNCH_BLOCKING=1 for the op that failed")


def cuda_device_lost(exc):
    """Whether `exc` is a sticky CUDA error: the device is unusable for the rest of this process."""
    return isinstance(exc, RuntimeError) and any(words in str(exc) for words in DEVICE_LOST)


def run_checks(case, checks=None, timeout=None, started=None, finished=None, budget=False):
    """Run the checks on a case in order, each within `timeout` seconds; a check that raises becomes its own `fail`, once.

    Each result gets details["seconds"], the check's wall time. started(check_id) and finished(result), when given,
    are called around each check (the supervised child tells the parent with them). budget: the first check that runs
    the model (not one of ON_THE_BATCH_AS_GIVEN) first cuts the batch to CHECK_FLOPS (within_budget), inside its own
    time limit and error handling, as the forward is the user's code; it and every later check but WHOLE_BATCH then run
    on the cut batch, and say so in details["batch_cut"].
    """
    results, errors = [], {}  # errors: (error type, where) -> the first check that raised it
    cut, rows, device_lost = case, None, None  # device_lost: the check whose CUDA error left the device unusable
    for check_id, module_name in checks or CHECKS:
        if started is not None:
            started(check_id)
        began, runs_on = time.perf_counter(), case
        if device_lost is not None:
            result = CheckResult(check_id, "skip", f"not run: the CUDA device stopped working in {device_lost} (after a "
                                 "device-side error every CUDA call in this process fails)")
            result.details["seconds"] = 0.0
            results.append(result)
            if finished is not None:
                finished(result)
            continue
        try:
            with time_limit(timeout):
                if budget and check_id not in ON_THE_BATCH_AS_GIVEN:
                    budget = False
                    cut, rows = within_budget(case)
                runs_on = cut if rows and check_id not in WHOLE_BATCH else case
                result = getattr(importlib.import_module(module_name), f"check_{check_id}")(runs_on)
        except CheckTimeout:  # preserved() inside the check restored the model on the way out; a budget run out: no verdict
            result = CheckResult(check_id, "skip", f"inconclusive: ran past the {timeout:g} s time limit (--timeout) and was "
                                 "stopped", {"next": "a forward or loss that hangs or is far slower than one batch should be; "
                                                     "or raise --timeout for a big model"})
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the user's code raised inside the check: a finding
            if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
                result = CheckResult(check_id, "skip", f"{module_name}.py is not next to doctor.py: copy it there to run this check")
            else:
                error, where = f"{type(exc).__name__}: {exc}", user_frame(exc.__traceback__)
                first = errors.setdefault((type(exc).__name__, where), check_id)  # same type at the same line: same bug
                if cuda_device_lost(exc):
                    device_lost = check_id
                    result = CheckResult(check_id, "fail", f"the check raised {type(exc).__name__}: {str(exc).splitlines()[0]} at {where}: a CUDA "
                                         "device-side error, which leaves the device unusable, so the checks after "
                                         "this one were not run",
                                         {"error": error, "where": where, "next": DEVICE_LOST_NEXT})
                elif first != check_id:  # one bug, one line: the same error again is not a second finding
                    result = CheckResult(check_id, "skip", f"raised the same error as {first}", {"error": error, "where": where})
                else:
                    result = CheckResult(check_id, "fail", f"the check raised {error} at {where}",
                                         {"error": error, "where": where,
                                          "next": "fix this error first: the model or loss cannot run on the batch as given"})
        result.details["seconds"] = round(time.perf_counter() - began, 2)
        if runs_on is not case:
            result.details["batch_cut"] = rows
        results.append(result)
        if finished is not None:
            finished(result)
    return results


def examine(args, script_args):
    """Load the case (or capture the script) and run the checks in a supervised child: (title, results) or an error line.

    The child's writes under --script go to a scratch folder, removed afterwards (WriteGuard). A check the child
    could not finish (killed at its time limit, or the process ended inside it) is that check's fail; the checks
    after it are skips that say so.
    """
    scratch = tempfile.mkdtemp(prefix="ml-debug-scratch-") if args.script else None
    timeout = args.timeout or None

    def work(send):
        if args.script:
            import capture  # only --script needs capture.py next to doctor.py
            guard = WriteGuard(scratch).install() if SUPERVISED else None  # for good: only in a child
            try:
                captured = capture.capture_script(args.script, script_args, args.start_timeout, skip_saves=guard is None,
                                                  second_step=guard is not None)
            except capture.CaptureError as exc:
                raise CaseError(exc) from None
            except KeyboardInterrupt as exc:  # not a Ctrl-C of the user's: that one reaches the parent only
                raise CaseError(f"{args.script} raised KeyboardInterrupt before its first optimizer step: {exc}") from None
            case = validate_case(captured, args.script)
            title = "; ".join(filter(None, [case["captured"], guard and guard.summary(os.getcwd())]))
        else:
            case, title = load_case(args.case), args.case
        case["task"] = {**case["task"], **args.task}
        send("title", title)
        run_checks(case, timeout=timeout, started=lambda check_id: send("phase", [check_id, timeout]),
                   finished=lambda result: send("result", result.to_dict()), budget=True)
        return title

    first = f"{os.path.basename(args.script)} before its first optimizer step" if args.script else f"loading {args.case}"
    ids = [check_id for check_id, _ in CHECKS]
    results = []
    try:
        for kind, payload in supervised(work, first, args.start_timeout, stdout_to_stderr=args.json):
            if kind == "result":
                results.append(CheckResult(**payload))
            elif kind == "error":
                return payload
            elif kind == "done":
                return payload, results
    except SupervisedError as exc:
        if exc.phase not in ids:
            return str(exc)
        if exc.timed_out:  # a budget run out: inconclusive, as the soft time limit says it too
            results.append(CheckResult(exc.phase, "skip", f"inconclusive: {exc}", {
                "next": "a forward or loss that hangs or ignores the time limit; or raise --timeout for a big model"}))
        else:  # the user's code ended the process inside the check: a finding, as a raise is
            results.append(CheckResult(exc.phase, "fail", f"stopped: {exc}", {
                "next": "the model or loss ends the process (os._exit, a crash in an extension): run it alone"}))
        results += [CheckResult(later, "skip", f"not run: the doctor stopped at {exc.phase}")
                    for later in ids[ids.index(exc.phase) + 1:]]
        return exc.phase, results
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)  # our own folder: what the script wrote went there


def report(results, title):
    """The short readable report: one line per check, what to try next and the playbook entry for warn/fail."""
    first_cut = next((result for result in results if "batch_cut" in result.details), None)
    if first_cut is not None:
        cut = first_cut.details["batch_cut"]
        title = (f"{title}; from {first_cut.id} on, every check but {', '.join(WHOLE_BATCH)} ran on the first "
                 f"{cut['rows']} of {cut['of']} rows: a forward costs {cut['gflop_a_row']:g} GFLOP a row (budget "
                 f"{CHECK_FLOPS / 1e9:g} GFLOP)")
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
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help="path/to/case.py[:factory] returning the case dict (default factory: make_case); "
                        "without it, runs the embedded demo with a planted bug")
    parser.add_argument("--healthy", action="store_true", help="run the embedded demo's healthy twin instead")
    parser.add_argument("--json", action="store_true", help='print {"checks": [...]} as JSON')
    parser.add_argument("--script", help="path/to/train.py [-- ARGS...]: run your training script until its first optimizer "
                        "step and check the model, batch, loss and optimizer it was using (capture.py)")
    parser.add_argument("--timeout", type=float, default=CHECK_TIMEOUT, help=f"seconds each check may run (default {CHECK_TIMEOUT:g}; 0: no limit)")
    parser.add_argument("--task", nargs="+", default=[], metavar="KEY=VALUE",
                        help=f"task hints that override the case's or the capture's ({', '.join(TASK_HINTS)}), "
                             "e.g. --task batch_dim=1 time_dim=0 for a time-major model")
    parser.add_argument("--start-timeout", type=float, default=USER_CODE_LIMIT,
                        help=f"seconds the case file may take to load, or the script to reach its first optimizer step "
                             f"(default {USER_CODE_LIMIT:g})")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the arguments of the --script
    args = parser.parse_args(argv[:cut])
    if args.script and args.case:
        parser.error("give --script or --case, not both")
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")
    if not 0 < args.start_timeout < float("inf"):
        parser.error("--start-timeout must be a number of seconds > 0")
    try:
        args.task = task_hints(args.task)
    except ValueError as exc:
        parser.error(str(exc))

    def interrupt(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGINT, interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        if args.script or args.case:  # user code: in a supervised child
            outcome = examine(args, argv[cut + 1:])
            if isinstance(outcome, str):
                print(f"error: {outcome}", file=sys.stderr)
                return 2
            title, results = outcome
        else:
            case = validate_case(make_demo_case(broken=not args.healthy), "demo")
            case["task"] = {**case["task"], **args.task}
            results = run_checks(case, timeout=args.timeout or None)
            title = f"embedded demo ({'healthy twin' if args.healthy else 'planted bug; --healthy for its twin'})"
        text = json_text({"checks": [r.to_dict() for r in results]}) if args.json else report(results, title)
        code = 1 if any(r.status == "fail" for r in results) else 0
        try:
            print(text, flush=True)
        except OSError as exc:  # `| head` left: the verdict's code; /dev/full lost the report: 1
            return stdout_lost(exc, code)
        return code
    except Interrupted:
        return 130  # Ctrl-C: quietly, as a shell expects
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
