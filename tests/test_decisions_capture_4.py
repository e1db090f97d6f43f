"""capture's decisions pinned at their boundaries (mutation testing's survivors): which calls it records, how it traces
the backward()'d tensor to a model and loss, and where it refuses with a reason instead of failing."""
import torch
import torch.nn.functional as F

import capture


def _traced(step):
    """Run step() (it returns the tensor a script would call backward() on) under capturing(); what _trace makes of it.

    No optimizer is built (the first SGD imports dynamo, 2 s): the trace is what the first backward() would record.
    """
    with capture.capturing("test", time_limit=0) as captured:
        return captured._trace(step())


class _LeafLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x):
        return torch.tensor(0.5)  # a loss made without a graph


class _LossAndAux(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x):
        h = self.linear(x)
        return {"loss": h.mean(), "aux": h.pow(2).mean()}


class _CrossEntropy(torch.nn.Module):
    """A loss written as a plain nn.Module (no _Loss subclass): no parameters."""

    def forward(self, pred, target):
        return F.cross_entropy(pred, target)


class _DictLoss(torch.nn.modules.loss._Loss):
    def forward(self, batch):
        return (batch["pred"] - batch["y"]).pow(2).mean()


def test_no_step_note_says_no_backward_only_when_none_ran():
    captured = capture.Capture("test")
    assert captured.no_step() == " (and no backward())"
    captured.backwards = 2
    assert captured.no_step().startswith(" (2 backward() calls and no torch.optim optimizer.step()")


def test_model_calls_under_no_grad_do_not_push_the_loss_call_out_of_the_window():
    # KEPT_CALLS = 8 calls are remembered: eight evaluation calls under no_grad would push the model call out.
    model = torch.nn.Linear(3, 3)

    def step():
        x = torch.randn(4, 3)
        loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0]))
        with torch.no_grad():
            for _ in range(capture.KEPT_CALLS):
                model(x)
        return loss

    assert _traced(step)["module"] is model


def test_a_loss_module_without_parameters_is_the_loss_even_when_not_a_torch_loss_class():
    model, loss_module = torch.nn.Linear(3, 3), _CrossEntropy()
    found = _traced(lambda: loss_module(model(torch.randn(4, 3)), torch.tensor([0, 1, 2, 0])))
    assert found["module"] is model and found["loss"][1] is loss_module


def test_backward_on_a_tensor_without_a_graph_is_refused_even_when_a_model_returned_it():
    model = _LeafLoss()
    assert isinstance(_traced(lambda: model(torch.randn(4, 3))), str)


def test_a_model_output_holding_several_scalars_gives_the_one_named_loss():
    model = _LossAndAux()

    def step():
        out = model(torch.randn(4, 3))
        return out["loss"] + out["aux"]  # both scalars reach backward()

    assert _traced(step)["path"] == ("loss",)


def test_a_loss_call_given_its_target_by_keyword_after_one_positional_input():
    model, y = torch.nn.Linear(3, 3), torch.tensor([0, 1, 2, 0])
    found = _traced(lambda: F.cross_entropy(model(torch.randn(4, 3)), target=y))
    assert found["module"] is model and found["loss"][4] is y


def test_a_loss_module_given_no_tensor_input_is_refused_with_a_reason():
    model, loss_module = torch.nn.Linear(3, 1), _DictLoss()
    assert isinstance(_traced(lambda: loss_module({"pred": model(torch.randn(4, 3)), "y": torch.zeros(4, 1)})), str)


def test_cross_entropy_on_selected_rows_with_soft_targets_is_not_replayed_on_every_row():
    # Class-probability targets are floats: no ignore_index can blank out the rows the loss did not read.
    model = torch.nn.Linear(3, 3)
    soft = torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    assert isinstance(_traced(lambda: F.cross_entropy(model(torch.randn(6, 3))[torch.tensor([4, 1])], soft)), str)


def test_rows_selected_past_the_end_of_the_model_output_are_refused_with_a_reason():
    # The loss reads row 4 of a tensor longer than the 4-row output: index 4 == len(output), out of its range.
    model = torch.nn.Linear(3, 3)

    def step():
        out = model(torch.randn(4, 3))
        padded = torch.cat([out, torch.zeros(2, 3)])
        return F.cross_entropy(padded[torch.tensor([4, 1])], torch.tensor([0, 2]))

    assert isinstance(_traced(step), str)


def test_a_leaf_input_that_requires_grad_is_captured():
    model = torch.nn.Linear(3, 3)
    x = torch.randn(4, 3, requires_grad=True)  # input gradients (adversarial training): made outside no module
    assert _traced(lambda: F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])))["module"] is model


def test_an_input_computed_with_gradients_outside_the_model_is_refused():
    model, embedding = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    assert isinstance(_traced(lambda: F.cross_entropy(model(embedding(torch.randn(4, 3))), torch.tensor([0, 1, 2, 0]))),
                      str)
