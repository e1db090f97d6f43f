"""lint's model of one source file (trainlint/source.py): its name bindings, definitions, methods and unpackings,
pinned at their decisions (found by mutation testing)."""
import ast
import textwrap

from trainlint.source import Source


def source(code):
    code = textwrap.dedent(code)
    return Source(ast.parse(code), "<string>", None, code)


def names(src, name_id):
    """The Name nodes of that name, in source order."""
    return sorted((n for n in src.of_type(ast.Name) if n.id == name_id), key=lambda n: (n.lineno, n.col_offset))


def last_use(src, name_id):
    return names(src, name_id)[-1]


def is_call_to(node, func):
    return isinstance(node, ast.Call) and ast.unparse(node.func) == func


def test_a_name_only_read_after_a_star_import_comes_from_that_module():
    src = source("""
        from torch import *
        with no_grad():
            pass
    """)
    assert src.qualname(last_use(src, "no_grad")) == "torch.no_grad"


def test_a_keyword_only_default_is_what_the_function_uses():
    src = source("""
        import torch.nn as nn
        def train(model, *, criterion=nn.CrossEntropyLoss()):
            return criterion
    """)
    assert is_call_to(src.definition(last_use(src, "criterion")), "nn.CrossEntropyLoss")


def test_a_method_does_not_bind_its_own_name_over_a_module_value():
    # inside a method, its own name is no variable: a name `f` there is the module's `f`
    src = source("""
        import torch.nn as nn
        f = nn.Linear(2, 2)
        class M:
            def f(self):
                return f
    """)
    assert is_call_to(src.definition(last_use(src, "f")), "nn.Linear")


def test_an_annotated_assignment_binds_its_value():
    src = source("""
        import torch.nn as nn
        criterion: nn.Module = nn.CrossEntropyLoss()
        print(criterion)
    """)
    assert is_call_to(src.definition(last_use(src, "criterion")), "nn.CrossEntropyLoss")


def test_an_annotated_self_attribute_is_a_class_attribute():
    src = source("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                self.criterion: nn.Module = nn.CrossEntropyLoss()
            def forward(self, x):
                return self.criterion(x)
    """)
    use = next(n for n in src.of_type(ast.Attribute) if isinstance(n.ctx, ast.Load) and n.attr == "criterion")
    assert is_call_to(src.self_attribute(use), "nn.CrossEntropyLoss")


def test_a_function_nested_in_a_method_is_not_itself_the_method():
    src = source("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                self.criterion = nn.CrossEntropyLoss()
            def forward(self, x):
                def inner(y):
                    return self.criterion(y)
                return inner(x)
    """)
    use = next(n for n in src.of_type(ast.Attribute) if isinstance(n.ctx, ast.Load) and n.attr == "criterion")
    assert src.method(use).name == "forward"
    assert is_call_to(src.self_attribute(use), "nn.CrossEntropyLoss")


def test_a_name_used_in_a_comprehension_over_another_variable_keeps_its_definition():
    src = source("""
        import torch.nn as nn
        criterion = nn.CrossEntropyLoss()
        losses = [criterion(x) for x in batches]
    """)
    assert is_call_to(src.definition(last_use(src, "criterion")), "nn.CrossEntropyLoss")


def test_a_tuple_target_is_not_unpacked_from_its_own_assignment():
    # the target `logits` starts where the assignment does: that assignment is not before it
    src = source("""
        logits, loss = model(x)
    """)
    assert src.unpacked_from(names(src, "logits")[0]) is None


def test_a_name_is_unpacked_from_the_last_tuple_assignment_that_names_it():
    # a later tuple assignment of other names is not where loss came from
    src = source("""
        logits, loss = model(x)
        a, b = other(x)
        loss.backward()
    """)
    assert is_call_to(src.unpacked_from(last_use(src, "loss")), "model")
