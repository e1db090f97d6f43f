"""overfit_one_batch: can the model drive one tiny batch to (near) zero loss?

Symptom
    The loss stays flat, stalls well above zero, or climbs, and you cannot tell whether the
    model, the loss or the optimizer is to blame. Karpathy's recipe and cs231n put this test
    before any real training: a model that cannot memorise a handful of examples has a bug.

What it checks
    Takes the first 8 rows of the case's batch, switches regularisation off (Dropout,
    MultiheadAttention and LSTM/GRU/RNN modules, whose dropout is between layers, to eval, weight decay 0 in the optimizer it builds), and
    trains with the case's optimizer factory (Adam at lr 3e-4 when the case has none) for up to
    300 steps, stopping as soon as the loss is below 5% of where it started (of ln C, the chance
    level, when the task names C classes or a vocabulary and the start is above it: a bad init
    must not make "near zero" easy). BatchNorm stays in train mode, as in real training. When
    the loss still differs under two seeds in that mode (dropout written in forward as
    F.dropout(x, p, training=self.training), as pytorch/examples' GAT does), every module but
    batch statistics goes to eval as well (details["train_noise_off"]). A batch that is one
    graph (task["graph"]: node classification) is cut, not sliced: the first 8 nodes the loss
    reads and their neighbours, the edges among them renumbered, the other labelled nodes there
    kept as neighbours with the target the loss ignores (details["subgraph"]); a graph whose
    loss or model needs every node is trained whole. A failure is classified (details["failure"]):

      flat       the loss never moved: learning rate 0, an optimizer that holds none (or not
                 all) of the model's parameters, a loss detached from the parameters.
      diverging  the loss turned NaN/inf, or ran away from zero (4x its start for 5 steps in a
                 row: a jump the next steps undo is none): learning rate far too high, or a
                 flipped sign (maximising the loss: it heads to -inf).
      plateau    it went down and stalled above the target, and still does at 10x the learning
                 rate: probabilities fed to a logits loss (double softmax), a capacity bug (a
                 width-1 bottleneck), label smoothing, targets the inputs cannot explain.
      probabilities_into_nll
                 the outputs are probabilities (rows summing to 1) and the loss is exactly
                 -mean(p[target]): NLLLoss given a softmax, not a log_softmax; the loss heads
                 to -1 instead of 0.

    Why the retry at 10x: the test should not fail a sound model only because your learning
    rate (Adam 3e-4 is a forgiving baseline for a long run) is slow for a 300-step sprint, and it
    must not hide your settings either. So the first run uses your optimizer exactly: a learning
    rate of 0 stays 0, a runaway at your lr is a fail. Only a run whose loss fell but missed the
    target is retried with every learning rate multiplied by 10, for up to twice the steps;
    memorising the batch there is a pass, and the summary says it needed 10x. Trainable parameters missing from the optimizer
    are listed in details["not_in_optimizer"].

    Speed: a run also stops when the loss has fallen by less than 1% of its start over the
    last 50 steps and, kept up, that pace would not take it to the target in the steps left
    (stalled: the verdict is already in; for a sampled objective, the means of 10 steps at both
    ends, and no pace). A deterministic loss falling too slowly to reach the target in 300 steps
    at its last 50 steps' pace goes to the 10x run at once: memorising there is the pass it would
    have reached after the whole sprint (details["on_course_to_miss"]); any other outcome is
    judged on the whole sprint at your lr, run then. (The one thing this skips: a loss that would
    have run away at your lr after falling slowly, when 10x memorises.) The budget is counted in steps, never in
    seconds, so a verdict is the same on a fast GPU and a loaded CPU: 300 at your lr, 600 at 10x.
    A loss still falling when the retry runs out of steps, or one that fell at your lr and
    diverged at 10x, is a skip "inconclusive" (details["failure"]): the steps ran out before the
    experiment said anything about the model, so it is neither a pass nor a warn about it. So is a
    plateau of a model with fewer trainable parameters than the rows' target values (a plain
    nn.Linear(4, 1) against 8 numbers): no code of that size could match them, so the stall shows
    no bug (details["next"] is the call on as many rows as it has parameters for). An objective that samples noise (a
    VAE's reparameterisation, a diffusion loss drawing t and the noise: the loss differs under
    two seeds) has a floor above zero: there, a loss that halved and then settled is a pass, and
    a loss flat within its noise whose model cannot memorise its own first predictions either
    (10x lr) is inconclusive while the steps moved the weights, a fail when they never did. So
    has a loss against soft targets (BCE on grey pixels, label smoothing, a KL term): when a run
    misses the target, the model's first outputs become free tensors trained alone on your loss
    (300 Adam steps); where they settle is the loss's floor (details["loss_floor"]), and "near
    zero" becomes the floor plus 5% of the way down to it. task["clip_grad_norm"] is applied every step,
    task["lr_schedule"] (step -> lr factor, as LambdaLR takes) sets the lr to its peak, and
    task["batch_dim"] says where the rows are (default 0).

    The model is trained in place and restored afterwards (parameters, buffers, .grad, modes,
    hooks, RNG), so the case is exactly as it was when the check returns. A
    DistributedDataParallel (or DataParallel) model is unwrapped to `.module`: each rank trains
    its own copy on its own rows, with no collective.

Command
    python diagnostics/overfit_one_batch.py                      # embedded demo (planted bug)
    python diagnostics/overfit_one_batch.py --healthy            # its healthy twin
    python diagnostics/overfit_one_batch.py --case my_case.py --json

Output
    $ python diagnostics/overfit_one_batch.py
    [FAIL] overfit_one_batch: plateau: stalled at 0.9067 (from 1.592, target 0.0796) even at 10x lr: the outputs are probabilities (rows sum to 1) fed to a loss that expects logits: double softmax?
    (exit code 1)
    $ python diagnostics/overfit_one_batch.py --healthy
    [PASS] overfit_one_batch: memorised 8 rows at 10x your learning rate (1.551 -> 0.07628 in 37 steps); at your lr the loss went 1.551 -> 0.2568 in 240 steps, on course to miss the target in its 300 steps
    (exit code 0)

How to read it
    pass: the batch was memorised (at your lr, or at 10x if the summary says so); the pipeline
    can learn. It does not prove the model generalises: cs231n notes that random features
    overfit too. warn: memorised, but some trainable parameters are not in the optimizer. skip
    "inconclusive": the step budget ran out, or the model is smaller than the rows' targets (details["next"] is the call
    that can tell). fail: read details["failure"] and
    details["losses"] (the loss every 10 steps; details["retry_losses"] at 10x): flat, diverging
    and plateau point at different bugs, listed above. details["outputs_are_probabilities"] is
    true when the outputs are non-negative rows summing to 1 (a softmax before the loss);
    details["probabilities_into_nll"] when, on top of that, the loss is -mean(p[target]): NLLLoss
    given probabilities instead of log-probabilities (its loss heads to -1, not 0).

Next step
    PLAYBOOK.md#overfit-one-batch. Flat: print the optimizer's lr and check that it was built
    from this model's parameters. Diverging: check the loss sign, then lower the lr. Plateau:
    remove the softmax before CrossEntropyLoss, remove bottlenecks, turn off label smoothing.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import (CheckResult, batch_rows, count_rows, cli_main, first_tensor, forward, graph_edges,
                               loss_closure, map_tensors, named_tensors, needs_closure, preserved, replace_tensor,
                               step_optimizer, validate_case)

# Karpathy overfits "as little as two" examples (evidence karpathy-recipe#overfit-one-batch), cs231n "e.g. 20"
# (cs231n-nn3#overfit-tiny-subset); 8 rows keep BatchNorm's batch statistics usable — our assumption.
ROWS = 8
GRAPH_HOPS = 1  # a graph batch is cut to the ROWS nodes it memorises and their neighbours: a smaller graph of the user's
# own nodes and edges (a 2-layer GCN or GAT then reads 1 hop less around them; 2 hops of a 1,700-node graph of degree 7
# kept 1,008 nodes, measured); our assumption
STEPS = 300  # our assumption, tuned on the test zoo: healthy cases get there in 60-200 steps at Adam 3e-4, or under 100 at 10x
TARGET = 0.05  # "near zero" = 5% of the start (or of ln C) — our assumption, tuned on the test zoo (cs231n asks for zero cost)
FLAT = 0.01  # the loss never moved by more than 1% of its start: nothing is learning — our assumption
RUNAWAY = 4.0  # |loss| at 4x its start, or NaN/inf: diverging, stop early — our assumption
RUNAWAY_STEPS = 5  # ... for 5 steps in a row: a jump the next steps undo is no runaway (siamese_network's resnet18 under
# Adadelta at lr 1 jumped 5.8x on its first step, then fell to 0.36 and memorised its rows 3 steps later, measured)
STALL_WINDOW = 50  # a loss that fell by less than FLAT of its start over 50 steps has stalled — our assumption
SAME_LOSS = 1e-4  # two draws whose losses differ by less are one deterministic objective (float noise, not sampling) — our assumption
NOISE_WINDOW = 10  # steps averaged when the objective samples noise: one step's loss is one draw — our assumption
FLOOR = 0.5  # a sampling model (VAE) passes when its loss halved and settled: its noise and KL terms keep it above zero
SCHEDULE_HORIZON = 10_000  # steps over which task["lr_schedule"]'s peak factor is taken — our assumption
RETRY_LR = 10.0  # a run that fell but missed the target is retried with every lr x10 — our assumption
BLOCKED = 1e-3  # a row whose own gradient is under this share of the median row's gets none that matters (our assumption)
CLOSURE_STEPS = 25  # steps of an optimizer that takes a closure: LBFGS evaluates the loss up to max_iter (20) times a step,
# so 25 of its steps cost more evaluations than the plain budget (our assumption)
FREE_STEPS = 300  # Adam steps on the free outputs that find the loss's floor (its lr decays to 0 over them) — our assumption
FREE_LR = 0.05  # their first step size: a logit or a pixel moves by about this much per step — our assumption
FREE_NUMEL = 10_000_000  # outputs beyond 10M numbers (40 MB, x3 with Adam's state) get no floor: 8 rows of a 50k vocab
# at T = 25 (our assumption: memory, not time, is the limit)
SETTLED = 0.01  # the free outputs found the floor when their second half of steps gave under 1% of their whole fall: a
# linear loss (the output itself) gives 25% there with the lr decaying to 0, BCE on soft targets 0.14% (measured)
RETRY_STEPS = 2  # the retry may take twice the steps while it still falls: memorising 80 random tokens takes an LSTM ~320 steps at 10x (measured)
DROPOUT_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                   torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout, torch.nn.MultiheadAttention,
                   torch.nn.RNNBase)  # LSTM/GRU/RNN(dropout=p) drop between their layers in train mode; eval changes nothing else


def _edge_list(edges, n):
    """The (2, E) node pairs of an edge input (ml_debug_contract.graph_edges): an adjacency's non-zero entries."""
    if edges.is_sparse:
        edges = edges.coalesce()
        return edges.indices()[:, edges.values() != 0]
    return edges.nonzero().t() if tuple(edges.shape) == (n, n) else edges


