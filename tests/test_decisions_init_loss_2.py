"""init_loss's task inference and neutral output pinned at their boundaries (found by mutation testing): which targets
are soft labels, 0/1 targets or regression, the kind it reports, and when an output counts as log-probabilities."""
import math

import pytest
import torch

import init_loss

F = torch.nn.functional


class _Fixed(torch.nn.Module):
    """A model whose output is `output` (or `wrap(output)`), whatever its input; nothing trains, so no trial runs."""

    def __init__(self, output, wrap=None):
        super().__init__()
        self.register_buffer("output", output.clone())
        self.wrap = wrap

    def forward(self, x):
        return self.wrap(self.output) if self.wrap else self.output


def _check(output, targets, loss_fn, wrap=None, **task):
    inputs = torch.zeros(targets.shape[0] if targets.ndim else 1, 1)  # ignored by the model
    return init_loss.check_init_loss({"model": _Fixed(output, wrap), "batch": (inputs, targets), "loss_fn": loss_fn,
                                      "task": task})


def test_a_saturated_log_softmax_with_an_exact_zero_still_gets_uniform_log_probabilities():
    out = torch.log_softmax(torch.tensor([[200.0, 0.0], [0.0, 200.0]]), 1)  # log p = 0 exactly for the sure class
    assert float(out.max()) == 0.0
    assert torch.allclose(init_loss.neutral_output(out), torch.full((2, 2), -math.log(2)))


def test_log_probabilities_whose_logsumexp_is_exactly_minus_a_thousandth_are_not_taken_as_such():
    out = torch.tensor([[-0.001, -30.0]])  # logsumexp is -0.001 exactly in float32: the tolerance is strict
    assert float(out.logsumexp(1)) == float(torch.tensor(-0.001))
    assert torch.equal(init_loss.neutral_output(out), torch.zeros(1, 2))


@pytest.mark.parametrize("loss_fn, kind", [(F.binary_cross_entropy_with_logits, "classification (inferred: 0/1 targets)"),
                                           (F.mse_loss, "regression (inferred)")])
def test_one_dimensional_0_1_targets_are_classes_under_a_logits_loss_and_numbers_under_mse(loss_fn, kind):
    targets = torch.tensor([0.0, 1.0, 0.0, 0.0])  # output and targets both 1-D: the same shape
    result = _check(torch.zeros(4), targets, loss_fn)
    assert result.details["kind"] == kind


def test_0_1_targets_beside_a_column_output_fail_on_the_broadcast_even_when_mse_scores_near_ln_2():
    # 9 ones in 13: MSE of an all-zero (13, 1) output against (13,) targets is 9/13 = 0.6923, within 1e-3 of ln 2, but
    # the shapes differ, so these are regression targets that MSE broadcasts, not 0/1 classes
    targets = torch.tensor([1.0] * 9 + [0.0] * 4)
    with pytest.warns(UserWarning):  # torch's own warning about the broadcast
        result = _check(torch.zeros(13, 1), targets, F.mse_loss)
    assert result.status == "fail" and result.details["shapes_differ"]


def _squeezed(loss_fn):
    return lambda out, targets: loss_fn(out.squeeze(-1), targets)


@pytest.mark.parametrize("loss_fn", [F.binary_cross_entropy_with_logits, F.mse_loss])
def test_a_column_output_the_loss_fn_squeezes_is_judged_as_if_it_had_the_targets_shape(loss_fn):
    # a binary classifier's (N, 1) logits and (N,) 0/1 targets, its loss_fn squeezing them: nothing is broadcast (a
    # probe of distinct values scores the same either way), so the verdict is the one of a (N,) output, not a shape fail
    targets = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    output = torch.tensor([[0.3], [-0.2], [0.1], [0.4], [-0.5]])
    squeezed = _check(output, targets, _squeezed(loss_fn))
    flat = _check(output.squeeze(-1), targets, loss_fn)
    assert not squeezed.details.get("shapes_differ") and squeezed.details["kind"] == flat.details["kind"]
    assert (squeezed.status, squeezed.summary) == (flat.status, flat.summary)


@pytest.mark.parametrize("output, targets, loss_fn", [
    (torch.zeros(4, 1), torch.tensor([1.0, 0.0, 0.0, 1.0]), _squeezed(F.binary_cross_entropy_with_logits)),  # probe
    (torch.full((4, 3), 30.0) * torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0, 1, 2, 0]), F.cross_entropy),  # calming
])
def test_a_loss_fn_that_draws_random_numbers_leaves_the_rng_as_found(output, targets, loss_fn):
    # the shape probe and the calming scales call the user's loss_fn outside the model's preserved(): the RNG streams
    # must come back all the same
    def drawing(out, y):
        return loss_fn(out, y) + 0.0 * torch.rand(())
    before = torch.get_rng_state()
    _check(output, targets, drawing)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_loss_fn_that_refuses_the_output_in_the_targets_shape_keeps_the_shape_fail():
    def column_only(out, targets):  # written for (N, 1): broadcasts a (N,) target against it
        assert out.ndim == 2
        return F.mse_loss(out, targets)
    with pytest.warns(UserWarning):  # torch's own warning about the broadcast
        result = _check(torch.zeros(5, 1), torch.tensor([1.0, 0.0, 2.0, 1.0, 3.0]), column_only)
    assert result.status == "fail" and result.details["shapes_differ"]


