"""overfit_one_batch's late decisions: probabilities into NLLLoss only for a loss below zero, the warn of a noisy flat fit
whose control memorises its own predictions, and which cause a flat run's summary names: found by mutation testing."""
import torch

from test_verdicts import overfit

F = torch.nn.functional


def _softmax_into_nll_plus_l2(lr):
    """Softmax outputs fed to NLLLoss, plus an L2 term on the weight (0 at the start, so the loss starts at -mean p)."""
    linear = torch.nn.Linear(2, 8)
    torch.nn.init.zeros_(linear.weight)
    torch.nn.init.zeros_(linear.bias)

    def loss_fn(probs, targets):
        return F.nll_loss(probs, targets) + linear.weight.square().sum()

    return {"model": torch.nn.Sequential(linear, torch.nn.Softmax(-1)), "batch": (torch.ones(8, 2), torch.zeros(8, dtype=torch.long)),
            "loss_fn": loss_fn, "optimizer": lambda params: torch.optim.SGD(params, lr=lr)}


def test_softmax_into_nll_whose_loss_diverges_above_zero_is_diverging_not_probabilities_into_nll():
    # at lr 1.2 the L2 term swings the loss from -0.125 up to +0.38 at step 10: -mean(p[target]) never rises above 0
    result = overfit(_softmax_into_nll_plus_l2(lr=1.2), steps=10)
    assert result.details["failure"] == "diverging"


def _randomly_scaled_cross_entropy(logits, targets):
    return F.cross_entropy(logits, targets) * (1 + 0.9 * torch.randn(()))  # a sampled objective: each draw differs


def test_a_noisy_flat_fit_whose_control_memorises_its_own_predictions_warns():
    # one input for every row, three labels: no model can fit them (flat within the noise), but its own first
    # predictions (one class for all rows) it memorises at 10x lr: warn, targets out of reach, not a skip or a pass
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(2, 3), "batch": (torch.ones(8, 2), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])),
            "loss_fn": _randomly_scaled_cross_entropy, "optimizer": lambda params: torch.optim.Adam(params, lr=0.1)}
    result = overfit(case, steps=20)
    assert (result.status, result.details["failure"]) == ("warn", "targets_out_of_reach")


def _flat_linear_case(inputs, optimizer):
    torch.manual_seed(0)
    return {"model": torch.nn.Linear(2, 1), "batch": (inputs, torch.zeros(8, 1)), "loss_fn": F.mse_loss,
            "optimizer": optimizer}


def test_a_flat_run_whose_optimizer_holds_none_of_the_parameters_says_so():
    # the optimizer was built over another tensor: every trainable parameter is missing
    case = _flat_linear_case(torch.ones(8, 2), lambda params: torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1))
    assert "the optimizer holds none of the model's parameters" in overfit(case, steps=10).summary


def test_a_flat_run_with_one_of_two_parameters_missing_from_the_optimizer_counts_them():
    # the optimizer holds the weight alone, whose gradient is 0 on zero inputs: flat, with the bias missing
    case = _flat_linear_case(torch.zeros(8, 2), lambda params: torch.optim.SGD(params[:1], lr=0.1))
    assert "1 of 2 trainable parameters are not in the optimizer" in overfit(case, steps=10).summary
