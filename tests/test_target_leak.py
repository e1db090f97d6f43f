"""target_leak on our look-alikes of the shapes that leak, and of those that only look as if they might.

The lesson came from Lightning's basic transformer example: the decoder is given the target tokens under a causal
mask, whose diagonal lets position t see target t (on fresh random tokens its loss fell to 1.1 against ln V = 3.9).
Each script below runs as `doctor --script` runs it; the verdict (status) is asserted.
"""
import json

import pytest
import torch

import doctor
import ml_debug_contract
import target_leak

TRANSFORMER = """
import torch
torch.manual_seed(0)
V, T, B = 20, 8, 4


class Seq2Seq(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V + 1, 16)  # V: the start token
        self.transformer = torch.nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(16, V)

    def forward(self, src, tgt):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.head(self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask))


model = Seq2Seq()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    src = torch.randint(0, V, (B, T))
    target = src.flip(1)
    DECODER_INPUT
    out = model(src, decoder_input)
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, V), target.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
FED_THE_TARGETS = "decoder_input = target"
SHIFTED_RIGHT = "decoder_input = torch.cat([torch.full((B, 1), V), target[:, :-1]], dim=1)"

OWN_LOSS = """
import torch
torch.manual_seed(0)
V = 20


class TinyLM(torch.nn.Module):  # nanoGPT's shape: model(x, y) returns (logits, loss)
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(V, 16), torch.nn.Linear(16, V)

    def forward(self, idx, targets=None):
        logits = self.head(self.embed(idx))
        loss = None if targets is None else torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))
        return logits, loss


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    data = torch.randint(0, V, (4, 9))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    logits, loss = model(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

LABEL_AS_FEATURE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(9, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(32, 6)
    y = x[:, :3].argmax(1)
    features = torch.cat([x, torch.nn.functional.one_hot(y, 3).float()], dim=1)  # FEATURES
    loss = torch.nn.functional.cross_entropy(model(features), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def verdict(tmp_path, monkeypatch, capfd, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    monkeypatch.setattr(doctor, "CHECKS", [("target_leak", "target_leak")])
    doctor.main(["--script", str(script), "--json"])
    return json.loads(capfd.readouterr().out)["checks"][0]["status"]


FLATTENED_INSIDE = ("        return self.head(self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask))",
                    "        return self.head(self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask)).view(-1, V)")


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="--script runs in the supervised child")
@pytest.mark.parametrize("flattened", [False, True], ids=["bt-v", "flattened-inside"])
@pytest.mark.parametrize("decoder_input, status", [(FED_THE_TARGETS, "fail"), (SHIFTED_RIGHT, "pass")])
def test_a_decoder_fed_its_targets_under_a_causal_mask_reads_them(decoder_input, status, flattened, tmp_path, monkeypatch,
                                                                   capfd):
    """flattened: the Lightning demo's model returns output.view(-1, V) itself, so the loss's targets are B*T long."""
    source = TRANSFORMER.replace("DECODER_INPUT", decoder_input)
    assert verdict(tmp_path, monkeypatch, capfd, source.replace(*FLATTENED_INSIDE) if flattened else source) == status


@pytest.mark.skipif(not ml_debug_contract.SUPERVISED, reason="--script runs in the supervised child")
def test_a_model_that_returns_its_own_loss_is_not_judged(tmp_path, monkeypatch, capfd):
    """nanoGPT's model(x, y): y is an input only for the loss inside; which position is scored is the model's business."""
    assert verdict(tmp_path, monkeypatch, capfd, OWN_LOSS) == "skip"


def test_a_label_fed_in_as_a_feature_is_a_leak_but_the_features_alone_are_not():
    """A class label among the inputs (1-D targets): changing it moves the row's output."""
    torch.manual_seed(0)
    x = torch.randn(32, 6)
    y = x[:, :3].argmax(1)

    class WithLabel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(9, 3)

        def forward(self, x, label):
            return self.net(torch.cat([x, torch.nn.functional.one_hot(label, 3).float()], dim=1))

    leaky = {"model": WithLabel(), "batch": ((x, y), y), "loss_fn": torch.nn.functional.cross_entropy}
    assert target_leak.check_target_leak(leaky).status == "fail"

    class WithLabelColumn(WithLabel):  # the label as a (B, 1) column, as a table's last column often is
        def forward(self, x, label):
            return super().forward(x, label[:, 0])

    column = {"model": WithLabelColumn(), "batch": ((x, y[:, None]), y), "loss_fn": torch.nn.functional.cross_entropy}
    assert target_leak.check_target_leak(column).status == "fail"
    plain = {"model": torch.nn.Linear(6, 3), "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy}
    assert target_leak.check_target_leak(plain).status == "skip"


def test_a_causal_lms_own_tokens_are_left_to_causal_dependency():
    """Targets = the inputs one step ahead in a causal_lm: the shift-1 carrier is the sequence itself: skip, not a twin fail."""
    torch.manual_seed(0)
    data = torch.randint(0, 10, (4, 9))
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.reshape(-1, 10), targets.reshape(-1))

    case = {"model": model, "batch": (data[:, :-1], data[:, 1:]), "loss_fn": loss_fn, "task": {"kind": "causal_lm"}}
    assert target_leak.check_target_leak(case).status == "skip"
    case["task"] = {"kind": "other"}  # not declared causal: the shifted copy is this check's to test, and it passes
    assert target_leak.check_target_leak(case).status == "pass"


def test_a_copy_of_the_targets_with_a_tenth_of_its_positions_masked_still_carries_them():
    """90% agreement is the boundary (CARRIES): a decoder input that is the targets with every tenth position replaced
    by a mask token still leaks the other nine, and fails."""
    torch.manual_seed(0)
    src = torch.randint(0, 12, (8, 10))
    targets = src.flip(1)
    decoder_input = targets.clone()
    decoder_input[:, 0] = 12  # the mask token (the decoder's extra id) at one position in ten: 90% agreement exactly
    model = target_leak.TinySeq2Seq(12)

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.reshape(-1, 12), targets.reshape(-1))

    case = {"model": model, "batch": ((src, decoder_input), targets), "loss_fn": loss_fn, "task": {"kind": "seq2seq"}}
    result = target_leak.check_target_leak(case)
    assert result.status == "fail" and result.details["carriers"][0]["share"] == 0.9, result.summary


def test_targets_flattened_outside_a_model_that_keeps_its_positions_are_read_as_its_grid():
    """Targets given flat (B*T) to a model whose output keeps (B, T, V): the output is left as it is, the targets viewed
    as (B, T), and the decoder fed them still fails (as with the targets unflattened)."""
    torch.manual_seed(0)
    src = torch.randint(0, 12, (8, 10))
    targets = src.flip(1)

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.reshape(-1, 12), targets.reshape(-1))

    case = {"model": target_leak.TinySeq2Seq(12), "batch": ((src, targets.clone()), targets.reshape(-1)), "loss_fn": loss_fn,
            "task": {"kind": "seq2seq"}}
    assert target_leak.check_target_leak(case).status == "fail"


def test_targets_of_b_by_t_are_not_flattened_for_the_loss():
    """(B, T) targets stay (B, T): a loss written for them, cross_entropy over (B, V, T), gets them as they are."""
    torch.manual_seed(0)
    src = torch.randint(0, 12, (8, 10))
    targets = src.flip(1)

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.transpose(1, 2), targets)

    case = {"model": target_leak.TinySeq2Seq(12), "batch": ((src, targets.clone()), targets), "loss_fn": loss_fn,
            "task": {"kind": "seq2seq"}}
    assert target_leak.check_target_leak(case).status == "fail"


