"""Decisions pinned one by one (issue 27): each test holds one verdict, threshold or refusal that a plausible
small edit to the code once changed without any other test noticing. Each asserts the decision itself (status,
module, phase, step, type, exit code, the file kept), on inputs small enough to take well under a second."""
import hashlib
import json
import math
import os

import pytest
import torch

import bad_samples
import capture
import dist_check
import install_skill
import label_alignment
import lint
import loss_surface
import nan_watch
import pinn_check
import registration
import rl_probes
import spike_lab
import spikes
import sweeps
from nan_watch import NanWatch
from spikelog.read.columns import Columns
from test_hostile_install import source  # noqa: F401  (the fixture: a tiny pack to install from)


# --- nan_watch -------------------------------------------------------------------------------------


class LogInside(torch.nn.Module):
    """A container whose own forward takes a log between its two children: the NaN is made outside any child."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.second(torch.log(self.first(x)))  # BUG: log of a negative value


def test_nanwatch_names_the_container_whose_functional_op_made_the_nan_not_the_child_that_met_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(LogInside())
    watch = NanWatch(model)
    x = torch.randn(8, 4)
    loss = model(x).sum()
    loss.backward()
    report = watch.check(5, loss, replay=lambda: model(x).sum())
    watch.remove()
    assert (report["step"], report["module"], report["class"], report["phase"], report["source"]) == \
        (5, "0", "LogInside", "forward", "module")


def test_check_nan_watch_does_not_blame_a_linear_for_a_nan_gradient_the_loss_made():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(6, 4)
    y = model(x).detach()
    y[3:] += 1  # three rows where the prediction equals the target: the distance's sqrt has an infinite slope at 0

    def distance(out, target):
        return ((out - target) ** 2).sum(-1).sqrt().mean()

    result = nan_watch.check_nan_watch({"model": model, "batch": (x, y), "loss_fn": distance, "task": {"kind": "regression"}})
    assert result.status == "fail"
    assert result.details["origin"] == {"module": "2", "class": "Linear", "phase": "backward"}
    last = result.details["frames"][-1]
    assert (last["module"], last["phase"], last["finite"], last["origin"]) == ("2", "backward", False, False)


# --- the Hugging Face callback -----------------------------------------------------------------------


class LossModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(3.918))

    def forward(self, input_ids=None, num_items_in_batch=None):
        return {"loss": self.weight * 1.0}


class Losses:
    def __init__(self):
        self.added, self.replays, self.checking = [], [], False

    def add_loss(self, loss, tokens=None, share=False):
        self.added.append((float(loss.detach()), tokens, share))

    def add_replay(self, replay):
        self.replays.append(replay)


def test_the_hf_probe_passes_the_models_loss_as_it_is_and_marks_one_over_the_whole_steps_tokens_a_share():
    pytest.importorskip("transformers")
    from ml_debug.integrations.hf import _Probe

    model, session = LossModel(), Losses()
    probe = _Probe(model, session)
    ids = torch.zeros(2, 5, dtype=torch.long)
    model(input_ids=ids)  # the loss of one micro-batch: the step's loss is their mean
    model(input_ids=ids, num_items_in_batch=20)  # already divided by the tokens of the whole step: a share of it
    session.checking = True  # NanWatch replays a micro-batch: neither a loss nor a replay of the step
    assert float(session.replays[1]()["loss"]) == pytest.approx(3.918)
    probe.remove()
    assert session.added == [(pytest.approx(3.918), 10, False), (pytest.approx(3.918), 10, True)]
    assert len(session.replays) == 2


def test_a_sessions_begin_gives_nanwatch_the_rng_state_the_step_starts_from_and_needs_no_watch(tmp_path):
    from ml_debug.integrations._session import Session

    model = torch.nn.Linear(2, 1)
    for watched in (False, True):
        session = Session(model, torch.optim.SGD(model.parameters(), lr=0.1), str(tmp_path / f"{watched}.jsonl"),
                          guard=False, monitor=False, nan_watch=watched)
        session.add_replay(lambda: None)
        torch.rand(3)  # the loop draws random numbers between two steps (an augmentation)
        session.begin()
        assert session.replays == []
        if watched:
            assert torch.equal(session.watch._rng[0], torch.get_rng_state())


class MiniModule(torch.nn.Module):
    """What the Lightning callback uses of a LightningModule: training_step, log."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 8, bias=False), ScaleNormNoEps(), torch.nn.Linear(8, 2))
        self.logged = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.encoder(x), y)
        self.log("train_loss", loss)
        return loss

    def log(self, name, value):
        self.logged.append(name)


class ScaleNormNoEps(torch.nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)  # BUG: no eps: an all-zero row divides 0 by 0


