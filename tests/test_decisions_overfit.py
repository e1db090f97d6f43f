"""overfit_one_batch's budgets and thresholds at their boundaries (found by mutation testing): the step budget, the
target, flat, one objective or two draws, the lr schedule's horizon, blocked rows, LBFGS's steps, the loss floor's descent."""
import torch

import overfit_one_batch
from test_verdicts import overfit


def _linear_case(loss_fn, **extra):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
    return overfit_one_batch.validate_case({"model": model, "batch": (torch.ones(8, 2), torch.zeros(8, 1)),
                                            "loss_fn": loss_fn, **extra})


def test_a_detached_loss_reports_the_default_budget_of_300_steps_and_a_target_of_5_percent_of_its_start():
    # a loss that depends on no parameter fails before any step, with the budget and target it would have used
    result = overfit(_linear_case(lambda output, targets: torch.tensor(2.0)))
    assert result.status == "fail" and result.details["failure"] == "flat"
    assert result.details["steps_budget"] == 300
    assert abs(result.details["target"] - 0.1) < 1e-12


def test_two_draws_differing_by_just_over_a_ten_thousandth_of_the_loss_sample_noise():
    # the check draws under seed 0 and then seed 1: this loss moves by 1.05e-4 of itself between them (SAME_LOSS 1e-4)
    def drifting(output, targets):
        return torch.tensor(1.0 + 1.05e-4 * torch.initial_seed(), dtype=torch.float64)
    result = overfit(_linear_case(drifting))
    assert result.details["samples_noise"] is True


def test_a_loss_that_moved_just_over_one_percent_of_its_start_is_a_plateau_not_flat():
    assert overfit_one_batch._classify([1.0, 0.9895]) == "plateau"


def test_the_lr_schedule_peak_is_taken_over_its_first_10000_steps_only():
    # a factor of 2 at step 10,000 is past the horizon: the sprint keeps the optimizer's own lr
    case = _linear_case(torch.nn.functional.mse_loss, optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
                        task={"lr_schedule": lambda step: 2.0 if step == 10_000 else 1.0})
    inputs, targets = case["batch"]
    _, optimizer, stop = overfit_one_batch._train(case, case["model"], inputs, targets, 1.0, 0, -1.0)
    assert stop == "budget" and optimizer.param_groups[0]["lr"] == 0.1


def test_a_row_whose_gradient_is_just_over_a_thousandth_of_the_median_is_not_blocked():
    # loss = w * x with w = 1: each row's gradient norm is its x; the median row's is 1
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    case = {"loss_fn": lambda output, targets: output.sum()}
    inputs = torch.tensor([[1.0], [1.0], [1.0], [0.00095], [0.00105]])
    blocked = overfit_one_batch._blocked_rows(case, model, inputs, torch.zeros(5, 1), 5, 0, 0.0)
    assert blocked == [3]


def test_an_optimizer_taking_a_closure_gets_25_steps():
    case = _linear_case(torch.nn.functional.mse_loss, optimizer=lambda params: torch.optim.LBFGS(params, lr=0.1))
    inputs, targets = case["batch"]
    losses, _, stop = overfit_one_batch._train(case, case["model"], inputs, targets, 1.0, 300, -1.0)
    assert stop == "budget" and len(losses) == 26  # steps 0 .. 25


def _free_losses():
    # a linear loss never settles: the free outputs take every step, each Adam step about the lr
    output = torch.zeros(3)
    return overfit_one_batch._free_descent({"loss_fn": lambda output, targets: output.sum()}, output, [output],
                                           torch.zeros(3), False)


def test_the_free_outputs_descend_for_300_steps():
    assert len(_free_losses()) == 301  # steps 0 .. 300


def test_the_free_outputs_first_step_is_an_lr_of_0_05():
    losses = _free_losses()
    assert abs(losses[1] - 3 * -0.05) < 1e-4  # three outputs, each moved down by the first step's lr


def test_free_outputs_whose_second_half_gave_just_over_one_percent_of_their_fall_claim_no_floor(monkeypatch):
    # losses[150] - losses[-1] is 1.05% of losses[0] - losses[-1]: not settled (SETTLED 1%)
    curve = [1.0] + [0.5] * 149 + [0.0105] + [0.005] * 149 + [0.0]
    monkeypatch.setattr(overfit_one_batch, "_free_descent", lambda *args: curve)
    assert overfit_one_batch._loss_floor({}, torch.zeros(3), torch.zeros(3)) is None


def test_the_control_run_may_take_twice_the_steps():
    case = _linear_case(torch.nn.functional.mse_loss, optimizer=lambda params: torch.optim.SGD(params, lr=1e-3))
    model = case["model"]
    initial = [(p, p.detach().clone()) for p in model.parameters()]
    details = {"target": -1.0}  # never reached: the control runs out of steps
    assert overfit_one_batch._memorises_own(case, model, initial, case["batch"], 5, details, False) is None
    assert len(details["control_losses"]) == 2  # the losses of steps 0 and 10: 2 x 5 steps


class _MeanOverEdges(torch.nn.Module):
    """Each node's features plus its neighbours', into 2 log-probabilities: a graph model over an edge list."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x, edges=None):
        if edges is not None:
            x = x + torch.zeros(x.shape[0], x.shape[0]).index_put((edges[0], edges[1]), torch.ones(edges.shape[1])) @ x
        return torch.log_softmax(self.lin(x), -1)


def _nll_case():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return {"model": _MeanOverEdges(), "loss_fn": lambda out, y: torch.nn.functional.nll_loss(out, y)}


def test_a_graph_whose_loss_reads_one_node_is_cut_to_it_and_its_neighbours():
    case = _nll_case()
    x, edges = torch.randn(8, 3), torch.tensor([[1, 2, 5, 6, 7], [5, 3, 6, 7, 0]])  # 1-5, 2-3, 5-6, 6-7, 7-0
    targets = torch.tensor([-100, 1, -100, -100, -100, -100, -100, -100])  # the loss reads node 1 only
    cut = overfit_one_batch._subgraph(case, case["model"], (x, edges), targets, 8, rows=8)
    assert cut is not None and cut[2] == {"nodes": 2, "of": 8, "read": 1, "hops": 1}, cut  # nodes 1 and 5


def test_inputs_that_are_no_graph_over_the_batch_rows_are_not_cut():
    # task["graph"] said so, but no input holds edges over these 8 rows: the batch is trained whole
    case = _nll_case()
    targets = torch.tensor([1, 0, -100, -100, -100, -100, -100, -100])
    assert overfit_one_batch._subgraph(case, case["model"], torch.randn(8, 3), targets, 8, rows=8) is None
