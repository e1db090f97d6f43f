"""Issue 27: the refusals and branches of lint, spikes, sweeps, spike_guard and check_pack that no test ran, one by one."""
import errno
import math
from pathlib import Path

import pytest
import torch

import check_pack
import lint
import spike_guard
import spikes
import sweeps
from conftest import findings
from spikelog.read import general
from spikelog.read.columns import Columns
from spikelog.report import _describe as describe_event
from trainlint import run as lint_run

LONG_NAME = "x" * 300  # longer than any file name may be: every system call on it fails with ENAMETOOLONG


def spikes_refusal(capsys, *argv):
    code = spikes.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err


# --- lint: its command line and the files it reads ---------------------------------------------------------------


def test_lint_run_raises_an_output_error_that_is_not_a_full_disk(monkeypatch):
    def refused():
        raise OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(lint, "main", refused)
    with pytest.raises(OSError):
        lint.run()


def test_lint_refuses_a_path_it_cannot_stat_with_the_system_reason(tmp_path):
    with pytest.raises(ValueError, match="too long"):
        lint_run.read_python(tmp_path / LONG_NAME)


def test_lint_refuses_a_file_over_its_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.py"
    path.write_text("x = 1\n" * 10)
    monkeypatch.setattr(lint_run, "MAX_BYTES", 59)
    with pytest.raises(ValueError, match="larger than"):
        lint_run.read_python(path)
    monkeypatch.setattr(lint_run, "MAX_BYTES", 60)
    assert lint_run.read_python(path) == "x = 1\n" * 10


class _Unreadable:
    """A regular file of one byte whose read fails (an I/O error, a file gone since its stat)."""

    def stat(self):
        return Path(__file__).stat()

    def read_bytes(self):
        raise OSError(errno.EIO, "Input/output error")


def test_lint_refuses_a_file_whose_read_fails_with_the_system_reason():
    with pytest.raises(ValueError, match="Input/output error"):
        lint_run.read_python(_Unreadable())


@pytest.mark.parametrize("text, reason", [('{"cells": 3}', "no list of cells"),
                                          ('{"cells": [{"cell_type": "code", "source": 7}]}', "cell 1 has no text")])
def test_lint_refuses_json_that_is_no_notebook(text, reason):
    with pytest.raises(ValueError, match=reason):
        lint_run.notebook_source(text)


def test_lint_refuses_an_unreadable_pyproject_naming_it(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(b"\0")
    with pytest.raises(ValueError, match="pyproject.toml: binary file"):
        lint_run.Config.nearest([tmp_path])


def test_lint_without_a_toml_reader_skips_a_pyproject_that_does_not_name_it(tmp_path, monkeypatch):
    monkeypatch.setattr(lint_run, "tomllib", None)
    (tmp_path / "pyproject.toml").write_text("[tool.other]\nx = 1\n")
    assert not lint_run.Config.nearest([tmp_path]).select


def test_lint_without_a_toml_reader_refuses_a_pyproject_with_its_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(lint_run, "tomllib", None)
    (tmp_path / "pyproject.toml").write_text("[tool.ml-debug.lint]\nselect = []\n")
    with pytest.raises(ValueError, match="needs Python 3.11 or the tomli package"):
        lint_run.Config.nearest([tmp_path])


def test_lint_refuses_a_lint_setting_that_is_not_a_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ml-debug]\nlint = "all"\n')
    with pytest.raises(ValueError, match="must be a table"):
        lint_run.Config.nearest([tmp_path])


# --- spike_guard -------------------------------------------------------------------------------------------------


def test_spike_guard_refuses_clip_z_without_a_model():
    with pytest.raises(ValueError, match="clip_z needs the model"):
        spike_guard.SpikeGuard(clip_z=2.0)
    spike_guard.SpikeGuard(model=torch.nn.Linear(2, 1), clip_z=2.0)


@pytest.mark.parametrize("bad", [0, 2.0])
def test_spike_guard_refuses_max_consecutive_that_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_consecutive"):
        spike_guard.SpikeGuard(max_consecutive=bad)


def test_spike_guard_without_a_model_refuses_a_step_without_grad_norm():
    guard = spike_guard.SpikeGuard()
    with pytest.raises(ValueError, match="needs grad_norm="):
        guard.should_skip(0, 1.0)
    assert guard.should_skip(0, 1.0, grad_norm=1.0) is False


# --- spikes: logs it cannot read ---------------------------------------------------------------------------------


def test_spikes_refuses_a_directory_read_as_csv(tmp_path, capsys):
    assert "a directory, not a csv file" in spikes_refusal(capsys, tmp_path, "--format", "csv")


