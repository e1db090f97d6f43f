"""training_loop on the loops people write, run as `doctor --script` runs them (the supervised child).

Each loop is our own look-alike of a shape seen in real scripts: the standard order, clipping, gradient accumulation,
a GAN's two optimizers, LBFGS's closure, a model left in eval mode after from_pretrained or a validation pass, and
frozen BatchNorm inside a model that trains. The verdict (status, and "kept" / "cleared" / unknown) is asserted.
"""
import json
import sys

import pytest

import doctor
import ml_debug_contract
import training_loop

pytestmark = pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="--script's second step runs in the child")

HEAD = """import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch():
    x = torch.randn(32, 8)
    return x, x[:, :3].argmax(1)


def loss_on(x, y):
    return torch.nn.functional.cross_entropy(model(x), y)
"""
LOOPS = {  # name -> (loop, status, what capture saw of .grad)
    "zero-grad-first": ("for _ in range(4):\n    opt.zero_grad()\n    loss_on(*batch()).backward()\n    opt.step()\n",
                        "pass", "cleared"),
    "zero-grad-after-step": ("for _ in range(4):\n    loss_on(*batch()).backward()\n    opt.step()\n    opt.zero_grad()\n",
                             "pass", "cleared"),
    "model-zero-grad-and-clipping": ("for _ in range(4):\n    model.zero_grad(set_to_none=True)\n"
                                     "    loss_on(*batch()).backward()\n"
                                     "    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)\n    opt.step()\n",
                                     "pass", "cleared"),
    "accumulation": ("for _ in range(3):\n    for micro in range(4):\n        (loss_on(*batch()) / 4).backward()\n"
                     "    opt.step()\n    opt.zero_grad()\n", "pass", "cleared"),
    "grad-set-to-none-by-hand": ("for _ in range(4):\n    loss_on(*batch()).backward()\n    opt.step()\n"
                                 "    for p in model.parameters():\n        p.grad = None\n", "pass", "cleared"),
    "never-cleared": ("for _ in range(4):\n    loss_on(*batch()).backward()\n    opt.step()\n", "fail", "kept"),
    "never-cleared-with-clipping": ("for _ in range(4):\n    loss_on(*batch()).backward()\n"
                                    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)\n    opt.step()\n",
                                    "fail", "kept"),
    "one-step-only": ("opt.zero_grad()\nloss_on(*batch()).backward()\nopt.step()\n", "pass", None),
    "eval-mode-left-on": ("model.eval()\nfor _ in range(4):\n    opt.zero_grad()\n    loss_on(*batch()).backward()\n"
                          "    opt.step()\n", "fail", "cleared"),
    "train-after-validation": ("model.eval()\nwith torch.no_grad():\n    loss_on(*batch())\nmodel.train()\n"
                               "for _ in range(4):\n    opt.zero_grad()\n    loss_on(*batch()).backward()\n    opt.step()\n",
                               "pass", "cleared"),
}
OTHER_MODELS = {
    "frozen-batchnorm": ("""import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
model[1].eval()  # frozen statistics, on purpose
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(32, 8)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), x[:, :3].argmax(1)).backward()
    opt.step()
""", "pass", "cleared"),
    "gan-two-optimizers": ("""import torch
torch.manual_seed(0)
G, D = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
optG, optD = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
bce = torch.nn.BCEWithLogitsLoss()
for _ in range(3):
    real, fake = torch.randn(16, 8), G(torch.randn(16, 4))
    D.zero_grad()
    bce(D(real), torch.ones(16, 1)).backward()
    optD.step()
    G.zero_grad()
    bce(D(fake), torch.ones(16, 1)).backward()  # also reaches D's .grad: D clears it before its own next step
    optG.step()
""", "pass", "cleared"),
    "lbfgs-closure": ("""import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.LBFGS(model.parameters())
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(3):
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
""", "pass", None),
}


def run(tmp_path, monkeypatch, capfd, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    monkeypatch.setattr(doctor, "CHECKS", [("training_loop", "training_loop")])
    doctor.main(["--script", str(script), "--json"])
    return json.loads(capfd.readouterr().out)["checks"][0]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_loop_shapes_people_write(name, tmp_path, monkeypatch, capfd):
    loop, status, grads = LOOPS[name]
    check = run(tmp_path, monkeypatch, capfd, HEAD + loop)
    assert (check["status"], check["details"]["loop"]["grads"]) == (status, grads), check["summary"]


@pytest.mark.parametrize("name", sorted(OTHER_MODELS))
def test_frozen_batchnorm_two_optimizers_and_a_closure(name, tmp_path, monkeypatch, capfd):
    source, status, grads = OTHER_MODELS[name]
    check = run(tmp_path, monkeypatch, capfd, source)
    assert (check["status"], check["details"]["loop"]["grads"]) == (status, grads), check["summary"]


def test_eval_mode_fails_only_when_the_output_depends_on_the_mode(tmp_path, monkeypatch, capfd):
    """A model with no dropout or batch statistics left in eval mode: the mode changes nothing, so no fail."""
    source = HEAD.replace("torch.nn.Dropout(0.2)", "torch.nn.Identity()") + LOOPS["eval-mode-left-on"][0]
    check = run(tmp_path, monkeypatch, capfd, source)
    assert check["status"] == "pass", check["summary"]


def test_a_case_file_has_no_loop_to_look_at():
    case = training_loop.make_demo_case(broken=True)
    del case["loop"]
    assert training_loop.check_training_loop(case).status == "skip"


def check_weights(case):
    """A check for the test below: the case's first weight matrix against the one the script kept before its first step."""
    import builtins
    import torch
    same = torch.equal(case["model"][0].weight, builtins.weight_before_the_first_step)
    return ml_debug_contract.CheckResult("weights", "pass" if same else "fail", "")


def test_the_weights_after_the_capture_are_those_of_the_first_step(tmp_path, monkeypatch, capfd):
    """The first step ran (to see the second): the case's model is put back to the weights the first step began from."""
    keep = "import builtins\nbuiltins.weight_before_the_first_step = model[0].weight.detach().clone()\n"
    script = tmp_path / "train.py"
    script.write_text(HEAD + keep + LOOPS["zero-grad-first"][0])
    monkeypatch.setattr(doctor, "CHECKS", [("weights", "test_training_loop")])
    doctor.main(["--script", str(script), "--json"])
    assert json.loads(capfd.readouterr().out)["checks"][0]["status"] == "pass"


def test_the_demo_without_capture_beside_it_is_a_case_error(monkeypatch):
    """training_loop.py copied alone: the demo's capture is missing, which is said, not a NameError later."""
    monkeypatch.setitem(sys.modules, "capture", None)  # `import capture` now raises ModuleNotFoundError
    with pytest.raises(ml_debug_contract.CaseError, match="copy capture.py beside training_loop.py"):
        training_loop.make_demo_case()
