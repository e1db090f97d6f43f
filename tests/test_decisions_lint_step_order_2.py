"""lint's step-order rules (zero-grad-before-step, scheduler-before-optimizer, clip-grad-order, clip-before-unscale) pinned at their
decisions: found by mutation testing."""
import textwrap

from conftest import findings


def messages(code):
    """lint's findings on a snippet as (rule, line, message) triples."""
    import lint
    return [(f.rule, f.line, f.message) for f in lint.lint_source(textwrap.dedent(code), "<string>")]


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
    # the rule's bad example with the clip taken from elsewhere (a library that unscales itself): no finding
    loop = """
        import torch
        import torch.nn.functional as F
        from {module} import clip_grad_norm_

        scaler = torch.amp.GradScaler()
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast('cuda'):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        """
    assert ("clip-before-unscale", 12) in findings(loop.format(module="torch.nn.utils"))
    assert "clip-before-unscale" not in {rule for rule, _ in findings(loop.format(module="mylib.amp"))}
