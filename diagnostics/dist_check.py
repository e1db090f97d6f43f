"""dist_check: a distributed smoke test that names the rank and the collective a hang is stuck in.

Symptom
    A multi-process run hangs with no error: every rank sits at 100% or 0% and nothing is logged,
    or it dies after the backend's timeout (10 minutes by default for NCCL) with a message that
    names no culprit. Before suspecting the model, check that the ranks can talk at all, then find
    which rank did not arrive, and where its Python is parked.

What it checks
    Every rank initialises the process group and runs five collectives on known values, each
    under a time limit (--timeout, default 30 s: long enough for a first NCCL/gloo connection on a
    slow network, short enough to wait for; raise it across many nodes):

      barrier          every rank arrives
      all_reduce       sum of (rank + 1) over ranks = world * (world + 1) / 2
      all_gather       each rank's rank, gathered in order: 0, 1, ..., world - 1
      broadcast        rank 0's value 1000 reaches every rank
      ring send/recv   each rank sends its rank to the next; receives the previous one's

    A wrong value is a `fail` (a broken transport or a mismatched world). Before each step a rank
    posts where it is to the rendezvous store. When a collective times out, the ranks that did
    arrive read those posts and name the others: a rank still before the collective did not
    arrive (slow, stuck or sleeping: its stack says where), a rank already past it skipped the
    collective (the classic `if rank == 0:` around a collective). Every rank that stalls for
    80% of the time limit writes its Python stack (faulthandler, all threads) to
    OUT/rank<N>.stack.txt, and its verdict to OUT/rank<N>.json; then every rank exits, so no
    process is left waiting.

    In your own training script, import the watch instead (torch + stdlib, nothing else):

      from dist_check import HangWatch
      watch = HangWatch(stall_seconds=300, out_dir="hang_stacks")  # after init_process_group
      for step, batch in enumerate(loader):
          ...
          watch.step(step)        # re-arms the timer: no step for 300 s -> every stack to a file
      watch.close()

    `kill -USR1 <pid>` makes a watched process write its stacks at once, without stopping it.

Command
    torchrun --nproc_per_node 8 diagnostics/dist_check.py            # on the real machines
    python diagnostics/dist_check.py --nproc 2                       # N local ranks: nccl with a GPU each, else gloo
    python diagnostics/dist_check.py --nproc 2 --plant skip --timeout 5   # demo: a planted hang

Output
    $ python diagnostics/dist_check.py --nproc 2 --plant skip --timeout 5
    dist_check: 2 ranks, backend gloo, timeout 5 s; stacks and verdicts in dist_check_out
      rank 0  cpu   FAIL  all_reduce timed out (limit 5 s)
      rank 1  cpu   FAIL  all_gather timed out (limit 5 s)
    HANG at all_reduce (step 2 of 5): rank 1 skipped it (it went on to all_gather); rank 0 waited for it.
    next: find the collective that rank 1 does not call (a collective inside `if rank == 0:` or a data-dependent branch); its stack: dist_check_out/rank1.stack.txt
    (exit code 1)

How to read it
    One line per rank: its device and its last verdict. A rank whose own time limit had not run
    out when another's did reads `stopped by another rank's hang verdict while at <collective>`
    (which rank's timer fires first is a race). The HANG line names the collective that hung, the
    earliest one a rank waits in, whichever rank timed out first, and, for each rank that did not
    take part, whether it had not arrived yet (stuck before it: read its stack file, first frame
    from the top that is your code) or had skipped it (it is already in a later collective).
    `all ranks passed` means the transport, rendezvous and backend work: a hang in training is
    then in your code's collective order, not in the network.
    Exit code: 0 every rank passed, 1 a wrong value or a hang, 2 bad usage.

Next step
    A rank that skipped: look for a collective under a condition that differs between ranks
    (rank checks, a data-dependent `if`, an early `break` on one rank). A rank that did not
    arrive: its stack file shows where it waits (data loading, a checkpoint write on rank 0
    only, a deadlock). Then run your training with HangWatch so the next hang writes its stacks.
    refs/distributed.md has the checklist.
"""
import argparse
import contextlib
import datetime
import faulthandler
import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

