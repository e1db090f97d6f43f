"""The doctor on real architectures: Hugging Face models from tiny configs and re-implementations of public designs.

Every healthy case must get no fail; the only warns are the ones listed here, each with the reason a person
reading the model would agree with it.
"""
import sys

import pytest
import torch

import doctor
import label_alignment
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import broken_batchnorm  # noqa: E402
import broken_inplace  # noqa: E402
import broken_labels  # noqa: E402
import broken_registration  # noqa: E402
import healthy_hf  # noqa: E402
import healthy_own  # noqa: E402

EXPECTED_WARNS = {  # case -> {check id: why a person would agree}
    "make_lstm_lm": {"gradient_flow": "the decoder, uniform +-0.1 (10x below the LSTM's own scale), gets 100x the "
                                      "relative gradient of the first LSTM layer at init"},
    "make_whisper": {"gradient_flow": "the decoder's 0.02-std cross-attention reads little of the audio at init, so the "
                                      "encoder's conv front end gets 1% of the decoder's relative gradient"},
}
CASES = [(healthy_hf, name) for name in healthy_hf.HEALTHY] + [(healthy_own, name) for name in healthy_own.HEALTHY]


@pytest.fixture(scope="module")
def doctor_on():
    """doctor_on(module, name): {check id: result} of the whole doctor on that healthy case, run once per module (the
    tests below that read one check's details on the same case read them from this run)."""
    results = {}

    def run(module, name):
        if (module, name) not in results:
            results[module, name] = {r.id: r for r in doctor.run_checks(doctor.validate_case(getattr(module, name)(), name))}
        return results[module, name]
    return run


@pytest.mark.parametrize("module, name", CASES, ids=[name for _, name in CASES])
def test_healthy_real_model_gets_no_fail_and_only_agreed_warns(module, name, doctor_on):
    statuses = {check: r.status for check, r in doctor_on(module, name).items()}
    assert "fail" not in statuses.values(), statuses
    assert {check for check, status in statuses.items() if status == "warn"} == set(EXPECTED_WARNS.get(name, {})), statuses
    assert statuses["data_sanity"] == "pass" and statuses["overfit_one_batch"] == "pass", statuses


TWINS = [(module, name) for module in (broken_batchnorm, broken_inplace, broken_labels, broken_registration)
         for name in module.HEALTHY]


@pytest.mark.parametrize("module, name", TWINS, ids=[f"{m.__name__}.{name}" for m, name in TWINS])
def test_the_healthy_twins_of_the_planted_bugs_get_no_fail_from_the_whole_doctor(module, name):
    """Each twin was written for one check; the rest of the battery must agree it is healthy (a CLIP-style model and a
    time-major LSTM once got false fails from batch_independence, init_loss and overfit_one_batch)."""
    case = doctor.validate_case(getattr(module, name)(), name)
    statuses = {r.id: r.status for r in doctor.run_checks(case)}
    assert "fail" not in statuses.values(), statuses
    warns = {check for check, status in statuses.items() if status == "warn"}
    assert warns == ({"gradient_flow"} if name == "make_lstm_time_major" else set()), statuses  # as make_lstm_lm's


@pytest.mark.parametrize("batch, says", [
    ({"input_ids": torch.zeros(2, 4, dtype=torch.long)}, "holds 'labels', or return_loss=True"),  # no labels
    ([torch.zeros(2, 4, dtype=torch.long)], "holds 'labels', or return_loss=True"),  # not a dict
])
def test_case_from_hf_refuses_a_batch_it_cannot_score(batch, says):
    with pytest.raises(ValueError, match=says):
        healthy_hf.case_from_hf(torch.nn.Linear(2, 2), batch)


@pytest.mark.parametrize("broken, status", [(False, "pass"), (True, "fail")])
def test_label_alignment_reads_a_time_major_model_trained_on_class_probabilities(broken, status):
    """Targets given as one-hot probabilities (no label ids to read): the alignment comes from the gradient alone, and
    the time-major (T, B) model gets the verdict, layout and offset it gets from its label ids."""
    case = broken_labels.lstm_case(broken)
    ids = label_alignment.check_label_alignment(case)
    vocab = case["task"]["vocab_size"]
    inputs, targets = case["batch"]
    case["batch"] = (inputs, torch.nn.functional.one_hot(targets, vocab).float())
    case["loss_fn"] = lambda output, target: torch.nn.functional.cross_entropy(output.reshape(-1, vocab),
                                                                               target.reshape(-1, vocab))
    result = label_alignment.check_label_alignment(case)
    assert result.status == ids.status == status
    assert [result.details[key] for key in ("time_dim", "input_offset")] == [ids.details[key] for key in ("time_dim", "input_offset")]
    assert result.details["time_dim"] == (1 if broken else 0)  # unshifted, target == input in either layout