def _rows_read(case, model, inputs, targets, n):
    """The rows of the model's (n, ...) output that the loss reads (their output gets a gradient), in eval mode: node
    classification scores only its labelled nodes, by an index or by ignore_index."""
    model.eval()
    output = forward(model, inputs)
    first = first_tensor(output)
    if first is None or not first.requires_grad or first.dim() == 0 or first.shape[0] != n:
        return None
    grad, = torch.autograd.grad(case["loss_fn"](output, targets), first, allow_unused=True)
    return None if grad is None else (grad.reshape(n, -1) != 0).any(1).nonzero().squeeze(1)


def _subgraph(case, model, inputs, targets, n, rows):
    """One graph batch cut to the first `rows` nodes the loss reads and every node within GRAPH_HOPS hops of them, each
    edge input cut to those nodes and renumbered: (inputs, targets, {nodes, of, read}), or None where it cannot be cut
    (no edge input over n nodes, the loss reads no row of an (n, ...) output, the cut leaves every node, or the cut graph's loss
    fails, as a loss that indexes with a mask of the full graph's size does)."""
    nodes, edges = graph_edges(inputs)
    if nodes != n:  # the node features are not the rows the batch dimension counts
        return None
    try:
        with preserved(model):
            read = _rows_read(case, model, inputs, targets, n)
            if read is None or read.numel() == 0:
                return None  # (no row read: the cut below keeps no node and ends in None too)
            pairs = [_edge_list(e, n) for e in edges]
            keep = torch.zeros(n, dtype=torch.bool, device=read.device)
            keep[read[:rows]] = True
            for _ in range(GRAPH_HOPS):  # each hop from the nodes the hops before reached, either way along an edge
                reached = keep.clone()
                for src, dst in pairs:
                    reached[dst[keep[src]]] = True
                    reached[src[keep[dst]]] = True
                keep = reached
            if bool(keep.all()):
                return None
            index = keep.nonzero().squeeze(1)
            number = torch.full((n,), -1, dtype=torch.long, device=index.device)
            number[index] = torch.arange(index.numel(), device=index.device)
            cut = inputs
            for e in edges:
                if tuple(e.shape) == (n, n):
                    smaller = e.index_select(0, index).index_select(1, index)
                else:
                    inside = keep[e[0]] & keep[e[1]]
                    smaller = number[e[:, inside]].to(e.dtype)
                cut = replace_tensor(cut, e, smaller)
            cut = _rows_to(cut, n, index, skip=edges)
            cut_targets = _rows_to(_unread_beyond(targets, n, read, rows), n, index, skip=[])
            read_cut = _rows_read(case, model, cut, cut_targets, index.numel())
    except Exception:  # the loss or the model needs the whole graph: it is trained whole, as before
        return None
    if read_cut is None or read_cut.numel() == 0:
        return None
    return cut, cut_targets, {"nodes": index.numel(), "of": n, "read": read_cut.numel(), "hops": GRAPH_HOPS}