def test_spikes_refuses_an_empty_csv(tmp_path, capsys):
    path = tmp_path / "log.csv"
    path.write_text("\n  \n")
    assert "the file is empty" in spikes_refusal(capsys, path, "--format", "csv")


def test_spikes_refuses_a_csv_header_it_cannot_parse(tmp_path, capsys):
    path = tmp_path / "log.csv"
    path.write_text("step,loss," + "x" * 200_000 + "\n1,2.0,3\n")
    assert "not a readable CSV file" in spikes_refusal(capsys, path, "--format", "csv")


def test_spikes_refuses_a_csv_row_it_cannot_parse_naming_its_line(tmp_path, capsys):
    path = tmp_path / "log.csv"
    path.write_text("step,loss\n1,2.0\n2,\"" + "x" * 200_000 + "\"\n")
    assert "line 3: not readable as CSV" in spikes_refusal(capsys, path, "--format", "csv")


# --- sweeps ------------------------------------------------------------------------------------------------------


def test_sweeps_refuses_a_runs_file_it_cannot_open_with_the_system_reason(tmp_path):
    with pytest.raises(sweeps.SweepError, match="cannot read: File name too long"):
        sweeps.read_text(str(tmp_path / LONG_NAME))


def test_sweeps_refuses_a_jsonl_line_that_is_not_an_object():
    with pytest.raises(sweeps.SweepError, match="line 2 is not a JSON object"):
        sweeps.load_runs('{"lr": 1, "seed": 0, "acc": 0.5}\n[1, 2]\n', "runs.jsonl", "lr", "seed", "acc")


def test_sweeps_refuses_a_demo_path_it_cannot_write(tmp_path):
    with pytest.raises(sweeps.SweepError, match="cannot write"):
        sweeps.write_demo(str(tmp_path / LONG_NAME), broken=False)


# --- check_pack --------------------------------------------------------------------------------------------------


def test_check_pack_refuses_a_path_that_is_no_regular_file(tmp_path):
    with pytest.raises(check_pack.Unreadable, match="not a regular file"):
        check_pack.read_text(tmp_path)


class _FailingRead:
    def is_file(self):
        return True

    def read_bytes(self):
        raise OSError(errno.EIO, "Input/output error")


def test_check_pack_refuses_a_file_whose_read_fails_at_line_one():
    with pytest.raises(check_pack.Unreadable, match="cannot read: Input/output error") as caught:
        check_pack.read_text(_FailingRead())
    assert caught.value.line == 1


SKILL = "---\nname: ml-debug\ndescription: x\n---\n# ml-debug\n\n{body}\n"


def pack_problems(root, skill_body="Nothing quoted."):
    (root / "SKILL.md").write_text(SKILL.format(body=skill_body))
    return [str(p) for p in check_pack.Checker(root, shared=None).run()]


def test_check_pack_reports_a_quote_whose_footnote_has_no_evidence_link_once(tmp_path):
    body = 'As said: "overfit one batch first"[^a].\n\n[^a]: [a talk](https://example.org/talk)'
    assert pack_problems(tmp_path, body) == [
        "SKILL.md:7: quote's footnote [^a] has no link to evidence/<file>.md#<excerpt>"]


def test_check_pack_reports_a_diagnostic_that_does_not_parse(tmp_path):
    (tmp_path / "diagnostics").mkdir()
    (tmp_path / "diagnostics" / "broken.py").write_text('"""Doc."""\ndef f(:\n')
    assert pack_problems(tmp_path) == ["diagnostics/broken.py:2: cannot parse: invalid syntax"]


@pytest.mark.parametrize("evidence, problem", [("# A source\n", "evidence file has no YAML front matter"),
                                               ("---\n- a list\n---\n# A source\n", "front matter must be a mapping")])
def test_check_pack_reports_evidence_front_matter_it_cannot_use_once(tmp_path, evidence, problem):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "s.md").write_text(evidence)
    assert pack_problems(tmp_path) == [f"evidence/s.md:1: {problem}",
                                       "evidence/s.md:1: evidence file is not cited by any page of the pack"]


def test_sweeps_incomplete_beta_is_zero_at_and_below_zero():
    assert sweeps.betainc(2, 3, 0.0) == 0.0
    assert sweeps.betainc(2, 3, -0.5) == 0.0


@pytest.mark.parametrize("effect", [0, 0.0, math.inf, math.nan])
def test_sweeps_needs_no_seed_count_for_no_effect_or_one_that_is_not_finite(effect):
    assert sweeps.seeds_needed(effect) is None


