"""capture's decisions pinned at their boundaries (mutation testing's survivors): unbindable calls, the case's targets,
prediction and task hints, the captured line's parts, where a script raised, and where the first step stops it."""
import json
import signal
import types

import torch
import torch.nn.functional as F

import capture
from test_decisions_capture_4 import _traced


def _case(model, step):
    """step() returns the loss: its backward() runs under capturing(), then the case is finished as the first optimizer
    step would finish it. A stand-in optimizer: the first torch one imports dynamo (1 s), and no step runs here."""
    optimizer = types.SimpleNamespace(param_groups=[{"params": list(model.parameters()), "lr": 0.1}], defaults={})
    with capture.capturing("test", time_limit=0) as captured:
        step().backward()
        captured._finish(optimizer)
    assert captured.case is not None, captured.error
    return captured.case


class _Starred(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, *inputs, **options):
        return self.linear(inputs[0])


class _WithTarget(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x, y):  # nanoGPT's model(x, y): y is the loss's target
        return self.linear(x)


class _OwnLoss(torch.nn.Module):
    """Returns its loss first, then a pooled (batch, features) tensor, then per-token hidden states."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(10, 4)

    def forward(self, input_ids, labels):
        hidden = self.embedding(input_ids)
        return hidden.pow(2).mean(), hidden.mean(1), hidden


class _LossOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x).pow(2).mean()


IDS = torch.tensor([[5, 6, 7, 8], [9, 5, 6, 7]])
NEXT = torch.tensor([[6, 7, 8, -100], [5, 6, 7, -100]])  # IDS shifted by one position, the last one ignored


def _classified(model):
    return _case(model, lambda: F.cross_entropy(model(torch.randn(4, 3)), torch.tensor([0, 1, 2, 0])))


def test_a_call_whose_star_args_cannot_be_named_is_refused_when_it_also_has_keywords():
    # forward(*inputs, **options) called as model(x, flag=True): the positional x has no name to replay it by.
    model = _Starred()
    assert isinstance(_traced(lambda: F.cross_entropy(model(torch.randn(4, 3), flag=True), torch.tensor([0, 1, 2, 0]))),
                      str)


def test_finish_before_any_backward_records_the_reason_and_builds_no_case():
    captured = capture.Capture("test")
    captured._finish(optimizer=None)
    assert captured.case is None and captured.error is not None


def test_a_model_given_the_loss_target_names_its_position_in_the_inputs():
    model, y = _WithTarget(), torch.tensor([0, 1, 2, 0])
    case = _case(model, lambda: F.cross_entropy(model(torch.randn(4, 3), y), y))
    assert case["task"]["target_inputs"] == [1]


def test_a_model_returning_its_loss_takes_its_first_2d_output_for_the_prediction():
    # The pooled (2, 4) output is a classifier's: no causal_lm, though the later (2, 4, 4) hidden states line up with the
    # tokens that the labels shift by one.
    model = _OwnLoss()
    case = _case(model, lambda: model(IDS, NEXT)[0])
    assert "kind" not in case["task"]


def test_the_captured_line_names_the_targets_and_no_time_major_or_autocast_note():
    text = _classified(torch.nn.Linear(3, 3))["captured"]
    assert "targets int64[4]" in text and "no targets" not in text
    assert "time-major" not in text and "autocast" not in text


def test_the_captured_line_says_no_targets_for_a_model_returning_its_loss_without_labels():
    model = _LossOnly()
    assert "no targets" in _case(model, lambda: model(torch.randn(4, 3)))["captured"]


def test_a_time_major_language_model_is_noted_in_the_captured_line():
    # Tokens (T=4, B=2) run down dim 0: the targets are the inputs shifted along it.
    model, ids = torch.nn.Embedding(10, 10), IDS.T.contiguous()
    targets = torch.cat([ids[1:], ids[:1]])
    case = _case(model, lambda: F.cross_entropy(model(ids).reshape(-1, 10), targets.reshape(-1)))
    assert case["task"]["batch_dim"] == 1
    assert "time-major" in case["captured"]


def test_target_inputs_of_dict_inputs_name_the_key():
    inputs = {"input_ids": IDS, "labels": NEXT}
    assert capture.Capture._target_inputs(inputs, inputs, "labels") == ["labels"]


def test_target_inputs_give_a_position_only_inside_the_tuple_of_inputs():
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    assert capture.Capture._target_inputs((x, y), {"x": x, "y": y}, "y") == [1]
    assert capture.Capture._target_inputs((x,), {"x": x, "y": y}, "y") == []  # position 1 == len(inputs): past the end
    assert capture.Capture._target_inputs(y, {"y": y}, "y") == []  # a single tensor input has no positions


def test_token_ids_are_found_behind_a_float_attention_mask():
    inputs = {"attention_mask": torch.ones(2, 4), "input_ids": IDS}
    task = capture.Capture._task("classification", -100, inputs, NEXT, torch.randn(2, 4, 10))
    assert task["kind"] == "causal_lm" and task["vocab_size"] == 10


def test_token_classification_targets_that_neither_repeat_nor_shift_the_ids_stay_classification():
    tags = torch.tensor([[0, 1, 0, 2], [1, 1, 0, 0]])
    task = capture.Capture._task("classification", -100, IDS, tags, torch.randn(2, 4, 3))
    assert task == {"kind": "classification", "ignore_index": -100}


def test_where_names_the_innermost_frame_outside_capture_py():
    try:
        capture._pick({}, ("missing",))
    except KeyError as exc:
        assert capture._where(exc).startswith("test_decisions_capture_5.py:")


def test_where_names_the_innermost_frame_in_the_script_when_the_error_comes_from_a_library():
    try:
        json.loads("not json")
    except ValueError as exc:
        assert capture._where(exc, __file__).startswith("test_decisions_capture_5.py:")
        assert not capture._where(exc).startswith("test_decisions_capture_5.py:")  # json's own frame, without a path


def test_capturing_without_a_time_limit_leaves_the_alarm_signal_alone():
    before = signal.getsignal(signal.SIGALRM)
    with capture.capturing("test", time_limit=0):
        assert signal.getsignal(signal.SIGALRM) is before


def _two_steps(model, events, closure=False):
    """Two steps, each after its own forward pass and backward(); `events` records each forward pass and each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def forward():
        events.append("forward")
        return F.cross_entropy(model(torch.randn(4, 3)), torch.tensor([0, 1, 2, 0]))

    for _ in range(2):
        forward().backward()
        optimizer.step(forward if closure else None)
        events.append("stepped")


def test_without_second_step_the_first_optimizer_step_never_runs():
    events = []
    capture.capture_case(_two_steps, torch.nn.Linear(3, 3), events)
    assert events == ["forward"]


def test_a_closure_is_not_called_by_the_capture_when_a_backward_already_ran():
    events = []
    capture.capture_case(_two_steps, torch.nn.Linear(3, 3), events, closure=True)
    assert events == ["forward"]
