"""The checks on a CUDA device: the verdicts the CPU gives, the model left where and as it was (the CUDA RNG too),
NanWatch under torch.compile's default backend, and dist_check's NCCL ranks.

CI has no GPU, so these are skipped there. Run them on a machine with one:

    python -m pytest tests/test_cuda.py

`ML_DEBUG_TEST_DEVICE=cpu` runs the same tests on the CPU (the dist_check ones excepted), to check the tests
themselves where no GPU is at hand.
"""
import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch

import doctor
from conftest import DIAGNOSTICS, ROOT
from ml_debug_contract import to_device
from state_snapshot import assert_unchanged, snapshot

DEVICE = os.environ.get("ML_DEBUG_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                reason="no CUDA device here (CI has none): run on a machine with a GPU")

sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import broken_data  # noqa: E402  (needs tests/zoo on sys.path)
import broken_training  # noqa: E402
import healthy  # noqa: E402
from test_checks_training import _dirty  # noqa: E402
from test_nan_watch_compile import planted_run_reports  # noqa: E402

LOSE_THE_DEVICE = {"make_one_indexed_labels"}  # its loss is a device-side assert on CUDA: tested in a process of its own
CASES = {  # name -> a factory of a fresh case, seeded: the CPU and the device get the same weights and batch
    "doctor demo, healthy": lambda: doctor.make_demo_case(broken=False),
    "doctor demo, broken": lambda: doctor.make_demo_case(broken=True),
    **{f"healthy.{name}": getattr(healthy, name) for name in healthy.HEALTHY},
    **{f"broken_training.{name}": getattr(broken_training, name) for name in sorted(broken_training.EXPECTED)},
    **{f"broken_data.{name}": getattr(broken_data, name) for name in sorted({**broken_data.BROKEN, **broken_data.WARNED})
       if name not in LOSE_THE_DEVICE},
}


def on(device, case):
    """The case with its model, loss module and every tensor it holds on `device`."""
    return {key: value.to(device) if isinstance(value, torch.nn.Module) else to_device(value, device)
            for key, value in case.items()}


def verdicts(case):
    return {result.id: result.status for result in doctor.run_checks(case)}


@pytest.mark.parametrize("name", CASES)
def test_every_check_gives_the_cpu_verdict_on_the_device(name):
    assert verdicts(on(DEVICE, CASES[name]())) == verdicts(CASES[name]())


@pytest.mark.parametrize("check_id, module_name", doctor.CHECKS)
def test_the_model_is_left_where_and_as_it_was(check_id, module_name):
    case = on(DEVICE, healthy.make_causal_lm() if check_id == "causal_dependency" else healthy.make_cnn_classifier())
    model = _dirty(case)
    torch.empty(1, device=DEVICE).normal_()  # CUDA in use before the check: its RNG state is in the snapshot
    before = snapshot(model)
    getattr(__import__(module_name), f"check_{check_id}")(case)
    assert_unchanged(before, snapshot(model))


@pytest.mark.parametrize("backend", ["inductor", None])
def test_nan_watch_names_a_planted_inf_under_compile(backend):
    """inductor compiles Triton kernels on a GPU (on the CPU it needs a C compiler): the watch's hooks must still fire."""
    if DEVICE == "cpu" and backend == "inductor":
        pytest.skip("inductor on the CPU needs a C compiler; the CPU suite runs aot_eager")
    ignored = signal.getsignal(signal.SIGXFSZ)
    try:
        reports = planted_run_reports(backend, DEVICE)
    finally:  # inductor's first Triton compile un-ignores SIGXFSZ in this process (seen on torch 2.11): put it back
        signal.signal(signal.SIGXFSZ, ignored)
    assert {step: (r["module"], r["class"], r["phase"], r["source"]) for step, r in reports.items()} == \
        {3: ("blocks.1.mlp.2", "Plant", "forward", "module")}


CASE_ON_THE_DEVICE = """import sys
import torch
sys.path[:0] = [{zoo!r}, {diagnostics!r}]
import broken_data
from ml_debug_contract import to_device


def make_case():
    case = broken_data.make_one_indexed_labels()
    return {{key: value.to({device!r}) if isinstance(value, torch.nn.Module) else to_device(value, {device!r})
            for key, value in case.items()}}
"""


@pytest.mark.skipif(DEVICE == "cpu", reason="a device-side assert is CUDA's: the CPU raises IndexError")
def test_a_device_side_assert_fails_one_check_and_skips_the_rest(tmp_path):
    """Labels past the classes: CUDA's loss kernel asserts, and every CUDA call after it in the process fails."""
    case_file = tmp_path / "one_indexed_on_the_device.py"
    case_file.write_text(CASE_ON_THE_DEVICE.format(zoo=str(ROOT / "tests" / "zoo"), diagnostics=str(DIAGNOSTICS),
                                                   device=DEVICE))
    proc = subprocess.run([sys.executable, str(DIAGNOSTICS / "doctor.py"), "--case", f"{case_file}:make_case", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    checks = json.loads(proc.stdout)["checks"]
    statuses = {c["id"]: c["status"] for c in checks}
    lost = next(i for i, c in enumerate(checks) if c["status"] == "fail" and c["id"] != "labels")
    assert statuses["labels"] == "fail" and "device-side" in checks[lost]["summary"], checks[lost]
    assert all(c["status"] == "skip" and "stopped working" in c["summary"] for c in checks[lost + 1:])


def dist_check(*args, out):
    proc = subprocess.run([sys.executable, str(DIAGNOSTICS / "dist_check.py"), *args, "--out", str(out), "--timeout", "20"],
                          capture_output=True, text=True, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.skipif(DEVICE == "cpu", reason="NCCL needs a GPU")
def test_dist_check_uses_nccl_with_a_gpu_per_rank_and_gloo_past_that(tmp_path):
    gpus = torch.cuda.device_count()
    code, output = dist_check("--nproc", str(gpus), out=tmp_path / "nccl")
    assert code == 0, output
    ranks = [json.loads((tmp_path / "nccl" / f"rank{rank}.json").read_text()) for rank in range(gpus)]
    assert [(r["backend"], r["device"], r["status"]) for r in ranks] == \
        [("nccl", f"cuda:{rank}", "pass") for rank in range(gpus)]
    code, output = dist_check("--nproc", str(gpus + 1), out=tmp_path / "gloo")
    assert code == 0 and f"{gpus + 1} ranks, backend gloo" in output, output
    code, output = dist_check("--nproc", str(gpus + 1), "--backend", "nccl", out=tmp_path / "refused")
    assert code == 2 and "needs a GPU per rank" in output and len(output.strip().splitlines()) == 1, output


@pytest.mark.parametrize("max_grad_norm", [1.0, 0.0])  # clipped: unscaled by the Trainer first; 0: still scaled
def test_hf_trainer_in_fp16_logs_what_the_trainer_logs_and_survives_a_skip(tmp_path, max_grad_norm):
    """fp16 with accelerate's GradScaler and the fused AdamW: a batch with every label masked (a NaN loss) at step 4
    is skipped by the guard and named by NanWatch; the weights stay finite; each logged loss is the Trainer's own.
    (Written after the H200 was given back, 2026-11-27: to run on the next lent GPU. On the CPU accelerate makes no
    GradScaler, so ML_DEBUG_TEST_DEVICE=cpu checks the rest.)"""
    transformers = pytest.importorskip("transformers")
    from ml_debug.integrations.hf import MLDebugCallback

    steps, bad = 8, 4
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2,
                                                                 n_head=2))

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            g = torch.Generator().manual_seed(0)
            for step in range(1, steps + 1):
                for _ in range(4):
                    ids = torch.randint(0, 64, (16,), generator=g)
                    yield {"input_ids": ids, "labels": torch.full_like(ids, -100) if step == bad else ids.clone()}

    cuda = DEVICE == "cuda"
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4,
                                          learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                                          use_cpu=not cuda, fp16=cuda, optim="adamw_torch_fused" if cuda else "adamw_torch",
                                          disable_tqdm=True, dataloader_num_workers=0, seed=0, max_grad_norm=max_grad_norm)
    callback = MLDebugCallback()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Batches(), callbacks=[callback])
    trainer.train()
    if cuda:
        assert callback.session.scaler is not None  # the path under test: accelerate's GradScaler
    assert [(r["step"], r["source"]) for r in callback.reports] == [(bad, "module")]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    lines = [json.loads(line) for line in (tmp_path / "out" / "ml_debug_log.jsonl").read_text().splitlines()]
    records = [r for r in lines if "event" not in r]
    assert [r["step"] for r in records] == [s for s in range(1, steps + 1) if s != bad]
    own = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    for r in records:
        assert r["loss"] == pytest.approx(own[r["step"]]["loss"], rel=1e-3, abs=1e-4)
        if max_grad_norm and math.isfinite(r["grad_norm"]):  # the Trainer logs its pre-clip norm, unscaled
            assert r["grad_norm"] == pytest.approx(own[r["step"]]["grad_norm"], rel=1e-2)


