"""Draw the pictures of refs/loss_patterns.md: one synthetic log per pattern, plotted by spikes.py.

    python tools/make_pattern_gallery.py [OUT_DIR]

For every pattern it runs the two commands the page shows (write the synthetic log, then find the
pattern in it with `spikes.py --plot`) and writes `OUT_DIR/<pattern>.png` (default:
refs/img/loss_patterns/). With ../shared present it also plots the real modded-nanogpt log.
Exit 0 when every picture was written, 2 when a command failed (its message on one line).
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "refs" / "img" / "loss_patterns"
REAL_LOG = ROOT.parent / "shared" / "data" / "modded-nanogpt" / "scaleup1b_ad8d7ae5.csv"

# pattern (the PNG's and the log's name), synthetic scenario, seed: the page quotes these commands
PATTERNS = [
    ("healthy", "clean", 1),
    ("fast_recovery", "fast_recovery", 1),
    ("slow_recovery", "slow_recovery", 1),
    ("no_recovery", "no_recovery", 3),
    ("lasting_offset", "lasting_offset", 1),
    ("divergence", "divergence", 2),
    ("nan", "nan", 0),
    ("creep", "creep", 0),
    ("grad_norm_alone", "grad_spikes", 0),
    ("datasets", "datasets", 0),
    ("resume", "resume", 0),
    ("repeat_data", "repeat_data", 0),
]


def commands(name, scenario, seed):
    """The two command lines, as the page shows them (paths relative to the working directory)."""
    return [
        f"python diagnostics/synthetic_curves.py --scenario {scenario} --seed {seed} --out {name}.csv",
        f"python diagnostics/spikes.py {name}.csv --plot {name}.png",
    ]


def run(line, cwd):
    argv = line.split()
    argv[0] = sys.executable
    argv[1] = str(ROOT / argv[1])
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"make_pattern_gallery.py: `{line}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw the pictures of refs/loss_patterns.md with spikes.py.")
    parser.add_argument("out", nargs="?", default=OUT, type=Path, help=f"where to write the PNGs (default: {OUT})")
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for name, scenario, seed in PATTERNS:
            for line in commands(name, scenario, seed):
                summary = run(line, work)
            (Path(work) / f"{name}.png").replace(out / f"{name}.png")
            print(f"{name}.png: {summary.splitlines()[1]}")
        if REAL_LOG.is_file():
            run(f"python diagnostics/spikes.py {REAL_LOG} --plot modded_nanogpt.png", work)
            (Path(work) / "modded_nanogpt.png").replace(out / "modded_nanogpt.png")
            print("modded_nanogpt.png: the real log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
