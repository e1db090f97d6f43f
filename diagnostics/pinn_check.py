"""pinn_check: a physics-informed network's loss terms, input scales and residual points, before a long run.

Symptom
    A physics-informed network (PINN) fits the PDE residual and ignores the boundary conditions
    (or the reverse), stalls at a trivial solution, or trains on one problem and not on the same
    problem written in other units.

What it checks
    You give the network, its loss terms by name (each a function of the model that computes its
    own residual on its own points: the PDE residual on collocation points, boundary and initial
    conditions, data), the collocation points and the domain. At initialisation:

      balance    each term's gradient norm on the network's parameters. fail: the largest is more
                 than 100x the smallest (our assumption; the healthy demo measures 32x, the
                 unscaled twin 3e7x): the small term is drowned out, the network learns the
                 large one alone
      scale      the collocation inputs per dimension, and the targets the terms fit. warn: an
                 input dimension reaching beyond 10 in absolute value or spanning under 0.01, or
                 targets beyond 10 (our assumption, from tanh-like activations being useful on
                 inputs of order 1): non-dimensionalise
      coverage   the share of the domain's cells (8 per dimension, up to 3 dimensions; marginals
                 beyond that) with no collocation point. fail: more than a quarter are empty
                 (our assumption): the residual is not enforced there

Command
    python diagnostics/pinn_check.py --problem my_pinn.py[:make_pinn] [--json]
    python diagnostics/pinn_check.py                  # embedded demo: a PDE term in physical units
    python diagnostics/pinn_check.py --bug coverage   # points in half the domain; --healthy: the healthy twin

Output
    $ python diagnostics/pinn_check.py
    [FAIL] pinn_check: gradient imbalance: 'pde' pulls 3.2e+07x harder than 'boundary' on the shared parameters, so 'boundary' is ignored
      gradient norms: pde 1.33e+07, boundary 0.409 (ratio 3.24e+07)
      inputs: dim 0 in [0.00678, 0.997], std 0.299
      coverage: 0% of the domain's cells empty (256 points)
      next: non-dimensionalise the equation (inputs, outputs, coefficients of order 1), then weight the terms
    (exit code 1)
    $ python diagnostics/pinn_check.py --healthy
    [PASS] pinn_check: terms balanced within 32x, inputs of order 1, 0% of the domain uncovered
      gradient norms: pde 13.3, boundary 0.409 (ratio 32.4)
      inputs: dim 0 in [0.00678, 0.997], std 0.299
      coverage: 0% of the domain's cells empty (256 points)
    (exit code 0)

How to read it
    A balance ratio far above 1 means one term owns the gradient: non-dimensionalise the equation
    first (scale inputs, outputs and coefficients to order 1), then weight the terms (fixed
    weights, or weights that adapt to the gradient norms). Empty cells are where the network can
    do anything: sample points there, or resample during training.

Next step
    refs/pinn.md: non-dimensionalisation step by step, term weighting, and curricula.
"""
import argparse
import math
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.nn as nn

from ml_debug_contract import (ArgumentParser, CaseError, call_user_function, json_text, run_command, run_user_code,
                               user_function)

IMBALANCE = 100.0  # our assumption: the healthy demo measures 32x, the unscaled twin 3e7x
INPUT_MAX = 10.0  # our assumption: tanh-like activations saturate on inputs far beyond order 1
INPUT_MIN_SPAN = 0.01
TARGET_MAX = 10.0
BINS = 8  # cells per dimension for coverage
EMPTY_SHARE = 0.25  # our assumption: the half-domain twin has 50% empty, uniform points 0%


class ProblemError(Exception):
    """A PINN description that cannot be used: one line, exit code 2."""


