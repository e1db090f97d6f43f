"""loss_surface: map a custom loss and its gradient over two chosen inputs, with synthetic tensors, no model.

Symptom
    A model trained with a loss you wrote yourself learns nothing, learns the wrong thing, or hits
    NaN, and you suspect the loss rather than the model. Looking at the loss itself, away from any
    model, data or GPU, takes a minute and settles it.

What it checks
    You give a function of two scalar tensors (the two inputs you want to see: two components of a
    prediction, a prediction and a scale, a logit and a margin; everything else fixed inside the
    function), their ranges, and where the minimum should be (finite numbers: a NaN or inf
    there exits 2 with one line, since no grid or distance can be made of it). The loss and its
    gradient are computed at every point of a grid (41 x 41 by default, float64, autograd), and:

      nonfinite   a loss or gradient that is NaN or inf anywhere on the grid: fail (the first such
                  point is given; a log, sqrt or division of something that can reach 0 or less)
      plateau     points above the minimum's basin (loss more than 1% of the range above the
                  lowest) where the gradient is under 1e-3 of the average slope across the box:
                  an optimizer standing there does not move. fail: more than 10% of the grid
      minimum     the lowest grid point more than 2 grid steps from the intended target, or the loss
                  at the target itself above the minimum's basin (a coarse grid's steps are too wide
                  to tell by distance): fail (a sign, a scale or an extra term moved the minimum)

    The thresholds are our assumptions, tuned on the embedded twins: the healthy Huber loss has no
    plateau and its minimum on the target. With --png, a contour plot of the loss with arrows along
    the negative gradient, the target and the minimum marked (needs matplotlib; without it, the
    check still runs and says so in one line).

Command
    python diagnostics/loss_surface.py --surface my_loss.py[:make_surface] [--png /tmp/surface.png] [--json]
    python diagnostics/loss_surface.py                   # embedded demo: an L2 term moves the minimum
    python diagnostics/loss_surface.py --bug plateau     # or: nan; --healthy for the healthy twin

Output
    $ python diagnostics/loss_surface.py
    [FAIL] loss_surface: the minimum is at (0.3, -0.2), not at the target (1, -0.5)
      minimum 0.42 at (0.3, -0.2), target (1, -0.5); plateau 0% of the grid; 0 NaN/inf points
      next: look for a sign, a scale or an extra term in the loss that moves its minimum
    (exit code 1)
    $ python diagnostics/loss_surface.py --healthy
    [PASS] loss_surface: finite everywhere, no plateau, minimum on target
      minimum 6.163e-33 at (1, -0.5), target (1, -0.5); plateau 0% of the grid; 0 NaN/inf points
    (exit code 0)

How to read it
    min_at against target: the minimum the loss actually has, and where you meant it to be. A
    plateau share is the part of the box where training would stall; look at the PNG to see where
    it is (often beyond a clip or a margin). A non-finite point names inputs to try by hand.

Next step
    Fix the loss, rerun until it passes, then run overfit_one_batch with it. refs/loss_surface.md
    describes the patterns (plateaus, shifted minima, NaN regions, scale) with examples.
"""
import argparse
import math
import numbers
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.nn.functional as F

from ml_debug_contract import (ArgumentParser, CaseError, call_user_function, json_text, output_file, run_command,
                               run_user_code, user_function)

GRID = 41  # odd: the centre of a symmetric box is a grid point
BASIN = 0.01  # our assumption: points within 1% of the loss range above the lowest are the minimum's basin
FLAT = 1e-3  # our assumption: a gradient under 1e-3 of the box's average slope does not move an optimizer
PLATEAU_SHARE = 0.10  # our assumption: the clipped-loss twin measures 0.77, the healthy twin 0
MIN_STEPS = 2.0  # our assumption: the grid's minimum may sit up to 2 grid steps from a target between grid points
# (and the loss at the target is in the minimum's basin, BASIN)


class SurfaceError(Exception):
    """A surface description that cannot be used: one line, exit code 2."""


def validate(surface):
    if not isinstance(surface, dict) or not callable(surface.get("loss")):
        raise SurfaceError("the surface must be a dict with loss: a function (a, b) -> scalar tensor")
    for key in ("x_range", "y_range"):
        value = surface.get(key)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(map(finite, value)) and value[0] < value[1]):
            raise SurfaceError(f"{key} must be (low, high), two finite numbers with low < high")
    target = surface.get("target")
    if target is not None and not (isinstance(target, (tuple, list)) and len(target) == 2 and all(map(finite, target))):
        raise SurfaceError("target must be (a, b), two finite numbers: where the minimum should be")
    return surface


def finite(value):
    """A real number, or a one-element tensor, that is not NaN or inf."""
    return (isinstance(value, numbers.Real) or torch.is_tensor(value) and value.numel() == 1) and math.isfinite(float(value))


