"""Verdicts by experiment (issue 21): a FAIL is a harm shown on the user's model and batch, a threshold alone is at
most a WARN, a budget that runs out is inconclusive, and verdicts count steps, not seconds.

The models here are our own look-alikes of what real scripts taught us (nanoGPT's `model(x, y)`, an Adadelta MNIST
MLP, an LBFGS time series, a DCGAN generator, a VAE decoder), never fetched code.
"""
import itertools
import math
import sys
import time

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import healthy  # noqa: E402
import overfit_one_batch  # noqa: E402
from test_decisions_update_ratio import scripted_overshoot  # noqa: E402


def overfit(case, **kwargs):
    return overfit_one_batch.check_overfit_one_batch(overfit_one_batch.validate_case(case), **kwargs)


# --- overfit_one_batch: a step budget ------------------------------------------------------------------------------

def test_overfit_gives_the_same_verdict_on_a_machine_a_thousand_times_slower(monkeypatch):
    """The CNN needs the 10x retry (about 370 steps in all): a time budget cut it short on a slow machine."""
    fast = overfit(healthy.make_cnn_classifier())
    ticks = itertools.count()
    with monkeypatch.context() as patch:
        for clock in ("process_time", "perf_counter", "monotonic", "time"):
            patch.setattr(time, clock, lambda: 1000.0 * next(ticks))  # every reading 1000 s after the last
        slow = overfit(healthy.make_cnn_classifier())
    assert fast.status == slow.status == "pass", (fast.summary, slow.summary)
    assert fast.details["losses"] == slow.details["losses"]


def test_overfit_out_of_steps_is_inconclusive_not_a_warn_about_the_model():
    result = overfit(healthy.make_cnn_classifier(), steps=5)  # still falling after 5 steps at the lr, 10 at 10x
    assert result.status == "skip" and result.summary.startswith("inconclusive"), result.summary
    assert result.details["failure"] == "inconclusive" and "steps=20" in result.details["next"]


# --- messages say the cause ----------------------------------------------------------------------------------------

class SoftmaxMLP(healthy.MLP):
    def forward(self, x):
        return super().forward(x).softmax(-1)  # BUG: probabilities into NLLLoss, which expects log-probabilities


def _softmax_into_nll():
    case = healthy.make_mlp_classifier()
    with healthy.seeded(0):
        case["model"] = SoftmaxMLP(20, 64, 5)
    case["loss_fn"] = torch.nn.NLLLoss()
    return case


def test_softmax_into_nll_loss_is_named_not_called_a_flipped_sign():
    import init_loss
    at_init = init_loss.check_init_loss(init_loss.validate_case(_softmax_into_nll()))
    assert at_init.status == "fail" and "NLLLoss" in at_init.summary and "sign" not in at_init.summary, at_init.summary
    sprint = overfit(_softmax_into_nll())
    assert sprint.status == "fail" and sprint.details["failure"] == "probabilities_into_nll", sprint.summary
    assert "NLLLoss" in sprint.summary and "sign" not in sprint.summary and "log_softmax" in sprint.details["next"]


def test_a_negated_loss_is_still_called_a_flipped_sign():
    import broken_training
    import init_loss
    case = broken_training.make_flipped_loss_sign()
    assert "sign" in init_loss.check_init_loss(init_loss.validate_case(case)).summary
    result = overfit(broken_training.make_flipped_loss_sign())
    assert result.details["failure"] == "diverging" and "sign" in result.summary


class NoisyRegressor(healthy.MLP):
    def forward(self, x):
        return super().forward(x) + 0.3 * torch.randn(x.shape[0], 1)  # an objective that samples noise, as a VAE's does


@pytest.mark.parametrize("lr", [0.5, 2.0])
def test_a_noisy_loss_that_rose_is_never_called_flat(lr):
    """SGD at 2.0 takes the loss from 1.3 to 163 in two steps and to inf in five (a noisy run is judged on window means,
    so the inf ends it); at 0.5 it falls to 0.3 and jumps back to 1.7."""
    case = healthy.make_regression_mlp()
    with healthy.seeded(0):
        case["model"] = NoisyRegressor(8, 32, 1)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=lr)
    result = overfit(case)
    assert "flat" not in result.summary and result.details.get("failure") != "flat", result.summary
    if lr == 2.0:
        assert result.details["failure"] == "diverging" and "turns NaN/inf" in result.summary


def test_a_noisy_loss_at_lr_0_is_still_flat():
    case = healthy.make_regression_mlp()
    with healthy.seeded(0):
        case["model"] = NoisyRegressor(8, 32, 1)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=0.0)
    result = overfit(case)
    assert result.status == "fail" and result.details["failure"] == "flat", result.summary


# --- update_ratio judges the run the script will do ----------------------------------------------------------------

def update_ratio_of(case):
    import update_ratio
    return update_ratio.check_update_ratio(update_ratio.validate_case(case))


@pytest.mark.parametrize("momentum, status", [(0.9, "pass"), (0.0, "warn")])
def test_a_low_first_step_of_momentum_sgd_is_judged_with_its_momentum(momentum, status):
    """SGD at 1e-3 moves the MLP's first layer by 3.1e-5 of its norm on the first step; with momentum 0.9 its steps
    after 8 warm-up steps are 6x that, inside the band (imagenet's resnet18 at 0.0016 warned on its first step)."""
    case = healthy.make_mlp_classifier()
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=1e-3, momentum=momentum)
    result = update_ratio_of(case)
    assert result.status == status, result.summary
    assert (result.details["warm_steps"] > 0) is (momentum > 0)


