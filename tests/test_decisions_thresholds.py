"""Thresholds pinned at their boundary (issue 27, part 3): mutants that tools/mutate.py --map found surviving, each
killed by a direct, in-process call that puts a number exactly at a limit and just past it."""
import math

import pytest
import torch

import bad_samples
import batch_independence
import batchnorm
import causal_dependency
import data_sanity
import gradient_flow
import init_loss
import init_scale
import input_dependence
import label_alignment
import labels
import loss_surface
import metric_stuck
import monitor
import nan_watch
import pinn_check
import registration
import training_loop
import update_ratio
from ml_debug_contract import graph_edges

CLEAN = {"top_char": 0.1, "run": 3, "zlib": 0.5, "symbols": 0.1, "control": 0.0}


@pytest.mark.parametrize("number, at_limit, past_limit", [
    ("top_char", 0.5, 0.52),  # TOP_CHAR: more than half the sample is one character
    ("run", 199, 200),  # RUN: a run of 200 or more repeats
    ("zlib", 0.1, 0.09),  # ZLIB: compresses below a tenth
    ("symbols", 0.5, 0.52),  # SYMBOLS
    ("control", 0.01, 0.011),  # CONTROL
])
def test_bad_samples_flags_a_number_just_past_its_limit_and_not_one_at_it(number, at_limit, past_limit):
    assert bad_samples.reasons(CLEAN) == {}
    assert number not in bad_samples.reasons({**CLEAN, number: at_limit})
    assert number in bad_samples.reasons({**CLEAN, number: past_limit})


def test_batch_independence_has_no_sequence_to_test_when_the_output_stops_before_that_dim():
    model = torch.nn.Linear(3, 1)
    inputs = torch.randn(4, 3)  # a dim 1 to poison, but the output (4,) has none: nothing to compare along it
    assert batch_independence._carries_a_sequence(model, inputs, torch.zeros(4), 1) is None


@pytest.mark.parametrize("change, moved", [(0.95e-5, False), (1e-5, False), (1.05e-5, True)])
def test_batch_independence_counts_a_row_as_changed_only_past_its_tolerance(change, moved):
    clean = torch.zeros(3, 2, dtype=torch.float64)  # outputs below 1: the tolerance is absolute, 1e-5
    poisoned = clean.clone()
    poisoned[2, 1] += change
    assert batch_independence._outputs_changed(clean, poisoned, [0, 2], 0) == ([2] if moved else [])


