"""The callbacks in real trainers: a tiny HF Trainer run and a tiny Lightning run on CPU, each with a
planted bad batch that the spike guard skips and NanWatch names (module and phase), a log that
spikes.py reads back, and the framework's own logging as it was."""
import csv
import json
import math

import pytest
import torch

import spikes

STEPS, BAD = 12, 8


def read_log(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in lines if "event" not in r], [r for r in lines if "event" in r]


def test_hf_trainer_skips_and_names_a_batch_with_every_label_masked(tmp_path):
    transformers = pytest.importorskip("transformers")
    from ml_debug.integrations.hf import MLDebugCallback

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)

    class Batches(torch.utils.data.IterableDataset):  # in order: the planted batch is the BAD-th update
        def __iter__(self):
            g = torch.Generator().manual_seed(0)
            for step in range(1, STEPS + 1):
                for _ in range(4):
                    ids = torch.randint(0, 64, (16,), generator=g)
                    labels = ids.clone()
                    if step == BAD:
                        labels[:] = -100  # BUG: every label masked (a prompt longer than the context): the loss is 0/0
                    yield {"input_ids": ids, "labels": labels}

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=STEPS, per_device_train_batch_size=4,
                                          learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                                          use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
                                          max_grad_norm=0.05)  # clipping bites at every step
    callback = MLDebugCallback()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Batches(), callbacks=[callback])
    trainer.train()

    assert [(r["step"], r["module"], r["phase"], r["source"]) for r in callback.reports] == \
        [(BAD, "GPT2LMHeadModel", "forward", "module")]
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN step never reached the weights
    records, events = read_log(tmp_path / "out" / "ml_debug_log.jsonl")
    assert [r["step"] for r in records] == [s for s in range(1, STEPS + 1) if s != BAD]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in records)
    assert [(e["step"], e["event"]) for e in events] == [(BAD, "skip"), (BAD, "nan")]
    assert events[0]["reason"] == "nonfinite_loss"
    report = spikes.analyze(tmp_path / "out" / "ml_debug_log.jsonl")
    assert report.columns.grad == "grad_norm" and len(report.spikes) == 0 and report.nan_step is None
    own = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    assert sorted(own) == list(range(1, STEPS + 1))  # the Trainer's own log, every step, the bad one included
    for r in records:  # the pre-clip norm, as the Trainer logs it, not the clipped one (0.05)
        assert r["grad_norm"] == pytest.approx(own[r["step"]]["grad_norm"], rel=1e-4) and r["grad_norm"] > 0.1
        assert r["loss"] == pytest.approx(own[r["step"]]["loss"], rel=1e-4)


def test_lightning_skips_and_names_a_batch_that_divides_zero_by_zero(tmp_path):
    lightning = pytest.importorskip("lightning")
    from lightning_cases import Classifier
    from ml_debug.integrations.lightning import MLDebugCallback

    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * 8, 8, generator=g)
    y = torch.randint(0, 3, (STEPS * 8,), generator=g)
    x[BAD * 8] = 0.0  # one all-zero sample in the batch of step BAD (Lightning counts steps from 0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    torch.manual_seed(0)
    model = Classifier()
    callback = MLDebugCallback()
    csv_logger = lightning.pytorch.loggers.CSVLogger(tmp_path, name="run")
    trainer = lightning.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=csv_logger, log_every_n_steps=1,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, callbacks=[callback])
    trainer.fit(model, loader)

    assert [(r["step"], r["module"], r["phase"], r["source"]) for r in callback.reports] == \
        [(BAD, "encoder.1", "forward", "module")]
    assert callback.reports[0]["class"] == "ScaleNorm"
    assert all(torch.isfinite(p).all() for p in model.parameters())
    path = tmp_path / "run" / "version_0" / "ml_debug_log.jsonl"
    records, events = read_log(path)
    assert [r["step"] for r in records] == [s for s in range(STEPS) if s != BAD]
    assert [(e["step"], e["event"]) for e in events] == [(BAD, "skip"), (BAD, "nan")]
    report = spikes.analyze(path)
    assert report.columns.grad == "grad_norm" and report.nan_step is None
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        own = {int(row["step"]): float(row["train_loss"]) for row in csv.DictReader(f)}
    assert sorted(own) == list(range(STEPS)) and math.isnan(own[BAD])  # Lightning's own log, the NaN step included
    for r in records:  # the same step numbers and the same losses
        assert r["loss"] == pytest.approx(own[r["step"]], rel=1e-5)


