"""resume_check's decisions at their boundaries (a factory's own interrupt, how far held objects are followed, which
state_dict entries are an optimizer's or a scheduler's, losses and LRs within tolerance): found by mutation testing."""
import types

import pytest
import torch

import resume_check as rc


# --- new_trainer: only the user's errors become a CheckError ---------------------------------------------------------

class Stop(BaseException):
    """Neither an Exception nor SystemExit: not the user's error to report, so it must pass through unchanged."""


def test_a_factory_raising_a_base_exception_that_is_not_the_users_error_propagates_as_is():
    def make_trainer():
        raise Stop()

    with pytest.raises(Stop):
        rc.new_trainer(make_trainer, "the reference run")


# --- held_objects: up to three links away, never into a Python module or a seen object ------------------------------

def nested(model, links):
    """`model` behind `links` plain one-item lists (each list is one more link from the trainer)."""
    obj = model
    for _ in range(links):
        obj = [obj]
    return obj


def test_a_model_three_links_from_the_trainer_is_held_and_four_links_away_is_not():
    model = torch.nn.Linear(1, 1)
    assert list(rc.held_objects(nested(model, 3)).values()) == [model]
    assert rc.held_objects(nested(model, 4)) == {}  # HELD_DEPTH 4 passes: the trainer itself is the first


def test_a_model_reached_only_through_a_python_module_is_not_held():
    module = types.ModuleType("user_globals")  # a module the trainer keeps: its globals are not what it holds
    module.model = torch.nn.Linear(1, 1)
    assert rc.held_objects({"lib": module}) == {}


# --- entry_kinds: a scheduler's state_dict has last_epoch and base_lrs or _last_lr ---------------------------------

def test_a_dict_with_last_epoch_but_no_lrs_is_not_a_scheduler():
    assert rc.entry_kinds({"sampler": {"last_epoch": 3}}) == {}


def test_a_dict_with_last_epoch_and_either_lr_list_is_a_scheduler():
    assert rc.entry_kinds({"a": {"last_epoch": 3, "base_lrs": [0.1]}, "b": {"last_epoch": 3, "_last_lr": [0.1]}}) == {
        ("a",): "scheduler", ("b",): "scheduler"}


# --- kind_of: an optimizer's param-group LR, its other entries, and a scheduler's ---------------------------------

OPT_KINDS = {("opt",): "optimizer", ("sched",): "scheduler"}


def test_only_a_param_groups_lr_of_an_optimizer_is_an_lr_entry():
    assert rc.kind_of(("opt", "param_groups", "0", "lr"), OPT_KINDS) == "lr"
    assert rc.kind_of(("opt", "param_groups", "0", "momentum"), OPT_KINDS) == "optimizer"
    assert rc.kind_of(("opt", "state", "lr"), OPT_KINDS) == "optimizer"  # a state entry named lr is not a group's LR


def test_an_entry_under_a_scheduler_is_a_scheduler_entry():
    assert rc.kind_of(("sched", "last_epoch"), OPT_KINDS) == "scheduler"


# --- close: None only matches None; a difference exactly at the tolerance is close ----------------------------------

@pytest.mark.parametrize("a, b", [(None, 0.5), (0.5, None), ((0.5,), None), (None, (0.5,))])
def test_a_missing_loss_or_lr_against_a_value_is_not_close(a, b):
    assert rc.close(a, b, 0.0, 0.0) is False
    assert rc.close(None, None, 0.0, 0.0) is True


def test_a_difference_exactly_at_atol_plus_rtol_is_close():
    # |1.25 - 1.0| = 0.25 = atol 0.125 + rtol 0.125 * |1.0|: exact in binary, so the boundary is hit exactly
    assert rc.close(1.25, 1.0, 0.125, 0.125) is True
    assert rc.close(1.25, 1.0, 0.125, 0.0) is False
