"""Mutation testing of the decision lines a change touched: would the tests notice a wrong decision?

    python tools/mutate.py [FILE ...] [--base main] [--lines changed|all] [--tests TEST ...] [--list] [--max N [--seed S]]
                           [--timeout S] [--json OUT [--force]] [--map MAP [--confirm] [--screen TEST ...]]
                           [--equivalent LIST] [--warm]
    python tools/mutate.py --build-map MAP [-n WORKERS] [--tests TEST ...]

Without FILE it takes the Python files under diagnostics/, ml_debug/ and tools/ that differ from where
this branch left --base (committed or not, new files included). In each file it finds the decision
lines with the ast module and makes one mutant per decision:

- a comparison relaxed or flipped (< and <=, > and >= trade places; == and !=, in and not in, is and
  is not swap);
- a number that is a threshold (compared against, or a module-level UPPER_CASE constant) nudged: an
  int by 1, a float by 10% (0.0 becomes 0.1);
- a verdict string swapped down ("fail" to "warn", "warn" to "pass", "skip" to "pass");
- the return or raise that ends an if-branch removed (an early return, a refusal);
- `and` and `or` swapped; a `not` dropped; the two branches of `x if test else y` swapped.

Only functions and classes are mutated, and the UPPER_CASE constants of the module: the rest of the
module level (imports, a Ctrl-C while torch loads, `if __name__ == "__main__":`) is left alone.

--lines changed keeps only the mutants whose edited text touches a line the change added or rewrote: the
new-side lines of `git diff --unified=0 FORK -- FILE`, FORK being where this branch left --base (the
working tree against it, so uncommitted edits count; a file absent at FORK is all changed). A hunk that
only deletes lines has no new-side line, so it keeps nothing. It is the default when no FILE is named;
with FILE named the default is --lines all, the whole file.

Each mutant is applied, one at a time, to a copy of the repository in a temporary folder (the working
tree is never written; the copy gets the original back after each mutant, and is deleted at the end),
and the tests that cover the file run there with -x: a failure kills the mutant. The tests that cover
a file are the test files that import it or run it, directly or through modules that do (import
statements, and string constants naming a module or its .py file, as `load("monitor")` or
`run_cli("spikes.py")` do); --tests replaces that choice. A file no test covers: every mutant
survives, none is run. The covering tests first run once on the unmutated copy: a test that already
fails there would kill every mutant, so it is left out (and named); a file whose tests time out there
is skipped. A mutant whose tests run past --timeout (default three times that first run, plus 30 s)
is killed with its whole process group and counted as timed out. A test that fails with a mutant is run once
without any mutant (once per run): when it fails there too it proves nothing, so it kills no mutant, the mutant's
tests run again without it, and the file's line names it.

--warm runs each pytest in a child forked from this process instead of a fresh `python -m pytest`. What the first
child imported of torch and torch._dynamo (which a process's first optimizer imports), this process then imports
once: a later child starts in well under a second where a fresh interpreter spends seconds importing torch (the
machine and the numbers: CONTRIBUTING.md, "Tests"). The child is otherwise what the fresh run would be (its own
process group, killed past the time limit; the copy's modules, none of the working tree's).

With --map MAP each mutant runs only the tests that ran its lines, fastest first, in two runs (those in the first
three test files, then, when they pass, the rest: most mutants die in the first, without collecting the others).
MAP says, for each line of each file under diagnostics/, ml_debug/ and tools/, which test ids ran it, and is built once by --build-map, a run
of the tests (--tests, default tests/; -n 2 spreads it over two pytest-xdist workers) under coverage.py with one
context per test, children followed (`python diagnostics/x.py` run by a test, and the forked child that runs user
code). A mutant no test reaches survives unrun ("no test runs this line"); one on an UPPER_CASE constant (set at
import, often outside any test's context, and read by every test that runs the file or a file that imports it)
runs the tests that run any line of its file or of those importers, and one on a line that also ran outside any
test the tests that run any line of its file; in a file the map has no
entry for, or that changed since, it falls back to the tests that import the file. The file's line says so. Its time limit is three times the mapped tests'
seconds plus 30 s; the tests that failed while the map was built are left out. --build-map never writes over a file
it did not write; over its own map it replaces what it said of the tests it ran now and keeps the rest (a new test
file: `--build-map MAP --tests tests/test_new.py`); a file that changed since gets no entry from a build on some
tests (what the other tests run of it is unknown), only from one on all.

The map cannot see every run: a test that copies a file into a temporary folder and runs it there (coverage measures
only the repository's paths), a child started with an environment of its own, a constant read through another
module. --confirm runs a mutant that survives its mapped tests (or that no mapped test runs) again on the test files
nearest its file (those that import or run it directly; else those one module further away, and so on), within three
times their seconds in the map plus 30 s, the tests that failed while the map was built left out; one caught there
counts as killed or timed out, and is also listed under "outside_map" and printed ("caught outside the map"). Read
that list: a test that reads the source itself (a digest, a docstring it compares) fails on any edit, and catches
mutants that change no behaviour.

--screen TEST ... (with --map) runs each mutant against those tests first: one they kill costs that one short run,
and only one they let through runs its mapped tests (and --confirm's). It is for a census of a file whose lines many
slow tests run (a module constant runs every test of its file): name the file's own fast tests, as node ids or files,
and most mutants never reach the slow ones. The screen runs once without any mutant first: it must pass there (one
line and exit 2 when it does not), and a mutant's screen run has three times that run's seconds plus 30 s.

The mutants judged equivalent (no output changes: a comparison that cannot see the boundary, a threshold no input
can tell from its neighbour) are listed in tools/mutate_equivalent.txt (--equivalent names another list), with the
reason: one a line, file, the mutation as printed, the stripped text of its line and why, tab-separated. They are
counted as equivalent and not run. A line text that more than one line of the file holds names none of them: give the
judged line a text of its own (a comment will do).

Prints, per file: mutants generated, killed, survived (each with file:line and the mutation), timed out and
equivalent. --list only lists the mutants. --max N runs N per file, spread evenly over the file, or, with --seed S,
drawn at random (the same S draws the same mutants; a measurement should draw anew, for an even spread picks many of
the mutants an earlier spread picked and its survivors got tests). --json OUT
writes the results (never over a file this tool did not write, unless --force). Exit 0 when no mutant
survived, 1 when one did, 2 on bad usage (one line on stderr), 130 on Ctrl-C.

Why not mutmut or cosmic-ray (both are on PyPI; we read how they work): mutmut 3 chooses its tests per
function, but mutates every operator and string of the files it is given and runs the tests on its own
rewritten copy of the sources (the tests that read our sources, the docstring outputs and the pack
checker, would see code that is not ours); cosmic-ray writes each mutant into the working tree and
restores it afterwards, and runs one test command for every mutant. Neither starts from the files a
change touched or keeps to decision lines. This is a reviewer's habit, not CI: see
CONTRIBUTING.md, "Tests".
"""
import argparse
import ast
import base64
import bisect
import functools
import gc
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parents[1] / "diagnostics") not in sys.path:  # the contract module: output paths
    sys.path.append(str(Path(__file__).resolve().parents[1] / "diagnostics"))