def test_the_lightning_callback_replays_every_micro_batch_of_the_step_from_the_first(tmp_path):
    pytest.importorskip("lightning")
    from types import SimpleNamespace

    from ml_debug.integrations.lightning import MLDebugCallback

    torch.manual_seed(0)
    module = MiniModule()
    trainer = SimpleNamespace(accumulate_grad_batches=2, global_step=0, optimizers=[torch.optim.SGD(module.parameters(), lr=0.1)],
                              log_dir=str(tmp_path), default_root_dir=str(tmp_path))
    callback = MLDebugCallback(monitor=False, guard=False)
    callback.on_train_start(trainer, module)
    x = torch.randn(2, 8, 4)
    x[0, 3] = 0.0  # the first micro-batch of the step makes the NaN, the second is healthy
    y = torch.randint(0, 2, (2, 8))
    for i in range(2):
        batch = (x[i], y[i])
        callback.on_train_batch_start(trainer, module, batch, i)
        loss = module.training_step(batch, i)
        callback.on_before_backward(trainer, module, loss / 2)
        (loss / 2).backward()
        callback.on_after_backward(trainer, module)
    callback.on_before_optimizer_step(trainer, module, trainer.optimizers[0])
    callback.on_train_batch_end(trainer, module, None, batch, 1)
    callback.on_train_end(trainer, module)
    assert [(r["step"], r["module"], r["phase"], r["source"]) for r in callback.reports] == \
        [(0, "encoder.1", "forward", "module")]
    assert module.logged == ["train_loss", "train_loss"]  # the replay logged nothing


@pytest.mark.parametrize("losses,share,step_loss", [
    ([2.0, 4.0, 6.0, 8.0], False, 5.0),  # a full window of four micro-batches: their mean
    ([2.0, 4.0], False, 3.0),  # an epoch's last window, two micro-batches: their mean, not their sum over four
    ([0.5, 0.25], True, 0.75),  # shares of the step's loss (HF, num_items_in_batch): their sum
])
def test_a_sessions_step_loss_is_the_mean_of_its_micro_batches_or_the_sum_of_its_shares(tmp_path, losses, share, step_loss):
    from ml_debug.integrations._session import Session

    model = torch.nn.Linear(2, 1)
    session = Session(model, torch.optim.SGD(model.parameters(), lr=0.1), str(tmp_path / "log.jsonl"), guard=False,
                      nan_watch=False)
    for loss in losses:
        session.add_loss(torch.tensor(loss), share=share)
    assert float(session.step_loss()) == step_loss
    assert session.before_step(0) is False  # no guard: nothing asks to skip
    session.after_step(0)
    assert session.step_loss() is None and session.micro_batches == 0
    session.close()


def test_the_hf_probe_takes_no_loss_from_an_eval_or_no_grad_forward_and_warns_once_on_no_loss(caplog):
    pytest.importorskip("transformers")
    from ml_debug.integrations.hf import _Probe

    model, session = LossModel(), Losses()
    probe = _Probe(model, session)
    with torch.no_grad():
        model(input_ids=None)  # an evaluation inside the training loop, under no_grad
    model.eval()
    model(input_ids=None)  # and one in eval mode
    probe.remove()
    assert session.added == []
    silent, session = torch.nn.Linear(2, 2), Losses()  # a model whose output holds no loss
    probe = _Probe(silent, session)
    with caplog.at_level("WARNING", logger="ml_debug"):
        silent(torch.zeros(1, 2))
        silent(torch.zeros(1, 2))
    probe.remove()
    assert session.added == [] and len(caplog.records) == 1


