"""doctor --script: training scripts in the common shapes, each with a planted bug the doctor must flag and a healthy
twin it must not fail; the capture in code (capture_case, capturing); scripts that raise, exit, never step or compute
their loss by hand; and the process left as it was."""
import json
import re
import signal
import sys
import time

import pytest
import torch
from torch.optim.optimizer import _global_optimizer_pre_hooks

import capture
import doctor
from conftest import ROOT

SCRIPTS = ROOT / "tests" / "corpus" / "scripts"
# (script, its arguments, the check its planted bug must fail)
CORPUS = {
    "nanogpt_style": ([], "causal_dependency"),  # the model returns (logits, loss)
    "loop_ce_module": ([], "init_loss"),  # nn.CrossEntropyLoss in the loop; a warn: 20 Adam steps undo the wide head
    "loop_f_ce_lm": ([], "causal_dependency"),  # F.cross_entropy on flattened logits
    "hf_bert_causal": ([], "causal_dependency"),  # a transformers model given labels
    "train_args_ckpt": (["--batch_size", "128", "--out_dir", "{tmp}"], "overfit_one_batch"),  # argparse, checkpoints
    "amp_classifier": ([], "batch_independence"),  # autocast bfloat16 on CPU
}
WARNED = {"loop_ce_module": "warn"}  # 1.5x chance at init, and 20 steps of Adam take the loss to 0.01: no harm shown
TIMES = {}  # script -> seconds from script to verdict (capture + every check), printed at the end of the module


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{script name: (case, {check id: CheckResult}, files the script left in its folders)}, each script run once."""
    cache = {}

    def run(name):
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            args = [arg.replace("{tmp}", str(tmp)) for arg in CORPUS[name.removesuffix("_healthy")][0]]
            with pytest.MonkeyPatch.context() as patch:
                patch.chdir(tmp)  # the scripts' own output folders land here
                start = time.perf_counter()
                case = doctor.validate_case(capture.capture_script(str(SCRIPTS / f"{name}.py"), args))
                results = {r.id: r for r in doctor.run_checks(case)}
                TIMES[name] = time.perf_counter() - start
            cache[name] = (case, results, sorted(p.name for p in tmp.rglob("*") if p.is_file()))
        return cache[name]
    yield run
    print("\nseconds from script to verdict (in-process, torch already imported): "
          + ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(TIMES.items())))


@pytest.mark.parametrize("name", CORPUS)
def test_planted_bug_is_flagged(name, verdicts):
    _, results, _ = verdicts(name)
    check_id = CORPUS[name][1]
    assert results[check_id].status == WARNED.get(name, "fail"), results[check_id]


@pytest.mark.parametrize("name", [f"{name}_healthy" for name in CORPUS])
def test_healthy_twin_gets_no_fail(name, verdicts):
    _, results, _ = verdicts(name)
    fails = {check_id for check_id, r in results.items() if r.status == "fail"}
    assert not fails, {check_id: results[check_id].summary for check_id in fails}
    assert results[CORPUS[name.removesuffix("_healthy")][1]].status in ("pass", "warn")


def test_model_that_returns_its_loss(verdicts):
    case, _, files = verdicts("nanogpt_style_healthy")
    model = case["model"]
    assert type(model).__name__ == "GPT", "torch.compile is skipped during the capture: the module itself"
    assert all(p.grad is None for p in model.parameters())
    inputs, targets = case["batch"]
    assert isinstance(inputs, tuple) and len(inputs) == 2 and torch.equal(inputs[1], targets)
    logits, loss = model(*inputs)
    assert case["loss_fn"]((logits, loss), targets) is loss
    assert case["task"] == {"kind": "causal_lm", "ignore_index": -1, "vocab_size": 32, "target_inputs": [1]}, "model(x, y): y is the target"
    assert "at its first optimizer step" in case["captured"] and "out-nanogpt-style/ckpt.pt" in case["captured"]
    assert files == [], "torch.save wrote nothing"


def test_optimizer_rebuilt_with_its_groups_and_built_lr(verdicts):
    case, _, _ = verdicts("nanogpt_style_healthy")
    params = list(case["model"].parameters())
    optimizer = case["optimizer"](params)
    assert type(optimizer) is torch.optim.AdamW
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    assert [g["betas"] for g in optimizer.param_groups] == [(0.9, 0.95)] * 2
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 1e-3], "the lr as built, not the warmup's first value"
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(params)


def test_loss_in_the_loop_is_replayed_on_flattened_logits(verdicts):
    case, _, _ = verdicts("loop_f_ce_lm_healthy")
    ids, targets = case["batch"]
    assert ids.shape == targets.shape == (8, 16), "targets viewed back batch-first"
    assert torch.equal(targets[:, :-1], ids[:, 1:])
    logits = case["model"](ids)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1))
    assert torch.allclose(case["loss_fn"](logits, targets), expected)
    assert case["task"]["kind"] == "causal_lm"


def test_hugging_face_labels_stay_inside_the_inputs(verdicts):
    case, results, _ = verdicts("hf_bert_causal_healthy")
    inputs, targets = case["batch"]
    assert set(inputs) == {"input_ids", "attention_mask", "labels"} and torch.equal(inputs["labels"], targets)
    output = case["model"](**inputs)
    assert case["loss_fn"](output, targets) is output["loss"]
    assert case["task"]["kind"] == "causal_lm"


def test_loss_module_under_autocast(verdicts):
    case, _, _ = verdicts("amp_classifier_healthy")
    assert isinstance(case["batch"][0], torch.Tensor) and case["batch"][0].dtype == torch.float32
    assert "autocast bfloat16" in case["captured"] and "CrossEntropyLoss(output, targets)" in case["captured"]
    assert case["task"] == {"kind": "classification", "ignore_index": -100}


def test_script_arguments_reach_the_script_and_no_checkpoint_is_written(verdicts):
    case, _, files = verdicts("train_args_ckpt")
    assert case["batch"][0].shape[0] == 128, "--batch_size 128 reached argparse"
    assert [g["lr"] for g in case["optimizer"](case["model"].parameters()).param_groups] == [0.0]
    assert files == [], files
    assert "init.pt" in case["captured"]


def test_cli_passes_what_follows_the_double_dash_to_the_script(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--script", str(SCRIPTS / "train_args_ckpt.py"), "--json", "--", "--batch_size", "128", "--out_dir", str(tmp_path)]
    assert doctor.main(argv) == 1
    statuses = {c["id"]: c["status"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert statuses["overfit_one_batch"] == "fail"
    assert list(tmp_path.iterdir()) == []


def test_capture_case_in_code_stops_before_the_weights_change():
    model = torch.nn.Linear(6, 3)
    before = [p.detach().clone() for p in model.parameters()]

    def train(model, steps):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(steps):
            x = torch.randn(16, 6)
            loss = torch.nn.functional.cross_entropy(model(x), x[:, :3].argmax(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return "finished"

    case = capture.capture_case(train, model, steps=100)
    assert case["model"] is model and case["batch"][0].shape == (16, 6)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with capture.capturing("the loop") as captured:
        train(model, 100)
    assert captured.case["model"] is model and "the loop at its first optimizer step" in captured.case["captured"]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def write(tmp_path, source):
    path = tmp_path / "train.py"
    path.write_text(source)
    return path


LOOP = """
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
"""


def state():
    """What a capture patches: it must all be as it was afterwards."""
    return (torch.nn.Module.__call__, torch.nn.Module.compile, torch.optim.Optimizer.__init__, torch.autograd.backward,
            torch.save, torch.compile, torch.nn.functional.cross_entropy, torch.nn.functional.mse_loss,
            dict(_global_optimizer_pre_hooks), signal.getsignal(signal.SIGALRM),
            signal.getitimer(signal.ITIMER_REAL), list(sys.argv), list(sys.path))


@pytest.mark.hostile
@pytest.mark.parametrize("source, message", [
    (LOOP + "raise ValueError('no data in ./data')\n", "train.py raised ValueError at train.py:6 before its first optimizer step"),
    (LOOP + "import sys\nsys.exit(3)\n", "train.py exited (sys.exit(3)) before its first optimizer step: if it needs "
     "arguments, give them after --"),
    (LOOP + "model(x)\n", "train.py finished without an optimizer step"),
    (LOOP + "loss = (model(x)[:, 0] - y).pow(2).mean()\nloss.backward()\nopt.step()\n", "a loss written by hand"),
    (LOOP + "loss = torch.nn.functional.cross_entropy(model(x)[1:], y[1:])\nloss.backward()\nopt.step()\n",
     "the input of cross_entropy is not the model's output as is, flattened, shifted by one position or log_softmax'ed"),
])
def test_what_cannot_be_captured_is_one_line_and_exit_2(tmp_path, capsys, source, message):
    before = state()
    assert doctor.main(["--script", str(write(tmp_path, source))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    assert message in err[0], err[0]
    assert state() == before


def test_next_token_shift_in_the_loop_is_replayed(tmp_path):
    """The Hugging Face idiom written in a custom loop: shift_logits = logits[..., :-1, :], shift_labels = ids[..., 1:]."""
    path = write(tmp_path, LOOP + "emb, head = torch.nn.Embedding(20, 8), torch.nn.Linear(8, 20)\n"
                 "model = torch.nn.Sequential(emb, head)\nopt = torch.optim.Adam(model.parameters())\n"
                 "ids = torch.randint(0, 20, (4, 6))\nlogits = model(ids)\n"
                 "shift_logits, shift_labels = logits[..., :-1, :].contiguous(), ids[..., 1:].contiguous()\n"
                 "loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, 20), shift_labels.view(-1))\n"
                 "loss.backward()\nopt.step()\n")
    case = capture.capture_script(str(path))
    ids, targets = case["batch"]
    assert targets.shape == ids.shape and torch.equal(targets[:, :-1], ids[:, 1:]) and bool((targets[:, -1] == -100).all())
    logits = case["model"](ids)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 20), ids[:, 1:].reshape(-1))
    assert torch.allclose(case["loss_fn"](logits, targets), expected)
    assert case["task"] == {"kind": "causal_lm", "vocab_size": 20, "ignore_index": -100}


def test_a_ddp_wrapped_model_is_unwrapped(tmp_path):
    """A DistributedDataParallel script (one gloo rank here): the module inside DDP is the model the checks get."""
    path = write(tmp_path, "import socket\nimport torch\nimport torch.distributed as dist\n"
                 "with socket.socket() as s:\n    s.bind(('127.0.0.1', 0))\n    port = s.getsockname()[1]\n"
                 "dist.init_process_group('gloo', rank=0, world_size=1, init_method=f'tcp://127.0.0.1:{port}')\n"
                 "net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))\n"
                 "model = torch.nn.parallel.DistributedDataParallel(net)\n"
                 "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(16, 4)\n"
                 "loss = torch.nn.functional.cross_entropy(model(x), x[:, :2].argmax(1))\nloss.backward()\nopt.step()\n"
                 "dist.destroy_process_group()\n")
    try:
        case = capture.capture_script(str(path))
    finally:
        if torch.distributed.is_initialized():  # the script stopped before its own destroy_process_group()
            torch.distributed.destroy_process_group()
    assert type(case["model"]) is torch.nn.Sequential
    assert "model Sequential(float32[16, 4])" in case["captured"]


def test_closure_optimizers_run_their_closure_before_the_capture(tmp_path):
    """LBFGS and Lightning's automatic optimisation run forward and backward inside optimizer.step(closure)."""
    path = write(tmp_path, LOOP + "opt = torch.optim.LBFGS(model.parameters(), lr=0.5)\n"
                 "def closure():\n    opt.zero_grad()\n    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
                 "    loss.backward()\n    return loss\nfor _ in range(5):\n    opt.step(closure)\n")
    case = capture.capture_script(str(path))
    assert type(case["optimizer"](case["model"].parameters())) is torch.optim.LBFGS
    assert "loss F.cross_entropy(output, targets)" in case["captured"]


