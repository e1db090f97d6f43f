"""doctor: the demo, the zoo (healthy cases get no fail, broken twins fail the right check), --json, bad cases."""
import ast
import json
import sys

import pytest
import torch

import doctor
from conftest import DIAGNOSTICS, ROOT, assert_one_line_error, run_cli

ZOO = ROOT / "tests" / "zoo"
sys.path.insert(0, str(ZOO))
import broken_data  # noqa: E402  (the zoo imports its siblings by plain name, as load_case allows)
import healthy  # noqa: E402
from test_checks_training import CHECKS as CHECKS_WITH_THEIR_OWN_ZOO_TESTS  # noqa: E402

DATA_CHECKS = ["data_sanity", "init_scale", "labels", "init_loss", "input_dependence"]


@pytest.fixture(scope="module")
def demo_run():
    """`python diagnostics/doctor.py --json`: the embedded demo, run once as `make demo` runs it."""
    proc = run_cli("doctor.py", "--json")
    return proc.returncode, json.loads(proc.stdout)


def only(check_ids):
    return [(check_id, module) for check_id, module in doctor.CHECKS if check_id in check_ids]


def test_demo_exits_1_and_names_the_planted_bug(demo_run):
    returncode, out = demo_run
    assert returncode == 1
    statuses = {c["id"]: c["status"] for c in out["checks"]}
    assert statuses["init_loss"] == "fail"
    assert [c["id"] for c in out["checks"] if c["status"] == "fail"] == ["init_loss"], "the demo plants one bug"


def test_json_shape_matches_design(demo_run):
    out = demo_run[1]
    assert list(out) == ["checks"]
    assert [c["id"] for c in out["checks"]] == [check_id for check_id, _ in doctor.CHECKS]
    for check in out["checks"]:
        assert set(check) == {"id", "status", "summary", "details"}
        assert check["status"] in ("pass", "warn", "fail", "skip")
        assert isinstance(check["summary"], str) and check["summary"]
        assert isinstance(check["details"], dict)


def test_text_report_says_what_failed_what_next_and_where_to_read(demo_run):
    results = [doctor.CheckResult(**c) for c in demo_run[1]["checks"]]
    text = doctor.report(results, "demo")
    fail_line = next(line for line in text.splitlines() if line.split()[:2] == ["FAIL", "init_loss"])
    assert "chance" in fail_line
    assert "next: " in text and "see PLAYBOOK.md#init-loss" in text
    assert text.splitlines()[-1].startswith("1 fail, ")


def test_healthy_demo_exits_0(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "CHECKS", only(DATA_CHECKS))
    assert doctor.main(["--healthy"]) == 0
    assert "0 fail" in capsys.readouterr().out


