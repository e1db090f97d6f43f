"""resume_check: does your checkpoint resume exactly?

Symptom
    A spike right after every resume. A loss that is *lower* after a resume and later jumps back
    up: the data stream started over and the model re-sees batches it has memorised (Bekman's
    repeat-data trap; PyTorch Lightning restarted the stream on every resume). The LR back in
    warmup after a restart, or a giant first step because Adam's moments were not saved. Or no
    symptom yet: you are about to start a long run, and a crash will happen. Bekman's advice is
    to do a couple of resumes early, before the real training; this does them in seconds.

What it checks
    You give a factory, make_trainer(), that returns a new trainer each call. A trainer is an
    object (or a dict of functions) with three methods:

      state_dict()        everything your checkpoint holds (model, optimizer, scheduler, RNG
                          states, data position, grad scaler, ...)
      load_state_dict(sd) restores it into a freshly built trainer
      train_step()        one optimizer step on the next batch of your own data pipeline;
                          returns the loss, or a dict {"loss": float, "batch": the batch or
                          anything that names it (sample indices), "lr": the LR this step used}

    Return "batch" and "lr": without them the check cannot tell a data bug from an RNG bug.
    Before each make_trainer() call the check seeds Python's random, torch (and NumPy if your
    code imported it) with 0, as the top of your script does in a fresh process.

    It runs the trainer 9 steps straight (the reference), twice, then once more with two
    resumes: before steps 3 and 6 it takes state_dict(), writes it with torch.save into memory,
    throws the trainer away, builds a new one with make_trainer(), reads the bytes back with
    torch.load(weights_only=True) and calls load_state_dict. It compares the resumed run with
    the reference step by step: loss, batch fingerprint (a hash of "batch"), LR, and the final
    state_dict(); right after each load it also checks that state_dict() gives back what was
    loaded (a round trip). That is 27 training steps and a few copies of the state in CPU
    memory: give it a small configuration of your model (a few layers, short sequences) with
    your real data pipeline, optimizer, scheduler and checkpoint code. Verdicts:

      ok                     the resumed run is the reference (bit for bit, unless --rtol/--atol)
      data_restarted         after a resume the trainer feeds batches the reference fed earlier:
                             the repeat-data trap
      data_skipped           after a resume it feeds a batch the reference fed later
      rng_not_restored       the same batch gives another loss on the first resumed step
                             (dropout masks), the batch order changed (shuffle generator), or
                             an RNG entry of the checkpoint did not survive the load
      optimizer_state_lost   the optimizer state (Adam's moments, step counts) is not in the
                             checkpoint or not restored by load_state_dict
      scheduler_state_lost   the LR after the resume is not the reference's LR, or the
                             scheduler state is not restored
      state_not_restored     another entry comes back different after load_state_dict, or the
                             runs diverge for a reason the check cannot name
      checkpoint_unloadable  torch.save or torch.load(weights_only=True) refused the state
      nondeterministic       the reference itself does not repeat: the check cannot judge the
                             resume until the run is reproducible (it says so, blames nothing)

    Every verdict but ok is a fail. It finds optimizer, scheduler and RNG entries in your
    state_dict by shape and name: a dict with "state" and "param_groups" is an optimizer's, one
    with "last_epoch" and "base_lrs" (or "_last_lr") a scheduler's, a key containing "rng", "random" or
    "generator" an RNG state. The checkpoints live in memory, and Python's, torch's (CPU, and
    CUDA when initialised before the check) and NumPy's global RNG states are restored
    afterwards, also when your trainer raises. Models, optimizers and LR schedulers that
    make_trainer() hands to more than one trainer (built once, outside it) are put back as they
    were before each new trainer is built, as a fresh process finds them, and after the check.

    With --trainer your code runs in a child process, under a time limit (--timeout, 300 s for
    the whole check, the file's import included) at which it is killed whatever it does
    (threads, ignored signals, reads of stdin): a trainer that hangs is reported with the call
    it hung in, and exit 2. A trainer (or its file) that raises, SystemExit and KeyboardInterrupt
    included, is one line naming the call and the error, exit 2; so is os._exit. Its own writes
    (logs, checkpoint files) go to a scratch folder removed afterwards, or are refused: your
    files stay as they were, and the report names the paths it wrote to.

    Under torch.distributed the check runs locally in each process and starts no collective of
    its own, so a trainer that is not distributed-aware cannot hang it. Each rank makes the same
    calls in the same order (make_trainer, train_step, state_dict, load_state_dict), so a DDP
    trainer's own collectives line up. Every rank checks its own shard: your trainer must save
    and restore its sharded sampler state (epoch and position) itself. Run it on all ranks and
    compare the verdicts: a verdict that differs between ranks means state restored on one rank
    only.

Command
    python diagnostics/resume_check.py                         # demo: the data stream restarts on resume
    python diagnostics/resume_check.py --bug optimizer         # or rng, scheduler, data_restart
    python diagnostics/resume_check.py --healthy               # the fixed twin
    python diagnostics/resume_check.py --trainer my_trainer.py:make_trainer --json
    python diagnostics/resume_check.py --trainer my_trainer.py --steps 12 --resume-at 4,8 --rtol 1e-6

Output
    $ python diagnostics/resume_check.py
    [FAIL] resume_check: data_restarted: after the resume before step 3, step 3 is fed the batch of step 0 (the data stream started over): all 6 steps from there re-feed batches already trained on; their loss averages 0.843 against the straight run's 1.31 at the same steps, lower because the model has seen them (a false improvement)
       step  loss: reference    resumed   lr: reference   resumed   batch
          0          1.45755    1.45755          0.0075    0.0075   same
          1          1.47063    1.47063           0.015     0.015   same
          2           1.4509     1.4509          0.0225    0.0225   same
      >   3          1.34294   0.983397*           0.03      0.03   = step 0*
          4          1.48504    1.11093*           0.03      0.03   = step 1*
          5          1.34594    1.00746*           0.03      0.03   = step 2*
      >   6          1.15491   0.540598*           0.03      0.03   = step 0*
          7          1.44819   0.824789*           0.03      0.03   = step 1*
          8          1.06575   0.593048*           0.03      0.03   = step 2*
      next: save the data position (epoch and batch index, or your sampler's / StatefulDataLoader's state) in state_dict() and skip to it in load_state_dict(); a new seed would only hide the repeat
    (exit code 1)
    $ python diagnostics/resume_check.py --healthy
    [PASS] resume_check: ok: 9 steps with resumes before step 3, 6 match the straight run bit for bit (loss, batches, LR, final state)
       step  loss: reference    resumed   lr: reference   resumed   batch
          0          1.45755    1.45755          0.0075    0.0075   same
          1          1.47063    1.47063           0.015     0.015   same
          2           1.4509     1.4509          0.0225    0.0225   same
      >   3          1.34294    1.34294            0.03      0.03   same
          4          1.48504    1.48504            0.03      0.03   same
          5          1.34594    1.34594            0.03      0.03   same
      >   6          1.15491    1.15491            0.03      0.03   same
          7          1.44819    1.44819            0.03      0.03   same
          8          1.06575    1.06575            0.03      0.03   same
    (exit code 0)

How to read it
    The first line is the verdict. The table shows both runs step by step; ">" marks a step that
    a new trainer ran right after loading the checkpoint, "*" a value that differs from the
    reference. In the batch column "same" is the reference's batch, "= step 0" a batch the
    reference fed at step 0 (repeated or skipped data), "new" one it never fed. A lower resumed
    loss on repeated batches is the false improvement Bekman describes: the model has seen them.
    In --json, details holds the series of each run (reference, resumed; rerun when the
    straight run did not repeat), the first divergent step of each signal and the final state
    entries that differ (with the largest absolute difference), and per resume the checkpoint
    size, the optimizer and scheduler entries found in it, and the entries that did not survive
    the load (not_restored, each with its kind).

    Exact by default: a deterministic pipeline resumes bit for bit, and on CPU it does (the
    healthy demo measured: every loss, LR and final tensor identical). On a GPU with
    non-deterministic kernels the nondeterministic verdict shows where and by how much the
    straight run differs from itself: pass --atol/--rtol above that, or set
    torch.use_deterministic_algorithms(True) for the check.

Next step
    PLAYBOOK.md#resume-trouble and refs/stability.md#resume: save and restore the model,
    optimizer, scheduler, grad scaler, every RNG and the data position; details["next"] names
    the piece that is missing. To find resume spikes or the repeat-data drop in the log of a
    run that already happened, run diagnostics/spikes.py on it.
"""
import argparse
import copy
import ctypes
import functools
import hashlib
import io
import os
import random
import shutil
import sys
import tempfile
import types

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (SUPERVISED, ArgumentParser, CaseError, CheckResult, CheckTimeout, WriteGuard,
                               json_text, rng_preserved, run_user_code, user_function, users_error)

