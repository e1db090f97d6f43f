"""mkdocs hook: build the site from the pack's own files, never from copies.

At build time (mkdocs.yml `hooks:`) it:

- adds SKILL.md, PLAYBOOK.md, refs/** and evidence/** as site files read from where they are,
  at the same paths; with `use_directory_urls: false` the site's URLs mirror the pack's folders,
  so the pack's relative links (`evidence/x.md#anchor`, `../evidence/x.md`, `PLAYBOOK.md#checks`)
  work on the site unchanged;
- generates diagnostics/<name>.md for every diagnostics/<name>.py: its docstring rendered as
  markdown, then the whole file included by pymdownx.snippets, so the page always shows the
  tested file; the .py itself is published beside it, for download; a tool that imports a package
  beside it (diagnostics/spikelog/ for spikes.py, diagnostics/trainlint/ for lint.py) shows and
  publishes that folder's modules too; a command's page names the contract module it imports
  (diagnostics/ml_debug_contract.py, which has a page of its own);
- generates the overview pages refs/index.md (unless refs/ has its own), diagnostics/index.md and
  evidence/index.md, and the nav;
- points links to diagnostics/<name>.py at the generated page and links to a folder at its index
  page, and turns a code span that is exactly `diagnostics/<name>.py` into a link to its page;
- shows SKILL.md's front matter and an evidence file's provenance in an info box.

Whatever exists is used: files are globbed, never listed by hand. A build warning about
diagnostics/<name>.md is about the docstring of diagnostics/<name>.py.
"""
import ast
import logging
import posixpath
import re
import textwrap
from pathlib import Path

from mkdocs.structure.files import File
from mkdocs.utils.meta import get_data

ROOT = Path(__file__).resolve().parents[1]
PACK_PATTERNS = ("SKILL.md", "PLAYBOOK.md", "refs/**/*", "evidence/**/*")  # the layout tools/install_skill.py ships
EVIDENCE_FIELDS = ("author", "url", "published", "retrieved", "obtained_via", "status", "license")
FENCE = re.compile(r"^[ \t>]*(`{3,}|~{3,})")
# The relative target of an inline link or a link definition: `](x.py#a`, `[id]: refs/`.
LINK_TARGET = re.compile(r"(\]\(\s*<?|^ {0,3}\[[^\]]+\]:\s*<?)(?![a-zA-Z][\w+.-]*:)([^\s()<>#]+)", re.M)
# A paragraph line (group 1: its `>` markers) followed by a list item at the same blockquote level.
PARAGRAPH_THEN_LIST = re.compile(r"^((?:>[ \t]?)*)(?![-*+][ \t]|\d{1,9}[.)][ \t]|[#|>\s]).+\n(?=\1(?:[-*+]|1[.)])[ \t]+\S)", re.M)
PY_MENTION = re.compile(r"(?<![\[`])`(diagnostics/[\w-]+\.py)`(?![`\]])")
# A source listing's fence attributes: shown on the page, left out of the search index (mkdocs-material drops
# a block or a heading's section marked data-search-exclude), which they would otherwise be 70% of, slowing
# search's start; the heading of a module's listing goes too, or "spike" would find spikelog/read/csv.py.
SOURCE_LISTING = ".python data-search-exclude"
LISTING_HEADING = "{ data-search-exclude }"
# Search ranks an evidence file's sections below the pack's own pages for the same words: the excerpts'
# headings are their ids ("warmup-length"), and a heading outweighs any text in mkdocs-material's search.
EVIDENCE_SEARCH_BOOST = 0.1
CONTRACT = "ml_debug_contract"  # diagnostics/ml_debug_contract.py: the module the commands import, no command itself

# A diagnostic's docstring sections (CONTRIBUTING.md, "Diagnostics"); Command and Output are code.
SECTION_TITLES = ("Symptom", "What it checks", "Command", "Output", "How to read it", "Next step")
# A title is one of these alone on its line at column 0 (how tools/check_pack.py finds the sections), with
# the contract module's one section besides; nothing else is, however the next line is indented.
TITLES = (*SECTION_TITLES, "What it holds")
UNDERLINE = re.compile(r"-{3,}|={3,}")  # a title may be underlined, numpydoc's way: the heading is the underline
LIST_ITEM = re.compile(r"- \S")
CODE_SECTIONS = {"Command": "bash", "Output": "text"}
PROSE_TOKEN = re.compile(r"(`[^`\n]*`)|\b((?:PLAYBOOK|SKILL)\.md|refs/[\w-]+\.md|evidence/[\w.-]+\.md)(#[\w-]+)?|([<*_\\])")

log = logging.getLogger("mkdocs.hooks.ml-debug")
generated = {}  # src_uri -> markdown of the pages this hook writes, filled by on_files


