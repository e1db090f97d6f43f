"""ml-debug as a package: the `ml-debug` command, and the in-loop tools to import.

    from ml_debug import TrainingMonitor, SpikeGuard, NanWatch, run_doctor

The classes are those of diagnostics/monitor.py, diagnostics/spike_guard.py and
diagnostics/nan_watch.py, loaded from those very files (each also runs on its own with
`python diagnostics/<name>.py`); their modules are ml_debug.monitor, ml_debug.spike_guard and
ml_debug.nan_watch. Callbacks for the Hugging Face Trainer and for Lightning are in
ml_debug.integrations.hf and ml_debug.integrations.lightning; their frameworks are optional
extras, never imported here.
"""
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["TrainingMonitor", "SpikeGuard", "RestartFromCheckpoint", "NanWatch", "run_doctor"]

_HERE = Path(__file__).resolve().parent
# Installed, the wheel carries the pack inside the package; in a checkout it is the repo around it.
PACK_ROOT = _HERE if (_HERE / "diagnostics").is_dir() else _HERE.parent
DIAGNOSTICS = PACK_ROOT / "diagnostics"
_API = {"TrainingMonitor": "monitor", "SpikeGuard": "spike_guard", "RestartFromCheckpoint": "spike_guard",
        "NanWatch": "nan_watch"}


def load(name):
    """diagnostics/<name>.py as the module ml_debug.<name>, loaded once from the file itself."""
    qualified = f"{__name__}.{name}"
    if str(DIAGNOSTICS) not in sys.path:  # the files import ml_debug_contract (and the doctor its checks) from beside them
        sys.path.append(str(DIAGNOSTICS))
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, DIAGNOSTICS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[qualified]
            raise
    return sys.modules[qualified]


def __getattr__(name):
    if name in _API:
        return getattr(load(_API[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_doctor(case, checks=None):
    """Run the doctor's checks on a case dict (DESIGN.md, "A case"), cheapest first; returns their CheckResults.

    A case that breaks the contract raises ml_debug.doctor.CaseError. The model is left as found.
    """
    doctor = load("doctor")
    return doctor.run_checks(doctor.validate_case(case), checks)