def test_case_from_hf_reads_the_task_from_the_model():
    case = healthy_hf.make_t5()
    assert case["task"]["kind"] == "seq2seq" and case["task"]["vocab_size"] == 64
    assert healthy_hf.make_vit()["task"] == {"kind": "classification", "ignore_index": -100, "num_classes": 2}
    assert healthy_hf.make_gpt2()["task"]["kind"] == "causal_lm"
    assert "transformers" not in open(ROOT / "diagnostics" / "hf_case.py").read().split('"""', 2)[2].split("def ")[0]


def test_whisper_reading_little_of_the_audio_at_init_is_judged_after_training_steps(doctor_on):
    """At init the decoder barely reads the audio (0.4% change): the 0.02-std cross-attention passes little of the
    encoder's stream, where the sinusoidal positions are large. It grows as the model trains, so it is no warn."""
    import input_dependence
    result = doctor_on(healthy_hf, "make_whisper")["input_dependence"]
    assert result.status in ("pass", "skip") and result.details["relative_change_at_start"] < input_dependence.WEAK, result


def test_time_major_rows_are_told_apart_from_time():
    """The LSTM LM is (T, B): with batch_dim 1 the rows are independent. Read as batch-first, dim 0 leaks one way (later
    steps change, earlier steps feed): what a time axis looks like, so a warn that names batch_dim, not a leak's fail."""
    import batch_independence
    case = healthy_own.make_lstm_lm()
    assert batch_independence.check_batch_independence(case).status == "pass"
    case["task"] = {**case["task"], "batch_dim": 0}
    result = batch_independence.check_batch_independence(case)
    i = result.details["row"]
    assert result.status == "warn" and "batch_dim" in result.summary, result.summary
    assert result.details["poison_leaks_to"] == list(range(i + 1, result.details["rows"]))
    assert result.details["gradient_leaks_from"] == list(range(i))


def test_a_two_way_leak_along_dim_0_still_fails():
    """A bidirectional LSTM read as batch-first leaks both ways: no time axis explains that, so it stays a fail."""
    import batch_independence
    case = healthy_own.make_lstm_lm()
    model = case["model"]
    model.rnn = torch.nn.LSTM(32, 16, 2, bidirectional=True)
    model.nlayers, model.nhid = 4, 16
    case["task"] = {**case["task"], "batch_dim": 0}  # BUG: dim 0 of this (T, B) batch is time, and the LSTM reads it both ways
    assert batch_independence.check_batch_independence(case).status == "fail"


@pytest.mark.parametrize("leak, status", [(False, "pass"), (True, "fail")])
def test_a_clip_style_score_matrix_mixes_rows_by_design_but_a_leaking_tower_still_fails(leak, status):
    """CLIP scores every image against every text of the batch: rows meet only in the changed row's column. A tower
    that normalises over the batch (what train-mode BatchNorm does in contrastive models) leaks outside that column."""
    import batch_independence
    case = broken_registration.make_two_towers()
    if leak:
        case["model"].image.insert(1, BatchMean())  # BUG: subtracts the batch mean: each embedding depends on the others
    result = batch_independence.check_batch_independence(case)
    assert result.status == status, result.summary
    assert result.details["score_matrix_dim"] == (None if leak else 1)


class BatchMean(torch.nn.Module):
    def forward(self, x):
        return x - x.mean(0, keepdim=True)


def test_time_major_causality_is_read_along_time():
    """Read along its real time dim the LSTM LM is causal; a bidirectional one (it sees the future) is not."""
    import causal_dependency
    case = healthy_own.make_lstm_lm()
    assert causal_dependency.check_causal_dependency(case).status == "pass"
    model = case["model"]
    model.rnn = torch.nn.LSTM(32, 16, 2, bidirectional=True)  # BUG: a bidirectional LSTM for a causal LM
    model.nlayers, model.nhid = 4, 16  # init_hidden: (2 layers x 2 directions, B, 16); the decoder reads 2 x 16
    torch.nn.init.normal_(model.decoder.weight, std=0.1)
    assert causal_dependency.check_causal_dependency(case).status == "fail"


