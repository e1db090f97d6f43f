"""Wall and CPU time of the doctor's whole battery on each real-architecture case of tests/corpus/ (one torch thread).

Run: `OMP_NUM_THREADS=1 python benchmarks/doctor_corpus_times.py`. Prints one line per case: wall seconds, CPU seconds,
the slowest check and its seconds; then the machine's load average, so the figures can be read against it.
Building the case (and importing transformers) is outside the timing: only run_checks is timed.
"""
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))
sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import doctor  # noqa: E402
import healthy_hf  # noqa: E402
import healthy_own  # noqa: E402


def main():
    torch.set_num_threads(1)
    for module in (healthy_hf, healthy_own):
        for name in module.HEALTHY:
            case = doctor.validate_case(getattr(module, name)(), name)
            wall, cpu = time.perf_counter(), time.process_time()
            results = doctor.run_checks(case)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            slowest = max(results, key=lambda r: r.details["seconds"])
            print(f"{name:22} wall {wall:5.1f} s  cpu {cpu:5.1f} s  slowest {slowest.id} {slowest.details['seconds']:.1f} s",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
