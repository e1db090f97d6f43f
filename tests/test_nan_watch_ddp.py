"""NanWatch under DistributedDataParallel: two gloo ranks on CPU, faults made on rank 1 only. Every rank reads the
same verdict at the same step and returns the same report, naming the rank that made the NaN."""
import sys

import torch

import gloo
from conftest import DIAGNOSTICS

STEPS, ZERO_ROW, NAN_LOSS = 8, 3, 6


class ScaleNorm(torch.nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)  # BUG: no eps: an all-zero row divides 0 by 0


def _rank_main(rank, world, port, out_dir):
    gloo.join(rank, world, port)
    sys.path.insert(0, str(DIAGNOSTICS))
    from nan_watch import NanWatch

    torch.manual_seed(0)  # the same initial replica on both ranks
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), ScaleNorm(), torch.nn.Linear(16, 3)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = NanWatch(model)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    reports = []
    for step in range(STEPS):
        x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        if rank == 1 and step == ZERO_ROW:
            x[5] = 0.0  # rank 1 alone: its norm makes NaN in forward
        extra = float("nan") if rank == 1 and step == NAN_LOSS else 0.0  # rank 1 alone: a NaN added to its loss, no
        # gradient from it: rank 0's loss and the averaged gradients stay finite

        def compute(x=x, y=y, extra=extra):
            return torch.nn.functional.cross_entropy(model(x), y) + extra

        loss = compute()
        loss.backward()
        report = watch.check(step, loss, replay=compute)
        if report is not None:
            reports.append({k: report[k] for k in ("step", "module", "phase", "source", "rank")})
            optimizer.zero_grad(set_to_none=True)  # skipped on every rank: they agree
            continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    gloo.report(rank, out_dir, {"reports": reports,
                                "params": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()})


def test_every_rank_returns_the_report_of_the_rank_that_made_the_nan(tmp_path):
    ranks = gloo.run_on_ranks(_rank_main, tmp_path, "the ranks did not finish: a collective hangs")
    expected = [{"step": ZERO_ROW, "module": "1", "phase": "forward", "source": "module", "rank": 1},
                {"step": NAN_LOSS, "module": None, "phase": "forward", "source": "outside", "rank": 1}]
    assert ranks[0]["reports"] == ranks[1]["reports"] == expected
    assert ranks[0]["params"] == ranks[1]["params"]  # both skipped both steps: the replicas never drifted apart
