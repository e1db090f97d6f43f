"""overfit_one_batch's chance-level cap on the target, its warn for parameters missing from the optimizer and its pass
for a noisy loss that settled low without a retry: decisions found by mutation testing."""
import math

import torch

from test_decisions_overfit import _linear_case
from test_verdicts import overfit


def _constant_loss(output, targets):
    return torch.tensor(10.0)  # detached: the check fails "flat" before any step, with the target it would have used


def test_num_classes_alone_caps_the_target_at_5_percent_of_ln_c():
    # task["num_classes"] without a vocab_size still sets chance level: the start of 10 is far above ln 4
    result = overfit(_linear_case(_constant_loss, task={"num_classes": 4}))
    assert abs(result.details["target"] - 0.05 * math.log(4)) < 1e-6


def test_two_classes_cap_the_target_at_5_percent_of_ln_2():
    # a binary task has a chance level too: the target is 5% of ln 2, not of the start of 10
    result = overfit(_linear_case(_constant_loss, task={"num_classes": 2}))
    assert abs(result.details["target"] - 0.05 * math.log(2)) < 1e-6


def test_a_single_class_is_no_chance_level_and_leaves_the_target_at_5_percent_of_the_start():
    # ln 1 = 0 would ask for a loss of exactly 0: one class gets no cap
    result = overfit(_linear_case(_constant_loss, task={"num_classes": 1}))
    assert abs(result.details["target"] - 0.5) < 1e-6


def _bias_left_out(params):
    return torch.optim.SGD(params[:1], lr=0.1)  # the weight only: the bias is trainable but never stepped


def test_a_batch_memorised_at_your_lr_with_a_parameter_missing_from_the_optimizer_warns():
    # memorised at your lr, yet a trainable parameter is never stepped: warn, not pass
    result = overfit(_linear_case(torch.nn.functional.mse_loss, optimizer=_bias_left_out))
    assert result.status == "warn"


def test_the_summary_names_parameters_missing_from_the_optimizer():
    # the finding that a trainable parameter is not in the optimizer is in the verdict line
    result = overfit(_linear_case(torch.nn.functional.mse_loss, optimizer=_bias_left_out))
    assert "not in the optimizer" in result.summary


def test_the_summary_claims_no_missing_parameter_when_the_optimizer_holds_them_all():
    # and absent when every trainable parameter is in the optimizer
    result = overfit(_linear_case(torch.nn.functional.mse_loss,
                                  optimizer=lambda params: torch.optim.SGD(params, lr=0.1)))
    assert "not in the optimizer" not in result.summary


def _mse_plus_noise(output, targets):
    return torch.nn.functional.mse_loss(output, targets) + 3 * torch.rand(())  # a sampled term of mean 1.5: a floor above 0


def test_a_noisy_loss_that_settled_low_at_your_lr_passes_with_no_retry_at_10x():
    # the output starts at 3 (loss ~10); SGD takes the squared error to 0 and the noise's mean of 1.5 stays above the target
    case = _linear_case(_mse_plus_noise, optimizer=lambda params: torch.optim.SGD(params, lr=0.01))
    with torch.no_grad():
        case["model"].bias.fill_(3.0 - float(case["model"].weight.sum()))
    result = overfit(case)
    assert result.status == "pass" and "retry_lr_scale" not in result.details
