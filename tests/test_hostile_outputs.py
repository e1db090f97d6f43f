"""Commands that write files never replace what they did not make.

Each test puts the user's file, a link, a folder, a device or a FIFO where the command would write, and checks the
decision (a refusal is exit 2 and one line) and that the user's files are as they were. The first tests are
synthetic_curves' and the gallery's own; then a generator crosses every writing command with every kind.
"""
import dataclasses
import json
import os
import pathlib
import stat

import pytest

import dist_check
import lint
import loss_surface
import make_pattern_gallery
import monitor
import spike_lab
import spikes
import sweeps
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


# --- every writing command x every kind of hostile output path (issue 22, Deliver 5) -----------------------------
# Each command runs in-process through its main(argv). A kind puts something of the user's where the command would
# write; the test asserts the decision (exit 2 with one stderr line and no traceback, or the command's normal exit
# where the kind is legitimate) and that every file of the user's is there afterwards, byte for byte.

SURFACE = """
def make_surface():
    return {"loss": lambda a, b: (a - 1.0) ** 2 + (b + 0.5) ** 2, "x_range": (-2.0, 2.0), "y_range": (-2.0, 2.0)}
"""
LOG = "step,loss\n" + "".join(f"{step},{2.0 - step / 1000:.4f}\n" for step in range(300))


@dataclasses.dataclass
class Writer:
    """A command that writes: argv(tmp, out, force) runs it with `out` as the output path (a file, or a folder);
    `input` is the (name, text) of the file it reads, when it reads one; `force`: whether it has --force."""

    main: object
    argv: object
    out: str
    input: tuple = None
    force: bool = True
    folder: str = None  # for a folder: the name of one file it writes inside


def _ranks_write_their_files(nproc, args):
    """dist_check's local ranks, stood in for: each writes its verdict and stack file, as a real rank does."""
    verdicts = {}
    for rank in range(nproc):
        verdicts[rank] = {"rank": rank, "world": nproc, "backend": "gloo", "device": "cpu", "status": "pass",
                          "steps": {}, "summary": "all steps passed"}
        (pathlib.Path(args.out) / f"rank{rank}.json").write_text(json.dumps(verdicts[rank]))
        (pathlib.Path(args.out) / f"rank{rank}.stack.txt").write_text("")
    return verdicts


def _drawn(line, cwd):
    """The gallery's two commands, stood in for: the --plot one leaves its picture in cwd."""
    if "--plot" in line:
        (pathlib.Path(cwd) / line.split("--plot ")[1].split()[0]).write_bytes(b"\x89PNG a picture")
    return "wrote\nspikes: none\n"


WRITERS = {
    "loss_surface --png": Writer(loss_surface.main, lambda tmp, out, force: [
        "--surface", tmp / "surface.py", "--grid", "5", "--png", out, *force], "out.png", ("surface.py", SURFACE)),
    "spikes --plot": Writer(spikes.main, lambda tmp, out, force: [tmp / "log.csv", "--plot", out, *force], "out.png",
                            ("log.csv", LOG)),
    "spikes --postmortem": Writer(spikes.main, lambda tmp, out, force: [tmp / "log.csv", "--postmortem", out, *force],
                                  "out.md", ("log.csv", LOG)),
    "synthetic_curves --out": Writer(synthetic_curves.main, lambda tmp, out, force: ["--out", out, *force], "out.csv"),
    "synthetic_curves --truth": Writer(synthetic_curves.main, lambda tmp, out, force: [
        "--out", tmp / "new.csv", "--truth", out, *force], "truth.json"),
    "monitor --out": Writer(monitor.main, lambda tmp, out, force: ["--out", out, *force], "run.jsonl"),
    "lint --write-docs": Writer(lint.main, lambda tmp, out, force: ["--write-docs", out, *force], "page.md"),
    "sweeps --write-demo": Writer(sweeps.main, lambda tmp, out, force: ["--write-demo", out], "sweep.csv", force=False),
    "dist_check --out": Writer(dist_check.main, lambda tmp, out, force: ["--nproc", "1", "--out", out, *force], "out",
                               folder="rank0.json"),
    "spike_lab --out": Writer(spike_lab.main, lambda tmp, out, force: [
        "--steps", "150", "--at", "50", "--out", out, *force], "out", folder="train_log.jsonl"),
    "make_pattern_gallery OUT_DIR": Writer(make_pattern_gallery.main, lambda tmp, out, force: [out, *force], "out",
                                           folder="healthy.png"),
}


def _file_of_the_users(tmp):
    mine = tmp / "mine.txt"
    mine.write_text("the user's own file\n")
    return mine


def place(kind, writer, tmp):
    """Put the kind's hostile thing where `writer` writes; returns (the output path to give, --force or not, the exit
    code the decision must be). For a folder command the thing goes at the name of a file it writes inside."""
    target = tmp / writer.out
    if writer.folder and kind in ("existing file", "symlink to a file of the user's", "hard link to a file of the user's",
                                  "a folder", "dangling symlink"):
        target.mkdir()
        target = target / writer.folder
    if kind == "existing file":
        target.write_text("the user's own file\n")
        return tmp / writer.out, False, 2
    if kind in ("symlink to an input", "symlink to a file of the user's"):
        target.symlink_to(tmp / writer.input[0] if writer.input else _file_of_the_users(tmp))
        return tmp / writer.out, True, 2
    if kind in ("hard link to an input", "hard link to a file of the user's"):
        os.link(tmp / writer.input[0] if writer.input else _file_of_the_users(tmp), target)
        return tmp / writer.out, True, 2
    if kind == "a folder":
        target.mkdir()
        return tmp / writer.out, True, 2
    if kind == "/dev/full":
        return pathlib.Path("/dev/full"), True, 2
    if kind == "a FIFO":
        os.mkfifo(target)
        return target, True, 2
    if kind == "under a file":
        return _file_of_the_users(tmp) / writer.out, True, 2
    if kind == "dangling symlink":
        target.symlink_to(tmp / "nowhere")
        return tmp / writer.out, True, 2
    if kind.startswith("a user file in the folder"):
        target.mkdir()
        (target / "notes.txt").write_text("the user's notes\n")
        force = kind.endswith("--force")
        return target, force, 0 if force else 2
    raise AssertionError(kind)


