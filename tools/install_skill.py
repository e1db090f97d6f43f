"""Install the ml-debug skill into a coding agent's skills folder.

    python tools/install_skill.py DEST        # e.g. ~/.claude/skills or .agents/skills

Copies the agent-facing files (SKILL.md, PLAYBOOK.md, refs/, evidence/, diagnostics/) into
DEST/ml-debug/, replacing an earlier install there, then validates the copy: the Agent Skills
validator (`skills-ref`, which the pack checker runs) and the rest of the pack checker, on the copy alone, so a link that leaves the
installed folder is caught. Tests, site build and tooling stay behind.
Exit 0 when installed and valid, 1 when the copy does not validate, 2 on bad usage.
"""
import argparse
import shutil
import sys
from pathlib import Path

import check_pack

ROOT = Path(__file__).resolve().parents[1]
SKILL_NAME = "ml-debug"
AGENT_FILES = ("SKILL.md", "PLAYBOOK.md", "refs", "evidence", "diagnostics")


def install(dest):
    """Copy the agent-facing files to dest/ml-debug and return that folder."""
    target = Path(dest).expanduser().resolve() / SKILL_NAME
    if target.exists():
        if not (target / "SKILL.md").is_file():
            raise ValueError(f"{target} exists and is not an ml-debug install; remove it or pick another DEST")
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in AGENT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.is_file():
            shutil.copy2(source, target / name)
    return target


def validate_install(target):
    """Problems the pack checker finds in an installed copy, the skills-ref validator's among them."""
    return [str(p) for p in check_pack.Checker(target, shared=None).run()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the agent's skills folder; the skill lands in DEST/ml-debug/")
    args = parser.parse_args(argv)
    if args.dest.exists() and not args.dest.is_dir():
        print(f"error: {args.dest} is not a folder", file=sys.stderr)
        return 2
    try:
        target = install(args.dest)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problems = validate_install(target)
    for problem in problems:
        print(problem)
    if problems:
        print(f"installed to {target}, but the copy does not validate ({len(problems)} problem(s))", file=sys.stderr)
        return 1
    print(f"installed to {target}; skills-ref validate and the pack checker pass on the copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