def test_a_model_that_flattens_two_positions_itself_is_read_position_by_position():
    """T = 2, the shortest sequence: the flat (B*2) targets are viewed as (B, 2) and the decoder fed them fails."""
    torch.manual_seed(0)

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq2seq = target_leak.TinySeq2Seq(12)

        def forward(self, src, tgt):
            return self.seq2seq(src, tgt).reshape(-1, 12)

    src, targets = torch.randint(0, 12, (8, 2)), torch.randint(0, 12, (8, 2))
    case = {"model": Flat(), "batch": ((src, targets.clone()), targets.reshape(-1)),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "seq2seq"}}
    assert target_leak.check_target_leak(case).status == "fail"


def test_targets_that_are_not_a_tensor_are_a_skip():
    x = torch.randn(8, 6)
    y = x[:, :3].argmax(1)
    case = {"model": torch.nn.Linear(6, 3), "batch": (x, (y, y)),
            "loss_fn": lambda output, targets: torch.nn.functional.cross_entropy(output, targets[0])}
    assert target_leak.check_target_leak(case).status == "skip"


def test_a_two_position_sequence_with_a_carrier_one_position_ahead_is_probed_within_it():
    """T = 2 and an input that holds target t at t + 1 (the source, reversed into the targets): position T // 2 = 1 has
    no t + 1, so that carrier is probed at 0 (it raised IndexError); the decoder fed the targets fails."""
    torch.manual_seed(0)
    src = torch.randint(0, 12, (8, 2))
    targets = src.flip(1)  # src[:, 1] == targets[:, 0]: src carries the targets one position later

    def loss_fn(output, targets):
        return torch.nn.functional.cross_entropy(output.reshape(-1, 12), targets.reshape(-1))

    case = {"model": target_leak.TinySeq2Seq(12), "batch": ((src, targets.clone()), targets), "loss_fn": loss_fn,
            "task": {"kind": "seq2seq"}}
    result = target_leak.check_target_leak(case)
    assert result.status == "fail" and {c["shift"] for c in result.details["carriers"]} == {0, 1}, result.details
