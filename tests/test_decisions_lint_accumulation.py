"""lint's gradient-accumulation rules (trainlint/rules/accumulation.py): what makes a loop accumulate and how a loss
is scaled, pinned at their decisions (found by mutation testing)."""
import ast

from conftest import findings
from test_decisions_lint_source import source
from trainlint.rules.accumulation import scaling


def test_a_loop_with_a_guarded_step_and_a_later_step_on_every_pass_does_not_accumulate():
    # the first step is under the remainder, but opt_d steps outside it on every pass: no accumulation to judge,
    # so the zero_grad() on every pass is no finding
    assert findings("""
        import torch.nn.functional as F

        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            opt_d.zero_grad()
            (F.cross_entropy(model(x), y) / k).backward()
            if (i + 1) % k == 0:
                optimizer.step()
            opt_d.step()
        """) == []


def test_a_step_an_object_runs_under_a_remainder_makes_the_loop_accumulate():
    # the loop's own events hold no step: only the `if` on a remainder sends accumulation() to what its calls run
    assert findings("""
        import torch.nn.functional as F


        class Updater:
            def __init__(self, optimizer):
                self.optimizer = optimizer

            def apply(self):
                self.optimizer.step()
                self.optimizer.zero_grad()


        updater = Updater(optimizer)
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if (i + 1) % k == 0:
                updater.apply()
        """) == [("accumulated-loss-not-scaled", 17)]


def test_a_divided_loss_reads_as_scaled():
    src = source("""
        import torch.nn.functional as F
        loss = F.cross_entropy(model(x), y) / k
        """)
    assert scaling(src, src.tree.body[-1].value) == "scaled"