@pytest.mark.parametrize("global_step, kept", [(0, False), (1, True)])
def test_the_hf_callback_appends_to_its_log_on_a_resume_only(tmp_path, global_step, kept):
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from ml_debug.integrations.hf import LOG_NAME, MLDebugCallback

    log = tmp_path / LOG_NAME
    log.write_text('{"step": 1, "loss": 2.0}\n')
    model = LossModel()
    callback = MLDebugCallback()
    begin = lambda: callback.on_train_begin(  # noqa: E731
        SimpleNamespace(output_dir=str(tmp_path), gradient_accumulation_steps=1), SimpleNamespace(global_step=global_step),
        None, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    if kept:
        begin()
        assert model._forward_hooks  # the probe and NanWatch watch the model while it trains...
        callback.on_train_end(None, None, None)
        assert not model._forward_hooks  # ...and let go of it at the end
    else:
        with pytest.raises(FileExistsError):  # a new run never writes over a log that is there
            begin()
    assert log.read_text() == '{"step": 1, "loss": 2.0}\n'


# --- label_alignment, registration ------------------------------------------------------------------


def test_label_alignment_fails_labels_shifted_the_wrong_way():
    case = label_alignment.make_demo_case(broken=False)
    inputs, _ = case["batch"]
    targets = inputs.clone()
    targets[:, 1:] = inputs[:, :-1]  # BUG: position t scored against token t - 1
    case["batch"] = (inputs, targets)
    result = label_alignment.check_label_alignment(case)
    assert (result.status, result.details["input_offset"]) == ("fail", -1)


@pytest.mark.parametrize("loss_fn", [
    lambda out, y: torch.nn.functional.cross_entropy(out.detach().transpose(1, 2), y),  # no graph: nothing to read
    lambda out, y: torch.nn.functional.cross_entropy(out.transpose(1, 2), y, reduction="none"),  # one per position
], ids=["detached", "unreduced"])
def test_label_alignment_skips_a_loss_that_is_no_scalar_of_the_model(loss_fn):
    case = label_alignment.make_demo_case(broken=False)
    case["loss_fn"] = loss_fn
    result = label_alignment.check_label_alignment(case)
    assert (result.status, result.summary) == ("skip", "the loss is not a scalar that depends on the model")


class ScaledMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.scale = torch.full((2,), 0.5)  # a plain tensor attribute: not a buffer, and not trainable

    def forward(self, x):
        return self.linear(x) * self.scale


def test_registration_warns_on_a_plain_tensor_attribute_used_in_forward():
    result = registration.check_registration({"model": ScaledMLP(), "batch": (torch.randn(3, 4), torch.tensor([0, 1, 0])),
                                              "loss_fn": torch.nn.functional.cross_entropy})
    assert (result.status, result.details["unregistered_used"]) == ("warn", ["scale"])


# --- install_skill -----------------------------------------------------------------------------------


def test_install_skill_refuses_a_dest_that_is_a_symlink_into_the_source_tree(tmp_path, source, capsys):
    (source / "build").mkdir()
    link = tmp_path / "skills"
    link.symlink_to(source / "build")
    assert install_skill.main([str(link)], source=source) == 2
    assert list((source / "build").iterdir()) == []


def test_install_skill_keeps_a_symlinked_folder_the_user_added_to_an_install(tmp_path, source, capsys):
    skills = tmp_path / "skills"
    assert install_skill.main([str(skills)], source=source) == 0
    mine = tmp_path / "my-notes"
    mine.mkdir()
    (skills / "ml-debug" / "notes").symlink_to(mine)
    assert install_skill.main([str(skills)], source=source) == 2
    assert (skills / "ml-debug" / "notes").is_symlink()


MINE = "my own skill\n"
MINE_SHA = hashlib.sha256(MINE.encode()).hexdigest()


@pytest.mark.parametrize("manifest", [
    {"kind": "another tool", "files": {"SKILL.md": MINE_SHA}},  # it lists the user's file as it is: not ours all the same
    {"kind": install_skill.MANIFEST_KIND, "files": ["SKILL.md"]},  # ours in name, but not a {path: sha256} table
])
def test_install_skill_takes_a_manifest_it_did_not_write_for_no_manifest(tmp_path, source, capsys, manifest):
    target = tmp_path / "skills" / "ml-debug"
    target.mkdir(parents=True)
    (target / install_skill.MANIFEST).write_text(json.dumps(manifest))
    (target / "SKILL.md").write_text(MINE)
    assert install_skill.main([str(tmp_path / "skills")], source=source) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert (target / "SKILL.md").read_text() == MINE


def test_install_skill_copies_sources_and_subfolders_not_caches(tmp_path, source):
    (source / "diagnostics" / "__pycache__").mkdir()
    (source / "diagnostics" / "__pycache__" / "tool.cpython-311.pyc").write_bytes(b"\0")
    (source / "diagnostics" / "__pycache__" / "cache.txt").write_text("a cache folder is left behind whole\n")
    (source / "diagnostics" / "old.pyc").write_bytes(b"\0")
    (source / "diagnostics" / "sub").mkdir()
    (source / "diagnostics" / "sub" / "part.py").write_text('"""A part of a tool."""\n')
    target = install_skill.install(tmp_path / "skills", source=source)
    installed = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert installed == sorted([install_skill.MANIFEST, "SKILL.md", "diagnostics/tool.py", "diagnostics/sub/part.py"])


def test_install_skill_puts_the_earlier_install_back_when_the_last_rename_fails(tmp_path, source, monkeypatch, capsys):
    skills = tmp_path / "skills"
    assert install_skill.main([str(skills)], source=source) == 0
    before = {p.relative_to(skills).as_posix(): p.read_bytes() for p in skills.rglob("*") if p.is_file()}
    rename = os.rename

    def full_disk_at_the_last_rename(old, new):
        if os.path.basename(old).startswith(".ml-debug-staging-"):
            raise OSError(28, "No space left on device")
        rename(old, new)

    monkeypatch.setattr(os, "rename", full_disk_at_the_last_rename)
    (source / "SKILL.md").write_text((source / "SKILL.md").read_text() + "A newer version.\n")
    assert install_skill.main([str(skills)], source=source) == 2
    assert {p.relative_to(skills).as_posix(): p.read_bytes() for p in skills.rglob("*") if p.is_file()} == before


# --- spikes --------------------------------------------------------------------------------------------


def analyze(tmp_path, losses):
    path = tmp_path / "run.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{v:.5f}\n" for s, v in enumerate(losses)))
    return spikes.analyze(path)


def quiet(s):
    return 3.0 + 0.01 * math.sin(s * 1.7)


@pytest.mark.parametrize("back, kind", [(20, "fast_recovery"), (21, "slow_recovery")])
def test_a_recovery_within_20_steps_of_the_peak_is_fast(tmp_path, back, kind):
    losses = [6.0 if s == 300 else 4.0 if 300 < s < 300 + back else quiet(s) for s in range(700)]
    report = analyze(tmp_path, losses)
    assert [(s.step, s.type, s.recovery_steps) for s in report.spikes] == [(300, kind, back)]


def test_a_level_still_climbing_after_a_spike_is_a_divergence_below_1_5x(tmp_path):
    losses = [6.0 if s == 300 else 3.6 + 0.002 * (s - 300) if s > 300 else quiet(s) for s in range(500)]
    assert max(losses[301:]) < 1.5 * 3.0
    report = analyze(tmp_path, losses)
    assert [(s.step, s.type, s.ended_by) for s in report.spikes] == [(300, "divergence", "settled")]