def test_hf_trainer_logs_the_mean_micro_batch_loss_also_in_an_epochs_last_shorter_step(tmp_path):
    transformers = pytest.importorskip("transformers")
    from ml_debug.integrations.hf import MLDebugCallback

    class Regressor(torch.nn.Module):  # no **kwargs in forward: the Trainer divides each loss by the step's micro-batches
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels) + 10.0}

    class Rows(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x, self.y = torch.randn(40, 4, generator=g), torch.randn(40, generator=g)

        def __len__(self):
            return 40

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=1, per_device_train_batch_size=4,
                                          gradient_accumulation_steps=4, learning_rate=1e-2, logging_steps=1, report_to=[],
                                          save_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    torch.manual_seed(0)
    trainer = transformers.Trainer(model=Regressor(), args=args, train_dataset=Rows(), callbacks=[MLDebugCallback()])
    trainer.train()  # 10 micro-batches: steps of 4, 4 and 2

    records, events = read_log(tmp_path / "out" / "ml_debug_log.jsonl")
    own = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    assert [r["step"] for r in records] == sorted(own) == [1, 2, 3] and events == []
    for r in records:  # the Trainer's own loss: the mean over the step's micro-batches, 4 or 2
        assert r["loss"] == pytest.approx(own[r["step"]], rel=1e-4)


def test_lightning_logs_the_mean_training_step_loss_also_in_an_epochs_last_shorter_step(tmp_path):
    lightning = pytest.importorskip("lightning")
    from lightning_cases import Classifier
    from ml_debug.integrations.lightning import MLDebugCallback

    class Recorded(Classifier):
        def __init__(self):
            super().__init__()
            self.losses = {}  # global step -> the losses training_step returned

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.losses.setdefault(self.trainer.global_step, []).append(float(loss.detach()))
            return loss

    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(80, 8, generator=g),
                                                                        torch.randint(0, 3, (80,), generator=g)), batch_size=8)
    torch.manual_seed(0)
    model = Recorded()
    trainer = lightning.Trainer(max_epochs=1, accumulate_grad_batches=4, accelerator="cpu", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, callbacks=[MLDebugCallback()])
    trainer.fit(model, loader)  # 10 batches: steps of 4, 4 and 2

    records, events = read_log(tmp_path / "ml_debug_log.jsonl")
    assert [r["step"] for r in records] == sorted(model.losses) == [0, 1, 2] and events == []
    assert [len(model.losses[step]) for step in (0, 1, 2)] == [4, 4, 2]
    for r in records:
        assert r["loss"] == pytest.approx(sum(model.losses[r["step"]]) / len(model.losses[r["step"]]), rel=1e-5)


@pytest.mark.parametrize("fused", [False, True])  # a fused AdamW unscales in its step(): Lightning leaves it to it,
# and the guard's skip must leave scaler.step() an inf check to record (before: "No inf checks were recorded")
def test_lightning_fp16_logs_unscaled_values_and_leaves_overflow_to_the_scaler_but_names_a_nan_loss(tmp_path, fused):
    """16-mixed on the CPU (Lightning's MixedPrecision with a CPU GradScaler): a scale of 2^40 overflows the fp16
    gradients for the first ~20 steps, which the scaler skips while it halves its scale; then a zero row makes the loss
    NaN. Before: the log held losses and norms times the scale, and the guard counted the overflows as skips and raised
    RestartFromCheckpoint at step 4."""
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.plugins.precision import MixedPrecision
    from lightning_cases import Recorded, batches_with_a_zero_row
    from ml_debug.integrations.lightning import MLDebugCallback

    class Measured(Recorded):
        def __init__(self):
            super().__init__(fused)
            self.norms = {}

        def on_before_optimizer_step(self, optimizer):  # unscaled by now, but by a fused optimizer's step()
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            scale = self.trainer.precision_plugin.scaler.get_scale() if fused else 1.0
            self.norms[self.trainer.global_step] = float(torch.nn.utils.get_total_norm(grads)) / scale

    steps, bad = 30, 26
    torch.manual_seed(0)
    model, callback = Measured(), MLDebugCallback()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 40)
    trainer = lightning.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                                callbacks=[callback], plugins=[MixedPrecision("16-mixed", "cpu", scaler)])
    trainer.fit(model, batches_with_a_zero_row(steps, bad))

    records, events = read_log(tmp_path / "ml_debug_log.jsonl")
    overflowed = [r["step"] for r in records if not math.isfinite(r["grad_norm"])]
    assert len(overflowed) >= 10 and overflowed[0] == 0  # the scaler's to skip: no report, no skip of the guard's
    assert [(r["step"], r["source"]) for r in callback.reports] == [(bad, "module")]
    assert [(e["step"], e["event"], e.get("reason")) for e in events] == [(bad, "skip", "nonfinite_loss"), (bad, "nan", None)]
    assert [r["step"] for r in records] == [s for s in range(steps) if s != bad]
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the skipped NaN step never reached them
    for r in records:
        assert r["loss"] == pytest.approx(model.losses[r["step"]], rel=1e-5)
        if math.isfinite(r["grad_norm"]):
            assert r["grad_norm"] == pytest.approx(model.norms[r["step"]], rel=1e-4)


