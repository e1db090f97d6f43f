"""Decisions pinned at their boundaries (mutation testing's survivors): each test puts one input exactly where the
original comparison and its mutant part, and asserts the decision."""
import torch

import bad_samples
import data_sanity
import init_loss
import init_scale
import inplace
import input_dependence
import label_alignment
import labels
import nan_watch
import overfit_one_batch


def test_bad_samples_measures_zlib_from_exactly_two_hundred_bytes():
    assert bad_samples.measure("ab" * 100)["zlib"] is not None  # 200 bytes: ZLIB_MIN_BYTES is inclusive
    assert bad_samples.measure("ab" * 100 + "a")["zlib"] is not None
    assert bad_samples.measure("ab" * 99 + "a")["zlib"] is None


def _regression_case(loss_fn, targets):
    model = torch.nn.Linear(3, 1)
    return {"model": model, "batch": (torch.randn(4, 3), targets), "loss_fn": loss_fn, "task": {"kind": "regression"}}


def test_init_loss_takes_a_loss_fn_scoring_zero_on_an_all_zero_output_as_no_scale():
    def scores_zero_at_zero(out, y):  # MSE, but 0 whenever the output is all zero
        return torch.nn.functional.mse_loss(out, y) * (out != 0).any()

    torch.manual_seed(0)
    result = init_loss.check_init_loss(_regression_case(scores_zero_at_zero, torch.randn(4, 1)))
    assert result.details["zero_output_loss"] == 0.0
    assert result.details["ratio_to_chance"] == result.details["loss"] / result.details["chance"]  # scale 1: not "off"


def test_init_loss_skips_all_zero_regression_targets_whose_chance_level_is_zero():
    torch.manual_seed(0)  # mean(targets**2) = 0: before, the ratio to it was None and the too-large verdict crashed
    for loss_fn in (torch.nn.functional.mse_loss, lambda out, y: torch.nn.functional.mse_loss(out, y) + 0.5):
        result = init_loss.check_init_loss(_regression_case(loss_fn, torch.zeros(4, 1)))
        assert result.status == "skip" and result.details["chance"] == 0.0


