"""Run a test function on several gloo ranks on the CPU and collect what each rank reports.

Used by the distributed tests: each starts `rank_main(rank, world, port, out_dir)` on every rank,
which calls `join(rank, world, port)` first and `report(rank, out_dir, results)` last.
"""
import datetime
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DEADLINE = 150  # seconds for all ranks to finish: a hang shows up as a failed test, not a stuck CI job
# A rank stuck in a collective gives up before DEADLINE. Generous: under load one rank can spend tens of
# seconds importing (DDP's first construction imports dynamo) while the other already waits in a barrier.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)


def join(rank, world, port):
    """Start this rank's process group (one torch thread: the ranks share the CI machine's 2 cores)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)


def report(rank, out_dir, results):
    """Wait for the other ranks, leave the group, and write this rank's results for the test to read."""
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


def run_on_ranks(rank_main, out_dir, hang_message, world=2):
    """Run rank_main on `world` spawned ranks and return each rank's results, rank 0 first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(rank_main, args=(world, port, str(out_dir)), nprocs=world, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + DEADLINE
    try:
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, hang_message
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(world)]
