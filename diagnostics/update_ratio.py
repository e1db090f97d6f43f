"""update_ratio: is each layer's step size sane for its weights (~1e-3 of their scale)?

Symptom
    The loss explodes or thrashes in the first steps (learning rate too high), or barely moves
    for thousands of steps (too low), or one layer trains while another does not.

What it checks
    Builds an optimizer from the case's factory (Adam at lr 3e-4 when the case has none), does
    one forward/backward/step on the case's batch in train mode, and measures per weight
    matrix |update| / |weight| (Frobenius norms). cs231n's rule of thumb is ~1e-3. Biases and
    norm gains (1-D tensors) are listed without a verdict: a zero-initialised bias makes the
    ratio infinite without meaning anything. Parameters with no or all-zero gradient are left
    to gradient_flow.

    Note on Adam's first step: it moves every weight by about lr (m / sqrt(v) = +-1 when both
    moments hold one gradient), so the ratio is about lr / rms(weight): 3e-4 on a weight with
    rms 0.05 gives 6e-3 (derived). Later steps are usually smaller, so a first-step ratio is an
    upper estimate, and one that says how the lr compares with the weights' scale, not how the
    gradient looks: for an optimizer with per-weight second-moment state (Adam, AdamW,
    RMSprop, Adadelta, Adagrad) only the fail bound 1e-1 applies above 1e-3, not the 3e-2
    warn (GPT-2's 0.01-std residual projections at lr 3e-4 measure 0.03, and train).
    Tensors whose first dim is 1 (a (1, T, D) position table, a (1, 1, D) cls token) are
    listed with the biases, not judged as matrices. task["clip_grad_norm"] (the max norm the
    real loop clips to) is applied before the step. task["lr_schedule"] (a function step -> lr
    factor, what LambdaLR takes) scales the lr to the schedule's peak over its first 10,000
    steps: a warmup's tiny first steps are not what the run's lr does (details["lr_factor"]).

    A big ratio alone does not prove the lr too high: SGD at lr 20 with clipping (pytorch/examples'
    word_language_model) moves a small-config model's +-0.1 decoder by a third of its norm per
    step and trains well. So the check also asks whether the step paid off: it reruns the
    forward on the same batch (same dropout masks) and divides the loss decrease by the one the
    gradient promised to first order (sum of -grad * update). On a quadratic the best step along
    its direction buys exactly half of that promise; a step past twice the best makes the loss
    rise. Measured on our cases: healthy models 0.59 .. 1.0; that LSTM 0.76 at lr 20, 0.39 at
    lr 60, -0.3 at lr 200 (it diverges); the demo's planted lr 0.09.

    A zero-initialised output layer (DDPM's last conv, DiT's adaLN-Zero) passes no gradient to
    anything before it at step 0, so while some weight starts at zero and a non-zero weight
    matrix still gets an all-zero gradient, the check steps on (up to 4 steps) and judges the
    first step that reaches them (details["judged_step"]), with the zero-initialised weights
    listed under "other": a few steps from zero, they have no scale of their own yet. The
    weights they blocked (details["gated"]) are judged on the high side only: a zero gate one
    step old still scales their gradient down, so a small step says nothing about the lr.

    Weights kept in 16 bits (a model cast with .to(torch.bfloat16), no fp32 master copy) lose
    every step smaller than half their last unit: bf16 keeps 8 significant bits, so a weight of
    0.2 ignores any step under ~5e-4. The check counts, per bf16/fp16 parameter, the elements
    with a non-zero gradient that the step left exactly as they were (details
    ["lost_to_rounding"]): from 10% a warn, from 50% a fail (our assumptions). Our MLP cast to
    bf16 with Adam at 2e-5 keeps 96% of its first layer unchanged; at 3e-4, 43% (its +-0.22
    init); in fp32, none (measured). Adam's first step is its largest, so later steps lose more.
    NaN/inf updates from finite gradients are the optimizer's own (float16: Adam's eps 1e-8 is 0).

    A DistributedDataParallel (or DataParallel) model is unwrapped to `.module`: local
    gradients, one local step, no collective.

Command
    python diagnostics/update_ratio.py                           # embedded demo (planted bug)
    python diagnostics/update_ratio.py --healthy
    python diagnostics/update_ratio.py --case my_case.py --json

Output
    $ python diagnostics/update_ratio.py --json
    {
      "id": "update_ratio",
      "status": "fail",
      "summary": "3 weight(s) change by more than 0.1 of their norm per step (lr too high), worst 4.weight at 0.846; the step overshoots: it bought 9% of the loss decrease its gradient promised on this batch (under 50%)",
      "details": {
        "ratios": {
          "0.weight": 0.184,
          "2.weight": 0.353,
          "4.weight": 0.846
        },
        "other": {
          "0.bias": 0.208,
          "2.bias": 0.831,
          "4.bias": 4.32
        },
        "target": 0.001,
        "not_updated": [],
        "nonfinite": [],
        "lost_to_rounding": {},
        "adaptive_first_step": false,
        "lr_factor": 1.0,
        "judged_step": 1,
        "gated": [],
        "step_payoff": 0.0928,
        "next": "lower the lr by about the factor the ratio is above 1e-3; add warmup"
      }
    }
    (exit code 1)
    $ python diagnostics/update_ratio.py --healthy
    [PASS] update_ratio: ratios 0.0018 .. 0.0085 over 3 weight matrices, all within 0.0001 .. 0.03 (~0.001)
    (exit code 0)

How to read it
    details["ratios"] maps each weight matrix to its ratio; details["step_payoff"] is the share
    of the promised decrease the step bought. fail: a ratio above 1e-1 (the weight changes by
    more than a tenth in one step) with a payoff under 0.5 (the step overshoots: lr far too
    high), or a weight that got a gradient but did not move at all (lr 0, or not in the
    optimizer), or a ratio below 1e-6 (lr far too low). warn: outside 1e-4 .. 3e-2, more than an order of
    magnitude from 1e-3, or a ratio above 1e-1 whose step still bought half its promise or more
    (a high-lr regime that works on this batch: watch the first steps' loss). pass: every weight
    within 1e-4 .. 3e-2.

Next step
    PLAYBOOK.md#update-ratio. Too high: lower the lr (by the factor the ratio is above 1e-3 is
    a first guess), add warmup, or check the init scale (a near-zero weight inflates the ratio).
    Too low or zero: print optimizer.param_groups and check each layer's lr and that the
    optimizer was built from this model's parameters. One layer out of line: a per-layer lr
    multiplier or a mis-scaled init in that layer.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, forward, preserved, cli_main

TARGET = 1e-3  # cs231n: "this ratio should be somewhere around 1e-3" (evidence cs231n-nn3#update-ratio)
HIGH_FAIL = 1e-1  # a tenth of the weight replaced per step: our assumption (cs231n gives no bound)
LOW_FAIL = 1e-6  # a thousand times below 1e-3: our assumption
HIGH_WARN = 3e-2  # our assumption, tuned on the test zoo: Adam 3e-4 on the healthy zoo measures 1.5e-3 .. 8.3e-3
SCHEDULE_HORIZON = 10_000  # steps over which a schedule's peak factor is taken — our assumption (warmups end well before)
ZERO_INIT_STEPS = 4  # steps to let gradients through a chain of zero-initialised layers: DiT's adaLN-Zero needs 2 (measured) — our assumption
STEP_PAYOFF = 0.5  # on a quadratic, the step that minimises the loss along its direction buys exactly half of the first-order promise (derived); less means it went past that point
ADAPTIVE_STATE = ("exp_avg_sq", "square_avg", "acc_delta", "sum")  # Adam/AdamW, RMSprop, Adadelta, Adagrad state keys
LOW_WARN = 1e-4  # one order of magnitude below cs231n's 1e-3 — our assumption
LOW_PRECISION = {torch.bfloat16: 8, torch.float16: 11}  # 16-bit weight dtypes and their significant bits
LOST_FAIL = 0.5  # most of a weight's elements kept their value although the gradient pushed them — our assumption
LOST_WARN = 0.1  # our assumption; 16-bit weights at a sane lr measure ~0 (bf16 MLP, Adam 3e-4: 0.1%), fp32 is not judged


def _measured_step(case, model, trainable, optimizer):
    """One step on the case's batch: (the weights before it, its payoff), or None when the loss has no gradient.

    The payoff is the loss decrease the step bought on this batch (the forward rerun with the same random draws)
    over the one its gradient promised to first order; None when the step was no descent step, -inf when the loss
    went to NaN/inf."""
    model.zero_grad(set_to_none=True)
    inputs, targets = case["batch"]
    rng = torch.get_rng_state()  # the second forward below draws the same dropout masks and noise
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    loss = case["loss_fn"](forward(model, inputs), targets)
    if not loss.requires_grad:
        return None
    loss.backward()
    if case["task"].get("clip_grad_norm"):  # the real loop's clipping, before the step it shapes
        torch.nn.utils.clip_grad_norm_([p for _, p in trainable], case["task"]["clip_grad_norm"])
    before = {name: p.detach().clone() for name, p in trainable}
    optimizer.step()
    promised = -sum(float((p.grad * (p.detach() - before[name])).sum()) for name, p in trainable if p.grad is not None)
    torch.set_rng_state(rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state_all(cuda_rng)
    with torch.no_grad():
        after = float(case["loss_fn"](forward(model, inputs), targets))
    payoff = (float(loss.detach()) - after) / promised if promised > 0 else None
    if payoff is not None and not payoff > -float("inf"):
        payoff = -float("inf")  # as far past the best step as it gets
    return before, payoff


def _ratios(trainable, before):
    """({weight matrix: |update| / |weight|}, {other tensor: the same}) for the step just taken."""
    ratios, other = {}, {}
    for name, p in trainable:
        if p.grad is None or not bool(p.grad.any()) or not bool(before[name].any()):
            continue  # no gradient (gradient_flow's job) or a zero tensor (no scale to compare with)
        ratio = float((p.detach() - before[name]).norm() / before[name].norm())
        matrix = p.dim() >= 2 and p.shape[0] > 1  # a (1, T, D) position table or (1, 1, D) cls token is not a matrix
        (ratios if matrix else other)[name] = float(f"{ratio:.3g}")
    return ratios, other


def _lost_to_rounding(trainable, before, optimizer):
    """{16-bit weight: the share of its elements with a non-zero gradient that the step left exactly as they were}.

    Only weights the optimizer steps with an lr above 0 (an lr of 0 is the not-updated finding, not rounding)."""
    stepped = {id(p) for group in optimizer.param_groups if group["lr"] > 0 for p in group["params"]}
    lost = {}
    for name, p in trainable:
        if p.dtype in LOW_PRECISION and id(p) in stepped and p.grad is not None:
            pushed = p.grad != 0
            count = int(pushed.sum())
            if count:
                lost[name] = float(f"{int(((p.detach() == before[name]) & pushed).sum()) / count:.3g}")
    return lost


def _blocked(trainable, before):
    """The weight matrices that are not zero but got an all-zero gradient (a zero-initialised layer blocks them)."""
    return [name for name, p in trainable
            if p.dim() >= 2 and p.grad is not None and bool(before[name].any()) and not bool(p.grad.any())]


def check_update_ratio(case):
    """One optimizer step from the case's factory; |update| / |weight| per weight matrix against ~1e-3."""
    case = validate_case(case)
    model = case["model"]
    with preserved(model):
        model.train()
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not trainable:
            return CheckResult("update_ratio", "skip", "no trainable parameters")
        optimizer = case["optimizer"]([p for _, p in trainable])
        schedule = case["task"].get("lr_schedule")  # LambdaLR's lr_lambda: judge the step at its peak (after warmup)
        peak = max(float(schedule(step)) for step in range(SCHEDULE_HORIZON)) if schedule else 1.0
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * peak
        step = _measured_step(case, model, trainable, optimizer)
        if step is None:
            return CheckResult("update_ratio", "skip", "the loss does not depend on any trainable parameter (see gradient_flow)")
        before, payoff = step
        zero_init = [name for name, p in trainable if p.dim() >= 2 and not bool(before[name].any())]
        judged_step = 1
        gated = _blocked(trainable, before) if zero_init else []  # behind a zero-init: a tiny gate scales their gradient
        while zero_init and judged_step <= ZERO_INIT_STEPS and _blocked(trainable, before):
            before, payoff = _measured_step(case, model, trainable, optimizer)  # a zero-init still blocks gradients:
            judged_step += 1  # judge a later step
        ratios, other = _ratios(trainable, before)
        lost = _lost_to_rounding(trainable, before, optimizer)
        for name in zero_init:  # a few steps from zero, it has no scale of its own yet: listed, not judged
            if name in ratios:
                other[name] = ratios.pop(name)
        adaptive = any(key in state for state in optimizer.state.values() for key in ADAPTIVE_STATE)
        if not ratios:
            return CheckResult("update_ratio", "skip", "no weight matrix got a non-zero gradient (see gradient_flow)",
                               {"other": other})
        nonfinite = [name for name, r in ratios.items() if not abs(r) < float("inf")]  # NaN fails `<` too
        ratios = {name: r for name, r in ratios.items() if name not in nonfinite}
        rounded = {name: share for name, share in lost.items() if share >= LOST_FAIL}
        unmoved = [name for name, r in ratios.items() if r == 0 and name not in rounded]
        high = {name: r for name, r in ratios.items() if r > HIGH_FAIL}
        large = high if high and payoff is not None and payoff >= STEP_PAYOFF else {}  # big steps that still pay off
        high = {name: r for name, r in high.items() if name not in large}
        low = {name: r for name, r in ratios.items() if 0 < r < LOW_FAIL and name not in gated and name not in rounded}
        high_warn = HIGH_FAIL if adaptive else HIGH_WARN  # Adam's first step is lr / rms(w) whatever the gradient
        off = {name: r for name, r in ratios.items() if not LOW_WARN <= r <= high_warn and name not in high and name not in low
               and name not in unmoved and name not in large and not (name in gated and r < LOW_WARN) and name not in rounded}
        details = {"ratios": ratios, "other": other, "target": TARGET, "not_updated": unmoved, "nonfinite": nonfinite,
                   "lost_to_rounding": lost,
                   "adaptive_first_step": adaptive, "lr_factor": peak, "judged_step": judged_step, "gated": gated,
                   "step_payoff": float(f"{payoff:.3g}") if payoff is not None and payoff > -float("inf") else None}
        judged = {name: r for name, r in ratios.items() if not (name in gated and r < LOW_WARN)}
        spread = (f"ratios {min(judged.values()):.2g} .. {max(judged.values()):.2g} over {len(judged)} weight matrices"
                  if judged else "")
        problems = []
        params = dict(trainable)
        optimizer_made = [name for name in nonfinite if bool(params[name].grad.isfinite().all())]
        if nonfinite and not optimizer_made:
            problems.append(f"{len(nonfinite)} weight(s) got NaN/inf updates (non-finite gradients: run nan_watch): "
                            f"{', '.join(nonfinite[:3])}")
        elif nonfinite:
            fp16 = any(params[name].dtype == torch.float16 for name in optimizer_made)
            problems.append(f"{len(nonfinite)} weight(s) got NaN/inf updates from finite gradients (the optimizer's own "
                            f"arithmetic" + (": in float16, Adam's eps 1e-8 rounds to 0 and a tiny second moment "
                                             "underflows, so m / (sqrt(v) + eps) divides by 0)" if fp16 else ")")
                            + f": {', '.join(nonfinite[:3])}")
        if rounded:
            worst = max(rounded, key=rounded.get)
            dtype = params[worst].dtype
            problems.append(f"{len(rounded)} 16-bit parameter(s) lost most of the step to rounding: worst {worst}, "
                            f"{rounded[worst]:.0%} of its elements with a non-zero gradient did not change ({dtype} "
                            f"keeps {LOW_PRECISION[dtype]} significant bits: a step under half the last one rounds away)")
        if unmoved:
            problems.append(f"{len(unmoved)} weight(s) got a gradient but did not move (lr 0, or not in the optimizer): "
                            f"{', '.join(unmoved[:3])}")
        if high:
            worst = max(high, key=high.get)
            problems.append(f"{len(high)} weight(s) change by more than {HIGH_FAIL:g} of their norm per step (lr too high), "
                            f"worst {worst} at {high[worst]:.3g}" + (
                                "" if payoff is None else "; the step overshoots: the loss on this batch is NaN/inf after it"
                                if payoff == -float("inf") else f"; the step overshoots: it bought {payoff:.0%} of the loss "
                                f"decrease its gradient promised on this batch (under {STEP_PAYOFF:.0%})"))
        if low:
            worst = min(low, key=low.get)
            problems.append(f"{len(low)} weight(s) move less than {LOW_FAIL:g} of their norm per step (lr too low), "
                            f"worst {worst} at {low[worst]:.3g}")
        if problems:
            details["next"] = ("run nan_watch" if nonfinite and not optimizer_made else "keep the weights in fp32 (the "
                               "optimizer's arithmetic too)" if nonfinite else "keep the weights in fp32 and compute in 16 bits "
                               "(torch.autocast), or use an optimizer that keeps fp32 master weights or rounds "
                               "stochastically; a higher lr is not the fix" if rounded else "print optimizer.param_groups: the lr of each group, and whether "
                               "it holds this model's parameters" if unmoved else
                               "lower the lr by about the factor the ratio is above 1e-3; add warmup" if high else
                               "raise the lr; check per-layer lr multipliers")
            return CheckResult("update_ratio", "fail", "; ".join(problems), details)
        partly = {name: share for name, share in lost.items() if share >= LOST_WARN}
        if partly:
            worst = max(partly, key=partly.get)
            details["next"] = ("keep the weights in fp32 and compute in 16 bits (torch.autocast): Adam's later steps "
                               "are smaller than its first, so more of them round away")
            return CheckResult("update_ratio", "warn", f"{len(partly)} 16-bit parameter(s) lost part of the step to "
                               f"rounding: worst {worst}, {partly[worst]:.0%} of its elements with a non-zero gradient "
                               f"did not change; {spread}", details)
        if large:
            worst = max(large, key=large.get)
            details["next"] = ("keep a warmup to this lr: an adaptive optimizer's first steps move every weight by about "
                               "the lr, whatever the gradient" if adaptive else "watch the first hundred steps' loss: a "
                               "high-lr regime works only while the gradients stay small; if the loss jumps, lower the lr "
                               "or clip harder")
            return CheckResult("update_ratio", "warn", f"{len(large)} weight(s) change by more than {HIGH_FAIL:g} of their "
                               f"norm per step, worst {worst} at {large[worst]:.3g}, yet the step bought {payoff:.0%} of "
                               f"the loss decrease its gradient promised on this batch: large steps that still pay off "
                               + ("(an adaptive optimizer's first step at the peak lr)" if adaptive else
                                  "(a high-lr SGD regime, or small weights)") + f"; {spread}", details)
        if off:
            worst = max(off, key=lambda name: max(off[name] / TARGET, TARGET / off[name]))  # furthest from 1e-3 either way
            details["next"] = ("that layer's lr is high for its weight scale: a lower lr, warmup, or a per-layer lr"
                               if off[worst] > TARGET else "that layer barely moves: a higher lr for it, or check its lr multiplier")
            return CheckResult("update_ratio", "warn", f"{len(off)} weight(s) outside {LOW_WARN:g} .. {high_warn:g} "
                               f"(~{TARGET:g} is the rule of thumb), worst {worst} at {off[worst]:.3g}; {spread}", details)
        adaptive_note = ("" if not adaptive else " (an adaptive optimizer's first step: lr / rms(weight))" if judged_step == 1
                         else f" (an adaptive optimizer's step {judged_step}: about lr / rms(weight))")
        gated_low = [name for name, r in ratios.items() if name in gated and r < LOW_WARN]
        gated_note = (f"; {len(gated_low)} weight(s) behind a zero-init gate move less, not judged low: the gate, a few "
                      f"steps from zero, still scales their gradient" if gated_low else "")
        return CheckResult("update_ratio", "pass", f"{spread}, all within {LOW_WARN:g} .. {high_warn:g} (~{TARGET:g})"
                           + adaptive_note + gated_note, details)


def make_demo_case(broken):
    """A 3-layer MLP trained with SGD; the broken twin's learning rate is 100x too high."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(64, 20)
        targets = torch.randint(0, 10, (64,))
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
    lr = 0.1
    if broken:
        lr = 10.0  # BUG: a hundred times too high for SGD on this model
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "optimizer": lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9),
            "task": {"kind": "classification", "num_classes": 10}}


if __name__ == "__main__":
    sys.exit(cli_main(check_update_ratio, make_demo_case, __doc__))
