"""gradient_flow under torch.distributed: a DDP-wrapped model in 2 gloo processes on CPU.

Each rank gets its own half of the batch (as a DistributedSampler would give it) and runs gradient_flow on a
healthy and on a broken (detached features) DDP-wrapped case; rank 0 then runs it once more on its own. The
check must give the same verdict on both ranks, leave each rank's model unchanged, and start no collective:
a stray all-reduce in the solo run would block rank 0 until the process group times out.
"""
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import DIAGNOSTICS, ROOT

DEADLINE = 60  # seconds for both ranks to finish; a hang shows up as a timeout, not a stuck CI job


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20))
    sys.path[:0] = [str(DIAGNOSTICS), str(ROOT / "tests" / "zoo"), str(ROOT / "tests")]
    import broken_training
    import gradient_flow
    import healthy
    from state_snapshot import differences, snapshot

    results, cases = {}, {}
    for name, factory in (("healthy", healthy.make_mlp_classifier), ("detached", broken_training.make_detached_features)):
        case = cases[name] = gradient_flow.validate_case(factory())
        x, y = case["batch"]
        case["batch"] = (x[rank::world], y[rank::world])  # each rank its own rows
        case["model"] = torch.nn.parallel.DistributedDataParallel(case["model"])  # the constructor is a collective
        before = snapshot(case["model"])
        result = gradient_flow.check_gradient_flow(case)
        results[name] = {"status": result.status, "none_grad": result.details["none_grad"],
                         "changed": differences(before, snapshot(case["model"]))}
    if rank == 0:  # alone: any collective inside the check would wait for rank 1 and time out
        results["solo"] = {"status": gradient_flow.check_gradient_flow(cases["healthy"]).status}
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


def test_gradient_flow_on_ddp_two_ranks(tmp_path):
    world = 2
    context = mp.start_processes(_rank_main, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + DEADLINE
    try:
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, "the ranks did not finish: gradient_flow hangs under DDP"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    for results in ranks:
        assert results["healthy"] == {"status": "pass", "none_grad": [], "changed": []}
        assert results["detached"]["status"] == "fail" and results["detached"]["changed"] == []
        assert results["detached"]["none_grad"][:2] == ["features.0.weight", "features.0.bias"]
    assert ranks[0]["detached"] == ranks[1]["detached"]
    assert ranks[0]["solo"] == {"status": "pass"}
