"""The docs site builds with --strict from the pack's own files and shows the files the tests run."""
import asyncio
import contextlib
import functools
import html
import http.server
import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
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


def test_only_section_titles_at_column_0_are_headings(hooks):
    """A title may be underlined (numpydoc); a list item with a hanging indent is a list item, not a title."""
    docstring = textwrap.dedent("""\
        demo: a one-line summary.

        Symptom
        -------
        The loss jumped.

        Next step
        ---------
        - fast_recovery: carry on. If the same steps spike again, the
          batches at those steps are the suspects.
        - divergence: roll back.

        Limits
            held as text, not a title.
        """)
    assert hooks.docstring_markdown(docstring) == textwrap.dedent("""\
        demo: a one-line summary.

        ## Symptom

        The loss jumped.

        ## Next step

        - fast\\_recovery: carry on. If the same steps spike again, the
          batches at those steps are the suspects.
        - divergence: roll back.

        ```text
        Limits
            held as text, not a title.
        ```""")


def test_source_fence_outgrows_backticks_in_the_file(hooks):
    assert hooks.fence("x = 1\n") == "```"
    assert hooks.fence('doc = """\n```python\n```\n"""\n') == "````"


def test_a_list_right_after_a_paragraph_stays_a_list(hooks):
    markdown = "> Lead-in\n> - one\n> - two\n\nText\n1. first\n\nText\n3. a sentence, not a list\n"
    assert hooks.separate_lists(markdown) == (
        "> Lead-in\n>\n> - one\n> - two\n\nText\n\n1. first\n\nText\n3. a sentence, not a list\n"
    )


# -- the built site as text: what the search index holds, titles, the sitemap ---------------------------


def index_docs(site):
    return json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]


def test_search_index_leaves_the_source_listings_to_the_pages(site):
    """The listings were 70% of the index and kept search initialising for seconds after every page load."""
    docs = index_docs(site)
    assert (site / "search" / "search_index.json").stat().st_size < 800_000
    for name in DIAGNOSTICS:
        text = " ".join(d["text"] for d in docs if d["location"].startswith(f"diagnostics/{name}.html"))
        assert text, f"diagnostics/{name}.html is not searchable at all"
        source = (ROOT / "diagnostics" / f"{name}.py").read_text(encoding="utf-8")
        for line in re.findall(r"^def \w+\(.*$", source, re.M):
            assert html.escape(line.strip(), quote=False) not in text, f"diagnostics/{name}.py's listing is in the search index"
    listing_headings = [d["location"] for d in docs if re.search(r"\.html#(spikelog|trainlint|the-folder)", d["location"])]
    assert not listing_headings, listing_headings[:5]
    assert "def check_init_loss" in html.unescape(re.sub(r"<[^>]+>", "", built(site, "diagnostics/init_loss.md")))


def test_evidence_ranks_below_the_pack_in_search(site):
    boosts = {d["location"].split("#")[0]: d.get("boost") for d in index_docs(site)}
    assert boosts["evidence/karpathy-recipe.html"] < 1
    assert boosts["refs/stability.html"] is None and boosts["PLAYBOOK.html"] is None


def test_home_and_404_have_titles_of_their_own_and_the_sitemap_lists_the_pages(site):
    titles = {uri: re.search(r"<title>(.*?)</title>", (site / uri).read_text(encoding="utf-8")).group(1)
              for uri in ("index.html", "404.html")}
    assert titles["index.html"] != titles["404.html"], titles
    sitemap = (site / "sitemap.xml").read_text(encoding="utf-8")
    assert sitemap.count("<loc>") == len(list(site.rglob("*.html"))) - 1  # every page but 404.html
    assert "<loc>https://" in sitemap


def test_home_page_sends_a_symptom_to_the_triage_table(site):
    assert re.search(r'href="PLAYBOOK\.html#triage"', built(site, "index.md"))


def test_diagnostics_index_says_what_each_file_is_for(site):
    """One line per diagnostic, the summary line of its own docstring (one source of truth)."""
    hooks = load_hooks()
    page = html.unescape(re.sub(r"<[^>]+>", "", built(site, "diagnostics/index.md")))
    for name in DIAGNOSTICS:
        summary = (hooks.docstring(ROOT / "diagnostics" / f"{name}.py") or "").splitlines()[0].removeprefix(f"{name}: ")
        assert f"{name}.py {summary}" in " ".join(page.split()), f"diagnostics/index.html lacks {name}.py's line"


def test_a_diagnostic_page_has_no_headings_but_its_sections(site):
    """spikes.html had its "Next step" list items as five headings and its underlines as rules."""
    hooks = load_hooks()
    allowed = {title.lower().replace(" ", "-") for title in hooks.TITLES}
    for name in DIAGNOSTICS:
        guide = built(site, f"diagnostics/{name}.md").split('id="source"')[0]
        headings = re.findall(r"<h[2-6][^>]*\sid=\"([^\"]+)\"", guide)
        assert set(headings) <= allowed, f"diagnostics/{name}.html has headings {sorted(set(headings) - allowed)}"
        assert "<hr" not in guide.split("md-content")[-1], f"diagnostics/{name}.html has a stray rule"