@pytest.mark.hostile
def test_a_script_that_never_steps_is_stopped_by_the_time_limit(tmp_path):
    before = state()
    started = time.perf_counter()
    with pytest.raises(capture.CaptureError, match="did not reach an optimizer step within its 0.5 s time limit"):
        capture.capture_script(str(write(tmp_path, LOOP + "while True:\n    model(x)\n")), time_limit=0.5)
    assert time.perf_counter() - started < 10
    assert state() == before


@pytest.mark.hostile
def test_missing_script_and_a_clean_state_after_success(tmp_path, capsys):
    assert doctor.main(["--script", str(tmp_path / "nope.py")]) == 2
    assert capsys.readouterr().err.strip() == f"error: script not found (or not a file): {tmp_path / 'nope.py'}"
    before = state()
    path = write(tmp_path, LOOP + "import sys\nassert sys.argv[1:] == ['--lr', '3']\n"
                 "loss = torch.nn.functional.cross_entropy(model(x), y)\nloss.backward()\nopt.step()\n")
    case = capture.capture_script(str(path), ["--lr", "3"])
    assert state() == before
    assert case["captured"].startswith("train.py at its first optimizer step: model Linear(float32[8, 4])")


TIME_MAJOR_LM = """
import torch
torch.manual_seed(0)
V, T, B = 40, 10, 6


class RNNModel(torch.nn.Module):  # fed (T, B) token ids, as nn.LSTM without batch_first is
    def __init__(self, bidirectional):
        super().__init__()
        self.encoder = torch.nn.Embedding(V, 16)
        self.rnn = torch.nn.LSTM(16, 16, bidirectional=bidirectional)
        self.decoder = torch.nn.Linear(32 if bidirectional else 16, V)

    def forward(self, x):  # (T, B) -> (T, B, V)
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


data = torch.randint(0, V, (396,)).view(B, -1).t().contiguous()  # (N, B): time runs down dim 0
model = RNNModel(bidirectional=BIDIRECTIONAL)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
for i in range(0, data.size(0) - 1 - T, T):
    x, y = data[i:i + T], data[i + 1:i + 1 + T].reshape(-1)  # the targets flattened, as the loss line wants them
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, V), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("bidirectional", [False, True])
def test_a_time_major_lm_with_flattened_targets_is_read_as_one(bidirectional, tmp_path, capfd, monkeypatch):
    """Targets equal to the inputs shifted along dim 0: a time-major causal LM. The unidirectional LSTM passes the
    batch and causal checks on dim 1; its bidirectional twin reads the future and fails causal_dependency."""
    script = tmp_path / "train.py"
    script.write_text(TIME_MAJOR_LM.replace("BIDIRECTIONAL", str(bidirectional)))
    monkeypatch.setattr(doctor, "CHECKS", [("data_sanity", "data_sanity"), ("batch_independence", "batch_independence"),
                                           ("causal_dependency", "causal_dependency")])
    exit_code = doctor.main(["--script", str(script), "--json"])
    checks = {c["id"]: c["status"] for c in json.loads(capfd.readouterr().out)["checks"]}
    assert checks["data_sanity"] == "pass" and checks["batch_independence"] == "pass"
    assert checks["causal_dependency"] == ("fail" if bidirectional else "pass")
    assert exit_code == (1 if bidirectional else 0)


def test_task_hints_from_the_command_line_override_the_capture(tmp_path, capfd, monkeypatch):
    """--task batch_dim=0 time_dim=1 on the time-major script: batch_independence then sees rows that leak in time."""
    script = tmp_path / "train.py"
    script.write_text(TIME_MAJOR_LM.replace("BIDIRECTIONAL", "False"))
    monkeypatch.setattr(doctor, "CHECKS", [("batch_independence", "batch_independence")])
    doctor.main(["--script", str(script), "--json", "--task", "batch_dim=0", "time_dim=1"])
    assert json.loads(capfd.readouterr().out)["checks"][0]["status"] == "warn"


@pytest.mark.parametrize("pairs", [["batch_dim=2"], ["foo=1"], ["kind=causal"], ["num_classes=0"], ["clip_grad_norm=inf"],
                                   ["vocab_size"]])
def test_a_bad_task_hint_is_one_line_and_exit_2(pairs, capfd):
    with pytest.raises(SystemExit) as stopped:
        doctor.main(["--task", *pairs])
    assert stopped.value.code == 2
    assert "--task" in capfd.readouterr().err


def _vae_loop(loss_form):
    """One step of a VAE-like loop whose loss is a BCE call plus, or times, something else."""
    torch.manual_seed(0)

    class VAE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = torch.nn.Linear(8, 4), torch.nn.Linear(2, 8)

        def forward(self, x):
            mu, logvar = self.enc(x).chunk(2, dim=1)
            return torch.sigmoid(self.dec(mu + torch.randn_like(mu) * (0.5 * logvar).exp())), mu, logvar

    model = VAE()
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.rand(16, 8)
    recon, mu, logvar = model(x)
    bce = torch.nn.functional.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    loss = {"bce + kld": bce + kld, "bce / 4": bce / 4, "bce + kld + l2": bce + kld + 1e-4 * model.enc.weight.pow(2).sum(),
            "bce": bce}[loss_form]
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize("loss_form, terms", [("bce + kld", 1), ("bce + kld + l2", 2), ("bce / 4", 0), ("bce", 0)])
def test_a_loss_term_written_by_hand_is_named_not_silently_dropped(loss_form, terms):
    captured = capture.capture_case(_vae_loop, loss_form)["captured"]
    named = re.search(r"adds (\d+) term\(s\) besides binary_cross_entropy", captured)
    assert (int(named.group(1)) if named else 0) == terms, captured


def _own_loss_loop(ignore_index):
    """makemore's and nanoGPT's shape: the model computes its loss with F.cross_entropy(..., ignore_index) inside."""
    torch.manual_seed(0)

    class CharModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(27, 8), torch.nn.Linear(8, 27)

        def forward(self, idx, targets=None):
            logits = self.head(self.embed(idx))
            if targets is None:
                return logits, None
            return logits, torch.nn.functional.cross_entropy(logits.view(-1, 27), targets.view(-1), ignore_index=ignore_index)

    model = CharModel()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, 27, (4, 6))
    y = torch.cat([x[:, 1:], torch.full((4, 1), ignore_index)], dim=1)  # the end of each word: masked
    _, loss = model(x, y)
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize("ignore_index", [-1, -100])
def test_the_ignore_index_of_a_loss_made_inside_the_model_is_kept(ignore_index):
    """Without it, makemore's -1 targets read as labels outside the classes (a false labels fail) and no causal_lm."""
    case = capture.capture_case(_own_loss_loop, ignore_index)
    assert case["task"] == {"kind": "causal_lm", "ignore_index": ignore_index, "vocab_size": 27, "target_inputs": [1]}
    import labels
    assert labels.check_labels(doctor.validate_case(case)).status == "pass"