def _unread_beyond(targets, n, read, rows):
    """The targets with every read row after the first `rows` given the value the loss ignores, where the unread rows
    show it (one value they all hold and no read row does: the -100 of ignore_index): the graph's other labelled nodes
    stay in the cut as neighbours, not as rows to memorise. Other targets are returned as they are."""
    if not (torch.is_tensor(targets) and targets.dim() >= 1 and targets.shape[0] == n and not targets.is_floating_point()):
        return targets
    unread = torch.ones(n, dtype=torch.bool, device=targets.device)
    unread[read] = False
    values = targets[unread].unique()
    if values.numel() != 1 or bool((targets[read] == values[0]).any()):
        return targets
    targets = targets.clone()
    targets[read[rows:]] = values[0]
    return targets


def _rows_to(obj, n, index, skip):
    """Every tensor in obj with n rows (dim 0), kept at `index`, except the tensors in skip (the edge inputs)."""
    return map_tensors(obj, lambda tensor: tensor.index_select(0, index)
                       if tensor.dim() > 0 and tensor.shape[0] == n and not any(tensor is e for e in skip) else tensor)


def _looks_like_probabilities(output):
    """True when the output is non-negative and each row along the last dim sums to 1 (a softmax)."""
    if not (torch.is_tensor(output) and output.is_floating_point() and output.dim() >= 2 and output.shape[-1] > 1):
        return False
    output = output.detach()
    sums = output.sum(-1)
    return bool((output >= 0).all() and torch.allclose(sums, torch.ones_like(sums), atol=1e-3))


def _probabilities_into_nll(output, targets, loss):
    """True when the loss is -mean(p[target]) of probability outputs: NLLLoss given softmax, not log_softmax, outputs."""
    if not (_looks_like_probabilities(output) and torch.is_tensor(targets) and not targets.is_floating_point()
            and tuple(targets.shape) == tuple(output.shape[:-1])):
        return False
    kept = targets >= 0  # NLLLoss leaves out ignore_index (-100 by default)
    picked = output.detach().gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[kept]
    return picked.numel() > 0 and abs(float(-picked.double().mean()) - loss) <= 1e-4 * max(1.0, abs(loss))  # float noise


def _sprint_mode(model, quiet):
    """The modes the sprint trains in: train mode with the Dropout modules off (no noise to memorise through, batch
    statistics as in training); quiet: every module but those with batch statistics (BatchNorm, InstanceNorm) in eval
    mode, which switches off dropout a forward writes as F.dropout(x, p, training=self.training) (GAT's)."""
    model.train()
    for module in model.modules():
        if isinstance(module, DROPOUT_MODULES) or quiet and not isinstance(module, torch.nn.modules.batchnorm._NormBase):
            module.eval()


def _stalled(losses, noisy=False):
    """The loss fell by less than FLAT of its start over the last STALL_WINDOW steps. noisy (the objective samples
    noise): the means of NOISE_WINDOW steps at both ends of that span are compared, not two draws (a draw against a
    draw stopped GAT's run under dropout 0.6 at step 51 while its mean fell 6%, measured)."""
    if not noisy:
        return len(losses) > STALL_WINDOW and losses[-STALL_WINDOW - 1] - losses[-1] < FLAT * abs(losses[0])
    span = STALL_WINDOW + NOISE_WINDOW
    if len(losses) < span:
        return False
    earlier, recent = losses[-span:-STALL_WINDOW], losses[-NOISE_WINDOW:]
    return (sum(earlier) - sum(recent)) / NOISE_WINDOW < FLAT * abs(_began(losses, noisy))


