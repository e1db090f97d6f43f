"""init_loss's decisions pinned at their boundaries (found by mutation testing): its thresholds, the trial's length, the
probabilities-into-NLLLoss test and the neutral output of a log_softmax model."""
import math

import pytest
import torch

import init_loss
from test_decisions_thresholds import _biased_against_the_target, _knows_the_labels


def _ratio_of_held_down_logits(down, scale=1.0):
    """loss / ln 10 of logits (-down, 0, ..., 0) times scale at class 0: what _biased_against_the_target builds."""
    return (scale * down + math.log(9 + math.exp(-scale * down))) / math.log(10)


@pytest.mark.parametrize("ratio, status", [(0.74, "warn"), (0.79, "pass")])  # LOW_RATIO: 0.75x the best constant
def test_a_loss_below_three_quarters_of_the_best_constant_warns_and_one_just_above_passes(ratio, status):
    # two balanced classes: best constant = chance = ln 2; weights a * eye score log(1 + e^-a) per sample
    case = _knows_the_labels([0, 1] * 8)
    a = -math.log(2 ** ratio - 1)
    with torch.no_grad():
        case["model"].weight.copy_(a * torch.eye(2))
    result = init_loss.check_init_loss(case)
    assert result.details["ratio_to_best_constant"] == pytest.approx(ratio, rel=1e-5)
    assert result.status == status, result.summary


def test_a_model_in_train_mode_is_scored_over_three_passes():
    case = _biased_against_the_target(1.0)
    result = init_loss.check_init_loss(case)
    assert result.details["mode"] == "train" and len(result.details["loss_per_pass"]) == 3


@pytest.mark.parametrize("factor, status", [(1.105, "warn"), (1.095, "pass")])  # LOSS_FN_TOLERANCE: 10% off ln C
def test_a_loss_fn_scoring_an_all_zero_output_over_ten_percent_off_chance_is_a_warn(factor, status):
    case = _biased_against_the_target(1.0)  # loss at init ln 10, every target class 0: no best-constant warn
    case["loss_fn"] = lambda out, y: factor * torch.nn.functional.cross_entropy(out, y)
    result = init_loss.check_init_loss(case)
    assert result.details["zero_output_loss"] == pytest.approx(factor * math.log(10), rel=1e-6)
    assert result.status == status, result.summary


def test_the_too_large_trial_judges_the_loss_after_exactly_twenty_steps():
    # the lr schedule is 0 for steps 0..19 and 1 at step 20: 20 steps leave the loss where it starts (a fail), a 21st
    # would lift the held-down target logit past the others (below the calmed loss: a warn)
    case = _biased_against_the_target(3.0)
    case["batch"] = (torch.zeros(16, 4), case["batch"][1])  # zero inputs: only the bias learns
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=5.0)
    case["task"]["lr_schedule"] = lambda step: float(step == 20)
    result = init_loss.check_init_loss(case)
    assert result.details["trial_steps"] == 20
    assert result.details["loss_after_trial"] == pytest.approx(result.details["loss"])
    assert result.status == "fail", result.summary


def test_the_trial_calms_the_outputs_with_the_largest_scale_within_1_25x_chance():
    # logits held down so that scale 1/2 scores 1.3x chance (over CALM_RATIO 1.25) and 1/4 scores 1.15x: 1/4 is taken
    down = 1.49
    assert 1.25 < _ratio_of_held_down_logits(down, 0.5) < 1.375 and _ratio_of_held_down_logits(down, 0.25) < 1.25
    result = init_loss.check_init_loss(_biased_against_the_target(_ratio_of_held_down_logits(down)))
    assert result.details["ratio_to_chance"] > init_loss.HIGH_RATIO
    assert result.details["calming_factor"] == 0.25
    assert result.details["calmed_loss"] / math.log(10) == pytest.approx(_ratio_of_held_down_logits(down, 0.25), rel=1e-5)


def test_probability_rows_are_told_from_outputs_with_a_negative_entry():
    targets = torch.tensor([0, 1])
    probabilities = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    assert init_loss.probabilities_into_nll(probabilities, targets, -0.625)
    logits = torch.tensor([[0.75, -0.25], [0.0, 0.5]])  # -mean(out[target]) matches, but no probabilities
    assert not init_loss.probabilities_into_nll(logits, targets, -0.625)


def test_probability_rows_may_hold_an_exact_zero():
    one_hot = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # a softmax that saturated: probabilities still
    assert init_loss.probabilities_into_nll(one_hot, torch.tensor([0, 1]), -1.0)


def test_rows_summing_to_one_within_a_thousandth_are_probabilities_and_beyond_it_not():
    targets = torch.tensor([0, 0])
    within = torch.tensor([[0.5, 0.4995], [0.5, 0.5]], dtype=torch.float64)  # row sum off by 0.0005
    beyond = torch.tensor([[0.5, 0.50105], [0.5, 0.5]], dtype=torch.float64)  # off by 0.00105
    assert init_loss.probabilities_into_nll(within, targets, -0.5)
    assert not init_loss.probabilities_into_nll(beyond, targets, -0.5)


def test_nll_of_probabilities_is_named_only_when_the_loss_is_minus_their_mean_within_float_noise():
    targets = torch.tensor([1, 1])
    rows = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # p[target] = 0: -mean is exactly 0
    assert init_loss.probabilities_into_nll(rows, targets, -1e-4)  # |0 - loss| = 1e-4 exactly: within the tolerance
    assert not init_loss.probabilities_into_nll(rows, targets, -0.5)


def test_one_kept_target_is_enough_to_name_nll_of_probabilities():
    rows = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    assert init_loss.probabilities_into_nll(rows, torch.tensor([1, -100]), -0.75)  # the ignored row is left out


def test_entropy_leaves_out_classes_absent_from_the_batch():
    assert init_loss.entropy(torch.tensor([3.0, 0.0, 3.0])) == pytest.approx(math.log(2))


def test_log_probabilities_off_by_more_than_a_thousandth_get_an_all_zero_neutral_output():
    near = torch.full((2, 2), -math.log(2) - 0.0005)  # logsumexp -0.0005: log-probabilities
    off = torch.full((2, 2), -math.log(2) - 0.00105)  # logsumexp -0.00105: not
    assert torch.allclose(init_loss.neutral_output(near), torch.full((2, 2), -math.log(2)))
    assert torch.equal(init_loss.neutral_output(off), torch.zeros(2, 2))


def test_an_output_with_a_positive_entry_is_not_log_probabilities():
    out = torch.tensor([[5e-4, -20.0], [5e-4, -20.0]])  # logsumexp over dim 1 is 5e-4, but log p > 0 is impossible
    assert torch.equal(init_loss.neutral_output(out), torch.zeros(2, 2))
