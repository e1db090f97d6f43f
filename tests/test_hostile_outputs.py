"""Commands that write files (synthetic_curves.py, make_pattern_gallery.py) never replace what they did not make.

Each test puts the user's file, a folder, a device or a FIFO where the command would write, and checks the
refusal (exit 2, one line) and that the file is as it was; --force is the only way past.
"""
import os

import pytest

import make_pattern_gallery
import synthetic_curves

pytestmark = pytest.mark.hostile


def refused(capsys, main, argv, *words):
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


def test_synthetic_curves_keeps_existing_files_without_force(tmp_path, capsys):
    out, truth = tmp_path / "run.csv", tmp_path / "truth.json"
    out.write_text("my own log\n")
    refused(capsys, synthetic_curves.main, ["--out", out], "run.csv exists; pass --force")
    assert out.read_text() == "my own log\n"
    truth.write_text("{}")
    refused(capsys, synthetic_curves.main, ["--out", tmp_path / "new.csv", "--truth", truth], "truth.json exists")
    assert not (tmp_path / "new.csv").exists() and truth.read_text() == "{}"  # checked before anything is written
    assert synthetic_curves.main(["--out", str(out), "--truth", str(truth), "--force", "--rows", "200"]) == 0
    assert out.read_text().startswith("step,loss")


def test_synthetic_curves_refuses_folders_devices_fifos_and_one_file_for_two(tmp_path, capsys):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)  # writing it would wait for a reader forever
    for path in (tmp_path, "/dev/full", fifo):
        refused(capsys, synthetic_curves.main, ["--out", path, "--force"], "is not a regular file")
    refused(capsys, synthetic_curves.main, ["--out", tmp_path / "a.csv", "--truth", tmp_path / "a.csv"], "the same file")
    assert not (tmp_path / "a.csv").exists()


def test_the_gallery_stops_before_drawing_when_a_picture_is_in_the_way(tmp_path, capsys):
    (tmp_path / "healthy.png").write_bytes(b"my own picture")
    refused(capsys, make_pattern_gallery.main, [tmp_path], "healthy.png", "--force")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["healthy.png"]
    assert (tmp_path / "healthy.png").read_bytes() == b"my own picture"
    (tmp_path / "healthy.png").unlink()
    (tmp_path / "healthy.png").mkdir()
    refused(capsys, make_pattern_gallery.main, [tmp_path, "--force"], "a folder or a device")
    (tmp_path / "file").write_text("x")
    refused(capsys, make_pattern_gallery.main, [tmp_path / "file"], "is not a folder")
