"""lint's loss rules (trainlint/rules/losses.py) at their decisions, found by mutation testing: which names read as
class labels."""
import ast

import pytest

from trainlint.rules.losses import label_like


@pytest.mark.parametrize("name, label", [("labels", True), ("y", True), ("soft_targets", False), ("x", False)])
def test_a_name_reads_as_labels_when_it_says_so_and_not_when_it_says_soft_or_nothing(name, label):
    assert bool(label_like(ast.Name(id=name))) is label
