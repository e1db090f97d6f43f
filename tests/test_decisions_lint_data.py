"""lint's data rules (train-loader-no-shuffle: what its finding says, how deep it follows a loader into functions,
loader_use's None and 'other'), each decision pinned at its boundary: found by mutation testing."""
import ast
import textwrap

import lint
from conftest import findings
from test_decisions_lint_source import source
from test_lint_precision import LOADER_LOOP
from trainlint.rules.data import loader_use


def loader_messages(loader):
    code = textwrap.dedent(LOADER_LOOP.format(loader=loader))
    return [f.message for f in lint.lint_source(code, "<string>") if f.rule == "train-loader-no-shuffle"]


def test_shuffle_false_is_named_as_given_and_a_missing_shuffle_as_the_default():
    [given] = loader_messages("DataLoader(train_set, batch_size=64, shuffle=False)")
    [left_out] = loader_messages("DataLoader(train_set, batch_size=64)")
    assert "has shuffle=False:" in given
    assert "no shuffle argument" in left_out


PASSED_ON = """
    from torch.utils.data import DataLoader

    def inner(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            model(x, y).backward()
            optimizer.step()

    def middle(model, loader, optimizer):
        inner(model, loader, optimizer)

    def outer(model, loader, optimizer):
        {call}

    train_loader = DataLoader(train_set, batch_size=64)
    for epoch in range(10):
        outer(model, train_loader, optimizer)
    """


def test_a_loader_is_followed_two_calls_deep_into_the_functions_it_is_passed_to():
    # outer -> inner: the training loop is two calls from the loader's name, still followed
    assert findings(PASSED_ON.format(call="inner(model, loader, optimizer)")) == [("train-loader-no-shuffle", 16)]


def test_a_loader_is_not_followed_three_calls_deep():
    # outer -> middle -> inner: a third call is past the depth lint follows, so the loop is not seen
    assert findings(PASSED_ON.format(call="middle(model, loader, optimizer)")) == []


def built_loader(src):
    return next(c for c in src.calls if isinstance(c.func, ast.Name) and c.func.id == "DataLoader")


def test_a_loader_no_loop_iterates_is_of_unknown_use_and_one_an_eval_loop_iterates_is_other():
    # None (the file does not show) and 'other' (only loops without backward or step) are loader_use's two answers
    unused = source("""
        from torch.utils.data import DataLoader
        val_loader = DataLoader(val_set, batch_size=64)
        """)
    evaluated = source("""
        from torch.utils.data import DataLoader
        val_loader = DataLoader(val_set, batch_size=64)
        for epoch in range(10):
            for x, y in val_loader:
                print(model(x))
        """)
    assert loader_use(unused, built_loader(unused)) is None
    assert loader_use(evaluated, built_loader(evaluated)) == "other"
