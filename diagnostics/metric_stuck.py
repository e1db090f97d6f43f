"""metric_stuck: why won't this metric move? Three questions, each answered by a measurement on one batch.

Symptom
    Training runs, the total loss goes down, and the one number you care about (an accuracy, an
    error, one loss term) stays where it started or stalls far from where it should go.

What it checks
    You describe the problem: the model, one batch, the loss terms by name, which term is meant to
    move the metric, and the metric itself (a function of the outputs, with its goal and its best
    value). On a copy of the model it asks, in order:

      1 gradient   does the term give the parameters a gradient at the operating point? Per
                   sample, the gradient norm of the term on the parameters: below 1e-7 x the
                   sample's loss, the sample is saturated: a clamp, a ReLU or a saturated
                   sigmoid/tanh on the output passes nothing back, and that sample's error stays.
                   fail: more than a quarter of the samples are saturated.
      2 ceiling    can the parameters move the metric at all? Train the copy on that term alone
                   (every other term switched off; Adam, lr 1e-2, 100 steps on the batch) and
                   measure the share of the way from the starting metric to its best value
                   that it covers. fail: under 0.8 (a healthy model overfits one batch almost
                   fully): the model cannot express what the metric wants (a bounded output on
                   unbounded targets, a missing input), whatever the other terms do.
      3 fight      with every term on, does the metric still get there? Train a second copy on
                   the sum of the terms. fail: under 0.8 while the term alone passed: another
                   term pulls the other way. The report gives the cosine between the term's
                   gradient and the other terms' gradient on the parameters they share, and
                   their norm ratio (at the start).

    The thresholds 1e-7, a quarter and 0.8 are our assumptions, tuned on the embedded demo's
    twins (healthy: 0 saturated, 0.99 of the way alone and together).

    Before the three questions: a measurement that comes out NaN or inf (a sample's term or its
    gradient, the metric before training, the loss at any step of either training run, the
    metric after it) is a fail that names the first one, since it is one on the user's own model,
    batch, terms and metric; no share of the way can be computed from it. A `best` that is not a
    finite number is the description's fault, not the model's: exit 2.

Command
    python diagnostics/metric_stuck.py --problem my_problem.py[:make_problem] [--json]
    python diagnostics/metric_stuck.py                  # embedded demo: a regulariser that fights the fit
    python diagnostics/metric_stuck.py --bug ceiling    # or: saturated; --healthy for the healthy twin

Output
    $ python diagnostics/metric_stuck.py
    [FAIL] metric_stuck: question 3 (fight): 'mse' alone gets 100% of the way, with every term on 15%; the other terms' gradient has cosine -0.18 with it, 3x its norm
      1 gradient  0% of the samples get no gradient from 'mse'
      2 ceiling   'mse' alone: 0.94 -> 0.000308 (100% of the way to 0) in 100 steps
      3 fight     every term: 0.94 -> 0.801 (15%), gradient cosine -0.18
      next: lower or schedule the weight of the other terms; see the cosine and norm ratio
    (exit code 1)

How to read it
    The first failing question is the answer. 1: change what sits between the model and the loss
    (no clamp or ReLU on the output, a logits loss instead of a loss on probabilities). 2: the
    model cannot reach the metric on one batch even when nothing else pulls: change the model or
    the targets (scale, missing inputs). 3: lower the weight of the fighting term, or schedule it;
    a cosine near -1 with a norm ratio near or above 1 means it cancels the term outright.

Next step
    refs/metric_stuck.md has the three questions at length, and what to do about an optimizer
    state (weight decay, momentum from an earlier phase) that fights a term.
"""
import argparse
import copy
import math
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.nn as nn
import torch.nn.functional as F

from ml_debug_contract import (ArgumentParser, CaseError, call_user_function, json_text, run_command, run_user_code,
                               user_function)