# c10d logs every failed connection attempt and timeout to stderr with C++ frames; dist_check says what failed in one
# line. Set before torch loads (TORCH_CPP_LOG_LEVEL=INFO in the environment brings the logs back).
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.distributed as dist

from ml_debug_contract import ArgumentParser, OutputFolder, OutputRefused, run_command

DEFAULT_TIMEOUT = 30.0  # seconds per collective: a first NCCL/gloo connection on a slow network takes a few
TIMEOUT_RANGE = (1.0, 86400.0)  # below a second a first connection cannot be made; above a day it is no smoke test
STALL_FRACTION = 0.8  # the stack is written at 80% of the limit: before the collective's own timeout unwinds it
LISTEN_POLL = 0.05  # seconds between tries to reach the store: a rank started before rank 0 waits at most this long extra
STEPS = ("barrier", "all_reduce", "all_gather", "broadcast", "ring_send_recv")
BROADCAST_VALUE = 1000.0


class UsageError(Exception):
    """Bad usage: one line on stderr, exit code 2."""


class HangWatch:
    """Write every thread's Python stack to a per-rank file when no step() came for `stall_seconds`.

    Cheap enough for every step: step() re-arms one faulthandler timer (no thread, no host sync).
    SIGUSR1 writes the stacks at once (where the platform has it). close() disarms both.
    """

    def __init__(self, stall_seconds=300.0, out_dir="hang_stacks", rank=None):
        if not stall_seconds > 0:
            raise ValueError(f"stall_seconds must be > 0, got {stall_seconds}")
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", 0))
        self.stall_seconds = float(stall_seconds)
        self.path = Path(out_dir) / f"rank{rank}.stack.txt"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a")  # appended, never truncated: earlier dumps stay readable
        self._signal = getattr(signal, "SIGUSR1", None)
        if self._signal is not None:
            faulthandler.register(self._signal, file=self._file, all_threads=True)
        self.step(None)

    def step(self, step):
        """Call once per training step: restarts the stall timer."""
        if step is not None:
            self._file.write(f"-- step {step} at {time.strftime('%H:%M:%S')}\n")
        faulthandler.dump_traceback_later(self.stall_seconds, repeat=False, file=self._file)

    def close(self):
        faulthandler.cancel_dump_traceback_later()
        if self._signal is not None:
            faulthandler.unregister(self._signal)
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _expected_and_run(step, rank, world, device):
    """Run one collective on known values; return (ok, detail)."""
    if step == "barrier":
        dist.barrier()
        return True, "every rank arrived"
    if step == "all_reduce":
        value = torch.tensor([rank + 1.0], device=device)
        dist.all_reduce(value)
        expected = world * (world + 1) / 2
        return value.item() == expected, f"sum {value.item():g}, expected {expected:g}"
    if step == "all_gather":
        parts = [torch.zeros(1, device=device) for _ in range(world)]
        dist.all_gather(parts, torch.tensor([float(rank)], device=device))
        got = [int(p.item()) for p in parts]
        return got == list(range(world)), f"gathered {got}"
    if step == "broadcast":
        value = torch.tensor([BROADCAST_VALUE if rank == 0 else -1.0], device=device)
        dist.broadcast(value, src=0)
        return value.item() == BROADCAST_VALUE, f"received {value.item():g}, expected {BROADCAST_VALUE:g}"
    if world == 1:
        return True, "one rank: nothing to send"
    received = torch.full((1,), -1.0, device=device)
    requests = [dist.isend(torch.tensor([float(rank)], device=device), (rank + 1) % world),
                dist.irecv(received, (rank - 1) % world)]
    for request in requests:
        request.wait()
    return received.item() == (rank - 1) % world, f"received {received.item():g} from rank {(rank - 1) % world}"


def _post(store, rank, index, phase):
    """Tell the other ranks where this rank is: step index, and 'enter' or 'done'."""
    store.set(f"dist_check/pos/{rank}", json.dumps({"index": index, "phase": phase}))


