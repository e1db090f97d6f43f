"""lint's step-order rules (missing-zero-grad, zero-grad-before-step) pinned at their decisions: found by mutation
testing."""
from conftest import findings


# --- missing-zero-grad: an optimizer stepped is covered only by a zero_grad() of that same optimizer --------------

def test_missing_zero_grad_names_the_optimizer_stepped_when_only_another_one_is_zeroed():
    # both optimizers are built by calls, so their origins differ: zeroing opt_g does not cover opt_d
    assert findings("""
        import torch
        import torch.nn.functional as F

        opt_g = torch.optim.Adam(gen.parameters())
        opt_d = torch.optim.Adam(disc.parameters())
        for x, y in loader:
            opt_g.zero_grad()
            F.cross_entropy(disc(gen(x)), y).backward()
            opt_g.step()
            opt_d.step()
        """) == [("missing-zero-grad", 11)]


# --- zero-grad-before-step: where the steps after a zero_grad() are looked for ------------------------------------

def test_zero_grad_between_backward_and_step_at_module_level_is_reported():
    # no loop and no function around it: the steps are those of the whole module
    assert findings("""
        import torch.nn.functional as F

        F.cross_entropy(model(x), y).backward()
        optimizer.zero_grad()
        optimizer.step()
        """) == [("zero-grad-before-step", 5)]


def test_model_zero_grad_between_backward_and_step_is_reported():
    # model is no optimizer: its zero_grad() clears every gradient, whichever optimizer steps next
    assert findings("""
        import torch.nn.functional as F

        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
            optimizer.step()
        """) == [("zero-grad-before-step", 6)]


def test_a_bare_zero_grad_call_between_backward_and_step_is_reported():
    # zero_grad_all() has no receiver, so no target to match the step against
    assert findings("""
        import torch.nn.functional as F

        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            zero_grad_all()
            optimizer.step()
        """) == [("zero-grad-before-step", 6)]