@pytest.mark.parametrize("level, kind", [(4.44, "no_recovery"), (4.56, "divergence")])
def test_a_level_that_settles_at_1_5x_the_baseline_or_more_is_a_divergence(tmp_path, level, kind):
    losses = [6.0 if s == 300 else level + 0.01 * math.sin(s * 1.7) if s > 300 else quiet(s) for s in range(700)]
    report = analyze(tmp_path, losses)
    assert [(s.step, s.type, s.ended_by) for s in report.spikes] == [(300, kind, "settled")]


@pytest.mark.parametrize("bump, found", [(1.048, False), (1.052, True)])
def test_a_row_spike_must_also_be_5_percent_over_the_baseline(tmp_path, bump, found):
    """Noise of 0.01%: 6 sigma is far below 5% of the level, so the 5% floor (SPIKE_REL) alone decides."""
    losses = [3.0 * bump if s == 300 else 3.0 + 0.0003 * math.sin(s * 1.7) for s in range(500)]
    report = analyze(tmp_path, losses)
    assert [s.step for s in report.spikes] == ([300] if found else [])


@pytest.mark.parametrize("names, loss", [
    (["step", "avg_loss"], "avg_loss"),  # the one column named like a loss, in a table (no counts)
    (["step", "avg_loss", "train_total_loss"], "train_total_loss"),  # of two, the one named for training
])
def test_a_tables_loss_by_its_name_alone(names, loss):
    assert Columns(names).loss == loss


@pytest.mark.parametrize("batch, loss", [(100, "Batch loss"), (99, None)])
def test_a_loss_logged_ten_times_as_often_as_the_other_is_the_loss(batch, loss):
    """`Batch loss` beside an epoch's `Average Train Loss`: 10x as many values decide; fewer, the log is refused."""
    counts = {"Batch loss": batch, "Average Train Loss": 10}
    if loss is None:
        with pytest.raises(spikes.CliError, match="no loss found"):
            Columns(list(counts), counts=counts)
    else:
        assert Columns(list(counts), counts=counts).loss == loss


@pytest.mark.parametrize("names, step", [
    (["num_episodes", "total_loss", "total timesteps"], "total timesteps"),  # an RL script's progress.csv
    (["total/epochs", "total/steps", "train/loss_critic"], "total/steps"),  # OpenAI baselines' DDPG
    (["time/iterations", "time/total_timesteps", "train/loss"], "time/iterations"),  # SB3: its iteration first
])
def test_an_rl_logs_environment_steps_are_its_step_after_any_iteration_counter(names, step):
    assert Columns(names, loss_name=names[-1] if "loss" in names[-1] else None).step == step


def test_validation_losses_are_never_a_dataset_series():
    names = ["step", "loss", "eval_loss", "val_loss", "valid/loss", "validation_loss", "test_loss", "loss/cm4"]
    assert Columns(names).extras == ["loss/cm4"]


# --- lint, sweeps, loss_surface, pinn_check, rl_probes ---------------------------------------------------


@pytest.mark.parametrize("call, flagged", [("nn.Softmax(-1)", False), ("nn.Softmax(dim=-1)", False), ("nn.Softmax()", True)])
def test_softmax_with_a_positional_dim_is_not_flagged(call, flagged):
    code = f"import torch\nimport torch.nn as nn\nact = {call}\nact(torch.randn(2, 3, 4))\n"
    findings = [(f.rule, f.line) for f in lint.lint_source(code)]
    assert findings == ([("softmax-no-dim", 3)] if flagged else [])


SOFTMAX_CASES = [  # code in `def f(x, b, t, layers, apply, other):` after the torch imports; what the finding says, or None
    ("return F.softmax(x.view(b, t, -1))", "3-D input over dim 0"),
    ("return F.softmax(x.view(b, t, -1), 1)", None),  # a positional dim
    ("return nn.Softmax()(x.view(b, t, -1))", "3-D input over dim 0"),  # applied where it is built
    ("nn.Softmax()\nreturn x", None),  # built and dropped
    ("head = nn.Sequential(*layers, nn.Softmax())\nreturn head(x.view(b, t, -1))", None),  # layers it cannot see
    ("act = nn.Softmax()\nkept = [act]\nreturn apply(act, x.view(b, t, -1))", None),  # handed on, not applied here
    ("act = nn.Softmax()\nact = other\nreturn act(x.view(b, t, -1))", None),  # the name holds something else
    ("act = nn.Softmax()\nreturn act(x.view(b, -1))", None),  # 2-D: dim 1 is meant
    ("acts = {}\nacts['sm'] = nn.Softmax()\nreturn acts['sm'](x.view(b, t, -1))", None),  # kept in a dict: not followed
    ("return F.softmax(x.view(b, t, 2, 2))", None),  # 4 sizes spelled out: an image batch, dim 1 its channels
    ("return F.softmax(torch.zeros(b, t, 2, 2))", None),
    ("return F.softmax(x.view(b, t, 2, 2).permute(0, 2, 1, 3))", "4-D input over dim 1"),  # 4-D, its layout not spelled out
]