def _nanogpt_recipe():
    """nanoGPT's GPT-2 recipe at a tiny width: 12 layers (c_proj at 0.02 / sqrt(24)), AdamW 6e-4, betas (0.9, 0.95),
    2,000 warmup steps, clipping at 1.0. Adam's first step moves c_proj by 0.15 of its norm; the run trains."""
    import healthy_own
    with healthy_own.seeded(20):
        data = torch.randint(0, 64, (8, 17))
        model = healthy_own.GPT(n_layer=12)
    return {"model": model, "batch": (data[:, :-1].contiguous(), data[:, 1:].contiguous()), "loss_fn": healthy_own.lm_loss,
            "optimizer": lambda params: torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1),
            "task": {"kind": "causal_lm", "vocab_size": 64, "ignore_index": -1, "clip_grad_norm": 1.0,
                     "lr_schedule": lambda step: min(1.0, (step + 1) / 2000)}}


def test_update_ratio_passes_the_nanogpt_recipe_judged_after_adams_first_step():
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    result = update_ratio_of(_nanogpt_recipe())
    assert result.status == "pass", result.summary
    assert max(result.details["first_step_ratios"].values()) > 0.1 > max(result.details["ratios"].values())


def _mnist_like(optimizer):
    """pytorch/examples' MNIST recipe on an MLP: normalised sparse pixels, dropout, log_softmax into NLL."""
    generator = torch.Generator().manual_seed(0)
    x = ((torch.rand(64, 1, 28, 28, generator=generator) < 0.2).float() - 0.1307) / 0.3081
    y = torch.randint(0, 10, (64,), generator=generator)
    with healthy.seeded(0):
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Dropout(0.25),
                                    torch.nn.Linear(128, 10), torch.nn.LogSoftmax(-1))
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.nll_loss, "optimizer": optimizer,
            "task": {"kind": "classification", "num_classes": 10}}


def test_update_ratio_passes_adadelta_at_its_designed_lr_1():
    result = update_ratio_of(_mnist_like(lambda params: torch.optim.Adadelta(params, lr=1.0)))
    assert result.status == "pass" and "Adadelta" in result.summary, result.summary


def test_update_ratio_skips_lbfgs_with_the_reason_and_other_optimizers_too():
    result = update_ratio_of(_mnist_like(lambda params: torch.optim.LBFGS(params, lr=1.0)))
    assert result.status == "skip" and "line search" in result.summary and "closure" in result.summary, result.summary
    result = update_ratio_of(_mnist_like(lambda params: torch.optim.Rprop(params)))
    assert result.status == "skip" and "Rprop" in result.summary, result.summary


@pytest.mark.parametrize("optimizer", [lambda params: torch.optim.SGD(params, lr=50.0),
                                       lambda params: torch.optim.Adam(params, lr=1.0)], ids=["sgd-50", "adam-1"])
def test_update_ratio_fails_a_too_high_lr_only_with_the_rise_shown(optimizer):
    import update_ratio
    result = update_ratio_of(_mnist_like(optimizer))
    assert result.status == "fail" and "overshoots" in result.summary, result.summary
    arms = result.details["overshoot"]
    assert update_ratio._rose(arms["1x"]["before"], arms["1x"]["highest"], arms["1x"]["after"])
    lower = [arm for name, arm in arms.items() if name != "1x"]
    assert lower[-1]["after"] < lower[-1]["before"]


def test_update_ratio_high_ratio_the_experiment_clears_is_a_pass_naming_it():
    """The demo's MLP with SGD at lr 2 (no momentum): ratios up to 0.17, and 10 steps still lower the loss on the batch."""
    import update_ratio
    case = update_ratio.make_demo_case(broken=False)
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=2.0)
    result = update_ratio_of(case)
    assert result.status == "pass" and "shows no harm" in result.summary, result.summary
    assert "still lowered the loss on this batch" in result.summary, result.summary  # what showed it: no rise
    assert max(result.details["ratios"].values()) > update_ratio.HIGH_FAIL and "1x" in result.details["overshoot"]


def test_update_ratio_judges_an_embedding_on_the_rows_this_batch_used():
    """A 5,000-row table of which the batch uses 10: the unused rows' zero update is not a step too small."""
    with healthy.seeded(2):
        model = torch.nn.Sequential(torch.nn.Embedding(5000, 32), torch.nn.Flatten(), torch.nn.Linear(32 * 4, 3))
        x, y = torch.randint(0, 10, (32, 4)), torch.randint(0, 3, (32,))
    result = update_ratio_of({"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
                              "optimizer": lambda params: torch.optim.Adam(params, lr=1e-3)})
    assert result.status == "pass", result.summary
    assert 5e-4 < result.details["ratios"]["0.weight"] < 2e-3  # Adam's ~lr per element on rows of std 1


# --- input_dependence: the targets are not inputs, the script's mode, a decoder near-constant at init -------------

def input_dependence_of(case):
    import input_dependence
    return input_dependence.check_input_dependence(input_dependence.validate_case(case))


