"""Running: files and notebooks to findings, with noqa comments, the files of one run (Project) and the
[tool.ml-debug.lint] settings (Config)."""
import ast
import functools
import gc
import io
import json
import os
import re
import stat
import tokenize
try:
    import tomllib  # Python 3.11 and later
except ModuleNotFoundError:  # Python 3.10: its backport, when installed
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None
from pathlib import Path

from .registry import Finding
from .rules import RULES
from .source import Source


SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "venv"}
TEST_DIRS = {"tests", "test", "testing"}


def test_file(relative):
    """A path (relative to the folder given to lint) holds tests: a tests/ folder, test_*.py, *_test.py, conftest.py.
    Their findings are mostly deliberate (a handful of losses kept to compare, a forward pass checked without
    no_grad), so a folder walk leaves them out unless asked (--include-tests)."""
    parts = relative.parts
    name = parts[-1] if parts else ""
    return bool(TEST_DIRS & set(parts[:-1])) or name.startswith("test_") or name.endswith("_test.py") or \
        name == "conftest.py"


@functools.cache
def pattern_regex(pattern):
    """A gitignore-style pattern as a regular expression over a relative posix path: a pattern without a slash
    names a file or folder at any depth (`tests`, `*_scratch.py`); one with a slash is anchored where it is
    read (`legacy/*`, `/build`); `**` crosses folders (`**/fixtures`, `data/**`); a trailing slash is ignored."""
    pattern = pattern.strip().rstrip("/")
    anchored = "/" in pattern
    pattern = pattern.lstrip("/")
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile(("" if anchored else "(?:.*/)?") + "".join(out) + "(?:/.*)?")


def matches(relative, patterns):
    """relative (a posix path) or a folder above it matches one of the gitignore-style patterns."""
    return any(pattern_regex(p).fullmatch(relative) for p in patterns)


def noqa_comments(source):
    """{line: set of rule ids silenced there}; an empty set silences every rule."""
    found = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            for part in token.string.split("#"):
                head, colon, rest = part.strip().partition(":")
                if head.strip().lower() == "noqa":
                    ids = {word.split()[0] for word in rest.split(",") if word.split()} if colon else set()
                    found[token.start[0]] = ids
    except (tokenize.TokenError, SyntaxError):
        pass  # the file parsed, so this only cuts off comments after a tokenizer quirk
    return found


def lint_source(source, path="<string>", select=None, project=None):
    """The findings for one file's source text, sorted by line. Raises SyntaxError or ValueError
    when the text is not Python, RecursionError or MemoryError when it nests too deeply to analyse.
    project: the Project of the run, through which imported classes of the other files are followed."""
    collecting = gc.isenabled()
    gc.disable()  # a file's syntax tree is millions of objects: the cyclic collector would rescan them all, again and again
    try:
        src = Source(ast.parse(source, filename=path), path, project, source)
        findings = {Finding(r.id, path, node.lineno, message) for r in RULES.values()
                    if select is None or r.id in select for node, message in r.check(src)}
    finally:
        if collecting:
            gc.enable()
    silenced = noqa_comments(source) if findings and "noqa" in source.lower() else {}
    findings = [f for f in findings if silenced.get(f.line) is None or silenced[f.line] and f.rule not in silenced[f.line]]
    return sorted(findings, key=lambda f: (f.line, f.rule, f.message))


def python_files(path):
    """The .py and .ipynb files under a folder (hidden folders, caches and virtualenvs skipped), or the path itself."""
    if not path.is_dir():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        yield from (Path(root) / f for f in sorted(files) if f.endswith((".py", ".ipynb")))


MAX_BYTES = 5_000_000  # our assumption: hand-written Python stays far below (the largest file in the corpora of issue 11 is under 0.5 MB)


