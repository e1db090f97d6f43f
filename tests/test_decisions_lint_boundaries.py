"""Decisions of lint's rules, of the Landlock guard and of resume_check (its CUDA seeding, the objects it puts back),
each pinned by an input at its boundary: found by mutation testing."""
import ctypes
import os
import platform
import sys

import pytest
import torch

import ml_debug_contract
import resume_check
from conftest import findings
from state_snapshot import differences, snapshot
from test_hostile_inloop import SharedTrainer


# --- data-write: a call of the file's own (model(x)) is an activation only in code that runs backward() ----------

def test_data_write_on_a_model_output_is_reported_only_where_backward_runs():
    without_backward = """
        def run(model, x, mask):
            h = model(x)
            h.data.mul_(mask)
            return h
        """
    with_backward = """
        def run(model, x, mask):
            h = model(x)
            h.data.mul_(mask)
            h.sum().backward()
        """
    assert findings(without_backward) == []
    assert findings(with_backward) == [("data-write", 4)]


# --- eval-mode-not-restored: a model the training function reads as a global, not a parameter ---------------------

def test_eval_mode_not_restored_on_a_global_model_of_a_function_with_callers():
    # built_by follows a parameter to what each caller passes; net is no parameter of fit, so nothing is followed
    assert findings("""
        import torch
        import torch.nn.functional as F

        def fit(loader, val_loader):
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    F.cross_entropy(net(x), y).backward()
                    optimizer.step()
                net.eval()

        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        fit(train_loader, val_loader)
        """) == [("eval-mode-not-restored", 11)]


# --- eval-mode-missing: the train mode is followed up the callers of the evaluation helper --------------------------