def test_noise_in_forward_is_not_leakage_but_mixing_still_is():
    import batch_independence
    case = healthy_own.make_vae()
    assert batch_independence.check_batch_independence(case).status == "pass"

    class MixingVAE(healthy_own.VAE):
        def reparameterize(self, mu, logvar):
            return mu.mean(0, keepdim=True) + torch.randn_like(mu) * torch.exp(0.5 * logvar)  # BUG: the batch mean leaks

    torch.manual_seed(0)
    case["model"] = MixingVAE()
    assert batch_independence.check_batch_independence(case).status == "fail"


def test_cls_token_and_position_table_are_tables_not_weight_matrices():
    import init_scale
    import update_ratio
    case = healthy_own.make_timm_vit()
    assert {"cls_token", "pos_embed"} <= {row["name"] for row in init_scale.check_init_scale(case).details["embeddings"]}
    result = update_ratio.check_update_ratio(case)
    assert {"cls_token", "pos_embed"} <= set(result.details["other"]) and result.status == "pass"


def test_gpt2_scaled_residual_init_passes_but_a_too_small_init_still_warns():
    import init_scale
    case = healthy_own.make_nanogpt()
    result = init_scale.check_init_scale(case)
    assert result.status == "pass" and len(result.details["residual_scaled"]) == 4  # 2 layers x (attn, mlp) c_proj
    with torch.no_grad():
        case["model"].transformer.h[0].mlp.c_fc.weight.mul_(0.05)  # BUG: one layer at a twentieth of its scale
    assert init_scale.check_init_scale(case).status == "warn"


@pytest.mark.parametrize("lr, status", [(20.0, "pass"), (200.0, "fail")])
def test_a_high_lr_sgd_regime_that_pays_off_passes_but_one_that_overshoots_fails(lr, status):
    """word_language_model trains its LSTM with SGD at lr 20: big steps that still lower the batch's loss. At lr 200
    the same model diverges (measured: loss 4.2 -> 17 over 300 steps), and its first step raises the loss."""
    import update_ratio
    case = healthy_own.make_lstm_lm()
    case["optimizer"] = lambda params: torch.optim.SGD(params, lr=lr)
    result = update_ratio.check_update_ratio(case)
    assert result.status == status and max(result.details["ratios"].values()) > update_ratio.HIGH_FAIL, result
    payoff = result.details["step_payoff"]
    assert (payoff >= update_ratio.STEP_PAYOFF) if status == "pass" else (payoff < 0), payoff


@pytest.mark.parametrize("peak, status", [(1, "pass"), (100, "warn"), (1000, "fail")])
def test_a_warmup_schedule_is_judged_at_its_peak(peak, status):
    """nanoGPT's schedule: linear warmup then cosine decay. At a 100x peak (Adam at 0.03) the ratios pass 0.1, but 10
    steps still lower the batch's loss (4.15 -> 1.63): a threshold, not a harm shown, so a warn. At 1000x two steps
    raise it to 6.9 where 100x lowers it: the overshoot shown, a fail (measured)."""
    import update_ratio
    case = healthy_own.make_nanogpt()
    case["task"] = {**case["task"], "lr_schedule": lambda step: peak * min(1.0, (step + 1) / 100)}  # BUG when peak > 1
    result = update_ratio.check_update_ratio(case)
    assert result.status == status and result.details["lr_factor"] == peak, result.summary
    assert ("1x" in result.details["overshoot"]) == (peak > 1)


def test_an_all_ones_mask_is_normal_but_a_repeated_batch_is_not():
    import data_sanity
    import input_dependence
    case = healthy_own.make_nanogpt()
    ids = case["batch"][0]
    case["batch"] = ({"idx": ids, "mask": torch.ones_like(ids)}, case["batch"][1])
    case["model"].forward = lambda idx, mask: healthy_own.GPT.forward(case["model"], idx)
    assert data_sanity.check_data_sanity(case).status == "pass"
    assert input_dependence.check_input_dependence(case).status == "pass"  # the ids vary: the constant mask is left alone
    case["batch"] = ({"idx": ids[:1].expand_as(ids), "mask": torch.ones_like(ids)}, case["batch"][1])  # BUG: one row repeated
    assert data_sanity.check_data_sanity(case).status == "fail"


