"""Rules on gradient accumulation: several micro-batches' backward() add into .grad before one optimizer step.

A loop accumulates when it is written in one of two ways the rules can be sure of:

    for i, (x, y) in enumerate(loader):           # the step is guarded by a remainder, backward() is not
        (loss_fn(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()

    for _ in range(k):                             # an inner loop of micro-batches, the step after it
        (model(next(batches)) / k).backward()
    optimizer.step()

and accelerate's `with accelerator.accumulate(model):` accumulates when its Accelerator was given
gradient_accumulation_steps. Lightning's `Trainer(accumulate_grad_batches=k)` and DeepSpeed's engine
(`engine.backward(loss); engine.step()`) scale, clip, step and zero by themselves: nothing to check."""
import ast
from dataclasses import dataclass

from ..registry import rule
from ..source import memo
from ..syntax import dotted, method_call, terminal
from ..torch_names import RESHAPES
from .step_order import same_object

ACCELERATE_STEPS = ("gradient_accumulation_steps", "gradient_accumulation_plugin")  # Accelerator(...) keywords
BEFORE_THE_STEP = ("clip", "unscale")  # what may come between the last micro-batch and the step: nanoGPT's clip
PLUGINS = ("deepspeed_plugin", "deepspeed_plugins")  # carry their own gradient_accumulation_steps


@dataclass(frozen=True)
class Accumulation:
    micro: ast.AST  # the loop one pass of which is one micro-batch
    guard: ast.AST  # the `if` that lets the optimizer step once every k passes (None for an inner loop)
    every: ast.AST  # k as written, or None when the code does not say
    step: object  # the first optimizer step Event

    def in_micro_batch(self, src, node, allowed=()):
        """node, a node of the micro loop, runs on every micro-batch: under no `if` but those whose condition
        names one of the allowed words (`if args.max_grad_norm:` for a clip)."""
        child, p = node, src.parent[node]
        while p is not self.micro:
            if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test and not any(
                    word in (dotted(n) or "").lower() for n in ast.walk(p.test) for word in allowed):
                return False
            child, p = p, src.parent[p]
        return True

    def how_often(self):
        return f"once every {ast.unparse(self.every)} micro-batches" if self.every is not None else "after the micro-batches"


