"""Text files read in blocks of whole lines, and what the plain-text line formats share."""
import itertools
import re

from .. import CliError


BLOCK_BYTES = 1 << 16  # text is read 64 KB at a time
MAX_LINE = 1 << 22  # a line longer than 4 MB is no log line (a sparse or binary file): refused


def text_blocks(path, size=BLOCK_BYTES, unparsed=None):
    """A UTF-8 text file in whole lines (joined by \\n, the last line end and a BOM left out), `size` bytes at a
    time: a file of any size is never held whole, and a "line" longer than MAX_LINE (a binary or sparse file)
    is refused. Yields (number of the first line, text). With `unparsed` (an Unparsed), bytes that are not UTF-8
    are dropped from their line and the line is counted; without it they refuse the file."""
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
            text = decode_utf8(block[:cut - 1], line, unparsed)
            yield line, text
            line += text.count("\n") + 1
        if carry:
            yield line, decode_utf8(carry, line, unparsed)


def decode_utf8(data, line, unparsed=None):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if unparsed is None:
            line += data.count(b"\n", 0, exc.start)
            raise CliError(f"not UTF-8 text (line {line})") from None
    texts = []  # a config table's stray Latin-1 byte: that line loses it, the log is still read
    for number, raw in enumerate(data.split(b"\n"), line):
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            unparsed.add(UNDECODABLE, number)
            texts.append(raw.decode("utf-8", "ignore"))
    return "\n".join(texts)


UNDECODABLE = "<bytes not UTF-8>"  # the unparsed event's column for lines that lost bytes


def text_lines(path, unparsed=None):
    """Every line of a text file, one at a time (a flat iterator over text_blocks)."""
    return itertools.chain.from_iterable(text.split("\n") for _, text in text_blocks(path, unparsed=unparsed))


NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|(?i:nan|inf(?:inity)?))"
KEY_VALUE = re.compile(r"(\w+):(" + NUM + ")")
