"""Decisions pinned at their boundaries (mutation testing's survivors): gradient_flow's depth ratio, init_loss's off-centre
trial, metric_stuck's saturated share and report, overfit_one_batch's rows read and noisy trace, each at its line."""
import torch

import gradient_flow
import init_loss
import metric_stuck
import overfit_one_batch


def test_gradient_flow_passes_a_depth_ratio_of_exactly_the_warn_limit():
    # y = w2 * w1 * x with w1 = 1, w2 = 10, x = 10 and loss y: |grad|/|w| is 100 for w1 and 1 for w2, exactly,
    # so the first/last ratio is DEPTH_WARN itself, which is not beyond it
    model = torch.nn.Sequential(torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.fill_(10.0)
    case = {"model": model, "batch": (torch.tensor([[10.0]]), torch.zeros(1, 1)), "loss_fn": lambda out, _: out.sum()}
    result = gradient_flow.check_gradient_flow(case)
    assert result.details["depth"]["ratio"] == gradient_flow.DEPTH_WARN
    assert result.status == "pass", result.summary


class _Bias(torch.nn.Module):
    """An input-blind output: one bias, starting at 0."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x * 0 + self.bias


def test_init_loss_warns_when_the_trial_ends_exactly_at_the_mean_shifted_start():
    # targets 0 and 4 (mean 2): chance 8 is above 1.5x the best constant's 4, so the trial runs; SGD at lr 0.5 moves the
    # bias from 0 to 2 in one step and stays there, so the trial ends at 4, exactly the loss of outputs shifted by the mean
    case = {"model": _Bias(), "batch": (torch.zeros(2, 1), torch.tensor([[0.0], [4.0]])),
            "loss_fn": torch.nn.functional.mse_loss, "optimizer": lambda params: torch.optim.SGD(params, lr=0.5),
            "task": {"kind": "regression"}}
    result = init_loss.check_init_loss(case)
    assert result.details["loss_after_trial"] == result.details["centred_loss"] == 4.0
    assert result.status == "warn", result.summary


def test_metric_stuck_fails_the_gradient_question_with_3_of_11_samples_saturated():
    # 3/11 = 0.273: more than a quarter (SATURATED_SHARE), though under 0.275
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.zero_()
    x = torch.tensor([[-1.0], [-2.0], [-3.0]] + [[float(k)] for k in range(1, 9)])  # the 3 negative ones: ReLU off
    mse = torch.nn.functional.mse_loss
    problem = {"model": model, "batch": (x, x.abs() + 1), "terms": {"mse": mse}, "target_term": "mse", "metric": mse,
               "goal": "min", "best": 0.0}
    result = metric_stuck.check_metric_stuck(problem)
    assert result["details"]["saturated_share"] == 3 / 11
    assert (result["status"], result["details"]["failed"]) == ("fail", "gradient"), result["summary"]


def test_metric_stuck_report_gives_the_gradient_cosine_when_it_was_measured(capsys):
    assert metric_stuck.main(["--healthy"]) == 0
    assert ", gradient cosine " in capsys.readouterr().out  # the healthy demo's L2 term shares every parameter


class _NodeScore(torch.nn.Module):
    """One score per node: a 1-D (n,) output."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


def test_overfit_one_batch_finds_the_rows_a_loss_reads_in_a_one_dimensional_output():
    read = torch.tensor([False, True, True, False, False, False, True, False])
    case = {"loss_fn": lambda out, y: (out - y)[read].pow(2).mean()}
    rows = overfit_one_batch._rows_read(case, _NodeScore(), torch.randn(8, 3), torch.ones(8), 8)
    assert rows.tolist() == [1, 2, 6]


def test_overfit_one_batch_traces_a_noisy_run_of_exactly_one_window_from_its_first_to_its_last_loss():
    losses = [10.0] + [1.0] * (overfit_one_batch.NOISE_WINDOW - 1)  # one window: no second mean to compare with
    assert overfit_one_batch._trace(losses, noisy=True) == "10 -> 1 in 9 steps"