def pack_paths():
    """The pack files that become site files: {src_uri: absolute path}."""
    found = {}
    for pattern in PACK_PATTERNS:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                found[path.relative_to(ROOT).as_posix()] = path
    return found


def docstring(path):
    """The module docstring of a diagnostic; None when it has none or does not parse."""
    try:
        return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    except SyntaxError as exc:
        log.warning(f"diagnostics/{path.name}: cannot read its docstring: {exc.msg} (line {exc.lineno})")
        return None


def first_paragraph(text):
    """The first paragraph of markdown text, on one line, footnote references dropped."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    return re.sub(r"\[\^[^\]\s]+\]", "", paragraph) or "(no summary yet)"


def opening(path):
    """The first paragraph after a page's `# ` title."""
    body = get_data(path.read_text(encoding="utf-8"))[0]
    return first_paragraph(re.split(r"^# .*$", body, maxsplit=1, flags=re.M)[-1])


def diagnostic_page(name, path, text):
    """Markdown of diagnostics/<name>.md: the docstring `text`, then the real file included whole.

    A tool that grew into a folder (CONTRIBUTING.md, "Tools that grew into a folder") imports a
    package that sits beside it in diagnostics/; its page then says so and includes every module.
    """
    source = path.read_text(encoding="utf-8")
    folders = sibling_packages(source)
    modules = [source, *(module.read_text(encoding="utf-8") for folder in folders for module in package_modules(folder))]
    library = "torch and the standard library" if imports_torch(modules) else "the standard library"
    beside = [f"the folder `diagnostics/{folder}/`" for folder in folders]
    beside += [f"`diagnostics/{CONTRACT}.py`"] if re.search(rf"^from {CONTRACT} import ", source, re.M) else []
    needs = (f"only {library}" if not beside else
             ", ".join([library.replace(" and ", ", "), *beside[:-1]]) + f" and {beside[-1]} beside it "
             + ("(copy both)" if len(beside) == 1 else "(copy them all)"))
    usage = (f"It needs {needs}: `python diagnostics/{name}.py --help`." if name != CONTRACT else
             "It is no command: every command in diagnostics/ imports it from beside itself, so copy it with any of them.")
    page = (
        f"# {name}.py\n\n"
        f"{docstring_markdown(text) if text else '*This diagnostic has no docstring yet.*'}\n\n"
        "## Source {#source}\n\n"
        f"The file the tests run, included when the site is built ([download {name}.py]({name}.py)). {usage}\n\n"
        f"{fence(source)}{{{SOURCE_LISTING} .diagnostic-source}}\n"
        f'--8<-- "diagnostics/{name}.py"\n'
        f"{fence(source)}\n"
    )
    for folder in folders:
        page += f"\n## The folder `diagnostics/{folder}/` {LISTING_HEADING}\n"
        for module in package_modules(folder):
            uri = module.relative_to(ROOT).as_posix()
            code = module.read_text(encoding="utf-8")
            page += f"\n### `{module.relative_to(ROOT / 'diagnostics').as_posix()}` {LISTING_HEADING}\n\n{fence(code)}{{{SOURCE_LISTING}}}\n--8<-- \"{uri}\"\n{fence(code)}\n"
    return page


def sibling_packages(source):
    """The packages in diagnostics/ that a diagnostic's source imports, in the order of first import."""
    names = re.findall(r"^(?:from|import) (\w+)", source, re.M)
    return [name for name in dict.fromkeys(names) if (ROOT / "diagnostics" / name / "__init__.py").is_file()]


def imports_torch(sources):
    """Whether any of these Python sources imports torch, anywhere in it (an import inside a function too);
    code in strings (a rule's example) does not count."""
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(name == "torch" or name.startswith("torch.") for name in names):
                return True
    return False


def package_modules(folder):
    """Every module of the package diagnostics/<folder>/, the package's own __init__ first."""
    return sorted((ROOT / "diagnostics" / folder).rglob("*.py"),
                  key=lambda module: (module.parent.relative_to(ROOT).parts, module.name != "__init__.py", module.name))