def read_python(path):
    """The text of a source file; raises ValueError with a one-line reason when it is not readable text.
    A FIFO, device or socket is refused before it is opened: reading one can block for ever."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ValueError("no such file or folder")
    except OSError as error:
        raise ValueError(error.strerror or type(error).__name__)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file (a FIFO, device or socket): refused")
    if info.st_size > MAX_BYTES:
        raise ValueError(f"{info.st_size / 1e6:.0f} MB, larger than the {MAX_BYTES / 1e6:.0f} MB lint reads: generated, not hand-written code")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(error.strerror or type(error).__name__)
    if b"\0" in data:
        raise ValueError("binary file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "unknown encoding" not in str(error):
            raise ValueError("not UTF-8 text (nor in the encoding its coding line declares)")
        encoding = "utf-8"  # a codec registered at run time (`coding: future_fstrings`) over UTF-8 text
    try:
        return data.decode(encoding)
    except (LookupError, UnicodeDecodeError):
        raise ValueError("not UTF-8 text (nor in the encoding its coding line declares)")


def notebook_source(text):
    """(source, cells, unparsed) for a Jupyter notebook's text: its code cells joined into one module, with IPython
    magics (`%time`, `!pip`, `x = !ls`, `obj?`, `%%bash` cells) blanked and a cell indented as a whole dedented, as
    IPython does; cells[i] is (cell number, line in cell) of line i + 1. Jupyter compiles each cell alone, and so
    does this: a cell that still does not parse is left out (its lines blank), and unparsed lists it as (cell
    number, the parser's SyntaxError, its line counted in the cell); the other cells are linted."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
        codes = [(n, c.get("source", "")) for n, c in enumerate(cells, 1) if c.get("cell_type") == "code"]
        codes = [(n, "".join(code) if isinstance(code, list) else code) for n, code in codes]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise ValueError("not a Jupyter notebook (no list of cells in its JSON)")
    lines, where, unparsed = [], [], []
    for number, code in codes:
        if not isinstance(code, str):
            raise ValueError(f"not a Jupyter notebook (cell {number} has no text)")
        cell = python_lines(code)
        try:
            ast.parse("\n".join(cell) + "\n")
        except SyntaxError as error:
            unparsed.append((number, error))
            cell = [""] * len(cell)
        lines += cell
        where += [(number, line_number) for line_number in range(1, len(cell) + 1)]
    return "\n".join(lines) + "\n", where, unparsed


SHELL_ASSIGNMENT = re.compile(r"(\s*[A-Za-z_][\w\s,]*=\s*)[!%]")  # `files = !ls`, `t = %timeit -o f()`


def python_lines(code):
    """A code cell's lines as Python: each magic line `pass` (or `x = None` for `x = !cmd`), its continuation lines
    blank, the lines of a `%%` cell blank, the cell dedented by its first line's indent."""
    raw = code.splitlines() or [""]
    first = next((line for line in raw if line.strip()), "")
    indent = first[:len(first) - len(first.lstrip())]
    if indent:
        raw = [line[len(indent):] if line.startswith(indent) else line for line in raw]
    magic_cell, continued, statement, out = code.lstrip().startswith("%%"), False, [], []
    for line in raw:
        body, assigned = line.lstrip(), SHELL_ASSIGNMENT.match(line)
        if continued:  # `!pip install a \` goes on on the next line
            continued, line = body.endswith("\\"), ""
        elif magic_cell:
            line = ""
        elif not statement and (body.startswith(("%", "!")) or help_line(body)):
            line = line[:len(line) - len(body)] + "pass" if body else ""
            continued = body.endswith("\\")
        elif not statement and assigned:
            line = assigned.group(1) + "None"
            continued = body.endswith("\\")
        else:  # Python: a line that opens with % or != inside a statement's brackets is no magic
            statement.append(line)
            if complete(statement):
                statement = []
        out.append(line)
    return out


def help_line(body):
    """IPython's `obj?` / `obj??`: an expression and question marks (a line with a comment ending in `?` is Python)."""
    if not body.endswith("?") or "#" in body:
        return False
    try:
        ast.parse(body.rstrip("?"), mode="eval")
    except SyntaxError:
        return False
    return True


LINE_REFERENCE = re.compile(r"(?<!\.py )(?<!\.ipynb )\bline (\d+)\b")  # a line of this file a message names


def in_cells(message, cells, cell):
    """A finding's message with the lines it names in the joined notebook source given by cell, as its location is:
    `line 7` -> `line 5` in the finding's own cell, `cell 3 line 2` in another (a .py file's lines stay as they are)."""
    def where(match):
        number = int(match.group(1))
        if not 0 < number <= len(cells):
            return match.group(0)
        at, line = cells[number - 1]
        return f"line {line}" if at == cell else f"cell {at} line {line}"
    return LINE_REFERENCE.sub(where, message)


def cells_left_out(unparsed):
    """One line on the cells of a notebook that do not parse: the first one's error, the others' numbers."""
    (number, error), rest = unparsed[0], unparsed[1:]
    label = python2(error)
    why = f"Python 2 source ({label})" if label else error.msg
    also = f"; also cell{'s' if len(rest) > 1 else ''} {', '.join(str(n) for n, _ in rest)}" if rest else ""
    return (f"cell {number} does not parse, left out: {why} (cell {number}, line {error.lineno or 1}){also}; the other "
            f"cells were linted")


def complete(lines):
    """The lines end a Python statement: no bracket, string or backslash left open (tokenize reaches the end)."""
    try:
        for _ in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            pass
    except tokenize.TokenError:
        return False
    except (SyntaxError, ValueError):
        return True  # not Python at all: the parse of the whole notebook reports it
    return True


PY2_HINTS = {"Missing parentheses in call to 'print'": "print statement",
             "Missing parentheses in call to 'exec'": "exec statement",
             "multiple exception types must be parenthesized": "except E, e",
             "leading zeros in decimal integer literals": "0777-style octal literal"}


def python2(error):
    """What marks a SyntaxError as Python 2 source (`print statement`), else None."""
    return next((label for hint, label in PY2_HINTS.items() if hint in (error.msg or "")), None)


class Project:
    """The files of one run, so that `from model import Net` in train.py reaches the class in model.py.
    A file is parsed when first needed; a few stay cached, so memory does not grow with the tree."""

    CACHED = 16

    def __init__(self, files):
        self.files = {path.resolve() for path in files if path.suffix == ".py"}
        self.cache = {}

    def source(self, path):
        if path not in self.cache:
            if len(self.cache) >= self.CACHED:
                self.cache.pop(next(iter(self.cache)))
            try:
                text = read_python(path)
                self.cache[path] = Source(ast.parse(text), str(path), self, text)
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                self.cache[path] = None
        return self.cache[path]

    def find(self, importer, dotted):
        """(Source, ClassDef or FunctionDef) for a dotted name imported in the file `importer` (`model.Net`,
        `.nets.build_model`) when it names a class or a module-level function of another file of this run."""
        if not self.files or importer == "<string>":
            return None
        level = len(dotted) - len(dotted.lstrip("."))
        module, _, name = dotted.lstrip(".").rpartition(".")
        here = Path(importer).resolve().parent
        up = [here, *here.parents]
        bases = up[level - 1:level] if level else up[:9]  # `.model`: this folder; `model`: here or a folder above
        parts = module.split(".") if module else []
        for base in bases:
            for candidate in (base.joinpath(*parts).with_suffix(".py") if parts else None,
                              base.joinpath(*parts, "__init__.py")):
                if candidate in self.files:
                    src = self.source(candidate)
                    found = [] if src is None else src.classes.get(name, []) + [
                        f for f in src.functions.get(name, []) if src.parent.get(f) is src.tree]
                    return (src, found[0]) if len(found) == 1 else None
        return None


def lint_paths(paths, select=None, config=None, exclude=(), tests=True, skipped=None):
    """(findings, errors, number of files read) for files and folders; errors are (path, reason, bad):
    bad is False for a Python 2 file, which is skipped, not an error. config: a Config, for per-path rules.
    exclude: gitignore-style patterns, matched below each folder given; tests=False leaves out the test files
    a folder holds (test_file), appended to the list skipped when one is given. A file or a tests folder named
    itself is linted."""
    findings, errors, read = [], [], 0
    files = []
    for given in paths:
        root, found, tested = Path(given), [], []
        for path in python_files(root):
            relative = path.relative_to(root) if path != root else Path(path.name)
            if config is not None and config.excluded(path) or path != root and matches(relative.as_posix(), exclude):
                continue
            (tested if not tests and path != root and root.resolve().name not in TEST_DIRS and test_file(relative)
             else found).append(path)  # a tests folder given by name is linted whole
        if skipped is not None:
            skipped += tested
        if not found and not tested:
            errors.append((given, "no Python files found", True))
        files += found
    project = Project(files)
    for path in files:
        cells = None
        try:
            text = read_python(path)
            chosen = select if config is None else config.rules_for(path, select)
            if path.suffix == ".ipynb":
                source, cells, unparsed = notebook_source(text)
                findings += [Finding(f.rule, f.path, cells[f.line - 1][1], in_cells(f.message, cells, cells[f.line - 1][0]),
                                     cells[f.line - 1][0]) for f in lint_source(source, str(path), chosen)]
                if unparsed:
                    errors.append((str(path), cells_left_out(unparsed), False))
            else:
                findings += lint_source(text, str(path), chosen, project)
            read += 1
        except ValueError as error:
            errors.append((str(path), str(error), True))
        except SyntaxError as error:
            where = f"cell {cells[error.lineno - 1][0]}, line {cells[error.lineno - 1][1]}" \
                if cells and error.lineno and 0 < error.lineno <= len(cells) else f"line {error.lineno}"
            if python2(error):
                errors.append((str(path), f"Python 2 source ({python2(error)}, {where}); lint reads Python 3", False))
            else:
                errors.append((str(path), f"cannot parse: {error.msg} ({where})", True))
        except (RecursionError, MemoryError):
            errors.append((str(path), "nested too deeply to parse or analyse", True))
    return findings, errors, read


class Config:
    """`[tool.ml-debug.lint]` in the pyproject.toml nearest the linted paths (the first one up the tree that
    has the section), the way ruff and flake8 read theirs:

        [tool.ml-debug.lint]
        select = ["softmax-into-ce", "missing-zero-grad"]   # only these rules (default: all)
        ignore = ["torch-load-unsafe"]                      # never these
        exclude = ["legacy", "notebooks/scratch_*.ipynb"]   # paths not linted: gitignore-style, relative to this file
        per-file-ignores = {"tests/*" = ["data-write"]}     # rules skipped in those paths

    `--select` on the command line replaces `select` and `ignore`; `--ignore` adds to `ignore`; `--no-config`
    skips the file. `exclude` and `per-file-ignores` hold whatever the command line says."""

    KEYS = {"select", "ignore", "exclude", "per-file-ignores"}

    def __init__(self, path=None, table=None):
        self.path, table = path, table or {}
        unknown = sorted(set(table) - self.KEYS)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(self.KEYS))})")
        self.select = self._ids(table, "select") if "select" in table else None
        self.ignore = self._ids(table, "ignore")
        self.exclude = self._strings(table.get("exclude", []), "exclude")
        per_file = table.get("per-file-ignores", {})
        if not isinstance(per_file, dict):
            raise ValueError("per-file-ignores must be a table of pattern = [rule ids]")
        self.per_file = {pattern: self._ids(per_file, pattern) for pattern in per_file}

    def _strings(self, value, key):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a list of strings")
        return value

    def _ids(self, table, key):
        ids = set(self._strings(table.get(key, []), key))
        unknown = sorted(ids - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule id {unknown[0]!r} in {key}; --list-rules shows them all")
        return ids

    @classmethod
    def nearest(cls, paths):
        """The config for these paths, from the nearest pyproject.toml with the section; empty when none."""
        start = Path(os.path.commonpath([str(Path(p).resolve()) for p in paths]))
        for folder in [start, *start.parents]:
            candidate = folder / "pyproject.toml"
            if candidate.is_file():
                try:
                    text = read_python(candidate)
                    data = tomllib.loads(text) if tomllib is not None else None
                except ValueError as error:  # (TOMLDecodeError is a ValueError)
                    raise ValueError(f"{candidate}: {error}")
                if data is None:  # Python 3.10 without tomli: a pyproject.toml that does not name us holds no
                    if "ml-debug" not in text:  # settings of ours
                        continue
                    raise ValueError(f"{candidate}: reading its [tool.ml-debug.lint] settings needs Python 3.11 or "
                                     "the tomli package (pip install tomli); --no-config lints without them")
                table = data.get("tool", {}).get("ml-debug", {}).get("lint")
                if table is not None:
                    if not isinstance(table, dict):
                        raise ValueError(f"{candidate}: [tool.ml-debug.lint] must be a table")
                    try:
                        return cls(candidate, table)
                    except ValueError as error:
                        raise ValueError(f"{candidate}: [tool.ml-debug.lint]: {error}")
        return cls()

    def _matches(self, path, pattern):
        try:
            relative = Path(path).resolve().relative_to(self.path.parent).as_posix()
        except ValueError:
            return False
        return matches(relative, [pattern])

    def excluded(self, path):
        return self.path is not None and any(self._matches(path, p) for p in self.exclude)

    def rules_for(self, path, select):
        if self.path is None:
            return select
        return select - set().union(*(ids for pattern, ids in self.per_file.items() if self._matches(path, pattern)))
