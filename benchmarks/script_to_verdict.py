"""Time from a training script to the doctor's verdict, with no case file. (Not run in CI.)

    python benchmarks/script_to_verdict.py [--threads 1]

For every script in tests/corpus/scripts/ (a planted bug and its healthy twin per shape: the model returns its loss,
nn.CrossEntropyLoss or F.cross_entropy in the loop, a Hugging Face model given labels, argparse and checkpoints,
autocast), runs `python diagnostics/doctor.py --script SCRIPT --json` as a user would, in a fresh process (Python,
torch and the script's imports included), and reports the wall time, the exit code and the failing checks. The
side-by-side peer is writing the case file by hand: 2-10 minutes per real model (issue 15, as reported by people
and agents; not measured here). Print the machine and its load with the table: on a shared machine wall time grows
with the load, CPU time much less.
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "corpus" / "scripts"
ARGS = {"train_args_ckpt": ["--batch_size", "128", "--out_dir", "{tmp}"]}  # the scripts that need arguments


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for the runs (default 1)")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"OMP_NUM_THREADS={args.threads}")
    print(f"{'script':28} {'wall s':>7} {'cpu s':>6} exit  failing checks")
    for script in sorted(p for p in SCRIPTS.glob("*.py") if p.stem != "tinydata"):
        with tempfile.TemporaryDirectory() as tmp:
            extra = [arg.replace("{tmp}", tmp) for arg in ARGS.get(script.stem.removesuffix("_healthy"), [])]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, str(ROOT / "diagnostics" / "doctor.py"), "--script", str(script), "--json",
                                   *(["--", *extra] if extra else [])], capture_output=True, text=True, cwd=tmp,
                                  env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)), timeout=600)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        fails = ([c["id"] for c in json.loads(proc.stdout)["checks"] if c["status"] == "fail"] if proc.returncode in (0, 1)
                 else [proc.stderr.strip().splitlines()[-1]])
        print(f"{script.name:28} {wall:7.1f} {cpu:6.1f} {proc.returncode:4}  {', '.join(fails) or '-'}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
