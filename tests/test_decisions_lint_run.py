"""Decisions of lint's runner (trainlint/run.py): which paths a pattern names, what a path given itself yields, the
size refusal, a notebook line's cell, the Project's cache bound and the rules when no config file was read, each
pinned by an input at its boundary: found by mutation testing."""
from pathlib import Path

import pytest

from trainlint import run


def test_a_closing_bracket_without_an_opening_one_is_a_literal_character_of_the_pattern():
    # only `[` opens a character class: `ab]` names the file ab], not the file b
    assert run.matches("ab]", ["ab]"])


def test_a_path_given_itself_yields_only_itself_and_a_bad_name_is_an_error_of_that_path():
    # a path that is no folder is not walked: a NUL in its name is reported for it, not raised by the walk
    assert run.lint_paths(["bad\0name"]) == ([], [("bad\0name", "embedded null byte", True)], 0)


def test_a_file_one_byte_over_the_size_limit_is_refused(tmp_path):
    # the limit is 5 MB, our assumption (MAX_BYTES): written out here, so that moving it is a decision a test sees
    path = tmp_path / "generated.py"
    path.write_bytes(b"#" * 5_000_001)
    with pytest.raises(ValueError, match="larger than"):
        run.read_python(path)


def test_a_notebook_message_naming_the_first_line_of_the_joined_source_names_its_cell():
    # line 1 is a line of the notebook (the first line of cell 2), not a number out of range left as it is
    assert run.in_cells("set at line 1", [(2, 1)], 3) == "set at cell 2 line 1"


def test_the_project_keeps_at_most_its_cached_number_of_parsed_files(tmp_path):
    paths = [tmp_path / f"m{i}.py" for i in range(run.Project.CACHED + 1)]
    for path in paths:
        path.write_text("x = 1\n")
    project = run.Project(paths)
    for path in paths:
        project.source(path.resolve())
    assert len(project.cache) == run.Project.CACHED


def test_without_a_config_file_the_rules_chosen_on_the_command_line_are_kept():
    # None (all rules) passes through: per-file-ignores apply only under a pyproject.toml that was read
    assert run.Config().rules_for(Path("train.py"), None) is None
