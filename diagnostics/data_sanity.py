"""data_sanity: is the batch the model sees what you think it is?

Symptom
    The model trains badly or not at all and nothing in the code looks wrong. Karpathy's
    recipe starts with the data ("thoroughly inspecting your data" (evidence/karpathy-recipe.md#inspect-data)) and the Hugging Face
    course's debugging chapter tells you to double-check decoded inputs and labels before
    anything else. This check does the mechanical part of that inspection on one batch.

What it checks
    The batch only (no forward pass), every tensor in the inputs (tensor, tuple or dict) and
    the targets (an inputs entry "labels", the Hugging Face way of passing the targets to the
    model, is checked as a target, and so is every input task["target_inputs"] names, as
    `doctor --script` does for nanoGPT's model(x, y)):

      fail   NaN or inf values; an empty tensor; every sample in the batch identical (in every
             input tensor: an all-ones attention mask alone is normal); float inputs with
             |mean| or std above 10 (raw 0-255 pixels, raw tabular units) when the experiment
             shows the harm: 20 steps at the case's optimizer on the batch as given end at a
             loss at least 2x that of 20 steps from the same start with those inputs
             standardised, and above a hundredth of where they started (the standardised run
             learns; a run as given that falls under a hundredth has learned the batch and
             ends there, no harm shown). Without that, a warn that says what the experiment
             showed: a net that copes (BatchNorm first) is not failed.
      warn   |mean| or std between 3 and 10, or a std below 0.01 (divided by 255 twice?);
             the first input and the targets with different numbers of rows (targets of B x T
             rows for a (B, T) input are flattened, not different; other inputs such as an
             RNN's hidden state have layouts of their own); token ids that are negative or
             beyond the model's largest embedding (which embedding reads them is not known);
             integer inputs with |mean| or std above 10 to a model without an embedding;
             features (columns of 2-D inputs) that are constant over the batch; float inputs
             whose dtype differs from the model's (float64 into a float32 model); integer
             inputs to a model without an embedding; float class targets with values outside
             0..1 (class indices must be int64) or integer targets for regression; token ids
             (the inputs tensor, or inputs['input_ids']) whose every row starts with the same id
             twice, from the first position the attention_mask keeps: a doubled BOS, which a
             chat template that writes its own BOS plus a tokenizer that adds one produce, and
             which training never complains of.

    Statistics are computed in float64 over the finite values; for 2-D inputs (rows x
    features) per feature, otherwise over the whole tensor.

Command
    python diagnostics/data_sanity.py                      # embedded demo (planted bug)
    python diagnostics/data_sanity.py --healthy            # its healthy twin
    python diagnostics/data_sanity.py --case my_case.py --json

Output
    $ python diagnostics/data_sanity.py
    [FAIL] data_sanity: inputs: far from normalised (mean 126, std 71.8): 20 steps at your optimizer's settings end at loss 2.99 (from 6.8) on the batch as given, at 0.592 (from 0.664) with it standardised
    (exit code 1)
    $ python diagnostics/data_sanity.py --healthy
    [PASS] data_sanity: no NaN/inf, scale or dtype surprises in inputs float32[32, 1, 8, 8], targets int64[32]
    (exit code 0)

How to read it
    Each finding names the tensor (inputs, inputs[1], inputs['pixel_values'], targets) and,
    for 2-D inputs, the feature columns. details["tensors"] holds each tensor's dtype, shape,
    mean, std, min and max: compare them with what your preprocessing is supposed to produce.
    A constant-feature warning is expected for rare one-hot columns in a small batch.

Next step
    PLAYBOOK.md#data-sanity. Fix the data pipeline (normalise with training-set statistics,
    drop or fix NaN rows, shuffle the loader), then run labels and init_loss.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (CheckResult, cli_main, forward, loss_closure, named_tensors, preserved, replace_tensor,
                               step_optimizer, validate_case)

FAIL_SCALE = 10.0  # our assumption: 10x beyond standardised (0, 1) or [0, 1] data; raw 0-255 pixels measure mean ~128, std ~74
WARN_SCALE = 3.0  # our assumption, tuned on the test zoo: standardised zoo inputs stay below 1.5
TINY_STD = 0.01  # our assumption: [0, 1] pixels divided by 255 a second time measure std ~0.001
MAX_LISTED = 10  # feature columns named in a finding; the rest are counted
TRIAL_STEPS = 20  # optimizer steps of each run of the scale experiment (our assumption: raw 0-255 pixels keep a small
# net's loss far above the standardised run's within a few steps; a net that copes, e.g. with BatchNorm first, keeps up)
LEARNED = 0.01  # a run that ends below a hundredth of its starting loss learned the batch (our assumption: siamese's
# raw pixels end at 4e-05 of their start; 100x inputs under LBFGS only at 0.09, far behind the standardised 1e-10)
LABELS_INSIDE = "inputs['labels']"  # Hugging Face models take the targets as an input and return the loss: checked as targets



def columns(indices):
    shown = ", ".join(str(i) for i in indices[:MAX_LISTED])
    return shown + (f" and {len(indices) - MAX_LISTED} more" if len(indices) > MAX_LISTED else "")


def stats(t):
    """dtype, shape and float64 statistics of the finite values of a tensor."""
    info = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
    values = t.detach().double()
    finite = values[values.isfinite()]
    if finite.numel():
        info.update(mean=float(finite.mean()), std=float(finite.std(unbiased=False)),
                    min=float(finite.min()), max=float(finite.max()))
    return info


def scale_findings(name, t):
    """Findings about the scale of numeric inputs: (status, message) pairs."""
    values = t.detach().double()
    values = torch.where(values.isfinite(), values, torch.nan)  # NaN/inf are reported on their own
    if t.ndim == 2 and t.shape[0] > 1:  # rows x features: judge each feature
        mean = values.nanmean(0)
        std = (values - mean).pow(2).nanmean(0).sqrt()
    else:
        mean = values.nanmean().reshape(1)
        std = (values - mean).pow(2).nanmean().sqrt().reshape(1)
    size = torch.maximum(mean.abs(), std).nan_to_num(0.0)

    def subject(indices):
        return name if size.numel() == 1 else f"{name} features {columns(indices)}"

    findings = []
    wild = (size > FAIL_SCALE).nonzero().flatten().tolist()
    if wild:
        findings.append(("wild", f"{subject(wild)}: far from normalised (mean {float(mean[wild[0]]):.3g}, "
                         f"std {float(std[wild[0]]):.3g})"))
    loose = ((size > WARN_SCALE) & (size <= FAIL_SCALE)).nonzero().flatten().tolist()
    if loose:
        findings.append(("warn", f"{subject(loose)}: |mean| or std above {WARN_SCALE:g}"))
    tiny = ((std > 0) & (std < TINY_STD) & (mean.abs() < 10 * TINY_STD)).nonzero().flatten().tolist()
    if tiny:
        findings.append(("warn", f"{subject(tiny)}: std below {TINY_STD:g}, normalised twice?"))
    constant = (std == 0).nonzero().flatten().tolist()
    if constant and len(constant) < size.numel():  # (a whole tensor constant is one feature: not said here)
        findings.append(("warn", f"{subject(constant)}: constant over the batch"))
    return findings


def doubled_first_token(name, t, inputs):
    """The id every row of a (rows, positions) id tensor starts with twice (counted from its first attended
    position when the inputs carry an attention_mask), or None."""
    if name.startswith("inputs[") and name != "inputs['input_ids']" or t.ndim != 2 or t.shape[0] < 2 or t.shape[1] < 2:
        return None  # dict inputs: input_ids only (token_type_ids are all 0 by design)
    mask = inputs.get("attention_mask") if isinstance(inputs, dict) else None
    kept = mask != 0 if isinstance(mask, torch.Tensor) and mask.shape == t.shape else torch.ones_like(t, dtype=torch.bool)
    rows = kept.any(dim=1).nonzero().flatten()  # a row with no kept token (all padding) says nothing
    first = kept.int().argmax(dim=1)[rows]
    if len(rows) < 2 or bool((first + 1 >= t.shape[1]).any()):
        return None
    start, then = t[rows, first], t[rows, first + 1]
    return int(start[0]) if bool((start == then).all()) and bool((start == start[0]).all()) else None



def _standardised(t):
    """t minus its mean over the batch, over its std (per feature for rows x features)."""
    values = t.double()
    dims = 0 if t.ndim == 2 else tuple(range(t.ndim))
    std = values.std(dim=dims, keepdim=True)
    return ((values - values.mean(dim=dims, keepdim=True)) / torch.where(std > 0, std, 1.0)).to(t.dtype)


def scale_trial(case, wild):
    """TRIAL_STEPS steps on the batch as given and as many from the same start with the `wild` inputs standardised.

    Returns ((first, last, steps) as given, (first, last, steps) standardised or None): the experiment that shows whether
    the scale harms training on this model, at the optimizer the case trains with. The run as given ends as soon as its
    loss is under LEARNED x its start: it learned the batch, no harm can show, and the standardised run is not needed
    (None). Each run is a training step per step of a model's full batch: siamese's resnet18 learned its batch as
    given in 7 of the 40 (measured).
    """
    model, (inputs, targets) = case["model"], case["batch"]
    fixed = inputs
    for t in wild:
        fixed = replace_tensor(fixed, t, _standardised(t))
    runs = []
    with preserved(model), torch.enable_grad():
        start = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
        for batch_inputs in (inputs, fixed):
            with torch.no_grad():
                for t, value in start:
                    t.copy_(value)
            optimizer = case["optimizer"](model.parameters())
            torch.manual_seed(0)
            losses = []
            for step in range(TRIAL_STEPS + 1):
                loss = case["loss_fn"](forward(model, batch_inputs), targets)
                losses.append(float(loss.detach()))
                learned = batch_inputs is inputs and losses[-1] < LEARNED * abs(losses[0])  # NaN fails `<`
                if step == TRIAL_STEPS or learned:
                    break
                optimizer.zero_grad()
                loss.backward()
                step_optimizer(optimizer, loss_closure(case, model, batch_inputs, targets))
            runs.append((losses[0], losses[-1], step))
            if learned:
                return runs + [None]
    return runs


def check_data_sanity(case):
    """Look at every tensor of the batch for NaN/inf, scale, constant features and dtype surprises."""
    case = validate_case(case)
    model, task = case["model"], case["task"]
    kind = task.get("kind")
    with preserved(model):
        inputs, targets = case["batch"]
        param_dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        embeddings = [m for m in model.modules() if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))]
        input_tensors, target_tensors = named_tensors(inputs, "inputs"), named_tensors(targets, "targets")
        marked = {LABELS_INSIDE} | {f"inputs[{key!r}]" if isinstance(key, str) else f"inputs[{key}]"
                                    for key in task.get("target_inputs", ())}  # model(x, y): y is the loss's target
        target_tensors += [pair for pair in input_tensors if pair[0] in marked]
        input_tensors = [pair for pair in input_tensors if pair[0] not in marked]
        findings, wild = [], []  # (status, message)
        if not input_tensors:
            findings.append(("fail", "the inputs hold no tensor"))
        for name, t in input_tensors + target_tensors:
            if t.numel() == 0:
                findings.append(("fail", f"{name} is empty {tuple(t.shape)}"))
            elif t.is_floating_point() and not bool(t.isfinite().all()):
                findings.append(("fail", f"{name} has {int(t.isnan().sum())} NaN and {int(t.isinf().sum())} inf values"))
        batch_dim = task.get("batch_dim", 0)
        first = input_tensors[0][1] if input_tensors else None  # other inputs (an RNN's hidden state) have layouts of their own
        flat = first.shape[:2].numel() if first is not None and first.ndim >= 2 else None  # (B, T) targets flattened to B*T
        rows = {name: t.shape[batch_dim] for name, t in input_tensors[:1] + target_tensors if t.ndim > batch_dim
                and not (name.startswith("targets") and t.shape[0] == flat)}
        if len(set(rows.values())) > 1:
            findings.append(("warn", "the inputs and targets disagree on the number of rows: "
                             + ", ".join(f"{name} {n}" for name, n in rows.items())))
        same = [name for name, t in input_tensors if t.numel() and t.ndim > batch_dim and t.shape[batch_dim] > 1
                and bool((t == t.narrow(batch_dim, 0, 1)).all())]
        if same and len(same) == len(input_tensors):  # one constant input (an all-ones attention mask) is normal
            findings.append(("fail", f"every sample of {', '.join(same)} is identical: is the loader repeating one example?"))
        for name, t in input_tensors:
            if t.numel() == 0:
                continue
            if t.is_floating_point():
                if param_dtype is not None and t.dtype != param_dtype:
                    findings.append(("warn", f"{name} is {t.dtype} but the model's parameters are {param_dtype}"))
                scale = scale_findings(name, t)
                findings += scale
                if any(status == "wild" for status, _ in scale):  # the experiment below decides fail or warn
                    wild.append(t)
            elif t.dtype != torch.bool and embeddings:
                largest = max(m.num_embeddings for m in embeddings)
                if int(t.min()) < 0 or int(t.max()) >= largest:  # no crash shown: the embedding that reads it is unknown
                    findings.append(("warn", f"{name} holds ids {int(t.min())}..{int(t.max())} but the largest embedding "
                                     f"has {largest} rows: tokenizer and model disagree on the vocabulary?"))
                doubled = doubled_first_token(name, t, inputs) if batch_dim == 0 else None
                if doubled is not None:
                    findings.append(("warn", f"every row of {name} starts with id {doubled} twice: a BOS added by both "
                                     "the chat template and the tokenizer? Decode one row"))
            elif t.dtype == torch.uint8:  # bytes without an embedding: pixels the model turns to float inside, unscaled?
                findings.append(("warn", f"{name} is {t.dtype} but the model has no embedding: raw bytes (0..255 pixels) "
                                 "fed as numbers?"))
                findings += [("warn" if status == "wild" else status, message) for status, message in scale_findings(name, t)]
            # other integers without an embedding (a diffusion model's timesteps, class ids it one-hots or indexes a table
            # with): the model ran on them, so it reads them as it meant to (a Linear refuses an integer tensor)
        for name, t in target_tensors:
            if t.numel() == 0:
                continue
            if kind in ("classification", "causal_lm", "seq2seq") and t.is_floating_point() \
                    and bool(((t < 0) | (t > 1)).any()):
                findings.append(("warn", f"{name} is {t.dtype} with values outside 0..1 for a {kind} task: "
                                 "class indices must be int64"))
            if kind == "regression" and not t.is_floating_point():
                findings.append(("warn", f"{name} is {t.dtype} for a regression task: MSE needs float targets"))
    trial = None
    if wild:  # a threshold crossed: the experiment decides between fail and warn
        try:
            trial = scale_trial(case, wild)
        except Exception as exc:  # the model cannot train on the standardised copy: no harm shown either way
            shown, how = False, f"the experiment could not run ({type(exc).__name__}: {exc})"
        else:
            (raw_first, raw_last, raw_steps), fixed = trial
            if fixed is None:  # as given it fell under a hundredth of its start: it learned the batch, no harm to show
                shown, how = False, (f"at your optimizer's settings the batch as given is learned: loss {raw_last:.3g} "
                                     f"(from {raw_first:.3g}) in {raw_steps} steps")
            else:
                fixed_first, fixed_last, _ = fixed
                # harm: as given it ends at 2x the standardised run's loss or more (it never fell under a hundredth of its
                # start, or it would have stopped there), where the standardised run fell; NaN as given counts as shown
                behind = not raw_last < 2 * fixed_last
                shown = behind and fixed_last < fixed_first
                how = (f"{TRIAL_STEPS} steps at your optimizer's settings end at loss {raw_last:.3g} (from {raw_first:.3g}) "
                       f"on the batch as given, at {fixed_last:.3g} (from {fixed_first:.3g}) with it standardised")
        findings = [("fail" if shown else "warn", f"{message}: {how}" + ("" if shown else ": no harm shown here"))
                    if status == "wild" else (status, message) for status, message in findings]
    details = {"tensors": {name: stats(t) for name, t in input_tensors + target_tensors},
               "findings": [f"{status}: {message}" for status, message in findings]}
    if trial is not None:
        details["scale_trial"] = {"as_given": list(trial[0][:2]), "steps_as_given": trial[0][2],
                                  "standardised": list(trial[1][:2]) if trial[1] else None}
    fails = [message for status, message in findings if status == "fail"]
    warns = [message for status, message in findings if status == "warn"]
    if fails or warns:
        details["next"] = "fix the data pipeline (normalise, drop NaN rows, shuffle), then rerun"
    if fails:
        more = f" (+{len(fails) + len(warns) - 1} more in details)" if len(fails) + len(warns) > 1 else ""
        return CheckResult("data_sanity", "fail", fails[0] + more, details)
    if warns:
        more = f" (+{len(warns) - 1} more in details)" if len(warns) > 1 else ""
        return CheckResult("data_sanity", "warn", warns[0] + more, details)
    shown = ", ".join(f"{name} {info['dtype']}{info['shape']}" for name, info in details["tensors"].items())
    return CheckResult("data_sanity", "pass", f"no NaN/inf, scale or dtype surprises in {shown}", details)


def make_demo_case(broken=True):
    """A small image classifier; the broken twin feeds raw 0-255 pixel values."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pixels = torch.randint(0, 256, (32, 1, 8, 8)).float()
        labels = (pixels.mean(dim=(1, 2, 3)) > 127.5).long()
        images = pixels / 255.0
        images = (images - 0.5) / 0.29  # standardised with the statistics of uniform [0, 1] pixels
        if broken:
            images = pixels  # BUG: the raw 0-255 pixels go in, not the normalised images
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(4 * 8 * 8, 2))
    return {"model": model, "batch": (images, labels), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 2}}


if __name__ == "__main__":
    sys.exit(cli_main(check_data_sanity, make_demo_case, __doc__))
