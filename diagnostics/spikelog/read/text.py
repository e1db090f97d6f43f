"""Text files read in blocks of whole lines, and what the plain-text line formats share."""
import itertools
import re

from .. import CliError


BLOCK_BYTES = 1 << 16  # text is read 64 KB at a time
MAX_LINE = 1 << 22  # a line longer than 4 MB is no log line (a sparse or binary file): refused


def text_blocks(path, size=BLOCK_BYTES):
    """A UTF-8 text file in whole lines (joined by \\n, the last line end and a BOM left out), `size` bytes at a
    time: a file of any size is never held whole, and a "line" longer than MAX_LINE (a binary or sparse file)
    is refused. Yields (number of the first line, text)."""
    with open(path, "rb") as handle:
        carry, line = b"", 1
        while True:
            block = handle.read(size)
            if not block:
                break
            if line == 1 and not carry and block.startswith(b"\xef\xbb\xbf"):
                block = block[3:]  # the BOM Excel and PowerShell put first: not part of the first name
            if b"\0" in block:
                raise CliError(f"line {line} holds NUL bytes: a binary file, not a text log")
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if not cut:
                if len(block) > MAX_LINE:
                    raise CliError(f"line {line} is longer than {MAX_LINE >> 20} MB: not a training log")
                carry = block
                continue
            carry = block[cut:]
            text = decode_utf8(block[:cut - 1], line)
            yield line, text
            line += text.count("\n") + 1
        if carry:
            yield line, decode_utf8(carry, line)


def decode_utf8(data, line):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line += data.count(b"\n", 0, exc.start)
        raise CliError(f"not UTF-8 text (line {line})") from None


def text_lines(path):
    """Every line of a text file, one at a time (a flat iterator over text_blocks)."""
    return itertools.chain.from_iterable(text.split("\n") for _, text in text_blocks(path))


def line_records(path, parse):
    for line, text in enumerate(text_lines(path), 1):
        record = parse(text)
        if record:
            yield line, record


NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
KEY_VALUE = re.compile(r"(\w+):(" + NUM + ")")