def _now(losses, noisy=False):
    """Where a run stands: its last loss; for an objective that samples noise, the mean of its last NOISE_WINDOW draws.
    One draw is no verdict: under logits drowned in noise, one draw of 0.69 in a run whose mean stayed near 45 passed a
    model trained at lr 0, and one low first draw made later ordinary draws look 4x larger, a runaway (measured)."""
    return sum(losses[-NOISE_WINDOW:]) / len(losses[-NOISE_WINDOW:]) if noisy else losses[-1]


def _began(losses, noisy=False):
    """Where a run started: its first loss; for an objective that samples noise, the mean of its first NOISE_WINDOW draws."""
    return sum(losses[:NOISE_WINDOW]) / len(losses[:NOISE_WINDOW]) if noisy else losses[0]


def _finite(losses):
    """No loss is NaN or inf (NaN fails `<` too)."""
    return all(abs(v) < float("inf") for v in losses)


def _ran_away(losses, noisy=False):
    """A loss turned NaN/inf, or the run has stood at RUNAWAY x its start for RUNAWAY_STEPS steps (noisy: the last
    window's mean against the first's, once they do not overlap)."""
    if not _finite(losses):
        return True
    if noisy:
        return len(losses) >= 2 * NOISE_WINDOW and not abs(_now(losses, noisy)) < RUNAWAY * abs(_began(losses, noisy))
    return len(losses) > RUNAWAY_STEPS and all(not abs(v) < RUNAWAY * abs(losses[0]) for v in losses[-RUNAWAY_STEPS:])


def _jumped(losses, noisy=False):
    """The run stood at RUNAWAY x its start at some step (noisy: a window's mean against the first's), or turned
    NaN/inf: unstable, even where it came back down. A retry at RETRY_LR x that jumped is no reference for a slow lr:
    super_resolution's at 10x jumped past 4x, came back and stalled, and was failed "plateau" (measured). A NaN or inf
    fails `<`, so it counts as a jump."""
    levels = _window_means(losses) if noisy else losses
    return any(not abs(v) < RUNAWAY * abs(levels[0]) for v in levels)


def _reached(losses, target, noisy=False):
    """The run stands at or below the target (noisy: its last NOISE_WINDOW draws' mean, once it has that many)."""
    return (len(losses) >= NOISE_WINDOW or not noisy) and abs(_now(losses, noisy)) <= target


def _out_of_reach(losses, target, steps):
    """On course to miss the target: its fall over the last STALL_WINDOW steps, kept up for the rest of the `steps`,
    would end above it. A falling loss mostly slows down, but one that speeds up later proves this wrong: so it only
    decides which run goes first, never a verdict."""
    done = len(losses) - 1
    if done < STALL_WINDOW:
        return False
    rate = (losses[-STALL_WINDOW - 1] - losses[-1]) / STALL_WINDOW
    return losses[-1] - rate * (steps - done) > target


def _train(case, model, inputs, targets, lr_scale, steps, target, noisy=False, early=False):
    """Train on one batch; returns (losses, optimizer, why it stopped): "target", "runaway", "stalled", "budget", and
    with early (a deterministic objective) "out_of_reach" (_out_of_reach). noisy: the objective samples noise (the
    stall is judged on means)."""
    optimizer = case["optimizer"]([p for p in model.parameters() if p.requires_grad])
    if needs_closure(optimizer):
        steps = min(steps, CLOSURE_STEPS)
    schedule = case["task"].get("lr_schedule")  # the sprint runs at the schedule's peak, as the run does after warmup
    peak = max(float(schedule(step)) for step in range(SCHEDULE_HORIZON)) if schedule else 1.0
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * lr_scale * peak
        if "weight_decay" in group:
            group["weight_decay"] = 0.0  # regularisation off: cs231n-nn3#overfit-tiny-subset
    losses, clip = [], case["task"].get("clip_grad_norm")
    for step in range(steps + 1):
        model.zero_grad(set_to_none=True)
        loss = case["loss_fn"](forward(model, inputs), targets)
        losses.append(float(loss.detach()))
        stop = ("target" if _reached(losses, target, noisy) else "runaway" if _ran_away(losses, noisy)
                else "stalled" if _stalled(losses, noisy) and (noisy or _out_of_reach(losses, target, steps))
                else "budget" if step == steps
                else "out_of_reach" if early and not noisy and _out_of_reach(losses, target, steps) else None)
        if stop:
            return losses, optimizer, stop
        loss.backward()
        if clip:  # the real loop's clipping (task["clip_grad_norm"])
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        step_optimizer(optimizer, loss_closure(case, model, inputs, targets))


def _classify(losses, noisy=False):
    """How a run that missed the target failed: diverging, flat, or still-falling/stalled ("plateau").

    A run that stopped on a runaway (NaN/inf, or 4x its start for RUNAWAY_STEPS steps) is diverging, noise or not. noisy: the objective samples
    noise, so single steps jump about: compare means over NOISE_WINDOW steps; "flat" when every such mean stays within
    twice the last window's spread of the first one, "diverging" when the last mean rose that far above the lowest."""
    start = abs(_began(losses, noisy))
    if _ran_away(losses, noisy):
        return "diverging"
    if noisy:
        means = _window_means(losses)
        tail = losses[-NOISE_WINDOW:]
        spread = (sum((v - means[-1]) ** 2 for v in tail) / len(tail)) ** 0.5
        band = max(FLAT * start, 2 * spread)
        return ("flat" if all(abs(m - means[0]) <= band for m in means) else
                "diverging" if means[-1] > min(means) + band else "plateau")
    if abs(losses[-1]) > (1 + FLAT) * start:
        return "diverging"
    if max(abs(v - losses[0]) for v in losses) <= FLAT * start:
        return "flat"
    return "plateau"


def _window_means(losses):
    """The mean of every NOISE_WINDOW consecutive losses (one mean when the run is shorter)."""
    width = min(NOISE_WINDOW, len(losses))
    return [sum(losses[i:i + width]) / width for i in range(len(losses) - width + 1)]