def test_checks_list_holds_every_check_in_diagnostics():
    ids = [check_id for check_id, _ in doctor.CHECKS]
    assert len(ids) == len(set(ids))
    defined = set()
    for path in DIAGNOSTICS.glob("*.py"):  # a doctor check is check_<file name>(case, ...); others take other inputs
        functions = {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
        check = functions.get(f"check_{path.stem}")
        if check is not None and check.args.args and check.args.args[0].arg == "case":
            defined.add(path.stem)
    assert set(ids) == defined, "doctor.CHECKS and the check_<id>(case) functions in diagnostics/ disagree"


@pytest.mark.parametrize("factory", healthy.HEALTHY)
def test_healthy_zoo_gets_no_fail(factory):
    """The checks without a healthy-zoo test of their own (those of tests/test_checks_training.py have one)."""
    checks = [(c, m) for c, m in doctor.CHECKS if c not in CHECKS_WITH_THEIR_OWN_ZOO_TESTS]
    assert {c for c, _ in checks} >= set(DATA_CHECKS)
    results = doctor.run_checks(doctor.load_case(f"{ZOO / 'healthy.py'}:{factory}"), checks)
    failed = [f"{r.id}: {r.summary}" for r in results if r.status == "fail"]
    assert not failed, failed


@pytest.mark.parametrize("factory, check_id", broken_data.BROKEN.items())
def test_broken_twin_fails_the_right_check(factory, check_id):
    case = doctor.load_case(f"{ZOO / 'broken_data.py'}:{factory}")
    module = dict(doctor.CHECKS)[check_id]
    [result] = doctor.run_checks(case, [(check_id, module)])
    assert result.status == "fail", result
    assert "raised" not in result.summary, "the check must catch the bug, not crash on it"


@pytest.mark.parametrize("factory, check_id", broken_data.WARNED.items())
def test_warned_twin_gets_a_warn_from_the_right_check(factory, check_id):
    case = doctor.load_case(f"{ZOO / 'broken_data.py'}:{factory}")
    [result] = doctor.run_checks(case, [(check_id, dict(doctor.CHECKS)[check_id])])
    assert result.status == "warn", result


def test_each_broken_twin_plants_one_marked_bug():
    lines = (ZOO / "broken_data.py").read_text().splitlines()
    assert sum("  # BUG: " in line for line in lines) == len(broken_data.BROKEN) + len(broken_data.WARNED)


def test_a_check_that_raises_is_its_own_fail(tmp_path, capsys):
    case_file = tmp_path / "crashing.py"
    case_file.write_text(
        "import torch\n"
        "class Crash(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 3)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x.view(-1, 5))\n"
        "def make_case():\n"
        "    return {'model': Crash(), 'batch': (torch.randn(10, 4), torch.zeros(10, dtype=torch.long)),\n"
        "            'loss_fn': torch.nn.functional.cross_entropy}\n")
    assert doctor.main(["--case", str(case_file), "--json"]) == 1
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert [c for c in checks if checks[c]["status"] == "fail"] == ["labels"], "one bug, one fail"
    assert "RuntimeError" in checks["labels"]["details"]["error"]
    assert checks["labels"]["details"]["where"] == f"{case_file}:7 in forward", "the user's line, not torch's"
    assert checks["init_loss"]["status"] == "skip" and checks["init_loss"]["summary"] == "raised the same error as labels"
    assert checks["init_scale"]["status"] == "pass"  # checks that need no forward pass still run
    assert all(c["details"]["seconds"] >= 0 for c in checks.values())



class LosesTheDevice(torch.nn.Module):
    """Raises the error a CUDA device-side assert raises, from its second forward call on (the first: labels'):
    torch's AcceleratorError is a RuntimeError, and its message's first line is the CUDA error's."""

    def __init__(self):
        super().__init__()
        self.fc, self.calls = torch.nn.Linear(4, 3), 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to ...")
        return self.fc(x)


def test_a_cuda_device_side_error_fails_its_check_and_skips_the_rest():
    case = {"model": LosesTheDevice(), "batch": (torch.randn(10, 4), torch.zeros(10, dtype=torch.long)),
            "loss_fn": torch.nn.functional.cross_entropy}
    results = doctor.run_checks(doctor.validate_case(case))
    statuses = [(r.id, r.status) for r in results]
    lost = next(i for i, r in enumerate(results) if r.status == "fail")
    assert statuses[lost] == ("init_loss", "fail") and "device-side" in results[lost].summary  # its first loss
    assert "CUDA_VISIBLE_DEVICES=" in results[lost].details["next"]
    assert all(r.status == "skip" and "stopped working in init_loss" in r.summary for r in results[lost + 1:])
    assert dict(statuses[:lost]) == {"data_sanity": "pass", "init_scale": "pass", "labels": "pass", "registration": "pass",
                                     "batchnorm": "pass", "training_loop": "skip"}  # no forward call but labels'
    assert len(results) == len(doctor.CHECKS)

HOSTILE_CASE = """import sys, time, torch
def make_case():
    torch.manual_seed(0)  # fixed weights and data: an unlucky draw gave a 1.75x-chance loss at init, an init_loss fail
    return {"model": torch.nn.Linear(4, 2), "batch": (torch.randn(8, 4), torch.randint(0, 2, (8,))), "loss_fn": torch.nn.functional.cross_entropy}
class Exiting(torch.nn.Linear):
    def forward(self, x):
        raise {error}
class Slow(torch.nn.Linear):
    def forward(self, x):
        time.sleep(60)
def make_raising():
    case = make_case()
    case["model"] = Exiting(4, 2)
    return case
def make_slow():
    case = make_case()
    case["model"] = Slow(4, 2)
    return case
"""


@pytest.mark.hostile
@pytest.mark.parametrize("error", ["SystemExit(3)", "KeyboardInterrupt()"])
def test_user_code_raising_systemexit_or_keyboardinterrupt_is_the_users_error(tmp_path, capsys, error):
    (tmp_path / "case.py").write_text(HOSTILE_CASE.replace("{error}", error))
    assert doctor.main(["--case", f"{tmp_path / 'case.py'}:make_raising", "--json"]) == 1
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["labels"]["status"] == "fail" and checks["labels"]["details"]["where"].endswith("case.py:7 in forward")


@pytest.mark.hostile
def test_a_check_past_its_time_limit_is_named_and_the_others_still_run(tmp_path, capsys):
    (tmp_path / "case.py").write_text(HOSTILE_CASE.replace("{error}", "ValueError()"))
    case = doctor.load_case(f"{tmp_path / 'case.py'}:make_slow")
    before = case["model"].weight.detach().clone()
    results = doctor.run_checks(case, doctor.CHECKS[:3], timeout=0.5)
    assert [(r.id, r.status) for r in results] == [("data_sanity", "pass"), ("init_scale", "pass"), ("labels", "skip")]
    assert results[2].summary.startswith("inconclusive") and results[2].details["seconds"] < 5
    assert torch.equal(case["model"].weight, before) and case["model"].training


@pytest.mark.hostile
def test_one_check_alone_stops_at_its_time_limit(tmp_path, capsys):
    """`python diagnostics/labels.py --case slow.py --timeout 0.5`: one line and exit 2 (the restore is
    test_a_check_past_its_time_limit_is_named_and_the_others_still_run's: the same time_limit and preserved())."""
    import labels
    (tmp_path / "case.py").write_text(HOSTILE_CASE.replace("{error}", "ValueError()"))
    code = labels.cli_main(labels.check_labels, labels.make_demo_case, "labels",
                           ["--case", f"{tmp_path / 'case.py'}:make_slow", "--timeout", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "0.5 s time limit" in err


@pytest.mark.hostile
def test_ctrl_c_exits_130_quietly(tmp_path):
    import signal
    import subprocess
    import time
    (tmp_path / "case.py").write_text(HOSTILE_CASE.replace("{error}", "ValueError()").replace(
        "        time.sleep(60)", "        open(__file__ + '.running', 'w').close()\n        time.sleep(60)"))
    proc = subprocess.Popen([sys.executable, str(DIAGNOSTICS / "doctor.py"), "--case", f"{tmp_path / 'case.py'}:make_slow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 100
    while not (tmp_path / "case.py.running").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "", (proc.returncode, err)


@pytest.mark.hostile
def test_the_case_folder_cannot_replace_our_checks(tmp_path, capsys):
    (tmp_path / "case.py").write_text(HOSTILE_CASE.replace("{error}", "ValueError()"))
    for name in ("labels.py", "init_loss.py"):
        (tmp_path / name).write_text("raise RuntimeError('the user\'s own module was imported')\n")
    assert doctor.main(["--case", str(tmp_path / "case.py"), "--json"]) in (0, 1)
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["labels"]["status"] == "pass" and checks["init_loss"]["status"] == "pass", (checks["labels"], checks["init_loss"])


@pytest.mark.hostile
def test_a_fifo_case_file_is_refused_at_once(tmp_path):
    import os
    fifo = tmp_path / "case.py"
    os.mkfifo(fifo)
    proc = run_cli("doctor.py", "--case", fifo, timeout=60)
    assert_one_line_error(proc)
    assert "not a regular file" in proc.stderr


def test_json_stdout_stays_pure_when_the_case_prints(tmp_path, capfd, monkeypatch):
    case_file = tmp_path / "chatty.py"
    case_file.write_text(
        "import torch\n"
        "print('loading my model...')\n"
        "def make_case():\n"
        "    print('building')\n"
        "    torch.manual_seed(0)\n"
        "    return {'model': torch.nn.Linear(4, 3), 'batch': (torch.randn(16, 4), torch.randint(0, 3, (16,))),\n"
        "            'loss_fn': torch.nn.functional.cross_entropy}\n")
    monkeypatch.setattr(doctor, "CHECKS", only(DATA_CHECKS))
    assert doctor.main(["--case", str(case_file), "--json"]) in (0, 1)
    captured = capfd.readouterr()
    assert json.loads(captured.out)["checks"]
    assert "building" in captured.err


BAD_CASES = {
    "no_factory.py": "import torch\n",
    "wrong_shape.py": "def make_case():\n    return [1, 2, 3]\n",
    "missing_keys.py": "import torch\ndef make_case():\n    return {'model': torch.nn.Linear(2, 2)}\n",
    "bad_batch.py": ("import torch\ndef make_case():\n    return {'model': torch.nn.Linear(2, 2), 'batch': torch.zeros(2),\n"
                     "            'loss_fn': torch.nn.functional.mse_loss}\n"),
    "bad_kind.py": ("import torch\ndef make_case():\n    return {'model': torch.nn.Linear(2, 2), 'batch': (torch.zeros(1, 2),\n"
                    "            torch.zeros(1, 2)), 'loss_fn': torch.nn.functional.mse_loss, 'task': {'kind': 'vision'}}\n"),
    "factory_raises.py": "def make_case():\n    raise ValueError('no GPU here')\n",
    "import_raises.py": "import not_a_module_anywhere\n",
}


@pytest.mark.parametrize("name", BAD_CASES)
def test_bad_case_is_one_line_exit_2(name, tmp_path, capsys):
    case_file = tmp_path / name
    case_file.write_text(BAD_CASES[name])
    assert doctor.main(["--case", str(case_file)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: "), captured.err


def test_missing_factory_in_a_real_case_file(capsys):
    assert doctor.main(["--case", f"{ZOO / 'healthy.py'}:make_nothing"]) == 2
    assert "has no function make_nothing()" in capsys.readouterr().err


def test_a_check_file_missing_next_to_doctor_is_a_skip():
    case = doctor.validate_case(doctor.make_demo_case(broken=False))
    [result] = doctor.run_checks(case, [("nothing", "no_such_check_module")])
    assert result.status == "skip" and "no_such_check_module.py" in result.summary


@pytest.mark.parametrize("factory", ["make_hf_style_lm", "make_hf_style_lm_labels_inside"])
def test_hf_style_cases_pass_every_check(factory):
    """Dict inputs, a ModelOutput-like result, labels inside the inputs: every check runs for real and passes."""
    case = doctor.validate_case(getattr(healthy, factory)(), factory)
    statuses = {result.id: result.status for result in doctor.run_checks(case)}
    expected = {check_id: "pass" for check_id, _ in doctor.CHECKS}
    expected["training_loop"] = "skip"  # a case file has no loop to look at
    if factory == "make_hf_style_lm_labels_inside":
        expected["target_leak"] = "skip"  # the model returns its own loss: the scoring is inside the model
    assert statuses == expected, statuses


def _forward_flops(case):
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        case["model"](case["batch"][0])
    return counter.get_total_flops()


def test_a_batch_over_the_flop_budget_is_cut_to_its_first_rows_and_the_model_is_left_as_found(monkeypatch):
    """resnet18 at 224x224 costs 3.6 GFLOP a row: 4 of them made the doctor take 36 s on imagenet/main.py. The cut is
    counted in FLOPs (the same on any machine); the forward that counts them must not move BatchNorm's running
    statistics, the RNG (dropout draws) or the mode."""
    case = doctor.validate_case(healthy.make_cnn_classifier())  # 16 rows, BatchNorm and dropout
    per_row = _forward_flops(case) / 16
    monkeypatch.setattr(doctor, "CHECK_FLOPS", 5.5 * per_row)
    model = case["model"]
    buffers = [b.clone() for b in model.buffers()]
    rng = torch.get_rng_state()
    cut, rows = doctor.within_budget(case)
    assert rows["rows"] == 5 and rows["of"] == 16 and rows["gflop_a_row"] == round(per_row / 1e9, 3), rows
    assert torch.equal(cut["batch"][0], case["batch"][0][:5]) and cut["batch"][1].tolist() == case["batch"][1][:5].tolist()
    assert case["batch"][0].shape[0] == 16  # the case itself is not changed
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers())) and torch.equal(rng, torch.get_rng_state())
    assert model.training and all(m.training for m in model.modules())


@pytest.mark.parametrize("budget_rows, rows", [(16.5, None), (40, None), (0.01, 2)])
def test_a_batch_within_the_budget_is_kept_whole_and_a_cut_keeps_min_rows(monkeypatch, budget_rows, rows):
    case = doctor.validate_case(healthy.make_cnn_classifier())
    monkeypatch.setattr(doctor, "CHECK_FLOPS", budget_rows * _forward_flops(case) / 16)
    cut, found = doctor.within_budget(case)
    if rows is None:
        assert cut is case and found is None
    else:
        assert cut["batch"][0].shape[0] == rows == cut["batch"][1].shape[0] == found["rows"], found


def test_the_budget_is_4_gflop_a_forward():
    """A convolution of 1.05 GFLOP a row (16 channels, 3x3, at 477x477): 3 rows fit in 4 GFLOP, a fourth does not."""
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
    model = torch.nn.Sequential(conv, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 2))
    case = doctor.validate_case({"model": model, "batch": (torch.randn(5, 16, 477, 477), torch.randint(0, 2, (5,))),
                                 "loss_fn": torch.nn.functional.cross_entropy})
    cut, rows = doctor.within_budget(case)
    assert rows["rows"] == 3 and 1.04 < rows["gflop_a_row"] < 1.06, rows


def test_no_cut_for_one_graph_or_a_loss_that_the_cut_batch_breaks(monkeypatch):
    """A graph's nodes need their edges; a loss that raises on fewer rows is met by the checks on the batch as given."""
    monkeypatch.setattr(doctor, "CHECK_FLOPS", 1.0)
    case = doctor.validate_case(healthy.make_cnn_classifier())
    graph = dict(case, task={**case["task"], "graph": True})
    assert doctor.within_budget(graph) == (graph, None)
    fussy = dict(case, loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out, y) if len(y) == 16 else 1 / 0)
    assert doctor.within_budget(fussy) == (fussy, None)


def _spies(seen, *check_ids):
    spy = type(sys)("spy_checks")
    for check_id in check_ids:
        def check(case, check_id=check_id):
            seen[check_id] = len(case["batch"][1])
            return doctor.CheckResult(check_id, "pass", "")
        setattr(spy, f"check_{check_id}", check)
    return spy


def test_the_checks_from_the_first_forward_on_but_update_ratio_run_on_the_cut_batch(monkeypatch):
    """data_sanity and init_scale judge the batch and the weights before any forward; update_ratio's overshoot
    experiment needs the batch the run steps on: resnet18 at lr 1.6 (SGD, momentum) raised the loss on 4 rows and
    recovered to 1e-4 on 2 of them (measured), which hid the harm."""
    seen, ids = {}, ("data_sanity", "init_scale", "labels", "update_ratio", "overfit_one_batch")
    monkeypatch.setitem(sys.modules, "spy_checks", _spies(seen, *ids))
    case = doctor.validate_case(healthy.make_cnn_classifier())
    monkeypatch.setattr(doctor, "CHECK_FLOPS", 4 * _forward_flops(case) / 16)
    results = doctor.run_checks(case, [(check_id, "spy_checks") for check_id in ids], budget=True)
    assert seen == {"data_sanity": 16, "init_scale": 16, "labels": 4, "update_ratio": 16, "overfit_one_batch": 4}
    assert [r.details.get("batch_cut", {}).get("rows") for r in results] == [None, None, 4, None, 4]
    assert doctor.run_checks(case, [("labels", "spy_checks")]) and seen["labels"] == 16  # no budget: the batch as given


def test_a_forward_that_exits_while_the_flops_are_counted_is_the_first_forward_checks_finding(monkeypatch):
    """The count is the user's forward: what it raises is reported by the check it ran for, as that check's own
    forward would be; the checks before it ran."""
    class Exits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            raise SystemExit(3)
    seen = {}
    monkeypatch.setitem(sys.modules, "spy_checks", _spies(seen, "data_sanity", "labels"))
    case = doctor.validate_case({"model": Exits(), "batch": (torch.randn(8, 4), torch.randint(0, 3, (8,))),
                                 "loss_fn": torch.nn.functional.cross_entropy})
    results = doctor.run_checks(case, [("data_sanity", "spy_checks"), ("labels", "spy_checks")], budget=True)
    assert [r.status for r in results] == ["pass", "fail"] and "SystemExit" in results[1].summary, results
    assert seen == {"data_sanity": 8}


def test_the_report_says_when_the_checks_ran_on_fewer_rows(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "CHECK_FLOPS", 1.0)
    case = f"{ZOO / 'healthy.py'}:make_cnn_classifier"
    assert doctor.main(["--case", case]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert f"from labels on, every check but update_ratio ran on the first {doctor.MIN_ROWS} of 16 rows" in title, title
    assert doctor.main(["--case", case, "--json"]) == 0
    cuts = {c["id"]: c["details"].get("batch_cut", {}).get("rows") for c in json.loads(capsys.readouterr().out)["checks"]}
    assert {check_id for check_id, rows in cuts.items() if rows is None} == {"data_sanity", "init_scale", "update_ratio"}
    assert set(cuts.values()) == {None, doctor.MIN_ROWS}, cuts
