"""inplace: does an in-place op break the backward pass?

Symptom
    The first `loss.backward()` stops with `one of the variables needed for gradient
    computation has been modified by an inplace operation: [torch.FloatTensor [4, 16, 32]],
    which is output 0 of AddBackward0, is at version 1; expected version 0 instead`, and the
    traceback points into torch's autograd engine, not at your code; or the forward pass stops
    with `a leaf Variable that requires grad is being used in an in-place operation`. The
    usual causes: `x += f(x)` in a residual, `nn.ReLU(inplace=True)` after an op whose
    backward needs its output (sigmoid, tanh, softmax), `t[mask] = 0` or `t.mul_(...)` on an
    activation, or changing a parameter in place inside forward.

What it checks
    Runs one training step's forward pass, loss and backward (the mode as found) under a
    TorchFunctionMode that records every in-place op on a tensor autograd tracks (a method
    ending in `_`, `+=` and the other augmented assignments, `t[...] = v`, `inplace=True`),
    with the user's line and the module it ran in. When autograd refuses:

      backward   the step is re-run under torch.autograd.detect_anomaly (same RNG, grads
                 cleared), whose warning gives the forward line of the op that saved the
                 value (its backward node, e.g. NativeLayerNormBackward0). The in-place op
                 that changed it is the last one seen on a tensor of the error's shape at
                 the version the saved value expected. fail, naming both lines.
      forward    the in-place op refused (a leaf that requires grad): fail, naming its line.

    A line is the innermost frame outside torch; a model built from torch modules only
    (nn.Sequential) has none, and the module (its name in the model) is given instead. pass:
    the step ran. Any other error of the model or loss is raised, not judged.

Command
    python diagnostics/inplace.py                      # embedded demo (planted bug)
    python diagnostics/inplace.py --healthy            # its healthy twin
    python diagnostics/inplace.py --case my_case.py --json

Output
    $ python diagnostics/inplace.py
    [FAIL] inplace: backward fails: `mul_` at inplace.py:214 (in module DemoGate) changes a value saved for backward by MulBackward0 at inplace.py:212 (torch: modified by an inplace operation)
    (exit code 1)
    $ python diagnostics/inplace.py --healthy
    [PASS] inplace: forward and backward ran; no in-place op on a tensor autograd tracks
    (exit code 0)

How to read it
    The first file:line is the in-place op to rewrite; the second (saved_by_line) the op whose
    backward needed the old value; both can be the same line (`x += attn(ln_1(x))`: ln_1
    saved x). details["inplace_ops"] lists every in-place op seen, with its shape and the
    version of the tensor before it; details["culprit"] is the one that broke the step.

Next step
    PLAYBOOK.md#inplace. Write that op out of place: `x = x + f(x)`, `F.relu(x)`,
    `t = t.masked_fill(mask, 0)`, `g = g * 0.5`. In-place ops save memory only on values no
    backward needs; when unsure, do without them. Then run gradient_flow.
"""
import contextlib
import os
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import re
import traceback
import warnings

from ml_debug_contract import CheckResult, validate_case, forward, preserved, cli_main

INPLACE_ERRORS = ("modified by an inplace operation", "in-place operation", "is being modified inplace")  # torch's wordings
AUGMENTED = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__",
             "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__"}
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
SAVED_INFO = re.compile(r"\[(?:[\w.]+) \[([\d, ]*)\]\], which is output \d+ of (\w+), is at version (\d+); expected version (\d+)")
ANOMALY = re.compile(r"Error detected in (\w+)\. Traceback of forward call that caused the error:\n(.*)", re.S)
FRAME = re.compile(r'File "(.+?)", line (\d+), in (\S+)\n {4}(.*)')


def is_own(filename, line):
    """A line of this check's machinery (the step, the contract's forward), which calls the user's model."""
    codes = (forward.__code__, run_step.__code__, InplaceOps.__torch_function__.__code__)
    return any(os.path.abspath(filename) == os.path.abspath(code.co_filename) and line in {n for _, _, n in code.co_lines()}
               for code in codes)


def user_line(frames):
    """The innermost frame of the user's code between the model's call and the op, as file:line, or None.
    frames: (filename, line) pairs, outermost first. Frames in torch are not the user's; frames up to our own
    call of the model are not either (a model made of torch modules only has no line of its own)."""
    own = [i for i, (filename, line) in enumerate(frames) if is_own(filename, line)]
    inside = frames[own[0] + 1:] if own else frames
    for filename, line in reversed(inside):
        if not os.path.abspath(filename).startswith(TORCH_DIR + os.sep) and not is_own(filename, line) \
                and not filename.startswith("<"):
            return f"{os.path.basename(filename)}:{line}"
    return None


def stack_of(frame):
    """(filename, line) pairs of the live stack from `frame`, outermost first."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return frames[::-1]


class InplaceOps(torch.overrides.TorchFunctionMode):
    """Records every in-place op on a tensor autograd tracks: the op, the tensor's shape and version before it,
    the user's line and the module it ran in."""

    def __init__(self, module_stack):
        super().__init__()
        self.ops, self.module_stack = [], module_stack

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        inplace = (name.endswith("_") and not name.endswith("__")) or name in AUGMENTED or kwargs.get("inplace") is True
        target = args[0] if args else None
        if inplace and isinstance(target, torch.Tensor) and target.requires_grad:
            self.ops.append({"op": name + (" (inplace=True)" if kwargs.get("inplace") is True else ""),
                             "shape": list(target.shape), "version_before": target._version,
                             "line": user_line(stack_of(sys._getframe(1))),
                             "module": self.module_stack[-1] if self.module_stack else ""})
        return func(*args, **kwargs)


