"""Issue 22, the files-lost and traceback findings on output paths: each fed to the command as the user did it.

dist_check deleted files in its --out folder that it had not written (a second run; --force on a folder of the
user's); loss_surface --png --force wrote through a symlink or hard link onto the input; spike_lab gave a traceback
for an --out under a file or in /proc, a dangling symlink as the log, and a folder as the log with --force.
"""
import os

import pytest

import dist_check
import loss_surface
import spike_lab

pytestmark = pytest.mark.hostile

SURFACE = """
import torch

def make_surface():
    return {"loss": lambda a, b: (a - 1.0).pow(2) + (b + 0.5).pow(2),
            "x_range": (-2.0, 2.0), "y_range": (-2.0, 2.0), "target": (1.0, -0.5)}
"""


def one_line_refusal(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def ranks_pass(monkeypatch):
    """dist_check's local ranks, stood in for: the output folder is decided before any rank starts."""
    verdict = {"rank": 0, "world": 1, "backend": "gloo", "device": "cpu", "status": "pass", "steps": {},
               "summary": "all steps passed"}
    monkeypatch.setattr(dist_check, "launch_local", lambda nproc, args: {0: verdict})


def test_dist_check_run_twice_keeps_the_files_the_user_added_to_its_folder(tmp_path, ranks_pass, capsys):
    out = tmp_path / "out"
    assert dist_check.main(["--nproc", "1", "--out", str(out)]) == 0
    (out / "rank5.stack.txt").write_text("my notes on rank 5\n")
    (out / "rank0.json").write_text("my own verdict\n")
    assert dist_check.main(["--nproc", "1", "--out", str(out)]) == 2  # rank0.json is the user's now
    assert "rank0.json" in one_line_refusal(capsys)
    (out / "rank0.json").unlink()
    assert dist_check.main(["--nproc", "1", "--out", str(out)]) == 0
    assert (out / "rank5.stack.txt").read_text() == "my notes on rank 5\n"


def test_dist_check_force_never_deletes_a_file_of_the_users(tmp_path, ranks_pass, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "rank0.json").write_text("my own file\n")
    (mine / "rank3.stack.txt").write_text("my own stack\n")
    assert dist_check.main(["--nproc", "1", "--out", str(mine), "--force"]) == 2
    assert "rank0.json" in one_line_refusal(capsys)
    (mine / "rank0.json").unlink()
    assert dist_check.main(["--nproc", "1", "--out", str(mine), "--force"]) == 0
    assert (mine / "rank3.stack.txt").read_text() == "my own stack\n"


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_loss_surface_png_force_never_writes_over_the_input_through_a_link(tmp_path, link, capsys):
    surface = tmp_path / "surface.py"
    surface.write_text(SURFACE)
    png = tmp_path / "out.png"
    (os.symlink if link == "symlink" else os.link)(surface, png)
    assert loss_surface.main(["--surface", str(surface), "--grid", "11", "--png", str(png), "--force"]) == 2
    assert "surface.py" in one_line_refusal(capsys)
    assert surface.read_text() == SURFACE


def lab_cases(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "train_log.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    folder = tmp_path / "folder"
    (folder / "train_log.jsonl").mkdir(parents=True)
    return {"under a file": ([str(a_file / "lab")], "a_file"), "in /proc": (["/proc/ml_debug_lab"], "/proc"),
            "a dangling symlink as the log": ([str(dangling)], "train_log.jsonl"),
            "a folder as the log, --force": ([str(folder), "--force"], "train_log.jsonl")}


@pytest.mark.parametrize("kind", ["under a file", "in /proc", "a dangling symlink as the log",
                                  "a folder as the log, --force"])
def test_spike_lab_refuses_a_bad_out_in_one_line(tmp_path, kind, capsys):
    argv, says = lab_cases(tmp_path)[kind]
    assert spike_lab.main(["--steps", "200", "--at", "60", "--out", *argv]) == 2
    assert says in one_line_refusal(capsys)
    assert not (tmp_path / "nowhere.jsonl").exists() and (tmp_path / "a_file").read_text() == "x"
