"""Shared test helpers: where things are, and how to run a diagnostic's CLI."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSTICS = ROOT / "diagnostics"
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