STEPS = 9  # three trainer lives of 3 steps: Adam moments, part of the demo's 4-step warmup and a second resume
RESUME_AT = (3, 6)  # Bekman: "a couple of resumes early on"; the second catches state that is restored but not saved again
SEED = 0  # what the check seeds before each make_trainer() call, like the top of a script
RTOL = ATOL = 0.0  # exact: a deterministic pipeline resumes bit for bit (refs/stability.md#resume); measured exact on CPU
SHOWN = 3  # entries named in a summary; details hold them all
RNG_WORDS = ("rng", "random", "generator")  # key names that mark an RNG state (our naming assumption)
BUGS = ("data_restart", "rng", "optimizer", "scheduler")
TIMEOUT = 300.0  # s for the whole check: the demo's 27 steps and 5 trainer builds take ~4 s on a busy CPU (measured);
# a small configuration of a real model adds its imports and a first-step compile (minutes at worst: assumed)


class CheckError(Exception):
    """The check cannot run: a bad trainer file or factory, a trainer that raises, bad settings."""


class CheckpointError(Exception):
    """torch.save or torch.load refused the trainer's state."""


# --- the trainer protocol ---------------------------------------------------------------------

def method(trainer, name):
    """trainer.name, or trainer[name] for a dict of functions; None when absent."""
    return trainer.get(name) if isinstance(trainer, dict) else getattr(trainer, name, None)