@pytest.mark.parametrize("loss", ["torch.nn.functional.mse_loss(x, model(x))", "torch.nn.L1Loss()(x, model(x))",
                                  "torch.nn.functional.mse_loss(model(x), x)"])  # the usual order: left as it is
def test_the_output_in_the_target_slot_of_a_symmetric_loss_is_captured(loss, tmp_path):
    """Lightning's autoencoder example writes F.mse_loss(x, self(x)): the output second, the same loss either way."""
    path = write(tmp_path, LOOP + "model = torch.nn.Sequential(torch.nn.Linear(6, 2), torch.nn.Linear(2, 6))\n"
                 "opt = torch.optim.Adam(model.parameters())\nx = torch.randn(8, 6)\n"
                 f"loss = {loss}\nloss.backward()\nopt.step()\n")
    case = capture.capture_script(str(path))
    inputs, targets = case["batch"]
    assert torch.equal(inputs, targets) and case["task"]["kind"] == "regression", case["captured"]
    assert torch.allclose(case["loss_fn"](case["model"](inputs), targets), eval(loss, {"torch": torch, "model": case["model"],
                                                                                      "x": inputs}))


def test_targets_refilled_in_place_after_the_backward_are_captured_as_the_loss_saw_them(tmp_path):
    """pytorch/examples' DCGAN: label = full(real); errD_real.backward(); label.fill_(fake); errD_fake.backward(); step.

    The checks must judge the loss that was traced (real images, label 1), not the tensor as the step finds it (all 0).
    """
    path = write(tmp_path, "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Sigmoid())\n"
                 "opt = torch.optim.Adam(model.parameters())\ncriterion = torch.nn.BCELoss()\n"
                 "real, fake = torch.randn(8, 4), torch.randn(8, 4) + 3\nlabel = torch.full((8,), 1.0)\n"
                 "criterion(model(real).view(-1), label).backward()\nlabel.fill_(0.0)\n"
                 "criterion(model(fake).view(-1), label).backward()\nopt.step()\n")
    case = capture.capture_script(str(path))
    inputs, targets = case["batch"]
    assert torch.equal(targets.flatten(), torch.ones(8)), targets
    assert inputs.mean() < 1.5  # the real rows the traced loss read, not the fake ones (mean 3)


