"""Where --plot and --postmortem may write: never over the log, a folder, a device, or (without --force) a file."""
import stat
from pathlib import Path

from . import CliError


OUTPUTS = {"--plot": (".png", ".svg", ".pdf"), "--postmortem": (".md", ".markdown", ".txt")}


def check_output(option, out, log, force):
    """Refuse an output path before any work: the log itself, a folder, a device, an unknown extension,
    or (without --force) a file that is already there. Nothing is written that would destroy data."""
    path = Path(out)
    if path.suffix.lower() not in OUTPUTS[option]:
        raise CliError(f"{option} {out}: unknown extension; use {', '.join(OUTPUTS[option])}")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise CliError(f"{option} {out}: no such folder {path.parent}") from None
        return
    if not stat.S_ISREG(mode):
        raise CliError(f"{option} {out}: a folder or a device, not a file: refused")
    if Path(log).exists() and path.samefile(log):
        raise CliError(f"{option} {out}: that is the log itself: refused")
    if not force:
        raise CliError(f"{option} {out}: the file exists; pass --force to overwrite it, or choose another name")


def write_output(out, write, force):
    """Call write(binary handle) on `out`, created afresh (or replaced with --force). A file this run created
    and could not finish is removed: it was ours."""
    try:
        handle = open(out, "wb" if force else "xb")
    except FileExistsError:
        raise CliError(f"{out}: the file exists; pass --force to overwrite it, or choose another name") from None
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        with handle:
            write(handle)
    except OSError as exc:
        if not force:
            Path(out).unlink(missing_ok=True)
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