def _positions(store, world):
    positions = {}
    for other in range(world):
        try:
            positions[other] = json.loads(store.get(f"dist_check/pos/{other}"))
        except Exception:  # the store is gone with its host rank: that rank's position is unknown
            positions[other] = None
    return positions


def diagnose_hang(index, positions):
    """Name the ranks that did not take part in the collective that hung: not arrived (before it) or skipped
    (past it). That is the earliest one a rank is waiting in, not always `index`, the caller's own: when a rank
    skipped all_reduce and waits in all_gather, its timer may fire before the timer of the rank left in
    all_reduce (on a busy machine it does), and both must name all_reduce."""
    index = min([where["index"] for where in positions.values() if where and where["phase"] == "enter"] + [index])
    waited, behind, skipped, unknown = [], [], [], []
    for rank, where in sorted(positions.items()):
        if where is None:
            unknown.append(rank)
        elif where["index"] < index or (where["index"] == index and where["phase"] == "before"):
            behind.append(rank)
        elif where["index"] > index:
            skipped.append((rank, STEPS[where["index"]]))
        else:
            waited.append(rank)
    parts = []
    if skipped:
        names = ", ".join(f"rank {rank} skipped it (it went on to {step})" for rank, step in skipped)
        parts.append(names)
    if behind:
        parts.append(f"rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))} did not arrive "
                     f"(still before it)")
    if unknown:
        parts.append(f"rank{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} cannot be asked")
    culprits = [rank for rank, _ in skipped] + behind + unknown
    return {"step": STEPS[index], "index": index, "waited": waited, "behind": behind,
            "skipped": [rank for rank, _ in skipped], "unknown": unknown, "culprits": culprits,
            "text": "; ".join(parts) or "every rank arrived: the transport itself stalled"}


def _abort_watch(store, stack_file, on_abort):
    """A daemon thread: when another rank declares the run dead, or the store vanishes, dump stacks and exit.

    Returns stop(): it ends the thread and waits for it. A healthy rank calls it before it tears down: a daemon thread
    still inside a store call when the interpreter finalises is ended in C++ code, which aborts the process (SIGABRT
    after "all ranks passed", once in 7 healthy torchrun runs)."""
    stopping = threading.Event()

    def watch():
        while not stopping.wait(0.2):
            try:
                dead = store.check(["dist_check/abort"])
            except Exception:
                dead = True
            if dead:
                try:
                    faulthandler.dump_traceback(file=stack_file, all_threads=True)
                    stack_file.flush()
                    on_abort()  # publishes to the store, which may be gone with its host
                finally:
                    os._exit(1)
    thread = threading.Thread(target=watch, daemon=True, name="dist_check-abort-watch")
    thread.start()

    def stop():
        stopping.set()
        thread.join()
    return stop


def rank_names(ranks):
    """The files the ranks write into OUT."""
    return [f"rank{rank}{suffix}" for rank in ranks for suffix in (".json", ".stack.txt")]


def _env_int(name, low, high):
    text = os.environ.get(name)
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name}={text!r} is not a whole number: run under torchrun, which sets it") from None
    if not low <= value <= high:
        raise UsageError(f"{name}={value} must be between {low} and {high}")
    return value


def rank_environment():
    """(rank, world, local rank, MASTER_ADDR, MASTER_PORT) as torchrun sets them; UsageError (one line) for a missing
    or malformed one."""
    if "WORLD_SIZE" not in os.environ:
        raise UsageError("RANK is set but WORLD_SIZE is not: run under torchrun (it sets both), or set both")
    world = _env_int("WORLD_SIZE", 1, 1 << 20)
    rank = _env_int("RANK", 0, world - 1)
    local_rank = _env_int("LOCAL_RANK", 0, world - 1) if "LOCAL_RANK" in os.environ else rank
    port = _env_int("MASTER_PORT", 1, 65535) if "MASTER_PORT" in os.environ else 29500
    return rank, world, local_rank, os.environ.get("MASTER_ADDR", "127.0.0.1"), port


