"""A Report in words: the summary the command prints, and the post-mortem draft (seed 001's template)."""
from . import json_int
from .detect.thresholds import BLOCK, FAST_STEPS, JUMP_CONFIRM, MIN_POINTS, WINDOW


def _fmt(value):
    return "-" if value is None else f"{value:.4g}"


def summary(report, limit=40):
    """The plain-text report the CLI prints without --json."""
    cols = report.columns
    out = [
        f"{report.path.name} ({report.format}): {report.values} values of {cols.loss_words()}, "
        f"steps {json_int(report.first_step)}..{json_int(report.last_step)}; "
        f"grad norm: {cols.grad or 'not logged'}; dataset series: {', '.join(cols.extras) or 'none'}"
        + (f"; {report.runs} runs one after another, each read on its own" if report.runs > 1 else "")
    ]
    kinds = _counts(report.spikes)
    out.append(f"spikes: {len(report.spikes)}" + (f" ({kinds})" if kinds else ""))
    if report.values <= MIN_POINTS:
        out.append(f"  detection needs at least {MIN_POINTS + 1} values (a baseline of {MIN_POINTS} first); this log "
                   f"has {report.values}: no spike could be found")
    shown = sorted(report.spikes, key=spike_height, reverse=True)[:limit]
    if shown:
        out.append(f"  {'peak step':>10}  {'type':<14}{'baseline':>10}{'peak':>10}{'x base':>8}"
                   f"{'recovery':>10}{'grad lead':>10}")
        for s in sorted(shown, key=lambda s: s.peak_row):
            ratio = s.peak / s.baseline if s.baseline > 0 else None
            out.append(f"  {json_int(s.step):>10}  {s.type:<14}{_fmt(s.baseline):>10}{_fmt(s.peak):>10}"
                       f"{_fmt(ratio):>8}{_fmt(s.recovery_steps):>10}{_fmt(s.grad_norm_lead):>10}")
        if len(report.spikes) > limit:
            out.append(f"  ... {len(report.spikes) - limit} smaller spikes not shown (all are in --json)")
    events = report.to_json()["events"]
    out.append(f"events: {len(events) or 'none'}")
    for event in events[:limit]:
        details = ", ".join(f"{k}={_fmt(v) if isinstance(v, float) else v}" for k, v in event.items()
                            if k not in ("kind", "step"))
        out.append(f"  {event['kind']} at step {event['step']}: {details}")
    if len(events) > limit:
        out.append(f"  ... {len(events) - limit} more events (all are in --json)")
    out.append(f"nan_step: {json_int(report.nan_step) if report.nan_step is not None else 'none'}")
    return "\n".join(out)


TYPES = ("fast_recovery", "slow_recovery", "no_recovery", "divergence")


def _counts(spikes):
    """'3 fast_recovery, 1 divergence': how many spikes of each type, in a fixed order."""
    return ", ".join(f"{n} {k}" for k in TYPES for n in [sum(s.type == k for s in spikes)] if n)


def spike_height(spike):
    return (spike.peak - spike.baseline) / abs(spike.baseline) if spike.baseline else spike.peak


TEMPLATE_TYPE = {"fast_recovery": "1, recoverable", "slow_recovery": "1, recoverable",  # the template's types
                 "no_recovery": "2, lingering", "divergence": "3, divergent"}
CAUSE = {
    "slow_recovery": "a bad pocket of data (badly shuffled, or garbage left in) pushed the optimizer far "
                     "off course; it found its way back on its own",
    "no_recovery": "the optimizer state was knocked into a worse region and did not return: a bad batch "
                   "hitting an Adam second moment that adapts too slowly, or a learning rate too high for "
                   "this point of training",
    "divergence": "the run left its stable region: learning rate too high, numerics (fp16 range, loss "
                  "scaling) or data full of garbage, as in the failed 104B attempts before BLOOM",
}
ACTION = {
    "slow_recovery": "Let it run while the loss keeps coming down and look again a couple of hundred steps "
                     "later. If spikes like this recur, restart from a checkpoint before the spike and skip "
                     "the batches around its start (5 to 20 batches is the range commonly used).",
    "no_recovery": "The run will not catch up on its own: restart from a checkpoint well before the spike "
                   "(a common rule of thumb is 1000 steps or more earlier), skipping the batches around "
                   "its start. If it happens again after the restart, lower the learning rate 2 to 3 times.",
    "divergence": "Stop the run. Restart from a checkpoint before the spike with the batches around its "
                  "start skipped and a learning rate 2 to 3 times lower. If it keeps diverging, check the "
                  "numerics (bf16 rather than fp16) and the cleanliness of the data.",
}


