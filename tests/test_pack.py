"""The pack checker: the real pack is clean, and every kind of planted defect is caught."""
import subprocess
import sys
import textwrap

import pytest

import check_pack
import install_skill
from conftest import ROOT

EVIDENCE = """\
---
id: source-a
title: A Source
author: Some Author
url: https://example.org/a
published: 2020-01-01
retrieved: 2026-11-22
obtained_via: shared/sources/a.md (example/repo@abc123, a.md)
status: verbatim-excerpts
license: MIT
---

# A Source

## first-excerpt

> Always check the loss at initialisation before anything else, because a wrong
> starting value points at a bug in the model or the data.

## second-excerpt

> Overfit one batch first.
"""

SKILL = """\
---
name: ml-debug
description: Use when a training run misbehaves.
---
# ml-debug

> Always check the loss at initialisation before anything else[^a]

Karpathy-style advice: "Overfit one batch first."[^b] And again "a wrong [...] value points at a bug"[^a2].

See [the section](#ml-debug) and `diagnostics/tool.py`.

[^a]: Some Author, [evidence](evidence/source-a.md#first-excerpt).
[^a2]: Some Author, [evidence](evidence/source-a.md#first-excerpt).
[^b]: Some Author, [evidence](evidence/source-a.md#second-excerpt).
"""

SOURCE = "Intro.\n\nAlways check the loss at *initialisation* before anything else, because a wrong\nstarting value points at a bug in the model or the data.\n\nOverfit one batch first.\n"


@pytest.fixture
def pack(tmp_path):
    """A tiny valid pack in tmp_path/pack with a shared/sources/a.md beside it."""
    root = tmp_path / "pack"
    (root / "evidence").mkdir(parents=True)
    (root / "diagnostics").mkdir()
    (root / "diagnostics" / "tool.py").write_text("")
    (root / "SKILL.md").write_text(SKILL)
    (root / "evidence" / "source-a.md").write_text(EVIDENCE)
    (tmp_path / "shared" / "sources").mkdir(parents=True)
    (tmp_path / "shared" / "sources" / "a.md").write_text(SOURCE)
    return root


def problems(root):
    checker = check_pack.Checker(root, root.parent / "shared")
    return [str(p) for p in checker.run()], checker


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"fixture no longer holds {old!r}"
    path.write_text(text.replace(old, new))


def test_tiny_pack_is_clean_and_counts_its_quotes(pack):
    found, checker = problems(pack)
    assert found == []
    assert checker.quotes_verified == 3


def test_the_real_pack_is_clean():
    found, _ = problems(ROOT)
    assert found == []


def test_make_check_command_passes():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_pack.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Each planted defect: (file to edit, old text, new text, expected "file:line: message" fragment).
DEFECTS = {
    "changed word in a blockquote": ("SKILL.md", "loss at initialisation before", "loss at initialization before", "SKILL.md:7: quote"),
    "changed word in an inline quote": ("SKILL.md", '"Overfit one batch first."', '"Overfit one example first."', "SKILL.md:9: quote"),
    "words out of order across an elision": ("SKILL.md", "a wrong [...] value points", "value points [...] a wrong", "SKILL.md:9: quote"),
    "dangling footnote": ("SKILL.md", "anything else[^a]", "anything else[^missing]", "SKILL.md:7: footnote [^missing] is used but never defined"),
    "unused footnote": ("SKILL.md", '"a wrong [...] value points at a bug"[^a2]', "nothing quoted here", "SKILL.md:14: footnote [^a2] is defined but never used"),
    "broken anchor": ("SKILL.md", "(#ml-debug)", "(#no-such-heading)", "SKILL.md:11: anchor #no-such-heading"),
    "broken evidence anchor": ("SKILL.md", "source-a.md#second-excerpt", "source-a.md#third-excerpt", "SKILL.md:9: quote's footnote [^b] points at evidence/source-a.md#third-excerpt"),
    "broken relative link": ("SKILL.md", "(#ml-debug)", "(refs/missing.md)", "SKILL.md:11: link target refs/missing.md does not exist"),
    "quote citing a missing evidence file": ("SKILL.md", "[evidence](evidence/source-a.md#second-excerpt)",
                                             "[evidence](evidence/gone.md#second-excerpt)",
                                             "SKILL.md:9: quote's footnote [^b] points at missing evidence file evidence/gone.md"),
    "unsourced blockquote": ("SKILL.md", "anything else[^a]", "anything else", "SKILL.md:7: blockquote without a source footnote"),
    "missing diagnostic": ("SKILL.md", "diagnostics/tool.py", "diagnostics/gone.py", "SKILL.md:11: diagnostics/gone.py is mentioned but does not exist"),
    "missing front-matter field": ("evidence/source-a.md", "author: Some Author\n", "", "evidence/source-a.md:1: front matter field 'author'"),
    "bad status": ("evidence/source-a.md", "status: verbatim-excerpts", "status: paraphrased", "evidence/source-a.md:1: status 'paraphrased'"),
    "id differs from file name": ("evidence/source-a.md", "id: source-a", "id: source-b", "evidence/source-a.md:1: front matter id 'source-b'"),
    "excerpt not in its source": ("evidence/source-a.md", "Overfit one batch first.", "Overfit one batch first, always.", "evidence/source-a.md:"),
    "invalid skill front matter": ("SKILL.md", "name: ml-debug", "name: ML_Debug", "SKILL.md:1: skills-ref: "),
    "source file missing": ("evidence/source-a.md", "shared/sources/a.md", "shared/sources/b.md", "evidence/source-a.md:1: obtained_via names b.md"),
    "retrieved unknown": ("evidence/source-a.md", "retrieved: 2026-11-22", "retrieved: unknown", "evidence/source-a.md:1: retrieved 'unknown' is not a date"),
    "published not a date": ("evidence/source-a.md", "published: 2020-01-01", "published: last spring", "evidence/source-a.md:1: published 'last spring' is not a date"),
}