def test_eval_mode_missing_is_found_when_the_helper_called_switches_another_model_to_eval():
    # evaluate() switches ema_model only; the call of evaluate itself is not a helper run before it that leaves a doubt
    assert findings("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        def evaluate(model, ema_model, loader):
            ema_model.eval()
            with torch.no_grad():
                for x, y in loader:
                    print((model(x).argmax(1) == y).sum().item(), (ema_model(x).argmax(1) == y).sum().item())


        def main(train_loader, val_loader, ema_model):
            model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    optimizer.step()
                evaluate(model, ema_model, val_loader)
        """) == [("eval-mode-missing", 11)]


def helper_chain(levels):
    """A training main() that hands its model through levels - 1 helpers to level0(), which evaluates it in train
    mode."""
    helpers = "".join(f"def level{i}(model, loader):\n    level{i - 1}(model, loader)\n\n\n" for i in range(1, levels))
    return f"""import torch
import torch.nn as nn
import torch.nn.functional as F


def level0(model, loader):
    with torch.no_grad():
        for x, y in loader:
            print((model(x).argmax(1) == y).sum().item())


{helpers}def main(train_loader, val_loader):
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        level{levels - 1}(model, val_loader)
"""


@pytest.mark.parametrize("levels, expected", [
    (3, [("eval-mode-missing", 9)]),  # main is the third caller up from the evaluation loop: still followed
    (4, []),  # the fourth: past the limit, unsure
])
def test_eval_mode_missing_follows_three_callers_up(levels, expected):
    assert findings(helper_chain(levels)) == expected


# --- clip-grad-order: a loop that steps but has no backward() of its own is not the one that decides -------------

def test_clipping_in_a_loop_over_optimizers_after_backward_is_clean():
    # the inner loop clips then steps with no backward in it; the outer one, where backward() precedes the clip, decides
    assert findings("""
        import torch.nn.functional as F
        from torch.nn.utils import clip_grad_norm_

        for x, y in loader:
            for optimizer in optimizers:
                optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            for optimizer in optimizers:
                clip_grad_norm_(optimizer.param_groups[0]["params"], 1.0)
                optimizer.step()
        """) == []


# --- detached-loss: the flow analysis follows 64 steps, and counts anything further as live ----------------------

@pytest.mark.parametrize("minus_signs, expected", [
    (63, [("detached-loss", 2)]),  # the .detach() is the 64th step from `loss`: still followed
    (64, []),  # the 65th: past the limit, counted as live
])
def test_a_detach_is_followed_up_to_64_steps_from_the_loss(minus_signs, expected):
    source = "out = model(x)\nloss = " + "-" * minus_signs + "out.detach()\nloss.backward()\n"
    assert findings(source) == expected


# --- accumulation: a loop with its own backward() and step() is judged on them, not on what its calls run -----------

def test_unscaled_accumulation_is_found_beside_a_critic_object_that_steps_on_every_pass():
    # the loop's own events are exactly one backward() and one step() (its zero_grad() is in a helper); critic.update()
    # runs a backward() and a step() of another model on every pass: the loop still reads as accumulating
    assert findings("""
        import torch.nn.functional as F


        class Critic:
            def __init__(self, model, optimizer):
                self.model, self.optimizer = model, optimizer

            def update(self, x):
                self.optimizer.zero_grad()
                self.model(x).mean().backward()
                self.optimizer.step()


        def reset(optimizer):
            optimizer.zero_grad()


        critic = Critic(discriminator, d_optimizer)
        for i, (x, y) in enumerate(loader):
            critic.update(x)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                reset(optimizer)
        """) == [("accumulated-loss-not-scaled", 23)]


# --- Landlock: a ruleset's file descriptor may be 0 ------------------------------------------------------------------

class FakeLandlockLibc:
    """The libc calls landlock_writes_only_under makes, answered by a Landlock ABI 3 kernel that hands out fd 0 for the
    ruleset (a process whose stdin was closed)."""

    def __init__(self):
        self.calls = []

        def syscall(number, *args):
            self.calls.append(number)
            if number == 444:  # landlock_create_ruleset: the ABI version when flags is 1, else the ruleset's fd
                return 3 if args[2].value == 1 else 0
            return 0

        self.syscall = syscall

    def prctl(self, *args):
        return 0


def test_landlock_accepts_a_ruleset_on_file_descriptor_0(monkeypatch, tmp_path):
    libc, closed, real_close = FakeLandlockLibc(), [], os.close
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(ctypes, "CDLL", lambda *args, **kwargs: libc)
    monkeypatch.setattr(os, "close", lambda fd: closed.append(fd) if fd == 0 else real_close(fd))
    assert ml_debug_contract.landlock_writes_only_under([str(tmp_path)]) is True
    assert libc.calls == [444, 444, 445, 446]  # version, create, add the rule, restrict self
    assert closed == [0]


# --- resume_check: CUDA is seeded only once initialised ---------------------------------------------------------

@pytest.mark.parametrize("initialised", [False, True])
def test_seed_all_seeds_cuda_only_once_it_is_initialised(initialised, monkeypatch):
    seeded = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [])  # for rng_preserved, on a machine without CUDA
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: None)
    with resume_check.rng_preserved():
        resume_check.seed_all(7)
    assert seeded == ([7] if initialised else [])  # a lazy seed would fire later, on the user's first CUDA call


@pytest.mark.parametrize("available, initialised, read", [(True, True, True), (True, False, False), (False, True, False)])
def test_rng_preserved_reads_and_restores_the_cuda_streams_only_once_cuda_is_initialised(available, initialised, read,
                                                                                       monkeypatch):
    # the contract's rng_preserved (resume_check's and every preserved()'s): a CUDA stream read on a machine where the
    # user never started CUDA would start it
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: calls.append("get") or [])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: calls.append("set"))
    with ml_debug_contract.rng_preserved():
        pass
    assert calls == (["get", "set"] if read else [])


# --- resume_check: the objects handed in are those the first two trainers share, put back to the end --------------

def test_a_model_the_first_two_trainers_share_is_put_back_when_a_later_trainer_is_built_without_it():
    def users_model():
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 1)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    shared, spare = users_model(), users_model()
    before, calls = snapshot(*shared), []

    def make_trainer():  # the third build (the resumed run's first trainer) gets the spare model, the others shared
        calls.append(1)
        return SharedTrainer(*(spare if len(calls) == 3 else shared))

    result = resume_check.check_resume(make_trainer, steps=3, resume_at=(1, 2))
    assert (len(calls), result.details["verdict"]) == (5, "ok")
    assert differences(before, snapshot(*shared)) == []
