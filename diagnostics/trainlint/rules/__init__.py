"""Every rule, one module per topic, and the order in which --list-rules, the docs page and the measurements show them.

    losses.py       what goes into a loss: an activation the loss applies itself, softmax without dim
    step_order.py   the order of one step: zero_grad, backward, clipping, unscale_, step, scheduler, scaler.update
    accumulation.py gradient accumulation: zero_grad, loss scaling and clipping per micro-batch, accelerate's steps
    graph.py        the graph behind backward(): cut, built with autograd off, not a scalar, kept alive in a sum
    parameters.py   the parameters an optimizer holds: one submodule's, or those of a layer since replaced
    modes.py        train and eval modes: evaluation with autograd on, eval mode never left, F.dropout
    inplace.py      writes autograd cannot see or survive: through .data, in place on a saved output
    data.py         what the model is fed and loads: batch order, causal masks, torch.load

A rule is a `check_*` function registered with `@rule(...)` (registry.py) in the module of its topic;
importing the module registers it. The imports below, in this order, are the order of the rules: topic by
topic, as listed above (a module imports the ones it builds on, which come before it).
"""
from ..registry import RULES  # noqa: F401 (every rule, filled in by the imports below)
from . import losses  # noqa: F401 (importing registers the rules)
from . import step_order  # noqa: F401
from . import accumulation  # noqa: F401
from . import graph  # noqa: F401
from . import parameters  # noqa: F401
from . import modes  # noqa: F401
from . import inplace  # noqa: F401
from . import data  # noqa: F401
