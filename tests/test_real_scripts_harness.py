"""The real-scripts harness's own logic (benchmarks/real_scripts/), with no network and no fetched file: the manifest's
shape, the one-line twins, the tiny-data makers, the file snapshot that finds a touched user file, the verdicts
against expectations, and the runner's one-line errors."""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, assert_one_line_error

HARNESS = ROOT / "benchmarks" / "real_scripts"
_spec = importlib.util.spec_from_file_location("real_scripts_run", HARNESS / "run.py")  # "run" is too common a name
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)  # puts its folder on sys.path: manifest and datamakers come with it
manifest, datamakers = run.manifest, run.manifest.datamakers


def entry(**fields):
    return {"name": "x", "repo": "o/r", "commit": "0" * 40, "files": ["t.py"], "script": "t.py", "args": [],
            "data": datamakers.nothing, **fields}


def test_the_manifest_holds_twenty_real_scripts_each_with_a_verdict_to_check():
    manifest.validate(manifest.ENTRIES)
    assert len({(e["repo"], e["script"]) for e in manifest.ENTRIES}) >= 20
    twins = [t for e in manifest.ENTRIES for t in e.get("twins", [])]
    assert len(twins) >= 15 and all(t["find"] != t["replace"] for t in twins)


@pytest.mark.parametrize("bad, says", [
    (entry(extra=1), "unknown fields ['extra']"),
    (entry(script="u.py"), "is not among its files"),
    (entry(commit="abc"), "40 hex digits"),
    (entry(data="maker"), "a data maker"),
    (entry(bug="a string"), "bug is"),
    (entry(twins=[{"file": "t.py", "find": "a", "replace": "b", "check": "c"}]), "'# BUG:'"),
    (entry(twins=[{"file": "t.py", "find": "a", "replace": "b  # BUG: x"}]), "exactly file, find, replace, check"),
])
def test_validate_names_the_entry_and_what_is_wrong(bad, says):
    with pytest.raises(ValueError, match=f"^x: .*{says.replace('[', '.').replace(']', '.')}"):
        manifest.validate([bad])


def test_validate_refuses_a_name_used_twice():
    with pytest.raises(ValueError, match="named twice"):
        manifest.validate([entry(), entry()])


def test_a_twin_applies_exactly_once_and_leaves_python():
    assert run.apply_twin("a = f(x)\nb = 2\n", "f(x)", "f(0)  # BUG: zero") == "a = f(0)  # BUG: zero\nb = 2\n"
    for text in ("b = 2\n", "f(x) + f(x)\n"):
        with pytest.raises(run.HarnessError, match="occurs [02] times, not once"):
            run.apply_twin(text, "f(x)", "f(0)  # BUG: zero")
    with pytest.raises(run.HarnessError, match="breaks the file's syntax: '\\(' was never closed at line 1"):
        run.apply_twin("x = f(a, b)\n", "x = f(a", "x = f(a * 2  # BUG: the comment swallows the line's end")


def test_the_snapshot_finds_changed_removed_and_created_files(tmp_path):
    for name in ("keep", "change", "remove"):
        (tmp_path / "out" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "out" / name).write_bytes(b"user's bytes")
    before = run.snapshot(tmp_path)
    (tmp_path / "out" / "change").write_bytes(b"")  # truncated, as open(path, 'wb') would
    (tmp_path / "out" / "remove").unlink()
    (tmp_path / "new").write_text("log")
    assert run.compare(before, run.snapshot(tmp_path)) == {
        "changed": ["out/change (12 -> 0 bytes)"], "removed": ["out/remove"], "created": ["new"]}


def test_the_results_file_is_never_overwritten_without_force(tmp_path):
    path = tmp_path / "results.json"
    run.write_results(path, {"results": [1]}, force=False)
    with pytest.raises(run.HarnessError, match="exists: .* --force"):
        run.write_results(path, {"results": [2]}, force=False)
    assert json.loads(path.read_text()) == {"results": [1]}
    run.write_results(path, {"results": [3]}, force=True)
    assert json.loads(path.read_text()) == {"results": [3]}


def result(**checks):
    return {"rc": 1 if "fail" in checks.values() else 0, "checks": checks, "error": None}


def test_judge_counts_false_fails_and_unexplained_warns():
    verdict = run.judge(entry(warn={"init_scale": "a pretrained-style init"}),
                        result(a="pass", b="fail", c="warn", init_scale="warn"))
    assert (verdict["ok"], verdict["false_fail"], verdict["false_warn"]) == (False, ["b"], ["c"])
    assert run.judge(entry(), result(a="pass", b="skip"))["ok"]


def test_judge_takes_the_fail_that_shows_a_real_bug_as_true_and_others_as_false():
    bug = entry(bug={"why": "sees its answers", "checks": ["answers"]})
    verdict = run.judge(bug, result(answers="fail", a="pass"))
    assert verdict["ok"] and verdict["bug_caught"] and not verdict["false_fail"]
    verdict = run.judge(bug, result(answers="pass", a="fail"))
    assert (verdict["ok"], verdict["bug_caught"], verdict["false_fail"]) == (False, False, ["a"])


