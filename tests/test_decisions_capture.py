"""capture's decisions pinned at their boundaries (mutation testing's survivors): the calls it remembers, the copies,
mode-dependent modules, terms beside the loss, loss-input recipes, selected rows and the cleared-grads fit."""
import pytest
import torch
import torch.nn.functional as F

import capture


def _step_after_later_calls(model, later_calls):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0]))
    for _ in range(later_calls):
        model(x)  # a validation pass without no_grad, between the loss and its backward()
    loss.backward()
    optimizer.step()


def test_capture_remembers_the_model_call_behind_seven_later_calls_but_not_eight():
    model = torch.nn.Linear(3, 3)
    assert capture.capture_case(_step_after_later_calls, model, 7)["model"] is model
    with pytest.raises(capture.CaptureError):  # KEPT_CALLS = 8: the loss's own call fell out of the window
        capture.capture_case(_step_after_later_calls, model, 8)


def test_copy_detaches_every_tensor_in_a_dict_list_and_tuple_once():
    t = torch.ones(2, requires_grad=True) * 2
    copied = capture._copy({"a": t, "b": [t, (t, 3)]}, {})
    assert copied["a"] is not t and copied["a"].grad_fn is None and torch.equal(copied["a"], t.detach())
    assert copied["b"][0] is copied["a"] and copied["b"][1][0] is copied["a"]  # one copy per tensor
    assert isinstance(copied["b"], list) and copied["b"][1] == (copied["a"], 3)


@pytest.mark.parametrize("module, dependent", [
    (torch.nn.Dropout(0.0), False),  # p = 0 drops nothing in either mode
    (torch.nn.Dropout(0.1), True),
    (torch.nn.BatchNorm1d(3), True),
    (torch.nn.BatchNorm1d(3, track_running_stats=False), False),  # batch statistics in both modes
    (torch.nn.Linear(3, 3), False),
])
def test_mode_dependent_modules_are_dropout_with_p_over_zero_and_norms_with_running_stats(module, dependent):
    assert bool(capture._mode_dependent(module)) is dependent


def test_context_lists_the_mode_dependent_modules_left_in_eval():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(3))
    model[1].eval()
    context = capture._context(model)
    assert context["training"] is True and context["mode_dependent"] == 2 and context["in_eval"] == ["1"]


def test_other_terms_counts_a_penalty_beside_the_loss_and_nothing_for_a_call_output_without_a_graph():
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    call_output = F.mse_loss(w * x, torch.zeros(3))
    assert capture._other_terms(call_output, call_output) == 0
    assert capture._other_terms(call_output / 4, call_output) == 0  # a scale adds no term
    assert capture._other_terms(call_output + (w * x).abs().sum(), call_output) == 1
    # No graph under the call's output: nothing on top of it to count, even when the loss has branches of its own.
    assert capture._other_terms((w * x).sum() + (w * x).abs().sum(), torch.tensor(1.0)) == 0


def test_recipes_shift_only_for_a_loss_with_an_ignore_index():
    out = torch.randn(2, 5, 4)
    pred = out[:, :-1].reshape(-1, 4)  # what a shifted, flattened loss input looks like
    assert not any(shifted for _, _, shifted, _ in capture._recipes(out, pred, shift=False))
    assert any(shifted for _, _, shifted, _ in capture._recipes(out, pred, shift=True))


def test_recipes_flatten_only_an_output_of_another_shape():
    out = torch.randn(2, 5, 4)
    same = [(prefix, suffix) for prefix, suffix, _, _ in capture._recipes(out, out.clone(), shift=False)]
    assert same == [("", ""), ("log_softmax", "")]
    flat = [(prefix, suffix) for prefix, suffix, _, _ in capture._recipes(out, out.reshape(-1, 4), shift=False)]
    assert flat == [("", ""), ("", ".reshape(-1, 4)"), ("log_softmax", ""), ("log_softmax", ".reshape(-1, 4)")]


def test_selected_rows_are_read_through_a_log_softmax_over_each_row():
    whole = torch.randn(6, 3, requires_grad=True)
    rows = torch.tensor([4, 1])
    assert capture._selected_rows(torch.log_softmax(whole[rows], -1)).tolist() == [4, 1]
    assert capture._selected_rows(torch.log_softmax(whole[rows], 0)) is None  # over the rows: they mix
    tokens = torch.randn(6, 4, 3, requires_grad=True)  # 3 dims: 2 ** 64 - 1 is 0 mod 3, where -1 is the last dim
    assert capture._selected_rows(torch.log_softmax(tokens[rows], -1)).tolist() == [4, 1]
    assert capture._selected_rows(torch.log_softmax(tokens[rows], -3)) is None


def _step_on_selected_rows_log_softmaxed(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows = torch.tensor([4, 1])
    F.nll_loss(F.log_softmax(model(torch.randn(6, 3))[rows], dim=-1), torch.tensor([0, 2])).backward()
    optimizer.step()


def test_capture_replays_an_nll_loss_on_rows_log_softmaxed_over_dim_minus_one_on_every_row():
    # torch hands log_softmax's dim -1 back as 2 ** 64 - 1: read as another dim, this was refused
    case = capture.capture_case(_step_on_selected_rows_log_softmaxed, torch.nn.Linear(3, 3))
    assert case["batch"][1].tolist() == [-100, 2, -100, -100, 0, -100]


def test_selected_rows_of_an_index_select_on_dim_0_only():
    whole = torch.randn(6, 3, requires_grad=True)
    rows = torch.tensor([4, 1])
    assert capture._selected_rows(whole.index_select(0, rows)).tolist() == [4, 1]
    assert capture._selected_rows(whole.index_select(-2, rows)).tolist() == [4, 1]  # dim -2 comes back as 2 ** 64 - 2
    assert capture._selected_rows(whole.index_select(1, torch.tensor([2, 0]))) is None
    assert capture._selected_rows(whole.index_select(-1, torch.tensor([2, 0]))) is None


def test_selected_rows_are_none_for_single_elements_picked_by_two_index_lists():
    whole = torch.randn(6, 3, requires_grad=True)
    assert capture._selected_rows(whole[torch.tensor([4, 1])]).tolist() == [4, 1]
    assert capture._selected_rows(whole[torch.tensor([4, 1]), torch.tensor([0, 2])]) is None


def _grads_verdict(kept, fresh):
    captured = capture.Capture("test")
    captured.case = {"model": torch.nn.Linear(1, 1), "loop": {}}
    captured._watch = {"hooks": [], "weights": []}  # the first step's watch, with nothing to undo
    captured._end_watch((kept, fresh))
    return captured.case["loop"]["grads"]


def test_second_step_fit_calls_grads_cleared_or_kept_only_under_the_residual_limit():
    # GRADS_FIT = 1e-3: the fitting hypothesis must miss by less; the other by more than ten times that.
    assert _grads_verdict(0.5, 0.95e-3) == "cleared"
    assert _grads_verdict(0.5, 1.05e-3) is None
    assert _grads_verdict(0.95e-3, 0.0105) == "kept"
    assert _grads_verdict(1.05e-3, 0.5) is None
