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