@pytest.mark.parametrize("name", DEFECTS)
def test_planted_defect_is_caught_with_file_and_line(pack, name):
    file, old, new, expected = DEFECTS[name]
    edit(pack / file, old, new)
    found, _ = problems(pack)
    assert any(expected in p for p in found), found


def test_an_unknown_publication_date_is_allowed(pack):
    edit(pack / "evidence" / "source-a.md", "published: 2020-01-01", "published: unknown")
    assert problems(pack)[0] == []


def test_uncited_evidence_file_is_caught(pack):
    (pack / "evidence" / "source-b.md").write_text(EVIDENCE.replace("id: source-a", "id: source-b"))
    found, _ = problems(pack)
    assert "evidence/source-b.md:1: evidence file is not cited by any page of the pack" in found


def test_excerpts_are_not_checked_without_shared(pack):
    edit(pack / "evidence" / "source-a.md", "Overfit one batch first.", "Overfit one batch first, always.")
    edit(pack / "SKILL.md", '"Overfit one batch first."', '"Overfit one batch first, always."')
    assert [str(p) for p in check_pack.Checker(pack, shared=None).run()] == []


def test_over_budget_skill_is_caught(pack):
    edit(pack / "SKILL.md", "# ml-debug\n", "# ml-debug\n" + "filler line\n" * 501)
    found, _ = problems(pack)
    assert any("SKILL.md:5: SKILL.md body has" in p and "over the budget of 500" in p for p in found), found


def test_over_token_budget_skill_is_caught(pack):
    edit(pack / "SKILL.md", "# ml-debug\n", "# ml-debug\n" + "word " * 5001 + "\n")
    found, _ = problems(pack)
    assert any("over the budget of 5000" in p for p in found), found


def test_token_estimate_takes_the_larger_rule_of_thumb():
    assert check_pack.estimate_tokens("a b c d") == 4  # words beat characters / 4
    assert check_pack.estimate_tokens("x" * 40) == 10  # characters / 4 beat one long word


def test_normalisation_ignores_quote_style_dashes_emphasis_and_links():
    assert check_pack.plain("“It’s *fine*” — see [the docs](http://x)") == check_pack.plain("\"It's fine\" - see the docs")


def test_checker_cli_bad_usage_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_pack.py"), str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_install_copies_only_agent_files_and_validates(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "install_skill.py"), str(tmp_path / "skills")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    target = tmp_path / "skills" / "ml-debug"
    assert sorted(p.name for p in target.iterdir()) == sorted([install_skill.MANIFEST, *(n for n in install_skill.AGENT_FILES if (ROOT / n).exists())])
    assert not list(target.rglob("__pycache__"))
    agentskills = subprocess.run([sys.executable, "-m", "skills_ref.cli", "validate", str(target)], capture_output=True, text=True)
    assert agentskills.returncode == 0, agentskills.stdout + agentskills.stderr
    check = subprocess.run([sys.executable, str(target / "diagnostics" / "init_loss.py"), "--healthy"], capture_output=True,
                           text=True, cwd=tmp_path)  # the installed check finds the contract module it imports
    assert (check.returncode, check.stderr) == (0, ""), check.stderr