from ml_debug_contract import OutputRefused, output_file  # noqa: E402

SOURCE_DIRS = ("diagnostics", "ml_debug", "tools")  # where the default file list comes from
EQUIVALENT = Path(__file__).with_name("mutate_equivalent.txt")  # the mutants judged equivalent, and why
RESULTS_KIND = "ml-debug mutate results"  # marks a JSON file this tool wrote, so it may write over it
VERDICT_DOWN = {"fail": "warn", "warn": "pass", "skip": "pass"}
COMPARE_SWAP = {ast.Lt: (ast.LtE, "<="), ast.LtE: (ast.Lt, "<"), ast.Gt: (ast.GtE, ">="), ast.GtE: (ast.Gt, ">"),
                ast.Eq: (ast.NotEq, "!="), ast.NotEq: (ast.Eq, "=="), ast.In: (ast.NotIn, "not in"),
                ast.NotIn: (ast.In, "in"), ast.Is: (ast.IsNot, "is not"), ast.IsNot: (ast.Is, "is")}
OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.In: r"in", ast.NotIn: r"not\s+in", ast.Is: r"is", ast.IsNot: r"is\s+not"}
GRACE = 30.0  # seconds added to three times the unmutated run for the default timeout: start-up varies on a loaded machine


class UsageError(Exception):
    """Bad input: one line on stderr, exit 2."""


class Mutant:
    """One edit of one file: bytes [start, end) replaced by `new`."""

    def __init__(self, path, line, start, end, new, what, last, at_import=False):
        self.path, self.line, self.start, self.end, self.new, self.what = path, line, start, end, new, what
        self.last = last  # the last line the replaced text reaches
        self.at_import = at_import  # a module-level constant: read by whatever runs the file, set once at import

    def apply(self, source):
        return source[:self.start] + self.new + source[self.end:]

    def label(self):
        return f"{self.path}:{self.line}: {self.what}"


# --- finding the decisions ---------------------------------------------------------------------------


class Finder(ast.NodeVisitor):
    """Walks one module and collects its mutants (byte offsets into the file's source)."""

    def __init__(self, path, source, docstrings):
        self.path, self.source, self.docstrings = path, source, docstrings
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.mutants = []
        self.importing = False  # visiting a module-level constant

    def at(self, line, col):
        return self.starts[line - 1] + col

    def span(self, node):
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)

    def add(self, node, start, end, new, what):
        last = bisect.bisect_right(self.starts, max(start, end - 1))  # the line holding the last replaced byte
        self.mutants.append(Mutant(self.path, node.lineno, start, end, new.encode(), what, last, self.importing))

    def visit_If(self, node):
        self.drop_last(node.body, (ast.Return, ast.Raise), "if-branch")
        self.generic_visit(node)

    def visit_ExceptHandler(self, node):
        self.drop_last(node.body, (ast.Raise,), "except-branch")
        self.generic_visit(node)

    def drop_last(self, body, kinds, where):
        last = body[-1]
        if isinstance(last, kinds):
            start, end = self.span(last)
            kind = "return" if isinstance(last, ast.Return) else "raise"
            self.add(last, start, end, "pass", f"drop the `{kind}` that ends this {where}")

    def visit_Compare(self, node):
        operands = [node.left, *node.comparators]
        for op, before, after in zip(node.ops, operands, operands[1:]):
            lo, hi = self.span(before)[1], self.span(after)[0]
            gap = self.source[lo:hi].decode("utf-8", "replace")
            found = re.search(rf"(?<![\w<>=!]){OP_TEXT[type(op)]}(?![\w<>=])", gap)
            if found:
                text = COMPARE_SWAP[type(op)][1]
                self.add(node, lo + len(gap[:found.start()].encode()), lo + len(gap[:found.end()].encode()), text,
                         f"`{found.group(0)}` -> `{text}`")
            for side in (before, after):
                self.threshold(side)
        self.generic_visit(node)

    def threshold(self, node):
        negative = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
        number = node.operand if negative else node
        if not (isinstance(number, ast.Constant) and type(number.value) in (int, float)):
            return
        value = number.value
        nudged = value + 1 if isinstance(value, int) else float(f"{value * 1.1:.12g}") if value else 0.1
        start, end = self.span(number)
        self.add(number, start, end, repr(nudged), f"{value!r} -> {nudged!r}")

    def visit_Module(self, node):
        """The module's functions and classes; of the rest (imports, `if __name__ == "__main__":`, code that runs at
        import), only the UPPER_CASE constants."""
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(statement)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                if all(isinstance(t, ast.Name) and t.id.isupper() for t in targets) and statement.value is not None:
                    self.importing = True
                    self.threshold(statement.value)
                    self.importing = False

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value in VERDICT_DOWN and id(node) not in self.docstrings:
            start, end = self.span(node)
            quote = self.source[start:start + 1].decode()
            new = VERDICT_DOWN[node.value]
            self.add(node, start, end, f"{quote}{new}{quote}", f"{node.value!r} -> {new!r}")

    def visit_JoinedStr(self, node):  # an f-string is a message (and before Python 3.12 its inner offsets are unreliable)
        return

    def visit_BoolOp(self, node):
        swap = "or" if isinstance(node.op, ast.And) else "and"
        first, last = self.span(node.values[0])[0], self.span(node.values[-1])[1]
        pieces, at = [], first
        for before, after in zip(node.values, node.values[1:]):
            lo, hi = self.span(before)[1], self.span(after)[0]
            gap = self.source[lo:hi].decode()
            pieces += [self.source[at:lo].decode(), re.sub(r"\b(and|or)\b", swap, gap, count=1)]
            at = hi
        pieces.append(self.source[at:last].decode())
        self.add(node, first, last, "".join(pieces), f"`{'and' if swap == 'or' else 'or'}` -> `{swap}`")
        self.generic_visit(node)

    def visit_IfExp(self, node):
        start, end = self.span(node)
        body, test, orelse = (self.source[slice(*self.span(part))].decode() for part in (node.body, node.test, node.orelse))
        self.add(node, start, end, f"(({orelse}) if ({test}) else ({body}))", "swap the branches of `... if ... else ...`")
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            start, end = self.span(node)
            inner = self.source[slice(*self.span(node.operand))].decode()
            self.add(node, start, end, f"({inner})", "drop `not`")
        self.generic_visit(node)


