"""Check that the pack tells the truth and holds together.

    python tools/check_pack.py [ROOT] [--shared DIR]

Over every markdown page of the pack (SKILL.md, PLAYBOOK.md, README.md, CONTRIBUTING.md,
refs/, evidence/, site/) it checks that:

- every quote (a blockquote, or text in quotation marks followed by a footnote) resolves through
  its footnote to an excerpt of an evidence file, and its words are found there in order
  (whitespace, quote style, dashes and emphasis normalised; `[...]` marks an elision);
- every blockquote carries a source footnote; every footnote is defined and used;
- every relative link and `#anchor` resolves;
- evidence front matter is complete and valid, and every evidence file is cited by a page;
- when the shared folder is present, every excerpt is found in the text `obtained_via` names;
- SKILL.md passes the Agent Skills validator (`skills-ref`) on a copy installed as `ml-debug/`,
  and stays within its budget (500 body lines, 5,000 tokens counted as below);
- SKILL.md is there, and every page and diagnostic is a regular file of UTF-8 text;
- every `diagnostics/...` path a page mentions exists;
- in the prose sections of a diagnostic's docstring (all but Command and Output, which hold
  commands and captured runs), quoted text of four words or more carries an
  `(evidence/<file>.md#<excerpt>)` reference right after it, and its words are in that excerpt.

Prints one `path:line: message` per problem; exit 0 when clean, 1 on problems, 2 on bad usage.

Token count: there is no offline reference tokenizer, so we count
max(ceil(characters / 4), words + punctuation marks). Both are the usual rules of thumb for
English BPE vocabularies (assumed, not measured against a tokenizer); the larger of the two
keeps the estimate on the safe side.
"""
import argparse
import ast
import dataclasses
import datetime
import html
import math
import os
import re
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin
from skills_ref.validator import validate as validate_skill_folder

SKILL_MAX_LINES = 500  # agentskills.io guidance for SKILL.md bodies
SKILL_MAX_TOKENS = 5000  # agentskills.io guidance ("< 5000 tokens recommended")
EVIDENCE_REQUIRED = ("id", "title", "author", "url", "retrieved", "obtained_via", "status")
EVIDENCE_STATUSES = ("verbatim", "verbatim-excerpts", "abridged")
PAGE_GLOBS = ("SKILL.md", "PLAYBOOK.md", "README.md", "CONTRIBUTING.md", "refs/**/*.md", "evidence/*.md", "site/**/*.md")
ELISION = re.compile(r"\[(?:\.\.\.|…)\]")
INLINE_QUOTE = re.compile(r"[\"“]([^\"“”]+)[\"”][\s.,;:!?)]*\[\^([^\]\s]+)\]")  # may span lines of a paragraph
DOCSTRING_QUOTE = re.compile(r"[\"“]([^\"“”]+)[\"”][\s.,;:!?]*(?:\((evidence/[\w.-]+\.md#[\w-]+)\))?")
DOCSTRING_SECTIONS = ("Symptom", "What it checks", "Command", "Output", "How to read it", "Next step")  # CONTRIBUTING.md
DOCSTRING_VERBATIM_SECTIONS = ("Command", "Output")  # commands and captured runs, not prose
DIAGNOSTIC_PATH = re.compile(r"\bdiagnostics/[\w./-]*\w\.py\b")
UNDEFINED_REF = re.compile(r"\[\^([^\]\s]+)\]")

MARKDOWN = MarkdownIt("commonmark").use(footnote_plugin).use(front_matter_plugin).enable("table")


@dataclasses.dataclass
class Problem:
    path: str
    line: int
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.message}"