def test_judge_expects_exit_2_where_the_script_never_steps_and_reports_other_errors():
    never_steps = {"rc": 2, "checks": None, "error": "error: the script ended without an optimizer step"}
    assert run.judge(entry(exit="no optimizer"), never_steps)["ok"]
    assert run.judge(entry(exit="no optimizer"), result(a="pass"))["error"].startswith("expected exit 2")
    assert run.judge(entry(), never_steps) == {"ok": False, "false_fail": [], "false_warn": [],
                                               "error": never_steps["error"]}


def test_every_tiny_data_maker_writes_its_layout(tmp_path):
    for made in {e["data"] for e in manifest.ENTRIES}:
        workdir = tmp_path / made.__name__ / "a" / "b" / "c"
        workdir.mkdir(parents=True)
        made(workdir)
    shakespeare = tmp_path / "nanogpt_shakespeare_char" / "a" / "b" / "c" / "data" / "shakespeare_char"
    assert np.memmap(shakespeare / "train.bin", dtype=np.uint16, mode="r").max() < 65
    labels = (tmp_path / "mnist_up_one" / "a" / "b" / "data" / "MNIST" / "raw" / "train-labels-idx1-ubyte").read_bytes()
    assert labels[:8] == bytes([0, 0, 8, 1, 0, 0, 0, 64]) and set(labels[8:]) == set(range(10))


def harness(*args):
    return subprocess.run([sys.executable, str(HARNESS / "run.py"), *args], capture_output=True, text=True, timeout=60)


def test_an_unknown_name_is_a_one_line_error():
    proc = harness("--only", "no_such_script")
    assert_one_line_error(proc)
    assert "no entry named no_such_script; the names: nanogpt" in proc.stderr


def test_a_missing_mirror_says_which_fetch_to_run(tmp_path):
    proc = harness("--only", "nanogpt", "--mirrors", str(tmp_path))
    assert_one_line_error(proc)
    assert "call the fetch tool with github:karpathy/nanoGPT" in proc.stderr


def test_an_existing_results_file_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    proc = harness("--only", "nanogpt", "--mirrors", str(tmp_path), "--out", str(tmp_path / "r.json"))
    assert_one_line_error(proc)
    assert "--force" in proc.stderr and (tmp_path / "r.json").read_text() == "{}"


def test_the_totals_line_counts_what_done_when_counts():
    files = {"changed": [], "removed": [], "created": []}
    healthy = {"checks": {"a": "fail"}, "safe": True, "files": files}
    results = [
        {"name": "s1", "healthy": healthy, "verdict": {"false_fail": ["a"], "false_warn": ["b", "c"]},
         "twins": [{"caught": True, "safe": True}, {"caught": False, "safe": False}]},
        {"name": "s2", "healthy": dict(healthy, checks=None), "verdict": {"false_fail": [], "false_warn": []},
         "twins": []},
        {"name": "s3", "healthy": healthy, "verdict": {"false_fail": [], "false_warn": [], "bug_caught": True},
         "twins": []},
    ]
    assert run.totals(results) == ("3 entries, 2 with verdicts: 1 false FAILs in 1 scripts, 2 false WARNs; real bugs "
                                   "caught 1/1; twins caught 1/2; SAFETY: s1")


def test_the_cpu_seconds_count_the_doctors_child_and_not_the_wait(tmp_path):
    """The doctor runs the script in a supervised child: its CPU time counts; time spent asleep does not (a loaded
    machine adds wall seconds, not CPU seconds)."""
    fake = tmp_path / "doctor.py"
    fake.write_text("import json, subprocess, sys, time\n"
                    "subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time() + 0.4\\n"
                    "while time.process_time() < end: pass'])\n"
                    "time.sleep(0.5)\n"
                    "print(json.dumps({'checks': [{'id': 'a', 'status': 'pass', 'summary': 's'}]}))\n")
    result = run.run_doctor(fake, tmp_path, tmp_path / "t.py", [], 60, None)
    assert result["checks"] == {"a": "pass"} and result["seconds"] >= 0.9, result
    assert 0.4 <= result["cpu_seconds"] < result["seconds"] - 0.4, result


def test_a_run_of_every_entry_leaves_out_those_without_a_mirror_and_a_named_one_is_refused(tmp_path):
    first, second, *rest = run.manifest.ENTRIES
    (tmp_path / second["repo"].replace("/", "+") / "repo" / ".git").mkdir(parents=True)
    (tmp_path / second["repo"].replace("/", "+") / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    present, missing = run.with_mirrors([first, second, *rest], tmp_path, None)
    assert [entry["name"] for entry, _ in present] == [second["name"]] + [e["name"] for e in rest if e["repo"] == second["repo"]]
    assert first["name"] in missing and second["name"] not in missing
    with pytest.raises(run.HarnessError, match=f"github:{first['repo']}"):
        run.with_mirrors([first, second], tmp_path, first["name"])
    with pytest.raises(run.HarnessError, match="no entry has a mirror"):
        run.with_mirrors([first], tmp_path, None)