class _ReadsThePreviousRow(torch.nn.Module):
    """Each row plus `weight` times the row before it."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def forward(self, x):
        return x + self.weight * x.roll(1, 0)


@pytest.mark.parametrize("weight, leaks", [(0.95e-6, []), (1e-6, []), (1.05e-6, [0])])
def test_batch_independence_counts_a_gradient_as_a_leak_only_past_its_tolerance(weight, leaks):
    inputs = torch.ones(3, 2, dtype=torch.float64)  # float64: a gradient of exactly 1e-6 against row 1's own 1
    assert batch_independence._gradient_leaks(_ReadsThePreviousRow(weight), inputs, 3, 1, 0) == leaks


class _LooksAhead(torch.nn.Module):
    """Causal LM stand-in: (scale) times each position plus `ahead` times the last one."""

    def __init__(self, ahead, scale=1.0):
        super().__init__()
        self.ahead, self.scale = ahead, scale

    def forward(self, x):  # x: (B, T, F)
        return self.scale * (x + self.ahead * x[:, -1:])


def _causal(ahead, scale=1.0):
    inputs = torch.zeros(2, 4, 1, dtype=torch.float64)  # float64: a change or gradient of exactly the tolerance
    case = {"model": _LooksAhead(ahead, scale), "batch": (inputs, torch.zeros(2, 4)),
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "causal_lm"}}
    return causal_dependency.check_causal_dependency(case)


@pytest.mark.parametrize("ahead, perturb_leaks", [(0.95e-5, {}), (1e-5, {}), (1.05e-5, {3: [0, 1, 2]})])
def test_causal_dependency_counts_an_earlier_output_as_moved_only_past_its_tolerance(ahead, perturb_leaks):
    result = _causal(ahead)
    assert result.status == "fail"  # the gradient test sees the look-ahead at any size
    assert result.details["perturb_leaks"] == perturb_leaks


@pytest.mark.parametrize("ahead, status", [(0.95e-6, "pass"), (1e-6, "pass"), (1.05e-6, "fail")])
def test_causal_dependency_counts_a_future_gradient_only_past_its_tolerance(ahead, status):
    result = _causal(ahead)
    assert result.status == status
    assert result.details["perturb_leaks"] == {}  # far below the perturbation's tolerance: the gradient decides


def test_causal_dependency_judges_a_future_gradient_against_the_past_one_not_against_1():
    result = _causal(1e-3, scale=1e-4)  # outputs at 1e-4: the future gradient is 1e-7 absolute, 1e-3 of the past one
    assert result.status == "fail"
    assert result.details["gradient_leaks"] == {0: [3], 2: [3]}


@pytest.mark.parametrize("values, statuses", [
    ([10.5] * 4, ["wild"]),  # FAIL_SCALE: |mean| above 10 is far from normalised (the experiment decides fail or warn)
    ([10.0] * 4, ["warn"]),
    ([3.15] * 4, ["warn"]),  # WARN_SCALE: above 3
    ([3.0] * 4, []),
    ([0.0105, -0.0105] * 2, []),  # TINY_STD: a std below 0.01 around 0 looks normalised twice
    ([0.0095, -0.0095] * 2, ["warn"]),
])
def test_data_sanity_scale_findings_start_just_past_their_limits(values, statuses):
    assert [status for status, _ in data_sanity.scale_findings("x", torch.tensor(values))] == statuses


@pytest.mark.parametrize("length, status", [(2, "fail"), (1, "fail")])  # 1: one value per channel, torch refuses it
def test_batchnorm_fails_one_sample_with_as_few_as_two_values_per_channel(length, status):
    model = torch.nn.Sequential(torch.nn.Conv1d(3, 3, 1), torch.nn.BatchNorm1d(3))
    case = {"model": model, "batch": (torch.randn(1, 3, length), torch.zeros(1)), "loss_fn": lambda out, y: out.sum()}
    result = batchnorm.check_batchnorm(case)
    assert result.status == status
    assert [c["samples"] for c in result.details["calls"]] == [1]


class Quiet(torch.nn.Module):
    """The model's outputs times 1e-7: every gradient 1e-7 of what it was, leaks included."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) * 1e-7


def test_batch_independence_weighs_a_gradient_leak_against_the_rows_own_gradient():
    """GRAD_TOLERANCE is relative: a leaky model whose gradients are all tiny still shows its gradient leaks."""
    loud = batch_independence.check_batch_independence(batch_independence.make_demo_case(broken=True))
    case = batch_independence.make_demo_case(broken=True)
    case["model"] = Quiet(case["model"])
    quiet = batch_independence.check_batch_independence(case)
    assert quiet.status == loud.status == "fail"
    assert quiet.details["gradient_leaks_from"] == loud.details["gradient_leaks_from"] != []


@pytest.mark.parametrize("targets, status", [([0.0, 1.0] * 8, "pass"), ([0.3, 0.7] * 8, "skip")])
def test_labels_reads_float_targets_of_only_0_and_1_as_two_classes(targets, status):
    """BCEWithLogits takes its classes as floats: 0/1 are two classes to count, soft 0.3/0.7 targets are none."""
    y = torch.tensor(targets).unsqueeze(1)
    case = {"model": torch.nn.Linear(4, 1), "batch": (torch.randn(16, 4), y),
            "loss_fn": torch.nn.functional.binary_cross_entropy_with_logits, "task": {"kind": "classification"}}
    result = labels.check_labels(case)
    assert result.status == status
    if status == "pass":
        assert (result.details["counts"], result.details["majority_fraction"]) == ({0: 8, 1: 8}, 0.5)
        assert result.details["ignore_index"] is None  # BCE has none


