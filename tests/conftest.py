"""Shared test helpers: where things are, and how to run a diagnostic's CLI."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSTICS = ROOT / "diagnostics"
CONTRACT = DIAGNOSTICS / "ml_debug_contract.py"  # the module every command imports: no command itself
COMMANDS = sorted(p for p in DIAGNOSTICS.glob("*.py") if p != CONTRACT)  # every other file is a command
SHARED = ROOT.parent / "shared"  # present in CI and in a developer checkout; absent for users

sys.path.insert(0, str(DIAGNOSTICS))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.append(str(ROOT))  # ml_debug from the checkout, also when pytest is not run as `python -m pytest`


def run_cli(script, *args, cwd=None, timeout=120):
    """Run `python diagnostics/<script> args...` and return the CompletedProcess (text mode)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    return subprocess.run(
        [sys.executable, str(DIAGNOSTICS / script), *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout, env=env,
    )


def findings(code, path="<string>"):
    """lint's findings on a source snippet (dedented first), as (rule, line) pairs."""
    import lint
    return [(f.rule, f.line) for f in lint.lint_source(textwrap.dedent(code), path)]


def assert_one_line_error(proc):
    """Bad input: exit 2, exactly one line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip("../shared is not present (it is in CI and developer checkouts)")
    return SHARED


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One torch thread here and in subprocesses, restored afterwards. The test tensors are tiny, and two OpenMP
    threads on a busy 2-core runner spin against each other: one overfit run measured 0.9 s with one thread, 35 s
    with two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield
    torch.set_num_threads(threads)




@pytest.fixture(autouse=True, scope="session")
def ctrl_c_reaches_the_commands():
    """The Ctrl-C tests start a tool and send it SIGINT, as a terminal would. A test run started in the background
    by a shell without job control (`make test &` in a script) inherits SIGINT ignored, and so would every tool it
    starts: Python then installs no KeyboardInterrupt handler, and lint ran to its end (exit 1) while resume_check
    slept on. Python's own handler here means the tools start with SIGINT at its default."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


SET_BY_OTHERS = {  # environment variables set in this process by pytest or a library, not by a test: name -> by whom
    "PYTEST_CURRENT_TEST": "pytest names the test and its phase",
    "PYTORCH_NVML_BASED_CUDA_CHECK": "lightning.fabric sets it when first imported, in whichever test that is",
    "TORCHINDUCTOR_CACHE_DIR": "torch sets it the first time inductor looks up its cache folder",
    "TRITON_CACHE_DIR": "inductor sets it the first time it compiles Triton kernels (on a GPU)",
    "TRITON_PTXAS_PATH": "inductor sets it the first time it compiles Triton kernels (on a GPU)",
}


@pytest.fixture(autouse=True)
def environment_left_as_found():
    """A test (or the code it runs in this process) that leaves an environment variable set, changed or removed
    fails, and the environment is put back: every later test in the worker, and every process it starts, would
    inherit it (a RANK left set made the HF Trainer tests start a process group). SET_BY_OTHERS are left alone."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name) and name not in SET_BY_OTHERS)
    if changed:
        os.environ.clear()
        os.environ.update(before)
    assert not changed, f"environment variables changed by this test and not restored: {changed}"


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1)


def _blocked_and_ignored():
    """This thread's blocked signals and the process's ignored ones, as the kernel sees them (set from C too)."""
    try:
        lines = open("/proc/thread-self/status").read().splitlines()
    except OSError:
        return None
    return {line.split(":")[0]: line.split()[1] for line in lines if line.startswith(("SigBlk", "SigIgn"))}


@pytest.fixture(autouse=True)
def signals_left_as_found():
    """A test (or the code it runs in this process) that changes a signal's handler, or blocks or ignores a
    signal, fails: a tool must leave the process as it found it, and a signal ignored or blocked here is
    inherited by every process the tests start after."""
    before = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    kernel_before = _blocked_and_ignored()
    yield
    changed = {sig.name: signal.getsignal(sig) for sig in HANDLED_SIGNALS if signal.getsignal(sig) != before[sig]}
    for sig in HANDLED_SIGNALS:
        if before[sig] is not None and signal.getsignal(sig) != before[sig]:  # None: set outside Python
            signal.signal(sig, before[sig])
    kernel_after = _blocked_and_ignored()
    assert not changed, f"signal handlers changed by this test and not restored: {changed}"
    assert kernel_after == kernel_before, f"blocked or ignored signals changed: {kernel_before} -> {kernel_after}"


# `make test` runs -n 2 --dist loadfile: each file's tests on one worker, so a module fixture is built once. xdist hands
# the files out in collection order, so a heavy file collected late runs alone at the end while the other worker idles.
# The heaviest files go first (by their tests' summed times on two quiet cores); the rest keep their order. Measured on
# the 2-core VM, quiet, one run each: 454.7 s in collection order, 438.6 s with the heaviest first (when the list was
# made). The list was taken again from a --junitxml run after the distributed tests were made lighter (not re-timed).
HEAVY_FILES_FIRST = ("test_real_models.py", "test_dist_check.py", "test_site.py", "test_diagnostic_conventions.py",
                     "test_spike_lab.py", "test_mutate_map.py", "test_spikes.py", "test_hostile_user_code.py",
                     "test_doctor.py", "test_mutate.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(HEAVY_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