@pytest.mark.parametrize("body, said", SOFTMAX_CASES, ids=[b.replace("\n", "; ") for b, _ in SOFTMAX_CASES])
def test_softmax_no_dim_speaks_on_a_rank_it_proves_wrong_where_the_softmax_is_applied(body, said):
    code = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
            "def f(x, b, t, layers, apply, other):\n" + "".join(f"    {line}\n" for line in body.splitlines()))
    found = [f for f in lint.lint_source(code) if f.rule == "softmax-no-dim"]
    assert bool(found) == bool(said)
    if found:
        assert said in found[0].message


def test_softmax_no_dim_says_an_attention_score_is_normalised_over_its_heads():
    code = ("import torch.nn.functional as F\n\n\ndef attend(x, b, t, h):\n    q = x.view(b, t, h, -1).transpose(1, 2)\n"
            "    return F.softmax(q @ q.transpose(-2, -1))\n")
    [found] = lint.lint_source(code)
    assert found.rule == "softmax-no-dim" and "4-D input over dim 1" in found.message


def test_softmax_no_dim_follows_self_attributes_only_on_self():
    code = ("import torch.nn as nn\n\n\nclass Head(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.softmax = nn.Softmax()\n\n\nmodel = Head()\nprobs = model.softmax(x.view(b, t, -1))\n"
            "holder.softmax = nn.Softmax()\n")
    assert lint.lint_source(code) == []  # applied on another object: not followed, so not judged
    kept = ("import torch.nn as nn\n\n\nclass Head(nn.Module):\n    def forward(self, h, b, t):\n        acts = {}\n"
            "        acts['sm'] = nn.Softmax()\n        return acts['sm'](h.view(b, t, -1))\n")
    assert lint.lint_source(kept) == []  # kept in a dict inside a method: not followed either


@pytest.mark.parametrize("volatile", [True, False])
def test_eval_without_no_grad_names_a_volatile_input_only_where_there_is_one(volatile):
    code = ("from torch.autograd import Variable\n\n\ndef evaluate(model, loader):\n    model.eval()\n"
            "    for x, y in loader:\n" + ("        x = Variable(x, volatile=True)\n" if volatile else "") +
            "        out = model(x)\n")
    [found] = lint.lint_source(code)
    assert found.rule == "eval-without-no-grad"
    assert ("the volatile=True at line 7" in found.message) == volatile


EVAL_MODE = """import math

import mylib
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def forward(self, x):
        return x

    def __init__(self, width=4):
        super().__init__()
        self.width = width
        self.fc = nn.Linear(width, width)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = {layers}


{build}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    {evaluate}
"""


@pytest.mark.parametrize("layers, build, evaluate, flagged", [
    ("nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])", "model = Net()", "model.eval()", False),  # nothing mode-dependent
    ("nn.ModuleList([nn.Linear(4, 4), nn.Dropout(0.1)])", "model = Net()", "model.eval()", True),
    ("nn.Sequential(" * 5 + "nn.Linear(4, 4)" + ")" * 5, "model = Net()", "model.eval()", False),  # 5 deep: followed
    ("nn.Sequential(" * 6 + "nn.Linear(4, 4)" + ")" * 6, "model = Net()", "model.eval()", True),  # 6: unsure, said
    ("nn.Linear(4, 4)", "def build(net):\n    return net.cuda()\n\n\nmodel = build(Net())", "model.eval()", True),
    ("nn.Dropout(0.1)", "model = Net()\n\n\ndef evaluate(model=None):\n    model.eval()", "evaluate()", False),
    ("nn.LSTM(4, 4, 2, dropout=0)", "model = Net()", "model.eval()", False),  # a literal 0: no dropout
    ("nn.Linear(4, 4)", "model = mylib.Net()", "model.eval()", True),  # a model of another file: unsure
    ("nn.Linear(4, 4)", "model = Net()\nmodel.a = Net()", "model.eval()", False),
    ("nn.Parameter(torch.zeros(4))", "model = Net()", "model.eval()", False),  # a learned tensor, no layer
    ("torch.Tensor(4)", "model = Net()", "model.eval()", False),
    ("Block()", "model = Net()", "model.eval()", False),  # a mode-free class of this file
    ("int(4)", "model = Net()", "model.eval()", False),
    ("math.sqrt(4)", "model = Net()", "model.eval()", False),
    ("mylib.table()", "model = Net()", "model.eval()", True),  # might be a module: unsure
    ("Net()", "model = Net()", "model.eval()", True),  # a class that holds itself: given up, unsure
    ("nn.Linear(4, 4)", "models = [Net()]\nmodel = models[0].cuda()", "model.eval()", True),  # built where unseen
])
def test_eval_mode_not_restored_on_a_model_whose_layers_all_ignore_the_mode_is_no_finding(layers, build, evaluate, flagged):
    code = EVAL_MODE.format(layers=layers, build=build, evaluate=evaluate)
    assert [f.rule for f in lint.lint_source(code)] == (["eval-mode-not-restored"] if flagged else [])


TUPLE_MODEL = """import torch
import torch.nn as nn
import torch.nn.functional as F


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.adv = nn.Linear(8, 1)
        self.aux = nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=1))

    def forward(self, x, flag=False):
{forward}


d = D()
{use}
"""