class Tempered(torch.nn.Module):
    """Logits divided by a temperature given as a 0-d tensor beside the batch (a diffusion timestep looks alike)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x, temperature):
        return self.linear(x) / temperature


def test_input_dependence_perturbs_a_0_d_input_by_its_value():
    """A 0-d tensor has no rows to roll: it gets a random value in its range, and counts as an input of its own."""
    case = {"model": Tempered(), "batch": ({"x": torch.randn(8, 4), "temperature": torch.tensor(2.0)}, torch.zeros(8).long()),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification", "num_classes": 3}}
    result = input_dependence.check_input_dependence(case)
    assert result.status == "pass" and set(result.details["per_input"]) == {"x", "temperature"}
    assert result.details["per_input"]["temperature"] > 0


class TargetAsInput(torch.nn.Module):
    """model(x=..., y=...): y is the loss's target, handed to the model by keyword."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x, y):
        return self.linear(x).squeeze(-1), y


def test_data_sanity_reads_a_target_the_model_takes_by_name_as_a_target():
    """task["target_inputs"] names inputs['y'] a target: a regression target at 1000 is no input far from normalised."""
    y = torch.randn(16, generator=torch.Generator().manual_seed(0)) * 100 + 1000
    case = {"model": TargetAsInput(), "batch": ({"x": torch.randn(16, 4), "y": y}, y),
            "loss_fn": lambda out, t: torch.nn.functional.mse_loss(out[0], t),
            "task": {"kind": "regression", "target_inputs": ["y"]}}
    assert data_sanity.check_data_sanity(case).status == "pass"


