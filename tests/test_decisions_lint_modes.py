"""lint's train/eval mode rules (diagnostics/trainlint/rules/modes.py): decisions at their boundaries, found by
mutation testing."""

import pytest

from conftest import findings


def nested_model(levels):
    """A training main() whose model class holds a chain of `levels` classes, the last of which holds an
    nn.Dropout, then evaluates it under no_grad in train mode (the evaluation loop is on the last line)."""
    classes = "".join(
        f"class L{i}(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"        self.inner = {f'L{i + 1}()' if i + 1 < levels else 'nn.Dropout(0.5)'}\n\n\n"
        for i in range(levels))
    return f"""import torch
import torch.nn as nn
import torch.nn.functional as F


{classes}def main(train_loader, val_loader):
    model = L0()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            print(model(x))
"""


@pytest.mark.parametrize("levels, reported", [
    (6, True),  # the nn.Dropout is built at depth 6 of the classes followed: still found
    (7, False),  # depth 7: past the limit, unsure, not flagged
])
def test_eval_mode_missing_follows_a_dropout_six_classes_deep(levels, reported):
    code = nested_model(levels)
    expected = [("eval-mode-missing", len(code.splitlines()))] if reported else []
    assert findings(code) == expected


def wrapped_fit(wrappers):
    """fit(model) trains and leaves model in eval mode; it is reached through `wrappers` functions that pass the
    model on, from a module-level nn.Linear (a model eval() changes nothing in)."""
    levels = "".join(f"def level{i}(model, loader):\n    {'fit' if i == 1 else f'level{i - 1}'}(model, loader)\n\n\n"
                     for i in range(1, wrappers + 1))
    return f"""import torch
import torch.nn as nn
import torch.nn.functional as F


def fit(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()


{levels}net = nn.Linear(784, 10)
level{wrappers}(net, train_loader)
"""


@pytest.mark.parametrize("wrappers, expected", [
    (2, []),  # the nn.Linear is three callers up from fit: followed, mode-free, left alone
    (3, [("eval-mode-not-restored", 13)]),  # four callers up: past the limit, unsure which model, flagged
])
def test_eval_mode_not_restored_follows_the_model_three_callers_up(wrappers, expected):
    assert findings(wrapped_fit(wrappers)) == expected


def test_a_model_switched_by_train_true_and_trained_is_in_train_mode_for_eval_mode_missing():
    assert findings("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.train(True)
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in val_loader:
                correct = (model(x).argmax(1) == y).sum().item()
        """) == [("eval-mode-missing", 15)]


def test_a_helper_that_recalibrates_before_it_trains_is_not_evaluation_in_train_mode():
    # the call of the helper is where its training happens: it is no training before the helper's forward loop
    assert findings("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        def calibrate_then_fit(model, optimizer, train_loader):
            with torch.no_grad():
                for x, y in train_loader:
                    model(x)
            for x, y in train_loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()


        def main(train_loader):
            model = nn.Sequential(nn.Linear(784, 256), nn.BatchNorm1d(256), nn.Linear(256, 10))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model.train()
            calibrate_then_fit(model, optimizer, train_loader)
        """) == []


def test_a_model_a_helper_builds_and_trains_is_in_train_mode_for_eval_mode_missing():
    # the training happens inside the call that defines net: it counts as training between the build and the loop
    assert findings("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        def fit(train_loader):
            net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for x, y in train_loader:
                optimizer.zero_grad()
                F.cross_entropy(net(x), y).backward()
                optimizer.step()
            return net


        def main(train_loader, val_loader):
            net = fit(train_loader)
            with torch.no_grad():
                for x, y in val_loader:
                    print(net(x))
        """) == [("eval-mode-missing", 21)]
