"""overfit_one_batch's causes (found by mutation testing): the noise hint of a flat run, and which cause and next step
a plateau names for probabilities into CrossEntropyLoss and for float targets that the model cannot be relabelled on."""
import torch

from test_decisions_overfit_3 import _plain_regression
from test_decisions_overfit_5 import _flat_linear_case
from test_verdicts import overfit


def test_a_flat_run_of_an_objective_that_samples_no_noise_names_no_unpredictable_target():
    # lr 0 on a deterministic MSE: the flat hint is the learning rate alone, with no "a target the inputs cannot predict"
    case = _flat_linear_case(torch.ones(8, 2), lambda params: torch.optim.SGD(params, lr=0.0))
    assert overfit(case, steps=10).summary.endswith("(unstandardised targets?)")


def _softmax_into_cross_entropy():
    """Probabilities (a softmax) fed to CrossEntropyLoss: the loss stalls near 0.93 of 1.10, far above its target."""
    torch.manual_seed(0)
    return {"model": torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Softmax(-1)),
            "batch": (torch.randn(8, 2), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])), "loss_fn": torch.nn.CrossEntropyLoss(),
            "optimizer": lambda params: torch.optim.Adam(params, lr=0.1)}


def test_a_plateau_of_probabilities_fed_to_cross_entropy_names_a_double_softmax():
    assert overfit(_softmax_into_cross_entropy(), steps=50).summary.endswith("double softmax?")


def test_a_plateau_of_probabilities_fed_to_cross_entropy_says_to_return_logits():
    result = overfit(_softmax_into_cross_entropy(), steps=50)
    assert result.details["next"] == "return logits, not softmax outputs, to CrossEntropyLoss"


def test_a_plateau_on_float_targets_names_targets_the_inputs_cannot_explain():
    # MSE targets are no class indices: no relabelled control ran and no row is blocked, so no control's verdict is claimed
    result = overfit(_plain_regression(3))
    assert result.summary.endswith("label smoothing, or targets the inputs cannot explain")
