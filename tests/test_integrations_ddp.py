"""The Lightning callback under real DDP: two gloo ranks on CPU that Lightning forks itself, a batch that makes NaN on
rank 1 only. The step must be skipped on every rank (their weights stay equal and finite), the log, written once by
rank 0, must name the module and the rank that made the NaN, and spikes.py must read it back.

Lightning is imported in the test, not at collection: it takes 9 s of CPU beyond torch (it imports torchmetrics, which
imports transformers and scipy), and every xdist worker collects every file. The ranks are forked (`ddp_fork`): a
spawned rank imports Lightning again, 25 s of the test's 40 s of CPU (measured on the 2-core VM)."""
import json

import pytest
import torch

import spikes
from gloo import free_port

STEPS, BAD, WORLD, ROWS = 12, 8, 2, 8


def test_lightning_ddp_skips_a_nan_made_on_rank_1_on_every_rank_and_names_it(tmp_path, monkeypatch):
    lightning = pytest.importorskip("lightning")
    from lightning_cases import Classifier
    from ml_debug.integrations.lightning import MLDebugCallback

    class RankedClassifier(Classifier):
        def __init__(self, out_dir):
            super().__init__()
            self.out_dir = out_dir

        def train_dataloader(self):  # each rank its own rows; rank 1's batch at step BAD holds one all-zero row
            g = torch.Generator().manual_seed(self.global_rank)
            x, y = torch.randn(STEPS * ROWS, 8, generator=g), torch.randint(0, 3, (STEPS * ROWS,), generator=g)
            if self.global_rank == 1:
                x[BAD * ROWS] = 0.0
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=ROWS)

        def on_train_end(self):  # each rank's weights, for the test to compare
            torch.save(self.state_dict(), f"{self.out_dir}/rank{self.global_rank}.pt")

    # Lightning's launcher sets MASTER_PORT in this process when it is unset, and leaves it set for later tests
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    torch.manual_seed(0)
    trainer = lightning.Trainer(max_steps=STEPS, accelerator="cpu", devices=WORLD, strategy="ddp_fork",
                                logger=lightning.pytorch.loggers.CSVLogger(tmp_path, name="run"), log_every_n_steps=1,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, callbacks=[MLDebugCallback()],
                                use_distributed_sampler=False)
    trainer.fit(RankedClassifier(str(tmp_path)))

    weights = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # one decision, taken on both ranks
    assert all(torch.isfinite(v).all() for v in weights[0].values())  # the NaN step never reached the weights
    path = tmp_path / "run" / "version_0" / "ml_debug_log.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    records, events = [r for r in lines if "event" not in r], [r for r in lines if "event" in r]
    assert [r["step"] for r in records] == [s for s in range(STEPS) if s != BAD]  # one line per step: rank 0 alone
    assert [(e["step"], e["event"]) for e in events] == [(BAD, "skip"), (BAD, "nan")]
    assert (events[1]["module"], events[1]["phase"], events[1]["rank"]) == ("encoder.1", "forward", 1)
    report = spikes.analyze(path)
    assert report.columns.grad == "grad_norm" and report.nan_step is None and report.values == STEPS - 1