class KeywordBatchNorm(torch.nn.Module):
    """Calls its BatchNorm by keyword (bn(input=x)): a forward pre-hook sees no positional argument."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv1d(3, 3, 1), torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(input=self.conv(x))


@pytest.mark.parametrize("rows, status", [(1, "fail"), (8, "pass")])
def test_batchnorm_reads_an_input_given_by_keyword(rows, status):
    case = {"model": KeywordBatchNorm(), "batch": (torch.randn(rows, 3, 4), torch.zeros(rows)), "loss_fn": lambda out, y: out.sum()}
    result = batchnorm.check_batchnorm(case)
    assert result.status == status
    assert [c["input"] for c in result.details["calls"]] == [[rows, 3, 4]]


def _biased_against_the_target(ratio):
    """A 10-class classifier whose loss at init is `ratio` x chance: its bias holds the target class down."""
    loss, down = ratio * math.log(10), 1.0
    for _ in range(100):  # cross-entropy of logits (-down, 0, ..., 0) at class 0 is down + log(9 + e^-down)
        down = loss - math.log(9 + math.exp(-down))
    model = torch.nn.Linear(4, 10)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
        model.bias[0] = -down
    return {"model": model, "batch": (torch.randn(16, 4), torch.zeros(16, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification"}}


@pytest.mark.parametrize("ratio, status", [(1.45, "pass"), (1.55, "fail")])  # HIGH_RATIO: 1.5x chance
def test_init_loss_takes_a_loss_just_above_1_5x_chance_to_the_too_large_experiment(ratio, status):
    result = init_loss.check_init_loss(_biased_against_the_target(ratio))
    assert result.details["ratio_to_chance"] == pytest.approx(ratio, rel=1e-4)
    assert result.status == status


def _knows_the_labels(labels):
    """A 2-class model whose input is its label one-hot and whose weight reads it back: logits 10 apart at init."""
    y = torch.tensor(labels)
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(10 * torch.eye(2))
    return {"model": model, "batch": (torch.nn.functional.one_hot(y, 2).float(), y),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification", "num_classes": 2}}


@pytest.mark.parametrize("labels", [[0, 1] * 8, [0] * 15 + [1]])
def test_init_loss_warns_a_loss_below_the_best_blind_guess_of_under_one_nat(labels):
    """Two classes: the best input-blind loss is the labels' entropy, ln 2 = 0.69 balanced, 0.23 with one 1 in 16
    (a class seen once counts): a loss far under it at init is a warn (the model may already know the targets)."""
    counts = torch.bincount(torch.tensor(labels)).double() / len(labels)
    result = init_loss.check_init_loss(_knows_the_labels(labels))
    assert result.details["best_constant"] == pytest.approx(float(-(counts * counts.log()).sum()), rel=1e-9)
    assert result.details["best_constant"] < 1
    assert result.status == "warn" and result.details["ratio_to_best_constant"] < 0.01


def test_init_loss_reads_probability_rows_under_cross_entropy_as_soft_labels():
    """Targets that are rows of probabilities, scored by cross-entropy: 4 classes, chance ln 4, and the best blind
    guess the entropy of their mean row; not a regression of 64 numbers."""
    targets = torch.softmax(torch.randn(16, 4, generator=torch.Generator().manual_seed(0)) * 2, -1)
    case = {"model": torch.nn.Linear(6, 4), "batch": (torch.randn(16, 6), targets), "loss_fn": torch.nn.functional.cross_entropy}
    result = init_loss.check_init_loss(case)
    mean = targets.mean(0).double()
    assert (result.details["kind"], result.details["num_classes"], result.details["n_targets"]) == (
        "classification (inferred: soft labels)", 4, 16)
    assert result.details["chance"] == pytest.approx(math.log(4))
    assert result.details["best_constant"] == pytest.approx(float(-(mean * mean.log()).sum()), rel=1e-6)


def test_update_ratio_fails_weights_that_move_under_a_millionth_of_their_norm():
    """SGD at lr 1e-6 on a small MLP: each weight moves ~1e-7 of its norm per step, under LOW_FAIL (1e-6), and still
    moves (no update lost to rounding): the lr is too low, a fail naming both weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        batch = (torch.randn(32, 8), torch.randint(0, 3, (32,)))
    case = {"model": model, "batch": batch, "loss_fn": torch.nn.functional.cross_entropy,
            "optimizer": lambda params: torch.optim.SGD(params, lr=1e-6)}
    result = update_ratio.check_update_ratio(case)
    assert result.status == "fail" and "lr too low" in result.summary
    assert all(0 < r < update_ratio.LOW_FAIL for r in result.details["ratios"].values())


def test_update_ratio_says_where_an_overshooting_loss_ended_when_it_came_down_from_its_peak():
    result = update_ratio.check_update_ratio(update_ratio.make_demo_case(broken=True))
    arm = result.details["overshoot"]["1x"]
    assert result.status == "fail" and arm["after"] != arm["highest"]
    assert f"up to {arm['highest']:.4g} (ending at {arm['after']:.4g}), where 0.1x" in result.summary


def _linear_at(ratio):
    """A Linear(100, 10) whose weight std is `ratio` x 1/sqrt(fan_in)."""
    model = torch.nn.Linear(100, 10)
    with torch.no_grad():
        w = torch.randn(10, 100, generator=torch.Generator().manual_seed(0))
        model.weight.copy_((w - w.mean()) / w.std() * ratio / 10)
    return {"model": model, "batch": (torch.randn(4, 100), torch.zeros(4, 10)), "loss_fn": torch.nn.functional.mse_loss}


@pytest.mark.parametrize("ratio, status", [(1.9, "pass"), (2.1, "fail")])  # TOO_BIG: 2x 1/sqrt(fan_in)
def test_init_scale_fails_a_weight_just_above_twice_the_fan_in_reference(ratio, status):
    result = init_scale.check_init_scale(_linear_at(ratio))
    assert result.details["layers"][0]["ratio"] == pytest.approx(ratio, rel=1e-5)
    assert result.status == status
    assert "more layers" not in result.summary  # one layer: no "(+0 more layers above 2x)"


@pytest.mark.parametrize("fraction, offset", [(0.95, 1), (0.9, 1), (0.85, None)])  # MATCH: 90% of the positions
def test_label_alignment_takes_an_offset_that_explains_90_percent_of_the_targets(fraction, offset):
    assert label_alignment.best({0: 0.01, 1: fraction}) == offset


