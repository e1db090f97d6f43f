"""Where --plot and --postmortem may write: the contract's output_file decides (never the log, a folder, a device,
or without --force a file that is there), after the extension."""
from pathlib import Path

from ml_debug_contract import OutputRefused, output_file

from . import CliError


OUTPUTS = {"--plot": (".png", ".svg", ".pdf"), "--postmortem": (".md", ".markdown", ".txt")}


def check_output(option, out, log, force):
    """Refuse an output path before any work: an unknown extension, or what output_file refuses."""
    if Path(out).suffix.lower() not in OUTPUTS[option]:
        raise CliError(f"{option} {out}: unknown extension; use {', '.join(OUTPUTS[option])}")
    try:
        output_file(out, force, inputs=[log], option=option)
    except OutputRefused as exc:
        raise CliError(str(exc)) from None


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