def evaluate(surface, n):
    """Loss and gradient at every grid point: (xs, ys, loss[n][n], grad_a[n][n], grad_b[n][n]); row i is ys[i].

    All points at once with torch.func.vmap; a loss that vmap cannot trace (data-dependent control flow,
    .item()) is evaluated point by point instead, with the same results.
    """
    xs = torch.linspace(*surface["x_range"], n, dtype=torch.float64)
    ys = torch.linspace(*surface["y_range"], n, dtype=torch.float64)
    grid_b, grid_a = torch.meshgrid(ys, xs, indexing="ij")
    try:
        both = torch.func.grad_and_value(lambda a, b: surface["loss"](a, b).reshape(()), argnums=(0, 1))
        (ga, gb), loss = torch.func.vmap(both)(grid_a.flatten(), grid_b.flatten())
        return xs, ys, *(t.detach().double().reshape(n, n) for t in (loss, ga, gb))
    except Exception:  # the loss does not trace under vmap: the loop below reports what is wrong with it, if anything
        pass
    loss, ga, gb = (torch.empty(n, n, dtype=torch.float64) for _ in range(3))
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
            value = surface["loss"](a, b)
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise SurfaceError(f"loss(a, b) returned {type(value).__name__}, expected a scalar tensor")
            grads = torch.autograd.grad(value.reshape(()), (a, b), allow_unused=True) if value.requires_grad else (None, None)
            loss[i, j] = value.detach().double().reshape(())
            ga[i, j], gb[i, j] = (0.0 if g is None else float(g) for g in grads)
    return xs, ys, loss, ga, gb


def check_loss_surface(surface, n=GRID, png=None):
    surface = validate(surface)
    with torch.random.fork_rng(devices=[]):
        xs, ys, loss, ga, gb = evaluate(surface, n)
    finite = torch.isfinite(loss) & torch.isfinite(ga) & torch.isfinite(gb)
    details = {"grid": n, "x_range": list(surface["x_range"]), "y_range": list(surface["y_range"]),
               "nonfinite_points": int((~finite).sum())}
    if not finite.all():
        i, j = map(int, (~finite).nonzero()[0])
        details["first_nonfinite_at"] = [float(xs[j]), float(ys[i])]
    low, high = float(loss[finite].min()) if finite.any() else math.nan, float(loss[finite].max()) if finite.any() else math.nan
    if finite.any():
        flat_i, flat_j = divmod(int(torch.where(finite, loss, math.inf).argmin()), n)
        details.update({"min_at": [float(xs[flat_j]), float(ys[flat_i])], "min_loss": low, "max_loss": high})
        span = math.hypot(xs[-1] - xs[0], ys[-1] - ys[0])
        slope = (high - low) / span
        norm = torch.sqrt(ga ** 2 + gb ** 2)
        above = finite & (loss > low + BASIN * (high - low))
        details["plateau_share"] = float((above & (norm < FLAT * slope)).sum()) / (n * n) if slope > 0 else 1.0
        step = max(float(xs[1] - xs[0]), float(ys[1] - ys[0]))
        if surface.get("target") is not None:
            tx, ty = map(float, surface["target"])
            details["target"] = [tx, ty]
            details["min_distance_steps"] = math.hypot(details["min_at"][0] - tx, details["min_at"][1] - ty) / step
            with torch.random.fork_rng(devices=[]):
                at_target = surface["loss"](*torch.tensor([tx, ty], dtype=torch.float64))
            details["target_loss"] = float(at_target.detach().double().reshape(()))
    status, summary = "pass", "finite everywhere, no plateau, minimum on target"
    if details["nonfinite_points"]:
        status = "fail"
        summary = (f"{details['nonfinite_points']} of {n * n} grid points give a NaN/inf loss or gradient, the first at "
                   f"({details['first_nonfinite_at'][0]:.3g}, {details['first_nonfinite_at'][1]:.3g})")
        details["next"] = "find the log, sqrt, division or pow that reaches 0 or a negative number there; clamp or reparametrise"
    elif details["plateau_share"] > PLATEAU_SHARE:
        status = "fail"
        summary = f"{details['plateau_share']:.0%} of the grid is a plateau: loss above the minimum, gradient near 0"
        details["next"] = "look for a clip, clamp, margin or saturating function in the loss: beyond it the gradient is 0"
    elif (details.get("min_distance_steps", 0) > MIN_STEPS
          or details.get("target_loss", low) > low + BASIN * (high - low)):  # (a NaN at the target: no verdict here)
        status = "fail"
        summary = (f"the minimum is at ({details['min_at'][0]:.3g}, {details['min_at'][1]:.3g}), "
                   f"not at the target ({details['target'][0]:.3g}, {details['target'][1]:.3g})")
        details["next"] = "look for a sign, a scale or an extra term in the loss that moves its minimum"
    elif "target" not in details:
        summary = "finite everywhere, no plateau (no target given: the minimum is not checked)"
    result = {"id": "loss_surface", "status": status, "summary": summary, "details": details}
    if png:
        details["png"] = plot(xs, ys, loss, ga, gb, result, png)
    return result