def test_sweeps_gives_no_seed_count_past_its_most_seeds():
    assert sweeps.seeds_needed(0.008) is None  # the normal approximation alone asks for about 122,600
    assert sweeps.seeds_needed(0.01) == 78491


def test_sweeps_fits_no_trend_on_a_single_seed():
    assert sweeps.trend({"1": {"a": 1.0}, "2": {"a": 2.0}}, ["1", "2"]) is None
    assert sweeps.trend({"1": {"a": 1.0, "b": 1.1}, "2": {"a": 2.0, "b": 2.3}}, ["1", "2"])["n_seeds"] == 2


# --- lint rules --------------------------------------------------------------------------------------------------

ACCUMULATION = """
    import torch.nn.functional as F

    for i, (x, y) in enumerate(loader):
    {body}
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """


def accumulation_findings(*body):
    return findings(ACCUMULATION.format(body="    " + "\n        ".join(body)))


def test_lint_sees_no_accumulation_when_backward_runs_only_sometimes():
    assert accumulation_findings("loss = F.cross_entropy(model(x), y)", "if i % n_critic == 0:",
                                 "    loss.backward()") == []
    assert accumulation_findings("loss = F.cross_entropy(model(x), y)", "loss.backward()") == [
        ("accumulated-loss-not-scaled", 6)]


def test_lint_gives_up_on_a_loss_passed_through_more_than_twelve_names():
    chain = [f"l{k + 1} = l{k}" for k in range(12)]
    assert accumulation_findings("l0 = F.cross_entropy(model(x), y)", *chain[:11], "l11.backward()") == [
        ("accumulated-loss-not-scaled", 17)]
    assert accumulation_findings("l0 = F.cross_entropy(model(x), y)", *chain, "l12.backward()") == []


def test_lint_leaves_a_loss_taken_from_a_list_unjudged():
    assert accumulation_findings("losses = [F.cross_entropy(model(x), y)]", "losses[0].backward()") == []


def test_lint_reads_only_the_loss_attribute_of_a_model_output_as_its_loss():
    assert accumulation_findings("outputs = model(x, labels=y)", "outputs.loss.backward()") == [
        ("accumulated-loss-not-scaled", 6)]
    assert accumulation_findings("outputs = model(x, labels=y)", "outputs.logits.backward()") == []


# --- spikes: reading and reporting -------------------------------------------------------------------------------


def test_spikes_takes_no_parts_for_a_loss_column_of_another_name():
    assert Columns(["step", "total", "loss_cls", "loss_bbox"], loss_name="total").components() == []
    assert Columns(["step", "loss", "loss_cls", "loss_bbox"]).components() == ["loss_cls", "loss_bbox"]


def test_spikes_reads_no_record_from_a_table_row_with_a_cell_that_is_not_a_number():
    header = ["epoch", "loss", "acc"]
    assert general.table_row("| 1 | abc | 3 |", header) == (header, None)
    assert general.table_row("| 1 | 2.5 | 3 |", header)[1]["loss"] == "2.5"


@pytest.mark.parametrize("scope, series, quiet, text", [
    ("shared", ["a", "b"], ["c"], "Step 5: shared by a, b; quiet: c."),
    ("confined", ["a"], [], "Step 5: confined to a."),
])
def test_spikes_describes_a_series_spike_by_its_scope(scope, series, quiet, text):
    event = {"kind": "series_spike", "step": 5, "series": series, "quiet": quiet, "scope": scope}
    assert describe_event(event) == text


def test_lint_leaves_a_line_reference_outside_the_notebook_as_written():
    cells = [(1, 1), (2, 1)]
    assert lint_run.in_cells("see line 3 and line 0", cells, 1) == "see line 3 and line 0"
    assert lint_run.in_cells("see line 2", cells, 1) == "see cell 2 line 1"


