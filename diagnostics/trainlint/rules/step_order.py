"""Rules on the order of one training step: zero_grad, backward, clipping, unscale_, the optimizer's and the
scheduler's step, and scaler.update()."""
import ast

from ..registry import rule
from ..syntax import position
from ..torch_names import CLIPS


@rule(
    "missing-zero-grad",
    "A training loop calls backward() and optimizer.step() but never zeroes the gradients.",
    """backward() adds into .grad. Without zero_grad() each step applies the sum of every
    gradient since the start: the effective learning rate grows every iteration and the loss
    first drops, then oscillates or diverges, with nothing to say why. Call
    optimizer.zero_grad(set_to_none=True) (or model.zero_grad(), or set p.grad = None) once per
    optimizer step. Accumulating over micro-batches is fine: zero after the step.""",
    """
    import torch.nn.functional as F

    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # BUG: gradients from earlier batches are still there
        optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """,
)
def check_missing_zero_grad(src):
    trains = {loop: {"backward", "step"} <= src.reach_kinds(loop) for loop in src.loops()}
    for loop, training in trains.items():
        if not training or any(n is not loop and trains.get(n) for n in src.reach(loop)):
            continue
        local = {id(n) for n in src.local(loop)}
        zeros = [e for n in src.reach(loop) for e in src.classify(n) if e.kind == "zero"]
        if not zeros:
            if fresh_optimizers(src, loop):
                continue  # an optimizer built anew on every pass starts from fresh leaves (pix2pix-zero's guidance)
            first = next(e for e in src.events(loop) if e.kind in ("backward", "step"))
            yield first.node, ("this loop calls backward() and optimizer.step() but never zero_grad(): gradients add "
                               "up across iterations, so every step uses the sum of all past gradients. Call "
                               "optimizer.zero_grad(set_to_none=True) once per optimizer step.")
            continue
        if any(id(z.node) not in local or z.subject is None or not src.is_optimizer(z.subject) for z in zeros):
            continue  # model.zero_grad(), p.grad = None or a helper: taken to cover every optimizer
        for step in (e for e in src.events(loop) if e.kind == "step" and not e.helper):
            if not any(same_object(src, step.subject, z.subject) for z in zeros):
                yield step.node, (f"{step.target} is stepped in this loop but {step.target}.zero_grad() is never "
                                  f"called: its gradients add up across iterations. Call {step.target}.zero_grad() "
                                  f"once per step.")


def fresh_optimizers(src, loop):
    """Every optimizer stepped in loop is built inside it, on each pass."""
    steps = [e for e in src.events(loop) if e.kind == "step" and not e.helper]
    inside = {id(n) for n in src.local(loop)}
    return bool(steps) and all(src.origin(e.subject) is not None and id(src.origin(e.subject)) in inside for e in steps)


def same_object(src, a, b):
    """a and b are written the same, or were built by the same call."""
    return ast.unparse(a) == ast.unparse(b) or src.origin(a) is not None and src.origin(a) is src.origin(b)


def jump_after(src, node):
    """The break, continue, return or raise that follows node's statement in the same block, or None."""
    stmt = node
    while not isinstance(stmt, ast.stmt):
        stmt = src.parent[stmt]
    parent = src.parent[stmt]
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            later = block[[id(s) for s in block].index(id(stmt)) + 1:]
            return next((s for s in later if isinstance(s, (ast.Break, ast.Continue, ast.Return, ast.Raise))), None)
    return None


def zeroes_then_backward(src, call):
    """A helper of this file, called as a zero_grad() by its name (`zero_grad_and_backward()`), that calls backward()
    after its last zero_grad(): the backward() event at its call comes after the zero, not before it."""
    for function in src.helpers(call):
        events = src.events(function)
        zeros = [e.pos for e in events if e.kind == "zero"]
        if zeros and any(e.kind == "backward" and e.pos > zeros[-1] for e in events):
            return True
    return False


@rule(
    "zero-grad-before-step",
    "zero_grad() runs between backward() and optimizer.step(), so the step sees zero gradients.",
    """When zero_grad() comes after backward() (or step() comes before the next backward()), the
    optimizer steps on gradients that were just cleared. The parameters do not move (or, with
    weight decay or momentum, drift without learning) while the loss is computed and logged as
    usual. The order is zero_grad(), forward, backward(), step().""",
    """
    import torch.nn.functional as F

    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # BUG: wipes the gradients backward() just computed
        optimizer.step()
    """,
    """
    import torch.nn.functional as F

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """,
)
def check_zero_grad_before_step(src):
    for zero in (e for e in src.all_events() if e.kind == "zero" and isinstance(e.node, ast.Call)):
        loops = src.enclosing_loops(zero.node)
        container = loops[0] if loops else src.function(zero.node) or src.tree
        optimizer_zeroed = zero.target and src.is_optimizer(zero.node.func.value)
        events = [e for e in src.events(container) if e.kind == "backward" or e.kind == "step"
                  and not e.helper and (not optimizer_zeroed or e.target == zero.target)]
        if not any(e.kind == "backward" for e in events):
            continue
        jump = jump_after(src, zero.node)
        if jump is not None and not isinstance(jump, ast.Continue):
            continue  # break, return or raise: nothing after it runs
        later = [e for e in events if e.pos > zero.pos or e.pos == zero.pos and e.kind == "backward"
                 and zeroes_then_backward(src, zero.node)] if jump is None else []
        after = later + (events if loops else [])  # then round the loop again
        if after and after[0].kind == "step":
            yield zero.node, (f"{after[0].target or 'the optimizer'}.step() at line {after[0].pos[0]} runs after this "
                              f"zero_grad() with no backward() in between, so it steps on zeroed gradients and the "
                              f"model does not learn. Order: zero_grad(), forward, backward(), step().")


