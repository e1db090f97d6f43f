"""Install the ml-debug skill into a coding agent's skills folder.

    python tools/install_skill.py DEST [--force]   # e.g. ~/.claude/skills or ~/my-project/.agents/skills

Copies the agent-facing files (SKILL.md, PLAYBOOK.md, refs/, evidence/, diagnostics/) into
DEST/ml-debug/ with a manifest of what it wrote (MANIFEST: each file's path and sha256), then
validates the copy: the Agent Skills validator (`skills-ref`, which the pack checker runs) and the
rest of the pack checker, on the copy alone, so a link that leaves the installed folder is caught.
Tests, site build and tooling stay behind.

It never deletes or overwrites what it did not write. A re-install replaces DEST/ml-debug only
when it is an earlier install whose files all still match its manifest (a file the user deleted
loses nothing and does not count). It refuses, without touching anything:
- a DEST/ml-debug with files changed or added since the install, or with no manifest (a git
  clone, a copy made by hand): it lists what it found; --force installs in its place and keeps
  it, whole, in a hidden folder of DEST (.ml-debug-replaced-*; it says where): nothing is deleted;
- a DEST/ml-debug that is a symlink (it says where it points; --force keeps the link aside the
  same way, and never touches what it points to);
- a DEST inside the source tree, or a DEST/ml-debug that holds the source tree;
- a DEST that is not a folder or cannot be written.
The new copy is staged in a hidden folder inside DEST and moved into place in one rename, so a
failure half-way leaves the earlier install as it was.

Exit 0 when installed and valid, 1 when the copy does not validate, 2 on bad usage or a refusal
(one line on stderr).
"""
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import check_pack

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "diagnostics") not in sys.path:  # the commands' contract module, with the one-line usage errors
    sys.path.append(str(ROOT / "diagnostics"))
from ml_debug_contract import ArgumentParser, sha256  # noqa: E402
SKILL_NAME = "ml-debug"
AGENT_FILES = ("SKILL.md", "PLAYBOOK.md", "refs", "evidence", "diagnostics")
MANIFEST = ".install-manifest.json"  # inside the install; hidden, so an agent does not read it as part of the skill
MANIFEST_KIND = "ml-debug install-skill manifest"
SHOWN = 5  # paths named in a refusal; the count says how many more


class Refused(Exception):
    """The installer will not go on: the message says what is there and how to proceed."""


def source_files(source):
    """{relative posix path: absolute path} of the regular files to install, without caches."""
    files = {}
    for name in AGENT_FILES:
        top = source / name
        if top.is_file():
            files[name] = top
        elif top.is_dir():
            for folder, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for file in sorted(names):
                    path = Path(folder) / file
                    if path.suffix != ".pyc" and path.is_file():  # a FIFO or a device in the tree is not copied
                        files[path.relative_to(source).as_posix()] = path
    return files


def installed_files(target):
    """Relative posix paths of every non-folder entry under target (symlinks not followed), manifest excluded."""
    def unreadable(exc):  # a folder that cannot be listed may hold the user's files: stop, do not guess
        raise Refused(f"cannot read {exc.filename} ({exc.strerror}); nothing was changed")

    found = []
    for folder, dirs, names in os.walk(target, onerror=unreadable):  # a symlink to a folder: in dirs, not entered
        found += [(Path(folder) / n).relative_to(target).as_posix()
                  for n in names + [d for d in dirs if (Path(folder) / d).is_symlink()]]
    return sorted(set(found) - {MANIFEST})


def read_manifest(target):
    """{relative path: sha256} from target's manifest, or None when there is no valid one."""
    try:
        data = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("kind") == MANIFEST_KIND else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return files


def changes(target, manifest):
    """(changed, added) relative paths: what the user did to an earlier install since it was written."""
    changed, added = [], []
    for rel in installed_files(target):
        path = target / rel
        if rel not in manifest:
            added.append(rel)
        elif path.is_symlink() or not path.is_file() or not os.access(path, os.R_OK) or sha256(path) != manifest[rel]:
            changed.append(rel)
    return changed, added


def listing(paths):
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def inside(path, folder):
    return path == folder or folder in path.parents


def unchanged_install(target):
    """Whether target is an earlier install whose files all still match its manifest: every file in it is ours."""
    manifest = None if target.is_symlink() or not target.is_dir() else read_manifest(target)
    return manifest is not None and changes(target, manifest) == ([], [])