GRAPH_SCRIPT = '''
import torch
import torch.nn.functional as F


class TinyGAT(torch.nn.Module):
    """One attention layer over an adjacency matrix, as pytorch/examples' GAT: functional dropout, log_softmax out."""

    def __init__(self, features, classes):
        super().__init__()
        self.proj = torch.nn.Linear(features, 8)
        self.score = torch.nn.Linear(16, 1)
        self.out = torch.nn.Linear(8, classes)

    def forward(self, x, adj):
        h = self.proj(F.dropout(x, 0.6, training=self.training))
        n = h.shape[0]
        pair = torch.cat([h.unsqueeze(1).expand(n, n, -1), h.unsqueeze(0).expand(n, n, -1)], -1)
        e = torch.where(adj > 0, F.leaky_relu(self.score(pair).squeeze(-1)), torch.full((n, n), -9e16))
        h = F.elu(torch.softmax(F.dropout(e, 0.6, training=self.training), -1) @ h)
        return F.log_softmax(self.out(h), dim=1)


torch.manual_seed(0)
x = torch.randint(0, 2, (60, 16)).float()
adj = torch.eye(60) + (torch.rand(60, 60) < 0.05).float()
labels = torch.randint(0, 3, (60,))
train = torch.randperm(60)[:20]
model = TinyGAT(16, 3)
optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=5e-4)
criterion = torch.nn.NLLLoss()
for epoch in range(5):
    model.train()
    optimizer.zero_grad()
    loss = criterion(model(x, adj)[SELECT], labels[SELECT])
    loss.backward()
    optimizer.step()
'''