def _settled_low(losses, stop):
    """A sampling objective's run ended with its recent mean under FLOOR x its start (and did not run away)."""
    tail = losses[-NOISE_WINDOW:]
    return stop != "runaway" and 0 <= sum(tail) / len(tail) < FLOOR * abs(_began(losses, noisy=True))


def _every_10(losses):
    """The loss at steps 0, 10, 20, ... and the last step, rounded for the report."""
    picked = losses[::10] + ([losses[-1]] if (len(losses) - 1) % 10 else [])
    return [round(v, 4) for v in picked]


def _trace(losses, noisy=False):
    """From the first loss to the last; for an objective that samples noise, from the first window's mean to the last's
    (one draw can sit above the start in a run whose mean fell)."""
    if noisy and len(losses) > NOISE_WINDOW:
        means = _window_means(losses)
        return f"{means[0]:.4g} -> {means[-1]:.4g} in {len(losses) - 1} steps, means over {NOISE_WINDOW} steps"
    return f"{losses[0]:.4g} -> {losses[-1]:.4g} in {len(losses) - 1} steps"


def _settled(losses, where, details, not_optimised, missing):
    return CheckResult("overfit_one_batch", "warn" if missing else "pass",
                       f"the loss fell and settled{where} ({_trace(losses, noisy=True)}): the objective samples noise, so its loss "
                       f"has a floor above zero{not_optimised}", details)



def _at_floor(losses, k, floor, details, not_optimised, missing, where=""):
    return CheckResult("overfit_one_batch", "warn" if missing else "pass",
                       f"memorised {k} rows down to the loss's floor{where}: loss {_trace(losses)}, where free outputs reach "
                       f"{floor:.4g} on these targets (soft targets, label smoothing or a KL term keep it above zero)"
                       f"{not_optimised}", details)


def _hidden_by_noise(losses, how, details, steps):
    """Noisy, missed the target, and the control (its own first predictions at RETRY_LR x the lr) missed too, while the
    steps moved the weights: no harm is shown, as the objective's noise can hide any fall a short sprint makes."""
    details.update(failure="inconclusive", next="rerun with more steps, or with the noise fixed (a seeded sampler): "
                   f"check_overfit_one_batch(case, steps={4 * steps})")
    return CheckResult("overfit_one_batch", "skip", f"inconclusive: {how} within the noise its objective samples "
                       f"({_trace(losses, True)}), and at {RETRY_LR:g}x lr it did not memorise its own first predictions "
                       f"either ({_trace(details['control_losses'], True)} every 10 steps), while the steps moved the "
                       "weights: the noise hides any fall these steps could show", details)


def _own_targets(case, inputs, targets, output):
    """The batch relabelled with the model's own first predictions (argmax), which it can surely represent; None
    unless the targets are class indices that the output scores along its last dim (in order, also when flattened). Masked positions stay masked;
    targets the model is also given (model(x, y), task["target_inputs"]) are replaced there too."""
    scores = first_tensor(output)
    if not (torch.is_tensor(targets) and not targets.is_floating_point() and torch.is_tensor(scores) and scores.dim() >= 2
            and scores.shape[:-1].numel() == targets.numel()):  # (B, T, V), or flattened inside the model to (B*T, V)
        return None
    kept = targets != case["task"].get("ignore_index", -100)
    own = torch.where(kept, scores.detach().argmax(-1).reshape(targets.shape), targets)
    for name, tensor in named_tensors(inputs):  # the targets the model is given: rows taken apart, so found by their values
        if tensor.shape == targets.shape and tensor.dtype == targets.dtype and torch.equal(tensor, targets):
            inputs = replace_tensor(inputs, tensor, own)
    return inputs, own


def _memorises_own(case, model, initial, relabelled, steps, details, noisy):
    """The control: from the weights as found, can the model memorise its own first predictions (targets it can surely
    represent) at RETRY_LR x the lr (noisy: the objective samples noise)? Its losses when it did (details: "failure" targets_out_of_reach and what to check
    next), else None; details["control_losses"] keeps the run either way."""
    with torch.no_grad():
        for tensor, value in initial:
            tensor.copy_(value)
    control, _, _ = _train(case, model, *relabelled, RETRY_LR, RETRY_STEPS * steps, details["target"], noisy)
    details["control_losses"] = _every_10(control)
    if not _reached(control, details["target"], noisy):
        return None
    details.update(failure="targets_out_of_reach", next="check that the targets follow from what the model sees (the "
                   "same context with different targets, a model that sees one token) before looking for a bug in the code")
    return control