def docstring_nodes(tree):
    """The string constants that are docstrings: never mutated."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def candidate_mutants(root, rel):
    """Every mutant the finder makes of one file, in source order, once each: not yet checked to compile."""
    source = (root / rel).read_bytes()
    try:
        tree = ast.parse(source, filename=rel)
    except (SyntaxError, ValueError) as exc:
        raise UsageError(f"{rel} is not Python that parses: {exc}") from None
    finder = Finder(rel, source, docstring_nodes(tree))
    finder.visit(tree)
    unique = {}
    for mutant in sorted(finder.mutants, key=lambda m: (m.start, m.end, m.new)):
        unique.setdefault((mutant.start, mutant.end, mutant.new), mutant)
    return list(unique.values())


def find_mutants(root, rel):
    """Every mutant of one file, in source order; each one checked to compile (8 ms a mutant in a 900-line file)."""
    source = (root / rel).read_bytes()
    found = []
    for mutant in candidate_mutants(root, rel):
        try:
            compile(mutant.apply(source), rel, "exec")
        except (SyntaxError, ValueError):
            continue
        found.append(mutant)
    return found


def on_lines(mutants, lines):
    """The mutants whose replaced text touches one of `lines` (1-based line numbers)."""
    return [m for m in mutants if any(n in lines for n in range(m.line, m.last + 1))]


def spread(mutants, most, seed=None):
    """At most `most` mutants, evenly spaced over the file: the middle one of each of `most` equal stretches
    (deterministic; the file's first mutant, often a module constant, is not always among them). With a `seed` (a
    string: the run's seed and the file), drawn at random instead, in the file's order."""
    if most is None or len(mutants) <= most:
        return mutants
    if seed is not None:
        return [mutants[i] for i in sorted(random.Random(seed).sample(range(len(mutants)), most))]
    return [mutants[(2 * i + 1) * len(mutants) // (2 * most)] for i in range(most)]


# --- which tests cover a file ------------------------------------------------------------------------


def module_name(root, rel):
    """The name a file is imported by: its path from the top of its chain of packages (folders with __init__.py)."""
    parts = list(Path(rel).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    top = len(parts) - 1
    while top > 0 and (root.joinpath(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    return ".".join(parts[top:])


def references(root, rel, source):
    """(imported, named): the module names one file imports, and the names its string constants hold
    (`load("monitor")`, `run_cli("spikes.py")`)."""
    tree = ast.parse(source, filename=rel)
    package = module_name(root, rel).split(".")
    if not rel.endswith("__init__.py"):
        package = package[:-1]
    names, named = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + (node.module.split(".") if node.module else []))
            if stem:
                names.add(stem)
            names |= {f"{stem}.{alias.name}".lstrip(".") for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            name = node.value.rsplit("/", 1)[-1]
            named.add(name[:-3] if name.endswith(".py") else name)
    return names, named


@functools.lru_cache(maxsize=4)
def reference_graph(root, files):
    """file -> the files that reference it (import it, or name it in a string), over `files`: parsed once per run."""
    names = {}
    for rel in files:
        names.setdefault(module_name(root, rel), []).append(rel)
    users = {}
    for rel in files:
        try:
            imported, named = references(root, rel, (root / rel).read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        found = [used for name in imported for used in names.get(name, ())]
        # a string naming a package is more often a folder ("tools", "ml_debug") than a module loaded by name
        found += [used for name in named for used in names.get(name, ()) if not used.endswith("__init__.py")]
        for used in found:
            if used != rel:
                users.setdefault(used, set()).add(rel)
    return users


def covering_tests(root, files, target, nearest=False):
    """The test files (test_*.py) that reach `target` through imports and named modules: those that import it
    directly first, then those one module further away, and so on (with -x, the most direct tests fail first).
    `nearest`: only the closest of them (those at the fewest modules away)."""
    users = reference_graph(root, tuple(rel for rel in files if rel.endswith(".py")))
    depth, layer, level = {target: 0}, [target], 0
    while layer:
        level += 1
        layer = sorted({user for rel in layer for user in users.get(rel, ()) if user not in depth})
        depth.update((rel, level) for rel in layer)
    found = sorted((rel for rel in depth if Path(rel).name.startswith("test_")), key=lambda rel: (depth[rel], rel))
    return [rel for rel in found if depth[rel] == depth[found[0]]] if nearest and found else found


# --- the line map: which test runs which line -------------------------------------------------------------
#
# --build-map runs the tests under coverage.py with one context per test: this module is loaded into pytest as a
# plugin (-p mutate) and, at the start of each test, switches coverage's context to the test's id; a child process
# (`python diagnostics/x.py` run by a test) is measured with the test's id as its static context, through the
# config coverage hands its children (patch = subprocess), and a forked child (the supervised user code) switches
# to it as it starts (patch = fork, _exit).

MAP_KIND = "ml-debug mutate line map"  # marks a map file this tool wrote, so it may write over it
RCFILE = """[run]
parallel = true
data_file = {data}
source = {sources}
patch = subprocess, fork, _exit
"""
UNRUN = " (no test runs this line)"  # said of a mutant no test could kill: the map has no test for its lines
UNATTRIBUTED = -1  # a line run outside any test (at import, during collection, in a child that lost the test's id)
_current_test = None  # the test id this process runs now (the plugin's state)
_outcomes = {}  # test id -> [seconds, failed], in the process that reports them


def _coverage():
    try:
        import coverage
    except ImportError:
        return None
    return coverage.Coverage.current()


def _enter_test(test_id):
    """Coverage's context, here and in every child started from now on, becomes `test_id` (None: no test)."""
    global _current_test
    _current_test = test_id
    cov = _coverage()
    if cov is not None:
        cov.switch_context(test_id or "")
    config = os.environ.get("COVERAGE_PROCESS_CONFIG")
    if config:
        data = json.loads(base64.b64decode(config))
        data["context"] = test_id
        os.environ["COVERAGE_PROCESS_CONFIG"] = base64.b64encode(json.dumps(data).encode()).decode()


def _after_fork():
    cov = _coverage()
    if cov is not None and _current_test:
        cov.switch_context(_current_test)


def _runs_tests(config):
    """Not xdist's controller, which only hands the tests out."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    if os.environ.get("MUTATE_MAP_OUTCOMES") and _runs_tests(config):
        os.register_at_fork(after_in_child=_after_fork)


def pytest_runtest_logstart(nodeid, location):
    if os.environ.get("MUTATE_MAP_OUTCOMES") and _current_test != nodeid:
        _enter_test(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if os.environ.get("MUTATE_MAP_OUTCOMES") and _current_test == nodeid:
        _enter_test(None)


def pytest_runtest_logreport(report):
    if os.environ.get("MUTATE_MAP_OUTCOMES"):
        seconds, failed = _outcomes.get(report.nodeid, (0.0, False))
        _outcomes[report.nodeid] = [seconds + report.duration, failed or report.failed]


def pytest_sessionfinish(session):
    out = os.environ.get("MUTATE_MAP_OUTCOMES")
    if out and not hasattr(session.config, "workerinput"):  # xdist relays its workers' reports to the controller
        Path(out).write_text(json.dumps(_outcomes), encoding="utf-8")


def file_digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_map(root, path, tests, workers, out):
    """Run `tests` (default: tests/) under coverage with a context per test and write the map to `path`: for each
    file under SOURCE_DIRS, its digest and, per line, the tests that ran it; per test, its seconds and whether it
    failed. An existing map of ours is updated: the tests run now replace what it said of them."""
    try:
        import coverage
    except ImportError:
        raise UsageError("--build-map needs coverage.py: pip install -r requirements-test.txt") from None
    with tempfile.TemporaryDirectory(prefix="mutate-map-") as scratch:
        scratch = Path(scratch)
        rcfile = scratch / "coveragerc"
        rcfile.write_text(RCFILE.format(data=scratch / "data", sources=", ".join(str(root / d) for d in SOURCE_DIRS)))
        outcomes = scratch / "outcomes.json"
        env = dict(os.environ, MUTATE_MAP_OUTCOMES=str(outcomes), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent)]
                                              + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        env.pop("COVERAGE_PROCESS_CONFIG", None)
        command = [sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", "-m", "pytest", "-q",
                   "-p", "no:cacheprovider", "-p", "mutate", *(["-n", str(workers), "--dist", "loadfile"] if workers else []),
                   *(tests or ["tests"])]
        before = {rel: file_digest(root / rel) for rel in repository_files(root)
                  if rel.endswith(".py") and rel.split("/", 1)[0] in SOURCE_DIRS}
        start = time.monotonic()
        proc = subprocess.run(command, cwd=root, env=env, stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - start
        if proc.returncode not in (0, 1) or not outcomes.is_file():
            raise UsageError(f"the tests under coverage ended with exit status {proc.returncode}: no map written")
        cov = coverage.Coverage(config_file=str(rcfile))
        cov.combine(strict=True)
        data = cov.get_data()
        ran = json.loads(outcomes.read_text(encoding="utf-8"))
        old = written_by_us(path, MAP_KIND) if path.is_file() else None
        tests_now = sorted(ran)
        kept = [t for t in (old or {}).get("tests", ()) if t[0] not in ran]  # [id, seconds, failed]
        table = kept + [[t, round(ran[t][0], 3), ran[t][1]] for t in tests_now]
        index = {t[0]: i for i, t in enumerate(table)}
        files = {}
        for measured in data.measured_files():
            try:
                rel = Path(measured).resolve().relative_to(root).as_posix()
            except ValueError:
                continue
            if rel not in before or not (root / rel).is_file() or file_digest(root / rel) != before[rel]:
                continue  # edited while the tests ran: its lines may have moved
            lines = {}
            for line, contexts in data.contexts_by_lineno(measured).items():
                lines[str(line)] = sorted({index.get(c, UNATTRIBUTED) for c in contexts})
            files[rel] = {"digest": before[rel], "lines": lines}
        for rel, entry in ((old or {}).get("files") or {}).items():
            if rel not in files:
                files[rel] = entry
                continue
            if entry.get("digest") != files[rel]["digest"]:  # the file changed: only what the tests run now say of it holds
                if tests:  # some tests only: the others' lines are unknown, and the file gets no entry (import-level)
                    del files[rel]
                continue
            renumber = {i: index[t[0]] for i, t in enumerate(old["tests"]) if t[0] in index and t[0] not in ran}
            for line, ids in entry["lines"].items():
                merged = set(files[rel]["lines"].get(line, ())) | {renumber[i] for i in ids if i in renumber}
                files[rel]["lines"][line] = sorted(merged)
        write_json(path, {"kind": MAP_KIND, "seconds": round(seconds, 1), "tests": table, "files": files}, indent=None)
        failed = [t[0] for t in table if t[2]]
        print(f"line map: {len(tests_now)} tests run in {seconds:.0f} s, {len(files)} files, written to {path}"
              + (f"; {len(failed)} failed and will be left out: {', '.join(failed)}" if failed else ""), file=out)


class LineMap:
    """A map --build-map wrote: the tests that run each line of each file."""

    def __init__(self, path):
        data = written_by_us(path, MAP_KIND)
        if data is None:
            raise UsageError(f"--map {path}: not a line map this tool wrote (build one with --build-map)")
        self.tests, self.files = data["tests"], data["files"]

    def entry(self, root, rel):
        """(lines, why not): the file's line -> test indices, or None and the reason the map cannot say."""
        entry = self.files.get(rel)
        if entry is None:
            return None, "the line map has no entry for it"
        if entry["digest"] != file_digest(root / rel):
            return None, "it changed since the line map was built"
        return entry["lines"], None

    def tests_for(self, lines, mutant, importers=()):
        """(test ids, seconds, whole file): the tests that run the mutant's lines, fastest first, those that failed when
        the map was built left out. A module-level constant is set at import, wherever that happened (in a test
        worker, during collection, often outside any test's context: the map then credits it only to the tests whose
        children imported the file), and every test that runs the file reads it: the tests that run any line of the
        file (whole file: True), and of the files that import it (`importers`: their line maps), which read their own
        copy of a name imported from it (a module of constants runs no line inside a test). So too a line the map
        saw run outside any test (the file's tests only)."""
        found = set()
        for line in range(mutant.line, mutant.last + 1):
            found.update(lines.get(str(line), ()))
        whole = mutant.at_import or UNATTRIBUTED in found
        if whole:
            found = {i for ids in lines.values() for i in ids}
            if mutant.at_import:
                found |= {i for other in importers for ids in other.values() for i in ids}
        chosen = sorted((self.tests[i] for i in found if i != UNATTRIBUTED and not self.tests[i][2]),
                        key=lambda t: (t[1], t[0]))
        return [t[0] for t in chosen], sum(t[1] for t in chosen), whole

    def of_files(self, test_files):
        """(seconds, failed test ids) of the tests the map knows in `test_files`, None when it knows none of them."""
        known = [t for t in self.tests if t[0].split("::")[0] in test_files]
        return (sum(t[1] for t in known), [t[0] for t in known if t[2]]) if known else None


# --- the git side -------------------------------------------------------------------------------------


def git(root, *args):
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode:
        message = (proc.stderr.strip().splitlines() or [f"git {' '.join(args)} failed"])[-1]
        raise UsageError(f"git {args[0]}: {message}")
    return proc.stdout


def repository_files(root):
    """Tracked and untracked-but-not-ignored files: what the copy holds."""
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return sorted({rel for rel in listed if rel and os.path.lexists(root / rel)})


def changed_files(root, base):
    """The .py files under SOURCE_DIRS that differ from the point where HEAD left `base`, new ones included."""
    fork = fork_point(root, base)
    changed = git(root, "diff", "--name-only", "-z", "--diff-filter=d", fork).split("\0")
    changed += git(root, "ls-files", "-z", "--others", "--exclude-standard").split("\0")
    return sorted({rel for rel in changed if rel.endswith(".py") and rel.split("/", 1)[0] in SOURCE_DIRS
                   and (root / rel).is_file()})


def fork_point(root, base):
    return git(root, "merge-base", base, "HEAD").strip()


def changed_lines(root, fork, rel):
    """The line numbers of `rel` in the working tree that differ from `fork` (the new side of each hunk of
    `git diff --unified=0`); every line when the file is not in `fork`."""
    if subprocess.run(["git", "cat-file", "-e", f"{fork}:{rel}"], cwd=root, capture_output=True).returncode:
        return set(range(1, len((root / rel).read_bytes().splitlines()) + 2))
    lines = set()
    for hunk in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", git(root, "diff", "--unified=0", "--no-color",
                                                                     "--no-ext-diff", fork, "--", rel), re.M):
        first, count = int(hunk.group(1)), int(hunk.group(2) or 1)
        lines.update(range(first, first + count))
    return lines