def test_a_scalar_output_of_a_classification_task_is_a_skip():
    result = _check(torch.tensor(0.0), torch.tensor([1.0]).squeeze(), F.binary_cross_entropy_with_logits,
                    kind="classification")
    assert result.status == "skip", result.summary


@pytest.mark.parametrize("kind", [None, "regression"])
def test_a_zero_dim_regression_target_is_a_skip(kind):
    # a batch of one with its target as a bare number: there is no batch dimension to take a chance level over (this
    # raised an IndexError before)
    task = {"kind": kind} if kind else {}
    result = _check(torch.zeros(1, 1), torch.tensor(0.5), lambda out, y: F.mse_loss(out.squeeze(), y), **task)
    assert result.status == "skip", result.summary


@pytest.mark.parametrize("offset_in_tolerances, soft", [(1.0, False), (0.999, True)])
def test_a_loss_fn_scoring_an_all_zero_output_exactly_a_thousandth_of_ln_c_off_is_not_cross_entropy(
        offset_in_tolerances, soft):
    # 855 classes: ln 855 + 1e-3 x ln 855 is a double, so the all-zero score lands exactly on the (strict) tolerance
    n = 855
    tolerance = 1e-3 * init_loss.ln(n)
    targets = F.one_hot(torch.tensor([0, 1]), n).double()
    result = _check(torch.zeros(2, n, dtype=torch.float64), targets,
                    lambda out, y: F.cross_entropy(out, y) + offset_in_tolerances * tolerance)
    if offset_in_tolerances == 1.0:
        assert result.details["zero_output_loss"] - init_loss.ln(n) == tolerance
    assert (result.details["kind"] == "classification (inferred: soft labels)") == soft


def test_0_1_targets_of_a_model_with_a_tuple_output_are_classes_when_the_task_says_classification():
    # a tuple output has no all-zero twin to score, so the task kind alone says the loss is a logits loss
    targets = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    result = _check(torch.zeros(2, 2), targets, lambda out, y: F.binary_cross_entropy_with_logits(out[0], y),
                    wrap=lambda logits: (logits, logits.sum()), kind="classification")
    assert result.details["zero_output_loss"] is None
    assert result.details["kind"] == "classification" and result.details["chance"] == pytest.approx(math.log(2))


@pytest.mark.parametrize("output, targets, loss_fn, given", [
    (torch.zeros(4, 3), torch.tensor([0, 1, 2, 1]), F.cross_entropy, "classification"),
    (torch.zeros(4, 2), torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]),
     F.binary_cross_entropy_with_logits, "classification"),
    (torch.zeros(4, 1), torch.tensor([[0.5], [1.5], [-1.0], [2.0]]), F.mse_loss, "regression"),
])
def test_the_task_kind_given_is_reported_as_given_and_an_inferred_one_says_so(output, targets, loss_fn, given):
    assert _check(output, targets, loss_fn, kind=given).details["kind"] == given
    assert _check(output, targets, loss_fn).details["kind"].startswith(f"{given} (inferred")


def test_one_hot_rows_under_cross_entropy_are_soft_labels():
    targets = F.one_hot(torch.tensor([0, 2, 1, 2]), 3).float()  # probability rows with exact zeros
    result = _check(torch.zeros(4, 3), targets, F.cross_entropy)
    assert result.details["kind"] == "classification (inferred: soft labels)"
    assert result.details["chance"] == pytest.approx(math.log(3))


def test_cross_entropy_over_a_single_column_of_ones_fails_as_one_class():
    # a softmax over one output is 1: the loss is 0 whatever the model does (before, this was read as regression
    # targets of mean 1 and warned about their mean)
    result = _check(torch.randn(8, 1, generator=torch.Generator().manual_seed(0)), torch.ones(8, 1), F.cross_entropy)
    assert result.details["num_classes"] == 1
    assert result.status == "fail", result.summary


@pytest.mark.parametrize("second, soft", [(0.5005, True), (0.50105, False)])
def test_rows_summing_to_one_within_a_thousandth_are_soft_labels_and_beyond_it_not(second, soft):
    targets = torch.tensor([[0.5, second], [0.5, 0.5]], dtype=torch.float64)
    result = _check(torch.zeros(2, 2, dtype=torch.float64), targets, F.cross_entropy)
    assert (result.details["kind"] == "classification (inferred: soft labels)") == soft
