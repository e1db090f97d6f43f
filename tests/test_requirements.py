"""The two requirement sets: `make demo`, `make check` and `make install-skill` install the runtime set
(requirements.txt), `make test` and `make docs` the test set on top of it (requirements-test.txt). Both pin
exactly, constraints.txt pins the closure, and the runtime set holds what the runtime commands import."""
import ast
import importlib.metadata
import re
import sys
import tomllib

from conftest import DIAGNOSTICS, ROOT

RUNTIME, TEST = ROOT / "requirements.txt", ROOT / "requirements-test.txt"
RUNTIME_TOOLS = (ROOT / "tools" / "check_pack.py", ROOT / "tools" / "install_skill.py")  # make check, install-skill


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path):
    """{package: version} of a requirements file's own lines, and the files it includes with -r."""
    found, included = {}, []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            included.append(line[3:].strip())
        elif line:
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9_.-]+", name.strip()), f"{path.name}: not an exact pin: {line}"
            found[canonical(name.strip())] = version.strip()
    return found, included


def test_both_sets_pin_exactly_what_constraints_pins():
    constraints, _ = pins(ROOT / "constraints.txt")
    runtime, runtime_includes = pins(RUNTIME)
    test, test_includes = pins(TEST)
    assert runtime_includes == [] and test_includes == ["requirements.txt"]
    assert not runtime.keys() & test.keys(), "a package in both sets"
    for name, version in {**runtime, **test}.items():
        assert constraints.get(name) == version, (name, version, constraints.get(name))
    assert "torch" in runtime and {"pytest", "pytest-xdist", "mkdocs-material"} <= test.keys()


def third_party_imports(path):
    """Top-level names of every module a file imports, anywhere in it, that are neither stdlib nor ours."""
    ours = {p.stem for p in [*DIAGNOSTICS.iterdir(), *(ROOT / "tools").iterdir()]} | {"ml_debug"}
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name not in ours}


def test_the_runtime_set_holds_what_make_check_and_install_skill_import():
    runtime, _ = pins(RUNTIME)
    distributions = importlib.metadata.packages_distributions()
    imported = set().union(*map(third_party_imports, RUNTIME_TOOLS)) | third_party_imports(DIAGNOSTICS / "doctor.py")
    assert imported, "no import found: the parse is broken"
    for module in imported:
        assert {canonical(d) for d in distributions[module]} & runtime.keys(), f"{module} is not in requirements.txt"


def test_every_extra_is_pinned_and_the_skill_extra_is_runtime():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    runtime, _ = pins(RUNTIME)
    every = {**runtime, **pins(TEST)[0]}
    for extra, requirements in extras.items():
        for requirement in requirements:
            name = canonical(re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0])
            assert name in every, (extra, requirement)
            assert extra != "skill" or name in runtime, (extra, requirement)


def test_make_installs_the_runtime_set_for_demo_check_install_skill_and_the_test_set_for_test_docs():
    makefile = (ROOT / "Makefile").read_text()
    targets = dict(re.findall(r"^([a-z-]+): \$\(VENV\)/(\.installed(?:-test)?)\b", makefile, re.M))
    assert targets == {"demo": ".installed", "check": ".installed", "install-skill": ".installed",
                       "test": ".installed-test", "docs": ".installed-test"}
    runtime_rule = re.search(r"^\$\(VENV\)/\.installed: (.*)\n((?:\t.*\n)+)", makefile, re.M)
    test_rule = re.search(r"^\$\(VENV\)/\.installed-test: (.*)\n((?:\t.*\n)+)", makefile, re.M)
    assert runtime_rule.group(1).split() == ["requirements.txt", "constraints.txt"]
    assert "-r requirements.txt" in runtime_rule.group(2) and "venv" in runtime_rule.group(2)
    # the test set is added to the venv make demo made: it depends on that marker and never makes a venv itself
    assert test_rule.group(1).split() == ["$(VENV)/.installed", "requirements-test.txt"]
    assert "-r requirements-test.txt" in test_rule.group(2) and "venv" not in test_rule.group(2)
    assert "-c constraints.txt" in re.search(r"^PIP\s*:=(.*)$", makefile, re.M).group(1)


def test_make_test_keeps_the_tests_of_one_file_on_one_worker():
    """A module-scoped fixture (a site build, a batch of runs in one interpreter) is built once per worker that runs
    the module's tests, and again when a worker comes back to the module: --dist load built some twice or three times.
    (--dist loadgroup would not do: xdist 3.8 renames the test ids to group them, and pytest 9.2 ignores the rename.)"""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\n(?:\t.*\n)*?\t\$\(PYTHON\) -m pytest .*-n 2 --dist loadfile\b", makefile, re.M)