def connect(host, port, world, timeout, host_store):
    """The rendezvous store: hosted by rank 0, by torchrun's agent, or by the --nproc launcher.

    A client first waits for the store's port to answer, within twice --timeout: c10d's own connect backs off between
    tries and overshoots its limit (a 2 s limit took 5.3 s to give up when nothing listened, measured on the 2-core VM).
    """
    limit = datetime.timedelta(seconds=timeout * 2)
    if host_store:
        return dist.TCPStore(host, port, world, True, timeout=limit, wait_for_workers=False)
    wait_for_listener(host, port, timeout * 2)
    return dist.TCPStore(host, port, world, False, timeout=limit)


def wait_for_listener(host, port, seconds):
    """Return once something accepts a connection at host:port; RuntimeError after `seconds` of refusals."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, port), timeout=max(LISTEN_POLL, deadline - time.monotonic())).close()
            return
        except OSError as exc:
            if time.monotonic() + LISTEN_POLL > deadline:
                raise RuntimeError(f"nothing accepted a connection at {host}:{port} ({exc})") from None
            time.sleep(LISTEN_POLL)


def read_verdicts(store, world):
    verdicts = {}
    for rank in range(world):
        try:
            if store.check([f"dist_check/verdict/{rank}"]):
                verdicts[rank] = json.loads(store.get(f"dist_check/verdict/{rank}"))
        except Exception:  # the store went down with its host
            break
    return verdicts


def local_gpus():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_backend(local_ranks):
    """nccl when this machine has a GPU for each of its `local_ranks`, else gloo: NCCL refuses two ranks on one GPU, so
    two ranks on a one-GPU workstation test the CPU transport rather than fail to start."""
    return "nccl" if 0 < local_ranks <= local_gpus() else "gloo"


def refuse_nccl_without_a_gpu_per_rank(local_ranks, what):
    """UsageError (one line) when NCCL is asked for with fewer GPUs here than local ranks."""
    gpus = local_gpus()
    if gpus == 0:
        raise UsageError("--backend nccl needs CUDA, and this machine has none: use gloo")
    if local_ranks > gpus:
        raise UsageError(f"--backend nccl needs a GPU per rank: {what}, and this machine has {gpus} GPU"
                         f"{'s' if gpus > 1 else ''}: start at most {gpus} rank{'s' if gpus > 1 else ''} on it, or use gloo")


def run_rank(rank, world, local_rank, store, out_dir, timeout, backend, plant=None, record=lambda: None):
    """One rank's whole smoke test; returns its verdict. Writes OUT/rank<N>.json and .stack.txt, then record()s them
    (also on the way out of an abort)."""
    device = torch.device(f"cuda:{local_rank}" if backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    out_dir = Path(out_dir)
    stack_file = open(out_dir / f"rank{rank}.stack.txt", "w")
    verdict = {"rank": rank, "world": world, "backend": backend, "device": str(device), "status": "pass",
               "steps": {}, "summary": "all steps passed"}
    where = {"step": "init"}
    verdict_lock = threading.Lock()  # the abort watcher may publish while this thread writes the verdict

    def publish():
        with verdict_lock:
            text = json.dumps(verdict)
            (out_dir / f"rank{rank}.json").write_text(text)
            store.set(f"dist_check/verdict/{rank}", text)

    def aborted():
        with verdict_lock:
            if "hang" not in verdict:  # this rank's own timeout verdict stays as it is
                verdict.update(status="fail", summary=f"stopped by another rank's hang verdict while at {where['step']}")
        try:
            publish()  # also a verdict of its own not published yet: the process ends right after this
        finally:
            record()

    stall = STALL_FRACTION * timeout
    faulthandler.dump_traceback_later(stall, repeat=False, file=stack_file)  # a stall anywhere writes the stack
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
    except RuntimeError as exc:  # a peer that never joined, or died while joining
        faulthandler.cancel_dump_traceback_later()
        stack_file.close()
        record()
        raise UsageError(f"rank {rank}: the process group did not form within {timeout:g} s (a rank never started, "
                         f"or died): {_first_line(exc)}") from None
    _post(store, rank, 0, "before")
    stop_watch = _abort_watch(store, stack_file, aborted)
    for index, step in enumerate(STEPS):
        where["step"] = step
        _post(store, rank, index, "enter")
        faulthandler.dump_traceback_later(stall, repeat=False, file=stack_file)
        if plant == "skip" and rank == world - 1 and step == "all_reduce":
            _post(store, rank, index, "done")
            continue  # BUG: the last rank skips a collective that every other rank calls
        if plant == "sleep" and rank == world - 1 and step == "all_gather":
            _post(store, rank, index, "before")
            time.sleep(timeout * 10)  # BUG: the last rank stalls before a collective (a slow loader, a lock)
        start = time.monotonic()
        try:
            ok, detail = _expected_and_run(step, rank, world, device)
        except RuntimeError as exc:
            hang = diagnose_hang(index, _positions(store, world))
            with verdict_lock:
                verdict.update(status="fail", summary=f"{step} timed out (limit {timeout:g} s)", hang=hang,
                               seconds=round(time.monotonic() - start, 2), error=str(exc).splitlines()[0][:300])
                verdict["steps"][step] = {"ok": False, "detail": verdict["summary"]}
            break
        with verdict_lock:
            verdict["steps"][step] = {"ok": ok, "detail": detail}
            if not ok:
                verdict.update(status="fail", summary=f"{step} gave a wrong value: {detail}")
        _post(store, rank, index, "done")
    faulthandler.cancel_dump_traceback_later()
    publish()
    if "hang" in verdict:
        faulthandler.dump_traceback(file=stack_file, all_threads=True)
        stack_file.flush()
        record()
        return verdict  # the caller reports, then ends the process: a dead collective cannot be torn down
    stop_watch()
    try:
        dist.barrier()  # every rank is done with the store and the group before any tears down
        dist.destroy_process_group()
    except RuntimeError as exc:  # a peer died after its last collective
        raise UsageError(f"rank {rank}: a peer left before the end: {_first_line(exc)}") from None
    finally:
        stack_file.close()
        record()
    return verdict


def _first_line(exc):
    return " ".join((str(exc).strip().splitlines() or [type(exc).__name__])[0].split())[:300]


def agree_on_out(store, rank, world, out, force, timeout):
    """Under torchrun: every rank checks OUT for its own files before any rank writes one, and all learn every
    rank's answer; returns this rank's OutputFolder, made. UsageError (one line) for a refusal on any rank, or a rank
    that never arrives."""
    try:
        folder, answer = OutputFolder(out, rank_names([rank]), force, tool="dist_check.py"), ""
    except OutputRefused as exc:
        folder, answer = None, f"rank {rank}: {exc}"
    store.set(f"dist_check/out/{rank}", answer)
    keys = [f"dist_check/out/{other}" for other in range(world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout * 2))
    except RuntimeError:
        missing = [str(other) for other, key in enumerate(keys) if not store.check([key])]
        raise UsageError(f"rank {rank}: rank{'s' if len(missing) > 1 else ''} {', '.join(missing)} never reached the "
                         f"rendezvous within {timeout * 2:g} s: start every rank, or check MASTER_ADDR and MASTER_PORT")
    refusals = [text for text in (store.get(key).decode() for key in keys) if text]
    if refusals:
        raise UsageError(refusals[0])
    folder.prepare()
    return folder


def report(verdicts, world, backend, timeout, out_dir):
    """The combined report from every rank's verdict (a missing verdict: the rank never reported)."""
    lines = [f"dist_check: {world} rank{'s' if world > 1 else ''}, backend {backend}, timeout {timeout:g} s; "
             f"stacks and verdicts in {out_dir}"]
    for rank in range(world):
        v = verdicts.get(rank)
        if v is None:
            lines.append(f"  rank {rank}  ?     FAIL  never reported (killed, or stuck where no timer could fire)")
        else:
            lines.append(f"  rank {rank}  {v['device']:<5} {v['status'].upper():5} {v['summary']}")
    hangs = [v["hang"] for v in verdicts.values() if "hang" in v]
    if hangs:
        hang = min(hangs, key=lambda h: h["index"])
        waited = ", ".join(map(str, hang["waited"])) or "none"
        lines.append(f"HANG at {hang['step']} (step {hang['index'] + 1} of {len(STEPS)}): {hang['text']}; "
                     f"rank{'s' if len(hang['waited']) > 1 else ''} {waited} waited for it.")
        stacks = ", ".join(f"{out_dir}/rank{rank}.stack.txt" for rank in hang["culprits"])
        if hang["skipped"]:
            who = ", ".join(map(str, hang["skipped"]))
            lines.append(f"next: find the collective that rank {who} does not call (a collective inside "
                         f"`if rank == 0:` or a data-dependent branch); its stack: {stacks}")
        elif hang["culprits"]:
            lines.append(f"next: read where the late rank waits, the first frame from the top that is your code: {stacks}")
    elif len(verdicts) == world and all(v["status"] == "pass" for v in verdicts.values()):
        lines.append("all ranks passed: rendezvous, backend and transport work; a hang in training is then in the "
                     "order of your collectives (run it with HangWatch)")
    return "\n".join(lines)