progress = {"at": "starting"}  # what the check is waiting on: named when the time limit runs out


def call(trainer, name, *args, where=""):
    progress["at"] = f"{name}() ({where})"
    try:
        return method(trainer, name)(*args)
    except BaseException as exc:  # the user's code: reported in one line, with where it happened
        if not users_error(exc):
            raise
        raise CheckError(f"{name}() raised {type(exc).__name__}: {exc} ({where})") from exc


def new_trainer(make_trainer, where):
    """Seed like a fresh process, then call the factory and check the trainer has the three methods."""
    seed_all(SEED)
    name = getattr(make_trainer, "__name__", "make_trainer")
    progress["at"] = f"{name}() ({where})"
    try:
        trainer = make_trainer()
    except BaseException as exc:
        if not users_error(exc):
            raise
        raise CheckError(f"{name}() raised {type(exc).__name__}: {exc} ({where})") from exc
    missing = [name for name in ("state_dict", "load_state_dict", "train_step") if not callable(method(trainer, name))]
    if missing:
        raise CheckError(f"the trainer ({type(trainer).__name__}) has no {', '.join(f'{m}()' for m in missing)}: "
                         "it needs state_dict(), load_state_dict(sd) and train_step()")
    return trainer


def read_step(out, where):
    """train_step()'s result as (loss, batch fingerprint or None, lr or None)."""
    record = out if isinstance(out, dict) else {"loss": out}
    try:
        loss = float(record["loss"])
        lr = record.get("lr")
        lr = None if lr is None else tuple(float(v) for v in lr) if isinstance(lr, (list, tuple)) else float(lr)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckError(f"train_step() returned {type(out).__name__} ({where}): expected a float loss or a dict "
                         f"{{'loss': float, 'batch': ..., 'lr': float}} ({type(exc).__name__}: {exc})") from exc
    return loss, None if record.get("batch") is None else fingerprint(record["batch"]), lr


def fingerprint(batch):
    """A short hash of a batch: tensors by dtype, shape and bytes; tuples, lists and dicts item by item."""
    digest = hashlib.sha1()

    def feed(obj):
        if isinstance(obj, torch.Tensor):
            data = obj.detach().to("cpu").contiguous()
            digest.update(f"{data.dtype}{tuple(data.shape)}".encode())
            if data.numel():
                digest.update(ctypes.string_at(data.data_ptr(), data.numel() * data.element_size()))  # raw bytes, no numpy
        elif isinstance(obj, dict):
            for key in sorted(obj, key=str):
                digest.update(f"<{key}>".encode())
                feed(obj[key])
        elif isinstance(obj, (list, tuple)):
            digest.update(b"[")
            for item in obj:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(repr(obj).encode())

    feed(batch)
    return digest.hexdigest()[:12]


# --- global RNG: seed each trainer life, restore the caller's state afterwards -----------------

def seed_all(seed):
    """Seed Python, torch CPU, CUDA (only once initialised: a lazy seed would fire later, on the user) and NumPy."""
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    numpy = sys.modules.get("numpy")  # only if the user's code imported it: the check never does
    if numpy is not None:
        numpy.random.seed(seed)


# --- the user's own objects: what a factory hands to more than one trainer --------------------------

HANDED_TYPES = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
HELD_DEPTH = 4  # links followed from the trainer: a dict of functions -> a closure -> an object -> its model


def held_objects(trainer):
    """{id: object} of the modules, optimizers and LR schedulers a trainer holds, up to HELD_DEPTH links away
    through attributes, dict values, list and tuple items, closures and bound methods' objects."""
    found, seen, frontier = {}, set(), [trainer]
    for _ in range(HELD_DEPTH):
        following = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
                continue
            seen.add(id(obj))
            if isinstance(obj, HANDED_TYPES):
                found[id(obj)] = obj
            elif isinstance(obj, dict):
                following += obj.values()
            elif isinstance(obj, (list, tuple)):
                following += obj
            elif isinstance(obj, types.FunctionType):
                following += [cell.cell_contents for cell in obj.__closure__ or () if cell_filled(cell)]
            elif isinstance(obj, types.MethodType):
                following.append(obj.__self__)
            else:
                try:  # the instance's own attributes, without running a custom __getattr__
                    attributes = object.__getattribute__(obj, "__dict__")
                except AttributeError:
                    attributes = {}
                following += attributes.values() if isinstance(attributes, dict) else ()
        frontier = following
    return found


def cell_filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return False
    return True


def capture(obj):
    """What restore_object() needs to put `obj` back: a copy of its state (a module's also grads and modes)."""
    if isinstance(obj, torch.nn.Module):
        return ({k: v.detach().clone() for k, v in obj.state_dict().items()},
                [None if p.grad is None else p.grad.detach().clone() for p in obj.parameters()],
                [m.training for m in obj.modules()])
    return copy.deepcopy(obj.state_dict())


