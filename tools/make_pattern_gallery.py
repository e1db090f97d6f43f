"""Draw the pictures of refs/loss_patterns.md: one synthetic log per pattern, plotted by spikes.py.

    python tools/make_pattern_gallery.py [OUT_DIR] [--force]

For every pattern it runs the two commands the page shows (write the synthetic log, then find the
pattern in it with `spikes.py --plot`) in a temporary folder and moves `<pattern>.png` into OUT_DIR
(default: refs/img/loss_patterns/). With ../shared present it also plots the real modded-nanogpt log.
Only a PNG this tool drew is ever replaced (OUT_DIR's manifest, .ml-debug-files.json, lists them with their
sha256; the committed pictures are in it); a file of yours under a picture's name stops the tool before it draws
anything, with or without --force. --force lets it write into a folder of yours (its files are kept).
Exit 0 when every picture was written, 2 when a command failed or a file is in the way (one line).
"""
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "diagnostics") not in sys.path:  # the commands' contract module: output folders, one-line usage errors
    sys.path.append(str(ROOT / "diagnostics"))
from ml_debug_contract import ArgumentParser, OutputFolder, OutputRefused  # noqa: E402

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


class Failed(Exception):
    """A command failed or a file is in the way: the one line to print."""


def run(line, cwd):
    argv = line.split()
    argv[0] = sys.executable
    argv[1] = str(ROOT / argv[1])
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(f"`{line}` failed: {' '.join((proc.stderr.strip() or proc.stdout.strip()).split())}")
    return proc.stdout


def draw(out, force):
    """Draw every picture into a temporary folder, then move each into `out`, where only pictures this tool drew
    (its manifest says which) are ever replaced."""
    names = [name for name, _, _ in PATTERNS] + (["modded_nanogpt"] if REAL_LOG.is_file() else [])
    folder = OutputFolder(out, [f"{name}.png" for name in names], force, option="OUT_DIR", tool="make_pattern_gallery.py")
    folder.prepare()
    with tempfile.TemporaryDirectory() as work:
        for name, scenario, seed in PATTERNS:
            for line in commands(name, scenario, seed):
                summary = run(line, work)
            with folder.writing(f"{name}.png") as picture:
                (Path(work) / f"{name}.png").replace(picture)
            print(f"{name}.png: {summary.splitlines()[1]}")
        if REAL_LOG.is_file():
            run(f"python diagnostics/spikes.py {REAL_LOG} --plot modded_nanogpt.png", work)
            with folder.writing("modded_nanogpt.png") as picture:
                (Path(work) / "modded_nanogpt.png").replace(picture)
            print("modded_nanogpt.png: the real log")


def main(argv=None):
    parser = ArgumentParser(description="Draw the pictures of refs/loss_patterns.md with spikes.py.")
    parser.add_argument("out", nargs="?", default=OUT, type=Path, help=f"where to write the PNGs (default: {OUT})")
    parser.add_argument("--force", action="store_true", help="write into a folder of yours (its files are kept)")
    args = parser.parse_args(argv)
    try:
        draw(args.out, args.force)
    except (Failed, OutputRefused, OSError) as exc:
        print(f"make_pattern_gallery.py: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback; the temporary folder is gone
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