class NanoGPTLike(torch.nn.Module):
    """nanoGPT's call: `logits, loss = model(x, y)`; the targets are an argument, read by the loss only."""

    def __init__(self, vocab=32, d=32):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(16, d)
        self.mix = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        x = x + torch.tril(torch.ones(idx.shape[1], idx.shape[1])).div(torch.arange(1, idx.shape[1] + 1)[:, None]) @ self.mix(x)
        logits = self.head(x)
        loss = None if targets is None else torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def _nanogpt_like_training():
    torch.manual_seed(0)
    model = NanoGPTLike()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    data = torch.randint(0, 32, (8, 17))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()  # as nanoGPT's get_batch makes them
    _, loss = model(x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_the_targets_argument_of_model_x_y_is_not_judged_as_an_input():
    import capture
    case = capture.capture_case(_nanogpt_like_training)
    assert case["task"]["target_inputs"] == [1], case["task"]
    result = input_dependence_of(case)
    assert result.status == "pass" and list(result.details["per_input"]) == [], result.summary


def test_a_model_that_truly_ignores_an_input_still_fails_beside_a_targets_argument():
    class IgnoresMask(NanoGPTLike):
        def forward(self, idx, mask, targets=None):
            return super().forward(idx, targets)  # BUG: the mask is never used
    torch.manual_seed(0)
    data = torch.randint(0, 32, (8, 17))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    case = {"model": IgnoresMask(), "batch": ((x, torch.rand(8, 16), y), y),
            "loss_fn": lambda out, y: out[1], "task": {"target_inputs": [2]}}
    result = input_dependence_of(case)
    assert result.status == "fail" and "changing input 1 alone" in result.summary, result.summary


class Discriminator(torch.nn.Module):
    """DCGAN's discriminator at a tiny size, with its weights_init: convs N(0, 0.02), BatchNorm gains N(1, 0.02). In
    eval mode with untouched running statistics nothing renormalises the 0.02-std convs, so the logit is tiny and the
    sigmoid sits at 0.5 for every image; in train mode (how the script trains it) BatchNorm rescales it."""

    def __init__(self, ndf=8):
        super().__init__()
        self.main = torch.nn.Sequential(
            torch.nn.Conv2d(3, ndf, 4, 2, 1, bias=False), torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(ndf * 2), torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), torch.nn.Sigmoid())
        for module in self.modules():
            if isinstance(module, torch.nn.Conv2d):
                torch.nn.init.normal_(module.weight, 0.0, 0.02)
            elif isinstance(module, torch.nn.BatchNorm2d):
                torch.nn.init.normal_(module.weight, 1.0, 0.02)
                torch.nn.init.zeros_(module.bias)

    def forward(self, images):  # (B, 3, 16, 16) -> (B,) probability that each image is real
        return self.main(images).view(-1)


def _discriminator_case():
    with healthy.seeded(0):
        model = Discriminator()
        images = torch.rand(16, 3, 16, 16) * 2 - 1
    return {"model": model, "batch": (images, torch.ones(16)), "loss_fn": torch.nn.functional.binary_cross_entropy,
            "task": {"kind": "classification"}}


def test_a_batchnorm_model_is_judged_in_the_train_mode_it_trains_in():
    result = input_dependence_of(_discriminator_case())
    assert result.status == "pass" and result.details["mode"] == "train", result.summary
    case = _discriminator_case()
    case["model"].eval()  # a script that trains in eval mode is judged so
    assert input_dependence_of(case).details["mode"] == "eval"


class Decoder(torch.nn.Module):
    """A decoder that starts near-constant: a latent read through a small-init layer under a large output bias
    (a time series model's level, a VAE's sigmoid at 0.5): the input's part of the output is ~0.3% at init."""

    def __init__(self, broken=False):
        super().__init__()
        self.fc = torch.nn.Linear(8, 32)
        self.out = torch.nn.Linear(32, 16)
        torch.nn.init.normal_(self.out.weight, std=1e-3)
        torch.nn.init.constant_(self.out.bias, 1.0)
        self.broken = broken

    def forward(self, z):
        if self.broken:
            z = torch.zeros_like(z)  # BUG: the latent is overwritten: the output cannot read it
        return self.out(torch.tanh(self.fc(z)))


def _decoder_case(broken=False):
    with healthy.seeded(0):
        model = Decoder(broken)
        z = torch.randn(32, 8)
        targets = 1.0 + torch.tanh(z @ torch.randn(8, 16))
    return {"model": model, "batch": (z, targets), "loss_fn": torch.nn.functional.mse_loss, "task": {"kind": "regression"},
            "optimizer": lambda params: torch.optim.Adam(params, lr=1e-3)}


def test_a_decoder_near_constant_at_init_is_judged_after_training_steps():
    result = input_dependence_of(_decoder_case())
    assert result.status != "warn", result.summary
    assert result.details["relative_change_at_start"] < 0.01
    broken = input_dependence_of(_decoder_case(broken=True))
    assert broken.status == "fail" and "ignores its input" in broken.summary, broken.summary


