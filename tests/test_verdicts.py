"""Verdicts by experiment (issue 21): a FAIL is a harm shown on the user's model and batch, a threshold alone is at
most a WARN, a budget that runs out is inconclusive, and verdicts count steps, not seconds.

The models here are our own look-alikes of what real scripts taught us (nanoGPT's `model(x, y)`, an Adadelta MNIST
MLP, an LBFGS time series, a DCGAN generator, a VAE decoder), never fetched code.
"""
import itertools
import sys
import time

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import healthy  # noqa: E402
import overfit_one_batch  # noqa: E402


def overfit(case, **kwargs):
    return overfit_one_batch.check_overfit_one_batch(overfit_one_batch.validate_case(case), **kwargs)


# --- overfit_one_batch: a step budget ------------------------------------------------------------------------------

def test_overfit_gives_the_same_verdict_on_a_machine_a_thousand_times_slower(monkeypatch):
    """The CNN needs the 10x retry (about 370 steps in all): a time budget cut it short on a slow machine."""
    fast = overfit(healthy.make_cnn_classifier())
    ticks = itertools.count()
    with monkeypatch.context() as patch:
        for clock in ("process_time", "perf_counter", "monotonic", "time"):
            patch.setattr(time, clock, lambda: 1000.0 * next(ticks))  # every reading 1000 s after the last
        slow = overfit(healthy.make_cnn_classifier())
    assert fast.status == slow.status == "pass", (fast.summary, slow.summary)
    assert fast.details["losses"] == slow.details["losses"]


def test_overfit_out_of_steps_is_inconclusive_not_a_warn_about_the_model():
    result = overfit(healthy.make_cnn_classifier(), steps=5)  # still falling after 5 steps at the lr, 10 at 10x
    assert result.status == "skip" and result.summary.startswith("inconclusive"), result.summary
    assert result.details["failure"] == "inconclusive" and "steps=20" in result.details["next"]


# --- messages say the cause ----------------------------------------------------------------------------------------

class SoftmaxMLP(healthy.MLP):
    def forward(self, x):
        return super().forward(x).softmax(-1)  # BUG: probabilities into NLLLoss, which expects log-probabilities


def _softmax_into_nll():
    case = healthy.make_mlp_classifier()
    with healthy.seeded(0):
        case["model"] = SoftmaxMLP(20, 64, 5)
    case["loss_fn"] = torch.nn.NLLLoss()
    return case


def test_softmax_into_nll_loss_is_named_not_called_a_flipped_sign():
    import init_loss
    at_init = init_loss.check_init_loss(init_loss.validate_case(_softmax_into_nll()))
    assert at_init.status == "fail" and "NLLLoss" in at_init.summary and "sign" not in at_init.summary, at_init.summary
    sprint = overfit(_softmax_into_nll())
    assert sprint.status == "fail" and sprint.details["failure"] == "probabilities_into_nll", sprint.summary
    assert "NLLLoss" in sprint.summary and "sign" not in sprint.summary and "log_softmax" in sprint.details["next"]


def test_a_negated_loss_is_still_called_a_flipped_sign():
    import broken_training
    import init_loss
    case = broken_training.make_flipped_loss_sign()
    assert "sign" in init_loss.check_init_loss(init_loss.validate_case(case)).summary
    result = overfit(broken_training.make_flipped_loss_sign())
    assert result.details["failure"] == "diverging" and "sign" in result.summary


class NoisyRegressor(healthy.MLP):
    def forward(self, x):
        return super().forward(x) + 0.3 * torch.randn(x.shape[0], 1)  # an objective that samples noise, as a VAE's does


@pytest.mark.parametrize("lr", [0.5, 2.0])
def test_a_noisy_loss_that_rose_is_never_called_flat(lr):
    """SGD at 2.0 takes the loss from 1.3 to 163 in two steps; at 0.5 it falls to 0.3 and jumps back to 1.7."""
    case = healthy.make_regression_mlp()
    with healthy.seeded(0):
        case["model"] = NoisyRegressor(8, 32, 1)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=lr)
    result = overfit(case)
    assert "flat" not in result.summary and result.details.get("failure") != "flat", result.summary
    if lr == 2.0:
        assert result.details["failure"] == "diverging" and "grows" in result.summary


def test_a_noisy_loss_at_lr_0_is_still_flat():
    case = healthy.make_regression_mlp()
    with healthy.seeded(0):
        case["model"] = NoisyRegressor(8, 32, 1)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.0)
    result = overfit(case)
    assert result.status == "fail" and result.details["failure"] == "flat", result.summary

