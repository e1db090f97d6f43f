"""training_loop: does the script train in train mode, and does it clear the gradients between steps?

Symptom
    The loss falls at first, then the run wanders, spikes or diverges, and lowering the lr only
    delays it: the loop never calls zero_grad(), so each optimizer step applies every earlier
    gradient again (a growing sum, not the current batch's gradient). Or training looks fine
    but dropout never regularises and BatchNorm never learns its statistics: the model was put
    in eval mode (model.eval() for a validation pass, or a Hugging Face from_pretrained model,
    which comes back in eval mode) and never back in train mode before the loop.

What it checks
    What the script's own loop did, as `doctor --script` recorded it (capture.py keeps it in
    case["loop"]; a case file has no loop to look at: skip).

      gradients  the first optimizer step runs, and at the same optimizer's second step .grad
                 is compared with two explanations, each fitted up to one scale (clipping and a
                 GradScaler multiply it): kept (the first step's gradient plus every fresh one
                 since) and cleared (the fresh gradients since the last clearing). Fail when
                 only kept fits (relative residual under 1e-3, the other over 1e-2).
      mode       the model's mode at the forward pass that fed backward(). When the whole model
                 was in eval mode and it has modules that compute differently in train mode
                 (dropout with p > 0, batch statistics), the batch is run in both modes: fail
                 when the output moves by more than 1e-3 (relative), the harm shown on your
                 own model and batch. Frozen BatchNorm inside a model in train mode is a choice
                 (detection fine-tunes do it): pass, named.

    Pass: gradients cleared and train mode. The gradient question stays open (said so) when
    the optimizer takes a closure (LBFGS, Lightning) or the script ends before a second step.

Command
    python diagnostics/doctor.py --script train.py -- ARGS   # the way to run it on your loop
    python diagnostics/training_loop.py                      # embedded demo (planted bug)
    python diagnostics/training_loop.py --healthy

Output
    $ python diagnostics/training_loop.py
    [FAIL] training_loop: at the second optimizer step .grad still held the first step's gradient plus the new one (fit residual 2.6e-08; cleared: 0.64): the loop never clears the gradients, so every step applies all earlier ones again
    (exit code 1)
    $ python diagnostics/training_loop.py --healthy
    [PASS] training_loop: the loop clears .grad between optimizer steps (fit residual 0) and trains in train mode (1 of 1 dropout / batch-statistics modules active)
    (exit code 0)

How to read it
    details["loop"] is what capture recorded: "training" (the model's mode at its forward),
    "in_eval" (the mode-dependent modules in eval mode), "grads" ("kept", "cleared" or None
    when unknown) and "grads_residuals" (each explanation's relative residual: the smaller
    one is what happened). details["mode_effect"] is how far the output moved between the
    mode the script trained in and train mode.

Next step
    PLAYBOOK.md#training-loop. Kept gradients: call optimizer.zero_grad() (or
    model.zero_grad()) once per optimizer step, before backward() or right after step(); with
    gradient accumulation, after the step that ends each group of micro-batches. Eval mode:
    call model.train() before the training loop and again after every validation pass.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CaseError, CheckResult, cli_main, forward, named_tensors, preserved, validate_case

MODE_EFFECT = 1e-3  # relative output change between modes above float noise (float32 sums agree to ~1e-6): our assumption


def _mode_effect(case):
    """How far the output moves (relative) when the model runs the batch in train mode instead of its own mode."""
    model, inputs = case["model"], case["batch"][0]
    with preserved(model), torch.no_grad():
        torch.manual_seed(0)
        own = [t.float() for _, t in named_tensors(forward(model, inputs)) if t.is_floating_point()]
        model.train()
        torch.manual_seed(0)
        trained = [t.float() for _, t in named_tensors(forward(model, inputs)) if t.is_floating_point()]
    change = sum(float((a - b).norm()) ** 2 for a, b in zip(own, trained)) ** 0.5
    scale = sum(float(a.norm()) ** 2 for a in own) ** 0.5
    return change / scale if scale > 0 else float(change > 0)


def check_training_loop(case):
    """Whether the script's loop trains in train mode and clears .grad between optimizer steps (case["loop"])."""
    case = validate_case(case)
    loop = case.get("loop")
    if not loop:
        return CheckResult("training_loop", "skip", "needs what your training loop did: run it under "
                           "`doctor --script train.py` (a case file has no loop to look at)")
    details = {"loop": loop}
    problems, notes = [], []
    residuals = loop.get("grads_residuals") or {}
    if loop.get("grads") == "kept":
        problems.append(f"at the second optimizer step .grad still held the first step's gradient plus the new one (fit "
                        f"residual {residuals['kept']:.2g}; cleared: {residuals['cleared']:.2g}): the loop never clears "
                        "the gradients, so every step applies all earlier ones again")
        details["next"] = "call optimizer.zero_grad() once per optimizer step, before backward() or right after step()"
    elif loop.get("grads") == "cleared":
        notes.append(f"the loop clears .grad between optimizer steps (fit residual {residuals['cleared']:.2g})")
    else:
        notes.append("whether the loop clears .grad is unknown (a closure optimizer, or no second step)")
    dependent, in_eval = loop.get("mode_dependent", 0), loop.get("in_eval", [])
    if not loop.get("training") and in_eval:
        details["mode_effect"] = effect = _mode_effect(case)
        if effect > MODE_EFFECT:
            problems.append(f"the model trained in eval mode ({len(in_eval)} of {dependent} dropout / batch-statistics "
                            f"modules inactive, first: {in_eval[0]}): in train mode its output on this batch moves by "
                            f"{effect:.0%}")
            details.setdefault("next", "call model.train() before the training loop and after every validation pass")
        else:
            notes.append(f"the model trained in eval mode, but its output does not depend on the mode ({effect:.1g})")
    elif in_eval:
        notes.append(f"trains in train mode with {len(in_eval)} of {dependent} dropout / batch-statistics modules "
                     f"frozen in eval mode (first: {in_eval[0]}): a choice, as detection fine-tunes make")
    else:
        notes.append(f"trains in train mode ({dependent} of {dependent} dropout / batch-statistics modules active)")
    if problems:
        return CheckResult("training_loop", "fail", "; ".join(problems), details)
    return CheckResult("training_loop", "pass", " and ".join(notes), details)


def make_demo_case(broken=True):
    """A small classifier's loop, captured as `doctor --script` does; the broken twin never clears its gradients."""
    try:
        import capture  # the loop facts come from a capture; the check itself reads only the case
    except ModuleNotFoundError:
        raise CaseError("the demo captures an embedded loop: copy capture.py beside training_loop.py") from None

    clears_gradients = True
    if broken:
        clears_gradients = False  # BUG: the loop never calls optimizer.zero_grad(): gradients pile up step after step

    def train():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Dropout(0.1), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            x = torch.randn(32, 12)
            loss = torch.nn.functional.cross_entropy(model(x), x[:, :3].argmax(1))
            if clears_gradients:
                optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    with torch.random.fork_rng(devices=[]):
        return capture.capture_case(train, second_step=True)


if __name__ == "__main__":
    sys.exit(cli_main(check_training_loop, make_demo_case, __doc__))