def remainder(src, test):
    """The `a % k` a condition decides by, directly or through a name set from one (`last = (i + 1) % k == 0`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name):
            value = src.definition(node)
            found = remainder(src, value) if value is not None and not isinstance(value, ast.Name) else None
            if found is not None:
                return found
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and \
                not isinstance(node.left, (ast.Constant, ast.JoinedStr)):  # not "%d" % x
            return node
    return None


def guards(src, node, loop):
    """The ifs between node and loop whose condition takes a remainder, innermost first."""
    found, child, p = [], node, src.parent[node]
    while p is not loop:
        if isinstance(p, ast.If) and child is not p.test and remainder(src, p.test) is not None:
            found.append(p)
        child, p = p, src.parent[p]
    return found


def innermost(src, node):
    loops = src.enclosing_loops(node)
    return loops[0] if loops else None


@memo
def accumulation(src, loop):
    """The Accumulation loop runs, or None when it does not accumulate (or the code leaves a doubt)."""
    own = [e for e in src.events(loop) if innermost(src, e.node) is loop]
    if not {"step", "backward"} <= {e.kind for e in own} and may_accumulate(src, loop):  # what its calls run elsewhere
        own = sorted(own + [e for n in src.local(loop) if isinstance(n, ast.Call) and innermost(src, n) is loop
                            for e in src.outside_events(n, False)], key=lambda e: e.pos)
    steps = [e for e in own if e.kind == "step"]
    backwards = [e for e in own if e.kind == "backward"]
    if steps and backwards:
        guard = next(iter(guards(src, steps[0].node, loop)), None)
        if guard is None or not all(guard in guards(src, s.node, loop) for s in steps):
            return None  # a step on every pass, or one under another condition
        if any(guards(src, b.node, loop) for b in backwards):
            return None  # a backward() that runs only sometimes: a GAN's generator every n_critic passes
        return Accumulation(loop, guard, remainder(src, guard.test).right, steps[0])
    if backwards and not steps and isinstance(loop, (ast.For, ast.AsyncFor)) and micro_batches(src, loop):
        outer = innermost(src, loop) or src.function(loop) or src.tree
        end = (loop.end_lineno, loop.end_col_offset)
        after = [e for e in src.run_events(outer, False) if e.pos > end and innermost(src, e.node) is innermost(src, loop)]
        after = [e for e in after if e.kind not in BEFORE_THE_STEP]
        if after and after[0].kind == "step":  # the next event after the micro-batches is the step (a clip and the
            counted = loop.iter.args[0] if ranged(loop) else None  # GradScaler's unscale_ go between them)
            return Accumulation(loop, None, counted, after[0])
    return None


def may_accumulate(src, loop):
    """What accumulation() needs to say yes, told cheaply before run_events reads other files: micro-batches by their
    names, or an `if` on a remainder."""
    return isinstance(loop, (ast.For, ast.AsyncFor)) and micro_batches(src, loop) or any(
        isinstance(n, ast.If) and remainder(src, n.test) is not None for n in src.local(loop))


def ranged(loop):
    return isinstance(loop.iter, ast.Call) and terminal(loop.iter.func) == "range" and len(loop.iter.args) == 1


def micro_batches(src, loop):
    """The loop runs micro-batches: `for _ in range(k)` with k a name, or an iterable or variable named for them."""
    if ranged(loop):
        return not isinstance(loop.iter.args[0], ast.Constant)
    words = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)} | \
        {w for w in (dotted(n) for n in ast.walk(loop.iter)) if w}
    return any(hint in word.lower() for word in words for hint in ("micro", "accum", "chunk"))


def micro_batch_events(src, acc, kind):
    """The events of one kind ("zero", "backward", "clip", ...) in the body of an accumulation's micro-batch loop."""
    return (event for node in src.local(acc.micro) for event in src.classify(node) if event.kind == kind)


def accumulations(src):
    return [a for a in (accumulation(src, loop) for loop in src.loops()) if a is not None]


