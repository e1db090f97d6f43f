"""label_alignment: is each output position scored against the right target?

Symptom
    A causal LM whose loss falls to near 0 within a few steps and then generates garbage (the
    labels were not shifted: each position is asked for the token it already reads), or one
    that trains but predicts one token too far ahead (labels shifted by hand, then shifted
    again by a Hugging Face model, which shifts `labels` itself); a fine-tuned model that
    emits pad tokens (the loss was trained on padding); a class the model never learns (an
    `ignore_index` that is a real, frequent class: 0 taken for padding while tag 0 is "O").

What it checks
    One forward pass (eval mode) and the gradient of the case's loss with respect to the
    logits, which says what the loss really does, whether the case's loss_fn computes it or
    the model returns its own loss (labels passed in the inputs). For cross-entropy the
    gradient row of output position t is softmax - onehot(target): its one negative entry is
    the target that position is scored against, and a row without one is a position the loss
    ignores. Then:

      shift    (task kind causal_lm, or no kind) the scored target of position t, compared
               with the input token at t-1, t, t+1, t+2: t+1 is next-token prediction; t is
               the unshifted labels (fail); t+2 the labels shifted twice (fail); t-1 shifted
               the wrong way (fail). An alignment counts when 90% of the scored positions
               agree; targets that are not the input tokens (tags, a seq2seq decoder) are not
               judged. Without a task kind, offset 0 alone is a warn: a denoising model
               scores each position against its own (clean) input token by design.
      padding  (inputs with an attention_mask) a scored target sitting at a position the mask
               marks as padding (0) is a fail: the loss teaches the model to predict padding.
      classes  a target id in range (0..C-1) holding 1% of the targets or more, 2 positions or
               more, none of which moves the loss (the loss's ignore_index, or a mask built
               from it), is a fail when some of those positions are real: attention_mask 1,
               or between scored targets (padding sits at the ends of a row), or one label
               per sample (which is never padding).

    A saturated softmax (a probability of 1 in float32) has no gradient to read; those
    positions are left out. Sequences are (batch, time) unless only the time-major reading
    (time, batch), the default of nn.LSTM and nn.Transformer, lines the targets up with the
    inputs (details["time_dim"] says which). skip: task kind regression or other, no logits
    tensor with a gradient, or no position that moves the loss (run labels).

Command
    python diagnostics/label_alignment.py                      # embedded demo (planted bug)
    python diagnostics/label_alignment.py --healthy            # its healthy twin
    python diagnostics/label_alignment.py --case my_case.py --json

Output
    $ python diagnostics/label_alignment.py
    [FAIL] label_alignment: the loss at position t is scored against the input token at t itself: the labels are not shifted, so the model learns to copy its input
    (exit code 1)
    $ python diagnostics/label_alignment.py --healthy
    [PASS] label_alignment: 96 of 96 positions scored, each against the next input token; no padding scored, no real class dropped
    (exit code 0)

How to read it
    details["input_offset_match"] gives, for each offset k, the fraction of scored positions
    whose target is the input token at t + k: 1.0 at k = 1 is a healthy causal LM.
    details["findings"] lists every finding; the summary joins them. padding_scored counts
    the padded targets the loss trains on; ignored_class names the id the loss drops, with
    ignored_real the positions where it is a real token.

Next step
    PLAYBOOK.md#label-alignment. With a Hugging Face causal LM pass labels=input_ids (pads set
    to -100) and let the model shift; with your own loss shift once, in the data
    (targets = tokens[:, 1:]) or in the loss, not both. Mark padding with -100 from the
    attention mask, and keep ignore_index for padding only. Then run init_loss: an unshifted
    LM scores far below chance.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, class_dim, cli_main, forward, main_tensor, preserved, validate_case

MATCH = 0.9  # our assumption, tuned on the test zoo: the true alignment matches 100% of the scored positions, a wrong offset about 1/V
FREQUENT = 0.01  # our assumption: an id holding 1% of the targets is a real class (end-of-text in short rows, background)
MIN_IGNORED = 2  # our assumption: one unscored occurrence can be a coincidence of where the rows end
OFFSETS = (-1, 0, 1, 2)  # the target of output t, as the input token at t + k: 1 is next-token prediction


def is_ids(value):
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and value.dtype != torch.bool and value.ndim >= 1


def token_ids(inputs):
    """The token ids the model reads: inputs["input_ids"], else the first integer tensor of the inputs."""
    if isinstance(inputs, dict):
        values = [inputs["input_ids"]] if "input_ids" in inputs else [v for k, v in inputs.items() if k != "labels"]
    else:
        values = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    return next((v for v in values if is_ids(v)), None)


def offset_matches(scores, reference, valid, offsets):
    """{k: fraction of the valid positions (b, t) where scores[b, t] == reference[b, t + k]}, both (B, T)."""
    matches = {}
    for k in offsets:
        lo, hi = max(0, -k), min(scores.shape[1], reference.shape[1] - k)
        kept = valid[:, lo:hi]
        if hi > lo and bool(kept.any()):
            matches[k] = float((scores[:, lo:hi] == reference[:, lo + k:hi + k])[kept].float().mean())
    return matches


def best(matches):
    """The offset that explains the targets (MATCH of the positions or more), else None."""
    k, fraction = max(matches.items(), key=lambda item: item[1], default=(None, 0.0))
    return k if fraction >= MATCH else None


def declared_ignore_index(loss_fn, task):
    """The ignore_index the loss or the task hints declare, for the message; None when neither says."""
    for source in (loss_fn, getattr(loss_fn, "keywords", None) or {}):
        value = source.get("ignore_index") if isinstance(source, dict) else getattr(source, "ignore_index", None)
        if isinstance(value, int):
            return value
    return task.get("ignore_index")


def score_map(case, labels):
    """Which target each output position is scored against, read off the gradient of the loss w.r.t. the logits.

    For cross-entropy the gradient row of position t is softmax - onehot(target): its one negative entry names the
    target, and a row with no negative entry is a position the loss ignores, unless the softmax is saturated (the
    gradient vanishes there whatever the target). Returns (scored, target, unknown), each (B, *P) over the output
    positions, or a string saying why there is none.
    """
    model, (inputs, targets) = case["model"], case["batch"]
    model.eval()  # no dropout: the alignment, not the noise
    output = forward(model, inputs)
    logits = main_tensor(output)
    if logits is None or not logits.requires_grad or logits.ndim < 2:
        return "no logits tensor with a gradient in the model's output"
    loss = case["loss_fn"](output, targets)
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad and loss.numel() == 1):
        return "the loss is not a scalar that depends on the model"
    (grad,) = torch.autograd.grad(loss, logits, allow_unused=True)
    if grad is None:
        return "the loss does not depend on the logits"
    dim = (class_dim(logits, labels) if labels is not None else None) or logits.ndim - 1  # (B, C, H, W): 1
    grad = grad.detach().movedim(dim, -1).float()
    probs = logits.detach().movedim(dim, -1).float().softmax(-1)
    unknown = ~grad.isfinite().all(-1) | (probs.amax(-1) > 1 - 1e-6)  # a NaN row, or a saturated softmax: no gradient to read
    return grad.amin(-1) < 0, grad.argmin(-1), unknown


def shift_finding(k, loss_inside):
    """What an input offset k other than 1 means for a causal LM, as (summary, next)."""
    if k == 0:
        return ("the loss at position t is scored against the input token at t itself: the labels are not shifted, "
                "so the model learns to copy its input",
                "score position t against token t + 1: inputs = tokens[:, :-1], targets = tokens[:, 1:]"
                + ("" if loss_inside else ", or pass labels=input_ids to a model that shifts them itself"))
    if k == 2:
        where = ("by hand, then again by the model (Hugging Face causal LMs shift labels themselves)" if loss_inside
                 else "by hand, then again in the loss function")
        return (f"the loss at position t is scored against the input token at t + 2: the labels are shifted twice, {where}",
                "pass labels=input_ids unshifted" if loss_inside else "shift once: either in the data or in the loss")
    return ("the loss at position t is scored against the input token at t - 1: the labels are shifted the wrong way",
            "targets = tokens[:, 1:] against inputs = tokens[:, :-1]")


def padding_finding(scored, target, mask, k):
    """Scored positions whose target token is padding (attention_mask 0): (summary, next, details) or None."""
    T = scored.shape[1]
    lo, hi = max(0, -k), min(T, mask.shape[1] - k)
    pad = scored[:, lo:hi] & (mask[:, lo + k:hi + k] == 0)
    if not bool(pad.any()):
        return None
    tokens = sorted(set(target[:, lo:hi][pad].tolist()))
    return (f"{int(pad.sum())} of {int(scored.sum())} scored targets are padding (attention_mask 0; target "
            f"{', '.join(map(str, tokens[:3]))}): the loss trains the model to predict padding",
            "set the labels to -100 (the loss's ignore_index) wherever attention_mask is 0",
            {"padding_scored": int(pad.sum()), "padding_tokens": tokens[:5]})


def ignored_class_findings(scored, target, unknown, labels, ids, mask, declared):
    """Real, frequent target ids whose every position leaves the loss unmoved: [(summary, next, details)]."""
    seq = scored.ndim == 2 and labels.ndim == 2
    d = best(offset_matches(target, labels, scored, (0, 1))) if seq else (0 if labels.shape == scored.shape and bool(
        (target == labels)[scored].float().mean() >= MATCH) else None)
    if d is None:
        return []  # the loss scores targets that are not these labels: nothing to say which ids it drops
    reach = labels[:, d:d + scored.shape[1]] if seq else labels  # the label positions some output position is scored on
    scored_at = scored[:, :reach.shape[1]] if seq else scored
    known = ~(unknown[:, :reach.shape[1]] if seq else unknown)
    found = []
    in_range = (reach >= 0) & known
    n_targets = int(in_range.sum())
    e = None
    if seq and ids is not None and ids.shape[0] == labels.shape[0]:
        e = best(offset_matches(labels, ids, labels >= 0, (0, 1))) or 0  # label s is input token s + e (0 for tags)
    for v in reach[in_range].unique().tolist():
        where = (reach == v) & known
        n = int(where.sum())
        if bool(scored_at[where].any()) or n < MIN_IGNORED or n / n_targets < FREQUENT:
            continue
        if mask is not None and seq and e is not None:
            positions = where.nonzero()
            columns = positions[:, 1] + d + e
            inside = columns < mask.shape[1]
            real = int((mask[positions[inside, 0], columns[inside]] != 0).sum())
            evidence = f"{real} of them are real tokens (attention_mask 1)"
        elif seq or labels.ndim > 1:
            flat_scored, flat_where = scored_at.reshape(len(reach), -1), where.reshape(len(reach), -1)
            index = torch.arange(flat_where.shape[1])
            first = torch.where(flat_scored, index, flat_where.shape[1]).amin(1, keepdim=True)
            last = torch.where(flat_scored, index, -1).amax(1, keepdim=True)
            real = int((flat_where & (index > first) & (index < last)).sum())
            evidence = f"{real} of them sit between scored targets, where padding never is"
        else:
            real = n
            evidence = "one label per sample, so none of them is padding"
        if real == 0:
            continue  # only padding carries this id: ignoring it is the point
        name = f"ignore_index={declared}" if declared == v else "the loss"
        found.append((f"{name} drops a real class: target {v} ({n} positions, {n / n_targets:.0%} of the targets) never "
                      f"moves the loss, and {evidence}",
                      "give ignore_index a value no real target takes (-100) and mark only padding with it",
                      {"ignored_class": v, "ignored_positions": n, "ignored_real": real}))
    return found


def check_label_alignment(case):
    """Which target each output position is scored against: the shift, padding, and classes the loss drops."""
    case = validate_case(case)
    model, task = case["model"], case["task"]
    inputs, targets = case["batch"]
    kind = task.get("kind")
    if kind in ("regression", "other"):
        return CheckResult("label_alignment", "skip", f"no class targets: task kind is {kind}")
    loss_inside = isinstance(inputs, dict) and is_ids(inputs.get("labels"))
    labels = inputs["labels"] if loss_inside else targets if is_ids(targets) else None
    with preserved(model):
        probe = score_map(case, labels)
    if isinstance(probe, str):
        return CheckResult("label_alignment", "skip", probe)
    scored, target, unknown = (t.cpu() for t in probe)
    n_scored = int(scored.sum())
    if n_scored == 0:
        return CheckResult("label_alignment", "skip", "no output position moves the loss (every label masked? run labels)")
    ids, mask = token_ids(inputs), inputs.get("attention_mask") if isinstance(inputs, dict) else None
    ids, mask, labels = (t.cpu() if t is not None else None for t in (ids, mask, labels))
    seq = scored.ndim == 2 and ids is not None and ids.shape == scored.shape
    details = {"scored": n_scored, "positions": scored.numel(), "loss_inside_model": loss_inside, "time_dim": 1 if seq else None}
    if seq and best(offset_matches(target, ids, scored, OFFSETS)) is None and \
            best(offset_matches(target.T, ids.T, scored.T, OFFSETS)) is not None:
        details["time_dim"] = 0  # time-major (T, B), as nn.LSTM and nn.Transformer default to: turn it batch-first
        scored, target, unknown, ids = scored.T, target.T, unknown.T, ids.T
        labels = labels.T if labels is not None and labels.ndim == 2 else labels
        mask = mask.T if mask is not None and mask.ndim == 2 else mask
    findings = []
    unsure = False
    k = None
    if seq:
        matches = offset_matches(target, ids, scored, OFFSETS)
        k = best(matches)
        details.update(input_offset_match=matches, input_offset=k)
        if kind in (None, "causal_lm") and k in (-1, 0, 2):
            findings.append((*shift_finding(k, loss_inside), {}))
            if kind is None and k == 0:  # a denoising model also scores each position against its own input token
                unsure = True
    if mask is not None and seq and mask.shape == ids.shape and kind != "seq2seq":
        found = padding_finding(scored, target, mask, k if k is not None else 0)
        findings += [found] if found else []
    if labels is not None:
        findings += ignored_class_findings(scored, target, unknown, labels, ids if seq else None,
                                           mask if seq else None,
                                           declared_ignore_index(case["loss_fn"], task))
    for _, _, extra in findings:
        details.update(extra)
    if findings:
        details["findings"] = [summary for summary, _, _ in findings]
        details["next"] = findings[0][1]
        if unsure and len(findings) == 1:
            details["next"] += " (if this is a causal LM: set task kind causal_lm to make this a fail)"
            return CheckResult("label_alignment", "warn", details["findings"][0], details)
        return CheckResult("label_alignment", "fail", "; ".join(details["findings"]), details)
    aligned = {None: "", 1: ", each against the next input token"}.get(k, f", each against input token t + {k}")
    return CheckResult("label_alignment", "pass", f"{n_scored} of {scored.numel()} positions scored{aligned}; "
                       "no padding scored, no real class dropped", details)


class DemoBigram(torch.nn.Module):
    """A bigram LM: the logits at t come from the token at t alone (causal by construction)."""

    def __init__(self, vocab=16, d=32):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(vocab, d), torch.nn.Linear(d, vocab)

    def forward(self, idx):  # (B, T) -> (B, T, vocab)
        return self.head(self.embed(idx))


def demo_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_demo_case(broken=True):
    """Rows of counting tokens; the broken twin scores each position against its own input token."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tokens = (torch.randint(0, 16, (8, 1)) + torch.arange(13)) % 16
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        if broken:
            targets = inputs  # BUG: the targets are the inputs, not the inputs shifted by one
        model = DemoBigram()
    return {"model": model, "batch": (inputs, targets), "loss_fn": demo_loss, "task": {"kind": "causal_lm", "vocab_size": 16}}


if __name__ == "__main__":
    sys.exit(cli_main(check_label_alignment, make_demo_case, __doc__))