# Linux forks the local ranks from the launcher, which has torch loaded: a fresh interpreter per rank imports torch
# again (3.5 s of CPU each on a 2-core VM, measured). Elsewhere fork is unsafe (macOS) or missing (Windows): spawn.
# NCCL ranks are spawned everywhere: CUDA cannot be used in a child forked after the parent asked the driver about it.
RANK_START = "fork" if sys.platform.startswith("linux") else "spawn"


def launch_local(nproc, args):
    """Start `nproc` local ranks the way torchrun would (env RANK, WORLD_SIZE, ...), host their store, collect.

    The ranks start before the store does: no server thread of the store's crosses the fork, and each rank reaches
    the store through the network, as under torchrun."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--out", str(args.out), "--timeout", str(args.timeout)]
    argv += (["--backend", args.backend] if args.backend else []) + (["--plant", args.plant] if args.plant else [])
    context = multiprocessing.get_context("spawn" if args.backend == "nccl" else RANK_START)
    ranks = [context.Process(target=run_launched_rank, args=(rank, nproc, port, argv), daemon=True) for rank in range(nproc)]
    try:
        for process in ranks:
            process.start()
        store = connect("127.0.0.1", port, nproc, args.timeout, host_store=True)
        deadline = time.monotonic() + 60 + 4 * args.timeout  # start-up plus the slowest verdict
        for process in ranks:
            process.join(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for process in ranks:
            if process.is_alive():
                process.kill()
                process.join()
    return read_verdicts(store, nproc)


def run_launched_rank(rank, world, port, argv):
    """One rank the launcher started: what `dist_check.py ARGV` run by torchrun as this rank would do, its environment
    set here (the launcher's own stays as it was). One torch thread unless OMP_NUM_THREADS says otherwise (torch read
    it when this process, or the launcher it forked from, loaded torch; without it, the thread count is set here)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DIST_CHECK_LAUNCHED="1")
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    sys.exit(run_command(main, argv))


