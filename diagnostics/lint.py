"""lint: find silent training bugs in PyTorch source code before anything runs.

Symptom
    The run starts, the loss moves, nothing crashes, and the model still trains badly or not
    at all. Many such bugs are visible in the code itself: a softmax in front of
    CrossEntropyLoss, scheduler.step() before optimizer.step(), a missing zero_grad(), a loss
    summed with its graph, a model left in eval mode after validation.

What it checks
    It parses each Python file or notebook with `ast` (nothing is imported or run; torch need
    not be installed) and applies the rules that `--list-rules` prints; refs/static_analysis.md
    documents each with a bad and a good example, and its measured precision. It follows imports
    and aliases (`import torch.nn.functional as F`, `from torch import nn`), simple assignments
    (`crit = nn.CrossEntropyLoss()`, `out = model(x).softmax(-1)` then `crit(out, y)`),
    `self.x = ...` attributes set once in a class, calls to functions defined in the same file,
    and classes or model factories imported from the other files it is given (`from model import
    Net`). Rules are tuned for precision: when the code leaves a doubt (a helper from a module it
    was not given, a name it cannot trace) the rule stays silent. Its time grows linearly with the
    size of a file.

    The code: this file is the command; diagnostics/trainlint/ (copy it too) holds the rest along
    its path: run.py (files, notebooks, settings), source.py (one parsed file), rules/ (one module
    per topic, registered in registry.py), docs.py (the refs/static_analysis.md page).

Command
    python diagnostics/lint.py train.py src/          # files and folders (*.py, *.ipynb)
    python diagnostics/lint.py train.py --json        # {"findings": [{rule, path, line, message}]}
    python diagnostics/lint.py src/ --select missing-zero-grad,softmax-into-ce
    python diagnostics/lint.py src/ --ignore data-write
    python diagnostics/lint.py . --exclude legacy --exclude 'scripts/scratch_*.py'   # gitignore-style
    python diagnostics/lint.py . --include-tests      # also tests/, test_*.py, *_test.py, conftest.py
    python diagnostics/lint.py --list-rules
    # settings: [tool.ml-debug.lint] in pyproject.toml (select, ignore, exclude, per-file-ignores;
    # on Python 3.10, reading them needs the tomli package)

Output
    $ python diagnostics/lint.py tests/data/lint/buggy_classifier.py
    tests/data/lint/buggy_classifier.py:37: softmax-into-ce cross_entropy applies log_softmax itself, so the output of the softmax at line 17 is squashed twice: the gradient vanishes as the model gets confident and training stalls. Pass the raw logits; keep softmax for predictions.
    tests/data/lint/buggy_classifier.py:38: missing-zero-grad this loop calls backward() and optimizer.step() but never zero_grad(): gradients add up across iterations, so every step uses the sum of all past gradients. Call optimizer.zero_grad(set_to_none=True) once per optimizer step.
    tests/data/lint/buggy_classifier.py:40: loss-accumulated-with-graph adding loss (a tensor with its autograd graph) to total on every iteration chains every step's graph onto total (backward() at line 38 freed their activations, not the graph): memory creeps up with the steps, and total stays a tensor with a graph wherever it is used later. Use loss.item() (or loss.detach()) here.
    tests/data/lint/buggy_classifier.py:42: eval-mode-not-restored this leaves model in eval mode and the training loop never calls model.train() again: later steps train with dropout off and frozen batch-norm statistics. Call model.train() at the start of each epoch or right after evaluating.
    lint: 4 finding(s) in 1 file(s)

How to read it
    One line per finding: `path:line: rule message` (in a notebook `path:cell N:line:`). The
    message says what goes wrong at run time and what to write instead. Exit code 0 when clean,
    1 when something was found, 2 when nothing could be read (a file that cannot be read or
    parsed, a Python 2 file, a FIFO or device is reported on stderr in one line and skipped).
    When a finding is intended, silence it on that line with a trailing `# noqa: <rule>`
    (several: `# noqa: rule-a, rule-b`; a bare `# noqa` silences every rule), for a whole run
    with `--ignore <rule>`, or for some paths with `per-file-ignores` in pyproject.toml. The test
    files a folder holds are left out (their findings are mostly deliberate: a few losses kept to
    compare, a forward pass checked with autograd on), and stderr says how many; `--include-tests`
    lints them, and a test file or tests folder named on the command line is linted. `--exclude`
    and `exclude` are gitignore-style: a name (`legacy`) matches at any depth, a path with a
    slash (`/legacy`, `legacy/*`) from the folder given (or from pyproject.toml), `**` across folders.

Next step
    Fix the line, or confirm the suspicion at run time with the diagnostics in this folder:
    gradient_flow.py (parameters that get no gradient), overfit_one_batch.py (a loop that cannot
    learn), init_loss.py (a loss that starts at the wrong value). Each rule's section in
    refs/static_analysis.md shows the bug and its fix side by side.
"""
import errno
import os
import sys
from pathlib import Path

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # the trainlint package and the contract sit beside this file
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))

from ml_debug_contract import ArgumentParser, OutputRefused, json_text, output_file, single_line  # noqa: E402
from trainlint.docs import render_docs  # noqa: E402
from trainlint.rules import RULES  # noqa: E402
from trainlint.run import Config, lint_paths, lint_source  # noqa: E402