def postmortem(report):
    """A markdown draft after the post-mortem template of seed 001, filled with measured numbers."""
    cols = report.columns
    events = report.to_json()["events"]
    counts = _counts(report.spikes)
    significant = [s for s in report.spikes if s.type != "fast_recovery"]
    fast = [s for s in report.spikes if s.type == "fast_recovery"]
    lines = [
        f"# Post-mortem draft: {report.path.name}",
        "",
        f"Drafted by `python diagnostics/spikes.py {report.path.name} --postmortem` from {report.values} "
        f"values of `{cols.loss_label}` (steps {json_int(report.first_step)} to {json_int(report.last_step)}). Every number "
        "is measured from the log; lines marked *fill in* need facts the log does not hold. Causes and "
        "actions are suggestions to check, not findings.",
        "",
        "## Summary",
        "",
        f"- Spikes: {len(report.spikes)}" + (f" ({counts})" if counts else ""),
        f"- First NaN/inf loss: {'step ' + str(json_int(report.nan_step)) if report.nan_step is not None else 'none'}",
        f"- Resumes (steps going backwards): {len(report.resumes)}",
        f"- Other events: {', '.join(sorted({e['kind'] for e in events if e['kind'] != 'resume'})) or 'none'}",
        "- Grad norm: " + (f"`{cols.grad}`" if cols.grad else "not logged (log it: a grad-norm spike often comes first)"),
    ]
    for number, spike in enumerate(significant, 1):
        lines += _spike_section(number, spike, report, events)
    if fast:
        lines += _fast_section(fast)
    lines += _event_sections(events, report)
    return "\n".join(lines) + "\n"


def _spike_section(number, s, report, events):
    ratio = f" ({s.peak / s.baseline:.2f}x the baseline)" if s.baseline > 0 else ""
    if s.type == "slow_recovery":
        after = f"{_fmt(s.level_after)}, back to the pre-spike trend {s.recovery_steps} steps after the peak"
        cost = f"{json_int(s.end - s.start)} steps from the start of the spike until the loss was back on its trend."
    elif s.ended_by == "nonfinite":
        after = "none: the loss turned NaN/inf"
        cost = _lost_steps(s, report)
    elif s.type == "no_recovery" and s.level_after is not None and s.baseline > 0:
        after = (f"settled at {_fmt(s.level_after)}, {100 * (s.level_after / s.baseline - 1):.0f}% above the pre-spike "
                 "level: it came down, then went on along a parallel track higher than the trend it was on. That is a "
                 "lasting offset, not a recovery, even where the values fall inside the noise band of a noisy run")
        cost = _lost_steps(s, report)
    else:
        after = f"settled at {_fmt(s.level_after)}" if s.level_after is not None else "none: the log ends at the peak"
        cost = _lost_steps(s, report)
    grad = ("not logged" if not report.columns.grad else
            f"{_fmt(s.grad_norm_peak)}" + (f", its spike started {s.grad_norm_lead} steps before the loss spike"
                                           if s.grad_norm_lead is not None else ", no grad-norm spike led it"))
    related = _related(s, report, events)
    return [
        "",
        f"## Spike #{number}: step {json_int(s.step)} ({s.type})",
        "",
        "### Symptoms",
        "",
        f"- Pre-spike loss (median of the last {WINDOW} healthy values): {_fmt(s.baseline)}",
        f"- Peak loss: {_fmt(s.peak)} at step {json_int(s.step)}{ratio}; the spike started at step {json_int(s.start)}",
        f"- Loss after the spike: {after}",
        f"- Grad norm peak during the spike: {grad}",
        f"- Learning rate when it started: {_fmt(s.lr) if report.columns.lr else 'not logged'}",
        "",
        "### Evidence",
        "",
        f"- Log: `{report.path}`, steps {json_int(s.start)} to {json_int(s.end) if s.end is not None else 'end of segment'}",
        f"- Batches to pull: the data fed at steps {json_int(s.start) - 5} to {json_int(s.step)} *(fill in sample "
        "indices from the data loader)*; the trouble may have started earlier than the batch before the spike",
        *[f"- {text}" for text in related],
        "",
        "### Classification",
        "",
        f"- Type: {s.type} (template type {TEMPLATE_TYPE[s.type]}); the follow-up ended by: {s.ended_by}",
        f"- Likely cause (to check): {CAUSE[s.type]}",
        "",
        "### Recovery action (suggested)",
        "",
        f"- {ACTION[s.type]}",
        "",
        "### Cost",
        "",
        f"- {cost}",
        "",
        "### Lessons / follow-ups",
        "",
        "- *fill in*",
    ]