def run_one_rank(args, environment):
    """Under torchrun (or the launcher): this rank's test; the rank that reports prints the combined report."""
    rank, world, local_rank, host, port = environment
    local_ranks = _env_int("LOCAL_WORLD_SIZE", 1, world) if "LOCAL_WORLD_SIZE" in os.environ else world
    if args.backend == "nccl":
        refuse_nccl_without_a_gpu_per_rank(local_rank + 1, f"this is local rank {local_rank}")
    backend = args.backend or default_backend(local_ranks)
    launched = os.environ.get("DIST_CHECK_LAUNCHED") == "1"
    host_store = rank == 0 and not launched and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    try:
        store = connect(host, port, world, args.timeout, host_store)
    except RuntimeError as exc:
        raise UsageError(f"rank {rank}: cannot reach the rendezvous store at {host}:{port} within {args.timeout * 2:g} "
                         f"s (rank 0 never started?): {_first_line(exc)}") from None
    folder = None if launched else agree_on_out(store, rank, world, args.out, args.force, args.timeout)
    record = (lambda: None) if folder is None else (lambda: folder.record(*rank_names([rank])))
    verdict = run_rank(rank, world, local_rank, store, args.out, args.timeout, backend, args.plant, record)
    if "hang" in verdict:
        with contextlib.suppress(RuntimeError):  # the store may be gone with its host: the verdicts are on disk
            if not launched and store.add("dist_check/reporter", 1) == 1:
                time.sleep(1.0)  # the other ranks' abort watchers publish their verdicts within 0.2 s
                folder.record(*rank_names(range(world)))  # also a killed rank's files: every rank checked its names
                print(report(read_verdicts(store, world), world, verdict["backend"], args.timeout, args.out), flush=True)
            store.set("dist_check/abort", "1")
            time.sleep(0.5)  # a store hosted here must outlive the other ranks' last look at it
        os._exit(1)  # a process group with a dead collective cannot be torn down cleanly
    if rank == 0 and not launched:
        folder.record(*rank_names(range(world)))  # what this node holds of every rank's (the others record their own)
        print(report(read_verdicts(store, world), world, verdict["backend"], args.timeout, args.out))
    return 0 if verdict["status"] == "pass" else 1


