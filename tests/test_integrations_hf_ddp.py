"""The HF Trainer callback under real DDP: two gloo ranks on CPU, each running transformers' Trainer as torchrun would
start it (RANK, WORLD_SIZE, MASTER_ADDR in the environment), a batch that makes NaN on rank 1 only. Both ranks must skip
the step (their weights stay equal and finite) and the log rank 0 writes must name the module and rank 1.

(A masked-label batch, the single-process test's NaN, makes none here: the Trainer divides by the tokens of every rank.)
The model takes num_items_in_batch, as HF's models do: its loss is each rank's share of the step's, and the monitor's log
must hold the loss the Trainer logs, not 1/world of it.
"""
import json
import math
import os

import pytest
import torch

import gloo

STEPS, BAD, ROWS = 12, 8, 8


class ScaleNorm(torch.nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)  # BUG: no eps: an all-zero row divides 0 by 0


class Classifier(torch.nn.Module):
    """A plain module the Trainer accepts: forward(**batch) returns a dict with the loss."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), ScaleNorm(), torch.nn.Linear(16, 16),
                                           torch.nn.GELU())
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, labels, num_items_in_batch=None, **kwargs):  # **kwargs: the Trainer passes the token count
        logits = self.head(self.encoder(x))
        losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        return {"loss": losses.sum() / num_items_in_batch, "logits": logits}  # this rank's share, as HF models do


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return STEPS * ROWS * 2

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(8, generator=g), "labels": torch.randint(0, 3, (), generator=g)}


def rank_main(rank, world, port, out_dir):
    """One rank, started as torchrun starts it: the Trainer (accelerate) sets the process group up from the env."""
    gloo.print_stacks_if_stuck()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    import transformers
    from ml_debug.integrations.hf import MLDebugCallback
    batches = []

    def collate(rows):  # the BAD-th batch of rank 1 holds one all-zero row
        batches.append(len(rows))
        batch = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
        if rank == 1 and len(batches) == BAD:
            batch["x"][0] = 0.0
        return batch

    torch.manual_seed(0)
    model = Classifier()
    args = transformers.TrainingArguments(output_dir=out_dir, max_steps=STEPS, per_device_train_batch_size=ROWS,
                                          learning_rate=1e-2, logging_steps=1, report_to=[], save_strategy="no",
                                          use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
                                          ddp_backend="gloo")
    callback = MLDebugCallback()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows(), data_collator=collate,
                                   callbacks=[callback])
    trainer.train()
    gloo.report(rank, out_dir, {"weights": [p.detach().flatten().tolist() for p in model.parameters()],
                                "reports": [(r["step"], r["module"], r["phase"], r["rank"]) for r in callback.reports],
                                "logged": {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}})


def test_hf_trainer_ddp_skips_a_nan_made_on_rank_1_on_every_rank_and_names_it(tmp_path):
    pytest.importorskip("transformers")
    # spawned: an HF test earlier in this worker leaves accelerate's process-wide state set up for one process, and a
    # forked rank would inherit it and train alone
    ranks = gloo.run_on_ranks(rank_main, tmp_path, "a rank of the HF Trainer run hung", start_method="spawn")
    assert ranks[0]["weights"] == ranks[1]["weights"]  # one decision, taken on both ranks
    assert all(math.isfinite(v) for p in ranks[0]["weights"] for v in p)  # the NaN step never reached them
    assert ranks[0]["reports"] == ranks[1]["reports"] == [[BAD, "encoder.1", "forward", 1]]  # the same on every rank
    lines = [json.loads(line) for line in (tmp_path / "ml_debug_log.jsonl").read_text().splitlines()]
    records, events = [r for r in lines if "event" not in r], [r for r in lines if "event" in r]
    assert [r["step"] for r in records] == [s for s in range(1, STEPS + 1) if s != BAD]  # rank 0 alone writes
    assert [(e["step"], e["event"]) for e in events] == [(BAD, "skip"), (BAD, "nan")]
    trainer_logged = ranks[0]["logged"]  # the Trainer's own loss per step (averaged over ranks, rounded to 4 places)
    assert {r["step"]: round(r["loss"], 4) for r in records} == \
        pytest.approx({int(step): loss for step, loss in trainer_logged.items() if int(step) != BAD}, abs=1e-4)
    assert (events[1]["module"], events[1]["rank"]) == ("encoder.1", 1)