@rule(
    "zero-grad-every-micro-batch",
    "In a loop that accumulates gradients, zero_grad() runs on every micro-batch, not once per optimizer step.",
    """Gradient accumulation adds several micro-batches' gradients into .grad before one
    optimizer step. A zero_grad() that runs on every micro-batch wipes what the earlier ones
    added, so each step uses the last micro-batch's gradient alone: the effective batch is
    k times smaller than configured, and the loss curve looks normal. Zero once per step:
    right after optimizer.step(), under the same condition.""",
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()  # BUG: wipes the micro-batches accumulated so far
        loss = F.cross_entropy(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
)
def check_zero_grad_every_micro_batch(src):
    for acc in accumulations(src):
        for zero in micro_batch_events(src, acc, "zero"):
            if not acc.in_micro_batch(src, zero.node):
                continue
            if zero.subject is not None and src.is_optimizer(zero.subject) and (
                    acc.step.subject is None or not same_object(src, zero.subject, acc.step.subject)):
                continue  # another optimizer's gradients, or one a helper steps
            yield zero.node, (f"this zero_grad() runs on every micro-batch, but the optimizer steps {acc.how_often()} "
                              f"(line {acc.step.pos[0]}): it wipes the gradients accumulated so far, so each step uses "
                              f"the last micro-batch alone. Call zero_grad() right after optimizer.step(), under the "
                              f"same condition.")
        for call, where in zeroing_calls(src, acc):
            yield call, (f"this call runs backward() on every micro-batch and zeroes the gradients there ({where}), "
                         f"but the optimizer steps {acc.how_often()} (line {acc.step.pos[0]}): each step "
                         f"uses the last micro-batch alone. Zero right after optimizer.step(), under the same condition.")


def zeroing_calls(src, acc):
    """(call, where its zero_grad is) for each call in the micro-batch loop to a function or method that runs
    backward() and, whatever it is given, zero_grad() on the optimizer that steps, and never steps itself."""
    stepped = {e.target for other, f in src.callees(acc.step.node) for n in other.local(f) for e in other.classify(n)
               if e.kind == "step"} if acc.step.helper else {acc.step.target}
    for event in src.run_events(acc.micro, False):
        if not (event.helper and event.kind == "backward" and innermost(src, event.node) is acc.micro
                and acc.in_micro_batch(src, event.node)):
            continue
        for other, function in src.callees(event.node):
            if "step" in other.kinds(function):
                continue
            for node in other.local(function):
                zero = next((e for e in other.classify(node) if e.kind == "zero"), None)
                if zero is None or conditional(other, node, function) or zero.subject is not None and \
                        other.is_optimizer(zero.subject) and zero.target not in stepped:
                    continue  # under an if, or another optimizer's gradients
                yield event.node, (f"line {node.lineno}" if other is src else f"{other.path} line {node.lineno}")
                break


def conditional(src, node, top):
    """node sits under an if (or a conditional expression) between it and top."""
    child, p = node, src.parent[node]
    while p is not top:
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            return True
        child, p = p, src.parent[p]
    return False


def scaling(src, expr, depth=0):
    """How a loss value relates to the number of micro-batches: 'scaled' (divided or multiplied by something),
    'unscaled' (a loss function's or a model's output as it is), or None when the code leaves a doubt."""
    if depth > 12 or expr is None:
        return None
    if isinstance(expr, ast.Name):
        value = src.definition(expr)
        if value is None and "loss" in expr.id.lower():  # `logits, loss = model(x, y)`: a model's own loss, as it is
            value = src.unpacked_from(expr)
        return scaling(src, value, depth + 1)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Div, ast.Mult, ast.FloorDiv)):
            return "scaled"
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            sides = {scaling(src, expr.left, depth + 1), scaling(src, expr.right, depth + 1)}
            return None if None in sides else "scaled" if "scaled" in sides else "unscaled"
        return None  # another operator (a power, a matrix product): unknown
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return scaling(src, expr.operand, depth + 1)
    if isinstance(expr, (ast.Attribute, ast.Subscript)) and output_loss(expr):
        return scaling(src, expr.value, depth + 1)  # outputs.loss, outputs["loss"]
    if not isinstance(expr, ast.Call):
        return None
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in RESHAPES | {"mean", "sum"}:
        return scaling(src, expr.func.value, depth + 1)
    if method_call(expr, "scale") and src.is_scaler(expr.func.value) and len(expr.args) == 1:
        return scaling(src, expr.args[0], depth + 1)  # GradScaler.scale(loss): fp16's loss scaling, not a division
    if any(isinstance(a, ast.Starred) for a in expr.args) or any("accum" in (dotted(n) or "").lower()
                                                                 for n in ast.walk(expr)):
        return None  # arguments it cannot see, or the accumulation count itself: it may scale inside
    if src.loss_call(expr) is not None:
        return "unscaled"
    name = (terminal(expr.func) or "").lower()
    if ("model" in name or name.endswith("net")) and not src.helpers(expr):
        return "unscaled"  # a model that returns its loss (a diffusion model, a Hugging Face model)
    return None


def output_loss(expr):
    if isinstance(expr, ast.Attribute):
        return expr.attr == "loss"
    return isinstance(expr.slice, ast.Constant) and expr.slice.value == "loss"


