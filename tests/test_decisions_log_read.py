"""spikelog/read/__init__.py: how sniff tells a log's format, each decision at its boundary (found by mutation
testing): the 200 lines it looks at, the cut last line of a full 64 KB head, a stable-baselines3 box and a line
opening with `[` that breaks JSON exactly halfway; and the table reader's size for pandas."""
import os

import pytest

from spikelog.read import SNIFF_BYTES, sniff

LLMC = "s:1 trl:2.5"  # a line of llm.c's -o log; general.parse also reads it (as `s` and `trl`)


def _log(tmp_path, text):
    path = tmp_path / "train.log"
    path.write_text(text)
    return path


def test_an_llmc_line_after_the_first_200_lines_does_not_decide_the_format(tmp_path):
    """Only 200 lines are looked at: an llm.c line just past them leaves the log to the plain-text reader."""
    path = _log(tmp_path, "hello\n" * 200 + LLMC + "\n")
    assert sniff(path) == "text"


def test_the_last_line_of_a_short_file_is_kept(tmp_path):
    """A file shorter than the 64 KB head is read whole: its last line, the only llm.c one, decides the format."""
    path = _log(tmp_path, "hello\n" + LLMC + "\n")
    assert sniff(path) == "llm.c"


def test_the_cut_last_line_of_a_full_head_is_dropped_even_when_only_two_lines_remain(tmp_path):
    """A second line running past the 64 KB head is cut there, inside a number, where it looks like llm.c's
    (`s:1 a:111...`); it is dropped, so the whole line, which ends in words, is read as plain text."""
    line = "s:1 a:" + "1" * SNIFF_BYTES + " and then words"
    path = _log(tmp_path, "hello\n" + line + "\n")
    assert sniff(path) == "text"


def test_a_stable_baselines3_box_is_a_text_log(tmp_path):
    """Its `| name | value |` rows hold no named number general.parse reads and no table: the box values decide."""
    box = ["-" * 29, "|    ep_len_mean     | 200  |", "|    fps             | 1000 |", "-" * 29]
    path = _log(tmp_path, "\n".join(box) + "\n")
    assert sniff(path) == "text"


def test_a_line_opening_with_a_bracket_that_breaks_json_exactly_halfway_is_a_log_line(tmp_path):
    """JSON broken at exactly half the head (here at 10 of 21 characters) is a log line, not a cut document."""
    path = _log(tmp_path, "[1, 2, 3] loss 1.500\n")
    assert sniff(path) == "text"


def test_a_table_of_exactly_the_acceleration_size_is_read_with_pandas_and_one_byte_less_is_not(tmp_path):
    """The size is looked up, never read: a sparse file of ACCELERATE_BYTES (24 MiB) costs no disk."""
    pandas = pytest.importorskip("pandas")
    from spikelog.read.table import accelerator
    log = tmp_path / "big.csv"
    log.write_bytes(b"")
    os.truncate(log, 24 << 20)
    assert accelerator(log) is pandas
    os.truncate(log, (24 << 20) - 1)
    assert accelerator(log) is None