def plain(text):
    """Normalise markdown or HTML text for word-for-word comparison."""
    text = re.sub(r"</?[A-Za-z][^<>]*>", " ", text)  # HTML tags, not "<5 minutes"
    text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images keep their text
    text = re.sub(r"\[\^[^\]\s]+\]", "", text)  # footnote references
    text = re.sub(r"(?m)^[ \t]*(?:>[ \t]?)*[ \t]*(?:#{1,6}[ \t]+|[-*+][ \t]+|\d+[.)][ \t]+)?", "", text)
    text = text.translate(str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "—": "-", "–": "-", "−": "-"}))
    text = re.sub(r"[*_`\\]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def found_in_order(quote, haystack):
    """True when every `[...]`-separated part of `quote` occurs in `haystack`, in order."""
    position = 0
    for part in (plain(p) for p in ELISION.split(quote)):
        if not part:
            continue
        position = haystack.find(part, position)
        if position < 0:
            return False
        position += len(part)
    return True


def shorten(quote, width=70):
    """A quote as it appears in a problem message: normalised, cut to `width` characters."""
    shown = plain(quote)
    return shown if len(shown) <= width else shown[: width - 3] + "..."


def estimate_tokens(text):
    return max(math.ceil(len(text) / 4), len(re.findall(r"\w+|[^\w\s]", text)))


def slugify(text):
    """Python-Markdown's toc slug (what mkdocs renders), so anchors here match the site."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@dataclasses.dataclass
class Page:
    """One parsed markdown page: its tokens, headings, footnotes and raw lines."""

    path: Path
    rel: str
    lines: list
    tokens: list
    front_matter: str | None
    anchors: set
    sections: dict  # evidence anchor -> list of excerpt texts (blockquotes under that heading)
    footnote_links: dict  # label -> the hrefs in its definition, for every referenced footnote
    defined_labels: dict  # label -> line, for every footnote definition, used or not

    @classmethod
    def parse(cls, path, root):
        text = read_text(path)
        tokens = MARKDOWN.parse(text, {})
        lines = text.splitlines()
        front_matter = next((t.content for t in tokens if t.type == "front_matter"), None)
        anchors, sections, footnote_links = set(), {}, {}
        seen_slugs = {}
        current_section = None
        footnote_label = None
        depth = 0
        for i, token in enumerate(tokens):
            if token.type == "heading_open":
                title = tokens[i + 1].content
                explicit = re.search(r"\{\s*#([\w-]+)\s*\}\s*$", title)
                slug = explicit.group(1) if explicit else slugify(title)
                if slug in seen_slugs and not explicit:
                    seen_slugs[slug] += 1
                    slug = f"{slug}_{seen_slugs[slug]}"
                else:
                    seen_slugs[slug] = 0
                anchors.add(slug)
                if token.tag in ("h1", "h2"):
                    current_section = slug if token.tag == "h2" else None
            elif token.type == "footnote_open":
                footnote_label = token.meta["label"]
                footnote_links[footnote_label] = []
            elif token.type == "footnote_close":
                footnote_label = None
            elif token.type == "blockquote_open":
                if depth == 0 and current_section is not None:
                    sections.setdefault(current_section, []).append(blockquote_text(lines, token))
                depth += 1
            elif token.type == "blockquote_close":
                depth -= 1
            elif token.type == "inline" and footnote_label is not None:
                footnote_links[footnote_label].extend(c.attrGet("href") for c in token.children if c.type == "link_open")
        in_code = {n for t in tokens if t.type in ("fence", "code_block") for n in range(*t.map)}
        defined_labels = {}
        for number, line in enumerate(lines):
            match = re.match(r"\[\^([^\]\s]+)\]:", line)
            if match and number not in in_code:
                defined_labels.setdefault(match.group(1), number + 1)
        rel = path.relative_to(root).as_posix()
        return cls(path, rel, lines, tokens, front_matter, anchors, sections, footnote_links, defined_labels)


class Unreadable(Exception):
    """A pack file that is not a regular UTF-8 text file; the message says where."""

    def __init__(self, line, message):
        super().__init__(message)
        self.line = line


def read_text(path):
    """A pack file's text; Unreadable (with the line) for a non-regular file or bytes that are not UTF-8."""
    if not path.is_file():  # a FIFO or a device would block or never end
        raise Unreadable(1, "not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Unreadable(1, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise Unreadable(line, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                               "save it as UTF-8") from None


def blockquote_text(lines, token):
    """The raw text of a blockquote (its `>` markers are dropped by `plain`)."""
    start, end = token.map
    return "\n".join(lines[start:end])


class Checker:
    def __init__(self, root, shared):
        self.root = root
        self.shared = shared if shared is not None and shared.is_dir() else None
        self.problems = []
        self.pages = {}
        for pattern in PAGE_GLOBS:
            for path in sorted(root.glob(pattern)):
                if path.is_file():
                    try:
                        self.pages[path.resolve()] = Page.parse(path, root)
                    except Unreadable as exc:
                        self.problems.append(Problem(path.relative_to(root).as_posix(), exc.line, str(exc)))
                elif not path.is_dir():  # a FIFO, a device, a dangling link
                    self.problems.append(Problem(path.relative_to(root).as_posix(), 1, "not a regular file"))
        self.cited_evidence = set()
        self.quotes_verified = 0

    def report(self, page, line, message):
        self.problems.append(Problem(page.rel, line, message))

    def run(self):
        for page in self.pages.values():
            self.check_footnotes(page)
            self.check_quotes(page)
            self.check_links(page)
            self.check_diagnostic_paths(page)
            if page.rel.startswith("evidence/"):
                self.check_evidence(page)
        for page in self.pages.values():
            if page.rel.startswith("evidence/") and page.path.resolve() not in self.cited_evidence:
                self.report(page, 1, "evidence file is not cited by any page of the pack")
        for path in sorted(self.root.glob("diagnostics/**/*.py")):  # the folders of the bigger tools too
            self.check_docstring_quotes(path)
        skill = self.root / "SKILL.md"
        if not os.path.lexists(skill):
            self.problems.append(Problem("SKILL.md", 1, f"missing: a skill pack has SKILL.md at its top ({self.root})"))
        elif not skill.is_file():
            self.problems.append(Problem("SKILL.md", 1, "not a regular file"))
        if skill.resolve() in self.pages:
            self.check_skill_budget(self.pages[skill.resolve()])
            self.check_skill_format(self.pages[skill.resolve()])
        return self.problems

    # -- footnotes and quotes ------------------------------------------------------------

    def check_footnotes(self, page):
        used = set()
        for token in page.tokens:
            if token.type != "inline":
                continue
            for child in token.children:
                if child.type == "footnote_ref":
                    used.add(child.meta["label"])
                elif child.type == "text":
                    for label in UNDEFINED_REF.findall(child.content):
                        self.report(page, token.map[0] + 1, f"footnote [^{label}] is used but never defined")
        for label, line in page.defined_labels.items():
            if label not in used:
                self.report(page, line, f"footnote [^{label}] is defined but never used")

    def check_quotes(self, page):
        depth = 0
        for token in page.tokens:
            if token.type == "blockquote_open":
                if depth == 0:
                    self.check_blockquote(page, token)
                depth += 1
            elif token.type == "blockquote_close":
                depth -= 1
            elif token.type == "inline" and depth == 0 and not page.rel.startswith("evidence/"):
                for match in INLINE_QUOTE.finditer(token.content):
                    self.verify_quote(page, token.map[0] + 1, match.group(1), match.group(2))

    def check_blockquote(self, page, token):
        if page.rel.startswith("evidence/"):
            return  # evidence excerpts are the sources themselves
        text = blockquote_text(page.lines, token)
        parts = re.split(r"\[\^([^\]\s]+)\]", text)  # text, label, text, label, ..., trailing text
        line = token.map[0] + 1
        if len(parts) == 1:
            self.report(page, line, "blockquote without a source footnote: every blockquote is a quote and needs one")
            return
        for quote, label in zip(parts[0::2], parts[1::2]):
            self.verify_quote(page, line, quote, label)
        if plain(parts[-1]).strip(" .,;:"):
            self.report(page, line, "blockquote text after its last footnote has no source")

    def verify_quote(self, page, line, quote, label):
        links = page.footnote_links.get(label)
        if links is None:
            return  # reported by check_footnotes
        evidence_links = [h for h in links if h and "evidence/" in h and "#" in h]
        if not evidence_links:
            self.report(page, line, f"quote's footnote [^{label}] has no link to evidence/<file>.md#<excerpt>")
            return
        target, _, anchor = evidence_links[0].partition("#")
        evidence = self.pages.get((page.path.parent / target).resolve())
        if evidence is None:
            self.report(page, line, f"quote's footnote [^{label}] points at missing evidence file {target}")
            return
        outcome = self.match_excerpt(evidence, anchor, quote)
        if outcome == "no excerpt":
            self.report(page, line, f"quote's footnote [^{label}] points at {target}#{anchor}, which holds no excerpt")
        elif outcome == "mismatch":
            self.report(page, line, f'quote "{shorten(quote)}" is not found word for word in {target}#{anchor}')

    def match_excerpt(self, evidence, anchor, quote):
        """None when the quote's words are in evidence#anchor (and counted), else "no excerpt" or "mismatch"."""
        excerpts = evidence.sections.get(anchor) if evidence is not None else None
        if not excerpts:
            return "no excerpt"
        if not found_in_order(quote, plain(" ".join(excerpts))):
            return "mismatch"
        self.quotes_verified += 1
        return None

    def check_docstring_quotes(self, path):
        """Quotes in a diagnostic's tutorial docstring must name their evidence excerpt and match it."""
        rel = path.relative_to(self.root).as_posix()
        try:
            tree = ast.parse(read_text(path))
        except Unreadable as exc:
            self.problems.append(Problem(rel, exc.line, str(exc)))
            return
        except SyntaxError as exc:
            self.problems.append(Problem(rel, exc.lineno or 1, f"cannot parse: {exc.msg}"))
            return
        node = tree.body[0] if tree.body else None
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return
        lines = node.value.value.splitlines()
        prose = "\n".join("" if self._docstring_section(lines, i) in DOCSTRING_VERBATIM_SECTIONS else line for i, line in enumerate(lines))
        for match in DOCSTRING_QUOTE.finditer(prose):
            quote, reference = match.group(1), match.group(2)
            if len(quote.split()) < 4:
                continue  # a term or a name, not somebody's words
            line = node.lineno + prose.count("\n", 0, match.start())
            if reference is None:
                self.problems.append(Problem(rel, line, f'quoted text "{shorten(quote)}" needs an (evidence/<file>.md#<excerpt>) reference after it'))
                continue
            target, _, anchor = reference.partition("#")
            evidence = self.pages.get((self.root / target).resolve())
            outcome = self.match_excerpt(evidence, anchor, quote)
            if outcome == "no excerpt":
                self.problems.append(Problem(rel, line, f"reference {reference} holds no excerpt"))
            elif outcome == "mismatch":
                self.problems.append(Problem(rel, line, f'quote "{shorten(quote)}" is not found word for word in {reference}'))
            if evidence is not None:
                self.cited_evidence.add(evidence.path.resolve())

    @staticmethod
    def _docstring_section(lines, index):
        """The tutorial section (a heading alone at column 0) that line `index` of a docstring is in."""
        for line in reversed(lines[: index + 1]):
            if line and not line[0].isspace() and line.strip() in DOCSTRING_SECTIONS:
                return line.strip()
        return None

    # -- links -----------------------------------------------------------------------------

    def check_links(self, page):
        for token in page.tokens:
            if token.type != "inline":
                continue
            for child in token.children:
                href = child.attrGet("href") if child.type == "link_open" else child.attrGet("src") if child.type == "image" else None
                if href and not re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):
                    self.check_link(page, token.map[0] + 1, href)

    def check_link(self, page, line, href):
        target, _, anchor = href.partition("#")
        target_path = (page.path.parent / target).resolve() if target else page.path.resolve()
        if target and not target_path.exists() and page.rel.startswith("site/"):
            # the site hook serves the pack's files at the site root, beside site/'s own pages
            target_path = (self.root / Path(page.rel).parent.relative_to("site") / target).resolve()
        if target and not target_path.exists():
            self.report(page, line, f"link target {target} does not exist")
            return
        if not page.rel.startswith("evidence/"):
            self.cited_evidence.add(target_path)
        if anchor and target_path.suffix == ".md":
            try:
                linked = self.pages.get(target_path) or Page.parse(target_path, target_path.parent)
            except Unreadable as exc:
                self.report(page, line, f"link target {target}: {exc}")
                return
            if anchor not in linked.anchors:
                self.report(page, line, f"anchor #{anchor} not found in {target or page.rel}")

    def check_diagnostic_paths(self, page):
        for number, text in enumerate(page.lines, 1):
            for path in DIAGNOSTIC_PATH.findall(text):
                if not (self.root / path).is_file():
                    self.report(page, number, f"{path} is mentioned but does not exist")

    # -- evidence --------------------------------------------------------------------------

    def check_evidence(self, page):
        if page.front_matter is None:
            self.report(page, 1, "evidence file has no YAML front matter")
            return
        try:
            meta = yaml.safe_load(page.front_matter)
        except yaml.YAMLError as exc:
            self.report(page, 1, f"front matter is not valid YAML: {str(exc).splitlines()[0]}")
            return
        if not isinstance(meta, dict):
            self.report(page, 1, "front matter must be a mapping")
            return
        for field in EVIDENCE_REQUIRED:
            if not meta.get(field):
                self.report(page, 1, f"front matter field '{field}' is missing or empty")
        if meta.get("id") and meta["id"] != page.path.stem:
            self.report(page, 1, f"front matter id '{meta['id']}' differs from the file name '{page.path.stem}'")
        if meta.get("status") and meta["status"] not in EVIDENCE_STATUSES:
            self.report(page, 1, f"status '{meta['status']}' is not one of {', '.join(EVIDENCE_STATUSES)}")
        if meta.get("url") and meta["url"] != "unknown" and not str(meta["url"]).startswith(("http://", "https://")):
            self.report(page, 1, f"url '{meta['url']}' is neither an http(s) address nor 'unknown'")
        for field in ("retrieved", "published"):
            value = meta.get(field)
            if value in (None, "unknown") and field == "published":
                continue
            if not isinstance(value, datetime.date) and not re.fullmatch(r"\d{4}(-\d{2}){0,2}", str(value)):
                self.report(page, 1, f"{field} '{value}' is not a date (YYYY, YYYY-MM or YYYY-MM-DD)")
        via = re.search(r"shared/((?:sources|seeds)/[^\s(),]+)", str(meta.get("obtained_via", "")))
        if meta.get("obtained_via") and not via:
            self.report(page, 1, "obtained_via must name shared/sources/<file> or shared/seeds/<file>")
        elif via and self.shared is not None:
            self.check_excerpts_in_source(page, self.shared / via.group(1))

    def check_excerpts_in_source(self, page, source):
        if not source.is_file():
            self.report(page, 1, f"obtained_via names {source.name}, which is not in {source.parent}")
            return
        haystack = plain(source.read_text(encoding="utf-8", errors="replace"))
        for token in page.tokens:
            if token.type == "blockquote_open" and not found_in_order(blockquote_text(page.lines, token), haystack):
                self.report(page, token.map[0] + 1, f"excerpt is not found word for word in {source.parent.name}/{source.name}")

    # -- SKILL.md --------------------------------------------------------------------------

    def check_skill_budget(self, page):
        body_start, lines, tokens = skill_body(page)
        if lines > SKILL_MAX_LINES:
            self.report(page, body_start + 1, f"SKILL.md body has {lines} lines, over the budget of {SKILL_MAX_LINES}")
        if tokens > SKILL_MAX_TOKENS:
            self.report(page, body_start + 1, f"SKILL.md body is ~{tokens} tokens, over the budget of {SKILL_MAX_TOKENS}")

    def check_skill_format(self, page):
        """Run skills-ref on SKILL.md in a folder named like the skill, as an installed copy is."""
        with tempfile.TemporaryDirectory() as scratch:
            installed = Path(scratch) / "ml-debug"
            installed.mkdir()
            shutil.copy2(page.path, installed / "SKILL.md")
            for message in validate_skill_folder(installed):
                self.report(page, 1, f"skills-ref: {message}")


def skill_body(page):
    """(index of the first body line, body lines, estimated body tokens) of a parsed SKILL.md."""
    body_start = next((t.map[1] for t in page.tokens if t.type == "front_matter"), 0)
    return body_start, len(page.lines) - body_start, estimate_tokens("\n".join(page.lines[body_start:]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=Path(__file__).resolve().parents[1], type=Path, help="the pack's top folder (default: this repository)")
    parser.add_argument("--shared", type=Path, help="folder holding sources/ and seeds/ (default: ROOT/../shared; skipped when absent)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / "SKILL.md").is_file():
        print(f"error: {root} holds no SKILL.md (as a regular file); pass the pack's top folder", file=sys.stderr)
        return 2
    shared = args.shared if args.shared is not None else root.parent / "shared"
    try:
        checker = Checker(root, shared)
        problems = checker.run()
        skill = checker.pages.get((root / "SKILL.md").resolve())
        budget = "SKILL.md unreadable" if skill is None else "SKILL.md body {1} lines, ~{2} tokens".format(*skill_body(skill))
        evidence = len(list(root.glob("evidence/*.md")))
        sources = "checked against shared/" if checker.shared else "not checked (no shared/ folder)"
        sys.stdout.write("".join(f"{problem}\n" for problem in problems))
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: the user knows, no traceback
        return 130
    except OSError:  # `check_pack.py | head` closed the pipe, or stdout is a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say there
        return 1
    print(f"{len(problems)} problem(s); {checker.quotes_verified} quotes verified; {evidence} evidence files, excerpts {sources}; "
          f"{budget}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