def test_log_softmax_with_nll_has_its_chance_level_and_a_scaled_twin_warns():
    import init_loss
    case = healthy_own.make_mnist()
    result = init_loss.check_init_loss(case)
    assert result.status == "pass" and abs(result.details["zero_output_loss"] - 2.302585) < 1e-4
    model = case["model"]
    with torch.no_grad():
        model.fc2.weight.mul_(200)  # BUG: logits 200x too large before log_softmax
    result = init_loss.check_init_loss(case)  # 11.8x chance; 20 Adadelta steps take it to 0.19: no harm shown, a warn
    assert result.status == "warn" and result.details["ratio_to_chance"] > 10, result.summary


def test_time_major_transformer_without_its_causal_mask_is_caught():
    import causal_dependency
    case = healthy_own.make_transformer_lm()
    model = case["model"]
    model.forward = lambda src: torch.nn.functional.log_softmax(model.decoder(model.transformer_encoder(  # BUG: no src_mask
        model.pos_encoder(model.encoder(src) * model.ninp ** 0.5))), dim=-1)
    result = causal_dependency.check_causal_dependency(case)
    assert result.status == "fail" and result.details["lookahead"] >= 10


class RedrawnNoise(healthy_own.Diffusion):
    def forward(self, x0):
        prediction, _ = super().forward(x0)
        return prediction, torch.randn_like(x0)  # BUG: a fresh draw, not the noise that was added: nothing to learn


def test_a_diffusion_objective_passes_but_a_target_noise_drawn_twice_fails(doctor_on):
    """DDPM's loss is random by design (t and the noise are drawn in forward), so overfit_one_batch accepts a loss that
    halved and settled; a target noise drawn apart from the one added cannot be predicted, and the loss never halves.
    Its zero-initialised output conv hides the input and every gradient at step 0: both checks look after a step."""
    import overfit_one_batch
    case, healthy = healthy_own.make_ddpm(), doctor_on(healthy_own, "make_ddpm")
    result = healthy["overfit_one_batch"]
    assert result.status == "pass" and result.details["samples_noise"], result.summary
    assert healthy["input_dependence"].details["steps_taken"] == 1
    assert healthy["update_ratio"].details["judged_step"] == 2
    with healthy_own.seeded(29):
        case["model"] = RedrawnNoise()
    result = overfit_one_batch.check_overfit_one_batch(case)
    assert result.status == "fail" and result.details["failure"] in ("plateau", "flat"), result.summary


class UnconditionedDiT(healthy_own.DiT):
    def forward(self, x, t, y):
        return super().forward(x, t, torch.full_like(y, 4))  # BUG: the null class for every row: the label is dropped


def test_dit_zero_gates_are_stepped_through_but_a_dropped_class_label_still_shows(doctor_on):
    """adaLN-Zero hides the conditioning for two steps (zero final layer, then zero gates); gradient_flow, update_ratio
    and input_dependence step through it. A DiT that passes the null class for every row ignores its labels for good."""
    import input_dependence
    case, healthy = healthy_own.make_dit(), doctor_on(healthy_own, "make_dit")
    assert healthy["gradient_flow"].status == "pass"
    assert healthy["update_ratio"].details["judged_step"] == 3
    result = healthy["input_dependence"]
    assert result.status == "pass" and result.details["steps_taken"] == 2, result.summary
    with healthy_own.seeded(30):
        case["model"].net = UnconditionedDiT()
    result = input_dependence.check_input_dependence(case)
    assert result.status == "fail" and "changing input 1 alone" in result.summary, result.summary
    assert result.details["steps_taken"] == 2  # every zero-init has moved: the label is ignored for good


def test_update_ratio_on_a_real_architecture_cast_to_bf16_names_the_lost_steps():
    """A tiny GPT-2 in fp32 passes; cast whole to bfloat16 at a fine-tuning lr, most of its step rounds away."""
    import update_ratio
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        case = healthy_hf.make_gpt2()
        case["model"] = case["model"].to(dtype)
        case["optimizer"] = lambda params: torch.optim.AdamW(params, lr=2e-5)
        results[dtype] = update_ratio.check_update_ratio(update_ratio.validate_case(case))
    assert results[torch.float32].status == "pass" and results[torch.float32].details["lost_to_rounding"] == {}
    lost = results[torch.bfloat16].details["lost_to_rounding"]
    assert results[torch.bfloat16].status == "fail" and "rounding" in results[torch.bfloat16].summary
    assert sum(share >= 0.5 for share in lost.values()) >= 10  # measured: 11 parameters, the worst at 100%
