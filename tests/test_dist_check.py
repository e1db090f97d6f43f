"""dist_check on local gloo ranks: healthy 2- and 4-rank runs pass; a skipped collective and a sleeping rank are
named within the time limit, with their stacks on disk; no process is left behind; bad usage is one line.

The three runs start together (each is a launcher plus its ranks, forked from it) so that their waits overlap."""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

import dist_check

from conftest import DIAGNOSTICS, assert_one_line_error, run_cli
from gloo import free_port

TIMEOUT = 5  # seconds per collective in the planted runs, as in the docstring's demo

RUNS = {  # name: (ranks, extra args); two healthy ranks run under torchrun (the fixture's last run)
    "healthy4": (4, []),
    "skip": (2, ["--plant", "skip", "--timeout", str(TIMEOUT)]),
    "sleep": (2, ["--plant", "sleep", "--timeout", str(TIMEOUT)]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three runs above, then the first of test_a_healthy_torchrun_run_...'s two torchrun runs: started once the
    healthy runs are done, so that its imports overlap the planted runs' waits for their timeouts."""
    base = tmp_path_factory.mktemp("dist_check")
    started, procs = time.monotonic(), {}
    for name, (ranks, extra) in RUNS.items():
        procs[name] = subprocess.Popen(
            [sys.executable, str(DIAGNOSTICS / "dist_check.py"), "--nproc", str(ranks), "--out", str(base / name), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    results = {}
    for name in [*RUNS, "torchrun"]:
        if name == "skip":
            procs["torchrun"] = subprocess.Popen(torchrun_command(base / "torchrun"), stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True, env=torchrun_env(base))
        out, err = procs[name].communicate(timeout=240)
        results[name] = {"code": procs[name].returncode, "out": out, "err": err, "dir": base / name,
                         "seconds": time.monotonic() - started, "pid": procs[name].pid}
    return results


def _verdicts(run):
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in run["dir"].glob("rank*.json")}


@pytest.mark.parametrize("name", ["torchrun", "healthy4"])
def test_healthy_ranks_pass(runs, name):
    """Two ranks under torchrun, four from --nproc: every rank passes all five steps."""
    run = runs[name]
    assert run["code"] == 0, run["out"] + run["err"]
    verdicts = _verdicts(run)
    ranks = RUNS[name][0] if name in RUNS else 2
    assert sorted(verdicts) == list(range(ranks))
    backend = dist_check.default_backend(ranks)  # gloo here, with no GPU for each rank
    for verdict in verdicts.values():
        assert verdict["status"] == "pass" and verdict["backend"] == backend
        assert all(step["ok"] for step in verdict["steps"].values()) and len(verdict["steps"]) == 5
    assert "all ranks passed" in run["out"] and f"backend {backend}" in run["out"]
    assert run["out"].count("dist_check: ") == 1, run["out"]  # one report: rank 0's under torchrun, the launcher's


def _hangs(run):
    """The hang diagnoses in a run's verdicts: the rank whose timer fires first has one; a rank stopped by it may not."""
    return [verdict["hang"] for verdict in _verdicts(run).values() if "hang" in verdict]


@pytest.mark.parametrize("caller", [0, 1])
def test_a_skipped_collective_is_named_whichever_rank_times_out_first(caller):
    """Rank 1 skipped all_reduce (index 1) and waits in all_gather (index 2); rank 0 waits in all_reduce. Either
    rank's timer may fire first (under load rank 1's did): both name all_reduce and rank 1 as the one that skipped."""
    positions = {0: {"index": 1, "phase": "enter"}, 1: {"index": 2, "phase": "enter"}}
    hang = dist_check.diagnose_hang(positions[caller]["index"], positions)
    assert (hang["step"], hang["skipped"], hang["behind"], hang["waited"]) == ("all_reduce", [1], [], [0])
    assert hang["text"] == "rank 1 skipped it (it went on to all_gather)"


def test_skipped_collective_is_named(runs):
    run = runs["skip"]
    assert run["code"] == 1, run["out"] + run["err"]
    assert _hangs(run)
    for hang in _hangs(run):
        assert (hang["step"], hang["skipped"], hang["behind"], hang["waited"]) == ("all_reduce", [1], [], [0])
    assert "HANG at all_reduce" in run["out"] and "rank 1 skipped it (it went on to all_gather)" in run["out"]
    assert "all_gather" in (run["dir"] / "rank1.stack.txt").read_text()


def test_docstring_output_is_this_run(runs):
    """The docstring shows the skip demo (tests/test_docstring_outputs.py leaves this multi-process file to us)."""
    doc = dist_check.__doc__.split("\nOutput\n", 1)[1].split("\nHow to read it\n", 1)[0]
    lines = [line[4:] for line in doc.strip("\n").splitlines()]
    assert lines[0] == f"$ python diagnostics/dist_check.py --nproc 2 --plant skip --timeout {TIMEOUT}"
    assert lines[-1] == f"(exit code {runs['skip']['code']})"
    printed = runs["skip"]["out"].replace(str(runs["skip"]["dir"]), "dist_check_out").rstrip("\n").splitlines()
    # A rank whose timer has not fired yet when the other's does is stopped by that verdict: which one fires
    # first is a race (under load rank 1's may), so its line reads the other way; the rest is this run's.
    stopped = {f"  rank {rank}  cpu   FAIL  stopped by another rank's hang verdict while at {step}": timed_out
               for rank, step, timed_out in ((0, "all_reduce", lines[2]), (1, "all_gather", lines[3]))}
    assert [stopped.get(line, line) for line in printed] == lines[1:-1]


def test_sleeping_rank_is_named_with_its_stack(runs):
    run = runs["sleep"]
    assert run["code"] == 1, run["out"] + run["err"]
    hang = _verdicts(run)[0]["hang"]
    assert (hang["step"], hang["behind"], hang["skipped"]) == ("all_gather", [1], [])
    assert "rank 1 did not arrive" in run["out"]
    stack = (run["dir"] / "rank1.stack.txt").read_text()
    planted = next(n for n, line in enumerate(Path(dist_check.__file__).read_text().splitlines(), 1)
                   if "# BUG: the last rank stalls" in line)
    assert f"line {planted} in run_rank" in stack  # the stack points at the planted sleep
    # named within the time limit: imports (under load) plus the limit, far below the 10x-limit sleep
    assert run["seconds"] < 120


def test_no_process_left_behind(runs):
    time.sleep(0.5)
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if any(str(run["dir"]) in arg for run in runs.values() for arg in (p.info["cmdline"] or []))]
    assert not leftovers, [p.info["cmdline"] for p in leftovers]


@pytest.mark.hostile
@pytest.mark.parametrize("args, words", [
    (["--nproc", "2", "--timeout", "0"], "--timeout must be between"),
    (["--nproc", "0"], "--nproc must be between 1 and 64"),
    ([], "no ranks"),
    (["--nproc", "2", "--backend", "nccl"], "needs CUDA"),
])
def test_bad_usage_is_one_line(args, words, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert dist_check.main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err


def gpus(monkeypatch, count):
    """Pretend this machine has `count` CUDA GPUs (0: no CUDA)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize("count, nproc, asked, backend", [(0, 1, [], "gloo"), (1, 1, [], "nccl"), (1, 2, [], "gloo"),
                                                         (2, 2, [], "nccl"), (2, 2, ["--backend", "nccl"], "nccl")])
def test_local_ranks_default_to_nccl_only_with_a_gpu_each(monkeypatch, tmp_path, count, nproc, asked, backend):
    gpus(monkeypatch, count)
    launched = {}

    def launch(n, args):
        launched["backend"] = args.backend
        return {}
    monkeypatch.setattr(dist_check, "launch_local", launch)
    dist_check.main(["--nproc", str(nproc), *asked, "--out", str(tmp_path / "out")])
    assert launched == {"backend": backend}  # nccl asked for with a GPU per rank: not refused


@pytest.mark.hostile
def test_nccl_with_more_ranks_than_gpus_is_one_line(monkeypatch, capsys):
    gpus(monkeypatch, 1)
    monkeypatch.delenv("RANK", raising=False)
    assert dist_check.main(["--nproc", "2", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "needs a GPU per rank: --nproc 2" in err and "1 GPU:" in err
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist_check.main(["--backend", "nccl"]) == 2  # under torchrun: local rank 1 has no GPU of its own
    assert "this is local rank 1" in capsys.readouterr().err


@pytest.mark.parametrize("backend, start", [("nccl", "spawn"), ("gloo", dist_check.RANK_START)])
def test_nccl_ranks_are_spawned_not_forked(monkeypatch, backend, start):
    class Started(Exception):
        pass

    def get_context(method):
        raise Started(method)
    monkeypatch.setattr(dist_check.multiprocessing, "get_context", get_context)
    with pytest.raises(Started, match=start):
        dist_check.launch_local(2, argparse.Namespace(out="out", timeout=5, backend=backend, plant=None))


@pytest.mark.hostile
def test_bad_usage_from_the_command_line_is_one_line():
    proc = run_cli("dist_check.py", "--nproc", "2", "--timeout", "-1", timeout=60)
    assert_one_line_error(proc)


@pytest.mark.hostile
def test_a_folder_of_the_users_is_not_written_into(tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "rank0.json").write_text("my own file")
    assert dist_check.main(["--nproc", "1", "--out", str(mine)]) == 2
    assert (mine / "rank0.json").read_text() == "my own file"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert dist_check.main(["--nproc", "1", "--out", str(a_file)]) == 2
    assert a_file.read_text() == "x"


HANGWATCH = """
import sys, time
sys.path.insert(0, {diagnostics!r})
from dist_check import HangWatch
watch = HangWatch(stall_seconds=0.5, out_dir={out!r}, rank=3)
for step in range(3):
    watch.step(step)
    time.sleep(0.05)
time.sleep(1.0)  # a stall: the timer fires (0.5 s after the last step) and writes every stack
watch.close()
"""


def test_hangwatch_writes_the_stack_of_a_stalled_loop(tmp_path):
    code = HANGWATCH.format(diagnostics=str(DIAGNOSTICS), out=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    stack = (tmp_path / "rank3.stack.txt").read_text()
    assert "-- step 2" in stack and "Timeout (0:00:00.500000)!" in stack
    assert stack.count("Timeout") == 1  # steps re-armed the timer: only the stall fired it


@pytest.mark.hostile
@pytest.mark.parametrize("args, env, words", [
    (["--nproc", "2", "--timeout", "inf"], {}, "--timeout must be between"),
    (["--nproc", "2", "--timeout", "1e-6"], {}, "--timeout must be between"),
    (["--nproc", "2", "--timeout", "1e12"], {}, "--timeout must be between"),
    ([], {"RANK": "0"}, "WORLD_SIZE is not"),
    ([], {"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not a whole number"),
    ([], {"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 must be between 0 and 1"),
    ([], {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
], ids=["timeout inf", "timeout 1e-6", "timeout 1e12", "RANK without WORLD_SIZE", "RANK=abc", "RANK past the world",
        "MASTER_PORT=abc"])
def test_an_environment_error_is_one_line(args, env, words, capsys, monkeypatch, tmp_path):
    """Issue 22: each of these was a traceback (OverflowError, KeyError, ValueError from deep in the start-up)."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "DIST_CHECK_LAUNCHED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert dist_check.main([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.hostile
def test_a_peer_that_never_starts_is_one_line_on_either_side(tmp_path):
    """Rank 0 alone waits for rank 1 at the rendezvous; rank 1 alone finds no store: each ends in one line, exit 2,
    within a few times the limit (both were tracebacks)."""
    procs = {}
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   OMP_NUM_THREADS="1")
        env.pop("DIST_CHECK_LAUNCHED", None)
        procs[rank] = subprocess.Popen([sys.executable, str(DIAGNOSTICS / "dist_check.py"), "--timeout", "1", "--out",
                                        str(tmp_path / f"out{rank}")], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    errors = {}
    for rank, proc in procs.items():
        out, errors[rank] = proc.communicate(timeout=120)
        assert proc.returncode == 2 and errors[rank].count("\n") == 1 and "Traceback" not in errors[rank], (rank, out)
    assert "rank 1 never reached the rendezvous" in errors[0] and "cannot reach the rendezvous store" in errors[1]


def test_a_rank_waits_for_the_store_within_its_limit_and_no_longer():
    """c10d's own connect overshot a 2 s limit to 5.3 s; the wait for the port now ends at the limit, and a store that
    comes up during the wait is reached."""
    port = free_port()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"nothing accepted a connection at 127.0.0.1:{port}"):
        dist_check.wait_for_listener("127.0.0.1", port, 0.3)
    assert 0.25 < time.monotonic() - started < 1.5
    store = []  # held until the wait is over: a store that is dropped stops listening
    late = threading.Timer(0.2, lambda: store.append(dist_check.connect("127.0.0.1", port, 2, 5, host_store=True)))
    late.start()
    dist_check.wait_for_listener("127.0.0.1", port, 10)
    late.join()
    assert store


@pytest.mark.hostile
def test_the_abort_watch_stops_before_teardown(tmp_path):
    """A healthy torchrun run aborted (SIGABRT) after `all ranks passed`, once in 7: the daemon thread that polls the
    store was still inside a store call when the interpreter finalised. It is stopped and joined first now."""
    class Store:
        def check(self, keys):
            return False

    with open(tmp_path / "stack.txt", "w") as stack:
        stop = dist_check._abort_watch(Store(), stack, lambda: None)
        time.sleep(0.3)
        stop()
    assert not [t for t in threading.enumerate() if t.name == "dist_check-abort-watch"]


def torchrun_env(folder):
    """torchrun's environment: one torch thread, and its torchelastic_* log folders in the test's own folder (in /tmp
    they stayed after every run)."""
    return dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(folder))


def torchrun_command(out):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(DIAGNOSTICS / "dist_check.py"), "--timeout", "20", "--out", str(out)]


@pytest.mark.hostile
def test_a_healthy_torchrun_run_passes_and_a_second_run_reuses_its_folder(runs):
    """Under torchrun, rank 1 created its stack file before rank 0 checked --out: a healthy run was refused 3 times in
    4. Every rank now checks before any rank writes. The second run finds the folder its own and passes too; a file
    the user added to it stays. The first run is the fixture's (started with the others)."""
    first, out = runs["torchrun"], runs["torchrun"]["dir"]
    _passes_under_torchrun(first["code"], first["out"], first["err"], out)
    (out / "notes.txt").write_text("mine\n")
    second = subprocess.run(torchrun_command(out), capture_output=True, text=True, timeout=240, env=torchrun_env(out.parent))
    _passes_under_torchrun(second.returncode, second.stdout, second.stderr, out)
    assert (out / "notes.txt").read_text() == "mine\n"


def _passes_under_torchrun(code, stdout, stderr, out):
    assert code == 0, (stdout, stderr[-3000:])
    assert "all ranks passed" in stdout
    assert sorted(_verdicts({"dir": out})) == [0, 1]


@pytest.mark.hostile
def test_a_peer_killed_mid_run_is_a_report_not_a_traceback(tmp_path):
    """Issue 22 (tracebacks): a peer killed while the others wait in a collective. Rank 1 (planted asleep at
    all_gather) is killed once its stack file shows it running: rank 0 reports it, exit 1, nothing on stderr."""
    port, out = free_port(), tmp_path / "out"
    procs = {}
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        env.pop("DIST_CHECK_LAUNCHED", None)
        procs[rank] = subprocess.Popen([sys.executable, str(DIAGNOSTICS / "dist_check.py"), "--timeout", "8", "--plant",
                                        "sleep", "--out", str(out)], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "rank1.stack.txt").exists() and procs[1].poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # past the rendezvous: the stack file is written after it
    procs[1].kill()
    procs[1].communicate(timeout=30)
    stdout, stderr = procs[0].communicate(timeout=120)
    assert procs[0].returncode == 1 and "Traceback" not in stderr and stderr.strip() == "", stderr
    assert "rank 1" in stdout and "never reported" in stdout, stdout


def test_a_launched_rank_gets_one_torch_thread_unless_omp_num_threads_says(monkeypatch):
    """A forked rank has the launcher's torch, whose thread count OMP_NUM_THREADS set at import: without the variable
    the rank sets one thread itself (ranks share the machine's cores), with it the count is left as it is."""
    seen = []
    monkeypatch.setattr(dist_check, "main", lambda argv: seen.append((os.environ["OMP_NUM_THREADS"], torch.get_num_threads())))
    launched = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "DIST_CHECK_LAUNCHED", "OMP_NUM_THREADS")
    # a copy of the environment for the rank to set: a RANK left set in this worker starts a process group in every
    # later HF Trainer test (monkeypatch.delenv of an unset name would not remove it afterwards)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in launched})
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with pytest.raises(SystemExit):
            dist_check.run_launched_rank(0, 2, 29500, [])
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        torch.set_num_threads(2)
        with pytest.raises(SystemExit):
            dist_check.run_launched_rank(1, 2, 29500, [])
    finally:
        torch.set_num_threads(threads)
    assert seen == [("1", 1), ("3", 2)]
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["DIST_CHECK_LAUNCHED"]) == ("1", "2", "1")
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("127.0.0.1", "29500")