def _bigram_case(ambiguous_start):
    """A bigram model (the logits of the next token come from the current token alone), as in the GPT video lecture.

    Its batch has the same current token followed by different next tokens: no model that sees one token can
    memorise it. With ambiguous_start every row also starts from the same token, as makemore's words do."""
    torch.manual_seed(0)
    vocab = 12
    ids = torch.randint(1, vocab, (8, 9))
    if ambiguous_start:
        ids[:, 0] = 0  # the start token: followed by a different first letter in each row
    model = torch.nn.Embedding(vocab, vocab)  # (B, T) -> (B, T, V)

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    return {"model": model, "batch": (ids[:, :-1], ids[:, 1:]), "loss_fn": loss_fn,
            "optimizer": lambda params: torch.optim.AdamW(params, lr=1e-2), "task": {"kind": "causal_lm", "vocab_size": vocab}}


@pytest.mark.parametrize("ambiguous_start", [False, True])
def test_overfit_a_batch_the_model_cannot_see_enough_of_is_a_warn_not_a_fail(ambiguous_start):
    """The control: it memorises its own first predictions, so loss, gradients and optimizer work (ng-video-lecture's
    bigram and makemore were false FAILs)."""
    result = overfit_one_batch.check_overfit_one_batch(_bigram_case(ambiguous_start))
    assert (result.status, result.details["failure"]) == ("warn", "targets_out_of_reach"), result.summary


def test_overfit_a_model_that_cannot_learn_at_all_still_fails_the_control():
    """Gradients that never reach the logits' scale (a frozen output layer): even its own predictions stay out of reach."""
    case = _bigram_case(False)
    head = torch.nn.Linear(12, 12)
    head.requires_grad_(False)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.normal_(head.bias)
    case["model"] = torch.nn.Sequential(torch.nn.Embedding(12, 12), head)
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert result.status == "fail", result.summary


@pytest.mark.parametrize("check", ["overfit_one_batch", "gradient_flow", "input_dependence", "data_sanity"])
def test_the_checks_that_train_give_lbfgs_its_closure(check):
    """time_sequence_prediction trains with LBFGS: a check that steps it without a closure raised, a false fail."""
    import importlib
    torch.manual_seed(0)
    x = torch.randn(16, 4)
    case = {"model": torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)),
            "batch": (x * 100, x.sum(1, keepdim=True)), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.LBFGS(params, lr=0.8), "task": {"kind": "regression"}}
    module = importlib.import_module(check)
    result = getattr(module, f"check_{check}")(module.validate_case(case))
    if check == "data_sanity":  # the 100x inputs run the scale trial: both runs stepped LBFGS, and the harm shows
        assert result.status == "fail" and len(result.details["scale_trial"]["standardised"]) == 2, result.summary
    else:
        assert result.status in ("pass", "warn"), result.summary


def test_overfit_logits_through_a_relu_still_fail_as_blocked_rows():
    """Lightning's backbone_image_classifier applies a ReLU to its logits (a real bug): a row whose class logit sits
    below zero gets no gradient. The control would memorise the model's own argmax, so the rows decide: a fail."""
    torch.manual_seed(0)
    x = torch.randn(16, 10)
    y = torch.randint(0, 10, (16,))
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10), torch.nn.ReLU())
    case = {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}
    result = overfit(case)
    assert result.status == "fail" and result.details["blocked_rows"], result.summary


def test_overfit_takes_the_rows_of_targets_the_model_flattened_itself():
    """The Lightning demo's transformer returns (B*T, V) scores for (B, T) inputs: the first k rows of its B*T targets
    are the first k*T (the check raised 'Expected input batch_size (280) to match target batch_size (700)')."""
    torch.manual_seed(0)

    class Flattening(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(10, 16), torch.nn.Linear(16, 10)

        def forward(self, ids):  # (B, T) -> (B*T, V)
            return self.head(self.embed(ids)).view(-1, 10)

    ids = torch.randint(0, 10, (20, 5))
    case = {"model": Flattening(), "batch": (ids, ids.reshape(-1)), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}
    result = overfit(case)
    assert result.status == "pass", result.summary


def test_overfit_blocked_rows_read_targets_the_model_flattened_itself():
    """A plateau of a model that flattens (B, T) to B*T rows: the per-row gradient pass takes each row's own T targets
    (it took all of them, and the loss raised 'Expected input batch_size (5) to match target batch_size (40)')."""
    torch.manual_seed(0)

    class FlatRelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(10, 16), torch.nn.Linear(16, 10)

        def forward(self, ids):  # (B, T) -> (B*T, V), clamped at zero
            return torch.relu(self.head(self.embed(ids))).view(-1, 10)

    ids = torch.randint(0, 10, (20, 5))
    case = {"model": FlatRelu(), "batch": (ids, torch.randint(0, 10, (100,))), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}
    result = overfit(case)
    assert "blocked_rows" in result.details and result.details.get("failure") != "raised", result.summary


# --- overfit_one_batch: a loss whose floor is above zero ----------------------------------------------------------

def _soft_target_case(width, loss_fn, targets, outputs, squash=None):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(10, width), torch.nn.Tanh(), torch.nn.Linear(width, outputs)] + ([squash] if squash else [])
    return {"model": torch.nn.Sequential(*layers), "batch": (torch.randn(16, 10), targets), "loss_fn": loss_fn,
            "optimizer": lambda params: torch.optim.Adam(params, lr=1e-2)}


SMOOTHED = lambda logits, y: torch.nn.functional.cross_entropy(logits, y, label_smoothing=0.1)  # noqa: E731