# --- running -------------------------------------------------------------------------------------------


def run_tests(copy, tests, timeout, left_out=(), every=False, warm=False):
    """(state, seconds, failed) of pytest on the tests in the copy: state 'passed', 'failed' or 'timeout'. It stops at
    the first failure, unless `every`: then all run. `failed` holds the ids of the tests that failed. `warm`: pytest
    runs in a child forked from this process (fork_pytest), else in a fresh interpreter."""
    args = ["-q", "-p", "no:cacheprovider", "-rfE", *([] if every else ["-x"]), *tests]
    args += [f"--deselect={test}" for test in left_out]
    start = time.monotonic()
    if warm:
        code, output = fork_pytest(copy, args, timeout)
    else:
        code, output = fresh_pytest(copy, args, timeout)
    if code is None:
        return "timeout", time.monotonic() - start, []
    if code in (4, 5):  # pytest's usage error, or no test collected: the test arguments are wrong
        said = next((line for line in output.splitlines() if line.startswith("ERROR:")), "it collected no test")
        raise UsageError(f"pytest on {' '.join(tests)}: {said}")
    failed = [line.split(" ", 1)[1].split(" - ", 1)[0] for line in output.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    return ("passed" if code == 0 else "failed"), time.monotonic() - start, failed


def fresh_pytest(copy, args, timeout):
    """(exit status, or None past the timeout; output) of `python -m pytest args` run in the copy, in a session of its
    own: past the timeout the whole process group is killed."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # a stale .pyc of the same size and second would hide a mutant
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=copy, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                            errors="replace")
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, ""
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, output


# what a test run may import at a cost of seconds: a child that imported one leaves it imported here, before the next
# fork, and every later run inherits it. torch._dynamo is what the first torch.optim optimizer of a process imports
# (1.2 s on the 2-core VM): a forked run of overfit_one_batch's three decision files took 1.9-2.1 s with torch alone
# inherited, 0.8-1.0 s with both. Tests that never import torch (this tool's own, on a tiny repository) never pay it.
WARM_MODULES = ("torch", "torch._dynamo")


def fork_pytest(copy, args, timeout):
    """fresh_pytest's answer from pytest.main(args) in a child forked from this process, which has imported pytest and
    the WARM_MODULES an earlier child imported: a run starts in well under a second instead of paying the
    interpreter's and torch's start-up again.

    The child is what a fresh `python -m pytest` in the copy would be: its own session (killed as a group past the
    timeout), stdin from /dev/null, its output to a file, no .pyc written, and none of this repository's own modules
    or folders (the contract module this tool imports): the tests import the copy's, mutant included. Nothing has run
    a model here, so no torch thread pool crosses the fork."""
    import pytest  # once here: every child runs it
    here, venv = Path(__file__).resolve().parents[1], Path(sys.prefix).resolve()

    def ours(path):  # this repository's own files; a virtual environment inside it (`make`'s .venv) is not
        path = Path(path).resolve()
        return path.is_relative_to(here) and not path.is_relative_to(venv)

    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as log, tempfile.TemporaryFile() as imported:
        gc.freeze()  # the child's collections skip what it inherits: no pass over torch's objects, no copy of their pages
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 3  # pytest's internal error, if it cannot even start
            try:
                os.setsid()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                os.chdir(copy)
                os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
                sys.dont_write_bytecode = True
                sys.path[:] = [str(copy)] + [p for p in sys.path if not (p and ours(p))]
                for name, module in list(sys.modules.items()):
                    where = getattr(module, "__file__", None)
                    if where and ours(where):
                        del sys.modules[name]
                sys.modules["__main__"] = type(sys)("__main__")  # not this tool: what a spawned child would import
                code = int(pytest.main(args))
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os.write(imported.fileno(), " ".join(n for n in WARM_MODULES if n in sys.modules).encode())
                finally:
                    os._exit(code)
        gc.unfreeze()  # here only: the child never gets this far
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return None, ""
                time.sleep(0.02)
        except BaseException:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        imported.seek(0)
        for name in imported.read().decode().split():
            __import__(name)
        log.seek(0)
        return os.waitstatus_to_exitcode(status), log.read().decode("utf-8", "replace")


def make_copy(root, files, into):
    """A copy of the repository's files in `into`/<name>, with the shared folder beside it when there is one."""
    copy = into / root.name
    for rel in files:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).is_symlink():
            os.symlink(os.readlink(root / rel), copy / rel)
        else:
            shutil.copy2(root / rel, copy / rel)
    shared = root.parent / "shared"
    if shared.is_dir():
        (into / "shared").symlink_to(shared)  # read by the tests that check quotes against their sources
    return copy


