"""How right is spikes.py on synthetic logs whose spikes are known? (Not run in CI; the tests check a smaller set.)

    python benchmarks/spikes_scores.py [--mixed-seeds 50] [--offset-seeds 30]

For each seed it writes a synthetic CSV with diagnostics/synthetic_curves.py (`mixed`: spikes of the four
types, most lasting or diverging ones followed by a rollback; `lasting_offset`: fast, slow and not
recovering spikes in a noisy run, the last settling 3-10% above the curve, inside the noise band), reads it
with spikes.analyze, and pairs each planted spike with a found one that starts within 5 steps of it.

Printed per scenario: precision (found spikes that were planted), recall (planted spikes that were found),
type accuracy (paired spikes given their planted type) and the confusion matrix of planted type (rows)
against found type (columns), with a `missed` column for planted spikes nothing was paired with.
"""
import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

import spikes  # noqa: E402  (needs the path above)
import synthetic_curves  # noqa: E402

TYPES = synthetic_curves.SPIKE_TYPES


def score(scenario, seeds, directory):
    planted = found = 0
    matrix = Counter()
    for seed in range(seeds):
        curve = synthetic_curves.make_curve(scenario, seed)
        path = directory / f"{scenario}-{seed}.csv"
        curve.write_csv(path)
        report = spikes.analyze(path)
        path.unlink()
        truth = curve.truth["spikes"]
        matched = synthetic_curves.match(report.spikes, truth)
        planted += len(truth)
        found += len(report.spikes)
        matrix.update((t["type"], s.type) for t, s in matched)
        paired = {id(t) for t, _ in matched}
        matrix.update((t["type"], "missed") for t in truth if id(t) not in paired)
    hits = sum(count for (_, kind), count in matrix.items() if kind != "missed")
    right = sum(count for (want, kind), count in matrix.items() if want == kind)
    print(f"{scenario}: seeds 0-{seeds - 1}, {planted} planted spikes, {found} found")
    print(f"  precision {hits / max(found, 1):.3f}, recall {hits / max(planted, 1):.3f}, "
          f"type accuracy {right / max(hits, 1):.3f} ({right} of {hits} paired spikes)")
    columns = [*TYPES, "missed"]
    print("  planted \\ found  " + " ".join(f"{c:>14}" for c in columns))
    for want in TYPES:
        if any(matrix[want, c] for c in columns):
            print(f"  {want:<16} " + " ".join(f"{matrix[want, c]:>14}" for c in columns))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixed-seeds", type=int, default=50, help="synthetic `mixed` logs (default 50)")
    parser.add_argument("--offset-seeds", type=int, default=30, help="synthetic `lasting_offset` logs (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spikes-scores-") as directory:
        score("mixed", args.mixed_seeds, Path(directory))
        score("lasting_offset", args.offset_seeds, Path(directory))


if __name__ == "__main__":
    main()