def graph_case(tmp_path, lr=0.005, select="train", dropout="training=self.training"):
    path = write(tmp_path, GRAPH_SCRIPT.replace("LR", str(lr)).replace("SELECT", select)
                 .replace("training=self.training", dropout))
    return capture.capture_script(str(path))


@pytest.mark.parametrize("select", ["train", "torch.isin(torch.arange(60), train)", "train.sort().values"])
def test_a_loss_on_selected_rows_is_replayed_on_every_row_with_the_others_ignored(select, tmp_path):
    """Node classification: criterion(output[idx_train], labels[idx_train]), by index list or boolean mask."""
    case = graph_case(tmp_path, select=select)
    inputs, targets = case["batch"]
    kept = targets != -100
    assert int(kept.sum()) == 20 and targets.shape == (60,), case["captured"]
    assert doctor.validate_case(case)["task"]["graph"] is True
    torch.manual_seed(0)  # the script's data, drawn again
    x, adj, labels = torch.randint(0, 2, (60, 16)).float(), torch.eye(60) + (torch.rand(60, 60) < 0.05).float(), \
        torch.randint(0, 3, (60,))
    assert torch.equal(targets[kept], labels[kept]) and torch.equal(inputs[0], x) and torch.equal(inputs[1], adj)
    model = case["model"].eval()
    with torch.no_grad():
        out = model(*inputs)
        assert torch.allclose(case["loss_fn"](out, targets), torch.nn.functional.nll_loss(out[kept], labels[kept]))