FIRST_FILES = 3  # a mutant's mapped tests in the first test files (those of its fastest tests) run on their own first


def stages(ids):
    """The mapped tests (fastest first) in two runs: those in the first FIRST_FILES test files they come from, then the
    rest, only when the first pass. Most mutants die in the first run, without collecting every other test file."""
    files = list(dict.fromkeys(test.split("::")[0] for test in ids))
    first = set(files[:FIRST_FILES])
    head, tail = [t for t in ids if t.split("::")[0] in first], [t for t in ids if t.split("::")[0] not in first]
    return [head, tail] if tail else [head]


def mutate_file(copy, rel, generated, mutants, tests, timeout, out, line_map=None, equivalent=None, warm=False,
                checked=None, importers=(), confirm=None, screen=None):
    """Run each mutant of one file; the file in the copy is restored after each. Returns the file's result.

    `tests` are the file's import-level covering tests. With `line_map` (a LineMap) each mutant runs only the tests
    that ran its lines (none: it survives unrun), and falls back to `tests` when the map has no entry for the file or
    its line ran outside any test; a module constant's also runs the tests of the files that import it (`importers`,
    as far as the map knows them). `confirm` (test files, their time limit, the ids among them to leave out): a mutant
    that survives its mapped tests, or that no mapped test runs, then runs them; one they catch is also listed under
    "outside_map". A mutant `equivalent` lists is counted as such and not run. A test that fails with a mutant is run
    once without any (`checked`, test id -> it passes then, shared between files): one that fails there too kills
    nothing, and the mutant's tests run again without it. `warm`: run_tests forks its pytest. `screen` (test ids, their time
    limit): a mutant runs them first, and its other tests only when they pass."""
    result = {"file": rel, "tests": tests, "generated": generated, "run": len(mutants), "killed": [], "survived": [],
              "timed_out": [], "equivalent": []}
    if confirm is not None:
        result["outside_map"] = []
    lines, why = line_map.entry(copy, rel) if line_map is not None else (None, None)
    if why:
        result["map"] = f"{why}: import-level tests"
    importer_lines = [] if lines is None or not any(m.at_import for m in mutants) else [  # (each hashed once)
        entry for entry in (line_map.entry(copy, user)[0] for user in importers) if entry is not None]
    plan = []  # (mutant, mapped tests or None: the file's tests, the mapped tests' time limit)
    wholes = 0
    for mutant in mutants:
        if equivalent is not None and equivalent.holds(copy, mutant):
            result["equivalent"].append(mutant.label())
            continue
        if lines is None:
            plan.append((mutant, None, None))
            continue
        chosen, seconds, whole = line_map.tests_for(lines, mutant, importer_lines)
        wholes += whole
        if chosen or confirm is not None or screen:
            plan.append((mutant, chosen, timeout if timeout is not None else 3 * seconds + GRACE))
        else:
            result["survived"].append(mutant.label() + UNRUN)
    if wholes:
        result["map"] = (f"{wholes} mutant(s) on module constants or lines also run outside any test: the tests that run "
                         "any line of the file")
    checked = {} if checked is None else checked
    first, first_limit = ([screen[0]], screen[1]) if screen else ([], 0.0)
    file_run = {}  # the file's tests, run once without any mutant when first needed: "limit", or "unusable"

    def file_tests_usable():
        if file_run:
            return "limit" in file_run
        if not tests:
            result["note"] = "no test file covers it"
            file_run["unusable"] = True
            return False
        state, seconds, failed = run_tests(copy, tests, timeout, every=True, warm=warm)
        result["baseline_seconds"] = round(seconds, 1)
        if state == "timeout" or state == "failed" and not failed:
            result["note"] = f"its tests {'time out' if state == 'timeout' else 'fail'} without any mutant: skipped"
            file_run["unusable"] = True
            return False
        if failed:  # broken before any mutant: they would kill every mutant and prove nothing
            result["left_out"] = failed
            result["note"] = f"{len(failed)} test(s) fail without any mutant, left out: {', '.join(failed)}"
            checked.update((test, False) for test in failed)
        file_run["limit"] = timeout if timeout is not None else 3 * seconds + GRACE
        file_run["left_out"] = failed
        return True

    target = copy / rel
    original = target.read_bytes()
    dropped = set()  # tests that failed with a mutant and without one

    def run(ids, limit, deselected=()):
        try:
            return run_tests(copy, ids, limit, deselected, warm=warm)
        except UsageError:  # pytest found no test of some id (a parameter id it cannot parse back): their files
            if all("::" not in test for test in ids):
                raise
            return run_tests(copy, list(dict.fromkeys(t.split("::")[0] for t in ids)), limit, deselected, warm=warm)

    def attempt(mutant, runs, limit, deselected=()):
        """The mutant's state over `runs` (lists of test ids, each run when the one before passed)."""
        deselected = list(deselected)
        while True:
            try:
                target.write_bytes(mutant.apply(original))
                for stage in runs:
                    state, _, failed = run(stage, limit, deselected)
                    if state != "passed":
                        break
            finally:
                target.write_bytes(original)
            for test in failed:  # a failure proves something only from a test that passes without any mutant
                if test not in checked:
                    checked[test] = run([test], limit)[0] == "passed"
            broken = [test for test in failed if not checked[test]]
            if state != "failed" or not broken:
                return state
            deselected += broken
            dropped.update(broken)

    for i, (mutant, chosen, own_limit) in enumerate(plan, 1):
        label = mutant.label()
        if chosen is None:
            if not file_tests_usable():
                if not tests:
                    result["survived"].append(label)
                continue
            state = attempt(mutant, first + [tests], max(file_run["limit"], first_limit), file_run["left_out"])
        else:
            runs = first + (stages(chosen) if chosen else [])
            state = attempt(mutant, runs, max(own_limit, first_limit)) if runs else "passed"
            if state == "passed" and confirm is not None:
                confirm_files, confirm_limit, confirm_left_out = confirm
                state = attempt(mutant, [confirm_files], confirm_limit, confirm_left_out)
                if state != "passed":
                    result["outside_map"].append(label)
            if state == "passed" and not chosen:
                label += UNRUN
        bucket = {"failed": "killed", "passed": "survived", "timeout": "timed_out"}[state]
        result[bucket].append(label)
        print(f"  [{i}/{len(plan)}] {bucket.replace('_', ' ')}: {label}", file=out, flush=True)
    if dropped:
        result["left_out"] = result.get("left_out", []) + sorted(dropped)
        add_note(result, f"{len(dropped)} test(s) that failed with a mutant fail without one too, not counted: "
                         f"{', '.join(sorted(dropped))}")
    rank = {mutant.label(): i for i, mutant in enumerate(mutants)}
    for bucket in ("killed", "survived", "timed_out", "equivalent") + (("outside_map",) if confirm is not None else ()):
        result[bucket].sort(key=lambda label: rank[label.removesuffix(UNRUN)])
    return result


