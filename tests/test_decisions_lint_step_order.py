"""lint's step-order rules (missing-zero-grad, zero-grad-before-step, scheduler-before-optimizer, clip-grad-order,
clip-before-unscale) pinned at their decisions: found by mutation testing."""
import textwrap

import pytest

from conftest import findings
from trainlint.registry import RULES


def messages(code):
    """lint's findings on a snippet as (rule, line, message) triples."""
    import lint
    return [(f.rule, f.line, f.message) for f in lint.lint_source(textwrap.dedent(code), "<string>")]


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


@pytest.mark.parametrize("zero", ["model.zero_grad()", "zero_grad_all()"])
def test_a_zero_grad_that_names_no_optimizer_between_backward_and_step_is_reported(zero):
    # model is no optimizer (its zero_grad() clears every gradient, whichever optimizer steps next), and a bare call
    # has no receiver: neither has a target to match the step against
    assert findings(f"""
        import torch.nn.functional as F

        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            {zero}
            optimizer.step()
        """) == [("zero-grad-before-step", 6)]



@pytest.mark.parametrize("first, second, found", [
    ("optimizer.zero_grad()", "loss.backward()", []),  # zeroes, then computes the gradients the step uses
    ("loss.backward()", "optimizer.zero_grad()", [("zero-grad-before-step", 10)]),  # clears them before the step
])
def test_a_helper_named_for_zero_grad_is_judged_by_its_own_order_of_zero_grad_and_backward(first, second, found):
    # the call is a zero_grad() by its name, and the helper's backward() is an event at the same call: which came
    # last inside the helper decides whether the step after the call sees gradients
    assert findings(f"""
        import torch.nn.functional as F

        def zero_grad_and_backward(loss):
            {first}
            {second}

        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            zero_grad_and_backward(loss)
            optimizer.step()
        """) == found


def test_a_helper_named_for_zero_grad_whose_last_zero_grad_and_backward_share_a_nested_call_is_no_helper_that_zeroes_first():
    # the nested helper's name makes its call a zero_grad(), and its backward() an event at the same call: nothing there
    # says the backward() came after the zero (here it came before), so the outer helper is not one that zeroes first
    assert findings("""
        import torch.nn.functional as F

        def backward_then_zero_grad(loss):
            loss.backward()
            optimizer.zero_grad()

        def zero_grad_step(loss):
            backward_then_zero_grad(loss)

        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            zero_grad_step(loss)
            optimizer.step()
        """) == [("zero-grad-before-step", 13)]

# --- zero-grad-before-step: a zero_grad() at the end of the loop body clears what the next step uses ------------

def test_zero_grad_at_the_end_of_the_loop_before_the_step_of_the_next_pass_is_reported():
    # nothing follows the zero_grad() in this pass: round the loop, the step comes before the next backward()
    assert findings("""
        import torch.nn.functional as F

        for x, y in loader:
            optimizer.step()
            F.cross_entropy(model(x), y).backward()
            optimizer.zero_grad()
        """) == [("zero-grad-before-step", 7)]


def test_zero_grad_then_continue_before_the_step_of_the_next_pass_is_reported():
    # continue goes round the loop (unlike break): the next pass steps before its backward()
    assert findings("""
        import torch.nn.functional as F

        for x, y in loader:
            optimizer.step()
            F.cross_entropy(model(x), y).backward()
            if skip:
                optimizer.zero_grad()
                continue
            log(x)
        """) == [("zero-grad-before-step", 8)]


def test_zero_grad_of_one_optimizer_before_the_step_of_another_is_not_reported():
    # opt_g.zero_grad() clears opt_g's gradients only: opt_d.step() after it is not one of its steps
    assert findings("""
        import torch

        opt_g = torch.optim.Adam(gen.parameters())
        opt_d = torch.optim.Adam(disc.parameters())
        for x, y in loader:
            opt_d.zero_grad()
            d_loss(x).backward()
            opt_g.zero_grad()
            opt_d.step()
            g_loss(x).backward()
            opt_g.step()
        """) == []


# --- scheduler-before-optimizer: an if that only asks whether the scheduler exists guards nothing -----------------

def test_scheduler_step_under_a_two_part_existence_check_is_reported():
    # `scheduler and scheduler is not None` checks nothing but that the scheduler exists
    assert findings("""
        import torch.nn.functional as F

        for x, y in loader:
            if scheduler and scheduler is not None:
                scheduler.step()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        """) == [("scheduler-before-optimizer", 6)]


def test_scheduler_before_optimizer_names_the_optimizer_stepped():
    [(rule, line, message)] = messages("""
        import torch.nn.functional as F

        for x, y in loader:
            scheduler.step()
            opt_main.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt_main.step()
        """)
    assert (rule, line) == ("scheduler-before-optimizer", 5)
    assert "opt_main.step()" in message


# --- clip-grad-order: which iteration's step the clip follows ----------------------------------------------------

def test_clip_first_in_a_loop_whose_step_comes_before_backward_is_not_reported():
    # round the loop the clip follows the previous pass's backward() and precedes this pass's step()
    assert findings("""
        import torch.nn.functional as F
        from torch.nn.utils import clip_grad_norm_

        for x, y in loader:
            clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
        """) == []


def test_clip_after_step_and_backward_is_reported_as_clipping_after_the_step():
    # a backward() comes before the clip, but the step after it has already used the gradients
    [(rule, line, message)] = messages("""
        import torch.nn.functional as F
        from torch.nn.utils import clip_grad_norm_

        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            clip_grad_norm_(model.parameters(), 1.0)
        """)
    assert (rule, line) == ("clip-grad-order", 9)
    assert "after optimizer.step() (line 8)" in message


def test_clip_after_a_step_with_no_backward_before_it_is_reported_as_clipping_before_backward():
    # a step, not a backward(), comes before the clip in this pass: the clip acts before this pass's gradients exist
    [(rule, line, message)] = messages("""
        import torch.nn.functional as F
        from torch.nn.utils import clip_grad_norm_

        for x, y in loader:
            optimizer.step()
            clip_grad_norm_(model.parameters(), 1.0)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
        """)
    assert (rule, line) == ("clip-grad-order", 7)
    assert message.startswith("gradients are clipped before backward()")


def test_a_clip_function_of_another_library_is_no_clip_before_unscale():
    # the rule's bad example (flagged: test_lint pins it) with its clip imported from a library that unscales itself
    bad = RULES["clip-before-unscale"].bad
    assert "torch.nn.utils.clip_grad_norm_(" in bad
    elsewhere = "from mylib.amp import clip_grad_norm_\n" + bad.replace("torch.nn.utils.clip_grad_norm_(", "clip_grad_norm_(")
    assert "clip-before-unscale" not in {rule for rule, _ in findings(elsewhere)}