SATURATED_GRAD = 1e-7  # our assumption: a sample whose gradient norm is below this x its loss passes nothing back
SATURATED_SHARE = 0.25  # our assumption: more than a quarter of the samples saturated is a fail
STEPS = 100  # one batch, Adam at lr 1e-2: the healthy demo covers 0.99 of the way in these
LR = 1e-2
PROGRESS = 0.8  # our assumption: a healthy model overfits one batch almost fully; the twins stop at 0.52 and 0.17


class ProblemError(Exception):
    """A problem description that cannot be used: one line, exit code 2."""


def validate(problem):
    if not isinstance(problem, dict):
        raise ProblemError(f"the problem is {type(problem).__name__}, expected a dict")
    missing = [key for key in ("model", "batch", "terms", "target_term", "metric", "goal", "best") if key not in problem]
    if missing:
        raise ProblemError(f"the problem is missing {', '.join(missing)}")
    if not isinstance(problem["model"], nn.Module):
        raise ProblemError("model must be a torch.nn.Module")
    if not (isinstance(problem["terms"], dict) and problem["terms"] and all(map(callable, problem["terms"].values()))):
        raise ProblemError("terms must be a dict of name -> function(output, targets) -> scalar tensor")
    if problem["target_term"] not in problem["terms"]:
        raise ProblemError(f"target_term {problem['target_term']!r} is not one of the terms ({', '.join(problem['terms'])})")
    if problem["goal"] not in ("min", "max"):
        raise ProblemError("goal must be 'min' or 'max'")
    if not callable(problem["metric"]):
        raise ProblemError("metric must be a function(output, targets) -> number")
    try:
        best = float(problem["best"])
    except (TypeError, ValueError):
        best = math.nan
    if not math.isfinite(best):
        raise ProblemError("best must be a finite number: the metric's best value (0 for an error, 1 for an accuracy)")
    return problem


def metric_value(problem, model):
    x, y = problem["batch"]
    with torch.no_grad():
        return float(problem["metric"](model(x), y))


def progress(start, end, best):
    """The share of the way from start to best that end covers (1: there; 0: no better; negative: worse)."""
    return 1.0 if start == best else (start - end) / (start - best)