class Equivalents:
    """The mutants judged equivalent (they change no output): not run, counted apart. One a line, four fields
    separated by tabs: the file, the mutation as this tool prints it (`` `<` -> `<=` ``), the text of the line it
    edits (stripped), and why it is equivalent. Lines starting with # are comments. A text that more than one line of
    the file holds names none of them (`return obj` in two functions: which one was judged?): those mutants run; give
    the judged line a text of its own (a comment will do). Where the line holds two mutants of one label (two `<` in
    `a < b < c`), the mutation ends in @COL, the 1-based column of the token it edits, and names that one only."""

    def __init__(self, path):
        self.entries, self.sources = set(), {}
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 4 or not all(f.strip() for f in fields):
                raise UsageError(f"{path}:{number}: want four tab-separated fields: file, mutation, line text, reason")
            self.entries.add(tuple(f.strip() for f in fields[:3]))

    def entry(self, root, mutant):
        """The entry (file, mutation, line text) that names the mutant, or None."""
        if mutant.path not in self.sources:
            raw = (root / mutant.path).read_bytes()
            self.sources[mutant.path] = raw.decode("utf-8", "replace").splitlines(), raw
        lines, raw = self.sources[mutant.path]
        text = lines[mutant.line - 1].strip()
        if sum(line.strip() == text for line in lines) != 1:
            return None
        column = mutant.start - raw.rfind(b"\n", 0, mutant.start)
        named = [(mutant.path, what, text) for what in (mutant.what, f"{mutant.what}@{column}")]
        return next((entry for entry in named if entry in self.entries), None)

    def holds(self, root, mutant):
        return self.entry(root, mutant) is not None