def test_lint_resolves_no_import_for_source_that_is_no_file(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text("class Net:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    project = lint_run.Project([tmp_path / "model.py", tmp_path / "train.py"])
    assert project.find("<string>", "model.Net") is None
    assert project.find(str(tmp_path / "train.py"), "model.Net")[1].name == "Net"


def test_lint_follows_a_reshaped_unreduced_loss_into_backward():
    assert findings("""
        import torch.nn as nn
        criterion = nn.CrossEntropyLoss(reduction='none')
        loss = criterion(model(x), y)
        loss.view(-1).backward()
        """) == [("backward-non-scalar", 5)]


CAUSAL_BUFFER = """
    import torch
    import torch.nn as nn
    class Attention(nn.Module):
        def __init__(self, T):
            super().__init__()
            self.register_buffer("{name}", torch.tril(torch.ones(T, T), diagonal=1))
    """


@pytest.mark.parametrize("name, found", [("bias", [("causal-mask-offset", 7)]), ("causal", [("causal-mask-offset", 7)]),
                                         ("weights", [])])
def test_lint_checks_a_tril_registered_as_a_buffer_named_for_a_mask(name, found):
    assert findings(CAUSAL_BUFFER.format(name=name)) == found


def test_lint_takes_a_loader_returned_by_train_dataloader_for_training():
    assert findings("""
        from torch.utils.data import DataLoader
        import pytorch_lightning as pl
        class Model(pl.LightningModule):
            def train_dataloader(self):
                return DataLoader(self.ds, batch_size=4)
            def val_dataloader(self):
                return DataLoader(self.ds, batch_size=4)
        """) == [("train-loader-no-shuffle", 6)]


@pytest.mark.parametrize("first, second, found", [("loss.detach()", "loss.detach()", [("detached-loss", 4)]),
                                                  ("loss", "loss.detach()", [])])
def test_lint_calls_a_conditional_loss_detached_only_when_both_branches_are(first, second, found):
    assert findings(f"""
        import torch.nn.functional as F
        loss = F.mse_loss(model(x), y)
        total = {first} if flag else {second}
        total.backward()
        """) == found


LOSS_AVERAGE = """
    import torch
    import torch.nn.functional as F

    def test(model, test_loader):
        test_loss = 0
        with torch.no_grad():
            for data, target in test_loader:
                test_loss += F.nll_loss(model(data), target{reduction}).item()
        test_loss /= len(test_loader.dataset)
        return test_loss
    """


@pytest.mark.parametrize("reduction, found", [("", [("loss-average-mismatch", 10)]), (", reduction='sum'", []),
                                              (", reduction=args.reduction", [])])
def test_lint_judges_a_loss_average_only_for_a_literal_reduction(reduction, found):
    assert findings(LOSS_AVERAGE.format(reduction=reduction)) == found


EVALUATION = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def freeze(m):
        m.eval()

    {model} = nn.Sequential(nn.Linear(784, 256), nn.Dropout(0.5), nn.Linear(256, 10))
    optimizer = torch.optim.SGD({model}.parameters(), lr=0.1)
    for epoch in range(10):
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy({model}(x), y).backward()
            optimizer.step()
        {before}
        with torch.no_grad():
            for x, y in val_loader:
                correct = ({model}(x).argmax(1) == y).sum().item()
    """


def test_lint_is_unsure_of_the_mode_after_a_helper_of_the_file_switches_some_model():
    assert findings(EVALUATION.format(model="model", before="pass")) == [("eval-mode-missing", 19)]
    assert findings(EVALUATION.format(model="model", before="freeze(teacher)")) == []



FUNCTIONAL_DROPOUT = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)
        def forward(self, x):
            return self.fc(F.dropout(x, 0.5, {training}))

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in val_loader:
                correct = (model(x).argmax(1) == y).sum().item()
    """


@pytest.mark.parametrize("training, found", [("self.training", [("eval-mode-missing", 23)]),
                                             ("training=self.training", [("eval-mode-missing", 23)]),
                                             ("self.dropping", []), ("flag", [])])
def test_lint_takes_functional_dropout_for_a_mode_layer_only_with_training_self_training(training, found):
    assert findings(FUNCTIONAL_DROPOUT.format(training=training)) == found


def test_lint_does_not_take_a_sequential_of_a_layer_it_cannot_see_for_a_mode_layer():
    code = EVALUATION.replace("nn.Dropout(0.5), nn.Linear(256, 10)", "nets[0]")
    assert findings(code.format(model="model", before="pass")) == []
    assert findings(EVALUATION.format(model="model", before="pass")) == [("eval-mode-missing", 19)]


@pytest.mark.parametrize("loss, found", [("F.nll_loss", []), ("F.cross_entropy", [("softmax-into-ce", 3)])])
def test_lint_reads_the_log_method_of_softmax_output_as_log_probabilities(loss, found):
    assert findings(f"import torch\nimport torch.nn.functional as F\nloss = {loss}(logits.softmax(-1).log(), y)\n") == found


def softmax_renamed(times):
    names = "".join(f"p{k + 1} = p{k}\n" for k in range(times))
    return f"import torch.nn.functional as F\np0 = logits.softmax(-1)\n{names}loss = F.nll_loss(p{times}, y)\n"


def test_lint_gives_up_on_a_softmax_output_passed_through_more_than_twelve_names():
    assert findings(softmax_renamed(11)) == [("probs-into-nll", 14)]
    assert findings(softmax_renamed(12)) == []
