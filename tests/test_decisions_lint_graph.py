"""Decisions of lint's graph rules (detached losses, unreduced losses, losses summed with their graph), each pinned by
an input at its boundary: found by mutation testing."""
import textwrap

import lint


def findings(code):
    return [(f.rule, f.line) for f in lint.lint_source(textwrap.dedent(code), "<string>")]


# --- flow: a cut is followed through attributes, subscripts, lists and calls -----------------------------------

def test_a_cut_is_followed_through_an_attribute_of_the_cut_value():
    assert findings("""
        out = model(x).detach()
        loss = out.loss
        loss.backward()
        """) == [("detached-loss", 2)]


def test_a_cut_is_followed_through_a_subscript_of_the_cut_value():
    assert findings("""
        out = model(x).detach()
        loss = out[0]
        loss.backward()
        """) == [("detached-loss", 2)]


def test_a_cut_is_followed_through_the_elements_of_a_list():
    assert findings("""
        import torch
        a, b = model(x)
        loss = torch.stack([a.detach(), b.detach()]).sum()
        loss.backward()
        """) == [("detached-loss", 4)]


def test_a_cut_is_followed_through_the_arguments_of_a_torch_function():
    assert findings("""
        import torch
        out = model(x)
        loss = torch.mean(out.detach())
        loss.backward()
        """) == [("detached-loss", 4)]


def test_a_cut_is_followed_through_a_tensor_method_called_on_it():
    assert findings("""
        out = model(x)
        loss = out.detach().sum()
        loss.backward()
        """) == [("detached-loss", 3)]