def restore_object(obj, saved):
    with torch.no_grad():
        if isinstance(obj, torch.nn.Module):
            weights, grads, modes = saved
            obj.load_state_dict(weights)
            for param, grad in zip(obj.parameters(), grads):
                param.grad = None if grad is None else grad.clone()
            for module, mode in zip(obj.modules(), modes):
                module.training = mode
        else:
            obj.load_state_dict(copy.deepcopy(saved))  # a copy: the optimizer keeps the tensors it is given


class HandedIn:
    """The user's own models, optimizers and schedulers that make_trainer() hands in (built once, outside it):
    put back as they were before every later make_trainer() call, as a fresh process finds them, and at the end."""

    def __init__(self):
        self.saved, self.builds = {}, 0  # id -> (object, state): the first trainer's, then those the second shares

    def seen(self, trainer):
        held = held_objects(trainer)
        self.builds += 1
        if self.builds == 1:
            self.saved = {key: (obj, capture(obj)) for key, obj in held.items()}
        elif self.builds == 2:
            self.saved = {key: value for key, value in self.saved.items() if key in held}  # the others were new

    def restore(self):
        for obj, state in self.saved.values():
            restore_object(obj, state)


def tracked(make_trainer, handed):
    """make_trainer, with the objects it hands in put back before each later call."""
    def factory():
        handed.restore()
        trainer = make_trainer()
        handed.seen(trainer)
        return trainer

    factory.__name__ = getattr(make_trainer, "__name__", "make_trainer")
    return factory


# --- state dicts as flat {path: leaf} maps ---------------------------------------------------------