def main(argv=None):
    parser = ArgumentParser(prog="dist_check.py", description=__doc__.split("\n\n", 1)[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Under torchrun each rank runs the test; with --nproc N this starts N local "
                                   "ranks itself. Exit 0 every rank passed, 1 a wrong value or a hang, 2 bad usage.")
    parser.add_argument("--nproc", type=int, help="start N local ranks (nccl with a GPU each, else gloo on the CPU) instead of running as one torchrun rank")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds each collective may take before it counts as a hang (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--backend", choices=("gloo", "nccl"), help="default: nccl with a GPU per local rank, else gloo")
    parser.add_argument("--out", default="dist_check_out", help="folder for the per-rank verdicts and stacks "
                        "(default dist_check_out; a folder of yours is refused without --force)")
    parser.add_argument("--force", action="store_true", help="write rank files into a folder of yours (its files are "
                        "kept; a file of yours named like a rank file is never replaced)")
    parser.add_argument("--plant", choices=("skip", "sleep"), help="demo: the last rank skips all_reduce, or sleeps "
                        "before all_gather")
    try:
        args = parser.parse_args(argv)
        low, high = TIMEOUT_RANGE
        if not low <= args.timeout <= high:
            raise UsageError(f"--timeout must be between {low:g} and {high:g} seconds, got {args.timeout:g}")
        if args.nproc is None and "RANK" not in os.environ:
            raise UsageError("no ranks: run under torchrun (torchrun --nproc_per_node N dist_check.py) or pass --nproc N")
        if args.nproc is not None and not 1 <= args.nproc <= 64:
            raise UsageError(f"--nproc must be between 1 and 64, got {args.nproc}")
        if args.nproc is None:
            return run_one_rank(args, rank_environment())
        if args.backend == "nccl":
            refuse_nccl_without_a_gpu_per_rank(args.nproc, f"--nproc {args.nproc}")
        args.backend = args.backend or default_backend(args.nproc)
        names = rank_names(range(args.nproc))
        folder = OutputFolder(args.out, names, args.force, tool="dist_check.py")
        folder.prepare()  # before any rank starts: the ranks write only names checked here
        try:
            verdicts = launch_local(args.nproc, args)
        finally:
            folder.record(*names)
        print(report(verdicts, args.nproc, args.backend, args.timeout, args.out))
        return 0 if len(verdicts) == args.nproc and all(v["status"] == "pass" for v in verdicts.values()) else 1
    except (UsageError, OutputRefused) as exc:
        print(f"dist_check.py: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # torch.distributed's errors: the store or a peer went away outside a collective
        print(f"dist_check.py: error: the rendezvous failed (a peer died, or the store's host): {_first_line(exc)}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