def test_a_flattened_boolean_mask_selects_tokens_as_token_classification_does(tmp_path):
    """The token-classification loss: logits.view(-1, V)[active], labels.view(-1)[active] with active = mask == 1."""
    path = write(tmp_path, "import torch\nmodel = torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Linear(8, 5))\n"
                 "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nids = torch.randint(0, 20, (4, 6))\n"
                 "labels = torch.randint(0, 5, (4, 6))\nmask = torch.ones(4, 6, dtype=torch.long)\nmask[:, 4:] = 0\n"
                 "active = mask.view(-1) == 1\nlogits = model(ids)\n"
                 "loss = torch.nn.CrossEntropyLoss()(logits.view(-1, 5)[active], labels.view(-1)[active])\n"
                 "loss.backward()\nopt.step()\n")
    case = capture.capture_script(str(path))
    inputs, targets = case["batch"]
    assert targets.shape == (4, 6) and bool((targets[:, 4:] == -100).all()) and bool((targets[:, :4] >= 0).all())
    assert "graph" not in doctor.validate_case(case)["task"]
    with torch.no_grad():
        out = case["model"](inputs)
        expected = torch.nn.functional.cross_entropy(out[:, :4].reshape(-1, 5), targets[:, :4].reshape(-1))
        assert torch.allclose(case["loss_fn"](out, targets), expected)