@pytest.mark.parametrize("forward, use, flagged", [
    ("        return self.adv(x), self.aux(x)", "valid, label = d(x)\nloss = F.cross_entropy(label, y)", True),
    ("        return self.adv(x), self.aux(x)", "valid, label = d(x)\nloss = F.cross_entropy(valid, y)", False),
    ("        return self.adv(x), self.aux(x)", "a, b, c = d(x)\nloss = F.cross_entropy(c, y)", False),  # past the tuple
    ("        return self.aux(x)", "a, b = d(x)\nloss = F.cross_entropy(b, y)", False),  # a tensor unpacked by rows
    ("        if flag:\n            return self.adv(x), torch.sigmoid(x)\n        return self.adv(x), self.aux(x)",
     "valid, label = d(x)\nloss = F.cross_entropy(label, y)", False),  # two returns, two activations: unsure
    ("        return self.adv(x), self.aux(x)", "valid, label = unknown(x)\nloss = F.cross_entropy(label, y)", False),
    ("        return self.adv(x), self.aux(x)", "loss = F.cross_entropy(never_assigned, y)", False),
])
def test_softmax_into_ce_follows_one_element_of_a_returned_tuple(forward, use, flagged):
    found = [f.rule for f in lint.lint_source(TUPLE_MODEL.format(forward=forward, use=use))]
    assert found == (["softmax-into-ce"] if flagged else [])


RANKS = [  # an expression over x, y (tensors), a, b, c, d, n (ints as far as the code shows), idx, shape: its rank
    ("x.view(a, b, -1)", 3), ("x.view(-1)", 1), ("x.view(shape)", None), ("torch.zeros(n)", None),
    ("torch.zeros(len(y))", 1), ("torch.full((2, 3), 0.0)", 2), ("x.view(a, b, c, d).flatten(1)", 2),
    ("x.view(a, b, c, d).flatten(1, 2)", 3), ("x.flatten()", 1), ("x.view(a, b).unsqueeze(0)", 3),
    ("x.view(a, b).squeeze(0)", 1), ("x.view(a, b, c).sum(1)", 2), ("x.view(a, b, c).sum(1, keepdim=True)", 3),
    ("x.sum()", 0), ("torch.cat([x.view(a, b), y], 1)", 2), ("torch.stack([x.view(a, b)])", 3),
    ("x.view(a, b)[:, 0]", 1), ("x.view(a, b)[None]", 3), ("x.view(a, b)[idx]", None),
    ("x.view(a, b, c) @ y.view(a, c, d)", 3), ("x.view(a, b) * 2", 2), ("x.view(a, b) * y", None),
    ("nn.Sequential(nn.Linear(4, 2), nn.Flatten())(x.view(a, b, c))", 2), ("nn.Conv2d(1, 1, 3)(x.view(a, b, c, d))", None),
    ("F.relu(x.view(a, b))", 2), ("x.view(a, b).permute(1, 0)", 2), ("x.view(a, b) / math.sqrt(d)", 2),
    ("x.view(a, b) @ y.view(b, c)", 2), ("x.view(-1) @ y.view(a, b)", None), ("-x.view(a, b)", 2), ("[x, y]", None),
    ("x[0]", None), ("x.view(a, b)[..., 0]", None), ("x.view(-1)[0]", 0), ("x.view(-1)[0, 0]", None),
    ("x.view(a, b).permute((1, 0))", 2), ("x.view(-1).permute(0)", 1), ("x.permute()", None), ("x.view(a, b, c).permute(2, 0, 1)", 3),
    ("np.exp(x.view(a, b))", None), ("torch.zeros(a, b, dtype=torch.float)", 2), ("x.reshape(shape=(a, b))", None),
    ("torch.zeros(2.5)", None), ("torch.zeros(len(y) * shape)", None), ("torch.zeros(len(y) * 2)", 1),
    ("torch.zeros(y.shape[0])", 1), ("torch.zeros(y.shape[1:])", None), ("torch.zeros(y.lengths[0])", None),
    ("torch.zeros(y.size(0))", 1), ("torch.zeros(y.size())", None), ("m = len(y)\ntorch.zeros(m)", 1),
    ("x.flatten(-1)", None), ("x.flatten(n)", None), ("x.flatten(1, -1)", 2), ("x.view(a, b, c, d).flatten(1, -2)", None),
    ("x.view(a, b, c).flatten(0, n)", None), ("x.view(a, b).sum(dtype=torch.float)", None), ("x.view(a, b).sum(n)", None),
    ("x.view(a, b).sum(1, keepdim=n)", None), ("m = mylib.Linear(4)\nm(x.view(a, b))", None),
    ("nn.Sequential(nn.Flatten())(x)", None), ("nn.Flatten(0, 1)(x.view(a, b, c))", None),
    ("x0 = x.view(a, b)\n" + "\n".join(f"x{k} = x{k - 1} + 0" for k in range(1, 12)) + "\n-x11", 2),  # 24 steps deep
    ("x0 = x.view(a, b)\n" + "\n".join(f"x{k} = x{k - 1} + 0" for k in range(1, 12)) + "\n--x11", None),  # past them
    ("n0 = len(y)\n" + "\n".join(f"n{k} = n{k - 1} + 1" for k in range(1, 4)) + "\ntorch.zeros(-n3)", 1),  # 8 deep
    ("n0 = len(y)\n" + "\n".join(f"n{k} = n{k - 1} + 1" for k in range(1, 4)) + "\ntorch.zeros(--n3)", None),
    ("nn.Flatten(1)(x.view(a, b, c))", 2),
]