@rule(
    "accumulated-loss-not-scaled",
    "In a loop that accumulates gradients, the loss goes to backward() without being divided by the number of micro-batches.",
    """backward() adds into .grad, so k micro-batches accumulate the sum of k gradients: k
    times the mean gradient of the large batch the accumulation stands for. With SGD every
    step is k times too large; with Adam the clipping threshold and eps act on a gradient k
    times bigger than intended, and changing k changes the training. Divide the loss by the
    number of micro-batches before backward() (loss = loss / k).""",
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # BUG: k gradients summed, not averaged
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        (loss / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
)
def check_accumulated_loss_not_scaled(src):
    for acc in accumulations(src):
        for backward in micro_batch_events(src, acc, "backward"):
            if innermost(src, backward.node) is not acc.micro or library_backward(src, backward.node):
                continue  # accelerator.backward() and the like divide by their own accumulation steps
            if scaling(src, src.backward_target(backward.node)) == "unscaled":
                yield backward.node, (f"this backward() adds the full loss of each micro-batch while the optimizer "
                                      f"steps {acc.how_often()} (line {acc.step.pos[0]}): the step gets the sum of "
                                      f"their gradients, not the mean. Divide the loss by the number of micro-batches "
                                      f"before backward().")


def library_backward(src, call):
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    return terminal(call.func) == "manual_backward" or receiver is not None and (
        terminal(receiver) in ("accelerator", "fabric", "engine", "model_engine") or
        any(w in src.origin_name(receiver).lower() for w in ("accelerat", "fabric", "deepspeed")))


def accelerator_of(src, expr):
    """The `Accelerator(...)` call that built expr, when this file shows it."""
    made = src.origin(expr)
    return made if made is not None and (src.qualname(made.func) or "").endswith("Accelerator") else None


def counts_steps(src, made):
    """An Accelerator(...) call is told its accumulation steps (or may be: **kwargs), or they are set on it later."""
    if any(kw.arg is None or kw.arg in ACCELERATE_STEPS + PLUGINS for kw in made.keywords):
        return True
    return any(isinstance(t, ast.Attribute) and t.attr == "gradient_accumulation_steps"
               for a in src.of_type(ast.Assign) for t in a.targets)


def accumulate_blocks(src):
    """(with statement, the Accelerator call behind it) for each `with accelerator.accumulate(...)`."""
    for block in src.of_type(ast.With, ast.AsyncWith):
        for item in block.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "accumulate":
                made = accelerator_of(src, call.func.value)
                if made is not None:
                    yield block, made


def syncing(src, node, top):
    """node sits under an `if` between it and top that asks accelerate whether this pass steps."""
    child, p = node, src.parent[node]
    while p is not top:
        if isinstance(p, ast.If) and child is not p.test and any(
                isinstance(n, ast.Attribute) and n.attr == "sync_gradients" or
                isinstance(n, ast.Name) and "sync" in n.id for n in ast.walk(p.test)):
            return True
        child, p = p, src.parent[p]
    return False


@rule(
    "clip-every-micro-batch",
    "In a loop that accumulates gradients, the gradient is clipped on every micro-batch, before the step condition.",
    """Clipping belongs to the accumulated gradient, once, just before the optimizer steps.
    Clipped on every micro-batch, it cuts partial sums: the earlier micro-batches are clipped
    again and again while the last is not, so the step follows no norm you chose (and with a
    GradScaler, unscale_ on every micro-batch mixes unscaled and scaled gradients). Clip under
    the same condition as the step (with accelerate: `if accelerator.sync_gradients:`).""",
    """
    import torch
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y) / accumulation_steps
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: clips a partial sum
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    """
    import torch
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """,
)
def check_clip_every_micro_batch(src):
    message = ("gradients are clipped on every micro-batch while the optimizer steps {}: each clip cuts a partial "
               "sum, so the step follows no norm you chose. Clip once, under the same condition as the step{}.")
    for acc in accumulations(src):
        for clip in micro_batch_events(src, acc, "clip"):
            if acc.in_micro_batch(src, clip.node, ("clip", "norm")) and not syncing(src, clip.node, acc.micro):
                yield clip.node, message.format(f"{acc.how_often()} (line {acc.step.pos[0]})", "")
    for block, made in accumulate_blocks(src):
        if not any(kw.arg in ACCELERATE_STEPS for kw in made.keywords):
            continue  # not told to accumulate: every pass steps, and clipping each one is right
        for clip in (e for n in src.local(block) for e in src.classify(n) if e.kind == "clip"):
            if not syncing(src, clip.node, block):
                yield clip.node, message.format(f"only when accelerate syncs (accumulate() at line {block.lineno})",
                                                " (`if accelerator.sync_gradients:`)")


@rule(
    "accumulate-without-steps",
    "accelerator.accumulate() is used, and the script has an accumulation setting, but Accelerator() is not given gradient_accumulation_steps.",
    """`with accelerator.accumulate(model):` accumulates only as many micro-batches as the
    Accelerator was told: built without gradient_accumulation_steps it is 1, so the optimizer
    steps on every micro-batch, accelerator.backward() does not divide the loss, and the
    script's own --gradient_accumulation_steps only changes the step count it logs. Pass it:
    Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps).""",
    """
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=args.mixed_precision)  # BUG: accumulate() will not accumulate
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
    total_steps = len(loader) // args.gradient_accumulation_steps
    """,
    """
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=args.mixed_precision,
                              gradient_accumulation_steps=args.gradient_accumulation_steps)
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
    total_steps = len(loader) // args.gradient_accumulation_steps
    """,
)
def check_accumulate_without_steps(src):
    setting = any("accum" in (dotted(n) or "").lower() and terminal(n) != "accumulate"
                  for n in src.of_type(ast.Name, ast.Attribute)) or any(
        "accum" in (n.arg or "").lower() for n in src.of_type(ast.arg, ast.keyword))
    if not setting:
        return  # no accumulation asked for: accumulate() with its default of 1 changes nothing
    reported = set()
    for block, made in accumulate_blocks(src):
        if made not in reported and not counts_steps(src, made):
            reported.add(made)
            yield made, (f"accelerator.accumulate() (line {block.lineno}) accumulates as many micro-batches as this "
                         f"Accelerator was told, and it is told none: it steps on every micro-batch and the script's "
                         f"accumulation setting is ignored. Pass gradient_accumulation_steps= here.")



def nonzero_remainder(test):
    """The condition holds on k-1 of every k values of a remainder: `i % k` (not zero), `i % k > 0`, `i % k != c`,
    alone or in an `and`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(nonzero_remainder(value) for value in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and (isinstance(test.ops[0], ast.NotEq) or isinstance(
            test.ops[0], ast.Gt) and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0):
        test = test.left
    return isinstance(test, ast.BinOp) and isinstance(test.op, ast.Mod) and \
        not isinstance(test.left, (ast.Constant, ast.JoinedStr))  # not "%d" % x


@rule(
    "accumulation-step-inverted",
    "The optimizer steps under `if i % k:`, true on k-1 of every k passes, where accumulation steps once in k.",
    """`if i % k:` is true whenever the remainder is not zero: on k-1 passes of every k. Written
    around optimizer.step() to accumulate k micro-batches, it steps on almost every batch alone
    and accumulates only two batches once in k, so the effective batch is not the one configured
    and changing k changes the training in a way no one intended (with k = 2 it happens to step
    every other batch, which hides the mistake until k changes). Step when the remainder is
    zero: `if (i + 1) % k == 0:`.""",
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if i % accumulation_steps:  # BUG: true on k-1 of every k batches
            optimizer.step()
            optimizer.zero_grad()
    """,
    """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
        (F.cross_entropy(model(x), y) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
)
def check_accumulation_step_inverted(src):
    for acc in accumulations(src):
        if acc.guard is not None and nonzero_remainder(acc.guard.test) and \
                not any(acc.step.node is n for s in acc.guard.orelse for n in ast.walk(s)):
            yield acc.guard.test, (f"the optimizer steps (line {acc.step.pos[0]}) whenever "
                                   f"`{ast.unparse(acc.guard.test)}` holds: on k-1 of every k "
                                   f"passes, so almost every batch steps alone. Step when the remainder is zero: "
                                   f"`if (i + 1) % k == 0:`.")