def add_note(result, said):
    """The file's note, said after any it has."""
    result["note"] = f"{result['note']}; {said}" if "note" in result else said


def summary_lines(result):
    sampled = f" (ran {result['run']}, --max)" if result["run"] < result["generated"] else ""
    if "in_file" in result:
        sampled += f" (on changed lines, of {result['in_file']} in the file)"
    outside = f" ({len(result['outside_map'])} outside the map)" if result.get("outside_map") else ""
    lines = [f"{result['file']}: generated {result['generated']}{sampled}, killed {len(result['killed'])}, "
             f"survived {len(result['survived'])}, timed out {len(result['timed_out'])}{outside}, "
             f"equivalent {len(result['equivalent'])}" + "".join(f" ({result[k]})" for k in ("map", "note") if k in result)]
    lines += [f"  survived {label}" for label in result["survived"]]
    lines += [f"  caught outside the map {label}" for label in result.get("outside_map", ())]
    return lines


def written_by_us(path, kind):
    """The JSON object in `path` when this tool wrote it (its "kind" is `kind`), else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == kind else None


def check_output(path, force, inputs, kind=RESULTS_KIND, option="--json"):
    """Refuse what the contract's output_file refuses (a folder, an input also through a link, an existing file
    without force), except that a file this tool wrote (of this `kind`) may be replaced without force."""
    ours = path.is_file() and written_by_us(path, kind) is not None
    try:
        output_file(path, force or ours, inputs=inputs, option=option)
    except OutputRefused as exc:
        raise UsageError(str(exc)) from None


def write_json(path, data, indent=1):
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_text(json.dumps(data, indent=indent) + "\n", encoding="utf-8")
    os.replace(temporary, path)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # bad usage: one line, exit 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class Terminated(Exception):
    """SIGTERM arrived: unwind like Ctrl-C, so that the temporary copy is removed and the mutant's pytest killed."""


def _terminated(signum, frame):
    raise Terminated