def run_step(case, module_stack, anomaly=False):
    """Forward, loss and backward once; returns (in-place ops seen, the in-place RuntimeError or None, anomaly warnings)."""
    model, (inputs, targets) = case["model"], case["batch"]
    ops = InplaceOps(module_stack)
    with warnings.catch_warnings(record=True) as caught, \
            torch.autograd.detect_anomaly(check_nan=False) if anomaly else contextlib.nullcontext():
        warnings.simplefilter("always")
        try:
            with ops:
                loss = case["loss_fn"](forward(model, inputs), targets)
            loss.backward()
            error = None
        except RuntimeError as exc:
            if not any(text in str(exc) for text in INPLACE_ERRORS):
                raise
            error = exc
    return ops.ops, error, [str(w.message) for w in caught]


def anomaly_site(messages):
    """(backward node, the user's forward line of the op that saved the tensor) from detect_anomaly's warning."""
    for message in messages:
        match = ANOMALY.search(message)
        if match:
            return match[1], user_line([(f, int(line)) for f, line, _, _ in FRAME.findall(match[2])])
    return None, None


def check_inplace(case):
    """Run one training step; if autograd refuses an in-place op, name the op's line and the line that needed the value."""
    case = validate_case(case)
    model = case["model"]
    module_stack = []
    names = {m: name or type(model).__name__ for name, m in model.named_modules()}
    rng = torch.get_rng_state()
    with preserved(model):
        for m in model.modules():  # a stack of the modules running, to name the module of an op in torch's own code
            m.register_forward_pre_hook(lambda module, args: module_stack.append(names[module]))
            m.register_forward_hook(lambda module, args, output: module_stack.pop() and None)
        ops, error, _ = run_step(case, module_stack)
        if error is None:
            lines = sorted({op["line"] or op["module"] for op in ops})
            return CheckResult("inplace", "pass", f"forward and backward ran; {len(ops)} in-place ops on tensors autograd tracks, "
                               "none on a value backward needs" if ops else "forward and backward ran; no in-place op on a "
                               "tensor autograd tracks", {"inplace_ops": len(ops), "inplace_lines": lines[:10]})
        in_backward = error.__traceback__ is not None and any(
            "backward" in frame.name for frame in traceback.extract_tb(error.__traceback__))
        node = saved_by = None
        if in_backward:
            for m in model.modules():
                m.zero_grad(set_to_none=True)
            module_stack.clear()
            torch.set_rng_state(rng)  # the same dropout masks as the first run
            _, _, messages = run_step(case, module_stack, anomaly=True)
            node, saved_by = anomaly_site(messages)
    details = {"error": str(error).split(" Hint:")[0], "inplace_ops": ops, "saved_by_node": node, "saved_by_line": saved_by}
    culprit = ops[-1] if ops and not in_backward else None  # a forward-time refusal: the op that raised is the last one seen
    info = SAVED_INFO.search(str(error))
    if in_backward and info:
        shape = [int(n) for n in info[1].split(",") if n.strip()]
        candidates = [op for op in ops if op["shape"] == shape and op["version_before"] == int(info[4])]
        culprit = candidates[-1] if candidates else None  # backward meets the last such op first
    details["culprit"] = culprit
    details["next"] = "write the op out of place (x = x + y, not x += y; F.relu(x), not inplace=True) on that line"
    where = (f"`{culprit['op']}`" + (f" at {culprit['line']}" if culprit["line"] else "") + f" (in module {culprit['module']})"
             if culprit else "an in-place op")
    if not in_backward:
        return CheckResult("inplace", "fail", f"{where} is refused by autograd in the forward pass: {details['error']}", details)
    needed = f" by {node}" + (f" at {saved_by}" if saved_by else "") if node else ""
    return CheckResult("inplace", "fail", f"backward fails: {where} changes a value saved for backward{needed} "
                       "(torch: modified by an inplace operation)", details)


class DemoGate(torch.nn.Module):
    """A gated MLP: sigmoid gates scale the hidden units."""

    def __init__(self, broken):
        super().__init__()
        self.broken = broken
        self.hidden, self.gate, self.out = torch.nn.Linear(8, 16), torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)

    def forward(self, x):  # (B, 8) -> (B, 3)
        g = torch.sigmoid(self.gate(x))
        h = torch.relu(self.hidden(x)) * g
        if self.broken:
            g.mul_(0.5)  # BUG: sigmoid and the product saved g; in place breaks backward # noqa: inplace-on-saved-output
        return self.out(h + g)


def make_demo_case(broken=True):
    """A 3-class gated MLP; the broken twin halves its gates in place after sigmoid has saved them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(16, 8)
        y = torch.randint(0, 3, (16,))
        model = DemoGate(broken)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 3}}


if __name__ == "__main__":
    sys.exit(cli_main(check_inplace, make_demo_case, __doc__))
