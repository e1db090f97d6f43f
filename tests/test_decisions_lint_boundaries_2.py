"""Decisions of spikelog's epoch counter and post-mortem and of lint's clip-before-unscale, each pinned by an input
at its boundary: found by mutation testing."""
from types import SimpleNamespace

from conftest import findings
from spikelog import report as postmortem
from spikelog.read.columns import epoch_steps


def composed_steps(batches):
    given = [([0] * len(batch), [{"iter": i, "epoch": e} for e, i in batch]) for batch in batches]
    return [r["iter"] for _, records in epoch_steps(given, "iter", "epoch") for r in records]


# --- epoch_steps: a first batch of a single record has no interval to measure (it stays 1) -------------------

def test_a_first_batch_of_one_record_keeps_the_default_interval_of_one():
    # one step read, no step before it: the interval stays 1 until a second step shows it
    assert composed_steps([[(0, 5)], [(1, 0)]]) == [5, 6]


# --- the post-mortem's fast-spike table: no "x baseline" ratio over a baseline of exactly 0 -------------------

def test_a_fast_spike_over_a_zero_baseline_has_no_ratio_in_the_post_mortem_table():
    spike = SimpleNamespace(type="fast_recovery", step=40, start=40, end=42, baseline=0.0, peak=2.0,
                            recovery_steps=2, grad_norm_lead=None)
    [row] = [line for line in postmortem._fast_section([spike]) if line.startswith("| 40 |")]
    assert [cell.strip() for cell in row.strip("|").split("|")][3] == "-"


# --- clip-before-unscale: a clip call that runs this file's own function, which unscales first ------------------

WITH_OWN_CLIP = """
    import torch
    from torch.nn.utils import clip_grad_norm_
    scaler = torch.amp.GradScaler()

    def clip_grad_norm_(parameters, max_norm):
        scaler.unscale_(optimizer)
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(model(x).sum()).backward()
        clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """


def test_a_clip_through_the_files_own_function_that_unscales_first_is_not_reported():
    # the name clip_grad_norm_ is torch's import, then this file's def, which unscales: its unscale counts at the
    # call itself, the very position of the clip, and comes before the clipping inside it
    assert findings(WITH_OWN_CLIP) == []
    torch_clip = WITH_OWN_CLIP.replace("        scaler.unscale_(optimizer)\n", "").replace("def clip_grad_norm_", "def other")
    assert findings(torch_clip) == [("clip-before-unscale", 12)]