def train(problem, model, terms):
    """STEPS of Adam on the sum of `terms` over the batch: the metric afterwards, and (step, loss) of the first step
    whose loss was NaN/inf, or None."""
    x, y = problem["batch"]
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    nonfinite = None
    for step in range(1, STEPS + 1):
        output = model(x)
        loss = sum(problem["terms"][name](output, y) for name in terms)
        if nonfinite is None and not torch.isfinite(loss).all():
            nonfinite = (step, float(loss.detach()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return metric_value(problem, model), nonfinite


def per_sample(problem, model):
    """Per sample: the value of `target_term` and the norm of its gradient on the parameters (NaN/inf as they come)."""
    x, y = problem["batch"]
    params = [p for p in model.parameters() if p.requires_grad]
    samples = []
    for i in range(len(y)):
        value = problem["terms"][problem["target_term"]](model(x[i:i + 1]), y[i:i + 1])
        grads = torch.autograd.grad(value, params, allow_unused=True)
        samples.append((float(value.detach()), sum(float(g.double().pow(2).sum()) for g in grads if g is not None) ** 0.5))
    return samples


def first_nonfinite(target, samples, start, runs):
    """The first measurement that came out NaN/inf, in the order the check takes them, or None: a dict with the phase
    ('start', 'term_alone' or 'all_terms'), the step (0: before any training), and what it was, in words.
    `runs` holds (phase, train()'s result) for each training run."""
    for i, (value, norm) in enumerate(samples):
        if not (math.isfinite(value) and math.isfinite(norm)):
            what = f"{target!r} is {value:g}" if not math.isfinite(value) else f"the gradient of {target!r} has norm {norm:g}"
            return {"phase": "start", "step": 0, "sample": i, "what": f"{what} on sample {i} before any training"}
    if not math.isfinite(start):
        return {"phase": "start", "step": 0, "what": f"the metric is {start:g} before any training"}
    for phase, (metric, nonfinite) in runs:
        run = f"training on {target!r} alone" if phase == "term_alone" else "training on every term"
        if nonfinite is not None:
            return {"phase": phase, "step": nonfinite[0], "what": f"the loss is {nonfinite[1]:g} at step {nonfinite[0]} of {run}"}
        if not math.isfinite(metric):
            return {"phase": phase, "step": STEPS, "what": f"the metric is {metric:g} after {STEPS} steps of {run}"}
    return None


def term_gradients(problem, model):
    """Per term, the gradient on every parameter (zeros where the term does not reach)."""
    x, y = problem["batch"]
    params = [p for p in model.parameters() if p.requires_grad]
    grads = {}
    for name, term in problem["terms"].items():
        value = term(model(x), y)
        got = torch.autograd.grad(value, params, allow_unused=True)
        grads[name] = [torch.zeros_like(p) if g is None else g for p, g in zip(params, got)]
    return params, grads


def check_metric_stuck(problem):
    problem = validate(problem)
    x, y = problem["batch"]
    target = problem["target_term"]
    others = [name for name in problem["terms"] if name != target]
    with torch.random.fork_rng(devices=[]):
        model = copy.deepcopy(problem["model"])  # the user's model, its .grad and buffers stay as they are
        samples = per_sample(problem, model)
        saturated = sum(abs(value) > 0 and norm < SATURATED_GRAD * abs(value) for value, norm in samples) / len(samples)
        params, grads = term_gradients(problem, model)
        details = {"target_term": target, "saturated_share": saturated, "steps": STEPS}
        if others:
            mine = torch.cat([g.flatten() for g in grads[target]])
            rest = torch.cat([sum(grads[name][i] for name in others).flatten() for i in range(len(params))])
            shared = (mine != 0) & (rest != 0)
            if shared.any():
                a, b = mine[shared], rest[shared]
                details["cosine_with_other_terms"] = float(F.cosine_similarity(a, b, dim=0))
                details["other_to_term_norm_ratio"] = float(b.norm() / a.norm().clamp_min(1e-30))

        start = metric_value(problem, model)
        alone_run = train(problem, copy.deepcopy(model), [target])
        together_run = train(problem, copy.deepcopy(model), list(problem["terms"])) if others else alone_run
    (alone, _), (together, _) = alone_run, together_run
    best = float(problem["best"])
    details.update({"metric_start": start, "metric_term_alone": alone, "metric_all_terms": together, "best": best,
                    "progress_alone": progress(start, alone, best), "progress_all_terms": progress(start, together, best)})
    status, summary = "pass", (f"the metric moves: {start:.3g} -> {together:.3g} with every term on "
                               f"({details['progress_all_terms']:.0%} of the way to {best:g})")
    nonfinite = first_nonfinite(target, samples, start, [("term_alone", alone_run), ("all_terms", together_run)])
    if nonfinite is not None:
        details.update({"failed": "nonfinite", "nonfinite": nonfinite})
        details["next"] = ("find what makes the NaN/inf: the batch, the model's output, or a log, sqrt, division or pow in "
                           "the terms or the metric (nan_watch names the first module)")
        status, summary = "fail", f"NaN/inf: {nonfinite['what']}"
    elif saturated > SATURATED_SHARE:
        details["failed"] = "gradient"
        details["next"] = "remove the clamp/ReLU/sharp sigmoid between the model and the loss; use a loss on logits"
        status, summary = "fail", (f"question 1 (gradient): {saturated:.0%} of the samples get no gradient from "
                                   f"{target!r} although their loss is not 0: saturated at the operating point")
    elif details["progress_alone"] < PROGRESS:
        details["failed"] = "ceiling"
        details["next"] = "the model cannot reach the metric on one batch: check the output range against the targets, and the inputs"
        status, summary = "fail", (f"question 2 (ceiling): trained on {target!r} alone the metric goes {start:.3g} -> "
                                   f"{alone:.3g}, only {details['progress_alone']:.0%} of the way to {best:g}")
    elif details["progress_all_terms"] < PROGRESS:
        details["failed"] = "fight"
        details["next"] = "lower or schedule the weight of the other terms; see the cosine and norm ratio"
        cosine = details.get("cosine_with_other_terms")
        status, summary = "fail", (f"question 3 (fight): {target!r} alone gets {details['progress_alone']:.0%} of the way, "
                                   f"with every term on {details['progress_all_terms']:.0%}; the other terms' gradient has "
                                   f"cosine {cosine:.2f} with it, {details.get('other_to_term_norm_ratio', 0):.2g}x its norm")
    return {"id": "metric_stuck", "status": status, "summary": summary, "details": details}


# --- the embedded demo ---------------------------------------------------------------------------


class Regressor(nn.Module):
    def __init__(self, head=None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
        self.head = head or nn.Identity()

    def forward(self, x):
        return self.head(self.net(x)).squeeze(-1)


def make_demo_problem(bug=None):
    """A regression MLP on one batch; metric: MSE (goal min, best 0). bug: None, 'saturated', 'ceiling' or 'fight'."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(32, 8)
        y = x @ torch.randn(8) / 8 ** 0.5
        y = (y - y.mean()) / y.std()
        head, l2_weight = None, 1e-4
        if bug == "saturated":
            head = nn.ReLU()  # BUG: a ReLU after the last layer: negative outputs get no gradient, negative targets are out of reach
        if bug == "ceiling":
            y = 2 * y  # targets with std 2, not standardised
            head = nn.Tanh()  # BUG: a tanh output can never leave [-1, 1], where half the targets are not
        if bug == "fight":
            l2_weight = 10.0  # BUG: an output penalty weighted 10 (meant 1e-4) pulls every prediction to 0
        model = Regressor(head)
    return {"model": model, "batch": (x, y), "target_term": "mse", "goal": "min", "best": 0.0,
            "terms": {"mse": F.mse_loss, "output_l2": lambda out, _: l2_weight * out.pow(2).mean()},
            "metric": lambda out, targets: F.mse_loss(out, targets)}


# --- the CLI -------------------------------------------------------------------------------------


def load_problem(spec):
    return call_user_function(*user_function(spec, "make_problem", "problem file", ProblemError), ProblemError)


TIMEOUT = 600.0  # seconds the user's code may run: three short training runs of the user's model; minutes on a CPU at most


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", metavar="FILE.py[:factory]",
                        help="a file whose factory (default make_problem) returns the problem dict; without it, the demo")
    parser.add_argument("--healthy", action="store_true", help="run the demo's healthy twin")
    parser.add_argument("--bug", choices=("saturated", "ceiling", "fight"), default="fight",
                        help="which planted bug the demo carries (default: fight)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds your code may run (default {TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")


    def work():  # with --problem, in the supervised child: the file is the user's code
        problem = load_problem(args.problem) if args.problem else make_demo_problem(None if args.healthy else args.bug)
        return check_metric_stuck(problem)

    try:
        result = run_user_code(work, args.problem and f"running {args.problem}", args.timeout, args.json, ProblemError,
                               "the check could not run on this problem")
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json_text(result))
    else:
        d = result["details"]
        print(f"[{result['status'].upper()}] metric_stuck: {result['summary']}")
        print(f"  1 gradient  {d['saturated_share']:.0%} of the samples get no gradient from {d['target_term']!r}")
        print(f"  2 ceiling   {d['target_term']!r} alone: {d['metric_start']:.3g} -> {d['metric_term_alone']:.3g} "
              f"({d['progress_alone']:.0%} of the way to {d['best']:g}) in {d['steps']} steps")
        cosine = f", gradient cosine {d['cosine_with_other_terms']:.2f}" if "cosine_with_other_terms" in d else ""
        print(f"  3 fight     every term: {d['metric_start']:.3g} -> {d['metric_all_terms']:.3g} "
              f"({d['progress_all_terms']:.0%}){cosine}")
        if "next" in d:
            print(f"  next: {d['next']}")
    return 1 if result["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
