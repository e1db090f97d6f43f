"""gradient_flow under torch.distributed: a DDP-wrapped model in 2 gloo processes on CPU.

Each rank gets its own half of the batch (as a DistributedSampler would give it) and runs gradient_flow on a
healthy and on a broken (detached features) DDP-wrapped case; rank 0 then runs it once more on its own. The
check must give the same verdict on both ranks, leave each rank's model unchanged, and start no collective:
a stray all-reduce in the solo run would block rank 0 until the process group times out. The other checks that
take gradients (inplace, label_alignment) run on their DDP-wrapped demos in the same ranks.
"""
import sys

import torch

import gloo
from conftest import DIAGNOSTICS, ROOT


def _rank_main(rank, world, port, out_dir):
    gloo.join(rank, world, port)
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
    import inplace
    import label_alignment
    for module in (inplace, label_alignment):  # the new checks that take gradients, on their demos, DDP-wrapped
        for broken in (False, True):
            case = module.validate_case(module.make_demo_case(broken=broken))
            x, y = case["batch"]
            case["batch"] = (x[rank::world], y[rank::world])
            case["model"] = torch.nn.parallel.DistributedDataParallel(case["model"])
            before = snapshot(case["model"])
            result = getattr(module, f"check_{module.__name__}")(case)
            results[f"{module.__name__}-{broken}"] = [result.status, differences(before, snapshot(case["model"]))]
    gloo.report(rank, out_dir, results)


def test_gradient_flow_on_ddp_two_ranks(tmp_path):
    ranks = gloo.run_on_ranks(_rank_main, tmp_path, "the ranks did not finish: gradient_flow hangs under DDP")
    for results in ranks:
        assert results["healthy"] == {"status": "pass", "none_grad": [], "changed": []}
        assert results["detached"]["status"] == "fail" and results["detached"]["changed"] == []
        assert results["detached"]["none_grad"][:2] == ["features.0.weight", "features.0.bias"]
    assert ranks[0]["detached"] == ranks[1]["detached"]
    assert ranks[0]["solo"] == {"status": "pass"}
    for results in ranks:
        assert [results[f"{name}-{broken}"] for name in ("inplace", "label_alignment") for broken in (False, True)] == \
            [["pass", []], ["fail", []]] * 2