@pytest.mark.parametrize("loss_fn, soft, squash", [
    (torch.nn.functional.binary_cross_entropy, True, torch.nn.Sigmoid()),  # the VAE example: BCE on grey pixels
    (torch.nn.functional.binary_cross_entropy_with_logits, True, None),
    (SMOOTHED, False, None),
], ids=["bce-soft", "bce-logits-soft", "label-smoothing"])
def test_overfit_passes_a_model_that_reaches_its_losss_floor_above_zero(loss_fn, soft, squash):
    """pytorch/examples' VAE was a false plateau FAIL: BCE against grey pixels cannot go below their entropy."""
    torch.manual_seed(1)
    targets = torch.rand(16, 30) if soft else torch.randint(0, 5, (16,))
    result = overfit(_soft_target_case(32, loss_fn, targets, 30 if soft else 5, squash))
    floor = result.details["loss_floor"]
    assert result.status == "pass" and floor > 0.3 and result.details["target"] > floor, result.summary
    assert result.details["losses"][-1] <= result.details["target"] and "retry_losses" not in result.details, result.details


def test_overfit_still_fails_a_bottleneck_above_the_losss_floor():
    """A width-1 layer inside a wider network: 445 parameters, more than the 240 target values of 8 rows (with fewer,
    any model's code would fall short: inconclusive), yet it cannot memorise them."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1),  # BUG: a width-1 bottleneck
                                torch.nn.Tanh(), torch.nn.Linear(1, 30), torch.nn.Sigmoid())
    torch.manual_seed(1)
    result = overfit({"model": model, "batch": (torch.randn(16, 10), torch.rand(16, 30)),
                      "loss_fn": torch.nn.functional.binary_cross_entropy,
                      "optimizer": lambda params: torch.optim.Adam(params, lr=1e-2)})
    assert (result.status, result.details["failure"]) == ("fail", "plateau"), result.summary
    assert result.details["retry_losses"][-1] > result.details["target"] > result.details["loss_floor"], result.details


def test_overfit_claims_no_floor_for_a_loss_the_free_outputs_cannot_settle():
    """A loss that is the output itself falls without end: no floor, the usual verdicts."""
    outputs = {"free": torch.randn(4, 3)}
    case = {"loss_fn": lambda out, y: out["free"].sum()}
    assert overfit_one_batch._loss_floor(case, outputs, torch.zeros(4)) is None
    case = {"loss_fn": lambda out, y: torch.nn.functional.mse_loss(out["free"], y)}
    assert overfit_one_batch._loss_floor(case, outputs, torch.ones(4, 3)) == pytest.approx(0, abs=1e-4)



def test_overfit_claims_no_floor_when_the_free_descent_turns_minus_inf_even_one_step_before_its_end():
    calls = []

    def collapses(out, y):  # finite until the descent's last step but one, then -inf
        calls.append(1)
        loss = torch.nn.functional.mse_loss(out["free"], y)
        return loss - float("inf") if len(calls) == overfit_one_batch.FREE_STEPS else loss

    assert overfit_one_batch._loss_floor({"loss_fn": collapses}, {"free": torch.zeros(4, 3)}, torch.ones(4, 3)) is None
    assert len(calls) == overfit_one_batch.FREE_STEPS  # the descent stopped at the -inf, and no bounded rerun was made


def test_overfit_claims_no_floor_for_a_loss_the_outputs_do_not_move_one_that_raises_or_outputs_too_large():
    outputs, targets = {"free": torch.zeros(4, 3)}, torch.zeros(4, 3)
    constant = {"loss_fn": lambda out, y: (out["free"] * 0).sum() + 1.0}  # nothing falls: no floor shown
    assert overfit_one_batch._loss_floor(constant, outputs, targets) is None

    def needs_the_model(out, y):
        raise RuntimeError("a loss that needs more than the outputs")

    assert overfit_one_batch._loss_floor({"loss_fn": needs_the_model}, outputs, targets) is None
    big = torch.zeros(10_000_001)  # over the memory cap (10M numbers): not even tried, though it would settle at 0
    assert overfit_one_batch._loss_floor({"loss_fn": torch.nn.functional.mse_loss}, big, torch.ones_like(big)) is None



def test_overfit_a_loss_with_no_floor_keeps_its_own_verdict():
    """A linear loss (a flipped sign, maximising): free outputs find no floor, so none is claimed, and it diverges."""
    torch.manual_seed(0)
    case = {"model": torch.nn.Linear(4, 2), "batch": (torch.randn(8, 4), torch.randn(8, 2)),
            "loss_fn": lambda out, y: (out - y).mean(), "optimizer": lambda params: torch.optim.SGD(params, lr=0.1)}
    result = overfit(case, steps=50)
    assert (result.status, result.details["failure"]) == ("fail", "diverging") and "loss_floor" not in result.details

def test_overfit_at_the_floor_with_a_parameter_left_out_of_the_optimizer_is_a_warn():
    torch.manual_seed(1)
    case = _soft_target_case(32, torch.nn.functional.binary_cross_entropy_with_logits, torch.rand(16, 30), 30)
    case["model"].register_parameter("spare", torch.nn.Parameter(torch.zeros(7, 7, 7)))  # trainable, never optimised
    case["optimizer"] = lambda params: torch.optim.Adam([p for p in params if p.shape != (7, 7, 7)], lr=1e-2)
    result = overfit(case)
    assert result.status == "warn" and "loss_floor" in result.details and result.details["not_in_optimizer"], result.summary


def test_update_ratio_a_spike_the_next_steps_undo_is_no_overshoot():
    """Lightning's autoencoder example (Adam at 1e-2 on 784 inputs in [0, 1]): its first step at the steady state jumps
    the loss 1.8x, and its 10 steps end below the start. That was a false FAIL when an arm stopped at the first jump."""
    import update_ratio
    torch.manual_seed(0)
    x = (torch.rand(16, 784) > 0.5).float() * torch.rand(16, 784)
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3),
                                torch.nn.Linear(3, 64), torch.nn.ReLU(), torch.nn.Linear(64, 784))
    case = {"model": model, "batch": (x, x), "loss_fn": torch.nn.functional.mse_loss,
            "optimizer": lambda params: torch.optim.Adam(params, lr=1e-2)}
    result = update_ratio.check_update_ratio(update_ratio.validate_case(case))
    arm = result.details["overshoot"]["1x"]
    assert arm["highest"] > arm["before"] > arm["after"] and arm["steps"] == update_ratio.OVERSHOOT_STEPS, arm
    assert arm["after"] <= result.details["overshoot"]["0.1x"]["after"], result.details["overshoot"]
    assert result.status == "pass", result.summary  # it was a false FAIL, then a WARN on a threshold the experiment cleared


def test_update_ratio_a_lower_arm_that_jumped_is_no_reference_and_the_next_lower_lr_is_tried():
    """The imagenet recipe's lr x1000 (1.6, resnet18, 4 random images), one init's arms as measured: the judged lr
    jumps 21x and ends at 0.21x its start; 0.1x jumps 4.6x on the way and ends at 0.36x; 0.01x falls every step to
    0.001x. Stopping at 0.1x (it ended below its start) compared the lr with a chance end, and the verdict flipped
    between inits; the experiment goes on to 0.01x."""
    import update_ratio
    result = scripted_overshoot([6.989, 6.989, 3.047, 146.24, 75.321, 5.148, 4.049, 3.47, 2.727, 2.019, 1.629, 1.4489,
                                 6.989, 6.989, 1.243, 6.163, 14.83, 9.356, 1.319, 8.958, 32.05, 12.681, 10.748, 2.5142,
                                 6.989, 6.989, 4.468, 1.542, 0.23, 0.119, 0.101, 0.07, 0.04, 0.022, 0.013, 0.0079])
    assert list(result) == [1.0, 0.1, 0.01], result
    assert update_ratio._rose(*result[1.0][:3]) and update_ratio._fell(*result[0.01][:3]), result
    assert not update_ratio._fell(*result[0.1][:3]), result


def test_update_ratio_a_lower_arm_whose_loss_ends_where_it_started_did_not_fall_and_the_next_is_tried():
    """A lower lr whose loss ends exactly at its start (steps below the loss's float resolution) is no reference that
    the lr is too high: the experiment goes on to the next lower lr."""
    import update_ratio
    result = scripted_overshoot([1.0, 1.0, 1.3, 1.8, 2.2, 2.5, 2.9, 3.1, 3.3, 3.6, 3.9, 4.0]  # the judged lr: rose
                                + [1.0] * 12  # 0.1x: unchanged
                                + [1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25])  # 0.01x: fell
    assert list(result) == [1.0, 0.1, 0.01], result
    assert not update_ratio._fell(*result[0.1][:3]) and update_ratio._rose(*result[0.1][:3]), result


class _ReversedGradient(torch.autograd.Function):
    """The identity forward, the gradient negated backward: every step climbs the loss, at any lr."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad


def test_update_ratio_a_rise_at_every_lr_is_a_warn_and_a_nan_ends_its_arm():
    """The demo's broken lr with its gradient reversed: the judged lr's arm climbs to NaN (and stops there, before its 10
    steps), and no lower lr lowers the loss either, so the lr is not shown to be the cause: a warn, not a fail."""
    import update_ratio
    case = update_ratio.make_demo_case(broken=True)
    case["loss_fn"] = lambda out, y: torch.nn.functional.cross_entropy(_ReversedGradient.apply(out), y)
    result = update_ratio_of(case)
    arms = result.details["overshoot"]
    assert result.status == "warn", result.summary
    assert math.isnan(arms["1x"]["after"]) and arms["1x"]["steps"] < update_ratio.OVERSHOOT_STEPS, arms
    assert len(arms) == 4 and all(arm["after"] > arm["before"] for name, arm in arms.items() if name != "1x"), arms


# --- gradient_flow: a layer a random draw skipped --------------------------------------------------------------------

class _SkipsOnItsFirstPass(torch.nn.Module):
    """LayerDrop's shape (wav2vec2 drops each layer with p 0.1 in train mode), made deterministic: the middle layer is
    skipped on the first forward pass only. detached: the middle layer is cut from the graph for good (the real bug)."""

    def __init__(self, detached=False):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.middle, self.head = torch.nn.Linear(6, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)
        self.detached, self.calls = detached, 0

    def forward(self, x):
        self.calls += 1
        x = self.first(x)
        if self.calls > 1:
            x = x + (self.middle(x).detach() if self.detached else self.middle(x))
        return self.head(x)


@pytest.mark.parametrize("detached, status", [(False, "pass"), (True, "fail")])
def test_gradient_flow_a_layer_skipped_in_one_pass_is_no_finding_one_cut_for_good_is(detached, status):
    import gradient_flow
    case = {"model": _SkipsOnItsFirstPass(detached), "batch": (torch.randn(16, 6), torch.randint(0, 3, (16,))),
            "loss_fn": torch.nn.functional.cross_entropy}
    result = gradient_flow.check_gradient_flow(gradient_flow.validate_case(case))
    assert result.status == status, result.summary
    assert result.details["none_grad"] == ([] if not detached else ["middle.weight", "middle.bias"]), result.details


def test_overfit_a_noisy_run_is_judged_stalled_on_means_not_on_two_draws():
    """A loss whose mean falls 6% over 50 steps under +-0.1 noise: the draw 50 steps back sits low and the last draw high,
    so two draws say "stalled"; the means of 10 steps at both ends say it still falls."""
    noise = [0.1 if i % 2 else -0.1 for i in range(61)]
    noise[10], noise[60] = -0.1, 0.1
    losses = [1.0 - 0.0012 * i + noise[i] for i in range(61)]
    assert overfit_one_batch._stalled(losses) and not overfit_one_batch._stalled(losses, noisy=True)


class _SwampedByNoise(torch.nn.Module):
    """Logits drowned in noise no mode switches off (50x the signal's scale): nothing memorises through it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x) + 50 * torch.randn(x.shape[0], 3)


@pytest.mark.parametrize("seed", [0, 3, 4, 6])
@pytest.mark.parametrize("lr, status", [(1e-3, "skip"), (0.0, "fail")])
def test_overfit_flat_in_noise_it_cannot_beat_is_inconclusive_unless_the_weights_never_moved(lr, status, seed):
    """Flat within its noise at the lr and at 10x on its own predictions: inconclusive while the steps moved the weights
    (one batch cannot show a fall through that noise); at lr 0 they never moved, which is the harm shown. The verdict
    must not hang on one draw: judged on single draws, seeds 3 and 6 failed "diverging" (a low first draw made later
    ordinary ones look 4x larger), seed 4 passed on one draw of 0.69 in a run whose mean stayed near 45 (at lr 0 too),
    and other seeds failed "plateau" at lr 0 (measured)."""
    torch.manual_seed(seed)
    case = {"model": _SwampedByNoise(), "batch": (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            "loss_fn": torch.nn.functional.cross_entropy, "optimizer": lambda params: torch.optim.Adam(params, lr=lr)}
    result = overfit(case)
    assert result.status == status and result.details["samples_noise"], result.summary
    assert result.details["failure"] == ("inconclusive" if status == "skip" else "flat"), result.details


def test_overfit_a_jump_the_next_steps_undo_is_no_runaway():
    """siamese_network's resnet18 under Adadelta at lr 1 (one init in six): 0.84 -> 4.87 on the first step, then 0.36,
    0.34 and memorised (measured); the 4x jump alone failed it "diverging". A runaway stands at 4x for 5 steps."""
    jumped = [0.8358, 4.8653, 0.3593, 0.3439, 0.0044]
    assert not overfit_one_batch._ran_away(jumped[:2]) and not overfit_one_batch._ran_away(jumped)
    stays = [1.0] + [4.5] * overfit_one_batch.RUNAWAY_STEPS
    assert overfit_one_batch._ran_away(stays) and not overfit_one_batch._ran_away(stays[:-1])
    assert not overfit_one_batch._ran_away(stays[:-1] + [3.9]) and overfit_one_batch._ran_away([1.0, float("nan")])
    assert overfit_one_batch._ran_away([1.0] + [-4.5] * overfit_one_batch.RUNAWAY_STEPS)  # heading to -inf: |loss|
    assert overfit_one_batch._ran_away([1.0, float("inf")]) and overfit_one_batch._ran_away([1.0, -float("inf")])
    assert overfit_one_batch._finite([1.0, -3e38]) and not overfit_one_batch._finite([1.0, float("inf")])


@pytest.mark.parametrize("retry_peak, status", [(4.5, "skip"), (3.5, "fail")])
def test_overfit_a_retry_that_jumped_is_no_reference_for_a_slow_lr(monkeypatch, retry_peak, status):
    """super_resolution (pytorch/examples): at your lr the loss fell 13x and stalled; at 10x it jumped past 4x its start,
    came back and stalled, and was failed "plateau". An unstable retry cannot tell a slow lr from a bug: inconclusive.
    A retry that stayed under 4x and stalled is the plateau shown."""
    fell = [1.0 - 0.9 * min(i, 20) / 20 for i in range(71)]  # to 0.1 and stalled
    retry = [1.0, retry_peak] + [0.12] * 60  # from the same start
    runs = iter([(fell, "stalled"), (retry, "stalled")])

    def scripted(case, model, inputs, targets, lr_scale, steps, target, noisy=False, early=False):
        losses, stop = next(runs)
        return losses, case["optimizer"](model.parameters()), stop

    monkeypatch.setattr(overfit_one_batch, "_train", scripted)
    case = healthy.make_regression_mlp()
    result = overfit(case)
    assert result.status == status and result.details["failure"] == ("inconclusive" if status == "skip" else "plateau"), \
        result.summary
    assert result.details.get("retry_unstable") == ("jumped" if status == "skip" else None), result.details


def test_overfit_on_course_to_miss_is_the_pace_of_the_last_50_steps_kept_up():
    """0.01 a step over the last 50 steps from 2.0 at step 100: 200 steps more reach 0.0, under a target of 0.05; at
    0.009 a step they end at 0.2, above it. Before step 50 there is no pace to keep."""
    on_course = overfit_one_batch._out_of_reach
    falling = [3.0 - 0.01 * i for i in range(101)]
    assert not on_course(falling, 0.05, 300) and not on_course(falling, 0.0, 300)
    slower = [2.9 - 0.009 * i for i in range(101)]
    assert on_course(slower, 0.05, 300) and not on_course(slower, 0.25, 300)
    assert not on_course([5.0] * 50, 0.05, 300) and on_course([5.0] * 51, 0.05, 300)


@pytest.mark.parametrize("retry_reaches", [True, False])
def test_overfit_a_slow_sprint_goes_to_10x_first_and_the_whole_sprint_decides_when_10x_misses(monkeypatch, retry_reaches):
    """A loss on course to miss the target at your lr: the 10x run first (whisper's tiny config: 377 steps in 7.7 s ->
    127 in 2.6 s, measured). Memorising there is the pass the whole sprint would lead to. When 10x misses (it jumped,
    here), the whole sprint at your lr is run and judged: this one speeds up late and memorises at your lr."""
    slow = [1.0 - 0.001 * i for i in range(60)]
    whole = slow + [0.9 - 0.05 * i for i in range(1, 18)]  # speeds up at step 60: 0.05 by step 76
    retry = [1.0, 0.5, 0.04] if retry_reaches else [1.0, 4.5] + [0.12] * 60
    calls = []

    def scripted(case, model, inputs, targets, lr_scale, steps, target, noisy=False, early=False):
        calls.append((lr_scale, early))
        losses, stop = ((slow, "out_of_reach") if early else (whole, "target")) if lr_scale == 1.0 else (retry, "target")
        return losses, case["optimizer"](model.parameters()), stop

    monkeypatch.setattr(overfit_one_batch, "_train", scripted)
    result = overfit(healthy.make_regression_mlp())
    assert result.status == "pass", result.summary
    assert result.details.get("on_course_to_miss", False) == retry_reaches, result.details
    assert calls == [(1.0, True), (10.0, False)] + ([] if retry_reaches else [(1.0, False)])
    assert result.details["steps"] == (59 if retry_reaches else 76)


def test_overfit_a_slow_run_stops_on_course_to_miss_only_when_asked_and_never_when_noisy():
    """_train's own stop: a deterministic objective at a tiny lr falls too slowly for the target; the same run without
    early (the whole sprint) or with a noisy objective runs its budget."""
    case = overfit_one_batch.validate_case(dict(healthy.make_regression_mlp(),
                                                optimizer=lambda params: torch.optim.SGD(params, lr=3e-3)))
    x, y = case["batch"]
    kwargs = dict(case=case, model=case["model"], inputs=x, targets=y, lr_scale=1.0, steps=120, target=0.01)
    with overfit_one_batch.preserved(case["model"]):
        early = overfit_one_batch._train(**kwargs, early=True)
    with overfit_one_batch.preserved(case["model"]):
        whole = overfit_one_batch._train(**kwargs)
    with overfit_one_batch.preserved(case["model"]):
        noisy = overfit_one_batch._train(**kwargs, noisy=True, early=True)
    assert early[2] == "out_of_reach" and len(early[0]) == overfit_one_batch.STALL_WINDOW + 1, early[0][-3:]
    assert whole[2] == noisy[2] == "budget" and len(whole[0]) == len(noisy[0]) == 121, (whole[0][-3:], noisy[2])


def test_overfit_runaway_and_settle_rules_at_their_edges():
    """The rules' edges, written out: 5 steps at 4x (4x itself included) are a runaway, 4 are not; a noisy run is judged
    on window means (a high first draw and alternating later draws: the means say 5x); a noisy run settles at a mean
    under half of its first window's, zero included."""
    ran_away = overfit_one_batch._ran_away
    assert ran_away([1.0] + [4.0] * 5) and not ran_away([1.0] + [4.0] * 4) and not ran_away([1.0] + [3.99] * 5)
    noisy = [2.0] + [0.0, 2.0] * 4 + [0.0] + [9.0, 1.0] * 5
    assert ran_away(noisy, noisy=True) and not ran_away(noisy)
    settle = overfit_one_batch._settled_low
    assert settle([3.0] * 10 + [0.6] * 10, "stalled") and not settle([3.0] * 10 + [1.6] * 10, "stalled")


def test_overfit_a_small_positive_loss_that_grows_is_no_flipped_sign(monkeypatch):
    """A loss that ran away from 0.1 to 0.5 grows: "sign flipped" is for a loss heading below zero."""
    runs = iter([([0.1] + [0.5] * 6, "runaway")])

    def scripted(case, model, inputs, targets, lr_scale, steps, target, noisy=False, early=False):
        losses, stop = next(runs)
        return losses, case["optimizer"](model.parameters()), stop

    monkeypatch.setattr(overfit_one_batch, "_train", scripted)
    result = overfit(healthy.make_regression_mlp())
    assert result.details["failure"] == "diverging" and "grows" in result.summary and "sign" not in result.summary
