"""capture's decisions pinned at their boundaries (mutation testing's survivors): rows selected twice, the reshape
before a row selection, and the second-step watch that tells whether a loop clears .grad."""
import torch
import torch.nn.functional as F

import capture


def test_selected_rows_are_none_when_a_row_is_selected_twice():
    whole = torch.randn(6, 3, requires_grad=True)
    assert capture._selected_rows(whole[torch.tensor([4, 1])]).tolist() == [4, 1]
    assert capture._selected_rows(whole[torch.tensor([4, 4])]) is None  # a row twice weighs twice: no ignore_index replay


def _selection_suffixes(out, pred):
    return [(prefix, suffix) for prefix, suffix, _ in capture._selection_recipes(out, pred)]


def test_selection_recipes_reshape_only_an_output_with_more_dims_than_the_selected_rows():
    flat = [("", ""), ("", ".reshape(-1, 4)"), ("log_softmax", ""), ("log_softmax", ".reshape(-1, 4)")]
    assert _selection_suffixes(torch.randn(2, 5, 4), torch.randn(3, 4)) == flat  # token classification's view(-1, V)
    # As many dims as the selected rows (node classification's output[idx]): the rows are the output's own.
    assert _selection_suffixes(torch.randn(6, 4), torch.randn(3, 4)) == [("", ""), ("log_softmax", "")]


class _WithUnusedHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(3, 3)
        self.unused = torch.nn.Linear(3, 3)  # never called: its .grad stays None at every step

    def forward(self, x):
        return self.body(x)


def _train(model, micro_batches=1, scale=1.0, second_backward=True):
    """Two steps, each after zero_grad() (set_to_none) and `micro_batches` accumulated backward() calls."""
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        optimizer.zero_grad()
        for _ in range(micro_batches if step == 0 or second_backward else 0):
            x = torch.randn(4, 3, generator=generator)
            (scale * F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0]))).backward()
        optimizer.step()


def test_second_step_calls_grads_cleared_across_two_accumulated_micro_batches_of_small_gradients():
    # The sum of fresh gradients restarts only at a .grad found cleared, not at the first micro-batch's; the gradients
    # are scaled so that .grad's norm at the second step is under 1: any nonzero norm is fitted.
    case = capture.capture_case(_train, torch.nn.Linear(3, 3), micro_batches=2, scale=0.01, second_step=True)
    assert case["loop"]["grads"] == "cleared"
    assert case["loop"]["grads_residuals"]["cleared"] < capture.GRADS_FIT


def test_second_step_leaves_out_a_parameter_that_got_no_gradient_at_the_first_step():
    case = capture.capture_case(_train, _WithUnusedHead(), second_step=True)
    assert case["loop"]["grads"] == "cleared"


def test_second_step_on_no_gradient_at_all_fits_neither_hypothesis():
    # The second step comes after zero_grad() and no backward(): .grad is all zeros, nothing to fit.
    case = capture.capture_case(_train, torch.nn.Linear(3, 3), second_backward=False, second_step=True)
    assert case["loop"]["grads"] is None and case["loop"]["grads_residuals"] is None