def plot(xs, ys, loss, ga, gb, result, path):
    """Write the PNG; returns its path, or a one-line note when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return "not written: matplotlib is not installed (pip install matplotlib); the check itself is complete"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    shown = torch.where(torch.isfinite(loss), loss, torch.nan).numpy()
    contour = ax.contourf(xs.numpy(), ys.numpy(), shown, levels=30, cmap="viridis")
    fig.colorbar(contour, ax=ax, label="loss")
    every = max(1, len(xs) // 15)
    ax.quiver(xs[::every].numpy(), ys[::every].numpy(), -ga[::every, ::every].numpy(), -gb[::every, ::every].numpy(),
              color="white", alpha=0.8)
    bad = ~(torch.isfinite(loss) & torch.isfinite(ga) & torch.isfinite(gb))
    if bad.any():
        i, j = bad.nonzero(as_tuple=True)
        ax.scatter(xs[j].numpy(), ys[i].numpy(), marker="s", s=6, color="red", label="NaN/inf")
    details = result["details"]
    if "target" in details:
        ax.scatter(*details["target"], marker="x", s=80, color="red", label="target")
    if "min_at" in details:
        ax.scatter(*details["min_at"], marker="o", s=60, facecolors="none", edgecolors="orange", label="grid minimum")
    ax.set_xlabel("a")
    ax.set_ylabel("b")
    ax.set_title(f"{result['status'].upper()}: {result['summary']}"[:90], fontsize=8)
    ax.legend(loc="upper right", fontsize=7)
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise SurfaceError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path


# --- the embedded demo ---------------------------------------------------------------------------


def make_demo_surface(bug=None):
    """A 2-d prediction (a, b) against the target (1, -0.5) under a Huber loss; bug: None, 'min', 'plateau' or 'nan'."""
    target = torch.tensor([1.0, -0.5], dtype=torch.float64)

    def loss(a, b):
        prediction = torch.stack([a, b])
        if bug == "min":
            return F.smooth_l1_loss(prediction, target, reduction="sum") + prediction.pow(2).sum()  # BUG: an L2 penalty of weight 1 folded into the loss pulls its minimum to a third of the target
        if bug == "plateau":
            return (prediction - target).norm().clamp(max=1.0)  # BUG: the error is clipped at 1, so beyond distance 1 nothing pulls back
        if bug == "nan":
            return (torch.log1p(prediction) - torch.log1p(target)).pow(2).sum()  # BUG: a log error on predictions that can go below -1
        return F.smooth_l1_loss(prediction, target, reduction="sum")

    return {"loss": loss, "x_range": (-2.0, 2.0), "y_range": (-2.0, 2.0), "target": (1.0, -0.5)}


# --- the CLI -------------------------------------------------------------------------------------


def load_surface(spec):
    return call_user_function(*user_function(spec, "make_surface", "surface file", SurfaceError), SurfaceError)


TIMEOUT = 300.0  # seconds the user's code may run: a 41x41 grid of one loss: seconds, unless the loss hangs


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--surface", metavar="FILE.py[:factory]",
                        help="a file whose factory (default make_surface) returns {loss, x_range, y_range, target}; "
                             "without it, the embedded demo")
    parser.add_argument("--healthy", action="store_true", help="run the demo's healthy twin")
    parser.add_argument("--bug", choices=("min", "plateau", "nan"), default="min",
                        help="which planted bug the demo loss carries (default: min)")
    parser.add_argument("--grid", type=int, default=GRID, help=f"grid points per axis (default {GRID})")
    parser.add_argument("--png", metavar="OUT.png", help="write the contour plot there (needs matplotlib)")
    parser.add_argument("--force", action="store_true", help="let --png replace an existing file")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds your code may run (default {TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")

    def work():  # with --surface, in the supervised child: the file is the user's code
        surface = load_surface(args.surface) if args.surface else make_demo_surface(None if args.healthy else args.bug)
        return check_loss_surface(surface, args.grid, args.png)

    try:  # (the options first, here: a refusal of them is no failure of the loss)
        if not 5 <= args.grid <= 401:
            raise SurfaceError(f"--grid {args.grid}: use 5 to 401 points per axis")
        if args.png:
            output_file(args.png, args.force, inputs=[args.surface.partition(":")[0]] if args.surface else [],
                        option="--png")
        result = run_user_code(work, args.surface and f"running {args.surface}", args.timeout, args.json, SurfaceError,
                               "the loss could not be evaluated")
    except (CaseError, SurfaceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json_text(result))
    else:
        d = result["details"]
        print(f"[{result['status'].upper()}] loss_surface: {result['summary']}")
        if "min_at" in d:
            target = f", target ({d['target'][0]:.3g}, {d['target'][1]:.3g})" if "target" in d else ""
            print(f"  minimum {d['min_loss']:.4g} at ({d['min_at'][0]:.3g}, {d['min_at'][1]:.3g}){target}; "
                  f"plateau {d['plateau_share']:.0%} of the grid; {d['nonfinite_points']} NaN/inf points")
        if "png" in d:
            print(f"  png: {d['png']}")
        if "next" in d:
            print(f"  next: {d['next']}")
    return 1 if result["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
