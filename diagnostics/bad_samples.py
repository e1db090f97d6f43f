"""bad_samples: which samples of a text shard are junk (the batch behind a loss spike)?

Symptom
    A loss spike at a step you can name, and the batches around it to look at: thousands of
    samples, of which a handful may be a badly cleaned page (a million slashes, a table of
    bytes, one line repeated a thousand times). Or a data shard you are about to train on and
    want to screen first. Reading them all by eye is slow, and junk is easy to scroll past.

What it checks
    Reads the samples (a .jsonl file: one JSON object per line, the text under --field, default
    "text"; any other file: one sample per line, UTF-8) and measures each on five numbers:

      top_char   share of the sample's non-space characters taken by the most frequent one
      run        the longest run of one non-space character
      zlib       compressed size over raw size (zlib, level 6), for samples of 200 bytes or more
      symbols    share of characters that are neither letters, digits nor whitespace
      control    share of control characters other than tab, newline and carriage return

    and flags it when one passes its limit: top_char above 0.5, run of 200 or more, zlib below
    0.1, symbols above 0.5, control above 0.01. The limits are our assumptions, set well
    outside what clean text measures: on 254 prose paragraphs (the seeds and this pack) and 108
    Python files (this repo), top_char 0.06 .. 0.19, run at most 91 (a comment banner), zlib
    0.26 .. 0.80, symbols at most 0.25, control 0, and none of them flagged (measured). A
    sentence repeated fifty-seven times compresses to 0.03. The file is read once, line by
    line; memory holds only the worst --top samples, so a shard of any size works.

Command
    python diagnostics/bad_samples.py                          # an embedded demo shard with 3 planted junk samples
    python diagnostics/bad_samples.py batch_at_spike.jsonl --field text
    python diagnostics/bad_samples.py shard.txt --json --top 50

Output
    $ python diagnostics/bad_samples.py
    demo shard (embedded): 40 samples, 3 flagged (control 1, run 1, symbols 2, top_char 1, zlib 3)
        line    chars  reasons                                           preview
          12     5000  run 5000, zlib 0.01, top_char 1.00, symbols 1.00  //////////////////////////////////////////////////
          25     1963  zlib 0.03                                         The model is trained on the data. The model is tra
          38      520  control 0.61, zlib 0.05, symbols 0.61             \\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x00\\x01\\x02\\x03\\x
    (exit code 1)

How to read it
    `line` is the sample's line in the file (1-based), `reasons` the numbers past their limits,
    furthest past first; `preview` its first 50 characters, control characters escaped. The
    summary counts the flagged samples per reason (one sample can have several). --json gives every
    number of every flagged sample. Exit code 1 when a sample is flagged, 0 when none is, 2 when
    the file cannot be read (no such file, empty, binary, a .jsonl line that is not a JSON object,
    no --field in any object: the line lists the keys it found).

Next step
    Look at the flagged samples whole, then decide for the shard: drop them, fix the cleaning
    step that let them through, or skip the batches that hold them when you restart from a
    checkpoint before the spike (refs/stability.md#recover). With spikes.py's post-mortem
    (--postmortem), its `Batches to pull` line names the steps whose samples to screen here.
"""
import argparse
import errno
import heapq
import json
import os
import re
import sys
import zlib
from collections import Counter

from ml_debug_contract import ArgumentParser, json_text, single_line

TOP_CHAR = 0.5  # clean prose and code measure 0.06-0.19: past half, one character is the sample — our assumption
RUN = 200  # the longest run in this repo's code is 91 (a comment banner) — our assumption
ZLIB = 0.1  # clean text compresses to 0.26-0.80, one sentence repeated 57 times to 0.03 (measured) — our assumption
ZLIB_MIN_BYTES = 200  # shorter samples compress badly whatever they hold (zlib's own header and tables)
SYMBOLS = 0.5  # clean prose and code measure at most 0.25 — our assumption
CONTROL = 0.01  # text holds none; binary decoded as text holds many — our assumption
TOP = 20  # flagged samples kept (the worst) and shown (in file order)
PREVIEW = 50  # characters of each flagged sample shown
PRINTABLE_CONTROLS = "\t\n\r"
REPEATS = re.compile(r"(\S)\1+")  # two or more of one non-space character: the runs, found at C speed