# -- in a real browser: Debian's chromium driven by playwright (`make test` installs both) ---------------

READER_QUERIES = {  # what a reader types -> the page that answers it, which search must put in its top 3
    "NaN": "diagnostics/nan_watch.html",  # finds the module that first produces it
    "loss spike": "diagnostics/spikes.html",  # classifies the spike from the log
    "overfit one batch": "diagnostics/overfit_one_batch.html",
    "learning rate warmup": "refs/stability.html",  # its #warmup
    "hang": "refs/distributed.html",  # a distributed run that hangs: the rank and the collective
    "bf16": "refs/stability.html",  # its #precision
    "gradient accumulation": "refs/stability.html",  # its #gradient-accumulation
}
SEARCH_READY_S = 6  # from navigation to a usable search box; 5-8 s with the source listings in the index (issue 26)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
TABS = 3  # pages load in this many tabs at once (CI has 2 cores)
NAVIGATION_S = 90  # a page's load, generous for a loaded machine: the checks are about errors, not speed
PAGE_FACTS = """() => ({
    ids: [...document.querySelectorAll("[id]")].map(e => e.id),
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    images: [...document.querySelectorAll("img")].map(i => [i.currentSrc || i.src, i.complete && i.naturalWidth > 0]),
    sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    headings: [...document.querySelectorAll("article h2[id], article h3[id]")].map(h => h.id),
})"""
SEARCH_READY = "() => !/Initializ/.test(document.querySelector('.md-search-result__meta').textContent)"
SEARCH_DONE = ("() => { const meta = document.querySelector('.md-search-result__meta').textContent;"
               " return /no matching/i.test(meta) || /matching/i.test(meta) && !!document.querySelector('.md-search-result__item') }")
RESULT_PAGES = "() => [...document.querySelectorAll('.md-search-result__item')].map(li => li.querySelector('a').href)"


@contextlib.contextmanager
def served(folder):
    """The built site over HTTP on a free local port (search fetches its index: file:// cannot)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def browser_report(site):
    """Everything the browser saw, from one chromium: every page at 390 px, then search and a copy button."""
    api = pytest.importorskip("playwright.async_api", reason="playwright is not installed (`make test` installs it: requirements.txt)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("no chromium on PATH: `make test` installs Debian's with apt-get where it can (root or sudo); "
                    "on other systems install Chromium and put `chromium` on PATH")
    with served(site) as base:
        return asyncio.run(browse(api, chromium, base, site))


async def browse(api, chromium, base, site):
    uris = sorted(page.relative_to(site).as_posix() for page in site.rglob("*.html"))
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    empty_index = json.dumps({"config": index["config"], "docs": []})  # the crawl does not search: no index to parse per page
    report = {"pages": {}, "ranks": {}, "base": base}
    async with api.async_playwright() as playwright:
        chrome = await playwright.chromium.launch(executable_path=chromium)
        try:
            start = time.monotonic()
            queue = list(uris)
            context = await chrome.new_context(viewport=PHONE)  # one cache: the theme's scripts compile once
            context.set_default_timeout(NAVIGATION_S * 1000)
            await context.route("**/search/search_index.json", lambda route: route.fulfill(body=empty_index, content_type="application/json"))
            await asyncio.gather(*(crawl(context, base, queue, report["pages"]) for _ in range(TABS)))
            await context.close()
            report["crawl_s"] = time.monotonic() - start
            await search(chrome, base, report, api.TimeoutError)
            await copy_a_block(chrome, base, report)
        finally:
            await chrome.close()
    return report


async def crawl(context, base, queue, pages):
    page = await context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(f"console {message.type}: {message.text}") if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    page.on("requestfailed", lambda request: errors.append(f"request failed: {request.url} ({request.failure})")
            if request.failure != "net::ERR_ABORTED" else None)  # aborted: the next page's navigation cut it short
    page.on("response", lambda response: errors.append(f"HTTP {response.status}: {response.url}") if response.status >= 400 else None)
    while queue:
        uri = queue.pop()
        errors.clear()
        await page.goto(base + uri, wait_until="load")
        pages[uri] = dict(await page.evaluate(PAGE_FACTS), errors=list(errors))
    await page.close()


async def search(chrome, base, report, timeout):
    context = await chrome.new_context(viewport=DESKTOP)
    context.set_default_timeout(NAVIGATION_S * 1000)
    page = await context.new_page()
    start = time.monotonic()
    await page.goto(base + "index.html")
    await page.wait_for_function(SEARCH_READY)
    report["search_ready_s"] = time.monotonic() - start
    box = page.locator("input.md-search__input")
    for query in READER_QUERIES:
        await box.press("Control+a")
        await box.press("Backspace")  # keys, as a person types: search listens to them
        await page.wait_for_function(f"() => !({SEARCH_DONE})()")
        await box.fill(query)
        await box.press("End")  # one search, for the whole query (typed key by key, a loaded machine shows a prefix's results)
        await page.wait_for_function(SEARCH_DONE)
        results = [href.removeprefix(base).split("?")[0].split("#")[0] for href in await page.evaluate(RESULT_PAGES)]
        report["ranks"][query] = results
    # Open the first section that matched the last query, where its result link points (a collapsed one too).
    links = await page.evaluate("() => [...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    await page.goto(next((link for link in links if "#" in link), links[0] if links else base + "404.html"))
    report["landed"] = page.url.removeprefix(base)
    with contextlib.suppress(timeout):  # no mark: the test says so
        await page.locator("article mark").first.wait_for(timeout=5_000)
    report["marked"] = await page.locator("article mark").all_inner_texts()
    await context.close()


async def copy_a_block(chrome, base, report):
    """Click the copy button of init_loss.html's source listing and read the clipboard."""
    context = await chrome.new_context(viewport=DESKTOP, permissions=["clipboard-read", "clipboard-write"])
    context.set_default_timeout(NAVIGATION_S * 1000)
    page = await context.new_page()
    await page.goto(base + "diagnostics/init_loss.html")
    block = await page.evaluate("() => document.querySelector('.diagnostic-source pre').id")
    await page.locator(f'button[data-md-type="copy"][data-clipboard-target="#{block} > code"]').click(force=True)
    report["copied"] = await page.evaluate("() => navigator.clipboard.readText()")
    await context.close()


