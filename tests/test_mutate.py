"""tools/mutate.py on a tiny repository of its own: a mutant killed, one surviving, nothing of the user's touched."""
import json
import os
import subprocess
import sys
import time

import pytest

import mutate as mutate_tool
from conftest import ROOT

MUTATE = ROOT / "tools" / "mutate.py"
CALC = '''"""A verdict with a threshold."""
LIMIT = 10


def verdict(x):
    if x > LIMIT:
        return "fail"
    return "pass"
'''
# 12 and 3 are far from the limit: the test kills a dropped return and a softer verdict, and lets a
# nudged limit (10 -> 11) and a relaxed comparison (> -> >=) through
TEST = '''import calc


def test_verdict():
    assert calc.verdict(12) == "fail"
    assert calc.verdict(3) == "pass"
'''


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TEST)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "calc")
    return root


def mutate(repo, *args):
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # the tiny repository's tests need no plugin: a faster start
    return subprocess.run([sys.executable, str(MUTATE), *map(str, args)], cwd=repo, capture_output=True, text=True,
                          timeout=300, env=env)


def files(folder):
    """The working tree, byte for byte (.git aside: git may refresh its index)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def test_kills_and_survivors_are_counted_and_the_working_tree_is_left_byte_identical(repo, tmp_path):
    (repo / "report.py").write_text("import calc\n\nprint(calc.LIMIT)\n")  # a file that imports calc: no map to read it from
    before = files(repo)
    out = tmp_path / "results.json"
    proc = mutate(repo, "calc.py", "--json", out)
    assert proc.returncode == 1, proc.stderr  # a mutant survived
    assert files(repo) == before
    data = json.loads(out.read_text())
    assert (data["base"], data["lines"]) == (None, "all")  # named files, whole: no base
    (result,) = data["files"]
    assert (result["file"], result["tests"], result["generated"]) == ("calc.py", ["tests/test_calc.py"], 4)
    assert "in_file" not in result
    assert result["killed"] == ["calc.py:7: drop the `return` that ends this if-branch", "calc.py:7: 'fail' -> 'warn'"]
    assert result["survived"] == ["calc.py:2: 10 -> 11", "calc.py:6: `>` -> `>=`"]
    assert result["timed_out"] == []
    assert "calc.py: generated 4, killed 2, survived 2, timed out 0" in proc.stdout


def test_a_test_that_pins_the_boundary_kills_the_survivors(repo, tmp_path):
    (repo / "tests" / "test_calc.py").write_text(TEST + '\n\ndef test_boundary():\n    assert calc.verdict(11) == "fail"\n'
                                                 '    assert calc.verdict(10) == "pass"\n')
    proc = mutate(repo, "calc.py", "--json", tmp_path / "results.json", "--warm")
    assert proc.returncode == 0, proc.stdout
    assert "calc.py: generated 4, killed 4, survived 0, timed out 0" in proc.stdout


def test_list_takes_the_files_changed_since_the_base_and_runs_nothing(repo):
    git(repo, "checkout", "-q", "-b", "work")
    (repo / "other.py").write_text("def f(x):\n    return not x\n")
    proc = mutate(repo, "--list")
    assert proc.returncode == 2 and "no Python file" in proc.stderr  # other.py is outside diagnostics/, ml_debug/, tools/
    (repo / "tools").mkdir()
    (repo / "tools" / "new.py").write_text("def f(x):\n    return 1 if not x else 2\n")
    proc = mutate(repo, "--list", "--tests", "tests/test_calc.py")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["tools/new.py: 2 mutants on changed lines (of 2 in the file); tests: tests/test_calc.py",
                                        "  tools/new.py:2: swap the branches of `... if ... else ...`",
                                        "  tools/new.py:2: drop `not`"]


def test_help_exits_0(repo):
    proc = mutate(repo, "--help")
    assert proc.returncode == 0 and "--max" in proc.stdout


@pytest.mark.hostile
@pytest.mark.parametrize("args, says", [
    (["missing.py"], "not a Python file in the repository"),
    (["calc.py", "--max", "0"], "--max must be 1 or more"),
    (["calc.py", "--seed", "1"], "give --max N too"),
    (["calc.py", "--timeout", "0"], "--timeout must be more than 0"),
    (["calc.py", "--confirm"], "it needs --map"),
    (["--base", "no-such-branch"], "git merge-base"),
    (["calc.py", "--json", "calc.py"], "is the input"),
    (["calc.py", "--json", "notes.json"], "exists; pass --force"),
    (["calc.py", "--json", "tests"], "is not a regular file"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(repo, args, says):
    (repo / "notes.json").write_text('{"mine": true}\n')
    before = files(repo)
    proc = mutate(repo, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert says in lines[0], lines[0]
    assert files(repo) == before


def test_force_replaces_a_json_file_and_a_later_run_replaces_its_own(repo):
    out = repo / "notes.json"
    out.write_text('{"mine": true}\n')
    assert mutate(repo, "calc.py", "--json", out, "--max", "2", "--force", "--warm").returncode == 1  # one of its two survives
    (result,) = json.loads(out.read_text())["files"]
    assert (result["generated"], result["run"], result["survived"]) == (4, 2, ["calc.py:6: `>` -> `>=`"])
    assert mutate(repo, "calc.py", "--json", out, "--max", "2", "--warm").returncode == 1


def test_max_spreads_the_mutants_over_the_file(repo):
    """The middle mutant of each half: not the file's first, which every sample would otherwise share."""
    proc = mutate(repo, "calc.py", "--list", "--max", "2")
    assert proc.stdout.splitlines() == ["calc.py: 2 of 4 mutants; tests: tests/test_calc.py", "  calc.py:6: `>` -> `>=`",
                                        "  calc.py:7: 'fail' -> 'warn'"]