def _lost_steps(s, report):
    later = [(step, before) for row, step, before in report.resumes if row > s.start_row]
    if later:
        step, before = later[0]
        return (f"{json_int(before - s.start)} steps from the start of the spike to the rollback at step {json_int(before)} "
                f"(resumed at step {json_int(step)}), plus the steps between the checkpoint restored and the spike.")
    return (f"{json_int(report.last_step - s.start)} steps from the spike to the end of the log are suspect, plus "
            "the steps between the checkpoint you restart from and the spike.")


def _related(s, report, events):
    notes = []
    for e in events:
        if e["kind"] == "resume_spike" and e["step"] == json_int(s.step):
            notes.append(f"Came {e['rows_after_resume']} rows after the resume at step {e['resume_step']}: "
                         "check that RNG states and the data loader position were restored.")
    repeat = [e for e in events if e["kind"] == "repeat_data" and abs(e["step"] - s.start) <= JUMP_CONFIRM]
    for e in repeat:
        notes.append(f"Came where the repeated data after the resume at step {e['resume_step']} ran out, and rose "
                     f"clearly above the {_fmt(e['expected'])} the pre-resume trend predicts: the pre-spike loss "
                     "given above is that level, so this is a spike on top of the jump back, not the jump itself.")
    resumes_before = [step for row, step, _ in report.resumes if row <= s.start_row]
    if s.type == "no_recovery" and resumes_before and not repeat:
        notes.append(f"A resume (step {json_int(resumes_before[-1])}) came before this shift to a higher level: rule "
                     "out repeated data (a sampler restarting from the beginning) before rolling back.")
    return notes


