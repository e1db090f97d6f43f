"""nan_watch's decisions at their boundaries, found by mutation testing: the fp16 headroom limit, what counts as an
activation, the abs min of a frame, an infinite gradient's sign, and the CUDA RNG stream read only once CUDA is in use."""
import pytest
import torch

import nan_watch
from nan_watch import NanWatch


def _scaled(gain):
    """One Linear(1, 1) that multiplies by gain: on a batch of ones its output's abs max is exactly gain."""
    layer = torch.nn.Linear(1, 1)
    with torch.no_grad():
        layer.weight.fill_(gain)
        layer.bias.zero_()
    return torch.nn.Sequential(layer)


def _check_scaled(gain):
    x = torch.ones(2, 1)
    return nan_watch.check_nan_watch({"model": _scaled(gain), "batch": (x, torch.full((2, 1), float(gain))),
                                      "loss_fn": torch.nn.functional.mse_loss})


def test_an_activation_of_exactly_the_fp16_headroom_limit_passes():
    result = _check_scaled(1e4)  # the limit is "above 1e4"
    assert (result.status, result.details["fp16_risk"]) == ("pass", [])


def test_an_activation_five_percent_above_the_fp16_headroom_limit_is_a_warn():
    result = _check_scaled(10500.0)
    assert result.status == "warn"
    assert [(risk["module"], risk["abs_max"]) for risk in result.details["fp16_risk"]] == [("0", 10500.0), ("Sequential", 10500.0)]


def test_a_large_gradient_beside_small_activations_is_no_fp16_headroom_warn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    result = nan_watch.check_nan_watch({"model": model, "batch": (torch.randn(3, 2), torch.zeros(3, 1)),
                                        "loss_fn": lambda out, y: 1e6 * out.sum()})  # gradients of ~1e6, activations of ~1
    assert (result.status, result.details["fp16_risk"]) == ("pass", [])


class _Log(torch.nn.Module):
    def forward(self, x):
        return x.log()


def test_the_frames_give_the_abs_min_of_finite_tensors_and_nan_for_a_nan_one():
    identity = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(2))
    result = nan_watch.check_nan_watch({"model": torch.nn.Sequential(identity, _Log()),
                                        "batch": (torch.tensor([[0.5, -2.0]]), torch.zeros(1, 2)),
                                        "loss_fn": torch.nn.functional.mse_loss})
    assert result.status == "fail"
    assert [(f["module"], f["in"], f["out"]) for f in result.details["frames"]] == [
        ("0", [0.5, 2.0], [0.5, 2.0]), ("1", [0.5, 2.0], ["nan", "nan"])]


def test_a_gradient_made_non_finite_by_the_loss_is_called_a_gradient():
    # the loss's sqrt at 0 sends an inf gradient into the model's output: no module made it
    result = nan_watch.check_nan_watch({"model": torch.nn.Sequential(torch.nn.Linear(3, 2)),
                                        "batch": (torch.randn(4, 3), torch.zeros(4, 2)),
                                        "loss_fn": lambda out, y: (out - out.detach()).sqrt().sum()})
    assert (result.status, result.details["origin"]["phase"]) == ("fail", "backward")
    assert result.summary.startswith("first NaN/inf seen in a gradient at "), result.summary


class _Split(torch.nn.Module):
    """x and its positive part: a tensor of both signs beside one of one sign whose abs min is 0."""

    def __init__(self):
        super().__init__()
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return x, self.relu(x)


class _LogOfSum(torch.nn.Module):
    def forward(self, pair):
        return (pair[0] + pair[1]).log()


def _replayed_frames():
    """The forward frames of a replayed step: [1, -1] -> ReLU [1, 0] -> log([2, -1]) is NaN."""
    identity = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(2))
    model = torch.nn.Sequential(identity, _Split(), _LogOfSum())
    x = torch.tensor([[1.0, -1.0]])

    def compute():
        return model(x).sum()

    report = NanWatch(model).check(0, compute(), replay=compute)
    assert (report["module"], report["phase"], report["source"]) == ("2", "forward", "module")
    return {f["module"]: f for f in report["frames"]}


def test_a_replay_frame_of_a_tensor_whose_min_is_zero_has_an_abs_min_of_zero():
    assert _replayed_frames()["1.relu"]["out"] == [0.0, 1.0]  # min 0, max 1: one sign, so the abs min is the min


def test_a_zero_beside_a_tensor_of_both_signs_gives_the_frame_an_abs_min_of_zero():
    frames = _replayed_frames()
    assert frames["0"]["out"] == [None, 1.0]  # [1, -1] alone: both signs, the abs min is not measured
    assert frames["1"]["out"] == [0.0, 1.0]  # ([1, -1], [1, 0]): the 0 of the second is the frame's abs min


class _RootGain(torch.nn.Module):
    """x * sqrt(gain): sqrt's slope at a gain of 0 is infinite, so that gain's gradient is inf, signed as x."""

    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.tensor([0.0, 1.0]))

    def forward(self, x):
        return x * self.gain.sqrt()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_parameter_gradient_of_inf_without_nan_is_named_whichever_its_sign(sign):
    model = torch.nn.Sequential(_RootGain())
    x = torch.tensor([[sign, 1.0]])  # gain's gradient: [sign * inf, 0.5], a single infinite end

    def compute():
        return model(x).sum()

    loss = compute()
    loss.backward()
    report = NanWatch(model).check(0, loss, replay=compute)
    assert (report["module"], report["phase"], report["source"]) == ("0", "backward", "module")
    assert report["frames"][-1]["param"] == "gain"


def test_the_cuda_rng_stream_is_not_read_while_cuda_is_available_but_not_in_use(monkeypatch):
    def initializes_cuda():
        raise AssertionError("read the CUDA RNG state: that initializes CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", initializes_cuda)
    model = torch.nn.Sequential(_Log())
    x = torch.tensor([[-1.0, 1.0]])
    watch = NanWatch(model)
    watch.begin()
    report = watch.check(0, model(x).sum(), replay=lambda: model(x).sum())
    assert (report["module"], report["source"]) == ("0", "module")