def flatten(obj, path=()):
    """{path tuple: leaf} of a nested state; tensors copied to the CPU so later steps cannot change them."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {path: obj.detach().to("cpu", copy=True) if isinstance(obj, torch.Tensor) else obj}
    flat = {}
    for key, value in items:
        flat.update(flatten(value, path + (str(key),)))
    return flat


def entry_kinds(obj, path=()):
    """{path: "optimizer" | "scheduler"} for the sub-dicts shaped like an optimizer's or a scheduler's state_dict."""
    kinds = {}
    if isinstance(obj, dict):
        if {"state", "param_groups"} <= obj.keys():
            kinds[path] = "optimizer"
        elif "last_epoch" in obj and ("base_lrs" in obj or "_last_lr" in obj):
            kinds[path] = "scheduler"
        children = obj.items()
    else:
        children = enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in children:
        kinds.update(entry_kinds(value, path + (str(key),)))
    return kinds


def kind_of(path, kinds):
    """What a leaf belongs to: optimizer (its state), lr (a param group's LR), scheduler, rng, or other."""
    for cut in range(len(path), -1, -1):
        kind = kinds.get(path[:cut])
        if kind == "optimizer":
            rest = path[cut:]
            return "lr" if rest[:1] == ("param_groups",) and rest[-1:] in (("lr",), ("initial_lr",)) else "optimizer"
        if kind:
            return kind
    return "rng" if any(word in part.lower() for part in path for word in RNG_WORDS) else "other"


def close(a, b, rtol, atol):
    """Two losses or LRs (a float, None, or one LR per param group: a tuple, a list once it came back as JSON)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(close(x, y, rtol, atol) for x, y in zip(a, b))
    if a is None or b is None or isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return a is None and b is None
    return a == b or (a != a and b != b) or abs(a - b) <= atol + rtol * abs(b)


def same_leaf(a, b, rtol=0.0, atol=0.0):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        return torch.equal(a, b)
    if isinstance(a, float) and isinstance(b, float):
        return close(a, b, rtol, atol)
    if type(a) is type(b) and type(a).__eq__ is object.__eq__:
        return True  # an object without value equality (two loads give two instances): nothing to compare
    try:
        return bool(a == b)
    except Exception:  # an == that does not give a plain bool: cannot tell, so do not blame it
        return True


def state_difference(a, b, rtol=0.0, atol=0.0):
    """(paths whose leaves differ or exist on one side only, largest absolute difference of a float entry)."""
    paths = [p for p in a if p not in b or not same_leaf(a[p], b[p], rtol, atol)] + [p for p in b if p not in a]
    largest = 0.0
    for p in paths:
        x, y = a.get(p), b.get(p)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.is_floating_point():
            largest = max(largest, float((x.double() - y.double()).abs().max())) if x.numel() else largest
        elif isinstance(x, float) and isinstance(y, float):
            largest = max(largest, abs(x - y))
    return paths, largest


def dotted(path):
    return ".".join(path) or "(the whole state)"


def listing(entries):
    more = f", +{len(entries) - SHOWN} more" if len(entries) > SHOWN else ""
    return ", ".join(entries[:SHOWN]) + more


# --- one run: a trainer life per segment, resuming through an in-memory checkpoint ---------------

def save(trainer, where):
    """The trainer's state_dict() written by torch.save into memory, as a checkpoint file would hold it."""
    buffer = io.BytesIO()
    state = call(trainer, "state_dict", where=where)
    try:
        torch.save(state, buffer)
    except Exception as exc:  # the state holds something torch.save cannot pickle
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise CheckpointError(f"torch.save refused the state_dict() at the {where}: {type(exc).__name__}: {reason}") from exc
    return buffer


def restore(make_trainer, buffer, where, weights_only):
    """A new trainer that loaded the checkpoint, and what the load gave back (the round trip)."""
    fresh = new_trainer(make_trainer, where)

    def read():
        buffer.seek(0)
        try:
            return torch.load(buffer, weights_only=weights_only)
        except Exception as exc:  # torch's message spans lines; its "WeightsUnpickler error" line names the culprit
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
            reason = next((line for line in lines if line.startswith("WeightsUnpickler error:")), lines[0])
            raise CheckpointError(f"torch.load(weights_only={weights_only}) refused the checkpoint at the {where}: "
                                  f"{type(exc).__name__}: {reason}") from exc

    checkpoint = read()
    kinds = entry_kinds(checkpoint)
    call(fresh, "load_state_dict", checkpoint, where=where)
    saved = flatten(read())  # a pristine copy: load_state_dict may keep or change the one it was given
    not_restored, _ = state_difference(saved, flatten(call(fresh, "state_dict", where=f"right after the {where}")))
    info = {"bytes": buffer.getbuffer().nbytes, "entries": {dotted(p): kind for p, kind in kinds.items()},
            "not_restored": [{"entry": dotted(p), "kind": kind_of(p, kinds)} for p in not_restored]}
    return fresh, info


def run(make_trainer, steps, resume_at, weights_only, label):
    """Train `steps` steps, resuming before each step in `resume_at`; return the series and the final state."""
    series = {"loss": [], "batch": [], "lr": [], "resumes": []}
    trainer = new_trainer(make_trainer, label)
    for step in range(steps):
        if step in resume_at:
            where = f"resume before step {step}"
            buffer = save(trainer, where)
            trainer = None  # the old process is gone: only the checkpoint's bytes survive
            trainer, info = restore(make_trainer, buffer, where, weights_only)
            series["resumes"].append({"step": step, **info})
        where = f"{label}, step {step}"
        loss, batch, lr = read_step(call(trainer, "train_step", where=where), where)
        series["loss"].append(loss)
        series["batch"].append(batch)
        series["lr"].append(lr)
    series["final"] = flatten(call(trainer, "state_dict", where=f"{label}, after step {steps - 1}"))
    return series


def divergence(a, b, rtol, atol):
    """The first step where run b differs from run a, per signal, and the final-state entries that differ."""
    found = {}
    for signal in ("loss", "batch", "lr"):
        same = (lambda x, y: x == y) if signal == "batch" else (lambda x, y: close(x, y, rtol, atol))
        found[signal] = next((i for i, (x, y) in enumerate(zip(a[signal], b[signal])) if not same(x, y)), None)
    paths, largest = state_difference(a["final"], b["final"], rtol, atol)
    found["state"] = [dotted(p) for p in paths]
    found["state_max_abs_diff"] = largest
    steps = [found[s] for s in ("loss", "batch", "lr") if found[s] is not None]
    found["first_step"] = min(steps) if steps else None
    found["any"] = bool(steps or paths)
    return found


def public(series):
    return {key: series[key] for key in ("loss", "batch", "lr")}


# --- the check -------------------------------------------------------------------------------------

def check_resume(make_trainer, steps=STEPS, resume_at=RESUME_AT, rtol=RTOL, atol=ATOL, weights_only=True):
    """Run make_trainer()'s trainer straight (twice) and with resumes before `resume_at`; compare; classify."""
    resume_at = tuple(sorted(set(resume_at)))
    if steps < 2 or not resume_at or resume_at[0] < 1 or resume_at[-1] >= steps:
        raise CheckError(f"resume points {list(resume_at)} must lie in 1..{steps - 1} (steps={steps})")
    if rtol < 0 or atol < 0:
        raise CheckError("rtol and atol must be >= 0")
    handed = HandedIn()
    make_trainer = tracked(make_trainer, handed)
    with rng_preserved():
        try:
            reference = run(make_trainer, steps, (), weights_only, "reference run")
            rerun = run(make_trainer, steps, (), weights_only, "second reference run")
            noise = divergence(reference, rerun, rtol, atol)
            del rerun["final"]  # one copy of the final state less in memory
            if not noise["any"]:
                try:
                    resumed = run(make_trainer, steps, resume_at, weights_only, "resumed run")
                except CheckpointError as exc:
                    resumed = exc
        finally:
            handed.restore()
    details = {"steps": steps, "resume_at": list(resume_at), "rtol": rtol, "atol": atol, "weights_only": weights_only,
               "seed": SEED, "reference": public(reference), "reference_repeats": not noise["any"]}
    if noise["any"]:  # no resumed run: it could not be judged
        details["rerun"] = public(rerun)
        return nondeterministic(details, noise, reference, rerun, "two straight runs from the same seed differ")
    if isinstance(resumed, CheckpointError):
        details.update(verdict="checkpoint_unloadable", next="keep tensors, numbers, strings, lists and dicts in "
                       "state_dict() (e.g. torch.get_rng_state(), not a Generator object), or load with weights_only=False "
                       "if your code does (--no-weights-only)")
        return CheckResult("resume_check", "fail", f"checkpoint_unloadable: {resumed}", details)
    details["resumed"] = public(resumed)
    details["resumes"] = resumed["resumes"]
    found = divergence(reference, resumed, rtol, atol)
    details["divergence"] = {key: value for key, value in found.items() if key != "any"}
    if found["first_step"] is not None and found["first_step"] < resume_at[0]:
        return nondeterministic(details, found, reference, resumed,
                                f"the resumed run differs before its first resume (step {resume_at[0]})")
    if not found["any"]:
        details["verdict"] = "ok"
        how = "bit for bit" if rtol == atol == 0 else f"within rtol {rtol}, atol {atol}"
        return CheckResult("resume_check", "pass", f"ok: {steps} steps with resumes before step "
                           f"{', '.join(map(str, resume_at))} match the straight run {how} "
                           "(loss, batches, LR, final state)", details)
    verdict, summary, advice = classify(reference, resumed, found, resume_at)
    details.update(verdict=verdict, next=advice)
    return CheckResult("resume_check", "fail", f"{verdict}: {summary}", details)


def nondeterministic(details, found, a, b, what):
    step = found["first_step"]
    if step is None:
        where = (f"in the final state ({listing(found['state'])}; largest difference "
                 f"{found['state_max_abs_diff']:.3g})")
    else:
        signal = next(s for s in ("batch", "loss", "lr") if found[s] == step)
        where = f"at step {step} ({signal} {a[signal][step]} vs {b[signal][step]})"
    details.update(verdict="nondeterministic", divergence={k: v for k, v in found.items() if k != "any"},
                   next="make the run repeat first: seed inside make_trainer(), no unseeded generators or data iterators "
                        "shared between trainers, torch.use_deterministic_algorithms(True); or pass --atol/--rtol above "
                        "the noise")
    return CheckResult("resume_check", "fail", f"nondeterministic: {what} {where}; the check cannot judge the "
                       "resume until the straight run repeats (this is not a resume bug)", details)


def classify(reference, resumed, found, resume_at):
    """(verdict, summary, next) for a resumed run that differs from the reference."""
    step = found["first_step"]
    at = max((k for k in resume_at if step is None or k <= step), default=resume_at[0])
    after = f"after the resume before step {at}"
    lost = {}  # kind -> entries that did not survive a load, from the first resume that lost any
    for info in resumed["resumes"]:
        if info["not_restored"] and not lost:
            for item in info["not_restored"]:
                lost.setdefault(item["kind"], []).append(item["entry"])
    kinds = set(resumed["resumes"][0]["entries"].values())

    if found["batch"] is not None:
        b = found["batch"]
        fed = [i for i, f in enumerate(reference["batch"]) if f == resumed["batch"][b]]
        if fed and fed[0] < b:
            repeated = [i for i in range(b, len(resumed["batch"])) if resumed["batch"][i] in reference["batch"][:i]]
            ref_loss = sum(reference["loss"][i] for i in repeated) / len(repeated)
            res_loss = sum(resumed["loss"][i] for i in repeated) / len(repeated)
            lower = (f"; their loss averages {res_loss:.3g} against the straight run's {ref_loss:.3g} at the same steps, "
                     "lower because the model has seen them (a false improvement)" if res_loss < ref_loss else "")
            count = len(resumed["batch"]) - b
            count = f"all {count}" if len(repeated) == count else f"{len(repeated)} of the {count}"
            return ("data_restarted", f"{after}, step {b} is fed the batch of step {fed[0]}"
                    f"{' (the data stream started over)' if fed[0] == 0 else ''}: {count} steps from there re-feed "
                    f"batches already trained on{lower}",
                    "save the data position (epoch and batch index, or your sampler's / StatefulDataLoader's state) in "
                    "state_dict() and skip to it in load_state_dict(); a new seed would only hide the repeat")
        if fed:
            return ("data_skipped",
                    f"{after}, step {b} is fed the batch of step {fed[0]}: {fed[0] - b} batch(es) skipped",
                    "save the number of batches train_step() consumed, not what a prefetching loader has fetched")
        return ("rng_not_restored", f"{after}, step {b} is fed a batch the straight run never fed: the data order "
                "changed (a shuffle generator, or the sampler's seed and epoch, not restored)",
                "save the sampler's generator state or its seed and epoch, and restore them before the iterator is rebuilt")
    if "optimizer" in lost:
        return ("optimizer_state_lost", f"load_state_dict() does not restore the optimizer state "
                f"({listing(lost['optimizer'])}): momentum and Adam's moments restart from zero, the runs part at step "
                f"{step if step is not None else 'end'}",
                "call optimizer.load_state_dict(sd[...]) in load_state_dict(), after the model's weights are loaded")
    if "scheduler" in lost or "lr" in lost:
        entries = lost.get("scheduler", []) + lost.get("lr", [])
        return ("scheduler_state_lost", f"load_state_dict() does not restore the LR schedule ({listing(entries)})"
                f"{lr_jump(reference, resumed, found)}", scheduler_advice())
    if "rng" in lost:
        return ("rng_not_restored", f"load_state_dict() does not restore the RNG state ({listing(lost['rng'])}): "
                "new dropout masks and random draws after every resume",
                "restore every saved RNG state last in load_state_dict(), and do not re-seed after loading")
    if "optimizer" not in kinds and step is not None and step > at:
        return ("optimizer_state_lost", f"the checkpoint holds no optimizer state_dict (no dict with 'state' and "
                f"'param_groups'); the first resumed step matches, its update does not (runs part at step {step})",
                "put optimizer.state_dict() in state_dict() and load it in load_state_dict()")
    if found["lr"] is not None:
        return ("scheduler_state_lost", f"the LR differs {after}{lr_jump(reference, resumed, found)}", scheduler_advice())
    if step == at and reference["batch"][step] is not None:
        return ("rng_not_restored", f"{after}, step {step} gets the same batch but another loss "
                f"({resumed['loss'][step]:.6g} vs {reference['loss'][step]:.6g}): forward-pass randomness (dropout) "
                "differs, so an RNG state is not saved or not restored",
                "save torch.get_rng_state() (and CUDA's, Python's, NumPy's) in state_dict() and restore it in "
                "load_state_dict()")
    if "other" in lost:
        return ("state_not_restored", f"load_state_dict() does not restore {listing(lost['other'])}",
                "restore these entries in load_state_dict(); state_dict() right after a load must return what was loaded")
    where = f"at step {step}" if step is not None else f"in the final state ({listing(found['state'])})"
    unseen = "" if reference["batch"][0] is not None else \
        "; return {'loss', 'batch', 'lr'} from train_step() to narrow it down"
    return ("state_not_restored", f"the resumed run parts from the straight run {where}, {after}{unseen}",
            "look for state the checkpoint misses: grad scaler, EMA weights, RNGs, the data position, buffers")


def lr_jump(reference, resumed, found):
    step = found["lr"]
    if step is None:
        return ""
    return f": at step {step} the LR is {lr_text(resumed['lr'][step])} instead of {lr_text(reference['lr'][step])}"


def scheduler_advice():
    return ("put scheduler.state_dict() in state_dict() and load it in load_state_dict(); a fresh scheduler "
            "restarts the warmup")


# --- the embedded demo: a trainer users can adapt, and its planted bugs ---------------------------

def warmup(step):
    return min(1.0, (step + 1) / 4)  # 4-step linear warmup


class DemoTrainer:
    """An MLP memorising random labels, with AdamW, LR warmup, dropout and a shuffled stream of batches."""

    def __init__(self):
        data = torch.Generator().manual_seed(1234)
        self.x = torch.randn(64, 16, generator=data)
        self.y = torch.randint(0, 4, (64,), generator=data)  # random labels: only memorising lowers the loss
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                         torch.nn.Linear(64, 4))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-2)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, warmup)
        self.epoch, self.pos = 0, 0  # the data position: epoch, and batch inside it

    def next_batch(self):
        order = torch.randperm(64, generator=torch.Generator().manual_seed(self.epoch))  # seed + epoch, like DistributedSampler
        idx = order[self.pos * 8:(self.pos + 1) * 8]
        self.epoch, self.pos = (self.epoch + 1, 0) if self.pos == 7 else (self.epoch, self.pos + 1)
        return idx

    def train_step(self):
        idx = self.next_batch()
        loss = torch.nn.functional.cross_entropy(self.model(self.x[idx]), self.y[idx])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        lr = self.sched.get_last_lr()[0]  # the LR this step used
        self.sched.step()
        return {"loss": loss.item(), "batch": idx, "lr": lr}

    def state_dict(self):
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                "data": {"epoch": self.epoch, "pos": self.pos}, "rng": torch.get_rng_state()}

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optimizer"])
        self.sched.load_state_dict(sd["scheduler"])
        self.epoch, self.pos = sd["data"]["epoch"], sd["data"]["pos"]
        torch.set_rng_state(sd["rng"])


