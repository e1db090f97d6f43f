"""labels: are the class labels usable, and which ones does the model find least believable?

Symptom
    Training crashes with `Target 10 is out of bounds` (or a CUDA device-side assert), the loss
    is exactly 0 or NaN from the first step ("All labels in your dataset are -100. Training
    losses will be all 0." (evidence/unsloth-troubleshooting.md#all-labels-masked)), the model predicts one class for
    everything, or accuracy plateaus below what the data should allow (bad labels).

What it checks
    The targets of a classification or language-modelling case, against the model's output
    (one forward pass in eval mode: no dropout, the mode you predict in):

      fail   labels outside 0..C-1 that are not ignore_index (C = the output's class
             dimension); every label equal to ignore_index; every label in the batch the same
             class (16 labels or more, one per sample).
      warn   one class holds 90% or more of the labels (16 labels or more, one per sample:
             token and pixel label counts are skewed by nature, so they are not judged).

    For 0/1 float targets (task kind classification with a logits loss such as
    BCEWithLogits) the two classes are 0 and 1. details["most_confident_wrong"] lists the
    five predictions that are most confidently wrong: their batch index (row, or row and
    position), label, predicted class, the confidence and the probability given to the label.
    On a trained model these are the first examples to re-read: a confident miss is often a
    wrong label (koaning's confidence sort). At initialisation they are noise.

Command
    python diagnostics/labels.py                      # embedded demo (planted bug)
    python diagnostics/labels.py --healthy            # its healthy twin
    python diagnostics/labels.py --case my_case.py --json

Output
    $ python diagnostics/labels.py
    [FAIL] labels: 7 labels outside 0..3 (4): labels run 1..4: 1-indexed? subtract 1
    (exit code 1)
    $ python diagnostics/labels.py --healthy
    [PASS] labels: 64 labels in 0..3, 0% masked, majority class 1 at 34%; most-confident wrong predictions in details
    (exit code 0)

How to read it
    An out-of-range label is fatal: cross_entropy raises on CPU and asserts on GPU. Labels
    running 1..C are 1-indexed (subtract 1); a negative label that is not ignore_index is
    padding the loss does not know to skip (pass ignore_index to the loss). A fully masked
    batch means the label mask or the prompt template covers every token. details["counts"]
    gives the label histogram of the batch.

Next step
    PLAYBOOK.md#labels. Fix the label mapping or the mask, then run init_loss. For a model
    that trains but plateaus, run this on a trained checkpoint and read the confident misses.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, class_dim, cli_main, forward, main_tensor, preserved, validate_case

MIN_LABELS = 16  # derived: below this, one class filling a balanced batch by chance is too likely (2 classes: 2 * 0.5**16 = 3e-5)
MAJORITY_WARN = 0.9  # evidence/karpathy-recipe.md#init-well uses a 1:10 imbalance as its example; at 90% the bias alone scores well
SHOWN = 5  # most-confident wrong predictions listed
CLASS_KINDS = ("classification", "causal_lm", "seq2seq")


def confident_wrong(probs, labels, positions):
    """The SHOWN most confidently wrong predictions. probs (N, C), labels (N,), positions (N, k) batch indices."""
    confidence, predicted = probs.max(dim=1)
    wrong = (predicted != labels).nonzero().flatten()
    order = wrong[confidence[wrong].argsort(descending=True)][:SHOWN]
    return [{"index": positions[i].tolist(), "label": int(labels[i]), "predicted": int(predicted[i]),
             "confidence": round(float(confidence[i]), 4), "p_label": round(float(probs[i, labels[i]]), 4)}
            for i in order.tolist()]


def check_labels(case):
    """Range, masking and balance of the labels, and the most-confident wrong predictions."""
    case = validate_case(case)
    model, task = case["model"], case["task"]
    kind = task.get("kind")
    targets = case["batch"][1]
    if kind in ("regression", "other") or not isinstance(targets, torch.Tensor):
        return CheckResult("labels", "skip", f"no class labels: task kind is {kind}" if kind else "the targets are not a tensor")
    integer = not targets.is_floating_point() and targets.dtype != torch.bool
    binary = targets.is_floating_point() and kind in CLASS_KINDS and bool(((targets == 0) | (targets == 1)).all())
    if not (integer or binary):
        return CheckResult("labels", "skip", f"the targets are {targets.dtype}, not class indices"
                           + ("" if kind else " (for 0/1 targets set task kind classification)"))
    with preserved(model):
        model.eval()
        with torch.no_grad():
            out = main_tensor(forward(model, case["batch"][0]))
    if out is None:
        return CheckResult("labels", "skip", "cannot find the prediction tensor in the model's output")
    out, targets = out.detach().float().cpu(), targets.cpu()  # the rest is bookkeeping: CPU is fine
    ignore_index = task.get("ignore_index", -100)
    positions = torch.stack(torch.meshgrid(*[torch.arange(n) for n in targets.shape], indexing="ij"), -1).reshape(-1, targets.ndim)
    labels = targets.reshape(-1).long()
    if binary:
        if out.shape != targets.shape:
            return CheckResult("labels", "skip", f"0/1 targets {tuple(targets.shape)} but output {tuple(out.shape)}")
        n_classes, kept = 2, torch.ones_like(labels, dtype=torch.bool)
        probs = torch.stack([1 - out.sigmoid(), out.sigmoid()], dim=-1).reshape(-1, 2)
    else:
        dim = class_dim(out, targets)
        if dim is None:
            return CheckResult("labels", "skip", f"output {tuple(out.shape)} has no class dimension matching targets {tuple(targets.shape)}")
        n_classes, kept = out.shape[dim], labels != ignore_index
        probs = out.movedim(dim, -1).softmax(-1).reshape(labels.numel(), n_classes)  # (B, 0): -1 cannot be inferred
    hint = task.get("num_classes", task.get("vocab_size"))
    n_labels, n_kept = labels.numel(), int(kept.sum())
    details = {"num_classes": n_classes, "num_classes_hint": hint, "ignore_index": None if binary else ignore_index,
               "labels": n_labels, "masked_fraction": 1 - n_kept / n_labels}
    if n_kept == 0:
        details["next"] = "fix the label mask: it must leave the tokens to be learned unmasked"
        return CheckResult("labels", "fail", f"every one of the {n_labels} labels equals ignore_index {ignore_index}: "
                           "the loss is 0 or NaN and nothing is learned", details)
    bad = kept & ((labels < 0) | (labels >= n_classes))
    if bool(bad.any()):
        values = sorted(set(labels[bad].tolist()))
        low, high = int(labels[kept].min()), int(labels[kept].max())
        reason = (f"labels run {low}..{high}: 1-indexed? subtract 1" if low == 1 and high == n_classes else
                  f"negative labels are not ignore_index {ignore_index}: pass ignore_index to the loss" if values[0] < 0 else
                  f"the output has {n_classes} classes: too few outputs, or labels from another mapping")
        details.update(out_of_range=values[:SHOWN * 2], out_of_range_count=int(bad.sum()),
                       out_of_range_first=positions[bad][:SHOWN].tolist(),
                       next="make every label a class index in 0..C-1 (or ignore_index)")
        return CheckResult("labels", "fail", f"{int(bad.sum())} labels outside 0..{n_classes - 1} ({', '.join(map(str, values[:SHOWN]))}"
                           f"{'...' if len(values) > SHOWN else ''}): {reason}", details)
    counts = torch.bincount(labels[kept], minlength=n_classes)
    majority_class = int(counts.argmax())
    majority = float(counts[majority_class]) / n_kept
    details.update(counts={i: int(c) for i, c in enumerate(counts.tolist()) if c}, majority_class=majority_class,
                   majority_fraction=majority,
                   most_confident_wrong=confident_wrong(probs[kept], labels[kept], positions[kept]))
    summary = (f"{n_kept} labels in 0..{n_classes - 1}, {details['masked_fraction']:.0%} masked, "
               f"majority class {majority_class} at {majority:.0%}; most-confident wrong predictions in details")
    judged = targets.ndim == 1 and n_kept >= MIN_LABELS and n_classes > 1  # one label per sample: token and pixel counts are skewed by nature
    if judged and majority == 1.0:
        details["next"] = "shuffle the data loader and check the label column"
        return CheckResult("labels", "fail", f"all {n_kept} labels in the batch are class {majority_class}: an unshuffled loader, "
                           "or labels collapsed to one value", details)
    if judged and majority >= MAJORITY_WARN:
        details["next"] = "set the output bias to the class priors (Karpathy, init well), reweight or resample"
        return CheckResult("labels", "warn", f"class {majority_class} holds {majority:.0%} of the {n_kept} labels: "
                           "predicting it always already scores well", details)
    return CheckResult("labels", "pass", summary, details)


def make_demo_case(broken=True):
    """A 4-class MLP; the broken twin's labels come from a 1-indexed class column."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(64, 12)
        class_column = (x @ torch.randn(12, 4)).argmax(dim=1) + 1  # the dataset numbers its classes 1..4
        labels = class_column - 1
        if broken:
            labels = class_column  # BUG: the 1-indexed column is used as is; class 4 does not exist in a 4-way output
        model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return {"model": model, "batch": (x, labels), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_labels, make_demo_case, __doc__))