def test_a_graph_batch_is_cut_to_the_rows_it_memorises_and_their_neighbours_with_its_dropout_off(tmp_path):
    """The GAT look-alike (dropout 0.6 as F.dropout(training=self.training), 20 labelled nodes of 60): the sprint
    memorises 8 of the labelled nodes in the graph of them and their neighbours (the other labelled nodes there are
    ignored), renumbered, in eval mode but for batch statistics, which switches its dropout off."""
    import batch_independence
    import overfit_one_batch
    case = doctor.validate_case(graph_case(tmp_path))
    assert batch_independence.check_batch_independence(case).status == "skip"
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert result.status == "pass" and result.details["rows"] == overfit_one_batch.ROWS, result.summary
    subgraph = result.details["subgraph"]
    assert subgraph["read"] == overfit_one_batch.ROWS and overfit_one_batch.ROWS < subgraph["nodes"] < 60, subgraph
    assert result.details["train_noise_off"] and not result.details["samples_noise"], result.details


def test_a_graph_cut_keeps_the_first_rows_read_and_their_neighbours_renumbered():
    """An edge list (PyG's edge_index) and a dense adjacency cut alike; the rows the loss ignores keep their -100 and
    the read rows after the first `rows` get it: they stay as neighbours, not rows to memorise."""
    import overfit_one_batch

    class MeanOverEdges(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x, edges):
            adj = edges if edges.is_floating_point() else torch.zeros(x.shape[0], x.shape[0]).index_put(
                (edges[0], edges[1]), torch.ones(edges.shape[1]))
            return torch.log_softmax(self.lin(x + adj @ x), -1)

    x = torch.randn(8, 3)
    edge_list = torch.tensor([[1, 2, 5, 6, 7], [5, 3, 6, 7, 0]])  # 1-5, 2-3, 5-6, 6-7, 7-0
    dense = torch.zeros(8, 8).index_put((edge_list[0], edge_list[1]), torch.ones(5))
    targets = torch.tensor([-100, 1, 0, 1, -100, -100, 0, -100])  # read: nodes 1, 2, 3, 6
    case = {"model": MeanOverEdges(), "loss_fn": lambda out, y: torch.nn.functional.nll_loss(out, y)}
    for edges in (edge_list, dense):
        inputs, cut_targets, subgraph = overfit_one_batch._subgraph(case, case["model"], (x, edges), targets, 8, rows=2)
        assert subgraph == {"nodes": 4, "of": 8, "read": 2, "hops": 1}, subgraph  # 1, 2 and their neighbours 5, 3
        assert torch.equal(inputs[0], x[[1, 2, 3, 5]]), inputs[0]
        assert cut_targets.tolist() == [1, 0, -100, -100], cut_targets  # nodes 1, 2, 3, 5: node 3 is not memorised
        kept = inputs[1] if edges is edge_list else inputs[1].nonzero().t()
        assert sorted(map(tuple, kept.t().tolist())) == [(0, 3), (1, 2)], kept  # 1-5 and 2-3, renumbered


