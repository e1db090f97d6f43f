"""The `ml-debug` command: each subcommand runs the file it names, exactly as `python <file>` would.

    ml-debug doctor [--case my_case.py] [--json]    diagnostics/doctor.py
    ml-debug spikes train_log.jsonl                 diagnostics/spikes.py
    ml-debug lint train.py                          diagnostics/lint.py
    ml-debug resume-check --trainer my_trainer.py   diagnostics/resume_check.py
    ml-debug install-skill DEST                     tools/install_skill.py

Arguments after the subcommand go to the file unchanged; `ml-debug <subcommand> --help` prints its
own help. Exit codes are the file's: 0 nothing failed, 1 a check failed, 2 bad usage.
"""
import runpy
import sys

from ml_debug import DIAGNOSTICS, PACK_ROOT, __version__, load

COMMANDS = {  # subcommand -> (file, what it does)
    "doctor": (DIAGNOSTICS / "doctor.py", "run every check that applies to a training case (no --case: a demo with a planted bug)"),
    "spikes": (DIAGNOSTICS / "spikes.py", "find and classify loss spikes in a training log"),
    "lint": (DIAGNOSTICS / "lint.py", "find silent PyTorch training bugs in source code, without running it"),
    "resume-check": (DIAGNOSTICS / "resume_check.py", "test that a checkpoint resume continues the run exactly"),
    "install-skill": (PACK_ROOT / "tools" / "install_skill.py", "copy the skill pack into a coding agent's skills folder"),
}
SKILL_NEEDS = ("yaml", "markdown_it", "mdit_py_plugins", "skills_ref")  # the pack checker's imports: extra [skill]


def usage():
    width = max(map(len, COMMANDS))
    lines = [f"usage: ml-debug <command> [args...]   (ml-debug {__version__})", "",
             "ml-debug: a debugging companion for people and coding agents who train neural networks.", "", "commands:"]
    lines += [f"  {name:{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    lines += ["", "`ml-debug <command> --help` prints the command's own help. In your training loop:",
              "  from ml_debug import TrainingMonitor, SpikeGuard, NanWatch, run_doctor"]
    return "\n".join(lines)


def run_file(path, args):
    """Run a diagnostic file as `python path args...` does: as __main__, its folder first on sys.path."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def install_skill(args):
    """tools/install_skill.py's main(), which copies the pack beside it and validates the copy."""
    sys.path.insert(0, str(COMMANDS["install-skill"][0].parent))
    sys.argv = ["ml-debug install-skill", *args]  # argparse names the program after argv[0]
    try:
        import install_skill as installer
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SKILL_NEEDS:
            raise
        print(f"error: install-skill validates the copy with the pack checker, which needs {exc.name.split('.')[0]}: "
              "pip install 'ml-debug[skill]'", file=sys.stderr)
        return 2
    return installer.main(args)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"], ["--version"]):
        try:
            print(f"ml-debug {__version__}" if argv[0] == "--version" else usage())
            sys.stdout.flush()
        except OSError as exc:  # `ml-debug --version | true`: the reader left; `> /dev/full`: exit 1; no traceback
            return load("ml_debug_contract").stdout_lost(exc, 0)
        return 0
    parser = load("ml_debug_contract").ArgumentParser(prog="ml-debug", add_help=False)  # bad usage: one line, exit 2
    parser.add_argument("command", choices=COMMANDS)
    try:
        if not argv or argv[0].startswith("-"):
            parser.error(f"a command comes first, one of: {', '.join(COMMANDS)} (see ml-debug --help)")
        command = parser.parse_args(argv[:1]).command
    except SystemExit as exc:
        return exc.code
    args = argv[1:]  # the command's own, passed on unchanged (a `--` among them too)
    if command == "install-skill":
        return install_skill(args)
    return run_file(COMMANDS[command][0], args)


if __name__ == "__main__":
    sys.exit(main())
