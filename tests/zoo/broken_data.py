"""Broken twins for the data and initialisation checks: each factory plants one bug, marked `# BUG:`.

Each is a healthy case from tests/zoo/healthy.py with one line changed; the comment after the
factory name says which check must `fail` it. (`load_case` puts this directory on sys.path, so the
plain `import healthy` works when doctor loads this file.)
"""
import torch
import torch.nn.functional as F

from healthy import MLP, make_causal_lm, make_hf_style_lm, make_mlp_classifier, progression_tokens, seeded


def make_scaled_logits():
    """init_loss (too high): the logits come out 20x too large."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = MLP(20, 64, 5, logit_scale=20.0)  # BUG: logits multiplied by 20 (a temperature of 0.05)
    return case


def make_unshifted_lm():
    """init_loss (too low): the LM's targets are its inputs, not the next tokens."""
    case = make_causal_lm()
    with seeded(2):
        tokens = progression_tokens(8, 17, 32)
    case["batch"] = (tokens[:, :-1], tokens[:, :-1])  # BUG: targets not shifted by one, so each target is also an input
    return case


def make_hf_loss_without_shift():
    """init_loss (too low): an HF-style LM's labels are its input ids, and the hand-written loss forgets to shift them."""
    case = make_hf_style_lm()
    case["loss_fn"] = lambda output, labels: F.cross_entropy(  # BUG: logits[:, t] scored against labels[:, t], not t + 1
        output["logits"].flatten(0, 1), labels.flatten(), ignore_index=-100)
    return case


def make_unnormalised_pixels():
    """data_sanity: features fed at a raw 0-255 scale into an MLP (no BatchNorm to undo it: the harm shows in training).

    The CNN's first BatchNorm would normalise raw pixels itself: data_sanity then only warns, as it should.
    """
    case = make_mlp_classifier()
    x, y = case["batch"]
    case["batch"] = (x * 74 + 128, y)  # BUG: raw 0-255 scale values, never normalised
    return case


def make_one_indexed_labels():
    """labels: class ids run 1..C instead of 0..C-1, so the last one is out of range."""
    case = make_mlp_classifier()
    x, y = case["batch"]
    case["batch"] = (x, y + 1)  # BUG: labels are 1-indexed; class 5 does not exist in a 5-way output
    return case


def make_all_labels_masked():
    """labels: every target equals ignore_index, as when a prompt mask covers the whole sequence."""
    case = make_causal_lm()
    inputs, targets = case["batch"]
    case["batch"] = (inputs, torch.full_like(targets, -100))  # BUG: the mask covers every token, nothing is trained
    return case


def make_std_one_init():
    """init_scale: weights drawn from N(0, 1) instead of N(0, 1/fan_in)."""
    case = make_mlp_classifier()
    with seeded(0):
        model = MLP(20, 64, 5)
        for layer in model.net:
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.normal_(layer.weight)  # BUG: default std=1.0, 4-8x what fan_in 20 and 64 call for
    case["model"] = model
    return case


class MaskedMLP(MLP):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__(n_in, n_hidden, n_out)
        self.register_buffer("feature_mask", torch.zeros(n_in))  # BUG: meant torch.ones: every feature is masked out

    def forward(self, x):
        return super().forward(x * self.feature_mask)


def make_input_ignored():
    """input_dependence: a feature mask of zeros, so the output is the same for every input."""
    case = make_mlp_classifier()
    with seeded(0):
        case["model"] = MaskedMLP(20, 64, 5)
    return case


def make_doubled_bos():
    """data_sanity (warn): every row starts with BOS twice, the template's and the tokenizer's."""
    case = make_hf_style_lm()
    inputs, labels = case["batch"]
    bos = torch.full((inputs["input_ids"].shape[0], 1), 1)  # id 1 is the BOS of this vocabulary
    input_ids = torch.cat([bos, bos, inputs["input_ids"][:, :-2]], dim=1)  # BUG: a template BOS, then the tokenizer's own
    attention_mask = torch.cat([torch.ones_like(bos), torch.ones_like(bos), inputs["attention_mask"][:, :-2]], dim=1)
    case["batch"] = ({"input_ids": input_ids, "attention_mask": attention_mask},
                     input_ids.masked_fill(attention_mask == 0, -100))
    return case


def make_single_bos():
    """The healthy twin of make_doubled_bos: one BOS per row."""
    case = make_hf_style_lm()
    inputs, _ = case["batch"]
    bos = torch.full((inputs["input_ids"].shape[0], 1), 1)
    input_ids = torch.cat([bos, inputs["input_ids"][:, :-1]], dim=1)
    attention_mask = torch.cat([torch.ones_like(bos), inputs["attention_mask"][:, :-1]], dim=1)
    case["batch"] = ({"input_ids": input_ids, "attention_mask": attention_mask},
                     input_ids.masked_fill(attention_mask == 0, -100))
    return case


BROKEN = {  # factory -> the check that must fail it
    "make_unshifted_lm": "target_leak",  # init_loss only warns: a loss below the best constant is a threshold
    "make_hf_loss_without_shift": "target_leak",
    "make_unnormalised_pixels": "data_sanity",
    "make_one_indexed_labels": "labels",
    "make_all_labels_masked": "labels",
    "make_std_one_init": "init_scale",
    "make_input_ignored": "input_dependence",
}
WARNED = {  # factory -> the check that must warn on it: a sign worth a look, not proof of a bug
    "make_scaled_logits": "init_loss",  # 20 steps of Adam 1e-3 take it below the scaled-down start (1.70 vs 1.90, measured)
    "make_doubled_bos": "data_sanity",
}
