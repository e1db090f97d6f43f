"""The docs site builds with --strict from the pack's own files and shows the files the tests run."""
import html
import importlib.util
import os
import posixpath
import re
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

from conftest import ROOT

pytest.importorskip("mkdocs", reason="mkdocs is not installed (make test's venv has it: requirements-test.txt)")
pytest.importorskip("material", reason="mkdocs-material is not installed (make test's venv has it: requirements-test.txt)")

PACK_PAGES = sorted(
    p.relative_to(ROOT).as_posix()
    for pattern in ("SKILL.md", "PLAYBOOK.md", "refs/**/*.md", "evidence/**/*.md")
    for p in ROOT.glob(pattern)
)
DIAGNOSTICS = sorted(p.stem for p in (ROOT / "diagnostics").glob("*.py"))
ID = re.compile(r'\sid="([^"]+)"')
HREF = re.compile(r'\shref="([^"]+)"')


def load_hooks():
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "site" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built(site, uri):
    """The HTML the site built from a source path such as evidence/x.md (.md -> .html)."""
    return (site / (uri[:-3] + ".html")).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the site once, strictly, from another working directory, into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", ROOT / "mkdocs.yml", "--site-dir", out],
        capture_output=True, text=True, cwd=out.parent, timeout=120,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),  # mkdocs-material's end-of-life banner
    )
    if proc.returncode != 0:
        warnings = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("INFO"))
        pytest.fail(f"mkdocs build --strict failed (a warning in a page is an error):\n{warnings[-4000:]}", pytrace=False)
    return out


def test_every_pack_page_and_overview_is_built(site):
    assert "SKILL.md" in PACK_PAGES
    for uri in ["index.md", *PACK_PAGES, "evidence/index.md", "diagnostics/index.md"]:
        assert (site / (uri[:-3] + ".html")).is_file(), f"{uri} is missing from the site"


def test_every_diagnostic_page_shows_the_real_file(site):
    assert DIAGNOSTICS
    for name in DIAGNOSTICS:
        page = built(site, f"diagnostics/{name}.md")
        block = re.search(r'<div class="[^"]*\bdiagnostic-source\b[^"]*">.*?<code>(.*?)</code>', page, re.S)
        assert block, f"diagnostics/{name}.html has no source listing"
        shown = html.unescape(re.sub(r"<[^>]+>", "", block.group(1)))
        real = (ROOT / "diagnostics" / f"{name}.py").read_text(encoding="utf-8")
        # The highlighter drops trailing blank lines; everything else must be the file itself.
        assert shown.rstrip("\n") == real.rstrip("\n"), f"diagnostics/{name}.html does not show diagnostics/{name}.py"
        assert (site / "diagnostics" / f"{name}.py").read_text(encoding="utf-8") == real


@pytest.mark.parametrize("tool, folder", [("spikes", "spikelog"), ("lint", "trainlint")])
def test_a_tool_with_a_folder_shows_and_publishes_every_module(site, tool, folder):
    page = built(site, f"diagnostics/{tool}.md")
    shown = [html.unescape(re.sub(r"<[^>]+>", "", code)).rstrip("\n") for code in re.findall(r"<code>(.*?)</code>", page, re.S)]
    modules = sorted((ROOT / "diagnostics" / folder).rglob("*.py"))
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert len(modules) > 10 and f"diagnostics/{folder}/" in text
    assert f"{folder}/__init__.py" in text  # the heading as written, not `__init__` read as bold markdown
    for module in modules:
        real = module.read_text(encoding="utf-8")
        assert real.rstrip("\n") in shown, f"diagnostics/{tool}.html does not show {module.relative_to(ROOT)}"
        assert (site / module.relative_to(ROOT)).read_text(encoding="utf-8") == real


@pytest.mark.parametrize("tool, needs", [
    ("nan_watch", "It needs torch, the standard library and diagnostics/ml_debug_contract.py beside it (copy both):"),
    ("ml_debug_contract", "It is no command: every command in diagnostics/ imports it from beside itself"),
    ("spikes", "It needs the standard library, the folder diagnostics/spikelog/ and diagnostics/ml_debug_contract.py "
              "beside it (copy them all):"),
    ("lint", "It needs the standard library, the folder diagnostics/trainlint/ and diagnostics/ml_debug_contract.py "
             "beside it (copy them all):"),
])
def test_a_page_says_what_its_file_needs_to_run(site, tool, needs):
    """torch only where the file or its folder imports it: lint and spikes run without (a rule's example
    code that imports torch, in a string, does not count)."""
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", built(site, f"diagnostics/{tool}.md"))).split())
    assert needs in text


def test_snippets_page_shows_the_tested_files(site):
    page = built(site, "refs/snippets.md")
    shown = [html.unescape(re.sub(r"<[^>]+>", "", code)) for code in re.findall(r"<code>(.*?)</code>", page, re.S)]
    files = sorted((ROOT / "refs" / "snippets").glob("*.py"))
    assert files
    for path in files:
        assert path.read_text(encoding="utf-8").rstrip("\n") in [code.rstrip("\n") for code in shown], \
            f"refs/snippets.html does not show {path.name}"


