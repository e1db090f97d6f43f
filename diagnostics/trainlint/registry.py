"""The rule registry, the single source of truth for ids, docs and examples; and the Finding a rule yields."""
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # one line: --list-rules and the docs' contents
    why: str  # what goes wrong, and what to write instead
    bad: str  # a snippet the rule flags; the flagged line carries a `# BUG:` comment
    good: str  # the fixed snippet; it lints clean
    check: object  # check(source) -> iterable of (node, message)


RULES = {}


def rule(id, summary, why, bad, good):
    """Register the decorated check under `id`, with its documentation and examples."""
    def register(check):
        RULES[id] = Rule(id, summary, " ".join(why.split()), textwrap.dedent(bad).strip() + "\n",
                         textwrap.dedent(good).strip() + "\n", check)
        return check
    return register


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    line: int
    message: str
    cell: int = None  # in a notebook: the cell (from 1), and line is the line in that cell

    def as_json(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def where(self):
        return f"{self.path}:cell {self.cell}:{self.line}" if self.cell is not None else f"{self.path}:{self.line}"