def test_the_site_in_a_real_browser(site):
    """One test, so that under pytest-xdist one worker drives the browser; each check lists what it found."""
    report = browser_report(site)
    problems = {
        "console, script or network errors": page_errors(site, report),
        "links, anchors or images that do not resolve": broken_links(site, report),
        "pages wider than a 390 px phone (extra px)": [f"{uri}: {facts['sideways']}" for uri, facts in report["pages"].items()
                                                       if facts["sideways"] > 0],
        "headings on a diagnostic page that are no section of its guide": unexpected_headings(report),
        "search": search_problems(report),
        "the copy button": [] if report["copied"].rstrip("\n") == (ROOT / "diagnostics" / "init_loss.py").read_text(
            encoding="utf-8").rstrip("\n") else ["init_loss.html's source listing: the clipboard holds something else"],
    }
    problems = {check: found for check, found in problems.items() if found}
    assert not problems, "\n".join(f"{check}:\n  " + "\n  ".join(found[:20]) for check, found in problems.items())


def page_errors(site, report):
    missing = sorted({page.relative_to(site).as_posix() for page in site.rglob("*.html")} - report["pages"].keys())
    return [f"{uri}: not visited" for uri in missing] + [
        f"{uri}: {error}" for uri, facts in report["pages"].items() for error in facts["errors"]]


def broken_links(site, report):
    """Every same-site link as the browser resolved it: the page exists and holds the anchor, or the file exists."""
    broken, checked = [], 0
    for uri, facts in report["pages"].items():
        for href in facts["links"]:
            if not href.startswith(report["base"]):
                continue  # another site: not fetched
            path, _, anchor = urllib.parse.unquote(href.removeprefix(report["base"])).split("?")[0].partition("#")
            path = path + "index.html" if path.endswith("/") or not path else path
            checked += 1
            if path in report["pages"]:
                if anchor and anchor not in report["pages"][path]["ids"]:
                    broken.append(f"{uri}: {href}")
            elif not (site / path).is_file():
                broken.append(f"{uri}: {href}")
        broken += [f"{uri}: image {src}" for src, loaded in facts["images"] if not loaded]
    return broken + ([] if checked > 5000 else [f"only {checked} links seen: the pages did not render"])


def unexpected_headings(report):
    allowed = {title.lower().replace(" ", "-") for title in load_hooks().TITLES}
    found = []
    for name in DIAGNOSTICS:
        headings = report["pages"][f"diagnostics/{name}.html"]["headings"]
        guide = headings[:headings.index("source")] if "source" in headings else headings
        found += [f"diagnostics/{name}.html: #{heading}" for heading in guide if heading not in allowed]
    return found


def search_problems(report):
    found = [] if report["search_ready_s"] < SEARCH_READY_S else [
        f"ready {report['search_ready_s']:.1f} s after the page was asked for (budget {SEARCH_READY_S} s)"]
    found += [f"{query!r}: {expected} is not in the top 3 {report['ranks'][query][:3]}"
              for query, expected in READER_QUERIES.items() if expected not in report["ranks"][query][:3]]
    if not report["landed"].startswith(READER_QUERIES["gradient accumulation"]):
        found.append(f"the first match for 'gradient accumulation' opened {report['landed']}")
    if not {word.lower() for word in report["marked"]} >= {"gradient", "accumulation"}:
        found.append(f"the page it opened marks {sorted(set(report['marked']))}, not the words searched for")
    return found
