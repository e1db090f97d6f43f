"""The installer and the pack checker under hostile input: nothing the user made is lost, no traceback, no hang.

Each test builds its hostile input in tmp_path: a git clone where the install goes, an install the user
edited, symlinks, a DEST inside the source tree, DESTs that cannot be written, FIFOs and non-UTF-8 files.
"""
import json
import os
import subprocess
import sys

import pytest

import check_pack
import install_skill
from conftest import ROOT

pytestmark = pytest.mark.hostile

SKILL = "---\nname: ml-debug\ndescription: Use when a training run misbehaves.\n---\n# ml-debug\n\nSee `diagnostics/tool.py`.\n"


@pytest.fixture
def source(tmp_path):
    """A tiny valid pack to install from (the real one takes longer to validate)."""
    root = tmp_path / "src"
    (root / "diagnostics").mkdir(parents=True)
    (root / "diagnostics" / "tool.py").write_text('"""A tool."""\n')
    (root / "SKILL.md").write_text(SKILL)
    return root


def tree(folder):
    """Every entry under folder as {relative path: bytes, "link -> target" or "dir"}, links not followed."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        found[rel] = f"link -> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes()
    return found


def refused(capsys, argv, source, *words):
    """main() refuses: exit 2, one line on stderr holding `words`; returns that line."""
    assert install_skill.main(argv, source=source) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def git_clone(folder):
    (folder / ".git" / "refs").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "SKILL.md").write_text(SKILL)
    (folder / "uncommitted.py").write_text("work in progress\n")


def test_a_git_clone_at_the_install_path_is_left_alone_without_force(tmp_path, source, capsys):
    git_clone(tmp_path / "skills" / "ml-debug")
    before = tree(tmp_path / "skills")
    refused(capsys, [str(tmp_path / "skills")], source, "no .install-manifest.json", "git clone", "--force")
    assert tree(tmp_path / "skills") == before  # nothing written, not even a staging folder
    assert install_skill.main([str(tmp_path / "skills"), "--force"], source=source) == 0
    assert not (tmp_path / "skills" / "ml-debug" / ".git").exists()
    kept, = install_skill.kept_aside(tmp_path / "skills")  # --force never deletes: the clone is kept, whole
    assert tree(kept) == before
    assert f"is kept in {kept / 'ml-debug'}" in capsys.readouterr().out


def test_the_cli_refuses_a_git_clone_in_one_line(tmp_path):
    git_clone(tmp_path / "ml-debug")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "install_skill.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "ml-debug" / "uncommitted.py").read_text() == "work in progress\n"


def test_the_manifest_lists_every_installed_file_with_its_hash(tmp_path, source):
    assert install_skill.main([str(tmp_path)], source=source) == 0
    target = tmp_path / "ml-debug"
    manifest = json.loads((target / install_skill.MANIFEST).read_text())
    assert set(manifest["files"]) == {"SKILL.md", "diagnostics/tool.py"}
    assert manifest["files"]["SKILL.md"] == install_skill.sha256(source / "SKILL.md")


def test_force_over_an_unchanged_install_keeps_nothing_aside(tmp_path, source, capsys):
    """Every file of an unchanged earlier install is one we wrote: --force replaces it and keeps no copy of it."""
    assert install_skill.main([str(tmp_path)], source=source) == 0
    assert install_skill.main([str(tmp_path), "--force"], source=source) == 0
    capsys.readouterr()
    assert install_skill.kept_aside(tmp_path) == [] and (tmp_path / "ml-debug" / "SKILL.md").read_text() == SKILL


def test_a_reinstall_replaces_an_unchanged_install_and_refuses_an_edited_one(tmp_path, source, capsys):
    target = tmp_path / "ml-debug"
    assert install_skill.main([str(tmp_path)], source=source) == 0
    (target / "diagnostics" / "tool.py").unlink()  # a deletion loses nothing: still replaceable
    assert install_skill.main([str(tmp_path)], source=source) == 0
    assert (target / "diagnostics" / "tool.py").is_file()
    (target / "SKILL.md").write_text(SKILL + "my own notes\n")
    (target / "diagnostics" / "mine.py").write_text("x = 1\n")
    before = tree(tmp_path)
    refused(capsys, [str(tmp_path)], source, "changed: SKILL.md", "added: diagnostics/mine.py", "--force")
    assert tree(tmp_path) == before
    assert install_skill.main([str(tmp_path), "--force"], source=source) == 0
    assert not (target / "diagnostics" / "mine.py").exists() and (target / "SKILL.md").read_text() == SKILL
    kept, = install_skill.kept_aside(tmp_path)  # the edited install, whole: nothing of the user's is lost
    assert (kept / "ml-debug" / "diagnostics" / "mine.py").read_text() == "x = 1\n"
    assert (kept / "ml-debug" / "SKILL.md").read_text() == SKILL + "my own notes\n"


def test_a_garbled_manifest_counts_as_none(tmp_path, source, capsys):
    assert install_skill.main([str(tmp_path)], source=source) == 0
    (tmp_path / "ml-debug" / install_skill.MANIFEST).write_bytes(b"\xff{not json")
    refused(capsys, [str(tmp_path)], source, "not made by this installer")


def test_a_symlinked_install_path_is_refused_and_force_replaces_only_the_link(tmp_path, source, capsys):
    elsewhere = tmp_path / "my-checkout"
    git_clone(elsewhere)
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "ml-debug").symlink_to(elsewhere)
    before = tree(elsewhere)
    refused(capsys, [str(tmp_path / "skills")], source, "symlink", str(elsewhere))
    assert install_skill.main([str(tmp_path / "skills"), "--force"], source=source) == 0
    assert not (tmp_path / "skills" / "ml-debug").is_symlink()
    assert tree(elsewhere) == before  # what the link pointed to is untouched
    kept, = install_skill.kept_aside(tmp_path / "skills")
    assert os.readlink(kept / "ml-debug") == str(elsewhere)  # and the link itself is kept


def test_dest_inside_the_source_tree_is_refused(tmp_path, source, capsys):
    refused(capsys, [str(source / "build" / "skills")], source, "inside the source tree")
    assert not (source / "build").exists()
    refused(capsys, [str(ROOT / "build" / "skills")], ROOT, "inside the source tree")


def test_an_install_path_holding_the_source_itself_is_refused(tmp_path, capsys):
    clone = tmp_path / "skills" / "ml-debug"  # the repository cloned straight into the skills folder
    (clone / "diagnostics").mkdir(parents=True)
    (clone / "SKILL.md").write_text(SKILL)
    before = tree(clone)
    refused(capsys, [str(tmp_path / "skills"), "--force"], clone, "holds the source tree")
    assert tree(clone) == before


def test_dests_that_cannot_be_written_are_one_line(tmp_path, source, capsys):
    (tmp_path / "a-file").write_text("x")
    refused(capsys, [str(tmp_path / "a-file" / "skills")], source, "is not a folder")
    refused(capsys, [str(tmp_path / "a-file")], source, "is not a folder")
    refused(capsys, ["/proc/ml-debug-skills"], source, "cannot write into /proc/ml-debug-skills")  # unwritable, even for root
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes through the mode bits: /proc above is the unwritable case then
        return
    refused(capsys, [str(locked)], source, "cannot write into")


def test_a_file_at_the_install_path_is_refused(tmp_path, source, capsys):
    (tmp_path / "ml-debug").write_text("my notes")
    refused(capsys, [str(tmp_path)], source, "is not a folder")
    assert (tmp_path / "ml-debug").read_text() == "my notes"


def test_a_full_disk_midway_leaves_the_earlier_install_as_it_was(tmp_path, source, capsys, monkeypatch):
    assert install_skill.main([str(tmp_path)], source=source) == 0
    before = tree(tmp_path)

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(install_skill.shutil, "copyfile", disk_full)
    refused(capsys, [str(tmp_path)], source, "No space left on device", "nothing was changed")
    assert tree(tmp_path) == before  # no staging folder left behind either


def test_a_fifo_in_the_source_is_not_copied_and_does_not_hang(tmp_path, source):
    os.mkfifo(source / "diagnostics" / "pipe.py")
    assert install_skill.main([str(tmp_path / "skills")], source=source) == 0
    assert not (tmp_path / "skills" / "ml-debug" / "diagnostics" / "pipe.py").exists()


# --- the pack checker ------------------------------------------------------------------------------------


def test_an_empty_folder_is_not_a_valid_pack(tmp_path):
    assert any("SKILL.md" in p and "missing" in p for p in install_skill.validate_install(tmp_path))


def test_non_utf8_and_non_regular_pack_files_are_findings_not_tracebacks(tmp_path, source):
    (source / "SKILL.md").write_bytes(SKILL.encode() + b"caf\xe9\n")
    (source / "refs").mkdir()
    os.mkfifo(source / "refs" / "pipe.md")
    (source / "diagnostics" / "latin1.py").write_bytes(b'"""caf\xe9"""\n')
    problems = [str(p) for p in check_pack.Checker(source, shared=None).run()]
    assert f"SKILL.md:8: not UTF-8 text (byte 0xe9 at offset {len(SKILL) + 3}); save it as UTF-8" in problems
    assert "refs/pipe.md:1: not a regular file" in problems
    assert any(p.startswith("diagnostics/latin1.py:1: not UTF-8") for p in problems)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_pack.py"), str(source)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "SKILL.md unreadable" in proc.stderr


def test_the_installer_reports_an_unreadable_skill_as_invalid(tmp_path, source, capsys):
    (source / "SKILL.md").write_bytes(b"\xff\xfe" + SKILL.encode("utf-16-le"))
    assert install_skill.main([str(tmp_path)], source=source) == 1
    out = capsys.readouterr()
    assert "SKILL.md:1: not UTF-8 text" in out.out and "Traceback" not in out.err


@pytest.mark.parametrize("target, code", [("closed pipe", 0), ("/dev/full", 1)])
def test_a_closed_or_full_stdout_ends_the_installer_quietly(tmp_path, source, monkeypatch, capsys, target, code):
    if target == "closed pipe":
        read, write = os.pipe()
        os.close(read)
        stream = os.fdopen(write, "w")
    else:
        stream = open("/dev/full", "w")
    monkeypatch.setattr("sys.stdout", stream)
    assert install_skill.main([str(tmp_path)], source=source) == code
    assert (tmp_path / "ml-debug" / "SKILL.md").read_text() == SKILL  # the install itself is done
    assert capsys.readouterr().err == ""
    stream.close()


def test_ctrl_c_midway_leaves_no_half_made_install(tmp_path, source, monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(install_skill.shutil, "copyfile", interrupted)
    assert install_skill.main([str(tmp_path / "skills")], source=source) == 130
    assert list((tmp_path / "skills").iterdir()) == [] and capsys.readouterr() == ("", "")


def test_a_folder_in_the_install_that_cannot_be_listed_stops_the_reinstall(tmp_path, source, monkeypatch, capsys):
    assert install_skill.main([str(tmp_path)], source=source) == 0
    private = tmp_path / "ml-debug" / "private"
    private.mkdir()
    (private / "secrets.txt").write_text("mine")
    real_walk = os.walk

    def walk(top, onerror=None, **kwargs):  # as root, chmod 000 cannot hide a folder: the error is simulated
        for folder, dirs, names in real_walk(top, onerror=onerror, **kwargs):
            if folder == str(private):
                onerror(PermissionError(13, "Permission denied", folder))
                return
            yield folder, dirs, names

    monkeypatch.setattr(install_skill.os, "walk", walk)
    refused(capsys, [str(tmp_path)], source, f"cannot read {private} (Permission denied)")
    assert (private / "secrets.txt").read_text() == "mine"


@pytest.mark.parametrize("files, valid", [({"SKILL.md": "ab12"}, True), ({"SKILL.md": 3}, False), ({"SKILL.md": None}, False)])
def test_a_manifest_is_ours_only_when_every_entry_maps_a_path_to_a_digest(tmp_path, files, valid):
    """An entry whose digest is no string is no manifest of ours: the folder is then a stranger's, never replaced."""
    (tmp_path / install_skill.MANIFEST).write_text(json.dumps({"kind": install_skill.MANIFEST_KIND, "files": files}))
    assert (install_skill.read_manifest(tmp_path) == files) is valid and (install_skill.read_manifest(tmp_path) is None) is not valid