def validate(problem):
    if not isinstance(problem, dict):
        raise ProblemError(f"the problem is {type(problem).__name__}, expected a dict")
    missing = [key for key in ("model", "terms", "collocation", "domain") if key not in problem]
    if missing:
        raise ProblemError(f"the problem is missing {', '.join(missing)}")
    if not isinstance(problem["model"], nn.Module):
        raise ProblemError("model must be a torch.nn.Module")
    terms = problem["terms"]
    if not (isinstance(terms, dict) and len(terms) >= 1 and all(map(callable, terms.values()))):
        raise ProblemError("terms must be a dict of name -> function(model) -> scalar tensor")
    points = problem["collocation"]
    if not (isinstance(points, torch.Tensor) and points.ndim == 2 and len(points)):
        raise ProblemError("collocation must be a (N, d) tensor of residual points")
    if not bool(torch.isfinite(points).all()):
        row = int((~torch.isfinite(points)).any(dim=1).nonzero()[0])
        raise ProblemError(f"collocation holds a NaN or infinity (row {row}): every point must be a finite number")
    domain = problem["domain"]
    if not (isinstance(domain, (list, tuple)) and len(domain) == points.shape[1]
            and all(isinstance(d, (list, tuple)) and len(d) == 2 and d[0] < d[1]
                    and math.isfinite(d[0]) and math.isfinite(d[1]) for d in domain)):
        raise ProblemError(f"domain must be one (low, high) pair per input dimension ({points.shape[1]}), finite and low < high")
    targets = problem.get("targets")
    if isinstance(targets, torch.Tensor) and targets.numel() and not bool(torch.isfinite(targets).all()):
        raise ProblemError("targets hold a NaN or infinity: every target must be a finite number")
    return problem


def gradient_norms(problem, values=None):
    """Each term's gradient norm on the model's parameters, without touching .grad (each term's value into
    `values`, when given)."""
    params = [p for p in problem["model"].parameters() if p.requires_grad]
    norms = {}
    for name, term in problem["terms"].items():
        value = term(problem["model"])
        grads = torch.autograd.grad(value, params, allow_unused=True)
        norms[name] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads if g is not None))
        if values is not None:
            values[name] = float(value.detach().double().sum())
    return norms


def empty_share(points, domain):
    """The share of the domain's cells holding no point: BINS per dimension, joint up to 3 dims, marginals beyond."""
    low = torch.tensor([d[0] for d in domain], dtype=torch.float64)
    high = torch.tensor([d[1] for d in domain], dtype=torch.float64)
    cells = ((points.double() - low) / (high - low) * BINS).floor().clamp(0, BINS - 1).long()
    if points.shape[1] <= 3:
        index = sum(cells[:, k] * BINS ** k for k in range(points.shape[1]))
        return 1.0 - len(torch.unique(index)) / BINS ** points.shape[1]
    return max(1.0 - len(torch.unique(cells[:, k])) / BINS for k in range(points.shape[1]))


def check_pinn(problem):
    problem = validate(problem)
    points = problem["collocation"]
    values = {}
    with torch.random.fork_rng(devices=[]):
        norms = gradient_norms(problem, values)
    not_finite = [name for name in norms if not (math.isfinite(values[name]) and math.isfinite(norms[name]))]
    if not_finite:  # a NaN/inf term or gradient is never a pass, nor an imbalance to blame on scales
        name = not_finite[0]
        what = f"value {values[name]:.3g}" if not math.isfinite(values[name]) else f"gradient norm {norms[name]:.3g}"
        return result("fail", f"term {name!r} is not finite ({what}): training on it turns the weights NaN",
                      {"grad_norms": norms, "term_values": values, "not_finite": not_finite, "imbalance": math.nan,
                       "inputs": _inputs(points), "n_points": len(points), "empty_cells": empty_share(points, problem["domain"]),
                       "target_abs_max": None,
                       "next": "find the operation that makes it (torch.autograd.detect_anomaly(): a sqrt, log or division "
                               "at 0, a pow of a negative number) and guard it"})
    smallest = min(norms.values())
    ratio = max(norms.values()) / smallest if smallest > 0 else math.inf
    inputs = _inputs(points)
    targets = problem.get("targets")
    target_max = float(targets.abs().max()) if isinstance(targets, torch.Tensor) and targets.numel() else None
    empty = empty_share(points, problem["domain"])
    details = {"grad_norms": norms, "imbalance": ratio, "inputs": inputs, "target_abs_max": target_max,
               "empty_cells": empty, "n_points": len(points)}
    strong, weak = max(norms, key=norms.get), min(norms, key=norms.get)
    badly_scaled = [k for k, d in enumerate(inputs)
                    if max(abs(d["min"]), abs(d["max"])) > INPUT_MAX or d["max"] - d["min"] < INPUT_MIN_SPAN]
    if ratio > IMBALANCE:
        details["next"] = "non-dimensionalise the equation (inputs, outputs, coefficients of order 1), then weight the terms"
        return result("fail", f"gradient imbalance: {strong!r} pulls {ratio:.2g}x harder than {weak!r} on the shared "
                              f"parameters, so {weak!r} is ignored", details)
    if empty > EMPTY_SHARE:
        details["next"] = "sample collocation points over the whole domain (uniform, Sobol, or resampled where residuals are large)"
        return result("fail", f"{empty:.0%} of the domain's cells have no collocation point: the PDE is not enforced there",
                      details)
    if badly_scaled or (target_max is not None and target_max > TARGET_MAX):
        details["next"] = "scale inputs and outputs to order 1 (x' = x / L, u' = u / U) and rewrite the equation in them"
        what = [f"input dimension {k} spans [{inputs[k]['min']:.3g}, {inputs[k]['max']:.3g}]" for k in badly_scaled]
        what += [f"targets reach {target_max:.3g}"] if target_max is not None and target_max > TARGET_MAX else []
        return result("warn", "not non-dimensionalised: " + "; ".join(what), details)
    return result("pass", f"terms balanced within {ratio:.2g}x, inputs of order 1, {empty:.0%} of the domain uncovered", details)


