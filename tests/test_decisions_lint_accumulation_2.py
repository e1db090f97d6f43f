"""lint's gradient-accumulation rules (trainlint/rules/accumulation.py), more decisions pinned at their boundaries
(found by mutation testing): which subscript reads as a model output's loss, which backward() a library scales, and
a step under a nonzero remainder that has an else."""
import ast

from conftest import findings
from trainlint.rules.accumulation import output_loss


def test_a_subscript_with_another_constant_key_is_not_an_output_loss():
    assert output_loss(ast.parse('outputs["loss"]', mode="eval").body)
    assert not output_loss(ast.parse("outputs[0]", mode="eval").body)


def test_accelerator_backward_in_a_manual_accumulation_loop_is_not_asked_to_scale_the_loss():
    # accelerator.backward() divides by its own accumulation steps: the unscaled loss it gets is no finding,
    # while the same loop with loss.backward() is one
    loop = """
        import torch.nn.functional as F

        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            {backward}
            if (i + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()
        """
    assert ("accumulated-loss-not-scaled", 6) in findings(loop.format(backward="loss.backward()"))
    assert "accumulated-loss-not-scaled" not in {
        rule for rule, _ in findings(loop.format(backward="accelerator.backward(loss)"))}


def test_a_step_under_a_nonzero_remainder_is_inverted_also_when_the_if_has_an_else():
    loop = """
        for i, (x, y) in enumerate(loader):
            loss = model(x, y) / k
            loss.backward()
            if (i + 1) % k != 0:
                optimizer.step()
                optimizer.zero_grad()
            else:
                log(loss)
        """
    assert ("accumulation-step-inverted", 5) in findings(loop)
    assert "accumulation-step-inverted" not in {rule for rule, _ in findings(loop.replace(
        "optimizer.step()\n                optimizer.zero_grad()\n            else:\n                log(loss)",
        "log(loss)\n            else:\n                optimizer.step()\n                optimizer.zero_grad()"))}