class _GateThenShiftedOutput(torch.nn.Module):
    """The demo's bug (gates halved in place after sigmoid saved them), then a harmless in-place shift of the (B, 3)
    output: an op of another shape, also at version 0, seen after the culprit."""

    def __init__(self):
        super().__init__()
        self.gate, self.out = torch.nn.Linear(4, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        g = torch.sigmoid(self.gate(x))
        g.mul_(0.5)
        out = self.out(g)
        out.add_(1.0)
        return out


def test_inplace_blames_the_op_of_the_saved_tensors_shape_and_version_not_a_later_one_of_the_same_version():
    torch.manual_seed(0)
    case = {"model": _GateThenShiftedOutput(), "batch": (torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = inplace.check_inplace(case)
    assert result.status == "fail"
    assert (result.details["culprit"]["op"], result.details["culprit"]["shape"]) == ("mul_", [5, 6])


def test_overfit_one_batch_takes_no_loss_floor_that_only_equals_the_target():
    # 128 x MSE clamped at 1: the start (w = 0) is 128 x 0.15625 = 20, the target 0.05 x 20 = 1.0 exactly, and free
    # outputs settle on the clamp's 1.0: a floor equal to the target. The model's best (one weight on inputs 1 and
    # 0.875) is 1.27: above the target, below the 1.95 a floor would loosen it to
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    case = {"model": model, "batch": (torch.tensor([[1.0], [0.875]]), torch.tensor([[0.5], [0.25]])),
            "loss_fn": lambda out, y: (128 * torch.nn.functional.mse_loss(out, y)).clamp(min=1.0),
            "optimizer": lambda params: torch.optim.SGD(params, lr=0.004)}
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert (result.details["start_loss"], result.details["target"]) == (20.0, 1.0)
    assert "loss_floor" not in result.details
    assert result.status == "skip"  # inconclusive: stalled above the target at your lr, diverged at 10x


def test_data_sanity_does_not_call_a_one_row_batch_a_repeated_example():
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(3, 2), "batch": (torch.randn(1, 3), torch.tensor([1])),
            "loss_fn": torch.nn.functional.cross_entropy}
    assert data_sanity.check_data_sanity(case).status == "pass"


class _TemperatureScaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x, temperature):
        return self.linear(x) / temperature


def test_data_sanity_looks_for_repeated_rows_only_in_inputs_that_have_a_batch_dimension():
    torch.manual_seed(0)  # a 0-d temperature beside the batch: no rows to compare
    case = {"model": _TemperatureScaled(), "batch": ((torch.randn(4, 3), torch.tensor(2.0)), torch.tensor([1, 0, 1, 0])),
            "loss_fn": torch.nn.functional.cross_entropy}
    assert data_sanity.check_data_sanity(case).status == "pass"


class _BiasPlusSlope(torch.nn.Module):
    """b + w * x in float64, so that the relative change comes out exact: rows x = -1, 1 rolled to 1, -1 change the
    output by 2w, and the mean |output| is b."""

    def __init__(self, w, b):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([w], dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.tensor([b], dtype=torch.float64))

    def forward(self, x):
        return self.b + self.w * x


def test_input_dependence_passes_a_dependence_that_grew_to_exactly_the_weak_limit():
    # w 0.125 -> 0.75 in 20 SGD steps of 2**-5 (the loss mean(output * y) has gradient -2**-5 in w, 0 in b):
    # relative change 0.25 / 150 at init, 1.5 / 150 = 0.01 = WEAK after; a weak dependence is one below WEAK
    case = {"model": _BiasPlusSlope(0.125, 150.0),
            "batch": (torch.tensor([[-1.0], [1.0]], dtype=torch.float64),
                      torch.tensor([[2 ** -5], [-2 ** -5]], dtype=torch.float64)),
            "loss_fn": lambda out, y: (out * y).mean(), "optimizer": lambda params: torch.optim.SGD(params, lr=1.0)}
    result = input_dependence.check_input_dependence(case)
    assert result.details["relative_change"] == input_dependence.WEAK
    assert result.details["relative_change_at_start"] < input_dependence.WEAK / input_dependence.GROWING
    assert result.status == "pass"


def _gpt2_style_stack():
    """Four 64x64 layers at std 0.02 (0.16x 1/sqrt(64)) and four residual projections at 0.02 / sqrt(2 x 2) (0.08x)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 64) for _ in range(8)]
    for i, layer in enumerate(layers):
        torch.nn.init.normal_(layer.weight, std=0.02 if i % 2 == 0 else 0.01)
    return torch.nn.Sequential(*layers)


def test_init_scale_takes_small_layers_for_residual_projections_only_strictly_within_the_tolerance(monkeypatch):
    case = {"model": _gpt2_style_stack(), "batch": (torch.randn(4, 64), torch.zeros(4, 64)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = init_scale.check_init_scale(case)
    assert result.status == "pass" and len(result.details["residual_scaled"]) == 4
    stds = sorted(row["std"] for row in result.details["layers"])
    level, rest = stds[0], stds[4:]  # the projections' lowest std; the median of the others
    at_tolerance = abs(float(torch.tensor(level * 4 ** 0.5 / rest[len(rest) // 2]).log()))
    monkeypatch.setattr(init_scale, "RESIDUAL_TOLERANCE", at_tolerance)  # the float32 log never hits 0.405 itself
    result = init_scale.check_init_scale(case)
    assert result.status == "warn" and "residual_scaled" not in result.details


class _NoClasses(torch.nn.Module):
    """A classifier built with num_classes = 0 (an empty class list): its output is (B, 0)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x[:, :0] * self.scale


def test_labels_blames_an_output_of_zero_classes_not_the_sign_of_a_zero_label():
    # label 0 is out of range only when the output has no class at all: before, the (4, 0) output crashed the check
    case = {"model": _NoClasses(), "batch": (torch.randn(4, 3), torch.tensor([0, 1, 0, 2])),
            "loss_fn": lambda out, y: out.sum(), "task": {"kind": "classification"}}
    result = labels.check_labels(case)
    assert result.status == "fail" and result.details["out_of_range"] == [0, 1, 2]
    assert "too few outputs" in result.summary and "negative labels" not in result.summary


class _SqrtAtZeroBetweenModules(torch.nn.Module):
    """sqrt at exactly 0 in forward's own code, after two Linears: its gradient is inf, made outside any module."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.second(self.first(x))
        return (h - h.detach()).sqrt()


def test_nan_watch_does_not_blame_a_module_that_only_passed_on_a_non_finite_gradient():
    torch.manual_seed(0)
    case = {"model": _SqrtAtZeroBetweenModules(), "batch": (torch.randn(4, 3), torch.randn(4, 3)),
            "loss_fn": torch.nn.functional.mse_loss}
    result = nan_watch.check_nan_watch(case)
    assert result.status == "fail"
    assert result.details["origin"] == {"module": "second", "class": "Linear", "phase": "backward"}
    # second received inf at its output: the source is the unhooked sqrt, not second
    assert "its source is not a module this check can hook" in result.summary


class _PerPositionLM(torch.nn.Module):
    """Token ids to logits position by position: (T, B) to (T, B, V) as a seq-first nn.LSTM gives them, or batch-first."""

    def __init__(self, vocab=50):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, vocab)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.embed(input_ids))


def test_label_alignment_turns_a_time_major_attention_mask_with_the_ids_to_find_scored_padding():
    torch.manual_seed(0)
    tokens = torch.randint(1, 50, (7, 3))  # (T + 1, B), T = 6 != B = 3
    mask = torch.ones(7, 3, dtype=torch.long)
    tokens[5:, 2], mask[5:, 2] = 0, 0  # the third sequence ends in two pads, still scored: no -100 on them
    case = {"model": _PerPositionLM(), "batch": ({"input_ids": tokens[:-1], "attention_mask": mask[:-1]}, tokens[1:]),
            "loss_fn": lambda logits, y: torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()),
            "task": {"kind": "causal_lm"}}
    result = label_alignment.check_label_alignment(case)
    assert (result.details["time_dim"], result.details["input_offset"]) == (0, 1)
    assert result.details["padding_scored"] == 1  # target t = 4 is the pad input t = 5 (target t = 5 is past the mask)
    assert result.status == "fail"


def test_label_alignment_reads_a_time_major_lm_without_an_attention_mask_or_id_labels():
    torch.manual_seed(0)
    tokens = torch.randint(1, 50, (7, 3))  # (T + 1, B); the targets come in a tuple: not labels the check can read
    case = {"model": _PerPositionLM(), "batch": (tokens[:-1], (tokens[1:],)),
            "loss_fn": lambda logits, y: torch.nn.functional.cross_entropy(logits.flatten(0, 1), y[0].flatten()),
            "task": {"kind": "causal_lm"}}
    result = label_alignment.check_label_alignment(case)
    assert (result.details["time_dim"], result.details["input_offset"]) == (0, 1)
    assert result.status == "pass"


def test_label_alignment_reports_time_along_dim_1_for_a_batch_first_lm():
    torch.manual_seed(0)
    tokens = torch.randint(1, 50, (3, 7))  # (B, T + 1): the same per-position model read batch-first
    case = {"model": _PerPositionLM(), "batch": (tokens[:, :-1], tokens[:, 1:]),
            "loss_fn": lambda logits, y: torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()),
            "task": {"kind": "causal_lm"}}
    result = label_alignment.check_label_alignment(case)
    assert (result.details["time_dim"], result.details["input_offset"], result.status) == (1, 1, "pass")