@pytest.mark.skipif(DEVICE == "cpu", reason="the CPU twin is tests/test_integrations.py's (MixedPrecision with a CPU GradScaler)")
@pytest.mark.parametrize("fused", [False, True])
def test_lightning_16_mixed_on_the_gpu_logs_unscaled_values_and_survives_a_skip(tmp_path, fused):
    """Lightning's own 16-mixed on the GPU: a zero row makes step 6's loss NaN; the guard skips it (with the fused
    AdamW, by NaN gradients the scaler skips), NanWatch names ScaleNorm, the weights stay finite, and each logged loss
    is training_step's. (Written after the H200 was given back, 2026-11-27: to run on the next lent GPU.)"""
    lightning = pytest.importorskip("lightning")
    from lightning_cases import Recorded, batches_with_a_zero_row
    from ml_debug.integrations.lightning import MLDebugCallback

    steps, bad = 12, 6
    torch.manual_seed(0)
    model, callback = Recorded(fused), MLDebugCallback()
    trainer = lightning.Trainer(max_epochs=1, accelerator="gpu", devices=1, precision="16-mixed", logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, callbacks=[callback])
    trainer.fit(model, batches_with_a_zero_row(steps, bad))
    assert callback.session.scaler is not None
    assert [(r["step"], r["module"]) for r in callback.reports] == [(bad, "encoder.1")]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    lines = [json.loads(line) for line in (tmp_path / "ml_debug_log.jsonl").read_text().splitlines()]
    records = [r for r in lines if "event" not in r]
    assert [r["step"] for r in records] == [s for s in range(steps) if s != bad]
    for r in records:
        assert r["loss"] == pytest.approx(model.losses[r["step"]], rel=1e-3)