def test_max_with_a_seed_draws_the_mutants_at_random_and_the_same_seed_draws_the_same():
    """An even spread picks again much of what an earlier spread picked (--max 3's midpoints, at 1/6, 1/2 and 5/6 of a
    file, were among session 18's --max 6 picks, and session 21's sample shared 157 of its 212 killed mutants with
    earlier samples): a measurement draws anew."""
    mutants = list(range(40))
    drawn = mutate_tool.spread(mutants, 5, "1:calc.py")
    assert drawn == mutate_tool.spread(mutants, 5, "1:calc.py") == sorted(set(drawn)) and len(drawn) == 5
    assert drawn != mutate_tool.spread(mutants, 5, "2:calc.py") and drawn != mutate_tool.spread(mutants, 5)
    assert mutate_tool.spread(mutants[:4], 5, "1:calc.py") == mutants[:4]


def test_lines_changed_keeps_only_the_mutants_on_the_lines_the_change_touched(repo, tmp_path):
    git(repo, "checkout", "-q", "-b", "work")
    (repo / "calc.py").write_text(CALC.replace("LIMIT = 10", "LIMIT = 9"))
    git(repo, "commit", "-q", "-am", "limit")  # a committed change on line 2
    (repo / "calc.py").write_text(CALC.replace("LIMIT = 10", "LIMIT = 9").replace('"fail"', '"fail"  # too big'))
    proc = mutate(repo, "calc.py", "--list", "--lines", "changed")  # and an uncommitted one on line 7; line 6 untouched
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["calc.py: 3 mutants on changed lines (of 4 in the file); tests: tests/test_calc.py",
                                        "  calc.py:2: 9 -> 10", "  calc.py:7: drop the `return` that ends this if-branch",
                                        "  calc.py:7: 'fail' -> 'warn'"]
    assert mutate(repo, "calc.py", "--list").stdout.startswith("calc.py: 4 mutants;")  # a named file: all its lines
    out = tmp_path / "results.json"
    proc = mutate(repo, "calc.py", "--lines", "changed", "--json", out, "--warm")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out.read_text())
    assert (data["base"], data["lines"]) == ("main", "changed")  # named files, their changed lines: measured from main
    (result,) = data["files"]
    assert (result["generated"], result["in_file"], result["survived"]) == (3, 4, ["calc.py:2: 9 -> 10"])
    assert "calc.py: generated 3 (on changed lines, of 4 in the file), killed 2, survived 1" in proc.stdout