def _fast_section(fast):
    rows = sorted(fast, key=spike_height, reverse=True)[:20]
    lines = [
        "",
        f"## Fast-recovering spikes ({len(fast)})",
        "",
        f"Back inside the pre-spike noise band within {FAST_STEPS} steps of the peak. Largest first"
        + (f" (20 of {len(fast)}):" if len(fast) > 20 else ":"),
        "",
        "| peak step | baseline | peak | x baseline | recovery steps | grad lead |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in rows:
        ratio = _fmt(s.peak / s.baseline) if s.baseline > 0 else "-"
        lines.append(f"| {json_int(s.step)} | {_fmt(s.baseline)} | {_fmt(s.peak)} | {ratio} | {s.recovery_steps} | "
                     f"{_fmt(s.grad_norm_lead)} |")
    lines += [
        "",
        "Suggested action: none needed while they stay short; training carries on as before. If the same "
        "steps spike again in another run with the same data order, the batches at those steps are the "
        "suspects: pull them and inspect or filter them.",
        "",
        f"Cost: {sum(s.end - s.start for s in fast if s.end is not None):g} steps spent above the band in total.",
    ]
    return lines


EVENT_SECTIONS = {
    "non_spike_divergence": (
        "Divergence without a spike",
        "Roll back to before the rise and restart with a lower learning rate; if each restart makes a little "
        "progress and then climbs again, look at the data and the numerics rather than at single batches.",
    ),
    "nonfinite": (
        "NaN or inf values",
        "Find the first bad step: run it again with anomaly detection and look for an overflow (fp16 range, "
        "loss scaling) or a division by zero. Restart from the last checkpoint with finite values.",
    ),
    "resume_drop": (
        "Lower loss right after a resume",
        "A loss that improves at a resume is suspicious: check that the data sampler continued where it "
        "stopped instead of starting the data stream again, and that the RNG states were restored.",
    ),
    "repeat_data": (
        "Repeated data after a resume",
        "The loss never went up: during the low stretch the model was scored on data it had already seen "
        "and partly memorised, and the jump is the loss coming back to its real level when new data arrived, "
        "so it is not listed as a spike and gives no reason to roll back. Fix the sampler's resume (or change "
        "the seed, which only hides the repetition) and do a couple of test resumes before a long run. The "
        "steps of the low stretch were spent on repeated data.",
    ),
    "resume_spike": (
        "Spikes right after a resume",
        "A spike after each resume that then recovers points at state that was not restored: the data "
        "loader position and mix, the RNG states. Compare a few batches before and after a test resume.",
    ),
    "grad_norm_spike": (
        "Gradient-norm spikes without a loss spike",
        "Nothing to undo: the loss did not move, because clipping or the optimizer's normalisation absorbed the "
        "step, or the batch was odd only for the gradient. Watch them: when they grow larger or more frequent, "
        "loss spikes often follow. The batches at those steps are the first suspects; tighter clipping or a "
        "lower learning rate the usual remedy if they keep coming.",
    ),
    "series_spike": (
        "Spikes per dataset",
        "A spike confined to one dataset points at that dataset: inspect the shard it came from, filter it "
        "or swap it out. A spike shared by all datasets points at the optimizer or the learning rate.",
    ),
}


def _event_sections(events, report):
    lines = []
    for kind, (title, action) in EVENT_SECTIONS.items():
        found = [e for e in events if e["kind"] == kind]
        if not found:
            continue
        lines += ["", f"## {title} ({len(found)})", ""]
        for e in found[:20]:
            lines.append(f"- {_describe(e)}")
        if len(found) > 20:
            lines.append(f"- ... {len(found) - 20} more in `--json`")
        lines += ["", f"Suggested action: {action}"]
    return lines


def _describe(e):
    kind = e["kind"]
    if kind == "non_spike_divergence":
        return (f"The loss crept from {_fmt(e['from'])} (lowest, around step {e['low_step']}) to {_fmt(e['to'])} by "
                f"step {e['last_step']} without a spike ({100 * (e['to'] - e['from']) / abs(e['from']):.0f}% higher); "
                f"the rise began around step {e['step']}.")
    if kind == "nonfinite":
        return (f"{e['series']}: {e['count']} non-finite values from step {e['step']} to step {e['last_step']}.")
    if kind == "resume_drop":
        return (f"Resume at step {e['step']}: the loss fell from {_fmt(e['before'])} to {_fmt(e['after'])} "
                f"({e['drop_pct']:.1f}% lower) over the first {BLOCK} values.")
    if kind == "repeat_data":
        level = (f"clearly above the {_fmt(e['expected'])} the pre-resume trend predicts: a spike on top of the "
                 "jump, in its own section" if e["spike"] else
                 f"about the {_fmt(e['expected'])} the pre-resume trend predicts: under-reported until then, not a spike")
        return (f"After the resume at step {e['resume_step']} the loss read {_fmt(e['low'])} instead of "
                f"{_fmt(e['before'])}; at step {e['step']}, {e['step'] - e['resume_step']} steps later, it jumped back "
                f"to {_fmt(e['high'])}, {level}.")
    if kind == "grad_norm_spike":
        return (f"Step {e['step']}: grad norm {_fmt(e['peak'])} against a baseline of {_fmt(e['baseline'])} "
                f"({e['type']}); the loss stayed inside its band.")
    if kind == "resume_spike":
        return (f"{e['type']} spike at step {e['step']}, {e['rows_after_resume']} rows after the resume at step "
                f"{e['resume_step']}.")
    scope = "shared by " + ", ".join(e["series"]) if e["scope"] == "shared" else "confined to " + e["series"][0]
    return f"Step {e['step']}: {scope}" + (f"; quiet: {', '.join(e['quiet'])}" if e["quiet"] else "") + "."
