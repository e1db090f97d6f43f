"""overfit_one_batch's judging of a finished loss curve and of its outputs (probabilities, NLLLoss on them, stall, runaway,
jump, target reached), pinned at their boundaries: decisions found by mutation testing."""
import torch

import overfit_one_batch
from overfit_one_batch import _jumped, _looks_like_probabilities, _probabilities_into_nll, _ran_away, _reached, _stalled


def test_one_hot_rows_with_exact_zeros_look_like_probabilities():
    # a softmax saturated in float32 gives exact 0s: non-negative, not positive, is the test
    assert _looks_like_probabilities(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


def test_nll_on_probabilities_is_not_called_when_the_loss_is_not_minus_the_picked_mean():
    output = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    targets = torch.tensor([1, 0])
    assert _probabilities_into_nll(output, targets, -0.625)
    assert not _probabilities_into_nll(output, targets, 0.9)


def test_nll_on_probabilities_is_found_from_a_single_kept_row():
    output = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    assert _probabilities_into_nll(output, torch.tensor([1, -100]), -0.75)  # the -100 row is ignore_index's


def test_nll_on_probabilities_allows_a_difference_of_exactly_its_float_tolerance():
    # the picked probability is 0, so |-0.0 - 1e-4| is exactly the tolerance 1e-4 * max(1, |loss|)
    assert _probabilities_into_nll(torch.tensor([[1.0, 0.0]]), torch.tensor([1]), 1e-4)


def test_a_fall_of_exactly_flat_of_the_start_over_the_window_is_no_stall():
    # start 100: FLAT of it is exactly 1.0, and the window's fall 50 -> 49 is exactly 1.0
    losses = [100.0] + [50.0] * overfit_one_batch.STALL_WINDOW + [49.0]
    assert not _stalled(losses)
    assert _stalled(losses[:-1] + [49.5])


def test_a_noisy_run_of_exactly_window_plus_noise_steps_can_already_have_stalled():
    assert _stalled([1.0] * (overfit_one_batch.STALL_WINDOW + overfit_one_batch.NOISE_WINDOW), noisy=True)


def test_a_noisy_mean_fall_of_exactly_flat_of_the_start_is_no_stall():
    # first window's mean 100 (FLAT of it is 1.0), last window's mean 99: a fall of exactly 1.0
    noise, window = overfit_one_batch.NOISE_WINDOW, overfit_one_batch.STALL_WINDOW
    losses = [100.0] * noise + [99.5] * (window - noise) + [99.0] * noise
    assert not _stalled(losses, noisy=True)


def test_a_noisy_run_whose_mean_stands_at_exactly_runaway_times_its_start_has_run_away():
    noise = overfit_one_batch.NOISE_WINDOW
    assert _ran_away([1.0] * noise + [overfit_one_batch.RUNAWAY] * noise, noisy=True)


def test_the_first_loss_is_not_one_of_the_runaway_steps():
    # a start of 0 is the one start every later loss stands at RUNAWAY x of: only the length decides
    assert not _ran_away([0.0] * overfit_one_batch.RUNAWAY_STEPS)


def test_a_loss_at_exactly_runaway_times_its_start_has_jumped():
    assert _jumped([1.0, overfit_one_batch.RUNAWAY, 0.5])


def test_a_noisy_run_reaches_the_target_once_it_has_exactly_one_window_of_draws():
    assert _reached([0.01] * overfit_one_batch.NOISE_WINDOW, 0.05, noisy=True)


def test_a_loss_exactly_at_the_target_has_reached_it():
    assert _reached([1.0, 0.05], 0.05)
