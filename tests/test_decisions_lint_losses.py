"""lint's loss rules (trainlint/rules/losses.py) at their decisions, found by mutation testing: which names read as
class labels, when a softmax without dim= is one, and what a counter counts."""
import ast

import pytest

from conftest import findings
from test_decisions_lint_source import source
from trainlint.rules.losses import counter, label_like


@pytest.mark.parametrize("name, label", [("labels", True), ("y", True), ("soft_targets", False), ("x", False)])
def test_a_name_reads_as_labels_when_it_says_so_and_not_when_it_says_soft_or_nothing(name, label):
    assert bool(label_like(ast.Name(id=name))) is label


def test_a_softmax_given_keyword_arguments_unpacked_may_pass_its_dim_and_is_no_finding():
    code = ("import torch\nimport torch.nn.functional as F\nx = torch.zeros(2, 3, 4)\nF.softmax(x, **options)\n"
            "F.softmax(x)\n")  # a 3-D input: dim 0 when none is passed
    assert [finding for finding in findings(code) if finding[0] == "softmax-no-dim"] == [("softmax-no-dim", 5)]


@pytest.mark.parametrize("step, counts", [("x.size(0)", "samples"), ("x.size(1)", None), ("len(y)", "samples"), ("1", "batches")])
def test_a_counter_counts_samples_only_when_it_grows_by_the_batch_dimension(step, counts):
    src = source(f"for x, y in loader:\n    seen += {step}\n")
    loop = src.tree.body[0]
    assert counter(src, loop, loop.body[0].target) == counts