def _inputs(points):
    return [{"min": float(points[:, k].min()), "max": float(points[:, k].max()), "std": float(points[:, k].std())}
            for k in range(points.shape[1])]


def result(status, summary, details):
    return {"id": "pinn_check", "status": status, "summary": summary, "details": details}


# --- the embedded demo ---------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in=1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


def make_demo_pinn(bug=None):
    """u'' = -pi^2 sin(pi x) on [0, 1], u(0) = u(1) = 0 (solution sin(pi x)); bug: None, 'scale' or 'coverage'."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = MLP()
        points = torch.rand(256, 1)
    if bug == "coverage":
        points = points / 2  # BUG: collocation points drawn on [0, 0.5] only: the right half of the domain is unconstrained
    coefficient = 1.0
    if bug == "scale":
        coefficient = 1e3  # BUG: the residual written in physical units (a conductivity of 1e3), never non-dimensionalised

    def pde(net):
        x = points.clone().requires_grad_(True)
        u = net(x)
        du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        d2u = torch.autograd.grad(du.sum(), x, create_graph=True)[0]
        return (coefficient * (d2u + math.pi ** 2 * torch.sin(math.pi * x))).pow(2).mean()

    def boundary(net):
        return net(torch.tensor([[0.0], [1.0]])).pow(2).mean()

    return {"model": model, "terms": {"pde": pde, "boundary": boundary}, "collocation": points, "domain": [(0.0, 1.0)],
            "targets": torch.zeros(2)}


# --- the CLI -------------------------------------------------------------------------------------


def load_problem(spec):
    return call_user_function(*user_function(spec, "make_pinn", "problem file", ProblemError), ProblemError)


TIMEOUT = 300.0  # seconds the user's code may run: one backward pass per loss term: seconds, unless the model hangs


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", metavar="FILE.py[:factory]",
                        help="a file whose factory (default make_pinn) returns the problem dict; without it, the demo")
    parser.add_argument("--healthy", action="store_true", help="run the demo's healthy twin")
    parser.add_argument("--bug", choices=("scale", "coverage"), default="scale",
                        help="which planted bug the demo carries (default: scale)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds your code may run (default {TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")


    def work():  # with --problem, in the supervised child: the file is the user's code
        problem = load_problem(args.problem) if args.problem else make_demo_pinn(None if args.healthy else args.bug)
        return check_pinn(problem)

    try:
        outcome = run_user_code(work, args.problem and f"running {args.problem}", args.timeout, args.json, ProblemError,
                                "the check could not run on this problem")
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json_text(outcome))
    else:
        d = outcome["details"]
        print(f"[{outcome['status'].upper()}] pinn_check: {outcome['summary']}")
        print("  gradient norms: " + ", ".join(f"{name} {norm:.3g}" for name, norm in d["grad_norms"].items())
              + f" (ratio {d['imbalance']:.3g})")
        print("  inputs: " + "; ".join(f"dim {k} in [{i['min']:.3g}, {i['max']:.3g}], std {i['std']:.3g}"
                                       for k, i in enumerate(d["inputs"])))
        print(f"  coverage: {d['empty_cells']:.0%} of the domain's cells empty ({d['n_points']} points)")
        if "next" in d:
            print(f"  next: {d['next']}")
    return 1 if outcome["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
