"""Decisions of resume_check, spikes and lint pinned by inputs at their boundaries (a NaN against a number, a tensor
against a plain value, a grad-norm spike two logged rows back, a detached term behind a name): found by mutation testing."""
import math
import textwrap

import pytest
import torch

import lint
import resume_check as rc
import spikes


# --- resume_check: which saved and restored leaves are the same ----------------------------------------------------

@pytest.mark.parametrize("saved, restored", [(1.0, math.nan), (math.nan, 1.0)])
def test_a_nan_float_entry_differs_from_a_number_on_either_side(saved, restored):
    assert rc.state_difference({("loss",): saved}, {("loss",): restored})[0] == [("loss",)]
    assert rc.state_difference({("loss",): math.nan}, {("loss",): math.nan})[0] == []  # NaN on both sides is kept


@pytest.mark.parametrize("saved, restored", [
    (torch.tensor(1.0), 1.0),  # one side a tensor, the other the plain number it holds: == would say True
    (3, torch.tensor([3, 3])),  # ...or a tensor whose == gives no plain bool: it would not be blamed
])
def test_a_tensor_restored_as_a_plain_value_or_back_differs(saved, restored):
    assert rc.state_difference({("step",): saved}, {("step",): restored})[0] == [("step",)]


# --- spikes: a grad-norm spike leads a loss spike from at most LEAD_STEPS steps or one logged row back -------------

def grad_lead(tmp_path, rows_back):
    """The loss spike's grad_norm_lead on a log written every 20 steps (so one row back is already past LEAD_STEPS)."""
    rows = ["step,loss,grad_norm"]
    for r in range(300):
        loss = 3.0 + 0.01 * math.sin(r * 1.7) + (3.0 if r == 250 else 0.0)
        grad = 0.3 + 0.01 * math.cos(r * 1.3) + (1.7 if r == 250 - rows_back else 0.0)
        rows.append(f"{20 * r},{loss:.5f},{grad:.5f}")
    path = tmp_path / "sparse.csv"
    path.write_text("\n".join(rows) + "\n")
    return [(s.step, s.grad_norm_lead) for s in spikes.analyze(path).spikes]


def test_a_grad_norm_spike_one_sparse_row_back_leads_and_two_rows_back_does_not(tmp_path):
    assert grad_lead(tmp_path, 1) == [(5000, 20)]
    assert grad_lead(tmp_path, 2) == [(5000, None)]  # 40 steps and two rows back: an unrelated blip


# --- lint detached-loss-term: a detached term is a loss when its name is bound to a loss call ----------------------

def test_a_detached_term_named_without_loss_but_bound_to_a_loss_call_is_reported():
    code = """
        import torch.nn.functional as F

        def step(model, x, y):
            logits, aux_logits = model(x)
            main_loss = F.cross_entropy(logits, y)
            aux = F.cross_entropy(aux_logits, y)
            total = main_loss + 0.4 * aux.item()
            total.backward()
        """
    assert [(f.rule, f.line) for f in lint.lint_source(textwrap.dedent(code), "<string>")] == [("detached-loss-term", 8)]