FILE_KINDS = ["existing file", "symlink to an input", "hard link to an input", "a folder", "/dev/full", "a FIFO",
              "under a file", "dangling symlink"]
FOLDER_KINDS = ["existing file", "symlink to a file of the user's", "hard link to a file of the user's", "a folder",
                "/dev/full", "a FIFO", "under a file", "dangling symlink", "a user file in the folder",
                "a user file in the folder, --force"]
CASES = [(name, kind) for name, writer in WRITERS.items()
         for kind in (FOLDER_KINDS if writer.folder else FILE_KINDS)
         if writer.input or "to an input" not in kind]


def snapshot(tmp):
    """Every entry under tmp: bytes for a file, the target for a link, "dir" / "fifo" otherwise (links not followed)."""
    found = {}
    for path in tmp.rglob("*"):
        if path.is_symlink():
            found[path] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            found[path] = "dir"
        elif stat.S_ISFIFO(path.lstat().st_mode):
            found[path] = "fifo"
        else:
            found[path] = path.read_bytes()
    return found


def run_main(main, argv):
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:  # the commands whose parser ends bad usage itself (lint, monitor)
        return exc.code


@pytest.mark.parametrize("name, kind", CASES, ids=[f"{name}: {kind}" for name, kind in CASES])
def test_an_output_path_never_costs_the_user_a_file(name, kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dist_check, "launch_local", _ranks_write_their_files)
    monkeypatch.setattr(make_pattern_gallery, "run", _drawn)
    monkeypatch.chdir(tmp_path)
    writer = WRITERS[name]
    if writer.input:
        (tmp_path / writer.input[0]).write_text(writer.input[1])
    out, force, code = place(kind, writer, tmp_path)
    before = snapshot(tmp_path)
    assert run_main(writer.main, writer.argv(tmp_path, out, ["--force"] if force and writer.force else [])) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if code == 2:
        assert err.count("\n") == 1, err
    after = snapshot(tmp_path)
    assert {path: after.get(path) for path in before} == before  # nothing of the user's gone or changed


@pytest.mark.parametrize("name", [name for name, writer in WRITERS.items() if writer.folder])
def test_a_second_run_replaces_its_own_files_and_keeps_the_users(name, tmp_path, capsys, monkeypatch):
    """A folder the command made is its own: a second run, without --force, replaces what it wrote there and keeps
    what the user added (dist_check deleted the user's files there)."""
    monkeypatch.setattr(dist_check, "launch_local", _ranks_write_their_files)
    monkeypatch.setattr(make_pattern_gallery, "run", _drawn)
    writer, out = WRITERS[name], tmp_path / "out"
    assert run_main(writer.main, writer.argv(tmp_path, out, [])) == 0
    (out / "notes.txt").write_text("the user's notes\n")
    (out / writer.folder).write_bytes((out / writer.folder).read_bytes() + b" and the user's edit")
    before = snapshot(tmp_path)
    assert run_main(writer.main, writer.argv(tmp_path, out, ["--force"])) == 2  # the edited file is the user's now
    assert capsys.readouterr().err.count("\n") == 1 and snapshot(tmp_path) == before
    (out / writer.folder).unlink()
    assert run_main(writer.main, writer.argv(tmp_path, out, [])) == 0
    assert (out / "notes.txt").read_text() == "the user's notes\n"


@pytest.mark.parametrize("real_log", [True, False])
def test_the_gallery_draws_the_real_logs_picture_only_when_the_real_log_is_there(real_log, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(make_pattern_gallery, "run", _drawn)
    log = tmp_path / "modded_nanogpt.txt"
    if real_log:
        log.write_text("step 1 loss 2.0\n")
    monkeypatch.setattr(make_pattern_gallery, "REAL_LOG", log)
    assert make_pattern_gallery.main([str(tmp_path / "gallery")]) == 0
    drawn = sorted(p.name for p in (tmp_path / "gallery").glob("*.png"))
    expected = sorted(f"{name}.png" for name, _, _ in make_pattern_gallery.PATTERNS)
    assert drawn == sorted(expected + (["modded_nanogpt.png"] if real_log else []))
    mine = tmp_path / "mine"  # a folder of the user's, holding a picture of that name: refused when it would be drawn
    mine.mkdir()
    (mine / "modded_nanogpt.png").write_bytes(b"the user's picture")
    assert make_pattern_gallery.main([str(mine), "--force"]) == (2 if real_log else 0)
    assert (mine / "modded_nanogpt.png").read_bytes() == b"the user's picture"


def test_a_gallery_command_that_fails_is_one_failure_naming_it(tmp_path):
    with pytest.raises(make_pattern_gallery.Failed, match="`python diagnostics/spikes.py .* failed: "):
        make_pattern_gallery.run(f"python diagnostics/spikes.py {tmp_path / 'no-such-log.csv'}", tmp_path)  # exit 2
    buggy = tmp_path / "buggy.py"
    buggy.write_text("import torch.nn.functional as F\nloss = F.cross_entropy(F.softmax(logits, dim=-1), y)\n")
    with pytest.raises(make_pattern_gallery.Failed, match="lint.py .* failed: "):  # exit 1 is no success either
        make_pattern_gallery.run(f"python diagnostics/lint.py {buggy}", tmp_path)