class DataRestartBug(DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.epoch, self.pos = 0, 0  # BUG: the data stream starts over on every resume (the PyTorch Lightning trap)


class RngBug(DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        torch.manual_seed(SEED)  # BUG: re-seeding after the load throws the restored RNG state away: new dropout masks


class OptimizerBug(DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.opt.state.clear()  # BUG: Adam's moments and step counts start from zero, as if they were never saved


class SchedulerBug(DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, warmup)  # BUG: a fresh scheduler: back to warmup


DEMO_TRAINERS = {None: DemoTrainer, "data_restart": DataRestartBug, "rng": RngBug, "optimizer": OptimizerBug,
                 "scheduler": SchedulerBug}


def make_demo_trainer(bug=None):
    """The factory for the demo: `bug` None is the healthy trainer, else one of BUGS."""
    return DEMO_TRAINERS[bug]()


# --- the command line ------------------------------------------------------------------------------

def load_factory(spec):
    """Load `path/to/file.py[:factory]` (default factory make_trainer) and return the factory."""
    progress["at"] = f"importing {spec.partition(':')[0]}"
    return user_function(spec, "make_trainer", "trainer file", CheckError)[2]


def report(result):
    """The verdict line, the step-by-step table, and what to do next."""
    d = result.details
    lines = [f"[{result.status.upper()}] {result.id}: {result.summary}"]
    other = d.get("resumed") or d.get("rerun")
    if other is None:
        return "\n".join(lines)
    ref, name = d["reference"], "resumed" if "resumed" in d else "rerun"
    lines.append(f"  {'step':>5}  {'loss: reference':>15} {name:>10}   {'lr: reference':>13} {name:>9}   batch")
    for step in range(d["steps"]):
        mark = ">" if name == "resumed" and step in d["resume_at"] else " "
        loss_flag = " " if close(ref["loss"][step], other["loss"][step], d["rtol"], d["atol"]) else "*"
        lr_flag = " " if close(ref["lr"][step], other["lr"][step], d["rtol"], d["atol"]) else "*"
        batch = other["batch"][step]
        if batch is None:
            seen = "-"
        elif batch == ref["batch"][step]:
            seen = "same"
        elif batch in ref["batch"]:
            seen = f"= step {ref['batch'].index(batch)}*"
        else:
            seen = "new*"
        lines.append(f"  {mark}{step:>4}  {ref['loss'][step]:>15.6g} {other['loss'][step]:>10.6g}{loss_flag}  "
                     f"{lr_text(ref['lr'][step]):>13} {lr_text(other['lr'][step]):>9}{lr_flag}  {seen}")
    if d.get("writes"):
        lines.append(f"  your trainer: {d['writes']}")
    if d.get("next"):
        lines.append(f"  next: {d['next']}")
    return "\n".join(lines)


def lr_text(lr):
    if lr is None:
        return "-"
    return "/".join(f"{v:.4g}" for v in lr) if isinstance(lr, (tuple, list)) else f"{lr:.4g}"


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", help="path/to/file.py[:factory]: a function (default make_trainer) returning a new "
                        "trainer; without it, runs the embedded demo with a planted bug")
    parser.add_argument("--bug", choices=BUGS, help="the bug the demo plants (default data_restart)")
    parser.add_argument("--healthy", action="store_true", help="run the embedded demo's healthy twin")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per run (default {STEPS})")
    parser.add_argument("--resume-at", default=",".join(map(str, RESUME_AT)),
                        help="steps before which the check saves, rebuilds and loads, comma-separated (default %(default)s)")
    parser.add_argument("--rtol", type=float, default=RTOL, help="relative tolerance (default 0: exact)")
    parser.add_argument("--atol", type=float, default=ATOL, help="absolute tolerance (default 0: exact)")
    parser.add_argument("--no-weights-only", action="store_true",
                        help="read the checkpoint with torch.load(weights_only=False), if your own code does")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds the whole check may take, trainer file import included (default {TIMEOUT:g}); "
                             "past it, the check reports where it waited and exits 2")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        if not args.timeout > 0:
            raise CheckError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
        if args.trainer and (args.healthy or args.bug):
            raise CheckError("--healthy and --bug choose the embedded demo; they do not apply to --trainer")
        if args.healthy and args.bug:
            raise CheckError("--healthy runs the demo without a bug; do not combine it with --bug")
        try:
            resume_at = [int(part) for part in args.resume_at.split(",")]
        except ValueError:
            raise CheckError(f"--resume-at takes comma-separated step numbers, not {args.resume_at!r}") from None
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bug = None if args.healthy else args.bug or "data_restart"
    scratch = tempfile.mkdtemp(prefix="ml-debug-scratch-") if args.trainer and SUPERVISED else None

    def work():  # with --trainer, in the supervised child: the trainer file is the user's code
        guard = WriteGuard(scratch).install() if scratch else None  # for good: only in the child
        try:
            factory = load_factory(args.trainer) if args.trainer else functools.partial(make_demo_trainer, bug)
            result = check_resume(factory, args.steps, resume_at, args.rtol, args.atol, not args.no_weights_only)
        except CheckTimeout:  # named with the call it waited on
            raise CheckError(f"resume_check ran past the {args.timeout:g} s time limit and was stopped, still in "
                             f"{progress['at']}: a hang (a collective waiting for another rank, a data loader worker, "
                             "input()) or a configuration too big for a check; give a smaller one, or a larger "
                             "--timeout") from None
        if guard is not None and guard.written:
            result.details["writes"] = guard.summary(os.getcwd())
        return result.to_dict()

    try:
        try:
            result = CheckResult(**run_user_code(work, args.trainer and f"running {args.trainer}", args.timeout,
                                                 args.json, CheckError, "the check could not run"))
        except CaseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)  # our own folder: what the trainer wrote went there
        sys.stdout.write((json_text(result.to_dict()) if args.json else report(result)) + "\n")
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130
    except OSError as exc:  # `resume_check.py | head` closed the pipe, or stdout is a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return (1 if result.status == "fail" else 0) if isinstance(exc, BrokenPipeError) else 1
    return 1 if result.status == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
