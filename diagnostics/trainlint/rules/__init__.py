"""Every rule, one module per topic, and the order in which --list-rules, the docs page and the measurements show them.

    losses.py       what goes into a loss: an activation the loss applies itself, softmax without dim
    step_order.py   the order of one step: zero_grad, backward, clipping, unscale_, step, scheduler, scaler.update
    graph.py        the graph behind backward(): cut, built with autograd off, not a scalar, kept alive in a sum
    modes.py        train and eval modes: evaluation with autograd on, eval mode never left, F.dropout
    inplace.py      writes autograd cannot see or survive: through .data, in place on a saved output
    parameters.py   the parameters an optimizer holds: one submodule's, or those of a layer since replaced
    data.py         what the model is fed and loads: batch order, causal masks, torch.load

A rule is a `check_*` function registered with `@rule(...)` (registry.py) in the module of its topic;
importing the module registers it. A new rule also needs its id in ORDER.
"""
from ..registry import RULES
from . import data, graph, inplace, losses, modes, parameters, step_order  # noqa: F401 (importing registers the rules)

ORDER = (
    "softmax-into-ce", "probs-into-nll", "sigmoid-into-bce-logits", "softmax-no-dim",
    "missing-zero-grad", "zero-grad-before-step", "scheduler-before-optimizer", "clip-grad-order",
    "clip-before-unscale", "scaler-without-update",
    "detached-loss", "detached-loss-term", "backward-under-no-grad", "backward-non-scalar",
    "loss-accumulated-with-graph",
    "eval-without-no-grad", "eval-mode-not-restored",
    "data-write", "torch-load-unsafe", "dropout-missing-training", "optimizer-param-subset",
    "layer-replaced-after-optimizer", "inplace-on-saved-output", "train-loader-no-shuffle", "causal-mask-offset",
)
if set(ORDER) != set(RULES):
    raise ImportError(f"trainlint.rules.ORDER and the registered rules differ: {sorted(set(ORDER) ^ set(RULES))}")
for rule_id in ORDER:
    RULES[rule_id] = RULES.pop(rule_id)