def test_one_rank_passes_the_ring_step_without_sending_to_itself_and_leaves_the_environment_alone(tmp_path, capsys):
    before = dict(os.environ)
    assert dist_check.main(["--nproc", "1", "--timeout", "5", "--out", str(tmp_path / "out")]) == 0
    assert dict(os.environ) == before  # the ranks set MASTER_ADDR and MASTER_PORT in their own environments
    capsys.readouterr()
    verdict = json.loads((tmp_path / "out" / "rank0.json").read_text())
    assert verdict["steps"]["ring_send_recv"] == {"ok": True, "detail": "one rank: nothing to send"}


def test_a_refusal_on_another_rank_is_every_ranks_refusal(tmp_path):
    """Rank 1 found a file of the user's in --out: rank 0, whose own names are free, refuses with rank 1's line and
    makes nothing, rather than start a run whose other rank has left."""
    store = dist_check.connect("127.0.0.1", free_port(), 2, 5, host_store=True)
    store.set("dist_check/out/1", "rank 1: out/rank1.json exists and is not ours")
    with pytest.raises(dist_check.UsageError, match="^rank 1: out/rank1.json exists and is not ours$"):
        dist_check.agree_on_out(store, 0, 2, tmp_path / "out", False, 5)
    assert not (tmp_path / "out").exists()
