"""resume_check: does a checkpoint resume exactly?

The embedded demo's healthy twin passes and each planted bug gets its own verdict; more trainers here
cover the other verdicts (skipped data, a reshuffle on resume, no optimizer in the checkpoint, a loss-only
trainer, an unloadable checkpoint, a non-reproducible reference). The global RNG states are as found
afterwards, also when the trainer raises; bad trainer files and settings exit 2 with one line; `--help`
works; and under torch.distributed two gloo ranks reach the same verdict without a hang.
"""
import json
import random
import subprocess
import tempfile

import pytest
import torch

import gloo
import ml_debug_contract
from conftest import assert_one_line_error, run_cli
import resume_check as rc  # noqa: E402  (conftest puts diagnostics/ on sys.path)


def check(factory, **kwargs):
    return rc.check_resume(factory, **kwargs)


# --- trainers beyond the demo's four bugs -------------------------------------------------------------

class SkipsABatch(rc.DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.pos += 1  # the position a prefetching loader had fetched: one batch ahead of training


class ReshufflesOnResume(rc.DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.epoch += 100  # a new shuffle seed on resume: no exact repeat, but not the straight run's data either


class NoOptimizerInCheckpoint(rc.DemoTrainer):
    def state_dict(self):
        return {key: value for key, value in super().state_dict().items() if key != "optimizer"}

    def load_state_dict(self, sd):
        super().load_state_dict({**sd, "optimizer": self.opt.state_dict()})


class LossOnlyDataRestart(rc.DataRestartBug):
    def train_step(self):
        return super().train_step()["loss"]


class LossOnlyRngBug(rc.RngBug):
    def train_step(self):
        return super().train_step()["loss"]


class PerGroupSchedulerBug(rc.SchedulerBug):
    """Two param groups, each with its own LR, reported as a tuple; a fresh scheduler on resume."""

    def __init__(self):
        super().__init__()
        first, last = self.model[0], self.model[3]
        self.opt = torch.optim.AdamW([{"params": first.parameters()}, {"params": last.parameters(), "lr": 1e-2}], lr=3e-2)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, rc.warmup)

    def train_step(self):
        lrs = tuple(self.sched.get_last_lr())
        return {**super().train_step(), "lr": lrs}


class Config:  # a plain object: torch.load(weights_only=True) refuses to unpickle it
    pass


class HoldsAnObject(rc.DemoTrainer):
    def state_dict(self):
        return {**super().state_dict(), "config": Config()}


class HoldsALambda(rc.DemoTrainer):
    def state_dict(self):
        return {**super().state_dict(), "hook": lambda: None}  # torch.save cannot pickle it


class NoisyLoss(rc.DemoTrainer):
    def __init__(self):
        super().__init__()
        self.noise = torch.Generator()
        self.noise.seed()  # seeded from the OS: another value in every run, whatever the check seeds

    def train_step(self):
        out = super().train_step()
        out["loss"] += 1e-4 * float(torch.rand((), generator=self.noise))
        return out


class NumpyNoise(rc.DemoTrainer):
    def train_step(self):
        import numpy
        out = super().train_step()
        out["loss"] += float(numpy.random.rand())  # the global NumPy RNG: seeded by the check, not saved here
        return out


def functional_trainer():
    """The dict-of-functions form, with a loss-only train_step."""
    trainer = rc.DemoTrainer()
    return {"state_dict": trainer.state_dict, "load_state_dict": trainer.load_state_dict,
            "train_step": lambda: trainer.train_step()["loss"]}


# --- verdicts -------------------------------------------------------------------------------------------

def test_healthy_demo_resumes_bit_for_bit():
    result = check(rc.make_demo_trainer)
    assert (result.status, result.details["verdict"]) == ("pass", "ok"), result.summary
    assert result.details["resumed"] == result.details["reference"]
    assert [r["step"] for r in result.details["resumes"]] == [3, 6]
    assert all(r["not_restored"] == [] and r["bytes"] > 0 for r in result.details["resumes"])
    assert result.details["resumes"][0]["entries"] == {"optimizer": "optimizer", "scheduler": "scheduler"}


@pytest.mark.parametrize("bug, verdict", [("data_restart", "data_restarted"), ("rng", "rng_not_restored"),
                                          ("optimizer", "optimizer_state_lost"), ("scheduler", "scheduler_state_lost")])
def test_each_planted_bug_gets_its_verdict(bug, verdict):
    result = check(lambda: rc.make_demo_trainer(bug))
    assert (result.status, result.details["verdict"]) == ("fail", verdict), result.summary
    assert result.details["next"]


def test_data_restart_reports_the_repeat_and_the_false_lower_loss():
    result = check(lambda: rc.make_demo_trainer("data_restart"))
    assert "step 3 is fed the batch of step 0 (the data stream started over)" in result.summary
    reference, resumed = result.details["reference"], result.details["resumed"]
    assert resumed["batch"][3:6] == reference["batch"][0:3]
    assert sum(resumed["loss"][3:]) < sum(reference["loss"][3:])  # memorised batches score lower
    assert "lower because the model has seen them" in result.summary


def test_optimizer_and_scheduler_bugs_part_where_they_should():
    optimizer = check(lambda: rc.make_demo_trainer("optimizer")).details["divergence"]
    assert (optimizer["loss"], optimizer["lr"]) == (4, None)  # step 3's loss is taken before Adam's first fresh step
    scheduler = check(lambda: rc.make_demo_trainer("scheduler")).details
    assert scheduler["divergence"]["lr"] == 3
    assert scheduler["resumed"]["lr"][3] == scheduler["reference"]["lr"][0]  # back at the start of the warmup


@pytest.mark.parametrize("trainer, verdict, words", [
    (SkipsABatch, "data_skipped", "step 3 is fed the batch of step 4: 1 batch(es) skipped"),
    (ReshufflesOnResume, "rng_not_restored", "the data order changed"),
    (NoOptimizerInCheckpoint, "optimizer_state_lost", "the checkpoint holds no optimizer state_dict"),
    (LossOnlyDataRestart, "state_not_restored", "data.pos"),
    (LossOnlyRngBug, "rng_not_restored", "does not restore the RNG state (rng)"),
    (PerGroupSchedulerBug, "scheduler_state_lost", "at step 3 the LR is 0.0075/0.0025 instead of 0.03/0.01"),
])
def test_other_failures_are_classified(trainer, verdict, words):
    result = check(trainer)
    assert (result.status, result.details["verdict"]) == ("fail", verdict), result.summary
    assert words in result.summary


def test_functional_trainer_and_loss_only_steps_work():
    result = check(functional_trainer)
    assert result.details["verdict"] == "ok", result.summary
    assert result.details["reference"]["batch"] == [None] * rc.STEPS


def test_unloadable_checkpoint_and_weights_only_false():
    result = check(HoldsAnObject)
    assert result.details["verdict"] == "checkpoint_unloadable"
    assert "WeightsUnpickler error" in result.summary and "\n" not in result.summary
    assert check(HoldsAnObject, weights_only=False).details["verdict"] == "ok"
    result = check(HoldsALambda)
    assert result.details["verdict"] == "checkpoint_unloadable" and "torch.save refused" in result.summary


def test_nondeterministic_reference_is_not_blamed_on_the_resume():
    result = check(NoisyLoss)
    assert result.details["verdict"] == "nondeterministic"
    assert "two straight runs from the same seed differ at step 0" in result.summary
    assert "not a resume bug" in result.summary and result.details["reference_repeats"] is False
    assert check(NoisyLoss, atol=1e-3).details["verdict"] == "ok"  # the tolerance covers the noise


def test_a_resumed_run_that_differs_before_its_first_resume_is_nondeterministic():
    calls = []

    def factory():
        calls.append(1)
        trainer = rc.DemoTrainer()
        if len(calls) == 3:  # the resumed run's first trainer sees other data: hidden state between factory calls
            trainer.x = trainer.x + 1
        return trainer

    result = check(factory)
    assert result.details["verdict"] == "nondeterministic"
    assert "differs before its first resume" in result.summary


def test_numpy_global_rng_is_seeded_per_trainer_life():
    numpy = pytest.importorskip("numpy")
    numpy.random.seed(7)
    before = numpy.random.get_state()
    result = check(NumpyNoise)
    assert result.details["reference_repeats"] is True  # the check seeded NumPy before each life
    assert result.details["verdict"] == "rng_not_restored"  # NumPy's RNG is not in the checkpoint: same batch, new loss
    after = numpy.random.get_state()
    assert before[0] == after[0] and (before[1] == after[1]).all() and before[2:] == after[2:]


# --- do no harm -----------------------------------------------------------------------------------------

def rng_states():
    return random.getstate(), torch.get_rng_state()


class RaisesAfterResume(rc.DemoTrainer):
    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.resumed = True

    def train_step(self):
        if getattr(self, "resumed", False):
            raise RuntimeError("CUDA out of memory")
        return super().train_step()


@pytest.mark.parametrize("factory", [rc.make_demo_trainer, lambda: rc.make_demo_trainer("rng"), RaisesAfterResume],
                         ids=["healthy", "rng_bug", "raises"])
def test_global_rng_states_are_as_found(factory):
    random.seed(123)
    torch.manual_seed(456)
    before = rng_states()
    try:
        check(factory)
    except rc.CheckError as exc:
        assert "train_step() raised RuntimeError: CUDA out of memory (resumed run, step 3)" in str(exc)
    after = rng_states()
    assert before[0] == after[0]
    assert torch.equal(before[1], after[1])


# --- the command line -----------------------------------------------------------------------------------

def run_main(capsys, *argv):
    """rc.main(argv) in this process (torch is imported once), as the CompletedProcess a real run would give."""
    argv = [str(a) for a in argv]
    try:
        code = rc.main(argv)
    except SystemExit as exc:  # argparse: --help, or bad usage
        code = exc.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out.out, out.err)


