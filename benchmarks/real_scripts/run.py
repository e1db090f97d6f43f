"""Run the doctor on real public training scripts, unchanged, and on their planted twins. (Not run in CI.)

    python benchmarks/real_scripts/run.py [--only NAME] [--doctor PATH] [--timeout S] [--out results.json [--force]]

For each entry of manifest.py: read its files at the pinned commit from the `fetch` tool's mirror, lay them out in a
fresh temp folder at their repository paths, write its tiny data there (datamakers.py), plant the user's files (1 MB
each where the script would save), hash every file, run `python diagnostics/doctor.py --script SCRIPT --json -- ARGS`
from the script's working folder, and hash again: a file that was there before and is changed or gone afterwards is a
SAFETY failure. Then each planted twin the same way, patched by its one-line find/replace: its check must FAIL.
Prints one row per entry (README.md says what the columns mean) and, with --out, writes every check's status.
"""
import argparse
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import manifest  # noqa: E402  (beside this file)

ROOT = HERE.parents[1]
MIRRORS = Path("/work/.mirror")
SITE = Path.home() / ".cache" / "ml-debug" / "real-scripts-site"
USER_FILE_BYTES = 1 << 20


class HarnessError(Exception):
    """Bad input or a missing mirror: one line, exit code 2."""


def git_dir(mirrors, repo):
    """The bare git directory the `fetch` tool made for repo, or a HarnessError saying which fetch to run."""
    base = mirrors / repo.replace("/", "+") / "repo"
    for candidate in (base / ".git", base):
        if (candidate / "HEAD").is_file():
            return candidate
    raise HarnessError(f"no mirror of {repo} under {mirrors}: call the fetch tool with github:{repo}")


def read_files(gitdir, repo, commit, paths):
    """{path: bytes} of paths at commit (git show), or a HarnessError naming what is missing."""
    files = {}
    for path in paths:
        proc = subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{commit}:{path}"], capture_output=True)
        if proc.returncode:
            raise HarnessError(f"{repo}@{commit[:12]} has no {path} in {gitdir}: call the fetch tool with github:{repo} "
                               "(a newer snapshot may lack the pinned commit: then pin the one it has)")
        files[path] = proc.stdout
    return files


def apply_twin(text, find, replace):
    """text with find replaced by replace; find must occur exactly once, and the result must still be Python."""
    count = text.count(find)
    if count != 1:
        raise HarnessError(f"twin find string occurs {count} times, not once: {find!r}")
    patched = text.replace(find, replace)
    try:
        compile(patched, "twin", "exec")
    except SyntaxError as exc:
        raise HarnessError(f"twin {replace!r} breaks the file's syntax: {exc.msg} at line {exc.lineno}") from None
    return patched


def snapshot(root):
    """{relative path: (sha256, bytes)} of every file under root."""
    return {str(p.relative_to(root)): (hashlib.sha256(data).hexdigest(), len(data))
            for p in sorted(root.rglob("*")) if p.is_file() for data in [p.read_bytes()]}


def compare(before, after):
    """What happened to the files: changed ones (with their sizes before and after) and removed ones were there
    before (a SAFETY failure); created ones are new."""
    return {"changed": [f"{p} ({before[p][1]} -> {after[p][1]} bytes)" for p in sorted(before)
                        if p in after and after[p] != before[p]],
            "removed": sorted(p for p in before if p not in after),
            "created": sorted(p for p in after if p not in before)}


def write_results(path, results, force):
    """Write the JSON results; an existing file is kept unless force."""
    if path.exists() and not force:
        raise HarnessError(f"{path} exists: name another file or pass --force to overwrite it")
    path.write_text(json.dumps(results, indent=2) + "\n")


def judge(entry, run):
    """Healthy-run verdict against the entry's expectations: false FAILs, false WARNs, and (for a real bug) whether
    a check that shows it FAILed. A run without the doctor's JSON (exit 2, a timeout, a crash) is an error unless the
    entry expects that exit code."""
    if "exit" in entry:
        return {"ok": run["rc"] == 2, "false_fail": [], "false_warn": [], "error": None if run["rc"] == 2 else
                f"expected exit 2 ({entry['exit']}), got {run['rc']}"}
    if run["checks"] is None:
        return {"ok": False, "false_fail": [], "false_warn": [], "error": run["error"]}
    bug_checks = entry.get("bug", {}).get("checks", [])
    fails = [c for c, s in run["checks"].items() if s == "fail"]
    warns = [c for c, s in run["checks"].items() if s == "warn" and c not in entry.get("warn", {})]
    verdict = {"false_fail": [c for c in fails if c not in bug_checks], "false_warn": warns, "error": None}
    if "bug" in entry:
        verdict["bug_caught"] = any(c in bug_checks for c in fails)
    verdict["ok"] = not verdict["false_fail"] and not warns
    return verdict


