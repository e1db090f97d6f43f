"""lint's causal-mask-offset rule (data.py): triu's allowed diagonal, which message tril and triu get, a mask
written straight into a zero fill, each decision pinned at its boundary: found by mutation testing."""
import textwrap

import lint
from conftest import findings


def mask_findings(code):
    return [f for f in lint.lint_source(textwrap.dedent(code), "<string>") if f.rule == "causal-mask-offset"]


def test_triu_with_diagonal_one_as_the_blocked_part_is_not_reported():
    # diagonal=1 is the first offset that leaves the diagonal unblocked: the correct causal mask
    assert findings("""
        import torch
        blocked_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(blocked_mask, float('-inf'))
        """) == []


def test_triu_with_diagonal_zero_as_the_blocked_part_is_reported():
    assert findings("""
        import torch
        blocked_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=0)
        scores = scores.masked_fill(blocked_mask, float('-inf'))
        """) == [("causal-mask-offset", 3)]


def test_tril_and_triu_each_get_the_message_of_their_own_kind():
    [tril] = mask_findings("""
        import torch
        causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        """)
    [triu] = mask_findings("""
        import torch
        causal_mask = torch.triu(torch.ones(T, T, dtype=torch.bool))
        """)
    assert tril.message.startswith("tril(..., diagonal=1)")
    assert triu.message.startswith("triu(..., diagonal=0)")


def test_a_mask_built_inside_a_zero_fill_selects_entries_to_drop_and_is_not_reported():
    # the triu call is masked_fill's own first argument (not a name): it is still the fill's mask
    assert findings("""
        import torch
        gates = gates.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool)), 0.)
        """) == []
