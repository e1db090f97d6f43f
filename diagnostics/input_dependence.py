"""input_dependence: does the model's output change when its input does?

Symptom
    The loss falls to the level of always predicting the most common answer and stays there;
    every sample gets the same prediction; the model "learns" only the bias. Karpathy's recipe
    asks the question directly: "does your model learn to extract any information out of the
    input at all?" (evidence/karpathy-recipe.md#input-independent-baseline). A mask of zeros, an input overwritten in forward, a wrong tensor passed
    along or a layer that flattens everything to one value give a model that ignores its input.

What it checks
    Runs the model in the mode the script trains it in (a captured script's model is in that
    mode; a fresh model is in train mode, so BatchNorm normalises with the batch's statistics,
    as in training) on the real batch, then on a batch where each input row is replaced by the
    next row (a roll along the batch dimension: real, valid inputs in a new order), and measures

        relative change = mean |output' - output| / mean |output|

    For a batch of one, or an input whose rows are all equal, the replacement is random data
    of the same range (integer ids drawn from the observed range). With several input tensors
    (a tuple or a dict) each one is also rolled alone, to find an input that is ignored. A
    dict entry "labels" (the Hugging Face way of passing the targets to the model) is left
    alone: the predictions are not meant to depend on it; so are the arguments task
    ["target_inputs"] names (positions or names: nanoGPT's `model(x, y)` gives its targets as
    argument 1; a captured script sets the hint), and an input that is constant
    (an all-ones attention mask) while the others are perturbed. Log-probabilities (a
    log_softmax output) are compared without their per-row offset -log(classes), which would
    otherwise dwarf every change.

      fail   the mean change is below half a rounding step of the output's dtype (eps x mean
             |output|): the output does not depend on the input at all, or on one of several
             input tensors (a siamese net that compares the first image with itself, a DiT
             that drops its class label). (Judged in rounding steps, not as a ratio, so that a
             small input effect on top of a large constant offset, such as a big bias, is not
             mistaken for an ignored input.)
      warn   relative change below 1e-2 (the input barely matters: scaled to nothing, a
             near-zero gate, or a constant offset that dwarfs it).

    A weight matrix that is all zeros (a zero-initialised output layer: DDPM's last conv,
    DiT's adaLN-zero, a LoRA B matrix) makes the output ignore the input at step 0 by design:
    when an input changes nothing and such a matrix is still zero, the check takes an optimizer
    step (the case's optimizer, on its batch; undone afterwards) and measures again, up to 4
    steps (DiT's adaLN-Zero lets the class label through after 2). Every pass resets
    the random stream first, so dropout masks and noise sampled in forward (a VAE, a diffusion
    objective) are the same in each and cannot pass for a dependence on the input.

    An output that barely depends on its input at init (a decoder that starts near-constant: a
    sigmoid at 0.5, a time series model's level) is not yet a finding about the model: the check
    trains 20 steps (the case's optimizer, on its batch; undone afterwards) and judges again.
    Above 1e-2 then: a pass; still below but grown 2x or more: a skip "inconclusive" (it is
    being learned); not grown: the warn, `also after 20 steps of your optimizer`.

Command
    python diagnostics/input_dependence.py                      # embedded demo (planted bug)
    python diagnostics/input_dependence.py --healthy            # its healthy twin
    python diagnostics/input_dependence.py --case my_case.py --json

Output
    $ python diagnostics/input_dependence.py
    [FAIL] input_dependence: changing the input changes the output by 0 (relative): the output ignores its input
    (exit code 1)
    $ python diagnostics/input_dependence.py --healthy
    [PASS] input_dependence: changing the input changes the output by 0.947 (relative)
    (exit code 0)

How to read it
    details["relative_change"] is the headline (the healthy test zoo measures 0.06 to 0.9);
    details["per_input"] has one value per input tensor. Zero means the output is a function
    of the weights only: follow the input through forward (print x.abs().mean() after each
    layer) to find where it becomes constant.

Next step
    PLAYBOOK.md#input-dependence. Find where the input is lost (a mask, a detach-and-replace,
    a wrong variable in forward), then run overfit_one_batch.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (CheckResult, cli_main, forward, loss_closure, main_tensor, preserved, step_optimizer,
                               validate_case)

ROUNDING = 0.5  # derived: a mean change below half a rounding step of the output's dtype (eps x mean |output|) is no change
ZERO_INIT_STEPS = 4  # steps to let the input through a chain of zero-initialised layers: DiT's adaLN-Zero needs 2 (measured) — our assumption
SEED = 0  # any fixed seed: what matters is that every pass draws the same numbers
WEAK = 1e-2  # our assumption, tuned on the test zoo: healthy cases measure 0.06 (the CNN, mostly bias at init) to 0.9
WEAK_STEPS = 20  # optimizer steps before a weak dependence is judged: a decoder near-constant at init (a VAE's sigmoid output) learns to read its input within them — our assumption
GROWING = 2.0  # a weak dependence that grew 2x over those steps is being learned: inconclusive, not a warn — our assumption


def prediction(output):
    """The contract's main_tensor, else a dict's first tensor that is not its loss (CLIP's logits_per_image): any
    output that should move with the input will do here."""
    found = main_tensor(output)
    if found is None and isinstance(output, dict):
        found = next((value for key, value in output.items() if key != "loss" and torch.is_tensor(value)), None)
    return found


def leaves(inputs, targets=()):
    """Paths to the tensors of the inputs: [()] for a tensor, [(0,), (1,)] for a tuple, [('ids',), ...] for a dict;
    `targets` (task["target_inputs"]) are the positions or names of arguments that hold the loss's targets, left out."""
    if isinstance(inputs, torch.Tensor):
        return [()]
    keys = inputs.keys() if isinstance(inputs, dict) else range(len(inputs))
    return [(key,) for key in keys if isinstance(inputs[key], torch.Tensor) and key != "labels"  # HF's labels are targets
            and key not in targets]


def replace(inputs, path, value):
    if not path:
        return value
    if isinstance(inputs, dict):
        return {**inputs, path[0]: value}
    return type(inputs)(value if i == path[0] else item for i, item in enumerate(inputs))


def get(inputs, path):
    return inputs[path[0]] if path else inputs


def perturbed(t):
    """The tensor with each row replaced by the next one, or random values in its range if that changes nothing."""
    if t.ndim > 0 and t.shape[0] > 1:
        rolled = t.roll(1, dims=0)
        if not torch.equal(rolled, t):
            return rolled
    if t.is_floating_point():
        std = float(t.std()) if t.numel() > 1 else 0.0
        return torch.randn_like(t) * (std or 1.0) + float(t.mean())
    low, high = int(t.min()), int(t.max())
    if low == high or t.dtype == torch.bool:
        return None  # a constant mask or flag: no valid different value to try
    return torch.randint(low, high + 1, t.shape, dtype=t.dtype, device=t.device)


def comparable(output):
    """The output as float64; log-probabilities lose their per-row offset (-log V), which carries no signal."""
    output = output.detach().double()
    if output.ndim > 0 and output.shape[-1] > 1 and bool((output <= 0).all()) \
            and bool((output.logsumexp(-1).abs() < 1e-3).all()):  # log_softmax output: compare the logits it came from
        return output - output.mean(-1, keepdim=True)
    return output


def seeded_output(model, inputs):
    """The prediction tensor, with the random stream reset first: a model that samples noise in forward (a VAE, a
    diffusion objective drawing t and the noise) draws the same numbers every pass, so only the input can differ."""
    torch.manual_seed(SEED)
    return prediction(forward(model, inputs))


def mean_change(model, inputs, paths, base):
    """Mean |output' - output| when the tensors at `paths` are perturbed; None if none of them can be."""
    changed, any_changed = inputs, False
    for path in paths:
        new = perturbed(get(inputs, path))
        if new is not None:  # a constant mask next to varying token ids: perturb the ids alone
            changed, any_changed = replace(changed, path, new), True
    if not any_changed:
        return None
    return float((comparable(seeded_output(model, changed)) - base).abs().mean())


def measure(model, inputs, paths, modes):
    """(output, base, change of the whole input, {input: change}) without gradients, every module in the mode `modes`
    gives it (the modes the script trains in)."""
    for module, training in modes:
        module.training = training
    with torch.no_grad():
        output = seeded_output(model, inputs)
        if output is None:
            return None, None, None, {}
        base = comparable(output)
        if not bool(base.isfinite().all()):
            return output, base, None, {}
        whole = mean_change(model, inputs, paths, base)
        per_input = {str(path[0]): mean_change(model, inputs, [path], base) for path in paths} if len(paths) > 1 else {}
    return output, base, whole, per_input


def rounding_floor(output, base):
    """Half a rounding step of the output's dtype at its mean magnitude: a smaller mean change is no change."""
    return ROUNDING * torch.finfo(output.dtype).eps * float(base.abs().mean())


def ignores_an_input(output, base, whole, per_input):
    """No change in the output, or none from one of several input tensors."""
    floor = rounding_floor(output, base)
    return whole <= floor or any(change is not None and change <= floor for change in per_input.values())


def train_steps(case, model, steps, modes):
    """`steps` training steps with one optimizer from the case's factory on its batch, in the modes the run trains in."""
    for module, training in modes:
        module.training = training
    optimizer = case["optimizer"]([p for p in model.parameters() if p.requires_grad])
    inputs, targets = case["batch"]
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(SEED + step)
        loss = case["loss_fn"](forward(model, inputs), targets)
        if not loss.requires_grad:
            return
        loss.backward()
        step_optimizer(optimizer, loss_closure(case, model, inputs, targets))


def check_input_dependence(case):
    """Compare outputs on the real inputs with outputs on rolled (or random) inputs."""
    case = validate_case(case)
    model = case["model"]
    with preserved(model):
        inputs = case["batch"][0]
        paths = leaves(inputs, case["task"].get("target_inputs", ()))
        if not paths:
            return CheckResult("input_dependence", "skip", "the inputs hold no tensor")
        modes = [(module, module.training) for module in model.modules()]  # a captured script's: the mode it trains in
        output, base, whole, per_input = measure(model, inputs, paths, modes)
        if output is None:
            return CheckResult("input_dependence", "skip", "cannot find the prediction tensor in the model's output")
        if not bool(base.isfinite().all()):
            return CheckResult("input_dependence", "skip", "the output holds NaN/inf: run nan_watch first")
        params = dict(model.named_parameters())
        zero_weights = [name for name, p in params.items() if p.ndim >= 2 and not bool(p.detach().any())]
        steps = 0
        while (whole is not None and steps < ZERO_INIT_STEPS and any(not bool(params[n].detach().any()) for n in zero_weights)
               and ignores_an_input(output, base, whole, per_input)):
            train_steps(case, model, 1, modes)  # zero-initialised layers hide the input at step 0 by design: look after a step
            steps += 1
            output, base, whole, per_input = measure(model, inputs, paths, modes)
            if base is None or not bool(base.isfinite().all()):
                return CheckResult("input_dependence", "skip", f"the output holds NaN/inf after {steps} step(s): run nan_watch first")
        weak_at_start = None
        if whole is not None and rounding_floor(output, base) < whole < WEAK * float(base.abs().mean()):
            weak_at_start = whole / float(base.abs().mean())  # near-constant at init (a decoder): judge it as trained
            train_steps(case, model, WEAK_STEPS, modes)
            steps += WEAK_STEPS
            output, base, whole, per_input = measure(model, inputs, paths, modes)
            if base is None or not bool(base.isfinite().all()):
                return CheckResult("input_dependence", "skip", f"the output holds NaN/inf after {steps} step(s): run nan_watch first")
    scale, rounding = float(base.abs().mean()), rounding_floor(output, base)
    details = {"relative_change": None if whole is None else whole / max(scale, 1e-30), "mean_abs_change": whole,
               "mean_abs_output": scale, "rounding_floor": rounding,
               "per_input": {key: change / max(scale, 1e-30) for key, change in per_input.items() if change is not None},
               "zero_weights": zero_weights, "steps_taken": steps, "mode": "train" if model.training else "eval",
               "relative_change_at_start": weak_at_start}
    if whole is None:
        return CheckResult("input_dependence", "skip", "every input tensor is constant: no different valid input to try", details)
    measured = f"changing the input changes the output by {details['relative_change']:.3g} (relative)"
    zero_steps = steps - (WEAK_STEPS if weak_at_start is not None else 0)
    if zero_steps:
        measured += (f" after {zero_steps} optimizer step(s): at init the all-zero {', '.join(zero_weights[:2])} hid the "
                     f"input, as zero-initialised layers do (an output layer, adaLN-Zero gates)")
    if weak_at_start is not None:
        measured += (f" after {WEAK_STEPS} steps of your optimizer; at init it was {weak_at_start:.3g}, a near-constant "
                     f"output, as a fresh decoder's often is")
    if whole <= rounding:
        details["next"] = "follow the input through forward to find where it becomes constant (a mask, an overwritten tensor)"
        return CheckResult("input_dependence", "fail", f"{measured}: the output ignores its input", details)
    ignored = [key for key, change in per_input.items() if change is not None and change <= rounding]
    if ignored:
        details["next"] = "check that forward uses every argument it is given"
        return CheckResult("input_dependence", "fail", f"{measured}, but changing input {', '.join(ignored)} alone changes "
                           "it by 0: the output ignores that input", details)
    if details["relative_change"] < WEAK and weak_at_start is not None and details["relative_change"] >= GROWING * weak_at_start:
        details["next"] = "rerun after some training: the input's part of the output is growing"
        return CheckResult("input_dependence", "skip", f"inconclusive: the input barely matters at init ({weak_at_start:.3g}) "
                           f"and grows as the model trains ({details['relative_change']:.3g} after {WEAK_STEPS} steps)",
                           details)
    if details["relative_change"] < WEAK:
        details["next"] = ("look for an input scaled to almost nothing (normalised twice?), a near-zero gate, "
                           "or a large constant (a bias) that dwarfs the input's part of the output")
        trained = f", also after {WEAK_STEPS} steps of your optimizer" if weak_at_start is not None else ""
        return CheckResult("input_dependence", "warn", f"{measured}: the input barely matters{trained}", details)
    return CheckResult("input_dependence", "pass", measured, details)


class DemoModel(torch.nn.Module):
    def __init__(self, feature_mask):
        super().__init__()
        self.register_buffer("feature_mask", feature_mask)
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))

    def forward(self, x):
        return self.net(x * self.feature_mask)


def make_demo_case(broken=True):
    """A 3-class MLP that masks out unused features; the broken twin's mask drops all of them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(32, 10)
        y = (x @ torch.randn(10, 3)).argmax(dim=1)
        feature_mask = torch.ones(10)
        if broken:
            feature_mask = torch.zeros(10)  # BUG: a mask of zeros where ones were meant: every feature is dropped
        model = DemoModel(feature_mask)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 3}}


if __name__ == "__main__":
    sys.exit(cli_main(check_input_dependence, make_demo_case, __doc__))