def preflight(dest, source, force):
    """(resolved DEST, target, whether target holds only what we wrote) after every refusal check; nothing is
    written here."""
    source = source.resolve()
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    existing = next(p for p in (dest, *dest.parents) if os.path.lexists(p))
    if not existing.is_dir():
        raise Refused(f"{existing} is not a folder; DEST must be a folder (or a path that can become one)")
    resolved = dest.resolve()
    if inside(resolved, source):
        raise Refused(f"DEST {dest} is inside the source tree {source}; pick a skills folder outside it")
    target = resolved / SKILL_NAME
    if target.is_symlink():
        if not force:
            raise Refused(f"{target} is a symlink to {os.readlink(target)}; nothing was changed. Remove the link, or "
                          "pass --force to put an install in its place (the link is kept aside, what it points to is "
                          "left alone)")
        return resolved, target, False
    if inside(source, target):
        raise Refused(f"{target} holds the source tree {source} itself; install into another DEST")
    if not os.path.lexists(target):
        return resolved, target, True
    if force:
        return resolved, target, unchanged_install(target)
    if not target.is_dir():
        raise Refused(f"{target} exists and is not a folder; nothing was changed. Move it away, or pass --force "
                      "to install in its place (it is kept aside)")
    manifest = read_manifest(target)
    if manifest is None:
        what = " (it holds .git: a git clone)" if (target / ".git").exists() else ""
        raise Refused(f"{target} exists and was not made by this installer (no {MANIFEST}){what}; nothing was "
                      "changed. Move it away, or pass --force to install in its place (it is kept aside, whole)")
    changed, added = changes(target, manifest)
    if changed or added:
        found = "; ".join(part for part in (f"changed: {listing(changed)}" if changed else "",
                                            f"added: {listing(added)}" if added else "") if part)
        raise Refused(f"{target} is an earlier install that was edited since ({found}); nothing was changed. "
                      "Save those edits elsewhere, or pass --force to install in its place (it is kept aside, whole)")
    return resolved, target, True


def install(dest, source=ROOT, force=False):
    """Copy the agent-facing files of `source` to dest/ml-debug with a manifest; return that folder.

    Raises Refused when dest/ml-debug holds anything this installer did not write, unchanged, and not force. With
    force, what stood there is moved whole into a hidden folder of DEST (kept_aside(DEST) finds it), never deleted.
    """
    source = Path(source)
    resolved, target, ours = preflight(dest, source, force)
    try:
        resolved.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{SKILL_NAME}-staging-", dir=resolved))
    except OSError as exc:
        raise Refused(f"cannot write into {resolved}: {exc.strerror or exc}") from None
    replaced = None  # a folder of ours holding what target held, until the new copy is in place
    try:
        manifest = {}
        for rel, path in source_files(source).items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, staging / rel)
            manifest[rel] = sha256(staging / rel)
        (staging / MANIFEST).write_text(json.dumps({"kind": MANIFEST_KIND, "source": str(source.resolve()),
                                                    "files": manifest}, indent=1) + "\n", encoding="utf-8")
        os.chmod(staging, 0o755)  # mkdtemp makes it private; an install is as readable as any copied folder
        if os.path.lexists(target):
            replaced = Path(tempfile.mkdtemp(prefix=f".{SKILL_NAME}-replaced-", dir=resolved))
            os.rename(target, replaced / SKILL_NAME)
        try:
            os.rename(staging, target)
        except BaseException:
            if replaced is not None:
                os.rename(replaced / SKILL_NAME, target)  # put the earlier install back as it was
            raise
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if replaced is not None:
            replaced.rmdir()
        if isinstance(exc, OSError):
            raise Refused(f"cannot write the install into {resolved}: {exc.strerror or exc}; nothing was "
                          "changed") from None
        raise
    if replaced is not None and ours:
        shutil.rmtree(replaced)  # an unchanged earlier install: every file in it is one we wrote
    return target


def kept_aside(dest):
    """The folders of DEST where --force moved what stood at DEST/ml-debug, each holding it as ml-debug."""
    return sorted(Path(dest).expanduser().resolve().glob(f".{SKILL_NAME}-replaced-*"))


def validate_install(target):
    """Problems the pack checker finds in an installed copy, the skills-ref validator's among them."""
    return [str(p) for p in check_pack.Checker(target, shared=None).run()]


def main(argv=None, source=ROOT):
    """The command line; `source` is the pack's top folder to install from (this repository by default)."""
    parser = ArgumentParser(prog="install_skill.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the agent's skills folder; the skill lands in DEST/ml-debug/")
    parser.add_argument("--force", action="store_true",
                        help="install even when DEST/ml-debug holds files this installer did not write (it is kept, "
                             "whole, in a hidden folder of DEST)")
    args = parser.parse_args(argv)
    try:
        earlier = set(kept_aside(args.dest))
        try:
            target = install(args.dest, source, args.force)
        except Refused as exc:
            print(f"install_skill.py: {exc}", file=sys.stderr)
            return 2
        problems = validate_install(target)
        sys.stdout.write("".join(f"{problem}\n" for problem in problems))
        if not problems:
            sys.stdout.write(f"installed to {target}; skills-ref validate and the pack checker pass on the copy\n")
        for folder in sorted(set(kept_aside(args.dest)) - earlier):
            sys.stdout.write(f"what stood at {target} before --force is kept in {folder / SKILL_NAME}\n")
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback; a half-made copy was removed
        return 130
    except OSError as exc:  # `... | head` closed the pipe, or stdout is a full disk: the install itself is done
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return 0 if isinstance(exc, BrokenPipeError) and not problems else 1
    if problems:
        print(f"installed to {target}, but the copy does not validate ({len(problems)} problem(s))", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