@rule(
    "scheduler-before-optimizer",
    "scheduler.step() comes before optimizer.step() in the same loop.",
    """Since PyTorch 1.1 the learning-rate scheduler must step after the optimizer. Stepping it
    first skips the first value of the schedule (the warmup start, or the whole first epoch at
    the base rate) and shifts every later change one period early. PyTorch warns once, and the
    run carries on. Call scheduler.step() after optimizer.step(). A scheduler step under an if
    (at an epoch boundary, say) is not flagged: the condition may already skip the first pass.""",
    """
    import torch.nn.functional as F
    from torch.optim.lr_scheduler import StepLR

    scheduler = StepLR(optimizer, step_size=30)
    for epoch in range(90):
        scheduler.step()  # BUG: runs before this epoch's optimizer.step()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.optim.lr_scheduler import StepLR

    scheduler = StepLR(optimizer, step_size=30)
    for epoch in range(90):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        scheduler.step()
    """,
)
def check_scheduler_before_optimizer(src):
    for sched in (e for e in src.all_events() if e.kind == "sched"):
        if told_its_position(sched.node):
            continue
        for loop in src.enclosing_loops(sched.node):
            steps = [e for e in src.events(loop) if e.kind == "step"] or \
                [e for e in src.run_events(loop) if e.kind == "step"]  # a train_one_epoch of another file
            if steps:
                if sched.pos < steps[0].pos and not guarded(src, sched.node, loop, steps[0].node):
                    stepper = f"{steps[0].target}.step()" if steps[0].target else "the optimizer step"
                    yield sched.node, (f"{sched.target}.step() runs before {stepper} (line {steps[0].pos[0]}) in this "
                                       f"loop, so the schedule skips its first value and runs one period early. Call "
                                       f"it after optimizer.step().")
                break


def told_its_position(call):
    """A scheduler step told the epoch or step it is at (LAVIS's and MiniGPT-4's `step(cur_epoch=e, cur_step=i)`,
    torch's deprecated `step(epoch=e)`): it sets the rate for that position instead of counting its calls, so
    running before the optimizer step skips nothing."""
    return any(k.arg is not None and ("epoch" in k.arg or "step" in k.arg) for k in call.keywords)


def guarded(src, node, loop, step):
    """node sits under an `if` inside loop that may skip the first pass (`if step % n == 0: scheduler.step()`),
    not one that only asks whether the scheduler exists (`if scheduler:`, `if scheduler is not None:`), nor one
    whose same branch holds the optimizer step too (`if (i + 1) % k == 0: scheduler.step(); optimizer.step()`:
    they run together). step: the optimizer step's node (one of another file is in no branch here)."""
    subject = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else None
    step_branch, child, p = {}, step, src.parent.get(step)
    while p is not None and p is not loop:  # each `if` above the step: whether the step is in its body
        if isinstance(p, ast.If):
            step_branch[p] = child in p.body
        child, p = p, src.parent.get(p)
    child, p = node, src.parent[node]
    while p is not loop:
        if isinstance(p, ast.If) and step_branch.get(p) != (child in p.body) and not only_tests(p.test, subject):
            return True
        child, p = p, src.parent[p]
    return False


