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
    to gradient_flow; rows of a weight with no gradient in this batch (an embedding's unused
    tokens) are left out of its ratio: their zero update is not a step too small.

    It judges the run the script will do. The lr is the one the schedule reaches:
    task["lr_schedule"] (a function step -> lr factor, what LambdaLR takes) scales it to the
    schedule's peak over its first 10,000 steps (details["lr_factor"]), and a captured script's
    optimizer is rebuilt at the lr it was built with, not a warmup's first value. The step is
    the optimizer's own: SGD's first step is lr x gradient, the step its thresholds were tuned
    on. Adam's first step moves every weight by about lr (m / sqrt(v) = +-1 when both moments
    hold one gradient), so the ratio is lr / rms(weight) whatever the gradient: GPT-2's
    0.02 / sqrt(24)-std residual projections at nanoGPT's 6e-4 measure 0.15, and the recipe
    trains. So for the Adam family, RMSprop and Adagrad only the bound 1e-1 applies, and a
    ratio above it is measured again at the optimizer's steady state: 8 warm-up steps at lr 0,
    each on the next quarter of the batch's rows (minibatches that differ, as a run's do; the
    moments fill, the weights stay), then one step at the judged lr (details
    ["first_step_ratios"] keeps the first). Adadelta sizes its steps by its own running
    averages: at lr 1.0 or less (its designed scale) its ratios are listed, not judged high.
    LBFGS (a line search over a closure) and optimizers whose update rule the check does not
    know are skipped with the reason. task["clip_grad_norm"] (the max norm the real loop
    clips to) is applied before every step. SGD with momentum takes its first step without
    the momentum its later steps carry (up to 1 / (1 - momentum) = 10x larger at 0.9), so a
    ratio below 1e-4 is measured again at the same steady state before it is judged low:
    pytorch/examples' imagenet (resnet18, SGD momentum 0.9 at lr 0.1 x 4 / 256) measures
    4.2e-5 on its first step (measured).

    A big ratio alone does not prove the lr too high: SGD at lr 20 with clipping (pytorch/examples'
    word_language_model) moves a small-config model's +-0.1 decoder by a third of its norm per
    step and trains well. So a ratio above 1e-1 starts the overshoot experiment: from the
    weights as found, up to 10 steps on the batch at the judged lr, and the same at 0.1x, 0.01x,
    0.001x that lr until one ends below its start without jumping half again above it on the
    way (an arm that jumped is as unstable as the judged lr: where it ends is chance; details["overshoot"]: the loss before, the
    highest after any step, the loss after the last, the steps taken: an arm stops early only
    on NaN/inf). The lr overshoots when its arm rose (ended above its start, or went half again
    above it on the way) where a lower arm fell, and ended above that lower arm's end: that
    LSTM at lr 20 peaks at 1.05x its start and ends lower (a pass); at lr 200 it rises to 3x;
    Adam at 0.3 on an MLP jumps 60x in two steps, where 0.03 falls every step (measured). A
    spike that ends lower than the tenth of the lr does is no overshoot: Lightning's
    autoencoder example (Adam at 1e-2 on 784 inputs in [0, 1]) jumps 1.8x on its first step
    and ends its 10 steps at 0.55x its start, below 0.1x's 0.76x (measured). The first
    step's payoff is kept as evidence (details["step_payoff"]): the loss decrease it bought on
    the batch over the one its gradient promised to first order (on a quadratic the best step
    buys half; under half went past it). When the experiment favours your lr (its arm ends
    below its start, and below the tenth's end if it rose on the way) the big ratio is a pass
    that says so, unless a step is as large as the weight itself (ratio 1 or more: DCGAN's
    discriminator at Adam lr 1.0 measures 30): a warn, since one batch cannot show the harm.

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
    with a non-zero gradient that the first step left exactly as they were (details
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
      "summary": "the lr overshoots: 10 step(s) at it took the loss on this batch from 2.305 up to 6.271 (ending at 5.4), where 0.1x that lr took it down to 1.734; 2 weight(s) change by more than 0.1 of their norm per step, worst 4.weight at 0.254",
      "details": {
        "ratios": {
          "0.weight": 0.0553,
          "2.weight": 0.107,
          "4.weight": 0.254
        },
        "other": {
          "0.bias": 0.0625,
          "2.bias": 0.249,
          "4.bias": 1.3
        },
        "target": 0.001,
        "not_updated": [],
        "nonfinite": [],
        "lost_to_rounding": {},
        "optimizer": "SGD",
        "adaptive": false,
        "lr_factor": 1.0,
        "first_step_ratios": null,
        "warm_steps": 0,
        "warm_slices": 0,
        "judged_step": 1,
        "gated": [],
        "step_payoff": 0.698,
        "overshoot": {
          "1x": {
            "before": 2.305,
            "highest": 6.271,
            "after": 5.4,
            "steps": 10
          },
          "0.1x": {
            "before": 2.305,
            "highest": 2.284,
            "after": 1.734,
            "steps": 10
          }
        },
        "next": "lower the lr to about 0.1x (the multiple that lowered the loss); add warmup"
      }
    }
    (exit code 1)
    $ python diagnostics/update_ratio.py --healthy
    [PASS] update_ratio: ratios 0.0018 .. 0.0085 over 3 weight matrices, all within 0.0001 .. 0.03 (~0.001)
    (exit code 0)

How to read it
    details["ratios"] maps each weight matrix to its ratio; details["overshoot"] holds the
    experiment when one ran. fail: the overshoot shown (the judged lr raised the batch's loss
    where a lower lr lowered it), or a weight that got a gradient but did not move at all (lr 0,
    or not in the optimizer), or a ratio below 1e-6 (lr far too low), or most of a 16-bit
    weight's step lost to rounding, or NaN/inf updates. warn: a ratio above 1e-1 with no
    overshoot shown (a threshold, not a harm: the summary names what the experiment saw), or
    outside 1e-4 .. 3e-2 (1e-4 .. 1e-1 for the adaptive family), more than an order of
    magnitude from 1e-3. pass: every weight within those bounds. skip: LBFGS, an optimizer whose
    rule the check does not know, no trainable parameter or gradient.

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

from ml_debug_contract import CheckResult, batch_rows, count_rows, cli_main, forward, preserved, validate_case

TARGET = 1e-3  # cs231n: "this ratio should be somewhere around 1e-3" (evidence cs231n-nn3#update-ratio)
HIGH_FAIL = 1e-1  # a tenth of the weight replaced per step: our assumption (cs231n gives no bound)
LOW_FAIL = 1e-6  # a thousand times below 1e-3: our assumption
HIGH_WARN = 3e-2  # our assumption, tuned on the test zoo: Adam 3e-4 on the healthy zoo measures 1.5e-3 .. 8.3e-3
SCHEDULE_HORIZON = 10_000  # steps over which a schedule's peak factor is taken — our assumption (warmups end well before)
ZERO_INIT_STEPS = 4  # steps to let gradients through a chain of zero-initialised layers: DiT's adaLN-Zero needs 2 (measured) — our assumption
STEP_PAYOFF = 0.5  # on a quadratic, the step that minimises the loss along its direction buys exactly half of the first-order promise (derived); less means it went past that point
LOW_WARN = 1e-4  # one order of magnitude below cs231n's 1e-3 — our assumption
LOW_PRECISION = {torch.bfloat16: 8, torch.float16: 11}  # 16-bit weight dtypes and their significant bits
LOST_FAIL = 0.5  # most of a weight's elements kept their value although the gradient pushed them — our assumption
LOST_WARN = 0.1  # our assumption; 16-bit weights at a sane lr measure ~0 (bf16 MLP, Adam 3e-4: 0.1%), fp32 is not judged
WARM_STEPS = 8  # steps at lr 0 on slices of the batch before the judged step: the optimizer state (Adam's moments, SGD's momentum) a run holds after its first minibatches — our assumption
SLICES = 4  # the batch's rows in 4 slices, one per warm step in turn: minibatches that differ, as a run's do — our assumption
OVERSHOOT_STEPS = 10  # steps in each arm of the overshoot experiment — our assumption: enough for a runaway to show, cheap on one batch
LOWER_LRS = (0.1, 0.01, 0.001)  # the lower arms, tried in turn until one lowers the loss: a tenth of the lr first (the experiment)
RISE = 1.5  # a loss half again above its start, on the batch its steps were computed on, rose: our assumption; the healthy high-lr SGD regime (an LSTM at lr 20) peaks at 1.05x, Adam at 0.3 on an MLP at 60x (measured)
REPLACES = 1.0  # a step as large as the weight itself replaces it: a warn whatever one batch shows (our assumption; the
# healthy real scripts measure up to 0.57, resnet18's conv1 under SGD 0.1; DCGAN's D at Adam lr 1.0 measures 30)
SEED = 0  # any fixed seed: the loss before and after the steps sees the same dropout masks and noise
ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam, torch.optim.RMSprop,
            torch.optim.Adagrad, torch.optim.Adadelta)  # per-weight second-moment state: the step is about lr whatever the gradient