__all__ = ["RULES", "Config", "lint_paths", "lint_source", "render_docs", "main", "run"]


class Parser(ArgumentParser):
    json = False  # --json was asked for: errors come as a JSON object on stdout too

    def error(self, message):
        if self.json:
            print(json_text({"findings": [], "errors": [{"path": "", "message": message}]}, indent=None))
        super().error(message)


def parse_ids(text, parser):
    ids = {word.strip() for word in text.split(",") if word.strip()}
    unknown = sorted(ids - set(RULES))
    if unknown:
        parser.error(f"unknown rule id {', '.join(unknown)}; --list-rules shows them all")
    return ids


DOCS_HEADING = "# Static analysis: silent training bugs in the source"


def write_docs(target, force, parser):
    """Write the reference page; refuse what output_file refuses, but replace a page lint.py wrote without --force."""
    path = Path(target)
    ours = path.is_file() and path.read_text(encoding="utf-8", errors="replace").startswith(DOCS_HEADING)
    try:
        output_file(target, force or ours, option="--write-docs")
    except OutputRefused as exc:
        parser.exit(2, f"lint.py: error: {exc}\n")
    try:
        path.write_text(render_docs(), encoding="utf-8")
    except OSError as error:
        parser.exit(2, f"lint.py: error: cannot write {target}: {error.strerror}\n")


def main(argv=None):
    parser = Parser(prog="lint.py", description="Find silent PyTorch training bugs in source code, without running it.",
                    epilog="Exit 0 clean, 1 findings, 2 nothing could be read. Rules and examples: refs/static_analysis.md. "
                           "Settings: [tool.ml-debug.lint] in pyproject.toml (select, ignore, exclude, per-file-ignores).")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="Python files, notebooks (.ipynb) or folders")
    parser.add_argument("--json", action="store_true", help='print {"findings": [...], "errors": [...]} instead of lines')
    parser.add_argument("--select", metavar="IDS", help="only these rules (comma-separated ids)")
    parser.add_argument("--ignore", metavar="IDS", help="skip these rules (comma-separated ids)")
    parser.add_argument("--exclude", metavar="PATTERN", action="append", default=[],
                        help="leave out paths matching this gitignore-style pattern below the folders given (a name "
                             "matches at any depth: --exclude tests --exclude 'legacy/*'); repeatable")
    parser.add_argument("--include-tests", action="store_true",
                        help="lint the test files a folder holds too (tests/, test_*.py, *_test.py, conftest.py)")
    parser.add_argument("--no-config", action="store_true", help="do not read [tool.ml-debug.lint] from pyproject.toml")
    parser.add_argument("--list-rules", action="store_true", help="print every rule id with its summary")
    parser.add_argument("--write-docs", metavar="FILE", help="write the rules reference page (refs/static_analysis.md)")
    parser.add_argument("--force", action="store_true", help="with --write-docs: replace a file lint.py did not write")
    parser.json = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    if args.list_rules:
        width = max(map(len, RULES))
        print("\n".join(f"{r.id:<{width}}  {r.summary}" for r in RULES.values()))
        return 0
    if args.write_docs:
        write_docs(args.write_docs, args.force, parser)
        return 0
    if not args.paths:
        parser.error("give at least one file or folder to lint")
    try:
        config = Config() if args.no_config else Config.nearest(args.paths)
    except ValueError as error:
        parser.error(str(error))
    if args.select:  # asked for by name on the command line: the file's select and ignore give way
        select = parse_ids(args.select, parser)
    else:
        select = (set(RULES) if config.select is None else config.select) - config.ignore
    select -= parse_ids(args.ignore, parser) if args.ignore else set()

    tests = []
    findings, errors, read = lint_paths(args.paths, select, config, args.exclude, args.include_tests, tests)
    for path, reason, _ in errors:
        print(single_line(f"{path}: skipped: {reason}"), file=sys.stderr)  # one line a file
    if args.json:
        print(json_text({"findings": [f.as_json() for f in findings],
                         "errors": [{"path": p, "message": m} for p, m, _ in errors],
                         **({"tests_left_out": [str(t) for t in tests]} if tests else {})}))
    else:
        for f in findings:
            print(f"{f.where()}: {f.rule} {f.message}")
        if read:
            print(f"lint: {len(findings)} finding(s) in {read} file(s)", file=sys.stderr)
    if tests:
        print(f"lint: {len(tests)} test file(s) left out (--include-tests lints them)", file=sys.stderr)
    if not read:
        return 2 if any(bad for _, _, bad in errors) else 0  # a folder of tests only: nothing wrong, nothing read
    return 1 if findings else 0


def run():
    """main() with the endings a command line owes its user: Ctrl-C exits 130 and a closed or full stdout
    (`| head`, /dev/full) ends the run, both without a traceback."""
    try:
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt:
        os._exit(130)  # at once: tearing down a big file's syntax tree object by object takes seconds
    except BrokenPipeError:
        code = 0  # the reader has what it wanted
    except OSError as error:
        if error.errno != errno.ENOSPC:  # a full disk or /dev/full; anything else is not about the output
            raise
        print(f"lint.py: error: cannot write the output: {error.strerror}", file=sys.stderr)
        code = 2
    else:
        return code
    try:  # drop what is left in the buffer, so that exiting does not try to write it again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return code


if __name__ == "__main__":
    sys.exit(run())
