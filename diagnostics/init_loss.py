"""init_loss: does the loss start where chance says it should?

Symptom
    The first logged loss is far from what a model that knows nothing should score (e.g. 23.5
    on a 10-class problem instead of ln 10 = 2.30), the curve has a long "hockey stick" start,
    or the loss at step 0 is suspiciously low. Karpathy's recipe ("verify loss @ init" (evidence/karpathy-recipe.md#verify-loss-at-init)) and
    cs231n ("Look for correct loss at chance performance"
    (evidence/cs231n-nn3.md#loss-at-chance)) both make this the first check.

What it checks
    Runs the model on the case's batch (no gradients, in the mode the model is in: train mode,
    the default after construction, is what your first training step reports; dropout makes it
    noisy, so train mode averages 3 passes) and compares the case's own loss with:

      chance          what a model that knows nothing scores: ln C for C classes (C is the
                      size of the output's class dimension, what the softmax runs over; a
                      num_classes or vocab_size hint that differs is a warn), also for soft
                      labels (probability rows); ln 2 per element for 0/1 targets with a
                      logits loss; the mean square of the targets for MSE regression (the
                      score of an all-zero output).
      best constant   the best any input-blind predictor can do on this batch: the entropy of
                      the batch's labels (ignore_index excluded), or the targets' variance.

    It also scores an all-zero output with your loss_fn (uniform log-probabilities -ln C instead
    when the model ends in log_softmax, as the MNIST example does). A mean MSE or cross-entropy gives
    exactly chance; anything else means the loss is not what chance assumes (summed over the
    batch, scaled, extra terms, or another loss such as L1), and the model is then judged
    against that all-zero score instead, so a scaled loss is not mistaken for scaled outputs.

    fail   loss > 1.5x chance and the harm shows (outputs too large at init: logits scaled
           up, init too wide; for regression, a loss those steps raise or turn NaN): the check
           scales the outputs down (1/2 .. 1/256, the largest scale that brings the loss within
           1.25x chance) and runs 20 steps of your optimizer from your init (your lr schedule's
           first values); a FAIL when the loss after them is still at or above where the
           scaled-down model starts: those steps only undo the init.
           Also a NaN loss, a negative loss (a flipped sign; or probability outputs fed to
           NLLLoss, named as such when the loss is exactly -mean(p[target])), or regression
           outputs whose shape differs from the targets' and that your loss_fn broadcasts (an
           output of as many elements that it scores as if put in the targets' shape, as a
           loss_fn that squeezes it, is judged in that shape).
    warn   loss > 1.5x chance of a classifier that the 20 steps take below the scaled-down
           start (a threshold alone shows no harm; for a regression net it is a pass, as it is
           with outputs within 3x the targets' RMS: an untrained net's own output spread adds to
           the all-zero score); regression outputs over 3x the targets' RMS that the 20 steps
           leave above the scaled-down start (a hockey stick: MSE pulls large outputs down, the
           first steps go into it); loss < 0.75x
           the best constant (the model may already know the targets:
           leakage, an off-by-one that feeds the target in as input, or pretrained weights;
           target_leak and causal_dependency show which); a loss summed instead of averaged;
           a classification loss_fn whose all-zero score
           is not ln C (a scale factor, extra terms); regression targets far from zero mean
           (the start is a hockey stick: init the final bias to the mean or standardise) while
           20 steps of your optimizer leave the loss above where outputs shifted by the mean
           start (a pass when they take it below); a num_classes hint disagreeing with the output.
    skip   task kind "other", a task that cannot be inferred, all-zero regression targets (no chance
           level), or task["pretrained"] true.

Command
    python diagnostics/init_loss.py                      # embedded demo (planted bug)
    python diagnostics/init_loss.py --healthy            # its healthy twin
    python diagnostics/init_loss.py --case my_case.py --json

Output
    $ python diagnostics/init_loss.py --healthy
    [PASS] init_loss: loss at init 2.34 (train mode) vs chance 2.3 (ln 10): 1.02x chance
    (exit code 0)
    $ python diagnostics/init_loss.py --json
    {
      "id": "init_loss",
      "status": "fail",
      "summary": "loss at init 7.71 (train mode) vs chance 2.3 (ln 10): 3.35x chance, the outputs are too large at init: after 20 steps of your optimizer it is at 4.47, where the same model with its outputs scaled by 0.125 starts at 2.49",
      "details": {
        "loss": 7.70895528793335,
        "loss_per_pass": [
          7.70895528793335,
          7.70895528793335,
          7.70895528793335
        ],
        "mode": "train",
        "zero_output_loss": 2.3025851249694824,
        "kind": "classification",
        "num_classes": 10,
        "num_classes_hint": 10,
        "chance": 2.302585092994046,
        "chance_formula": "ln 10",
        "best_constant": 2.1342371749153575,
        "n_targets": 64,
        "ratio_to_chance": 3.347956742788347,
        "ratio_to_best_constant": 3.612042456452424,
        "next": "find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale",
        "trial_steps": 20,
        "loss_after_trial": 4.473219394683838,
        "calming_factor": 0.125,
        "calmed_loss": 2.4924378395080566
      }
    }
    (exit code 1)

How to read it
    ratio_to_chance is the headline: about 1 is healthy (the test zoo measures 0.99 to 1.23).
    Above 1.5 the model's outputs may be too large at init; loss_after_trial against
    calmed_loss says whether it costs you steps (a fail) or is soon undone (a warn): find what
    scales them (a temperature, an init std, a missing normalisation). Below 0.75x
    best_constant the model may already know the targets. zero_output_loss is your loss_fn on an all-zero output; when
    it differs from chance, the ratios are taken against it and the summary says so.

Next step
    PLAYBOOK.md#init-loss. Then run init_scale (per-layer init std) and, for a low loss, labels
    and causal_dependency (a target that is also an input).
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (CheckResult, class_dim, cli_main, forward, main_tensor, needs_closure, preserved,
                               replace_tensor, rng_preserved, validate_case)

HIGH_RATIO = 1.5  # our assumption, tuned on the test zoo: healthy cases measure 0.99-1.23x chance, the scaled-logits twin 2.7x
LOW_RATIO = 0.75  # our assumption, tuned on the test zoo: a random-init model cannot beat the best constant; the unshifted-LM twin measures 0.6x
TRAIN_MODE_PASSES = 3  # dropout makes a train-mode loss noisy; 3 passes keep the check cheap
LOSS_FN_TOLERANCE = 0.1  # a standard mean loss scores an all-zero output at chance to float precision; 10% leaves room for auxiliary terms
CLASS_KINDS = ("classification", "causal_lm", "seq2seq")
TRIAL_STEPS = 20  # steps of your optimizer in the too-large trial: the hockey stick shows in the first few dozen (our assumption)
CALMING = [2.0 ** -k for k in range(1, 9)]  # output scales tried to calm the outputs: 1/2 .. 1/256
OUTPUT_SCALE = 3.0  # regression outputs over 3x the targets' RMS score 10x the all-zero loss (1 + 3**2): an order of
# magnitude; a default nn.Linear on unit-variance inputs gives RMS 0.4-0.9 (measured), under it for any targets of RMS
# 0.3 or more (min-max normalised data's scale) — our assumption
CALM_RATIO = 1.25  # the largest of them that brings the loss within 1.25x chance (the test zoo's healthy inits measure up to 1.23x)


def probabilities_into_nll(out, targets, loss):
    """True when `out` holds probability rows (non-negative, summing to 1 over the last dim) and `loss` is exactly
    -mean(p[target]): what NLLLoss computes from probabilities given in place of log-probabilities."""
    if not (out.is_floating_point() and out.ndim >= 2 and not targets.is_floating_point()
            and tuple(targets.shape) == tuple(out.shape[:-1]) and bool((out >= 0).all())
            and bool(((out.sum(-1) - 1).abs() < 1e-3).all())):
        return False
    kept = targets >= 0  # NLLLoss leaves out ignore_index (-100 by default)
    picked = out.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[kept]
    return picked.numel() > 0 and abs(float(-picked.double().mean()) - loss) <= 1e-4 * max(1.0, abs(loss))  # float noise


def entropy(p):
    """Entropy in nats of a distribution given as (unnormalised) non-negative weights."""
    p = p[p > 0].double() / p.sum()
    return float(-(p * p.log()).sum())


def ln(x):
    return float(torch.tensor(float(x), dtype=torch.float64).log())


def fmt(x):
    return f"{x:.3g}"


def neutral_output(output):
    """An uninformative output: all zeros, or uniform log-probabilities when the model ends in log_softmax (NLL loss)."""
    for dim in range(output.ndim):  # to NLL an all-zero output is certainty (log 1), not chance: give it log(1/C)
        if output.shape[dim] > 1 and bool((output <= 0).all()) and bool((output.logsumexp(dim).abs() < 1e-3).all()):
            return torch.full_like(output, -ln(output.shape[dim]))
    return torch.zeros_like(output)


def task_reference(out, targets, task, zero_loss):
    """Work out the task and its reference losses: a dict, or a string saying why there is none.

    chance: the analytic loss of an uninformative output (uniform probabilities, or zeros for
    regression); best_constant: the lowest loss any input-blind prediction reaches on this batch.
    zero_loss (the case's loss on an all-zero output) only tells 0/1 and soft-label targets with a
    logits loss apart from regression targets when the task kind is not given.
    """
    kind = task.get("kind")
    if kind == "other":
        return "task kind is 'other': there is no chance level to compare with"
    integer_targets = not targets.is_floating_point() and targets.dtype != torch.bool
    same_shape = targets.is_floating_point() and targets.shape == out.shape and out.ndim > 0

    def zero_output_scores(value):  # the loss_fn on an all-zero output reveals which loss it is
        return zero_loss is not None and abs(zero_loss - value) < 1e-3 * max(1.0, value)

    def loss_says(value):
        return zero_output_scores(value) if zero_loss is not None else kind in CLASS_KINDS

    if integer_targets and kind in (None, *CLASS_KINDS):
        dim = class_dim(out, targets)
        if dim is None:
            return f"output {tuple(out.shape)} has no class dimension matching targets {tuple(targets.shape)}"
        n_classes = out.shape[dim]
        kept = targets[targets != task.get("ignore_index", -100)]
        counts = torch.bincount(kept.clamp(0, n_classes - 1).flatten().cpu(), minlength=n_classes)
        return {"kind": kind or "classification (inferred)", "num_classes": n_classes,
                "num_classes_hint": task.get("num_classes", task.get("vocab_size")),
                "chance": ln(n_classes), "chance_formula": f"ln {n_classes}",
                "best_constant": entropy(counts) if kept.numel() else 0.0, "n_targets": kept.numel()}
    if kind != "regression" and same_shape and out.shape[-1] >= 1 and bool((targets >= 0).all()) \
            and float((targets.sum(-1) - 1).abs().max()) < 1e-3 and loss_says(ln(out.shape[-1])):
        n_classes = out.shape[-1]  # soft labels (probability rows) under a cross-entropy loss
        return {"kind": kind or "classification (inferred: soft labels)", "num_classes": n_classes,
                "num_classes_hint": task.get("num_classes"), "chance": ln(n_classes), "chance_formula": f"ln {n_classes}",
                "best_constant": entropy(targets.reshape(-1, n_classes).mean(0).cpu()), "n_targets": targets.numel() // n_classes}
    if kind != "regression" and same_shape and bool(((targets == 0) | (targets == 1)).all()) and loss_says(ln(2)):
        rate = float(targets.double().mean())  # 0/1 targets under a logits loss (BCEWithLogits)
        return {"kind": kind or "classification (inferred: 0/1 targets)", "num_classes": 2, "num_classes_hint": None,
                "chance": ln(2), "chance_formula": "ln 2 per element",
                "best_constant": entropy(torch.tensor([rate, 1 - rate])), "n_targets": targets.numel()}
    if kind in CLASS_KINDS:
        return f"task kind {kind} but the targets are neither class indices, probability rows nor 0/1 per output element"
    if targets.ndim == 0:  # one number: no batch to take the targets' mean and variance over
        return "the targets are one number (a 0-dim tensor), not a batch: give them a batch dimension"
    if targets.is_floating_point():
        flat = targets.double().reshape(targets.shape[0], -1)
        return {"kind": kind or "regression (inferred)", "chance": float((flat ** 2).mean()), "chance_formula": "mean(targets**2)",
                "best_constant": float(flat.var(dim=0, unbiased=False).mean()), "target_mean": float(flat.mean()),
                "shapes_differ": tuple(out.shape) != tuple(targets.shape), "n_targets": targets.numel()}
    return f"cannot infer the task from output {tuple(out.shape)} and {targets.dtype} targets {tuple(targets.shape)}: pass task={{'kind': ...}}"


def scores_as_shaped(loss_fn, out, targets):
    """Whether loss_fn scores an output of another shape than the targets, with as many elements, exactly as it scores
    that output put in the targets' shape (it squeezes or views it itself): then nothing is broadcast. Probed with
    distinct values, so a broadcast that pairs every output with every target shows; a loss_fn that refuses the
    reshaped output tells nothing (False)."""
    probe = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape)
    try:
        with torch.no_grad():
            as_given, as_shaped = float(loss_fn(probe, targets)), float(loss_fn(probe.reshape(targets.shape), targets))
    except Exception:  # (a loss_fn written for the output's own shape)
        return False
    return as_given == as_shaped


def _scaled(output, factor):
    """The model's output with its prediction tensor multiplied by factor (a fixed temperature), the structure kept."""
    main = main_tensor(output)
    return replace_tensor(output, main, main * factor)


def _calming_factor(case, output, calm):
    """The largest output scale in CALMING that brings the loss at init under `calm` (else the one that scores lowest),
    and that loss; (None, nan) when every scale gives a NaN loss."""
    targets = case["batch"][1]
    with torch.no_grad():
        scored = [(float(case["loss_fn"](_scaled(output, factor), targets)), factor) for factor in CALMING]
    scored = [(loss, factor) for loss, factor in scored if loss == loss]
    return next(((factor, loss) for loss, factor in scored if loss <= calm), min(scored, default=(float("nan"), None))[::-1])


def _trainable(case):
    """Whether the trial can run: some parameter trains, and the optimizer steps without a closure (LBFGS needs one)."""
    return (any(p.requires_grad for p in case["model"].parameters())
            and not needs_closure(case["optimizer"]([torch.zeros(1, requires_grad=True)])))


def _trained(case, steps):
    """The loss after `steps` steps of the case's optimizer (its lr schedule's first values) from the weights as built.
    The model is restored afterwards."""
    model, loss_fn, (inputs, targets) = case["model"], case["loss_fn"], case["batch"]
    schedule = case["task"].get("lr_schedule")
    with preserved(model):
        torch.manual_seed(0)
        optimizer = case["optimizer"]([p for p in model.parameters() if p.requires_grad])
        base = [group["lr"] for group in optimizer.param_groups]
        for step in range(steps):
            for group, lr in zip(optimizer.param_groups, base):
                group["lr"] = lr * (float(schedule(step)) if schedule else 1.0)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(forward(model, inputs), targets)
            if not torch.isfinite(loss):
                break
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            return float(loss_fn(forward(model, inputs), targets))


def check_init_loss(case):
    """Compare the loss at initialisation with chance and with the best input-blind constant."""
    case = validate_case(case)
    with rng_preserved():  # the loss_fn is the user's, called outside the model's preserved() too (the calming scales,
        return _judged(case)  # the shape probe): it may draw random numbers


def _judged(case):
    model, loss_fn, task = case["model"], case["loss_fn"], case["task"]
    if task.get("pretrained"):
        return CheckResult("init_loss", "skip", "task says the weights are pretrained: the loss is not at chance by design")
    mode = "train" if model.training else "eval"
    with preserved(model):
        inputs, targets = case["batch"]
        with torch.no_grad():
            losses = []
            for _ in range(TRAIN_MODE_PASSES if model.training else 1):
                output = forward(model, inputs)
                losses.append(float(loss_fn(output, targets)))
            out = main_tensor(output)
            zero_loss = float(loss_fn(neutral_output(output), targets)) if isinstance(output, torch.Tensor) else None
    if out is None or not isinstance(targets, torch.Tensor):
        return CheckResult("init_loss", "skip", "cannot find the prediction tensor in the output, or the targets are not a tensor")
    loss = sum(losses) / len(losses)
    details = {"loss": loss, "loss_per_pass": losses, "mode": mode, "zero_output_loss": zero_loss}
    if loss != loss or abs(loss) == float("inf"):
        all_ignored = bool((targets == task.get("ignore_index", -100)).all())
        details["next"] = ("every target equals ignore_index: run labels" if all_ignored else
                           "run nan_watch to find the first module that produces NaN/inf")
        return CheckResult("init_loss", "fail", f"loss at init is {loss}{' (every target is ignore_index)' if all_ignored else ''}: "
                           "nothing can be learned from it", details)
    if isinstance(output, torch.Tensor) and targets.is_floating_point() and out.shape != targets.shape \
            and out.numel() == targets.numel() and scores_as_shaped(loss_fn, out, targets):
        out = out.reshape(targets.shape)  # the loss_fn puts the output in the targets' shape itself
    ref = task_reference(out.detach(), targets, task, zero_loss)
    if isinstance(ref, str):
        return CheckResult("init_loss", "skip", ref, details)
    details.update(ref)
    if ref.get("shapes_differ"):
        details["next"] = "make the output and target shapes equal (e.g. output.squeeze(-1) or targets.unsqueeze(-1))"
        return CheckResult("init_loss", "fail", f"regression output {tuple(out.shape)} and targets {tuple(targets.shape)} differ "
                           "in shape: MSE broadcasts them and compares every output with every target", details)
    if loss < 0 and probabilities_into_nll(out.detach(), targets, losses[-1]):
        details["next"] = "use log_softmax before NLLLoss, or return the logits to CrossEntropyLoss"
        return CheckResult("init_loss", "fail", f"loss at init {fmt(loss)} is negative: the outputs are probabilities (a "
                           "softmax) fed to NLLLoss, which expects log-probabilities, so the loss is -mean(p[target])",
                           details)
    if loss < 0:
        details["next"] = "check the sign of the loss: the optimizer maximises a negated loss"
        return CheckResult("init_loss", "fail", f"loss at init {fmt(loss)} is negative, which cross-entropy and MSE cannot be: "
                           "is the sign flipped?", details)
    if ref.get("num_classes") == 1:  # ln 1 = 0: no chance level to compare with
        if loss == 0 and zero_loss == 0:  # the model's output and an all-zero one score the same 0: nothing to learn
            details["next"] = "give the output one unit per class (2 for a yes/no target), or use BCEWithLogitsLoss on one logit"
            return CheckResult("init_loss", "fail", "loss at init is 0 with one output class, and 0 on an all-zero output too: "
                               "a softmax over one class is 1, so cross-entropy is 0 whatever the model predicts and "
                               "nothing is learned", details)
        return CheckResult("init_loss", "skip", f"the output has one class: no chance level to compare the loss at init "
                           f"({fmt(loss)}) with", details)
    chance, best = ref["chance"], ref["best_constant"]
    if chance == 0:  # all-zero regression targets: mean(targets**2) is 0, and every non-zero output scores above it
        return CheckResult("init_loss", "skip", f"the targets are all zero: no chance level to compare the loss at init "
                           f"({fmt(loss)}) with", details)
    loss_fn_off = (zero_loss is not None and zero_loss > 0
                   and abs(zero_loss / chance - 1) > LOSS_FN_TOLERANCE)  # |r - 1| of a float r is never exactly 0.1
    scale = zero_loss / chance if loss_fn_off else 1.0  # judge the model against its own loss function's chance level
    summed = loss_fn_off and any(abs(scale / n - 1) < 0.01 for n in {targets.shape[0], ref["n_targets"]} if n)
    other_regression_loss = loss_fn_off and not summed and "target_mean" in ref  # L1, Huber: their all-zero score is chance
    details.update(ratio_to_chance=loss / (scale * chance),
                   ratio_to_best_constant=loss / (scale * best) if best > 0 else None)
    measured = f"loss at init {fmt(loss)} ({mode} mode) vs chance {fmt(scale * chance)}"
    measured += (f" (your loss_fn on an all-zero output; a mean loss would give {ref['chance_formula']} = {fmt(chance)})"
                 if loss_fn_off else f" ({ref['chance_formula']})")
    if loss > HIGH_RATIO * scale * chance:
        if "target_mean" in ref:  # regression: how large the outputs are against the targets, whatever the loss
            details.update(output_rms=float(out.detach().double().pow(2).mean().sqrt()), target_rms=chance ** 0.5)
        return _too_large(case, output, details, measured, scale * chance)
    if best > 0 and loss < LOW_RATIO * scale * best:
        details["next"] = "run target_leak and causal_dependency: they change the inputs and show whether the answer is in them"
        return CheckResult("init_loss", "warn", f"{measured}: below {fmt(scale * best)}, the best any input-blind prediction "
                           "scores on this batch: the model may already know the targets (leakage, an unshifted LM target) "
                           "or its weights are pretrained (then set task['pretrained'])", details)
    if summed:
        details["next"] = "average the loss (reduction='mean'): a sum makes the step size grow with the batch size"
        return CheckResult("init_loss", "warn", f"{measured}: the loss is summed over the batch, not averaged", details)
    if loss_fn_off and not other_regression_loss:
        details["next"] = "check the loss function for a scale factor or extra terms (fine if it is deliberately another loss)"
        return CheckResult("init_loss", "warn", f"{measured}: the loss function is not a plain mean cross-entropy", details)
    if ref.get("num_classes_hint") not in (None, ref.get("num_classes")):
        details["next"] = "make the output size equal the number of classes"
        return CheckResult("init_loss", "warn", f"{measured}; but the task hints say {ref['num_classes_hint']} classes "
                           f"and the output has {ref['num_classes']}", details)
    if "target_mean" in ref and chance > HIGH_RATIO * best:
        return _off_centre(case, output, out, targets, details, measured, ref["target_mean"])
    return CheckResult("init_loss", "pass", f"{measured}: {fmt(details['ratio_to_chance'])}x chance", details)


def _too_large(case, output, details, measured, chance):
    """A loss above HIGH_RATIO x chance. A FAIL when the harm shows: after TRIAL_STEPS steps of your optimizer the loss is
    still at or above where the same model starts with its outputs scaled down (the steps went into undoing the init).
    Else a WARN that names its evidence. Regression outputs within OUTPUT_SCALE x the targets' RMS pass; past it, MSE's
    gradient grows with the outputs and pulls them down, so steps that have not yet undone them are a hockey stick (a
    WARN, as for targets off centre), and only a loss those steps raise, or turn NaN, is a FAIL."""
    ratio = f"{measured}: {fmt(details['ratio_to_chance'])}x chance"
    regression = "target_mean" in details  # _judged measured output_rms and target_rms for it
    if regression and not details["output_rms"] > OUTPUT_SCALE * details["target_rms"]:
        return CheckResult("init_loss", "pass", f"{ratio}, as an untrained regression net's own outputs add their spread to "
                           f"the all-zero score: their RMS {fmt(details['output_rms'])} is within {OUTPUT_SCALE:g}x the "
                           f"targets' {fmt(details['target_rms'])}", details)
    details["next"] = "find what scales the outputs up: a temperature, an init std, a missing normalisation; run init_scale"
    factor, calmed = _calming_factor(case, output, CALM_RATIO * chance)
    if factor is None or not calmed < details["loss"] or not _trainable(case):
        return CheckResult("init_loss", "warn", f"{ratio}: the outputs may be too large at init (no trial: no smaller output "
                           "scale scores lower, nothing is trainable, or the optimizer needs a closure)", details)
    after = _trained(case, TRIAL_STEPS)
    details.update(trial_steps=TRIAL_STEPS, loss_after_trial=after, calming_factor=factor, calmed_loss=calmed)
    trial = (f"after {TRIAL_STEPS} steps of your optimizer it is at {fmt(after)}, where the same model with its outputs "
             f"scaled by {factor:g} starts at {fmt(calmed)}")
    if regression and not after < calmed and after <= details["loss"]:  # (a NaN or a rise: the fail below)
        details["next"] = "standardise the targets, or scale the last layer's init down"
        return CheckResult("init_loss", "warn", f"{ratio}: the outputs start at {fmt(details['output_rms'] / details['target_rms'])}x "
                           f"the targets' RMS, and the first steps go into bringing them down: {trial}", details)
    if not after < calmed:  # NaN after the steps is harm too
        return CheckResult("init_loss", "fail", f"{ratio}, the outputs are too large at init: {trial}", details)
    undone = (f"{TRIAL_STEPS} steps of your optimizer take the loss to {fmt(after)}, below the {fmt(calmed)} that outputs "
              f"scaled by {factor:g} start at")
    if regression:  # an untrained net's own output variance adds to mean(targets**2)
        return CheckResult("init_loss", "pass", f"{ratio}, as an untrained regression net's own output variance adds to "
                           f"the all-zero score, and {undone}", details)
    return CheckResult("init_loss", "warn", f"{ratio}: the outputs start large, but {undone}", details)


def _off_centre(case, output, out, targets, details, measured, mean):
    """Regression targets far from zero mean: a WARN when the hockey stick shows (after TRIAL_STEPS steps of your
    optimizer the loss is still at or above where the same model starts with each output shifted by its target column's
    mean, what a final bias set to the mean gives), a PASS when those steps already take it below."""
    details["next"] = "standardise the targets or initialise the final bias to their mean (Karpathy, init well)"
    start = (f"{measured}: the targets have mean {fmt(mean)}, so the first steps learn the bias (predicting the mean "
             f"would score {fmt(details['best_constant'])})")
    if out.shape != targets.shape or not _trainable(case):
        return CheckResult("init_loss", "warn", start, details)
    columns = targets.reshape(targets.shape[0], -1).mean(0).reshape(targets.shape[1:])
    with torch.no_grad():
        centred = float(case["loss_fn"](replace_tensor(output, out, out + columns), targets))
    after = _trained(case, TRIAL_STEPS)
    details.update(trial_steps=TRIAL_STEPS, loss_after_trial=after, centred_loss=centred)
    trial = f"{TRIAL_STEPS} steps of your optimizer take it to {fmt(after)}"
    if not after < centred:
        return CheckResult("init_loss", "warn", f"{start}: {trial}, still above the {fmt(centred)} that outputs shifted "
                           "by the targets' mean start at", details)
    return CheckResult("init_loss", "pass", f"{measured}; the targets' mean {fmt(mean)} is learned fast: {trial}, below "
                       f"the {fmt(centred)} that outputs shifted by it start at", details)


class DemoClassifier(torch.nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        self.temperature = temperature

    def forward(self, x):
        return self.net(x) / self.temperature


def make_demo_case(broken=True):
    """A 10-class MLP on a linear teacher's labels; the broken twin divides its logits by a tiny temperature."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(64, 20)
        y = (x @ torch.randn(20, 10)).argmax(dim=1)
        temperature = 1.0
        if broken:
            temperature = 0.05  # BUG: dividing the logits by 0.05 multiplies them by 20
        model = DemoClassifier(temperature)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}


if __name__ == "__main__":
    sys.exit(cli_main(check_init_loss, make_demo_case, __doc__))
