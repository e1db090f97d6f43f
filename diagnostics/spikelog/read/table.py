"""CSV and TSV: W&B exports, Lightning's CSVLogger metrics.csv, Keras CSVLogger, timm summary.csv, our monitor.

A big file is read faster when pandas is installed: its C parser turns a block of plain numbers into numpy
columns (4 MB at a time, so memory stays flat), and detect/screen.py takes their healthy stretches in numpy.
Anything pandas would read differently from Python (an empty cell, a word, a float step, a quote, a
ragged row) sends that block to the pure-Python reader, so both give the same report.
"""
import csv
import importlib.util
import io
import itertools

from .. import CliError
from .columns import Columns, row_tuple, to_chunk
from .text import BLOCK_BYTES, text_blocks

ACCELERATE_BYTES = 24 << 20  # from ~750k rows: importing numpy and pandas (~0.65 s CPU) costs less than it saves
# (benchmarks/spikes_throughput.py, 1M rows, 32 MB, no spike, 2026-11-25: 2.2 s CPU in pure Python, 0.7-0.9 s
# accelerated, imports included; with a spike every ~700 rows 2.0-2.3 s and 1.6-2.0 s)
NAN_SPELLINGS = ["nan", "NaN", "NAN", "Nan", "-nan", "+nan", "-NaN", "+NaN"]  # what float() reads as NaN, as
# trainers write it; pandas reads only these as NaN here (an empty cell, "NA" or "null" stay text: Python decides)
ACCELERATED_BLOCK_BYTES = 4 << 20  # per pandas call: its fixed cost (~0.5 ms) is spread over ~120k rows


def accelerator(path, wanted=None, module="pandas"):
    """pandas (or `module`: numpy for a JSONL log), when it is installed and worth importing for this file (`wanted`:
    None decides by size), else None."""
    if wanted is False or (wanted is None and path.stat().st_size < ACCELERATE_BYTES):
        return None
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)


def read(path, delimiter, loss_name, unparsed, accelerate=None):
    pandas = accelerator(path, accelerate)
    blocks = text_blocks(path, ACCELERATED_BLOCK_BYTES if pandas else BLOCK_BYTES)
    header = None
    for line, text in blocks:
        lines = text.split("\n")
        k = next((k for k, text in enumerate(lines) if text.strip()), None)
        if k is not None:  # the first line that is not blank
            header, rest = lines[k], (line + k + 1, "\n".join(lines[k + 1:]))
            break
    if header is None:
        raise CliError("the file is empty")
    try:
        header = [h.strip() for h in next(csv.reader([header], delimiter=delimiter))]
    except csv.Error as exc:
        raise CliError(f"not a readable CSV file ({exc})") from None
    cols = Columns(header, loss_name, epoch_rows=True)  # JSON records carry fractional epochs: only a table counts them
    names = cols.order()
    position = {name: i for i, name in reversed(list(enumerate(header)))}
    idx = [None if name is None else position[name] for name in names]
    width = len(header)
    si, li, gi, ri, *ex = idx

    def by_line(lines, first):
        """Row tuples, one line at a time: quoted cells, empty cells, words, ragged rows."""
        rows, numbered = [], enumerate(lines, first)
        for number, text in numbered:
            if not text.strip():
                continue
            if '"' in text:  # quoted cells: the csv module handles them, and line breaks inside them
                cells = next(csv.reader(itertools.chain([text], (t for _, t in numbered)), delimiter=delimiter))
            else:
                cells = text.split(delimiter)
            cells += [""] * (width - len(cells))
            rows.append(row_tuple(number, [None if i is None else cells[i] for i in idx], names, unparsed))
        return to_chunk(rows, cols)

    used = sorted({i for i in idx if i is not None})
    # Numbers as float() reads them: pandas 3 parses them exactly; before, only its round-trip parser did.
    exact = {} if pandas is None or int(pandas.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}

    def columns(text):
        """The block as a chunk of numpy columns, or None when pandas would read it otherwise than Python."""
        try:  # (as bytes: pandas reads a StringIO back and encodes it again, ~3 ms more per block)
            frame = pandas.read_csv(io.BytesIO(text.encode()), sep=delimiter, header=None, usecols=used, engine="c",
                                    keep_default_na=False, na_values=NAN_SPELLINGS, low_memory=False, **exact)
        except (ValueError, pandas.errors.ParserError):  # a ragged row, a missing column
            return None
        arrays = {}
        for i in used:
            column = frame[i].to_numpy()
            if column.dtype.kind != "i" and (i == si or column.dtype.kind != "f"):  # a word, an empty cell, a
                return None  # float step: Python's reading decides
            arrays[i] = column if i == si else column.astype(float)
        return (None if si is None else arrays[si], arrays[li], None if gi is None else arrays[gi],
                None if ri is None else arrays[ri], [arrays[i] for i in ex], True)

    def chunks():
        for first, text in itertools.chain([rest], blocks):
            if not text:
                continue
            if pandas is not None and '"' not in text:
                chunk = columns(text)
                if chunk is not None:
                    yield chunk
                    continue
            if '"' not in text:  # plain numbers: one split per block and a column is a slice (3x faster)
                flat = text.replace("\n", delimiter).split(delimiter)
                if len(flat) == width * (text.count("\n") + 1):
                    try:  # int() and float() ignore a trailing \r
                        yield (None if si is None else [*map(int, flat[si::width])], [*map(float, flat[li::width])],
                               None if gi is None else [*map(float, flat[gi::width])],
                               None if ri is None else [*map(float, flat[ri::width])],
                               [[*map(float, flat[i::width])] for i in ex], True)
                        continue
                    except ValueError:  # a word, an empty cell, a float step: line by line
                        pass
            try:
                yield by_line(text.split("\n"), first)
            except csv.Error as exc:
                raise CliError(f"line {first}: not readable as CSV ({exc})") from None

    return cols, chunks()
