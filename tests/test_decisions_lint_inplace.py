"""lint's in-place rules (trainlint/rules/inplace.py) at their decisions, found by mutation testing: what is an
autograd.Function, which layer keeps its output, and where an in-place change of a kept output is reported."""
from conftest import findings


def test_a_subclass_of_an_aliased_autograd_function_runs_its_forward_with_autograd_off():
    assert findings("""
        import torch
        from torch.autograd import Function as AutogradFunction

        class Squash(AutogradFunction):
            @staticmethod
            def forward(ctx, x):
                h = torch.sigmoid(x)
                h += 1
                return h
        """) == []


def test_a_torch_nn_layer_that_is_no_activation_keeps_no_output_for_backward():
    assert findings("""
        import torch.nn as nn

        proj = nn.Linear(2, 2)

        def forward(x):
            h = proj(x)
            h += 1
            return h
        """) == []


def test_an_inplace_change_of_a_kept_output_in_forward_is_reported_without_a_backward_call():
    assert findings("""
        import torch

        def forward(x):
            h = torch.sigmoid(x)
            h += 1
            return h
        """) == [("inplace-on-saved-output", 6)]


def test_an_inplace_change_of_a_kept_output_under_no_grad_is_no_finding():
    assert findings("""
        import torch

        def forward(x):
            h = torch.sigmoid(x)
            with torch.no_grad():
                h += 1
            return h
        """) == []


def test_a_backward_call_elsewhere_in_the_file_does_not_make_a_helper_training_code():
    assert findings("""
        import torch

        def squash(x):
            h = torch.sigmoid(x)
            h += 1
            return h

        loss.backward()
        """) == []