ADADELTA_LR = 1.0  # Adadelta's designed scale (Zeiler's method has no lr; torch's default 1.0 multiplies its own step)


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
        after, start = p.detach(), before[name]
        if p.dim() >= 2:  # an embedding's rows this batch used: a row with no gradient is not a step too small
            rows = p.grad.reshape(len(p), -1).any(1)
            after, start = after[rows], start[rows]
        ratio = float((after - start).norm() / start.norm())
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


def _round(value):
    return float(f"{value:.4g}")


def _backward(case, model, trainable, inputs, targets):
    """Loss and gradients on (inputs, targets), clipped as the real loop clips; False when the loss has no gradient."""
    model.zero_grad(set_to_none=True)
    loss = case["loss_fn"](forward(model, inputs), targets)
    if not loss.requires_grad:
        return False
    loss.backward()
    if case["task"].get("clip_grad_norm"):
        torch.nn.utils.clip_grad_norm_([p for _, p in trainable], case["task"]["clip_grad_norm"])
    return True


def _warm_up(case, model, trainable, optimizer):
    """WARM_STEPS steps at lr 0, each on the next slice of the batch's rows: the optimizer's state (moments, momentum)
    as a run's first minibatches leave it, the weights untouched. Returns the number of slices (1: the whole batch)."""
    inputs, targets = case["batch"]
    bdim = case["task"].get("batch_dim", 0)
    n = count_rows(inputs, bdim)
    slices = SLICES if n >= SLICES and not case["task"].get("graph") else 1  # a graph's nodes stay with their edges
    lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    try:
        for step in range(WARM_STEPS):
            start, size = (step % slices) * (n // slices), n // slices
            rows = [inputs, targets] if slices == 1 else [batch_rows(t, n, start, size, bdim) for t in (inputs, targets)]
            if not _backward(case, model, trainable, *rows):
                break
            optimizer.step()
    finally:
        for group, lr in zip(optimizer.param_groups, lrs):
            group["lr"] = lr
    return slices


def _steady_state(case, model, trainable, lr_factor, start, ratios):
    """Re-measure `ratios` in place at the optimizer's steady state: from the weights `start`, a fresh optimizer warmed
    up (_warm_up), then one step on the batch. Returns the number of slices the warm-up used."""
    model.load_state_dict(start)
    optimizer = case["optimizer"]([p for _, p in trainable])
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * lr_factor
    slices = _warm_up(case, model, trainable, optimizer)
    step = _measured_step(case, model, trainable, optimizer)
    if step is not None:
        later, _ = _ratios(trainable, step[0])
        ratios.update({name: r for name, r in later.items() if name in ratios})
    model.load_state_dict(start)
    return slices


def _seeded_loss(case, model):
    """The loss on the batch with the random stream reset first: every call draws the same dropout masks and noise."""
    torch.manual_seed(SEED)
    with torch.no_grad():
        return float(case["loss_fn"](forward(model, case["batch"][0]), case["batch"][1]))


def _overshoot(case, model, trainable, lr_factor, start):
    """The overshoot experiment: {lr multiple: (loss before, highest loss after any of its steps, loss after the last)}
    on the batch, each arm OVERSHOOT_STEPS steps from the weights and buffers `start` (the model as the check found it)
    with a fresh optimizer: the judged lr (1), then LOWER_LRS until one ends below its start. Stops after the judged lr
    when it never rose: then there is no overshoot to show."""
    arms = {}
    for multiple in (1.0,) + LOWER_LRS:
        model.load_state_dict(start)
        optimizer = case["optimizer"]([p for _, p in trainable])
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * lr_factor * multiple
        before, seen, taken = _seeded_loss(case, model), [], 0
        for _ in range(OVERSHOOT_STEPS):
            model.zero_grad(set_to_none=True)
            loss = case["loss_fn"](forward(model, case["batch"][0]), case["batch"][1])
            seen.append(float(loss.detach()))  # from the second step on: the loss after the steps so far
            if not loss.requires_grad or not abs(seen[-1]) < float("inf"):
                break  # NaN/inf ends the arm: it cannot come back; a spike may (its end is compared with a lower arm's)
            loss.backward()
            if case["task"].get("clip_grad_norm"):
                torch.nn.utils.clip_grad_norm_([p for _, p in trainable], case["task"]["clip_grad_norm"])
            optimizer.step()
            taken += 1
        after = _seeded_loss(case, model)
        highest = max(seen[1:] + [after], key=lambda v: v if v == v else float("inf"))
        arms[multiple] = (before, highest, after, taken)
        if _fell(before, highest, after):  # the judged lr did not rise (no lower arm needed), or a lower arm fell
            break
    return arms


def _jumped(before, loss):
    """The loss went half again (RISE) above its start, or to NaN/inf."""
    return not loss - before <= (RISE - 1) * abs(before)


def _rose(before, peak, after):
    """The loss ended above its start, or jumped on the way (NaN/inf included)."""
    return not after < before or _jumped(before, peak)


def _fell(before, peak, after):
    """A lower arm fell: it ended below its start without jumping on the way (NaN fails `<`). An arm that jumped and
    still ended lower is as unstable as the judged lr, and where it ends is chance, so it is no reference and the next
    lower lr is tried: at the imagenet recipe's lr x1000 (1.6, resnet18, 4 random images) the 0.1x arm jumped 4.6x to
    13.5x in 5 of 6 inits and ended between 0.29x and 4.6x its start, where 0.01x fell every step in all 6 (measured)."""
    return after < before and not _jumped(before, peak)


def furthest_from_target(ratios):
    """The weight whose update ratio is furthest from TARGET, by factor, either way (2e-5 is 50x under 1e-3)."""
    return max(ratios, key=lambda name: max(ratios[name] / TARGET, TARGET / ratios[name]))


def check_update_ratio(case):
    """The optimizer's step after warm-up steps, |update| / |weight| per weight matrix against ~1e-3; a fail only when
    the overshoot experiment shows the lr raising the loss where a lower one lowers it."""
    case = validate_case(case)
    model = case["model"]
    with preserved(model):
        model.train()
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not trainable:
            return CheckResult("update_ratio", "skip", "no trainable parameters")
        optimizer = case["optimizer"]([p for _, p in trainable])
        kind = type(optimizer).__name__
        if isinstance(optimizer, torch.optim.LBFGS):
            return CheckResult("update_ratio", "skip", "LBFGS sizes each step by its own line search over a closure (it "
                               "calls the loss many times per step): an lr-to-weight ratio says nothing about it")
        if not isinstance(optimizer, (torch.optim.SGD,) + ADAPTIVE):
            return CheckResult("update_ratio", "skip", f"{kind} is not an optimizer whose update rule this check knows (SGD, "
                               "Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad, Adadelta): its step size cannot be "
                               "judged against the weights")
        adaptive = isinstance(optimizer, ADAPTIVE)
        schedule = case["task"].get("lr_schedule")  # LambdaLR's lr_lambda: judge the step at its peak (after warmup)
        peak = max(float(schedule(step)) for step in range(SCHEDULE_HORIZON)) if schedule else 1.0
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * peak
        designed = isinstance(optimizer, torch.optim.Adadelta) and all(
            group["lr"] <= ADADELTA_LR for group in optimizer.param_groups)  # its steps are sized by its own averages
        start = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}  # the model as found
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
        if not ratios:
            return CheckResult("update_ratio", "skip", "no weight matrix got a non-zero gradient (see gradient_flow)",
                               {"other": other})
        high_warn = float("inf") if designed else HIGH_FAIL if adaptive else HIGH_WARN  # Adam's step is about lr whatever the gradient
        first_step = dict(ratios)
        momentum = not adaptive and any(group.get("momentum", 0) > 0 for group in optimizer.param_groups)
        steady = (adaptive and any(high_warn < r < float("inf") for r in ratios.values())  # the first step moved every element by ~lr:
                  or momentum and any(0 < r < LOW_WARN for r in ratios.values()))  # its first step lacks the momentum
        slices = _steady_state(case, model, trainable, peak, start, ratios) if steady else 0  # judge the run's later steps
        nonfinite = [name for name, r in ratios.items() if not abs(r) < float("inf")]  # NaN fails `<` too
        ratios = {name: r for name, r in ratios.items() if name not in nonfinite}
        rounded = {name: share for name, share in lost.items() if share >= LOST_FAIL}
        unmoved = [name for name, r in ratios.items() if r == 0 and name not in rounded]
        high = {} if designed else {name: r for name, r in ratios.items() if r > HIGH_FAIL}
        low = {name: r for name, r in ratios.items() if 0 < r < LOW_FAIL and name not in gated and name not in rounded}
        off = {name: r for name, r in ratios.items() if not LOW_WARN <= r <= high_warn and name not in high and name not in low
               and name not in unmoved and not (name in gated and r < LOW_WARN) and name not in rounded}
        details = {"ratios": ratios, "other": other, "target": TARGET, "not_updated": unmoved, "nonfinite": nonfinite,
                   "lost_to_rounding": lost, "optimizer": kind, "adaptive": adaptive, "lr_factor": peak,
                   "first_step_ratios": first_step if steady else None, "warm_steps": WARM_STEPS if steady else 0,
                   "warm_slices": slices, "judged_step": judged_step,
                   "gated": gated,
                   "step_payoff": float(f"{payoff:.3g}") if payoff is not None and payoff > -float("inf") else None}
        judged = {name: r for name, r in ratios.items() if not (name in gated and r < LOW_WARN)}
        spread = (f"ratios {min(judged.values()):.2g} .. {max(judged.values()):.2g} over {len(judged)} weight matrices"
                  if judged else "")
        arms = _overshoot(case, model, trainable, peak, start) if high and not (nonfinite or rounded or unmoved) else {}
        details["overshoot"] = {f"{multiple:g}x": {"before": _round(first), "highest": _round(top), "after": _round(last),
                                                   "steps": taken} for multiple, (first, top, last, taken) in arms.items()}
        rose = bool(arms) and _rose(*arms[1.0][:3])
        fell = next((multiple for multiple, (first, top, last, _) in arms.items() if multiple != 1.0
                     and _fell(first, top, last) and not arms[1.0][2] <= last), None)  # and ended below the judged lr's end
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
        worst = max(high, key=high.get) if high else None
        if rose and fell is not None:
            before_loss, peak_loss, after_loss, taken = arms[1.0]
            problems.append(f"the lr overshoots: {taken} step(s) at it took the loss on this batch from "
                            f"{before_loss:.4g} up to {peak_loss:.4g}" + (f" (ending at {after_loss:.4g})" if after_loss != peak_loss
                                                                          else "") + f", where {fell:g}x that lr "
                            f"took it down to {arms[fell][2]:.4g}; "
                            f"{len(high)} weight(s) change by more than {HIGH_FAIL:g} of their norm per step, worst {worst} "
                            f"at {high[worst]:.3g}")
        if low:
            worst_low = min(low, key=low.get)
            problems.append(f"{len(low)} weight(s) move less than {LOW_FAIL:g} of their norm per step (lr too low), "
                            f"worst {worst_low} at {low[worst_low]:.3g}")
        if problems:
            details["next"] = ("run nan_watch" if nonfinite and not optimizer_made else "keep the weights in fp32 (the "
                               "optimizer's arithmetic too)" if nonfinite else "keep the weights in fp32 and compute in 16 bits "
                               "(torch.autocast), or use an optimizer that keeps fp32 master weights or rounds "
                               "stochastically; a higher lr is not the fix" if rounded else "print optimizer.param_groups: the lr of each group, and whether "
                               "it holds this model's parameters" if unmoved else
                               f"lower the lr to about {fell:g}x (the multiple that lowered the loss); add warmup"
                               if rose and fell is not None else "raise the lr; check per-layer lr multipliers")
            return CheckResult("update_ratio", "fail", "; ".join(problems), details)
        partly = {name: share for name, share in lost.items() if share >= LOST_WARN}
        if partly:
            worst_lost = max(partly, key=partly.get)
            details["next"] = ("keep the weights in fp32 and compute in 16 bits (torch.autocast): Adam's later steps "
                               "are smaller than its first, so more of them round away")
            return CheckResult("update_ratio", "warn", f"{len(partly)} 16-bit parameter(s) lost part of the step to "
                               f"rounding: worst {worst_lost}, {partly[worst_lost]:.0%} of its elements with a non-zero gradient "
                               f"did not change; {spread}", details)
        if high:
            before_loss, peak_loss, after_loss, _ = arms[1.0]
            lower_fell = next((m for m in LOWER_LRS if m in arms and _fell(*arms[m][:3])), None)
            shown = (f"{OVERSHOOT_STEPS} steps at this lr still lowered the loss on this batch ({before_loss:.4g} -> "
                     f"{after_loss:.4g}, highest on the way {peak_loss:.4g})" if not rose else
                     f"{OVERSHOOT_STEPS} steps at this lr took the loss on this batch from {before_loss:.4g} up to "
                     f"{peak_loss:.4g} and ended at {after_loss:.4g}, no higher than {lower_fell:g}x that lr ends "
                     f"({arms[lower_fell][2]:.4g}): the spike is undone" if lower_fell is not None else
                     f"{OVERSHOOT_STEPS} steps at this lr raised the loss on this batch ({before_loss:.4g} up to {peak_loss:.4g}), "
                     f"but {', '.join(f'{m:g}x' for m in LOWER_LRS)} that lr did not lower it either: the lr is not shown to "
                     f"be what raises it")
            paid = ("" if payoff is None or payoff >= STEP_PAYOFF else f"; the judged step bought {payoff:.0%} of the loss "
                    f"decrease its gradient promised (under {STEP_PAYOFF:.0%}: past the best point along its direction)")
            details["next"] = ("watch the first hundred steps' loss: a high-lr regime works only while the gradients stay "
                               "small; if the loss jumps, lower the lr or clip harder")
            if after_loss < before_loss and (not rose or lower_fell is not None) and high[worst] < REPLACES:
                return CheckResult("update_ratio", "pass", f"{len(high)} weight(s) change by more than {HIGH_FAIL:g} of "
                                   f"their norm per step, worst {worst} at {high[worst]:.3g}, and the experiment shows no "
                                   f"harm: {shown}{paid}; {spread}", details)
            return CheckResult("update_ratio", "warn", f"{len(high)} weight(s) change by more than {HIGH_FAIL:g} of their "
                               f"norm per step, worst {worst} at {high[worst]:.3g} (a threshold, not a harm shown): {shown}"
                               f"{paid}; {spread}", details)
        if off:
            worst_off = furthest_from_target(off)
            details["next"] = ("that layer's lr is high for its weight scale: a lower lr, warmup, or a per-layer lr"
                               if off[worst_off] > TARGET else "that layer barely moves: a higher lr for it, or check its lr multiplier")
            return CheckResult("update_ratio", "warn", f"{len(off)} weight(s) outside {LOW_WARN:g} .. {high_warn:g} "
                               f"(~{TARGET:g} is the rule of thumb), worst {worst_off} at {off[worst_off]:.3g}; {spread}",
                               details)
        band = f"within {LOW_WARN:g} .. {high_warn:g}" if not designed else f"above {LOW_WARN:g}"
        state_note = (f" ({kind} at lr {ADADELTA_LR:g} or less, its designed scale: its own running averages size the step)"
                      if designed else f" ({kind}'s step after {WARM_STEPS} warm-up steps on {slices} slice(s) of the batch: "
                      f"its first step moved every element by about the lr, up to {max(first_step.values()):.2g})"
                      if steady else "")
        gated_low = [name for name, r in ratios.items() if name in gated and r < LOW_WARN]
        gated_note = (f"; {len(gated_low)} weight(s) behind a zero-init gate move less, not judged low: the gate, a few "
                      f"steps from zero, still scales their gradient" if gated_low else "")
        return CheckResult("update_ratio", "pass", f"{spread}, all {band} (~{TARGET:g})" + state_note + gated_note, details)


def make_demo_case(broken):
    """A 3-layer MLP trained with SGD; the broken twin's learning rate is 30x too high."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(64, 20)
        targets = torch.randint(0, 10, (64,))
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
    lr = 0.1
    if broken:
        lr = 3.0  # BUG: thirty times too high for SGD with momentum on this model
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "optimizer": lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9),
            "task": {"kind": "classification", "num_classes": 10}}


if __name__ == "__main__":
    sys.exit(cli_main(check_update_ratio, make_demo_case, __doc__))