def fence(text):
    """A backtick fence longer than any backtick run in `text`, so the text cannot close it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def docstring_markdown(text):
    """A diagnostic's docstring as markdown.

    The house format (CONTRIBUTING.md, "Diagnostics") is plain text: a summary paragraph, then
    sections, each a title line (TITLES, at column 0, optionally underlined) with its body beneath.
    Titles become headings, Command and Output become code blocks; in other sections a paragraph
    becomes prose, a block of `- ` items (hanging indents included) a list, and any other block with
    indented lines (aligned tables) stays preformatted.
    """
    parts, title, body = [], None, []
    for line in text.splitlines():
        if line.rstrip() in TITLES:
            parts.append(section_markdown(title, body))
            title, body = line.rstrip(), []
        elif not (title and not body and UNDERLINE.fullmatch(line.rstrip())):
            body.append(line)
    parts.append(section_markdown(title, body))
    return "\n\n".join(part for part in parts if part)


def section_markdown(title, body):
    text = textwrap.dedent("\n".join(body)).strip("\n")
    heading = f"## {title}\n\n" if title else ""
    if title in CODE_SECTIONS:
        return f"{heading}{fence(text)}{CODE_SECTIONS[title]}\n{text}\n{fence(text)}"
    blocks = [block for block in re.split(r"\n[ \t]*\n", text) if block.strip()]
    return heading + "\n\n".join(map(block_markdown, blocks))


def block_markdown(block):
    """One paragraph of a prose section: a list, preformatted text, or prose."""
    lines = block.splitlines()
    if LIST_ITEM.match(lines[0]) and all(LIST_ITEM.match(line) or line[:1].isspace() for line in lines):
        return prose(block)
    if any(line[:1].isspace() for line in lines):
        return f"{fence(block)}text\n{textwrap.dedent(block)}\n{fence(block)}"
    return prose(block)


def prose(text):
    """Plain docstring text as markdown: code spans kept, pack pages linked, markup characters escaped."""

    def token(match):
        code, page, anchor, char = match.groups()
        if code:
            return code
        if page:
            return f"[{page}{anchor or ''}](../{page}{anchor or ''})"  # relative to diagnostics/
        return "&lt;" if char == "<" else "\\" + char

    return PROSE_TOKEN.sub(token, text)


def index_page(title, intro, header, rows):
    cells = [" | ".join(str(cell).replace("|", "\\|") for cell in row) for row in rows]
    return f"# {title}\n\n{intro}\n\n| {' | '.join(header)} |\n|{' --- |' * len(header)}\n" + "".join(f"| {row} |\n" for row in cells)


def overview_pages(pack, docstrings):
    """{src_uri: markdown} of the folder overview pages, for folders that have files."""
    pages = {}
    refs = [uri for uri in pack if uri.startswith("refs/") and uri.endswith(".md")]
    if refs and "refs/index.md" not in pack:
        pages["refs/index.md"] = index_page(
            "References", "One topic per page, each one hop from the skill's entry page.", ("page", "what it covers"),
            [(f"[{posixpath.relpath(uri, 'refs')}]({posixpath.relpath(uri, 'refs')})", opening(pack[uri])) for uri in refs],
        )
    if docstrings:
        pages["diagnostics/index.md"] = index_page(
            "Diagnostics",
            f"One PyTorch file per check, runnable with torch, the standard library and [{CONTRACT}.py]({CONTRACT}.md) "
            "(the contract every command imports) beside it. Each page shows the file's guide, then its full source, "
            "included from the file the tests run.",
            ("file", "what it is for"),
            [(f"[{name}.py]({name}.md)", prose(first_paragraph(text or "").removeprefix(f"{name}: ")))
             for name, text in docstrings.items()],
        )
    evidence = [uri for uri in pack if uri.startswith("evidence/") and uri.endswith(".md")]
    if evidence and "evidence/index.md" not in pack:
        metas = {uri: get_data(pack[uri].read_text(encoding="utf-8"))[1] for uri in evidence}
        pages["evidence/index.md"] = index_page(
            "Evidence",
            "One file per source: verbatim excerpts, and where they were copied from. Every quote in the "
            "pack links to one excerpt here, and a checker finds the quote's words in it.",
            ("source", "author", "published", "status"),
            [(f"[{meta.get('title', uri)}]({posixpath.basename(uri)})", meta.get("author", ""),
              meta.get("published", "unknown"), meta.get("status", "")) for uri, meta in metas.items()],
        )
    return pages


def on_files(files, config):
    pack = pack_paths()
    diagnostics = {path.stem: path for path in sorted((ROOT / "diagnostics").glob("*.py"))}
    for uri, path in pack.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    for name, path in diagnostics.items():
        files.append(File.generated(config, f"diagnostics/{name}.py", abs_src_path=str(path)))
        for folder in sibling_packages(path.read_text(encoding="utf-8")):
            for module in package_modules(folder):
                files.append(File.generated(config, module.relative_to(ROOT).as_posix(), abs_src_path=str(module)))
    docstrings = {name: docstring(path) for name, path in diagnostics.items()}
    generated.clear()
    generated.update({f"diagnostics/{name}.md": diagnostic_page(name, diagnostics[name], text) for name, text in docstrings.items()})
    generated.update(overview_pages(pack, docstrings))
    for uri, markdown in generated.items():
        files.append(File.generated(config, uri, content=markdown))
    config.nav = nav([f.src_uri for f in files if f.is_documentation_page()])
    return files


def nav(pages):
    """Home, Skill, Playbook, then one section per folder: its index page first."""
    entries = [{"Home": "index.md"}]
    entries += [{title: uri} for title, uri in (("Skill", "SKILL.md"), ("Playbook", "PLAYBOOK.md")) if uri in pages]
    for title, folder in (("References", "refs/"), ("Diagnostics", "diagnostics/"), ("Integrations", "integrations/"),
                          ("Evidence", "evidence/")):
        index = folder + "index.md"
        section = [index] if index in pages else []
        for uri in sorted(u for u in pages if u.startswith(folder) and u != index):
            section.append({posixpath.basename(uri)[:-3] + ".py": uri} if folder == "diagnostics/" else uri)
        if section:
            entries.append({title: section})
    return entries


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri not in generated:
        markdown = outside_fences(markdown, lambda text: separate_lists(repoint_links(text, uri, files)))
    markdown = outside_fences(markdown, lambda text: link_mentions(text, uri))
    if uri == "SKILL.md" and page.meta:
        fields = "".join(f"    - **{key}:** {value}\n" for key, value in page.meta.items())
        markdown = after_title(markdown, f'!!! abstract "Agent skill front matter"\n\n{fields}')
    elif uri.startswith("evidence/") and uri not in generated and page.meta:
        meta = dict(page.meta)
        page.meta.pop("status", None)  # the excerpts' status, not a mkdocs-material page status badge
        if str(meta.get("url", "")).startswith(("http://", "https://")):
            meta["url"] = f"<{meta['url']}>"
        fields = "".join(f"    - **{key.replace('_', ' ')}:** {meta[key]}\n" for key in EVIDENCE_FIELDS if key in meta)
        markdown = after_title(markdown, f'!!! info "Provenance"\n\n{fields}')
    if uri.startswith("evidence/"):
        page.meta["search"] = {"boost": EVIDENCE_SEARCH_BOOST}
    return markdown


def on_serve(server, config, builder):
    for name in ("SKILL.md", "PLAYBOOK.md", "refs", "evidence", "diagnostics"):
        if (ROOT / name).exists():
            server.watch(str(ROOT / name))
    return server


def outside_fences(markdown, change):
    """Apply `change` to the markdown text outside fenced code blocks."""
    parts, chunk, fence = [], [], None
    for line in markdown.splitlines(keepends=True):
        match = FENCE.match(line)
        if fence is None and match:  # an opening fence: the text before it is outside
            parts.append(change("".join(chunk)))
            chunk, fence = [line], match.group(1)
        elif fence is not None and match and match.group(1).startswith(fence) and not line.strip(" \t\n>" + fence[0]):
            parts.append("".join(chunk) + line)  # a closing fence: same character, at least as long
            chunk, fence = [], None
        else:
            chunk.append(line)
    parts.append(change("".join(chunk)) if fence is None else "".join(chunk))
    return "".join(parts)


def separate_lists(markdown):
    """Put a blank line between a paragraph and a list that follows it directly.

    The pack is CommonMark (what tools/check_pack.py parses), where a bullet list, or a numbered
    one starting at 1, may interrupt a paragraph; Python-Markdown would run it into the paragraph.
    """
    return PARAGRAPH_THEN_LIST.sub(lambda match: match.group(0) + match.group(1).rstrip() + "\n", markdown)


def repoint_links(markdown, page_uri, files):
    """Link diagnostics/<name>.py to its generated page and a folder to its index page."""
    folder = posixpath.dirname(page_uri)

    def repoint(match):
        href = match.group(2)
        target = posixpath.normpath(posixpath.join(folder, href))
        if href.endswith(".py") and target[:-3] + ".md" in generated:
            return match.group(1) + href[:-3] + ".md"
        if href.endswith("/") and files.get_file_from_path(target + "/index.md"):
            return match.group(1) + href + "index.md"
        return match.group(0)

    return LINK_TARGET.sub(repoint, markdown)


def link_mentions(markdown, page_uri):
    """Turn a code span that is exactly `diagnostics/<name>.py` into a link to its page."""

    def link(match):
        page = match.group(1)[:-3] + ".md"
        if page not in generated:
            return match.group(0)
        return f"[{match.group(0)}]({posixpath.relpath(page, posixpath.dirname(page_uri) or '.')})"

    return PY_MENTION.sub(link, markdown)


def after_title(markdown, block):
    """Insert a markdown block after the page's `# ` title (at the top when it has none)."""
    match = re.search(r"^# .*\n", markdown, re.M)
    cut = match.end() if match else 0
    return f"{markdown[:cut]}\n{block}\n{markdown[cut:]}"