@pytest.mark.parametrize("expression, expected", RANKS, ids=[e.splitlines()[-1] for e, _ in RANKS])
def test_lint_follows_a_tensors_rank_through_the_code(expression, expected):
    """The rank of the expression (after the statements before it, where there are lines): lint's softmax-no-dim
    speaks only on a rank these rules prove; recursion stops 24 steps deep (8 for a size), where it gives up."""
    import ast

    from trainlint.ranks import rank
    from trainlint.source import Source

    *statements, returned = expression.splitlines()
    body = "".join(f"    {line}\n" for line in statements)
    code = ("import math\nimport mylib\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
            "import torch.nn.functional as F\n\n\n"
            f"def f(x, y, a, b, c, d, n, idx, shape):\n{body}    return {returned}\n")
    src = Source(ast.parse(code), "<string>", None, code)
    assert rank(src, src.of_type(ast.Return)[0].value) == expected


@pytest.mark.parametrize("owner, expected", [("self", 3), ("other", None)])
def test_lint_follows_a_rank_through_an_attribute_set_once_in_its_class(owner, expected):
    import ast

    from trainlint.ranks import rank
    from trainlint.source import Source

    code = ("import torch\n\n\nclass M:\n    def __init__(self):\n        self.h = torch.zeros(2, 3, 4)\n\n"
            f"    def f(self, other):\n        return {owner}.h\n")
    src = Source(ast.parse(code), "<string>", None, code)
    assert rank(src, src.of_type(ast.Return)[0].value) == expected


@pytest.mark.parametrize("values, x", [(("1", "10"), "log10"), (("1", "9"), "linear")])
def test_a_sweep_over_one_decade_is_fitted_on_log10(values, x):
    runs = {values[0]: {"a": 1.0, "b": 1.2, "c": 0.9}, values[1]: {"a": 0.5, "b": 0.8, "c": 0.6}}
    assert sweeps.trend(runs, list(values))["x"] == x


def test_a_constant_loss_is_all_plateau():
    surface = {"loss": lambda a, b: (a + b) * 0.0 + 1.0, "x_range": (-1.0, 1.0), "y_range": (-1.0, 1.0)}
    result = loss_surface.check_loss_surface(surface, n=5)
    assert (result["status"], result["details"]["plateau_share"]) == ("fail", 1.0)


def test_a_pinn_term_with_zero_gradient_is_an_imbalance():
    torch.manual_seed(0)
    points = torch.rand(64, 1)
    problem = {"model": pinn_check.MLP(), "collocation": points, "domain": [(0.0, 1.0)],
               "terms": {"fit": lambda net: net(points).pow(2).mean(), "dead": lambda net: net(points).sum() * 0.0}}
    result = pinn_check.check_pinn(problem)
    assert (result["status"], result["details"]["imbalance"]) == ("fail", math.inf)


class FixedAgent:
    """Probe 5's answer: the right action with probability 0.95 in both states, and the value it gives."""

    def __init__(self, value):
        self.v = value

    def value(self, obs):
        return torch.full((len(obs),), self.v)

    def policy(self, obs):
        return torch.tensor([[0.05, 0.95], [0.95, 0.05]])


@pytest.mark.parametrize("value, passed", [(0.9, True), (0.0, False)])
def test_probe_5_asks_for_v_equal_to_2p_minus_1(value, passed):
    probe = rl_probes.PROBES[4]
    assert probe.number == 5
    assert bool(probe.measure(FixedAgent(value), rl_probes.GAMMA)[0]) is passed


# --- dist_check, spike_lab, bad_samples, capture -------------------------------------------------------


def test_dist_check_fails_when_a_rank_never_reported(tmp_path, monkeypatch, capsys):
    verdict = {"rank": 0, "world": 2, "backend": "gloo", "device": "cpu", "status": "pass", "steps": {},
               "summary": "all steps passed"}
    monkeypatch.setattr(dist_check, "launch_local", lambda nproc, args: {0: verdict})
    assert dist_check.main(["--nproc", "2", "--out", str(tmp_path / "out")]) == 1
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  rank")]
    assert [(row[1], row[3]) for row in rows] == [("0", "PASS"), ("1", "FAIL")]


@pytest.mark.parametrize("name", ["train_log.jsonl", "postmortem.md", "guarded_log.jsonl"])
def test_spike_lab_refuses_to_replace_any_of_its_files_the_user_has(tmp_path, name, capsys):
    (tmp_path / name).write_text("mine\n")
    for force in ([], ["--force"]):
        assert spike_lab.main(["--steps", "200", "--at", "60", "--out", str(tmp_path), *force]) == 2
        assert name in capsys.readouterr().err
    assert (tmp_path / name).read_text() == "mine\n"


