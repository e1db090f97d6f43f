"""Run a test function on several gloo ranks on the CPU and collect what each rank reports.

Used by the distributed tests: each starts `rank_main(rank, world, port, out_dir)` on every rank,
which calls `join(rank, world, port)` first and `report(rank, out_dir, results)` last.
"""
import datetime
import faulthandler
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DEADLINE = 150  # seconds for all ranks to finish: a hang shows up as a failed test, not a stuck CI job
# A rank stuck in a collective gives up before DEADLINE. Generous: under load one rank can spend tens of
# seconds importing (DDP's first construction imports dynamo) while the other already waits in a barrier.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)
# A rank still alive this long after it joined prints every thread's stack (pytest shows it under the failed
# test) and exits: a hang that outlives the collective timeout says where it is, even in a CI log.
STACKS_AFTER = DEADLINE - 30


def print_stacks_if_stuck():
    """From now on, a rank alive STACKS_AFTER seconds later prints every thread's stack and exits 1."""
    faulthandler.dump_traceback_later(STACKS_AFTER, exit=True)


def join(rank, world, port):
    """Start this rank's process group (one torch thread: the ranks share the CI machine's 2 cores)."""
    print_stacks_if_stuck()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)


def report(rank, out_dir, results):
    """Wait for the other ranks, write this rank's results for the test to read, and end the process at once.

    Not by returning: a rank whose DDP model is freed after the group can hang at exit. The Reducer drops the
    last reference to the gloo group while holding the GIL, and the group's destructor then waits for a gloo
    worker thread that still needs the GIL to release a finished all_reduce's Python tensors: seen in gdb
    twice in 66 runs of test_spike_guard's DDP test under load, the likely cause of a CI failure there.
    """
    dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    """A local TCP port no process listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_ranks(rank_main, out_dir, hang_message, world=2, start_method="fork"):
    """Run rank_main on `world` ranks and return each rank's results, rank 0 first.

    Forked by default: a rank starts with the test process's imports, where a spawned one imports torch again (3.5 s
    of CPU per rank on the 2-core CI machine, measured). The test process never starts a process group, so a forked
    rank starts clean. start_method="spawn" for a rank that reads process-wide state an earlier test in the same
    worker may have set (accelerate's, under the HF Trainer).
    """
    context = mp.start_processes(rank_main, args=(world, free_port(), str(out_dir)), nprocs=world, join=False,
                                 start_method=start_method)
    deadline = time.monotonic() + DEADLINE
    try:
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, f"{hang_message} ({_progress(context, out_dir, world)})"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(world)]


def _progress(context, out_dir, world):
    """Which ranks are still alive and which wrote their results: tells a hang in the work from one at exit."""
    return ", ".join(f"rank {rank}: {'alive' if process.is_alive() else 'exited'}, results "
                     f"{'written' if (out_dir / f'rank{rank}.json').exists() else 'not written'}"
                     for rank, process in zip(range(world), context.processes))