class UsageError(Exception):
    """Input the tool cannot read: one line on stderr, exit 2."""


def measure(text):
    """The five numbers of one sample (zlib is None under ZLIB_MIN_BYTES), from one count of its characters."""
    counts = Counter(text)
    visible = {c: n for c, n in counts.items() if not c.isspace()}
    top_char = max(visible.values()) / sum(visible.values()) if visible else 0.0
    run = max((m.end() - m.start() for m in REPEATS.finditer(text)), default=1 if visible else 0)
    raw = text.encode("utf-8", "surrogatepass")
    ratio = len(zlib.compress(raw, 6)) / len(raw) if len(raw) >= ZLIB_MIN_BYTES else None
    symbols = sum(n for c, n in counts.items() if not (c.isalnum() or c.isspace())) / len(text) if text else 0.0
    control = sum(n for c, n in counts.items() if ord(c) < 32 and c not in PRINTABLE_CONTROLS or ord(c) == 127) \
        / len(text) if text else 0.0
    return {"top_char": round(top_char, 3), "run": run, "zlib": None if ratio is None else round(ratio, 3),
            "symbols": round(symbols, 3), "control": round(control, 3)}


def reasons(numbers):
    """{number: how far past its limit (1 = at the limit)} for the numbers past their limits."""
    past = {}
    if numbers["top_char"] > TOP_CHAR:
        past["top_char"] = numbers["top_char"] / TOP_CHAR
    if numbers["run"] >= RUN:
        past["run"] = numbers["run"] / RUN
    if numbers["zlib"] is not None and numbers["zlib"] < ZLIB:
        past["zlib"] = ZLIB / max(numbers["zlib"], 1e-3)
    if numbers["symbols"] > SYMBOLS:
        past["symbols"] = numbers["symbols"] / SYMBOLS
    if numbers["control"] > CONTROL:
        past["control"] = numbers["control"] / CONTROL
    return past


def samples_of(path, field):
    """(line number, text) for every sample of the file; UsageError for what cannot be read."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file" if not os.path.exists(path) else f"{path}: not a regular file")
    with open(path, "rb") as f:
        head = f.read(8192)
    if not head:
        raise UsageError(f"{path}: the file is empty")
    if b"\x00" in head and not path.endswith(".jsonl"):
        raise UsageError(f"{path}: a binary file, not text (a NUL byte in its first 8 KB)")
    jsonl = path.endswith(".jsonl")
    keys_seen, found = set(), False
    with open(path, encoding="utf-8", errors="strict", newline="") as f:
        number = 0
        while True:
            try:
                line = f.readline()
            except UnicodeDecodeError as error:
                raise UsageError(f"{path}: not UTF-8 text after line {number} ({error.reason})") from None
            if not line:
                break
            number += 1
            line = line.rstrip("\r\n")
            if not jsonl:
                if line:
                    yield number, line
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise UsageError(f"{path}: line {number} is not JSON") from None
            if not isinstance(record, dict):
                raise UsageError(f"{path}: line {number} is not a JSON object")
            keys_seen.update(record)
            text = record.get(field)
            if isinstance(text, str):
                found = True
                yield number, text
    if jsonl and not found:
        keys = ", ".join(sorted(keys_seen)[:10]) or "none"
        raise UsageError(f"{path}: no string field {field!r} in any object (keys found: {keys}); pass --field NAME")


def screen(samples, top=TOP):
    """{"samples": count, "flagged": count, "by_reason": {...}, "worst": [...]} over (line, text) pairs."""
    count, flagged, by_reason, worst = 0, 0, Counter(), []
    for order, (line, text) in enumerate(samples):
        count += 1
        numbers = measure(text)
        past = reasons(numbers)
        if not past:
            continue
        flagged += 1
        by_reason.update(past.keys())
        entry = {"line": line, "chars": len(text), "reasons": dict(sorted(past.items(), key=lambda kv: -kv[1])),
                 "numbers": numbers, "preview": text[:PREVIEW]}
        key = (max(past.values()), -order)
        if len(worst) < top:
            heapq.heappush(worst, (key, order, entry))
        elif key > worst[0][0]:
            heapq.heapreplace(worst, (key, order, entry))
    ranked = sorted((entry for _, _, entry in worst), key=lambda entry: entry["line"])
    return {"samples": count, "flagged": flagged, "by_reason": dict(sorted(by_reason.items())), "worst": ranked}


def demo_samples():
    """The embedded demo: 37 ordinary sentences and 3 junk samples at lines 12, 25 and 38."""
    words = ("the loss fell slowly while the learning rate warmed up over the first thousand steps "
             "and the gradient norm stayed below one for most of the run").split()
    lines = []
    for i in range(40):
        if i == 11:
            lines.append("/" * 5000)  # a badly cleaned page: one character, five thousand times
        elif i == 24:
            lines.append("The model is trained on the data. " * 57 + "The model is trained on t")  # one sentence, repeated
        elif i == 37:
            lines.append("".join(map(chr, range(8))) * 40 + " text" * 40)  # binary bytes read as text, then text
        else:
            start = (i * 7) % len(words)
            lines.append(" ".join(words[start:] + words[:start]).capitalize() + ".")
    return list(enumerate(lines, start=1))


def _preview(text):
    """The first characters of a sample on one line: control characters and line breaks escaped (\\x00, \\n)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)[:PREVIEW]