def test_without_files_only_the_changed_lines_are_mutated_unless_lines_all(repo):
    (repo / "tools").mkdir()
    gate = ("def gate(x, y):\n    if (x > 1 and\n            y < 2):\n        return 'fail'\n    # a note\n    return y < 9\n"
            "\n\ndef other(z):\n    return z == 0\n")
    (repo / "tools" / "gate.py").write_text(gate)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "gate")
    git(repo, "checkout", "-q", "-b", "work")
    # one hunk of two lines (the condition's second line and the verdict), a deletion alone (the note), line 11 untouched
    (repo / "tools" / "gate.py").write_text(gate.replace("y < 2):\n        return 'fail'", "y < 3):\n        return 'warn'")
                                            .replace("    # a note\n", ""))
    proc = mutate(repo, "--list", "--tests", "tests/test_calc.py")
    assert proc.stdout.splitlines() == [
        "tools/gate.py: 5 mutants on changed lines (of 11 in the file); tests: tests/test_calc.py",
        "  tools/gate.py:2: `and` -> `or`",  # starts on line 2, reaches the changed line 3
        "  tools/gate.py:3: `<` -> `<=`", "  tools/gate.py:3: 3 -> 4",
        "  tools/gate.py:4: drop the `return` that ends this if-branch", "  tools/gate.py:4: 'warn' -> 'pass'"]
    proc = mutate(repo, "--list", "--tests", "tests/test_calc.py", "--lines", "all")
    assert proc.stdout.splitlines()[0] == "tools/gate.py: 11 mutants; tests: tests/test_calc.py"


def test_warm_runs_fork_pytest_and_reach_the_same_verdicts(repo, tmp_path):
    """The verdicts of the fresh run, which test_kills_and_survivors_... pins (one fresh run fewer here: 3 s)."""
    warm = tmp_path / "warm.json"
    before = files(repo)
    proc = mutate(repo, "calc.py", "--warm", "--json", warm)
    assert proc.returncode == 1, proc.stderr
    assert files(repo) == before
    (result,) = json.loads(warm.read_text())["files"]
    assert result["killed"] == ["calc.py:7: drop the `return` that ends this if-branch", "calc.py:7: 'fail' -> 'warn'"]
    assert (result["survived"], result["timed_out"]) == (["calc.py:2: 10 -> 11", "calc.py:6: `>` -> `>=`"], [])


def test_a_warm_child_leaves_the_warm_modules_it_imported_imported_for_the_next(tmp_path):
    """What the first child imported of WARM_MODULES, this process imports before the next fork; what no child imports
    (torch, for tests that never use it) it never pays for. Two stand-ins for torch here, one imported by the test."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_c.py").write_text("import colorsys\n\n\ndef test_c():\n    assert colorsys.rgb_to_hsv(0, 0, 0)\n")
    probe = (f"import sys; sys.path.insert(0, {str(MUTATE.parent)!r}); import mutate\n"
             "mutate.WARM_MODULES = ('colorsys', 'wave')\n"
             "before = [m in sys.modules for m in mutate.WARM_MODULES]\n"
             f"code, _ = mutate.fork_pytest({str(tmp_path)!r}, ['-q', '-p', 'no:cacheprovider', 'tests/test_c.py'], 60)\n"
             "print(before, code, [m in sys.modules for m in mutate.WARM_MODULES])\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert proc.stdout.split("\n")[0] == "[False, False] 0 [True, False]", (proc.stdout, proc.stderr)


SLEEPER = '''import subprocess
import sys

import calc


def test_verdict():
    subprocess.run([sys.executable, "-c", "import os, time; open({pid!r}, 'w').write(str(os.getpid())); time.sleep(600)"])
'''


def test_a_warm_run_past_its_timeout_is_killed_with_its_children(repo, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    (repo / "tests" / "test_calc.py").write_text(SLEEPER.format(pid=str(pid_file)))
    proc = mutate(repo, "calc.py", "--warm", "--max", "1", "--timeout", "2")  # its test starts the sleeper in 0.4 s at load 9
    assert "its tests time out without any mutant: skipped" in proc.stdout, proc.stdout
    assert "killed 0, survived 0, timed out 0" in proc.stdout  # the mutant is not run against tests that cannot pass
    assert_gone(int(pid_file.read_text()), "the timeout")


def assert_gone(pid, after):
    """The process ends within 10 s: killed with the forked pytest's process group, reaped by init a moment later."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the test's child {pid} outlived {after}")