def test_help(capsys):
    proc = run_main(capsys, "--help")
    assert proc.returncode == 0 and "Symptom" in proc.stdout and "--resume-at" in proc.stdout


def test_cli_demo_flags_failure_and_writes_nothing(tmp_path):
    proc = run_cli("resume_check.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("[FAIL] resume_check: data_restarted:")
    assert "= step 0*" in proc.stdout and "next: " in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the checkpoint lived in memory


def test_cli_healthy_json_and_own_trainer(capsys, tmp_path):
    proc = run_main(capsys, "--healthy", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["details"]["verdict"] == "ok"
    proc = run_main(capsys, "--bug", "optimizer")
    assert proc.returncode == 1 and proc.stdout.startswith("[FAIL] resume_check: optimizer_state_lost:")
    path = tmp_path / "mine.py"
    path.write_text("import resume_check\n\ndef build():\n    return resume_check.DemoTrainer()\n")
    proc = run_main(capsys, "--trainer", f"{path}:build", "--steps", 6, "--resume-at", "2,4")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[PASS] resume_check: ok: 6 steps with resumes before step 2, 4")


WRITES_ITS_OWN_FILES = """
import os
import torch
import resume_check

HERE = os.path.dirname(os.path.abspath(__file__))


class Trainer(resume_check.DemoTrainer):
    def train_step(self):
        out = super().train_step()
        with open(os.path.join(HERE, "train.log"), "a") as log:  # the run's own log
            log.write(f"loss {out['loss']}\\n")
        return out

    def state_dict(self):
        sd = super().state_dict()
        torch.save(sd, os.path.join(HERE, "last.pt"))  # a checkpoint callback, where the real run keeps its own
        with open(os.path.join(HERE, "new.txt"), "w") as new:
            new.write("made by the trainer")
        return sd


make_trainer = Trainer
"""


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="the supervised child needs fork (Linux)")
def test_a_trainer_that_writes_files_changes_none_of_the_users(capsys, tmp_path, monkeypatch):
    """Its checkpoint and log writes go to a scratch folder, removed afterwards; the verdict is the same."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where our scratch folder goes
    (tmp_path / "tmp").mkdir()
    user = tmp_path / "run"
    user.mkdir()
    (user / "last.pt").write_bytes(b"the real run's checkpoint")
    (user / "train.log").write_text("loss 2.3\n")
    (user / "trainer.py").write_text(WRITES_ITS_OWN_FILES)
    before = {path.name: path.read_bytes() for path in user.iterdir()}
    proc = run_main(capsys, "--trainer", user / "trainer.py", "--steps", 4, "--resume-at", 2)
    assert proc.returncode == 0 and proc.stdout.startswith("[PASS] resume_check: ok:"), (proc.stdout, proc.stderr)
    assert {path.name: path.read_bytes() for path in user.iterdir()} == before  # no __pycache__, no new.txt either
    assert "went to a scratch folder, removed afterwards" in proc.stdout and "last.pt" in proc.stdout
    assert list((tmp_path / "tmp").iterdir()) == []


TRAINER = """
class Trainer:
    def state_dict(self):
        return {{"n": 1}}

    def load_state_dict(self, sd):
        {load}

    def train_step(self):
        {step}


def make_trainer():
    {make}
"""
BAD_FILES = {
    "no factory": ("x = 1\n", "has no function make_trainer()"),
    "raises on import": ("raise ImportError('no module named apex')\n", "raised ImportError on import"),
    "factory raises": (TRAINER.format(load="pass", step="return 1.0", make="raise ValueError('needs a GPU')"),
                       "make_trainer() raised ValueError: needs a GPU (reference run)"),
    "missing method": ("def make_trainer():\n    return {'train_step': lambda: 1.0}\n",
                       "has no state_dict(), load_state_dict()"),
    "train_step raises": (TRAINER.format(load="pass", step="raise KeyError('input_ids')", make="return Trainer()"),
                          "train_step() raised KeyError: 'input_ids' (reference run, step 0)"),
    "load raises, multi-line": (TRAINER.format(load="raise RuntimeError('Error(s) in loading:\\n\\tMissing key(s)')",
                                               step="return 1.0", make="return Trainer()"),
                                "load_state_dict() raised RuntimeError: Error(s) in loading: Missing key(s) (resume before step 3)"),
    "bad loss": (TRAINER.format(load="pass", step="return 'low'", make="return Trainer()"),
                 "train_step() returned str"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_trainer_files_exit_2_with_one_line(name, capsys, tmp_path):
    text, words = BAD_FILES[name]
    path = tmp_path / f"{name.replace(' ', '_').replace(',', '')}.py"
    path.write_text(text)
    proc = run_main(capsys, "--trainer", path)
    assert_one_line_error(proc)
    assert words in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv, words", [
    (["--trainer", "does/not/exist.py"], "trainer file not found: does/not/exist.py"),
    (["--trainer", "{good}:nope"], "has no function nope()"),
    (["--trainer", "{good}", "--healthy"], "do not apply to --trainer"),
    (["--healthy", "--bug", "rng"], "do not combine it with --bug"),
    (["--bug", "typo"], "invalid choice"),
    (["--resume-at", "3,x"], "comma-separated step numbers"),
    (["--resume-at", "0"], "must lie in 1..8"),
    (["--steps", "4", "--resume-at", "5"], "must lie in 1..3"),
])
def test_bad_usage_exits_2_with_one_line(argv, words, capsys, tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import resume_check\nmake_trainer = resume_check.DemoTrainer\n")
    proc = run_main(capsys, *[a.format(good=good) for a in argv])
    assert_one_line_error(proc)
    assert words in proc.stderr, proc.stderr


# --- torch.distributed: two gloo ranks, each checking its own shard ---------------------------------------

class ShardedTrainer:
    """A DDP regression fed by a DistributedSampler; restore_position=False forgets where the sampler stood."""

    def __init__(self, restore_position):
        self.restore_position = restore_position
        data = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64, 4, generator=data), torch.randn(64, 1, generator=data)
        self.sampler = torch.utils.data.DistributedSampler(range(64), shuffle=True, seed=0)  # this rank's 32 of 64
        self.model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))  # a collective per trainer built
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.epoch, self.pos = 0, 0

    def train_step(self):
        self.sampler.set_epoch(self.epoch)
        idx = torch.tensor(list(self.sampler))[self.pos * 4:(self.pos + 1) * 4]
        self.epoch, self.pos = (self.epoch + 1, 0) if self.pos == 7 else (self.epoch, self.pos + 1)
        loss = torch.nn.functional.mse_loss(self.model(self.x[idx]), self.y[idx])
        self.opt.zero_grad()
        loss.backward()  # all-reduces the gradients
        self.opt.step()
        return {"loss": loss.item(), "batch": idx}

    def state_dict(self):
        return {"model": self.model.module.state_dict(), "optimizer": self.opt.state_dict(),
                "sampler": {"epoch": self.epoch, "pos": self.pos}}

    def load_state_dict(self, sd):
        self.model.module.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optimizer"])
        if self.restore_position:
            self.epoch, self.pos = sd["sampler"]["epoch"], sd["sampler"]["pos"]


def _rank_main(rank, world, port, out_dir):
    gloo.join(rank, world, port)
    results = {}
    for name, restore in (("restored", True), ("forgotten", False)):
        result = rc.check_resume(lambda: ShardedTrainer(restore))
        results[name] = {"verdict": result.details["verdict"], "batches": result.details["reference"]["batch"]}
    if rank == 0:  # alone, on a trainer that knows nothing of ranks: a collective in the check would hang here
        results["solo"] = rc.check_resume(rc.make_demo_trainer).details["verdict"]
    gloo.report(rank, out_dir, results)


def test_two_gloo_ranks_reach_the_same_verdict(tmp_path):
    ranks = gloo.run_on_ranks(_rank_main, tmp_path, "the ranks did not finish: resume_check hangs under torch.distributed")
    assert [r["restored"]["verdict"] for r in ranks] == ["ok", "ok"]
    assert [r["forgotten"]["verdict"] for r in ranks] == ["data_restarted", "data_restarted"]
    assert ranks[0]["restored"]["batches"] != ranks[1]["restored"]["batches"]  # each rank checked its own shard
    assert ranks[0]["solo"] == "ok"


def test_the_largest_difference_is_measured_on_the_float_entries_that_differ():
    a = {("w",): torch.tensor([1.0, 2.0]), ("step",): torch.tensor(3), ("lr",): 0.1, ("v",): torch.zeros(2)}
    b = {("w",): torch.tensor([1.0, 2.5]), ("step",): torch.tensor(4), ("lr",): 0.1, ("v",): torch.zeros(3)}
    paths, largest = rc.state_difference(a, b)
    assert sorted(paths) == [("step",), ("v",), ("w",)] and largest == 0.5  # v: shapes differ, nothing to subtract


@pytest.mark.parametrize("state", [
    {"last_epoch": 3, "base_lrs": [0.1], "_last_lr": [0.05]},  # torch's schedulers
    {"last_epoch": 3, "base_lrs": [0.1]},  # one saved before its first step's _last_lr, or written by hand
    {"last_epoch": 3, "_last_lr": [0.05]},
])
def test_a_scheduler_state_is_known_by_its_epoch_and_either_rate_list(state):
    checkpoint = {"optimizer": {"state": {}, "param_groups": []}, "scheduler": state, "epoch": 3}
    assert rc.entry_kinds(checkpoint) == {("optimizer",): "optimizer", ("scheduler",): "scheduler"}


SAVES_WHAT_IT_DOES_NOT_LOAD = """
import resume_check


class Trainer(resume_check.DemoTrainer):
    def __init__(self):
        super().__init__()
        self.seen = 0  # batches seen: saved, but load_state_dict() leaves it at 0

    def train_step(self):
        self.seen += 1
        return super().train_step()

    def state_dict(self):
        return dict(super().state_dict(), seen=self.seen)
"""


def test_an_entry_never_loaded_that_no_step_shows_is_still_named(capsys, tmp_path):
    """Losses, batches and rates all agree (no first step to blame): the entry load_state_dict() skips is the verdict."""
    path = tmp_path / "trainer.py"
    path.write_text(SAVES_WHAT_IT_DOES_NOT_LOAD)
    proc = run_main(capsys, "--trainer", f"{path}:Trainer", "--steps", 6, "--resume-at", "2,4", "--json")
    assert proc.returncode == 1, proc.stderr
    details = json.loads(proc.stdout)["details"]
    assert details["verdict"] == "state_not_restored" and details["divergence"]["first_step"] is None


EMA_COUNTER_NOT_SAVED = """
import torch

import resume_check


class Trainer(resume_check.DemoTrainer):
    def __init__(self):
        super().__init__()
        self.ema = [p.detach().clone() for p in self.model.parameters()]
        self.updates = 0  # BUG: the EMA's warm-up counter is not in the checkpoint: after a resume its decay starts over

    def train_step(self):
        out = super().train_step()
        self.updates += 1
        decay = min(0.999, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            for ema, p in zip(self.ema, self.model.parameters()):
                ema.mul_(decay).add_(p, alpha=1 - decay)
        return out

    def state_dict(self):
        return dict(super().state_dict(), ema=[ema.clone() for ema in self.ema])

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.ema = [ema.clone() for ema in sd["ema"]]
"""


def test_state_the_checkpoint_misses_that_no_step_shows_is_named_by_the_final_state_it_changed(capsys, tmp_path):
    """Every entry saved is loaded and losses, batches and rates agree; only the EMA weights end elsewhere."""
    path = tmp_path / "trainer.py"
    path.write_text(EMA_COUNTER_NOT_SAVED)
    proc = run_main(capsys, "--trainer", f"{path}:Trainer", "--steps", 6, "--resume-at", "2,4", "--json")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    details = result["details"]
    assert details["verdict"] == "state_not_restored" and details["divergence"]["first_step"] is None
    assert "in the final state (ema." in result["summary"], result["summary"]


def test_a_trainer_imports_a_module_beside_it(capsys, tmp_path, monkeypatch):
    """Like `python trainer.py`: the trainer's own folder is on the import path, so a helper module next to it loads."""
    monkeypatch.setattr(rc.sys, "path", list(rc.sys.path))
    (tmp_path / "my_trainer_helpers.py").write_text("import resume_check\nTrainer = resume_check.DemoTrainer\n")
    (tmp_path / "trainer.py").write_text("from my_trainer_helpers import Trainer\n")
    proc = run_main(capsys, "--trainer", f"{tmp_path / 'trainer.py'}:Trainer", "--steps", 4, "--resume-at", 2)
    assert proc.returncode == 0, proc.stderr


def test_close_compares_lrs_per_group_and_a_summary_names_3_entries():
    assert rc.close((0.1, 0.01), [0.1, 0.01], 0.0, 0.0)  # a tuple comes back from JSON as a list
    assert not rc.close((0.1, 0.01), (0.1,), 0.0, 0.0)
    assert not rc.close((0.1,), 0.1, 0.0, 0.0)  # one group against a float
    assert rc.listing(["a", "b", "c"]) == "a, b, c"
    assert rc.listing(["a", "b", "c", "d"]) == "a, b, c, +1 more"


def test_a_resume_at_the_first_step_is_a_valid_resume_point():
    result = rc.check_resume(rc.make_demo_trainer, steps=3, resume_at=(1,))
    assert (result.status, result.details["resume_at"]) == ("pass", [1])
    with pytest.raises(rc.CheckError, match="must lie in 1..2"):
        rc.check_resume(rc.make_demo_trainer, steps=3, resume_at=(0,))
