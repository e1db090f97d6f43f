"""The package behind diagnostics/lint.py, laid out along its data path:

    registry.py     the rule registry (Rule, RULES, @rule) and the Finding a rule produces
    torch_names.py  what the rules know about torch: its losses, activations, autograd switches, loop calls
    syntax.py       small helpers over Python's syntax tree: node kinds, positions, names, call arguments
    source.py       one parsed file: imports, scopes, the definitions that reach each use, training-loop events
    rules/          the rules, one module per topic; rules/__init__.py fixes the order they are listed in
    run.py          files and notebooks -> findings: reading, noqa, the files of one run (Project), the
                    [tool.ml-debug.lint] settings (Config)
    docs.py         refs/static_analysis.md, generated from the registry and measured on tests/data/lint

`python diagnostics/lint.py PATH...` is the entry point (its command line is there); this package is what
it reads and thinks with. It needs nothing but the standard library.
"""