def test_a_mutants_mapped_tests_run_those_of_the_first_three_files_first():
    ids = ["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "d.py::t1", "b.py::t2"]  # fastest first
    assert mutate_tool.stages(ids) == [["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "b.py::t2"], ["d.py::t1"]]
    assert mutate_tool.stages(ids[:4]) == [ids[:4]]


def test_sigterm_removes_the_copy_and_kills_the_running_mutant(repo, tmp_path):
    """`timeout 600 mutate.py ...` ends it with SIGTERM: before, its copy of the working tree stayed in the temp folder."""
    pid_file = tmp_path / "sleeper.pid"
    (repo / "tests" / "test_calc.py").write_text(SLEEPER.format(pid=str(pid_file)))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", TMPDIR=str(scratch))
    proc = subprocess.Popen([sys.executable, str(MUTATE), "calc.py", "--warm", "--max", "1", "--timeout", "60"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for _ in range(300):  # the unmutated run's test starts the sleeper: the copy exists by then
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    assert any(p.name.startswith("mutate-") for p in scratch.iterdir())
    proc.terminate()
    assert proc.wait(timeout=60) == 143, proc.communicate()
    assert not any(p.name.startswith("mutate-") for p in scratch.iterdir())
    assert_gone(int(pid_file.read_text()), "the SIGTERM")


def test_the_nearest_covering_tests_are_those_fewest_modules_away(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "wrap.py").write_text("import calc\n")
    (tmp_path / "tests" / "test_direct.py").write_text("import calc\n")
    (tmp_path / "tests" / "test_named.py").write_text('SCRIPT = "calc.py"\n')
    (tmp_path / "tests" / "test_wrapped.py").write_text("import wrap\n")
    (tmp_path / "tests" / "test_wrap_only.py").write_text("import wrap\n")
    everything = ["calc.py", "wrap.py", "tests/test_direct.py", "tests/test_named.py", "tests/test_wrapped.py",
                  "tests/test_wrap_only.py"]
    assert mutate_tool.covering_tests(tmp_path, everything, "calc.py") == [
        "tests/test_direct.py", "tests/test_named.py", "tests/test_wrap_only.py", "tests/test_wrapped.py"]
    assert mutate_tool.covering_tests(tmp_path, everything, "calc.py", nearest=True) == [
        "tests/test_direct.py", "tests/test_named.py"]
    assert mutate_tool.covering_tests(tmp_path, everything, "wrap.py", nearest=True) == [
        "tests/test_wrap_only.py", "tests/test_wrapped.py"]


def test_a_file_no_test_covers_survives_whole_without_a_run(repo):
    (repo / "lonely.py").write_text(CALC)  # nothing imports or names it
    git(repo, "add", "lonely.py")
    git(repo, "commit", "-q", "-m", "lonely")
    out = repo.parent / "results.json"
    proc = mutate(repo, "lonely.py", "--json", out)
    assert proc.returncode == 1, proc.stderr
    assert "lonely.py: generated 4, killed 0, survived 4, timed out 0, equivalent 0 (no test file covers it)" in proc.stdout
    (result,) = json.loads(out.read_text())["files"]
    assert "baseline_seconds" not in result  # no pytest run at all: with no test named, it would run every test there