def run_doctor(doctor, workdir, script, args, timeout, env):
    """Run the doctor on script from workdir: {rc, seconds, cpu_seconds, checks {id: status}, summaries, error,
    check_seconds}. cpu_seconds: user + system time of the doctor and every process it waited for (the script's
    supervised child): close to the wall seconds of a quiet machine with one torch thread, also under load."""
    start, used = time.perf_counter(), _children_cpu()
    proc = subprocess.Popen([sys.executable, str(doctor), "--script", os.path.relpath(script, workdir), "--json", "--",
                             *args], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # past the time limit, or Ctrl-C: its own session does not get the SIGINT
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        return {"rc": None, "seconds": round(time.perf_counter() - start, 1), "cpu_seconds": None, "checks": None,
                "summaries": {}, "error": f"timed out after {timeout:g} s"}
    seconds, cpu_seconds = round(time.perf_counter() - start, 1), round(_children_cpu() - used, 1)
    try:
        checks = json.loads(out)["checks"]
    except (json.JSONDecodeError, KeyError, TypeError):
        lines = err.strip().splitlines()
        return {"rc": proc.returncode, "seconds": seconds, "cpu_seconds": cpu_seconds, "checks": None, "summaries": {},
                "error": lines[-1] if lines else f"exit {proc.returncode}, no output"}
    return {"rc": proc.returncode, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "checks": {c["id"]: c["status"] for c in checks},
            "summaries": {c["id"]: c["summary"] for c in checks}, "error": None,
            "check_seconds": {c["id"]: (c.get("details") or {}).get("seconds") for c in checks}}


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_one(entry, files, doctor, timeout, env, twin=None):
    """Lay the entry out in a temp folder (patched by twin), make its data, plant its user files, run the doctor,
    compare the files: the doctor's result with a "files" comparison added."""
    with tempfile.TemporaryDirectory(prefix=f"real-{entry['name']}-") as tmp:
        root = Path(tmp) / "repo"
        for path, data in files.items():
            if twin and path == twin["file"]:
                data = apply_twin(data.decode(), twin["find"], twin["replace"]).encode()
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        workdir = root / entry.get("cwd", str(Path(entry["script"]).parent))
        entry["data"](workdir)
        for user_file in entry.get("user_files", []):
            (workdir / user_file).parent.mkdir(parents=True, exist_ok=True)
            (workdir / user_file).write_bytes(os.urandom(USER_FILE_BYTES))
        before = snapshot(Path(tmp))
        run_env = dict(env, **entry.get("env", {}), PYTHONPATH=os.pathsep.join([env["PYTHONPATH"], str(root)]))
        run = run_doctor(doctor, workdir, root / entry["script"], entry["args"], timeout, run_env)
        run["files"] = compare(before, snapshot(Path(tmp)))
    run["safe"] = not run["files"]["changed"] and not run["files"]["removed"]
    return run


def with_mirrors(entries, mirrors, only):
    """(entries to run, each with its git directory; names of those left out for want of a mirror). A run of the whole
    manifest goes on with the mirrors present; a named entry (--only), or a manifest with no mirror at all, is a
    HarnessError saying which fetch to run."""
    present, missing = [], []
    for entry in entries:
        try:
            present.append((entry, git_dir(mirrors, entry["repo"])))
        except HarnessError:
            if only:
                raise
            missing.append(entry["name"])
    if not present:
        raise HarnessError(f"no entry has a mirror under {mirrors}: call the fetch tool with github:OWNER/NAME for the "
                           f"repositories in manifest.py")
    return present, missing


def counts(run):
    if run["checks"] is None:
        return f"exit {run['rc']}" if run["rc"] is not None else "timeout"
    statuses = list(run["checks"].values())
    return " ".join(f"{statuses.count(s)}{s[0].upper()}" for s in ("pass", "warn", "fail", "skip"))


def row(name, healthy, verdict, twins):
    caught = sum(t["caught"] for t in twins)
    touched = healthy["files"]["changed"] + healthy["files"]["removed"]
    return (f"{name:24} {counts(healthy):13} {f'{caught}/{len(twins)}' if twins else '-':5} "
            f"{healthy['seconds'] or 0:5.0f} {healthy.get('cpu_seconds') or 0:5.0f} {len(touched):3}/{len(healthy['files']['created']):<3} "
            f"{'ok' if healthy['safe'] and all(t['safe'] for t in twins) else 'SAFETY':6} "
            f"{','.join(verdict['false_fail']) or '-'} | {','.join(verdict['false_warn']) or '-'}")


def totals(results):
    """One line: the numbers issue 21's "Done when" counts."""
    judged = [r for r in results if r["healthy"]["checks"] is not None]
    bugs = [r["verdict"]["bug_caught"] for r in results if "bug_caught" in r["verdict"]]
    twins = [t["caught"] for r in results for t in r["twins"]]
    unsafe = [r["name"] for r in results if not all(run["safe"] for run in [r["healthy"], *r["twins"]])]
    return (f"{len(results)} entries, {len(judged)} with verdicts: "
            f"{sum(len(r['verdict']['false_fail']) for r in judged)} false FAILs in "
            f"{sum(bool(r['verdict']['false_fail']) for r in judged)} scripts, "
            f"{sum(len(r['verdict']['false_warn']) for r in judged)} false WARNs; real bugs caught {sum(bugs)}/{len(bugs)}; "
            f"twins caught {sum(twins)}/{len(twins)}; SAFETY: {', '.join(unsafe) or 'none'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="run this entry only (a manifest name)")
    parser.add_argument("--doctor", type=Path, default=ROOT / "diagnostics" / "doctor.py",
                        help="the doctor to run (default: this checkout's)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per doctor run (default 600)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--no-twins", action="store_true", help="run the healthy scripts only")
    parser.add_argument("--mirrors", type=Path, default=MIRRORS, help=f"where fetch puts snapshots (default {MIRRORS})")
    parser.add_argument("--site", type=Path, default=SITE,
                        help=f"the folder the scripts' extra packages are installed in (default {SITE}; README.md)")
    args = parser.parse_args(argv)
    try:
        manifest.validate(manifest.ENTRIES)
        entries = [e for e in manifest.ENTRIES if args.only in (None, e["name"])]
        if not entries:
            raise HarnessError(f"no entry named {args.only}; the names: {', '.join(e['name'] for e in manifest.ENTRIES)}")
        if not args.doctor.is_file():
            raise HarnessError(f"no doctor at {args.doctor}")
        if args.out and args.out.exists() and not args.force:
            raise HarnessError(f"{args.out} exists: name another file or pass --force to overwrite it")
        present, missing = with_mirrors(entries, args.mirrors, args.only)
        entries = [entry for entry, _ in present]
        sources = {e["name"]: read_files(where, e["repo"], e["commit"], e["files"]) for e, where in present}
        for e in entries:  # every twin applies once and compiles before anything runs
            for twin in e.get("twins", []):
                apply_twin(sources[e["name"]][twin["file"]].decode(), twin["find"], twin["replace"])
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE / "shim"), str(args.site)]), MPLBACKEND="Agg")
    print(f"doctor {args.doctor}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    if missing:
        print(f"left out, no mirror under {args.mirrors} (the fetch tool makes one): {', '.join(missing)}")
    print(f"{'script':24} {'verdicts':13} twins {'s':>5} {'cpu s':>5} touch/new safety false FAIL | false WARN")
    results = []
    for entry in entries:
        healthy = run_one(entry, sources[entry["name"]], args.doctor, args.timeout, env)
        verdict = judge(entry, healthy)
        twins = []
        for twin in [] if args.no_twins else entry.get("twins", []):
            run = run_one(entry, sources[entry["name"]], args.doctor, args.timeout, env, twin)
            run.update(twin, caught=(run["checks"] or {}).get(twin["check"]) == "fail")
            twins.append(run)
        print(row(entry["name"], healthy, verdict, twins), flush=True)
        if verdict["error"] or healthy["error"]:
            print(f"    {verdict['error'] or healthy['error']}")
        touched = sorted({f for r in [healthy, *twins] for f in r["files"]["changed"] + r["files"]["removed"]})
        if touched:
            print(f"    SAFETY: {', '.join(touched)}")
        for twin in twins:
            if not twin["caught"]:
                print(f"    twin {twin['check']} not caught: {twin['error'] or twin['checks'].get(twin['check'], 'absent')}")
        results.append({"name": entry["name"], "repo": entry["repo"], "commit": entry["commit"],
                        "script": entry["script"], "args": entry["args"], "healthy": healthy, "verdict": verdict,
                        "twins": twins})
    print(totals(results) + (f"; left out (no mirror): {len(missing)}" if missing else ""))
    if args.out:
        write_results(args.out, {"doctor": str(args.doctor), "results": results, "no_mirror": missing}, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