def test_hf_probe_divides_the_gradient_norm_by_the_fp16_scale_the_gradients_carry():
    pytest.importorskip("transformers")
    from ml_debug.integrations.hf import MLDebugCallback

    class Scaled(torch.optim.SGD):
        """Stands in for accelerate's AcceleratedOptimizer under fp16, which carries its GradScaler as .scaler."""
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x):
            return {"loss": self.fc(x).pow(2).mean()}

    torch.manual_seed(0)
    model, x = Model().train(), torch.randn(8, 4)
    callback = MLDebugCallback(monitor=False)
    args = type("Args", (), {"output_dir": "unused", "world_size": 1, "average_tokens_across_devices": False})()
    callback.on_train_begin(args, type("State", (), {"global_step": 0})(), None, model=model,
                            optimizer=Scaled(model.parameters(), lr=0.1))
    Scaled.scaler.scale(model(x=x)["loss"]).backward()  # as accelerator.backward does under fp16
    unscaled = torch.nn.utils.get_total_norm([p.grad / 1024.0 for p in model.parameters()])
    assert float(callback.probe.grad_norm) == pytest.approx(float(unscaled), rel=1e-6)
    callback.probe.remove()
    callback.session.close()


@pytest.mark.parametrize("max_grad_norm, scaler, skipped_grads", [
    (1.0, True, "none"),  # the Trainer's clip unscaled them, and the scaler recorded its inf check: None skips
    (0.0, True, "nan"),  # no clip: still scaled, so the scaler must find NaN to skip the step itself
    (None, True, "nan"),
    (0.0, False, "none"),  # no scaler (no fp16): None, whatever the clip
])
def test_hf_guard_skip_leaves_fp16_gradients_to_the_scaler_when_they_are_still_scaled(max_grad_norm, scaler, skipped_grads):
    pytest.importorskip("transformers")
    from ml_debug.integrations.hf import MLDebugCallback

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x):
            return {"loss": self.fc(x).sum() * float("nan")}  # a NaN loss: the guard skips the step

    optimizer_class = type("Optimizer", (torch.optim.SGD,), {"scaler": torch.amp.GradScaler("cpu")} if scaler else {})
    model = Model().train()
    callback = MLDebugCallback(monitor=False, nan_watch=False)
    args = type("Args", (), {"output_dir": "unused", "world_size": 1, "average_tokens_across_devices": False,
                             "max_grad_norm": max_grad_norm})()
    state = type("State", (), {"global_step": 0})()
    callback.on_train_begin(args, state, None, model=model, optimizer=optimizer_class(model.parameters(), lr=0.1))
    model(x=torch.ones(2, 4))["loss"].backward()
    callback.on_pre_optimizer_step(args, state, None)
    grads = [p.grad for p in model.parameters()]
    assert callback.session.skipped
    assert all(g is None for g in grads) if skipped_grads == "none" else all(bool(g.isnan().all()) for g in grads)
    callback.probe.remove()
    callback.session.close()