def test_a_noisy_flat_fit_it_can_do_is_a_warn(tmp_path):
    """Dropout the check cannot switch off (F.dropout(x, 0.6, training=True)) on random labels: flat within its noise,
    yet the model memorises its own first predictions."""
    import overfit_one_batch
    case = doctor.validate_case(graph_case(tmp_path, dropout="training=True"))
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert result.status == "warn" and result.details["failure"] == "targets_out_of_reach", result.summary
    assert result.details["samples_noise"] and not result.details["train_noise_off"], result.details


@pytest.mark.parametrize("inputs, graph", [
    ((torch.randn(6, 3), torch.eye(6)), True),  # a dense adjacency
    ((torch.randn(6, 3), torch.eye(6).to_sparse()), True),  # a sparse one
    ({"x": torch.randn(6, 3), "edge_index": torch.tensor([[0, 1, 5], [1, 2, 0]])}, True),  # PyG's edge list
    ((torch.randn(6, 3), torch.tensor([[0, 1, 6], [1, 2, 0]])), False),  # node 6 of 6: not an edge list of these rows
    ((torch.randint(0, 5, (2, 7)), torch.randn(2, 7)), False),  # two rows of tokens and their weights
    ((torch.randn(6, 3), torch.randn(6, 6, 2)), False),
    (torch.randn(6, 6), False),  # one square input alone: a batch of 6 rows
])
def test_one_graph_is_an_adjacency_or_an_edge_list_of_the_feature_rows(inputs, graph):
    import ml_debug_contract
    assert ml_debug_contract.one_graph(inputs) is graph


def test_a_task_hint_says_a_batch_with_an_adjacency_is_not_one_graph(tmp_path):
    import batch_independence
    case = graph_case(tmp_path)
    case["task"]["graph"] = False  # --task graph=false
    case = doctor.validate_case(case)
    assert case["task"]["graph"] is False
    assert batch_independence.check_batch_independence(case).status != "skip"


@pytest.mark.parametrize("gym", [True, False])
def test_a_hand_written_loss_of_a_script_that_loaded_gym_names_rl_probes(gym, tmp_path, monkeypatch):
    """REINFORCE as pytorch/examples writes it: -log_prob * return summed by hand, no loss call to replay."""
    monkeypatch.delitem(sys.modules, "gym", raising=False)
    if gym:
        (tmp_path / "gym.py").write_text("")  # the script's own folder is on its path, as an installed gym would be
    path = write(tmp_path, ("import gym\n" if gym else "") + "import torch\npolicy = torch.nn.Linear(4, 2)\n"
                 "opt = torch.optim.Adam(policy.parameters())\n"
                 "dist = torch.distributions.Categorical(logits=policy(torch.randn(5, 4)))\n"
                 "loss = (-dist.log_prob(dist.sample()) * torch.randn(5)).sum()\nloss.backward()\nopt.step()\n")
    with pytest.raises(capture.CaptureError, match="cannot be replayed") as caught:
        capture.capture_script(str(path))
    assert ("rl_probes.py" in str(caught.value)) == gym, caught.value
    monkeypatch.delitem(sys.modules, "gym", raising=False)


OWN_LOSS_WITH_A_METRIC = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(16, 16), nn.Linear(16, 16)

    def forward(self, ids, labels):
        logits = self.head(self.embed(ids))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, 16), labels[:, 1:].reshape(-1))
        return {"loss": loss, "accuracy": (logits.argmax(-1) == labels).float().mean(), "logits": logits}


torch.manual_seed(0)
model = LM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 16, (4, 8))
for _ in range(2):
    out = model(ids, labels=ids)
    optimizer.zero_grad()
    out["loss"].backward()
    optimizer.step()
"""


def test_a_model_that_returns_its_loss_and_a_metric_is_read_by_its_logits(tmp_path):
    """The prediction is the first tensor of the output with a class dimension: not the loss, nor a 0-d metric
    returned before the logits; from it the task is a causal LM of the logits' vocabulary."""
    script = tmp_path / "train.py"
    script.write_text(OWN_LOSS_WITH_A_METRIC)
    case = capture.capture_script(str(script), [])
    assert (case["task"]["kind"], case["task"]["vocab_size"]) == ("causal_lm", 16)