def test_bad_samples_keeps_the_worst_not_the_first():
    # one character takes 60%, 67%, 71%, 75%, 78%, 80% of each sample: the last two are the worst
    samples = [(line, "x" * (20 + 10 * line) + "abcdefghijklmnopqrst") for line in range(1, 7)]
    result = bad_samples.screen(samples, top=2)
    assert (result["flagged"], [entry["line"] for entry in result["worst"]]) == (6, [5, 6])


def test_capture_refuses_a_loss_summed_from_two_loss_calls():
    model = torch.nn.Linear(6, 3)
    before = [p.detach().clone() for p in model.parameters()]

    def train():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        x = torch.randn(16, 6)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, x[:, :3].argmax(1)) + torch.nn.functional.mse_loss(out, x[:, :3])
        loss.backward()
        optimizer.step()

    with pytest.raises(capture.CaptureError):
        capture.capture_case(train)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_contracts_batch_helpers_find_the_rows_and_cut_only_tensors_of_the_batch():
    """first_tensor, count_rows and batch_rows: what overfit_one_batch, update_ratio and the doctor's FLOP budget slice
    batches with. A dict gives its values; a tensor without the batch dim has no rows and is never cut; flattened
    targets (B*T rows of a batch of B) give T rows per batch row, and only when asked, batch-first."""
    from ml_debug_contract import batch_rows, count_rows, first_tensor
    ids, mask = torch.arange(6).reshape(3, 2), torch.ones(3, 2)
    assert first_tensor({"ids": ids, "mask": mask}) is ids and first_tensor(("text", [None, mask])) is mask
    assert first_tensor({"ids": [1, 2]}) is None and first_tensor(ids) is ids
    assert count_rows({"ids": ids}) == 3 and count_rows(ids, bdim=1) == 2 and count_rows(torch.tensor(3.0)) == 0
    assert count_rows(torch.zeros(5), bdim=1) == 0 and count_rows(None) == 0 and count_rows([]) == 0
    cut = batch_rows({"ids": ids, "scale": torch.tensor(2.0), "name": "x"}, 3, 1, 2)
    assert cut["ids"].tolist() == [[2, 3], [4, 5]] and cut["scale"].item() == 2.0 and cut["name"] == "x"
    assert batch_rows(torch.zeros(3), 3, 0, 2, bdim=1).shape == (3,)  # no dim 1: not the batch
    as_list, as_tuple = batch_rows([ids], 2, 0, 1, bdim=1), batch_rows((ids,), 2, 1, 1, bdim=1)
    assert type(as_list) is list and as_list[0].tolist() == [[0], [2], [4]] and as_tuple[0].tolist() == [[1], [3], [5]]
    flat = torch.arange(12)  # 4 rows of 3 positions
    assert batch_rows(flat, 4, 1, 2, flattened=True).tolist() == [3, 4, 5, 6, 7, 8]
    assert batch_rows(flat, 4, 1, 2).tolist() == flat.tolist() and batch_rows(flat, 4, 1, 2, bdim=1, flattened=True) is flat
    assert batch_rows(torch.arange(10), 4, 1, 2, flattened=True).shape == (10,)  # 10 is no 4 x T


def test_capture_takes_the_one_loss_call_the_backward_reaches_beside_one_only_logged():
    model = torch.nn.Linear(6, 3)

    def train():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        x = torch.randn(16, 6)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, x[:, :3].argmax(1))
        logged = torch.nn.functional.mse_loss(out, x[:, :3])  # a metric with a graph, never backward()'d
        loss.backward()
        optimizer.step()
        return logged.item()

    case = capture.capture_case(train)  # (the two summed into the backward()'d loss: the refusal above)
    out, targets = torch.randn(4, 3), torch.tensor([0, 2, 1, 0])
    assert case["task"]["kind"] == "classification"
    assert case["loss_fn"](out, targets).item() == torch.nn.functional.cross_entropy(out, targets).item()


class _SqrtAtZero(torch.nn.Module):
    def forward(self, x):
        return x + torch.sqrt(x - x.detach())  # BUG: the value is x, but sqrt's slope at 0 is infinite


def test_check_nan_watch_says_a_backward_origin_is_in_the_backward_pass():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _SqrtAtZero(), torch.nn.Linear(4, 2))
    result = nan_watch.check_nan_watch({"model": model, "batch": (torch.randn(6, 4), torch.randn(6, 2)),
                                        "loss_fn": torch.nn.functional.mse_loss, "task": {"kind": "regression"}})
    assert result.status == "fail" and result.details["origin"] == {"module": "1", "class": "_SqrtAtZero", "phase": "backward"}
    assert result.summary.startswith("forward is finite; first NaN/inf in backward: 1 (_SqrtAtZero)"), result.summary
    assert "sqrt/log/norm at exactly 0" in result.details["next"]


@pytest.mark.parametrize("pocket, refused", [(1, False), (100, False), (0, True), (101, True)])
def test_spike_lab_takes_a_pocket_of_1_to_100(tmp_path, pocket, refused, capsys):
    (tmp_path / "postmortem.md").write_text("mine\n")  # an accepted pocket reaches the output folder, and stops there
    assert spike_lab.main(["--steps", "200", "--at", "60", "--pocket", str(pocket), "--out", str(tmp_path)]) == 2
    assert ("--pocket must be between 1 and 100" in capsys.readouterr().err) == refused