def test_docstring_sections_become_headings(site):
    hooks = load_hooks()
    for name in DIAGNOSTICS:
        docstring = hooks.docstring(ROOT / "diagnostics" / f"{name}.py") or ""
        for title in ("Symptom", "Next step"):
            if re.search(rf"^{title}$", docstring, re.M):
                slug = title.lower().replace(" ", "-")
                assert f'<h2 id="{slug}">' in built(site, f"diagnostics/{name}.md"), f"{name}: '{title}' is not a heading"


def test_skill_footnotes_reach_their_evidence_excerpts(site):
    skill = built(site, "SKILL.md")
    links = re.findall(r'href="(evidence/[\w-]+\.html)#([\w-]+)"', skill)
    assert links, "SKILL.html links to no evidence excerpt"
    for target, anchor in links:
        assert f'id="{anchor}"' in (site / target).read_text(encoding="utf-8"), f"SKILL.html -> {target}#{anchor} is broken"


def test_every_relative_link_and_anchor_on_the_site_resolves(site):
    ids = {}
    broken = []
    for page in sorted(site.rglob("*.html")):
        uri = page.relative_to(site).as_posix()
        for href in HREF.findall(page.read_text(encoding="utf-8")):
            href = html.unescape(href)
            if re.match(r"[a-z][a-z0-9+.-]*:|//", href, re.I):
                continue
            path, _, anchor = urllib.parse.unquote(href).partition("#")
            target = posixpath.normpath(posixpath.join(posixpath.dirname(uri), path)).lstrip("/") if path else uri  # 404.html: /x
            target = target + "/index.html" if (site / target).is_dir() else target
            if not (site / target).is_file():
                broken.append(f"{uri}: {href}")
            elif anchor and target.endswith(".html"):
                if target not in ids:
                    ids[target] = set(ID.findall((site / target).read_text(encoding="utf-8")))
                if anchor not in ids[target]:
                    broken.append(f"{uri}: {href}")
    assert not broken, "broken links on the site:\n" + "\n".join(broken[:30])


# -- the hook's rewriting, on inputs the pack may not contain yet ----------------------------


class FakeFiles:
    def __init__(self, uris):
        self.uris = set(uris)

    def get_file_from_path(self, uri):
        return uri if uri in self.uris else None


@pytest.fixture
def hooks(monkeypatch):
    module = load_hooks()
    monkeypatch.setattr(module, "generated", {"diagnostics/doctor.md": "", "diagnostics/index.md": ""})
    return module


def test_links_to_diagnostics_and_folders_reach_site_pages(hooks):
    files = FakeFiles(["diagnostics/doctor.md", "diagnostics/index.md", "SKILL.md"])
    markdown = (
        "[d](../diagnostics/doctor.py#usage) [f](../diagnostics/) [r](../refs/) [t](../tools/x.py) "
        "[w](https://x.org/a.py)\n\n[def]: ../diagnostics/doctor.py\n"
    )
    assert hooks.repoint_links(markdown, "refs/a.md", files) == (
        "[d](../diagnostics/doctor.md#usage) [f](../diagnostics/index.md) [r](../refs/) [t](../tools/x.py) "
        "[w](https://x.org/a.py)\n\n[def]: ../diagnostics/doctor.md\n"
    )


def test_code_spans_naming_a_diagnostic_become_links_outside_fences(hooks):
    markdown = "Run `diagnostics/doctor.py` or [`diagnostics/doctor.py`](x) or `diagnostics/nope.py`.\n\n```\n`diagnostics/doctor.py`\n```\n"
    changed = hooks.outside_fences(markdown, lambda text: hooks.link_mentions(text, "refs/a.md"))
    assert changed == (
        "Run [`diagnostics/doctor.py`](../diagnostics/doctor.md) or [`diagnostics/doctor.py`](x) or `diagnostics/nope.py`."
        "\n\n```\n`diagnostics/doctor.py`\n```\n"
    )


def test_docstring_markdown_keeps_layout_and_escapes_markup(hooks):
    docstring = textwrap.dedent("""\
        demo: a one-line summary.

        Symptom
            The loss < chance, see PLAYBOOK.md#init-loss and `a<b`; num_classes *is* odd.

        What it checks
            Prose first.

              fail   loss > 1.5x chance,
                     or NaN.

        Command
            python diagnostics/demo.py     # demo

        Output
        demo  FAIL
          details
        """)
    assert hooks.docstring_markdown(docstring) == textwrap.dedent("""\
        demo: a one-line summary.

        ## Symptom

        The loss &lt; chance, see [PLAYBOOK.md#init-loss](../PLAYBOOK.md#init-loss) and `a<b`; num\\_classes \\*is\\* odd.

        ## What it checks

        Prose first.

        ```text
        fail   loss > 1.5x chance,
               or NaN.
        ```

        ## Command

        ```bash
        python diagnostics/demo.py     # demo
        ```

        ## Output

        ```text
        demo  FAIL
          details
        ```""")


def test_source_fence_outgrows_backticks_in_the_file(hooks):
    assert hooks.fence("x = 1\n") == "```"
    assert hooks.fence('doc = """\n```python\n```\n"""\n') == "````"


def test_a_list_right_after_a_paragraph_stays_a_list(hooks):
    markdown = "> Lead-in\n> - one\n> - two\n\nText\n1. first\n\nText\n3. a sentence, not a list\n"
    assert hooks.separate_lists(markdown) == (
        "> Lead-in\n>\n> - one\n> - two\n\nText\n\n1. first\n\nText\n3. a sentence, not a list\n"
    )