def _loss_floor(case, output, targets):
    """The lowest loss the outputs alone reach on these targets, or None when it cannot be found.

    Every floating tensor of the model's output becomes a free tensor, trained alone on the case's loss by Adam (lr
    FREE_LR decaying to 0 over FREE_STEPS). What they reach is what any model could: 0 for hard targets, more for soft
    targets under BCE, label smoothing, a KL term. When the loss refuses values the free tensors step to (BCE outside
    [0, 1]), they run again kept within the range of the output and the targets. None when the loss raised anyway,
    turned NaN, or the free outputs did not settle (their second half of steps gave over SETTLED of their whole fall):
    then no floor is claimed."""
    floating = [tensor for _, tensor in named_tensors(output) if tensor.is_floating_point()]
    if not floating or sum(t.numel() for t in floating) > FREE_NUMEL:
        return None
    for bounded in (False, True):
        try:
            losses = _free_descent(case, output, floating, targets, bounded)
            break
        except Exception:  # out of the loss's domain (then bounded), or a loss that needs more than the outputs
            losses = []
    if len(losses) <= FREE_STEPS:
        return None
    fall, late = losses[0] - losses[-1], losses[FREE_STEPS // 2] - losses[-1]
    return losses[-1] if fall > 0 and late <= SETTLED * fall else None


def _free_descent(case, output, floating, targets, bounded):
    """The losses of FREE_STEPS Adam steps on free copies of the output's floating tensors (see _loss_floor); bounded:
    a free tensor of the targets' shape is clamped into the range of the output and the targets after each step."""
    free, bounds = [], []
    for tensor in floating:
        free.append(tensor.detach().clone().requires_grad_())
        output = replace_tensor(output, tensor, free[-1])
        matches = bounded and targets.is_floating_point() and targets.shape == tensor.shape
        bounds.append((float(torch.minimum(tensor.detach().min(), targets.min())),
                       float(torch.maximum(tensor.detach().max(), targets.max()))) if matches else None)
    optimizer, losses = torch.optim.Adam(free, lr=FREE_LR), []
    with torch.enable_grad():
        for step in range(FREE_STEPS + 1):
            for group in optimizer.param_groups:
                group["lr"] = FREE_LR * (1 - step / FREE_STEPS)
            optimizer.zero_grad(set_to_none=True)
            loss = case["loss_fn"](output, targets)
            losses.append(float(loss.detach()))
            if not _finite(losses[-1:]) or step == FREE_STEPS:
                return losses
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for tensor, bound in zip(free, bounds):
                    if bound:
                        tensor.clamp_(*bound)


def _blocked_rows(case, model, inputs, targets, k, bdim, target):
    """The rows still above the target whose own gradient barely reaches the parameters (under BLOCKED x the median
    row's): a clamp or dead units stop them (a ReLU on the logits), where rows that conflict keep their gradients."""
    params = [p for p in model.parameters() if p.requires_grad]
    losses, norms = [], []
    for row in range(k):
        row_inputs = batch_rows(inputs, k, row, 1, bdim)
        row_targets = batch_rows(targets, k, row, 1, bdim, flattened=True)
        model.zero_grad(set_to_none=True)
        loss = case["loss_fn"](forward(model, row_inputs), row_targets)
        loss.backward()
        grads = [p.grad.norm() for p in params if p.grad is not None]
        losses.append(float(loss.detach()))
        norms.append(float(torch.stack(grads).norm()) if grads else 0.0)  # one host sync per row, not one per parameter
    model.zero_grad(set_to_none=True)
    median = sorted(norms)[len(norms) // 2]
    return [row for row, (loss, norm) in enumerate(zip(losses, norms)) if abs(loss) > target and norm < BLOCKED * median]


def check_overfit_one_batch(case, rows=ROWS, steps=STEPS):
    """Train on the first `rows` rows of the case's batch until the loss is near zero; classify a failure."""
    case = validate_case(case)
    with preserved(case["model"]):
        model = case["model"]
        inputs, targets = case["batch"]
        bdim = case["task"].get("batch_dim", 0)
        n = count_rows(inputs, bdim)
        if n == 0:
            return CheckResult("overfit_one_batch", "skip", "cannot find a batch dimension in the inputs")
        cut = _subgraph(case, model, inputs, targets, n, rows) if case["task"].get("graph") and bdim == 0 else None
        if cut is not None:  # a graph's nodes keep their edges: the rows memorised and their neighbourhood
            inputs, targets, subgraph = cut
            k = subgraph["read"]
        else:  # a graph that cannot be cut is trained whole
            subgraph = None
            k = n if case["task"].get("graph") else min(rows, n)
            inputs, targets = batch_rows(inputs, n, 0, k, bdim), batch_rows(targets, n, 0, k, bdim, flattened=True)
        initial = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]  # for the control run
        noise_off = False
        for quiet in (False, True):  # train mode with the Dropout modules off; then, if that still samples, every
            _sprint_mode(model, quiet)  # module but batch statistics in eval mode (F.dropout(training=self.training))
            torch.manual_seed(0)
            output = forward(model, inputs)
            start = case["loss_fn"](output, targets)
            start_value = float(start.detach())
            torch.manual_seed(1)  # a second draw: an objective that samples noise (a VAE, a diffusion loss) gives another loss
            with torch.no_grad():
                again = float(case["loss_fn"](forward(model, inputs), targets))
            samples = abs(again - start_value) > SAME_LOSS * abs(start_value)
            if not samples:
                noise_off = quiet
                break
        if samples:  # the noise is not the modules' train mode (a VAE samples in eval mode too): back to the first mode
            _sprint_mode(model, False)
            torch.manual_seed(0)
            output = forward(model, inputs)
            start = case["loss_fn"](output, targets)
            start_value = float(start.detach())
            torch.manual_seed(1)
            with torch.no_grad():
                again = float(case["loss_fn"](forward(model, inputs), targets))
        reference = (abs(start_value) + abs(again)) / 2 if samples else abs(start_value)  # noisy: two draws, not one
        classes = case["task"].get("num_classes") or case["task"].get("vocab_size")
        if classes and classes > 1:  # a start far above chance (a bad init) must not loosen the target
            reference = min(reference, float(torch.tensor(float(classes)).log()))
        details = {"rows": k, "subgraph": subgraph, "steps_budget": steps, "start_loss": start_value, "target": TARGET * reference,
                   "outputs_are_probabilities": _looks_like_probabilities(first_tensor(output)), "samples_noise": samples,
                   "train_noise_off": noise_off,
                   "probabilities_into_nll": _probabilities_into_nll(first_tensor(output), targets, start_value)}
        if not torch.isfinite(start):
            details.update(failure="nonfinite_at_start", next="run nan_watch (where it first appears) and labels (all ignored?)")
            return CheckResult("overfit_one_batch", "fail", f"the loss is {start_value} before any step: run nan_watch and labels",
                               details)
        if not start.requires_grad:
            details.update(failure="flat", next="run gradient_flow: look for .detach(), torch.no_grad() or requires_grad=False")
            return CheckResult("overfit_one_batch", "fail", "flat: the loss does not depend on any trainable parameter "
                               "(a detached graph, or every parameter frozen)", details)
        with preserved(model):
            losses, optimizer, stop = _train(case, model, inputs, targets, 1.0, steps, details["target"], samples, early=True)
            moved = any(not torch.equal(tensor, value) for tensor, value in initial if tensor.requires_grad)
        trainable = [name for name, p in model.named_parameters() if p.requires_grad]
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        missing = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in held]
        not_optimised = (f"; but {len(missing)} trainable parameter(s) are not in the optimizer: {', '.join(missing[:3])}"
                         if missing else "")
        if stop == "out_of_reach":  # falling too slowly to make it: the retry at RETRY_LR x first (the same verdict, sooner)
            with preserved(model):
                retry, _, _ = _train(case, model, inputs, targets, RETRY_LR, RETRY_STEPS * steps, details["target"])
            if _reached(retry, details["target"]):
                details.update(losses=_every_10(losses), steps=len(losses) - 1, not_in_optimizer=missing,
                               on_course_to_miss=True, retry_lr_scale=RETRY_LR, retry_losses=_every_10(retry))
                return CheckResult("overfit_one_batch", "warn" if missing else "pass", f"memorised {k} rows at {RETRY_LR:g}x "
                                   f"your learning rate ({_trace(retry)}); at your lr the loss went {_trace(losses)}, on "
                                   f"course to miss the target in its {steps} steps{not_optimised}", details)
            with preserved(model):  # the verdict below reads the whole sprint at your lr
                losses, optimizer, stop = _train(case, model, inputs, targets, 1.0, steps, details["target"], samples)
        details.update(losses=_every_10(losses), steps=len(losses) - 1, not_in_optimizer=missing)
        if missing:
            details["next"] = "build the optimizer from model.parameters() (after any layer is replaced)"
        if _reached(losses, details["target"], samples):
            return CheckResult("overfit_one_batch", "warn" if missing else "pass",
                               f"memorised {k} rows: loss {_trace(losses)}{not_optimised}", details)
        floor = _loss_floor(case, output, targets) if torch.is_tensor(targets) else None
        if floor is not None and floor > details["target"]:  # the targets keep the loss above zero: near its floor is memorised
            details.update(loss_floor=floor, target=floor + TARGET * max(reference - floor, 0.0))
            if _reached(losses, details["target"], samples):
                return _at_floor(losses, k, floor, details, not_optimised, missing)
        if samples and _settled_low(losses, stop):
            return _settled(losses, "", details, not_optimised, missing)
        failure = _classify(losses, samples)
        if samples and not moved and _finite(losses):
            failure = "flat"  # through the noise the losses show little; the weights show that no step changed one
        if failure == "plateau":  # fell but missed the target: your lr may just be slow for a short sprint
            retry, _, retry_stop = _train(case, model, inputs, targets, RETRY_LR, RETRY_STEPS * steps, details["target"],
                                           samples)
            details.update(retry_lr_scale=RETRY_LR, retry_losses=_every_10(retry))
            if _reached(retry, details["target"], samples) and "loss_floor" in details:
                return _at_floor(retry, k, details["loss_floor"], details, not_optimised, missing, f" at {RETRY_LR:g}x your lr")
            if _reached(retry, details["target"], samples):
                return CheckResult("overfit_one_batch", "warn" if missing else "pass", f"memorised {k} rows at {RETRY_LR:g}x "
                                   f"your learning rate ({_trace(retry)}); at your lr the loss went {_trace(losses, samples)}{not_optimised}",
                                   details)
            if samples and _settled_low(retry, retry_stop):
                return _settled(retry, f" at {RETRY_LR:g}x your learning rate", details, not_optimised, missing)
            retry_failure = _classify(retry, samples)
            if retry_stop == "budget" and retry_failure == "plateau":  # out of steps, not stalled
                details.update(failure="inconclusive", next=f"rerun alone with more steps: check_overfit_one_batch("
                               f"case, steps={4 * steps})")
                return CheckResult("overfit_one_batch", "skip", f"inconclusive: still falling when the {RETRY_STEPS * steps} "
                                   f"steps at {RETRY_LR:g}x ran out ({_trace(losses, samples)} at your lr, {_trace(retry, samples)} at "
                                   f"{RETRY_LR:g}x){not_optimised}", details)
            if retry_failure == "diverging" or _jumped(retry, samples):  # 10x is no reference: unstable
                details.update(failure="inconclusive", next=f"rerun with more steps: check_overfit_one_batch(case, "
                               f"steps={4 * steps})")
                missed = "stalled" if stop == "stalled" else f"ran out of its {steps} steps"
                details["retry_unstable"] = "diverged" if retry_failure == "diverging" else "jumped"
                unstable = {"diverged": "diverged", "jumped": f"jumped to {RUNAWAY:g}x its start"}[details["retry_unstable"]]
                return CheckResult("overfit_one_batch", "skip", f"inconclusive: the loss fell at your lr ({_trace(losses, samples)}) "
                                   f"but {missed} above the target, and {unstable} at {RETRY_LR:g}x: this sprint cannot tell "
                                   f"a slow lr from a bug{not_optimised}", details)
        if failure == "diverging" and _now(losses, samples) < 0 and details["probabilities_into_nll"]:
            failure = "probabilities_into_nll"  # not a runaway: -mean(p[target]) is bounded by -1
        details["failure"] = failure
        own = None if missing or not samples or failure != "flat" or details["outputs_are_probabilities"] \
            else _own_targets(case, inputs, targets, output)
        control = _memorises_own(case, model, initial, own, steps, details, samples) if own is not None else None
        if control:
            return CheckResult("overfit_one_batch", "warn", f"flat within the noise its objective samples ({_trace(losses, True)}), "
                               f"yet it memorises targets it can represent at {RETRY_LR:g}x lr (its own first predictions: "
                               f"{_trace(control)}): loss, gradients and optimizer work; the noise (dropout written "
                               "as F.dropout, a sampled objective) hides whether these targets follow from what the model sees",
                               details)
        if own is not None and moved:  # noisy and flat, the control flat too, yet the steps moved the weights
            return _hidden_by_noise(losses, "flat", details, steps)
        if failure == "flat":
            hint = ("the optimizer holds none of the model's parameters" if missing and len(missing) == len(trainable)
                    else f"{len(missing)} of {len(trainable)} trainable parameters are not in the optimizer" if missing
                    else "learning rate 0, or far too small for the scale of the loss (unstandardised targets?)" +
                    (", or, as the objective samples noise, a target the inputs cannot predict (a fresh draw where "
                     "the noise that was added was meant?)" if samples else ""))
            summary = f"flat: the loss did not move ({_trace(losses, samples)}): {hint}"
            details["next"] = "print optimizer.param_groups: check the lr and that the optimizer was built from this model's parameters"
        elif failure == "probabilities_into_nll":
            summary = (f"the loss heads to -1, not 0 ({_trace(losses, samples)}): the outputs are probabilities (a softmax) "
                       f"fed to NLLLoss, which expects log-probabilities, so the loss is -mean(p[target])")
            details["next"] = "use log_softmax before NLLLoss, or return the logits to CrossEntropyLoss"
        elif failure == "diverging" and _now(losses, samples) < 0:
            summary = f"diverging: the loss heads to -inf ({_trace(losses)}): is its sign flipped (maximising)?"
            details["next"] = "check the sign of the loss (and of any term added to it)"
        elif failure == "diverging":
            blowup = "grows" if _finite(losses[-1:]) else "turns NaN/inf"
            summary = (f"diverging: the loss {blowup} ({_trace(losses, samples and stop != 'runaway')}): learning rate too high, "
                       "or a numerical bug")
            details["next"] = "run nan_watch (where the first NaN/inf appears), then try a 10x lower learning rate"
        else:
            relabelled = None if details["outputs_are_probabilities"] else _own_targets(case, inputs, targets, output)
            blocked = _blocked_rows(case, model, inputs, targets, k, bdim, details["target"]) if relabelled else []
            details["blocked_rows"] = blocked
            control = _memorises_own(case, model, initial, relabelled, steps, details, samples) if relabelled is not None and not blocked else None
            if control:
                return CheckResult("overfit_one_batch", "warn", f"stalled at {_now(retry, samples):.4g} (from {_began(losses, samples):.4g}, "
                                   f"target {details['target']:.3g}) even at {RETRY_LR:g}x lr, yet it memorises targets it "
                                   f"can represent (its own first predictions: {_trace(control)}): loss, gradients "
                                   "and optimizer work, and these targets do not follow from what the model sees, by design (the "
                                   "same context with different targets, a bigram's one-token view, label noise) or because "
                                   f"something hides the inputs (a bottleneck, dead units: gradient_flow){not_optimised}",
                                   details)
            if samples and moved and relabelled is not None and not blocked and not details["outputs_are_probabilities"]:
                return _hidden_by_noise(losses, "stalled above the target", details, steps)
            capacity = sum(p.numel() for p in model.parameters() if p.requires_grad)
            values = targets.numel() if torch.is_tensor(targets) else 0
            if capacity < values and not blocked and not details["outputs_are_probabilities"]:
                fewer = max(1, capacity * k // values)  # rows whose target values the parameters can match one for one
                details.update(failure="inconclusive", trainable_parameters=capacity, target_values=values,
                               next=f"rerun on fewer rows: check_overfit_one_batch(case, rows={fewer})")
                return CheckResult("overfit_one_batch", "skip", f"inconclusive: stalled at {_now(retry, samples):.4g} (from "
                                   f"{_began(losses, samples):.4g}, target {details['target']:.3g}) even at {RETRY_LR:g}x lr, "
                                   f"but the model has {capacity} trainable parameters for the {values} target values of "
                                   f"{k} rows: too few to memorise them, whatever its code{not_optimised}", details)
            cause = ("the outputs are probabilities (rows sum to 1) fed to a loss that expects logits: double softmax?"
                     if details["outputs_are_probabilities"] else
                     f"rows {', '.join(map(str, blocked[:5]))} stay above the target with almost no gradient reaching the "
                     "parameters: a clamp on the outputs (a ReLU on the logits) or dead units stop them" if blocked else
                     "a capacity bug (dead units, a bottleneck) or label smoothing: it cannot memorise even its own first "
                     "predictions" if relabelled is not None else
                     "a capacity bug (dead units, a bottleneck), label smoothing, or targets the inputs cannot explain")
            summary = (f"plateau: stalled at {_now(retry, samples):.4g} (from {_began(losses, samples):.4g}, target {details['target']:.3g}) "
                       f"even at {RETRY_LR:g}x lr: {cause}")
            details["next"] = ("return logits, not softmax outputs, to CrossEntropyLoss" if details["outputs_are_probabilities"] else
                               "run gradient_flow (dead or blocked layers); remove bottlenecks and label smoothing; check the labels")
        return CheckResult("overfit_one_batch", "fail", summary, details)


class _DemoNet(torch.nn.Module):
    def __init__(self, broken):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 5))
        self.broken = broken

    def forward(self, x):
        logits = self.body(x)
        if self.broken:
            return logits.softmax(-1)  # BUG: probabilities fed to CrossEntropyLoss, which applies log-softmax again
        return logits


def make_demo_case(broken):
    """A 5-class MLP on 32 random rows; the broken twin returns softmax probabilities to CrossEntropyLoss."""
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG stream
        torch.manual_seed(0)
        inputs = torch.randn(32, 16)
        targets = torch.randint(0, 5, (32,))
        model = _DemoNet(broken)
    return {"model": model, "batch": (inputs, targets), "loss_fn": torch.nn.CrossEntropyLoss(),
            "task": {"kind": "classification", "num_classes": 5}}


if __name__ == "__main__":
    sys.exit(cli_main(check_overfit_one_batch, make_demo_case, __doc__))