class _DeadUnits(torch.nn.Module):
    """An MLP whose first layer has `dead` of its 10 ReLU units never positive (a bias far below any input)."""

    def __init__(self, dead):
        super().__init__()
        self.hidden, self.relu, self.head = torch.nn.Linear(4, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3)
        with torch.no_grad():
            self.hidden.bias[:dead] = -100.0

    def forward(self, x):
        return self.head(self.relu(self.hidden(x)))


@pytest.mark.parametrize("dead, status", [(9, "fail"), (5, "warn")])  # DEAD_FAIL 90%, DEAD_WARN 50%: at the line
def test_gradient_flow_judges_a_relu_layer_of_an_mlp_exactly_at_its_dead_fraction(dead, status):
    torch.manual_seed(0)
    case = {"model": _DeadUnits(dead), "batch": (torch.randn(16, 4), torch.randint(0, 3, (16,))),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = gradient_flow.check_gradient_flow(case)
    assert result.status == status and result.details["dead_relu"] == {"relu": dead / 10}


@pytest.mark.parametrize("rows, status", [(16, "fail"), (15, "pass")])  # MIN_LABELS: 16 labels before a batch is judged
def test_labels_judges_a_batch_of_one_class_from_16_labels(rows, status):
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(4, 3), "batch": (torch.randn(rows, 4), torch.zeros(rows, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification", "num_classes": 3}}
    assert labels.check_labels(case).status == status


def test_labels_finds_the_class_dim_of_a_segmentation_output_against_per_pixel_targets():
    assert labels.class_dim(torch.zeros(2, 3, 4, 5), torch.zeros(2, 4, 5, dtype=torch.long)) == 1
    assert labels.class_dim(torch.zeros(2, 3, 4, 5), torch.zeros(2, 4, 6, dtype=torch.long)) is None
    assert labels.class_dim(torch.zeros(2, 3, 5), torch.zeros(2, 5, dtype=torch.long)) == 1  # (B, C, L) against (B, L)


def test_label_alignment_reads_a_segmentation_output_by_its_class_dim():
    import label_alignment
    torch.manual_seed(0)
    pixels, labels = torch.randn(2, 2, 4, 5), torch.randint(0, 3, (2, 4, 5))
    labels[:, 0, :] = -100  # the top row of every image is not scored
    case = {"model": torch.nn.Conv2d(2, 3, 1), "batch": (pixels, labels), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification"}}
    result = label_alignment.check_label_alignment(case)
    assert result.status == "pass" and result.summary.startswith("30 of 40 positions scored"), result.summary


def test_a_graph_of_two_nodes_is_a_graph_and_one_node_is_not():
    nodes, adjacency = torch.randn(2, 3), torch.ones(2, 2)
    assert graph_edges((nodes, adjacency)) == (2, [adjacency])
    assert graph_edges((torch.randn(1, 3), torch.ones(1, 1))) == (0, [])


def test_the_monitor_table_shows_three_steps_either_side_and_every_20th_before():
    records = [{"step": step, "loss": 1.0} for step in range(60, 110)]
    shown = [int(line.split()[0]) for line in monitor._table(records, 100).splitlines()[1:]]
    assert shown == [80, 97, 98, 99, 100, 101, 102, 103]


def _pinn(terms, domain=((0.0, 1.0),)):
    torch.manual_seed(0)
    points = torch.rand(256, 1)
    return {"model": pinn_check.MLP(), "collocation": points, "domain": list(domain),
            "terms": {name: (lambda net, k=k: k * net(points).pow(2).mean()) for name, k in terms.items()}}


@pytest.mark.parametrize("scale, status", [(105.0, "fail"), (95.0, "pass")])  # IMBALANCE: 100x
def test_pinn_check_calls_a_term_pulling_just_over_100x_harder_an_imbalance(scale, status):
    result = pinn_check.check_pinn(_pinn({"residual": scale, "boundary": 1.0}))
    assert result["status"] == status and result["details"]["imbalance"] == pytest.approx(scale)


def test_pinn_check_takes_a_problem_of_one_term_and_refuses_a_domain_without_width():
    assert pinn_check.check_pinn(_pinn({"residual": 1.0}))["status"] == "pass"
    with pytest.raises(pinn_check.ProblemError, match="low < high"):
        pinn_check.check_pinn(_pinn({"residual": 1.0}, domain=((1.0, 1.0),)))


class _Overflows(torch.nn.Module):
    """Twelve Linear layers; the eleventh multiplies by inf."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(12))

    def forward(self, x):
        for k, layer in enumerate(self.layers):
            x = layer(x) * (math.inf if k == 10 else 1.0)
        return x


def test_nan_watch_reports_the_last_8_frames_up_to_the_first_nan_or_inf():  # FRAMES: 8
    case = {"model": _Overflows(), "batch": (torch.randn(2, 3), torch.zeros(2, 3)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = nan_watch.check_nan_watch(case)
    assert result.status == "fail" and len(result.details["frames"]) == 8


@pytest.mark.parametrize("ratio, status", [(0.95e-7, "fail"), (1.05e-7, "pass")])  # SATURATED_GRAD: 1e-7 x the loss
def test_metric_stuck_calls_a_sample_saturated_only_below_its_gradient_limit(ratio, status):
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    term = {"flat": lambda out, y: (ratio * out + 1).sum()}  # per sample: loss 1, gradient norm `ratio`
    problem = {"model": model, "batch": (torch.ones(4, 1), torch.zeros(4, 1)), "terms": term,
               "target_term": "flat", "metric": lambda out, y: 0.0, "goal": "min", "best": 0.0}  # always at its best
    result = metric_stuck.check_metric_stuck(problem)
    assert (result["status"], result["details"].get("failed")) == (status, "gradient" if status == "fail" else None)


class _HoldsAList(torch.nn.Module):
    def __init__(self, items):
        super().__init__()
        self.items = items


def test_registration_walks_exactly_10000_values_of_a_models_containers():  # MAX_ITEMS
    last, beyond = torch.zeros(1), torch.zeros(1)
    model = _HoldsAList([0] * 9998 + [last, beyond])  # the list is value 1: its items are 2..10001
    assert [(where, obj) for where, obj, _ in registration.held_outside(model)] == [("items[9998]", last)]


def test_registration_looks_three_containers_deep():
    third, fourth = torch.zeros(1), torch.zeros(1)
    for items, where in [([[[third, [fourth]]]], "items[0][0][0]"), ({"a": {"b": {"c": third, "d": {"e": fourth}}}},
                                                                    "items['a']['b']['c']")]:
        assert [(at, obj) for at, obj, _ in registration.held_outside(_HoldsAList(items))] == [(where, third)]


class _OneUlp(torch.nn.Module):
    """1 + eps x its input: an input of 0/1 moves an output of 1.0 by one float32 step, or not at all."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))  # something for the optimizer to hold

    def forward(self, x):
        return 1.0 + torch.finfo(torch.float32).eps * x


def test_input_dependence_takes_a_change_just_above_half_a_rounding_step_as_a_change():  # ROUNDING: 0.5
    x = torch.tensor([0.0, 1.0] * 26 + [0.0] * 48).unsqueeze(1)  # rolled by one row, 52 of the 100 outputs move
    case = {"model": _OneUlp(), "batch": (x, torch.zeros(100)), "loss_fn": lambda out, y: out.sum()}
    result = input_dependence.check_input_dependence(case)
    assert result.details["relative_change"] == pytest.approx(0.52 * torch.finfo(torch.float32).eps, rel=1e-6)
    assert result.status == "warn"  # a weak dependence, not an output that ignores its input


@pytest.mark.parametrize("grid, code", [(4, 2), (5, 0), (401, 0), (402, 2)])  # 5 to 401 points per axis
def test_loss_surface_takes_a_grid_of_5_to_401_points_per_axis(grid, code, capsys):
    assert loss_surface.main(["--healthy", "--grid", str(grid), "--json"]) == code
    assert bool(capsys.readouterr().err) == (code == 2)


class _ModeScaled(torch.nn.Module):
    """Returns `base` (a fixed output) in eval mode and base * (1 + shift) + offset in train mode."""

    def __init__(self, base, shift=0.0, offset=0.0):
        super().__init__()
        self.register_buffer("base", torch.as_tensor(base, dtype=torch.float64))
        self.shift, self.offset = shift, offset

    def forward(self, x):
        return self.base * (1 + self.shift) + self.offset if self.training else self.base


@pytest.mark.parametrize("base, shift, offset, effect", [
    ([0.3, 0.4], 0.1, 0.0, 0.1),  # outputs of norm 0.5: relative to them, not to 1
    ([0.0, 0.0], 0.0, 0.5, 1.0),  # zero in its own mode, not in train mode: all of it moved
    ([0.0, 0.0], 0.0, 0.0, 0.0),  # zero in both: nothing moved (and no division by zero)
])
def test_training_loop_measures_the_mode_effect_relative_to_the_output(base, shift, offset, effect):
    case = {"model": _ModeScaled(base, shift, offset).eval(), "batch": (torch.zeros(2), torch.zeros(2)),
            "loss_fn": lambda out, y: out.sum()}
    assert training_loop._mode_effect(case) == pytest.approx(effect, rel=1e-6)  # measured in float32


@pytest.mark.parametrize("shift, status", [(0.00095, "pass"), (0.00105, "fail")])
def test_training_loop_fails_an_eval_mode_loop_only_past_a_0_1_percent_effect(shift, status):
    case = {"model": _ModeScaled([3.0, 4.0], shift).eval(), "batch": (torch.zeros(2), torch.zeros(2)),
            "loss_fn": lambda out, y: out.sum(),
            "loop": {"training": False, "in_eval": ["drop"], "mode_dependent": 1, "grads": "cleared",
                     "grads_residuals": {"cleared": 0.0, "kept": 1.0}}}
    assert training_loop.check_training_loop(case).status == status


@pytest.mark.parametrize("cut, status", [(0.85, "pass"), (0.6, "fail")])  # one column of 10 flat (10%), or two (20%)
def test_loss_surface_fails_a_plateau_only_past_10_percent_of_the_grid(cut, status):
    surface = {"loss": lambda a, b: torch.where(a > cut, torch.full_like(a, 5.0), a.abs() + b.abs()),
               "x_range": (-1.0, 1.0), "y_range": (-1.0, 1.0)}  # flat at 5 (above the minimum) where a > cut
    result = loss_surface.check_loss_surface(surface, n=10)
    assert result["details"]["plateau_share"] == pytest.approx(0.1 if cut > 0.8 else 0.2)
    assert result["status"] == status


def test_sweeps_t_is_the_mean_over_its_standard_error_and_infinite_only_without_spread():
    import sweeps
    assert sweeps.t_summary([1.0, 2.0, 3.0])["t"] == pytest.approx(2.0 / (1.0 / math.sqrt(3)))  # se 0.577: under 1
    assert sweeps.t_summary([2.0, 2.0])["t"] == math.inf and sweeps.t_summary([0.0, 0.0])["t"] == 0.0


@pytest.mark.parametrize("seeds, sized", [(2, False), (3, True)])
def test_sweeps_says_how_many_seeds_a_comparison_needs_from_3_pairs_on(seeds, sized):
    import sweeps
    rows = "lr,seed,acc\n" + "".join(f"{lr},{s},{0.8 + 0.01 * s + (0.02 + 0.01 * (s % 2) if lr == 0.2 else 0.0)}\n"
                                     for lr in (0.1, 0.2) for s in range(seeds))
    [comparison] = sweeps.analyze("sweep.csv", "lr", "seed", "acc", baseline="0.1", text=rows)["comparisons"]
    assert comparison["n_pairs"] == seeds and (comparison["seeds_needed"] is not None) == sized


def test_update_ratio_names_the_weight_furthest_from_1e_3_by_factor_either_way():
    import update_ratio
    assert update_ratio.furthest_from_target({"low": 2e-5, "high": 5.2e-2}) == "high"  # 52x over beats 50x under
    assert update_ratio.furthest_from_target({"low": 2e-5, "high": 4.8e-2}) == "low"  # 48x over loses to it


def test_labels_judges_balance_only_with_two_classes_or_more():
    import labels
    one_output = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(32, 3), torch.zeros(32, dtype=torch.long)),
                  "loss_fn": lambda out, y: out.sum(), "task": {"kind": "classification"}}
    assert labels.check_labels(one_output).status == "pass"  # every label is class 0 of 1: no imbalance to see
    two_outputs = {**one_output, "model": torch.nn.Linear(3, 2)}
    assert labels.check_labels(two_outputs).status == "fail"  # class 0 of 2 in all 32 rows


def test_init_scale_counts_the_other_layers_below_its_floor():
    import init_scale
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with torch.no_grad():
        model[0].weight.mul_(0.01)
        model[1].weight.mul_(0.01)
    result = init_scale.check_init_scale({"model": model, "batch": (torch.randn(4, 8), torch.zeros(4)),
                                          "loss_fn": lambda out, y: out.sum()})
    assert result.status == "warn" and "(+1 more below 0.1x)" in result.summary


def test_init_loss_reads_two_class_soft_labels_as_classification():
    import init_loss
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    case = {"model": model, "batch": (torch.randn(64, 4), torch.softmax(torch.randn(64, 2), -1)),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = init_loss.check_init_loss(case)
    assert (result.status, result.details["kind"]) == ("pass", "classification (inferred: soft labels)")


def _labels_of(model, targets):
    import labels
    return labels.check_labels({"model": model, "batch": (torch.randn(len(targets), 3), targets),
                                "loss_fn": lambda out, y: out.sum(), "task": {"kind": "classification"}})


def test_labels_skips_an_output_with_no_class_dimension_for_its_targets():
    assert _labels_of(torch.nn.Linear(3, 5), torch.zeros(8, 2, dtype=torch.long)).status == "skip"


@pytest.mark.parametrize("targets, reason", [
    ([1, 2, 3, 4] * 4, "1-indexed? subtract 1"),  # 1..4 of 4 classes
    ([0, 1, 2, 4] * 4, "too few outputs"),  # 4 of 4 classes: one past, not all shifted
    ([-1, 0, 1, 2] * 4, "negative labels are not ignore_index"),
])
def test_labels_out_of_range_says_which_mistake_it_looks_like(targets, reason):
    result = _labels_of(torch.nn.Linear(3, 4), torch.tensor(targets))
    assert result.status == "fail" and reason in result.summary, result.summary


def test_init_loss_fails_cross_entropy_over_one_output_class_and_skips_another_loss_there():
    """ln 1 = 0 is no chance level: cross-entropy over one class is 0 whatever the model says (it crashed here)."""
    import init_loss
    case = {"model": torch.nn.Linear(3, 1), "batch": (torch.randn(8, 3), torch.zeros(8, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy, "task": {"kind": "classification"}}
    result = init_loss.check_init_loss(case)
    assert (result.status, result.details["loss"], result.details["num_classes"]) == ("fail", 0.0, 1)
    other = init_loss.check_init_loss({**case, "loss_fn": lambda out, y: (out.squeeze(-1) - y).pow(2).mean() + 1})
    assert other.status == "skip"
    at_one = torch.nn.Linear(3, 1)
    with torch.no_grad():
        at_one.weight.zero_()
        at_one.bias.fill_(1.0)
    distance_to_one = {**case, "model": at_one, "loss_fn": lambda out, y: (out - 1).pow(2).mean()}
    assert init_loss.check_init_loss(distance_to_one).status == "skip"  # 0 here, but 1 on an all-zero output