def only_tests(test, subject):
    """test checks nothing but that subject exists: `subject`, `subject is not None`, and of those."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(only_tests(v, subject) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) and \
            isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return ast.unparse(test) == subject


@rule(
    "clip-grad-order",
    "clip_grad_norm_ / clip_grad_value_ called before backward() or after optimizer.step().",
    """Clipping acts on whatever is in .grad at that moment. Before backward() it clips the
    previous iteration's (or zeroed) gradients and the new ones reach the optimizer unclipped;
    after step() the update has already happened. Either way clipping silently does nothing and
    the spikes it was meant to stop get through. Clip between backward() and step().""",
    """
    import torch.nn.functional as F
    from torch.nn.utils import clip_grad_norm_

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        clip_grad_norm_(model.parameters(), 1.0)  # BUG: the new gradients do not exist yet
        loss.backward()
        optimizer.step()
    """,
    """
    import torch.nn.functional as F
    from torch.nn.utils import clip_grad_norm_

    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    """,
)
def check_clip_grad_order(src):
    for clip in (e for e in src.all_events() if e.kind == "clip"):
        for loop in src.enclosing_loops(clip.node):
            events = [e for e in src.events(loop) if e.kind in ("backward", "step")
                      and not exclusive(src, e.node, clip.node)]  # `if amp: scaler.step() else: clip; step()`
            if not any(e.kind == "backward" for e in events):
                continue
            before = [e for e in events if e.pos < clip.pos]
            previous = (before or events)[-1]  # wrapping round: the end of the previous iteration
            if previous.kind == "step" and not any(e.kind == "backward" for e in before):
                yield clip.node, ("gradients are clipped before backward() has produced this iteration's gradients, "
                                  "so the ones the optimizer uses are never clipped. Clip after backward() and before step().")
            elif previous.kind == "step":
                stepper = f"{previous.target}.step()" if previous.target else "the optimizer step"
                yield clip.node, (f"gradients are clipped after {stepper} (line {previous.pos[0]}) has already used "
                                  f"them. Clip after backward() and before step().")
            break


def branches(src, node):
    """{if statement: 'body' or 'orelse'} for each if that node sits in."""
    found, child, p = {}, node, src.parent.get(node)
    while p is not None:
        if isinstance(p, ast.If) and child is not p.test:
            found[p] = "body" if any(child is s for s in p.body) else "orelse"
        child, p = p, src.parent.get(p)
    return found


def exclusive(src, a, b):
    """a and b sit in different branches of one if: they never run in the same pass."""
    left, right = branches(src, a), branches(src, b)
    return any(right.get(statement, side) != side for statement, side in left.items())


@rule(
    "clip-before-unscale",
    "With a GradScaler, clip_grad_norm_ runs on still-scaled gradients (no scaler.unscale_ first).",
    """With mixed precision, .grad holds gradients multiplied by the loss scale (65536 at the
    start). Clipping them to a norm of 1.0 clips nearly every step, by a factor that changes
    whenever the scale does: the effective learning rate becomes erratic, with no error.
    Call scaler.unscale_(optimizer) before clipping.""",
    """
    import torch
    import torch.nn.functional as F

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast('cuda'):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: clips the scaled gradients
        scaler.step(optimizer)
        scaler.update()
    """,
    """
    import torch
    import torch.nn.functional as F

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast('cuda'):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """,
)
def check_clip_before_unscale(src):
    for call in src.calls:
        name = src.qualname(call.func) or ""
        if not name.startswith("torch.nn.utils.") or name.rsplit(".", 1)[-1] not in CLIPS:
            continue
        for loop in src.enclosing_loops(call) or [src.function(call) or src.tree]:
            events = [e for e in src.events(loop) if not exclusive(src, e.node, call)]  # not `if amp: ... else: ...`
            if any(e.kind == "step" and e.scaler for e in events):
                # `<=`: an unscale at the clip call itself is this file's own function of that name, unscaling inside
                if not any(e.kind == "unscale" and e.pos <= position(call) for e in events):
                    yield call, ("the GradScaler's gradients are still multiplied by the loss scale here, so this "
                                 "clips almost every step by a varying factor. Call scaler.unscale_(optimizer) "
                                 "before clipping.")
                break


CALLER_LEVELS = 3  # helpers called by helpers followed up to the loop that updates: train -> epoch -> batch -> step (ours)


def updated_by_caller(src, function, levels=CALLER_LEVELS):
    """function is called, in this file, where the caller's loop or function calls scaler.update() (a trainer's
    _train_batch steps, its _train_loop updates); a call outside any loop asks the same of the function it is in
    (train calls step_once in its loop and updates there, step_once calls train_batch, which steps)."""
    name = getattr(function, "name", None)
    for call in src.calls_by_name.get(name, []) if name else []:
        if function not in src.helpers(call):
            continue
        loops, caller = src.enclosing_loops(call), src.function(call)
        if "update" in src.reach_kinds(loops[0] if loops else caller or src.tree):
            return True
        if not loops and caller is not None and levels > 1 and updated_by_caller(src, caller, levels - 1):
            return True
    return False


@rule(
    "scaler-without-update",
    "A loop (or a function that runs a whole step: backward, then scaler.step) never calls scaler.update().",
    """GradScaler skips a step whose gradients contain inf or NaN, and update() is what lowers
    the scale afterwards. Without update() the scale never changes: after the first overflow
    every following step is skipped too and the model stops learning while the loop keeps
    running. Call scaler.update() after every scaler.step(optimizer).""",
    """
    import torch

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)  # BUG: the scale is never adjusted
    """,
    """
    import torch

    scaler = torch.amp.GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
    """,
)
def check_scaler_without_update(src):
    for step in (e for e in src.all_events() if e.kind == "step" and e.scaler):
        loops = src.enclosing_loops(step.node)
        loop = next((l for l in loops if "backward" in src.reach_kinds(l)), None)
        function = src.function(step.node)
        if loop is None and function is not None and "backward" in src.reach_kinds(function):
            loop = function  # a whole per-batch step (a scaler wrapper's __call__, train_step): update belongs in it
        if loop is None and loops:
            loop = loops[0]
        if loop is not None and "update" not in src.reach_kinds(loop) and not updated_by_caller(src, function):
            yield step.node, ("scaler.step() without scaler.update() in the loop: the loss scale never adapts, and "
                              "after one overflow every later step is skipped. Call scaler.update() after scaler.step().")