def test_install_replaces_an_earlier_install_but_not_a_stranger(tmp_path):
    assert install_skill.main([str(tmp_path)]) == 0
    assert install_skill.main([str(tmp_path)]) == 0
    stranger = tmp_path / "other" / "ml-debug"
    stranger.mkdir(parents=True)
    (stranger / "notes.txt").write_text("mine")
    assert install_skill.main([str(tmp_path / "other")]) == 2
    assert (stranger / "notes.txt").read_text() == "mine"


def test_installed_copy_with_broken_frontmatter_fails_validation(tmp_path, pack):
    edit(pack / "SKILL.md", "description: Use when a training run misbehaves.\n", "")
    target = tmp_path / "skills" / "ml-debug"
    target.mkdir(parents=True)
    (target / "SKILL.md").write_text((pack / "SKILL.md").read_text())
    assert any("description" in p for p in install_skill.validate_install(target))


def test_skill_description_is_a_when_to_use_under_1024_chars():
    import yaml

    front = (ROOT / "SKILL.md").read_text().split("---")[1]
    meta = yaml.safe_load(front)
    assert meta["name"] == "ml-debug"
    assert len(meta["description"]) <= 1024
    assert meta["description"].lower().startswith("use when")


def test_skill_names_every_diagnostic_and_the_playbook():
    skill = (ROOT / "SKILL.md").read_text()
    assert "PLAYBOOK.md" in skill
    for path in sorted((ROOT / "diagnostics").glob("*.py")):
        assert f"diagnostics/{path.name}" in skill or f"diagnostics/{path.name}" in (ROOT / "PLAYBOOK.md").read_text(), path.name


@pytest.mark.parametrize("line", ["> quoted[^x]", '"quoted"[^x]'])
def test_quote_text_is_dedented_consistently(tmp_path, line):
    root = tmp_path / "p"
    (root / "evidence").mkdir(parents=True)
    (root / "evidence" / "s.md").write_text(EVIDENCE.replace("id: source-a", "id: s").replace("Overfit one batch first.", "quoted"))
    (root / "SKILL.md").write_text(textwrap.dedent(f"""\
        ---
        name: ml-debug
        description: x
        ---
        {line}

        [^x]: [e](evidence/s.md#second-excerpt)
        """))
    assert [str(p) for p in check_pack.Checker(root, shared=None).run()] == []


def test_inline_quote_spanning_lines_is_checked(pack):
    edit(pack / "SKILL.md", '"a wrong [...] value points at a bug"', '"a wrong [...] value\npoints at a fault"')
    found, _ = problems(pack)
    assert any(p.startswith("SKILL.md:9: quote") for p in found), found


DOCSTRING = '''"""tool: a diagnostic.

Symptom
    As the source says, "Overfit one batch first." (evidence/source-a.md#second-excerpt)

Output
    [FAIL] tool: "loss went up over the first steps" (a captured run, never a quote)
"""
'''


def test_docstring_quote_with_its_reference_verifies(pack):
    (pack / "diagnostics" / "tool.py").write_text(DOCSTRING)
    found, checker = problems(pack)
    assert found == [] and checker.quotes_verified == 4


@pytest.mark.parametrize("old, new, expected", [
    ("Overfit one batch first.", "Overfit two batches first.", "diagnostics/tool.py:4: quote"),
    (" (evidence/source-a.md#second-excerpt)", "", "diagnostics/tool.py:4: quoted text"),
    ("#second-excerpt", "#no-excerpt", "diagnostics/tool.py:4: reference evidence/source-a.md#no-excerpt holds no excerpt"),
])
def test_docstring_quote_defects_are_caught(pack, old, new, expected):
    (pack / "diagnostics" / "tool.py").write_text(DOCSTRING.replace(old, new))
    found, _ = problems(pack)
    assert any(p.startswith(expected) for p in found), found


def test_a_quote_in_a_module_of_a_tools_folder_is_checked_too(pack):
    """The bigger tools grew into folders (spikelog/, trainlint/): their modules' docstrings are checked alike."""
    (pack / "diagnostics" / "toolkit" / "detect").mkdir(parents=True)
    module = pack / "diagnostics" / "toolkit" / "detect" / "rules.py"
    module.write_text(DOCSTRING)
    found, checker = problems(pack)
    assert found == [] and checker.quotes_verified == 4
    module.write_text(DOCSTRING.replace("Overfit one batch first.", "Overfit two batches first."))
    found, _ = problems(pack)
    assert any(p.startswith("diagnostics/toolkit/detect/rules.py:4: quote") for p in found), found