def report(name, result):
    """The text report: a summary line, then the flagged samples, one per line."""
    reasons_count = ", ".join(f"{kind} {n}" for kind, n in result["by_reason"].items())
    lines = [f"{name}: {result['samples']} samples, {result['flagged']} flagged" + (f" ({reasons_count})" if reasons_count else "")]
    shown = [", ".join(f"run {entry['numbers']['run']}" if kind == "run" else f"{kind} {entry['numbers'][kind]:.2f}"
                       for kind in entry["reasons"]) for entry in result["worst"]]
    if shown:
        width = max(len("reasons"), *map(len, shown))
        lines.append(f"  {'line':>6}  {'chars':>7}  {'reasons':<{width}}  preview")
        for entry, why in zip(result["worst"], shown):
            lines.append(f"  {entry['line']:>6}  {entry['chars']:>7}  {why:<{width}}  {_preview(entry['preview'])}")
        if result["flagged"] > len(result["worst"]):
            lines.append(f"  ... {result['flagged'] - len(result['worst'])} more flagged (--top N shows more)")
    return "\n".join(lines)


def main(argv=None):
    parser = ArgumentParser(prog="bad_samples.py", description=__doc__.split("\n\n", 1)[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Limits: " + ", ".join([f"top_char > {TOP_CHAR}", f"run >= {RUN}", f"zlib < {ZLIB}",
                                                           f"symbols > {SYMBOLS}", f"control > {CONTROL}"]))
    parser.add_argument("path", nargs="?", help="a .jsonl file (one object per line) or a text file (one sample per "
                                                "line); none: the embedded demo shard")
    parser.add_argument("--field", default="text", help="the JSONL field holding the text (default: text)")
    parser.add_argument("--top", type=int, default=TOP,
                        help=f"flagged samples kept: the worst N, shown in file order (default {TOP})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be 1 or more")
    try:
        if args.path is None:
            name, result = "demo shard (embedded)", screen(demo_samples(), args.top)
        else:
            name, result = args.path, screen(samples_of(args.path, args.field), args.top)
        if result["samples"] == 0:
            raise UsageError(f"{args.path}: no samples (only empty lines)")
    except UsageError as error:
        print(f"bad_samples.py: error: {single_line(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        print(single_line(f"bad_samples.py: error: {args.path}: {error.strerror}"), file=sys.stderr)
        return 2
    print(json_text(result) if args.json else report(name, result))
    sys.stdout.flush()
    return 1 if result["flagged"] else 0


def run():
    """main() with the endings a command line owes its user: Ctrl-C exits 130, a closed stdout (`| head`) ends
    the run quietly, a full one (/dev/full) is one line and exit 2."""
    try:
        return main()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        code = 0  # the reader has what it wanted
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        print(f"bad_samples.py: error: cannot write the output: {error.strerror}", file=sys.stderr)
        code = 2
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # exiting must not write the rest again
    return code


if __name__ == "__main__":
    sys.exit(run())
