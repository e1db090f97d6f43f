"""bad_samples: clean prose and code flag nothing, planted junk is flagged at its line with its reason, bad input is
one line and exit 2."""
import json
import subprocess
import sys

import pytest

import bad_samples
from conftest import ROOT, assert_one_line_error, run_cli


def paragraphs():
    """Clean prose of our own: every paragraph of 200+ characters of the pack's markdown that is not a table or code."""
    texts = []
    for path in sorted([ROOT / "PLAYBOOK.md", ROOT / "SKILL.md", *(ROOT / "refs").glob("*.md")]):
        for block in path.read_text().split("\n\n"):
            if len(block) > 200 and not block.lstrip().startswith(("|", "```", "![", "[^", ">")):
                texts.append(block)
    return texts


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: text, "id": i}) + "\n" for i, text in enumerate(texts)))
    return path


def test_the_demo_flags_its_three_planted_samples_with_their_reasons():
    result = bad_samples.screen(bad_samples.demo_samples())
    assert (result["samples"], result["flagged"]) == (40, 3)
    reasons = {entry["line"]: set(entry["reasons"]) for entry in result["worst"]}
    assert reasons == {12: {"run", "zlib", "top_char", "symbols"}, 25: {"zlib"}, 38: {"control", "zlib", "symbols"}}
    proc = run_cli("bad_samples.py")
    assert proc.returncode == 1 and proc.stdout.startswith("demo shard (embedded): 40 samples, 3 flagged")


def test_clean_prose_and_code_flag_nothing(tmp_path):
    prose = write_jsonl(tmp_path / "prose.jsonl", paragraphs())
    code = write_jsonl(tmp_path / "code.jsonl", [p.read_text() for p in sorted((ROOT / "diagnostics").rglob("*.py"))])
    for path, least in ((prose, 150), (code, 40)):
        proc = run_cli("bad_samples.py", path, "--json")
        result = json.loads(proc.stdout)
        assert proc.returncode == 0 and result["flagged"] == 0 and result["samples"] >= least, (path, result["worst"][:2])


def test_a_junk_sample_among_clean_ones_is_flagged_at_its_line(tmp_path):
    texts = paragraphs()[:60]
    texts.insert(41, "/" * 100_000)  # BUG: a badly cleaned page, a hundred thousand slashes (line 42)
    proc = run_cli("bad_samples.py", write_jsonl(tmp_path / "shard.jsonl", texts), "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["flagged"] == 1
    [entry] = result["worst"]
    assert entry["line"] == 42 and entry["numbers"]["top_char"] == 1.0 and entry["numbers"]["run"] == 100_000


def test_one_sample_per_line_in_a_text_file_and_only_the_worst_top_are_kept(tmp_path):
    lines = ["an ordinary line of text that says nothing odd at all"] * 10 + ["=" * 300] * 30
    path = tmp_path / "shard.txt"
    path.write_text("\n".join(lines) + "\n")
    result = bad_samples.screen(bad_samples.samples_of(str(path), "text"), top=5)
    assert (result["samples"], result["flagged"], len(result["worst"])) == (40, 30, 5)
    proc = run_cli("bad_samples.py", path, "--top", "5")
    assert proc.returncode == 1 and "25 more flagged" in proc.stdout


@pytest.mark.parametrize("content, field, message", [
    (b"", "text", "empty"),
    (b"\x00\x01binary\x00", "text", "binary"),
    (b'{"text": "fine"}\nnot json\n', "text", "line 2 is not JSON"),
    (b'["a", "list"]\n', "text", "not a JSON object"),
    (b'{"content": "x", "meta": 1}\n', "text", "keys found: content, meta"),
    (b"\n\n\n", "text", "no samples"),
    (b"caf\xe9 latin-1, not utf-8\n", "text", "not UTF-8"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, field, message):
    path = tmp_path / ("data.jsonl" if content.startswith((b"{", b"[")) else "data.txt")
    path.write_bytes(content)
    proc = run_cli("bad_samples.py", path, "--field", field)
    assert_one_line_error(proc)
    assert message in proc.stderr


def test_no_file_a_folder_and_a_bad_top_are_one_line_and_exit_2(tmp_path):
    assert_one_line_error(run_cli("bad_samples.py", tmp_path / "missing.jsonl"))
    assert_one_line_error(run_cli("bad_samples.py", tmp_path))
    assert_one_line_error(run_cli("bad_samples.py", "--top", "0"))


def test_a_full_stdout_is_one_line_and_exit_2():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, str(ROOT / "diagnostics" / "bad_samples.py")], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert_one_line_error(proc)
    assert "cannot write the output" in proc.stderr