def main(argv=None):
    parser = Parser(prog="mutate.py", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="Python files to mutate (default: those changed since --base)")
    parser.add_argument("--base", default="main", help="git revision the change is measured from (default main)")
    parser.add_argument("--lines", choices=("changed", "all"),
                        help="mutate only the lines changed since --base, or all of each file "
                             "(default: changed without FILE, all with FILE)")
    parser.add_argument("--tests", nargs="+", help="test files or node ids to run instead of the covering tests")
    parser.add_argument("--list", action="store_true", help="list the mutants (and the covering tests); run nothing")
    parser.add_argument("--max", type=int, help="at most N mutants per file, spread evenly over it")
    parser.add_argument("--seed", help="--max: draw the N mutants of each file at random, from this seed")
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: 3x the unmutated run + 30)")
    parser.add_argument("--json", type=Path, help="write the results to this JSON file")
    parser.add_argument("--force", action="store_true", help="let --json replace a file this tool did not write")
    parser.add_argument("--build-map", type=Path, metavar="MAP",
                        help="run the tests (--tests, default tests/) under coverage and write the line map to MAP; "
                             "an existing map of ours is updated with those tests")
    parser.add_argument("-n", type=int, default=0, metavar="WORKERS", help="--build-map: pytest-xdist workers (default 0)")
    parser.add_argument("--map", type=Path, help="run each mutant's tests from this line map (made by --build-map)")
    parser.add_argument("--confirm", action="store_true",
                        help="--map: a mutant its mapped tests let through (or that none runs) then runs the test files "
                             "nearest its file; those it is caught by are listed apart")
    parser.add_argument("--screen", nargs="+", metavar="TEST",
                        help="--map: run each mutant against these tests first, and its mapped tests only when they pass")
    parser.add_argument("--warm", action="store_true",
                        help="run each mutant's pytest in a child forked from this process, torch already imported, "
                             "not in a fresh interpreter")
    parser.add_argument("--equivalent", type=Path, default=EQUIVALENT,
                        help="the list of equivalent mutants, not run (default tools/mutate_equivalent.txt)")
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminated)  # `timeout` or a closed session: clean up as on Ctrl-C
    try:
        if args.max is not None and args.max < 1:
            raise UsageError("--max must be 1 or more")
        if args.seed is not None and args.max is None:
            raise UsageError("--seed draws the mutants --max takes: give --max N too")
        if args.timeout is not None and not args.timeout > 0:
            raise UsageError("--timeout must be more than 0 seconds")
        root = Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
        if args.build_map is not None:
            if args.files or args.map or args.list or args.warm:
                raise UsageError("--build-map takes no FILE, --map, --list or --warm: it only runs the tests and writes the map")
            if args.n < 0:
                raise UsageError("-n must be 0 or more")
            check_output(args.build_map, args.force, [], kind=MAP_KIND, option="--build-map")
            build_map(root, args.build_map.resolve(), args.tests, args.n, sys.stdout)
            return 0
        if args.confirm and args.map is None:
            raise UsageError("--confirm checks what survives the line map's tests: it needs --map")
        if args.screen and args.map is None:
            raise UsageError("--screen runs before each mutant's mapped tests: it needs --map")
        line_map = LineMap(args.map) if args.map is not None else None
        equivalent = Equivalents(args.equivalent) if args.equivalent.exists() or args.equivalent != EQUIVALENT else None
        files = [os.path.relpath(Path(f).resolve(), root) for f in args.files] if args.files else changed_files(root, args.base)
        for rel in files:
            if rel.startswith("..") or not (root / rel).is_file() or not rel.endswith(".py"):
                raise UsageError(f"{rel}: not a Python file in the repository {root}")
        if not files:
            raise UsageError(f"no Python file under {', '.join(SOURCE_DIRS)} differs from {args.base}: name the files")
        if args.json is not None:
            check_output(args.json, args.force, [root / rel for rel in files])
        lines = args.lines or ("all" if args.files else "changed")
        fork = fork_point(root, args.base) if lines == "changed" else None
        everything = repository_files(root)
        plan = []
        for rel in files:
            found = find_mutants(root, rel)
            in_file = len(found)
            if fork is not None:
                found = on_lines(found, changed_lines(root, fork, rel))
            seed = None if args.seed is None else f"{args.seed}:{rel}"
            plan.append((rel, len(found), in_file, spread(found, args.max, seed),
                         args.tests or covering_tests(root, everything, rel)))
        if args.list:
            for rel, generated, in_file, mutants, tests in plan:
                shown = f"{len(mutants)} of {generated}" if len(mutants) < generated else f"{generated}"
                where = f" on changed lines (of {in_file} in the file)" if fork is not None else ""
                print(f"{rel}: {shown} mutants{where}; tests: {' '.join(tests) or 'none'}")
                for mutant in mutants:
                    print(f"  {mutant.label()}")
            return 0
        results = []
        settings = {"base": None if args.files and fork is None else args.base, "lines": lines, "max": args.max, "seed": args.seed,
                    "timeout": args.timeout, "map": None if args.map is None else str(args.map), "confirm": args.confirm,
                    "screen": args.screen, "warm": args.warm}
        checked = {}  # test id -> it passes without any mutant
        users = reference_graph(root, tuple(rel for rel in everything if rel.endswith(".py")))
        with tempfile.TemporaryDirectory(prefix="mutate-") as scratch:
            copy = make_copy(root, everything, Path(scratch))
            screen = None
            if args.screen:
                state, seconds, failed = run_tests(copy, args.screen, args.timeout, every=True, warm=args.warm)
                if state != "passed":
                    said = "it timed out" if state == "timeout" else f"{', '.join(failed) or 'it'} failed"
                    raise UsageError(f"--screen: {said} without any mutant: name tests that pass")
                screen = (args.screen, args.timeout if args.timeout is not None else 3 * seconds + GRACE)
            for rel, generated, in_file, mutants, tests in plan:
                print(f"{rel}: {len(mutants)} mutants to run, tests: {' '.join(tests) or 'none'}", flush=True)
                importers = sorted(user for user in users.get(rel, ()) if not Path(user).name.startswith("test_"))
                confirm = None
                if args.confirm:
                    nearest = covering_tests(root, everything, rel, nearest=True)
                    known = line_map.of_files(nearest)
                    if known is not None:
                        confirm = (nearest, args.timeout if args.timeout is not None else 3 * known[0] + GRACE, known[1])
                result = mutate_file(copy, rel, generated, mutants, tests, args.timeout, sys.stdout, line_map, equivalent,
                                     args.warm, checked, importers, confirm, screen)
                if fork is not None:
                    result["in_file"] = in_file
                if args.confirm and confirm is None:
                    add_note(result, "--confirm: the line map knows none of the tests nearest to it")
                results.append(result)
                if args.json is not None:
                    write_json(args.json, {"kind": RESULTS_KIND, **settings, "files": results})
        for result in results:
            print("\n".join(summary_lines(result)))
        return 1 if any(result["survived"] for result in results) else 0
    except UsageError as exc:
        print(f"mutate.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Terminated:  # the copy of the working tree and the running mutant's pytest are gone with the stack
        return 143
    except BrokenPipeError:  # `... | head` closed the pipe: nothing more to say there
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
