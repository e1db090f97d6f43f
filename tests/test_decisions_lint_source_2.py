"""lint's model of a source file (trainlint/source.py) at its boundaries, found by mutation testing: how far a name is
followed through plain aliases to its import."""
import ast

import pytest

from trainlint.source import Source


def _qualname_through_aliases(n):
    """`import torch.nn.functional as F`, then a1 = F, a2 = a1, ... an = a(n-1): the qualified name of `an.softmax`."""
    code = ("import torch.nn.functional as F\na1 = F\n" + "".join(f"a{i} = a{i - 1}\n" for i in range(2, n + 1))
            + f"y = a{n}.softmax\n")
    source = Source(ast.parse(code), "<string>", None, code)
    return source.qualname(source.tree.body[-1].value)


@pytest.mark.parametrize("aliases, name", [(8, "torch.nn.functional.softmax"), (9, None)])
def test_a_name_is_followed_through_at_most_eight_aliases(aliases, name):
    assert _qualname_through_aliases(aliases) == name
