"""CSV and TSV: W&B exports, Lightning's CSVLogger metrics.csv, Keras CSVLogger, timm summary.csv, our monitor."""
import csv
import itertools

from .. import CliError
from .columns import Columns, row_tuple, to_chunk
from .text import text_blocks


def read(path, delimiter, loss_name, unparsed):
    blocks = text_blocks(path)
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

    def chunks():
        for first, text in itertools.chain([rest], blocks):
            if not text:
                continue
            if '"' not in text:  # plain numbers: one split per block and a column is a slice (3x faster)
                flat = text.replace("\n", delimiter).split(delimiter)
                if len(flat) == width * (text.count("\n") + 1):
                    try:  # int() and float() ignore a trailing \r
                        yield (None if si is None else [*map(int, flat[si::width])], [*map(float, flat[li::width])],
                               None if gi is None else [*map(float, flat[gi::width])],
                               None if ri is None else flat[ri::width],  # read only where a spike starts
                               [[*map(float, flat[i::width])] for i in ex], True)
                        continue
                    except ValueError:  # a word, an empty cell, a float step: line by line
                        pass
            try:
                yield by_line(text.split("\n"), first)
            except csv.Error as exc:
                raise CliError(f"line {first}: not readable as CSV ({exc})") from None

    return cols, chunks()
