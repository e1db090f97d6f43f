"""capture's _run and main() decisions pinned at their boundaries (mutation testing's survivors): a Ctrl-C goes through,
the backward() note of an error before the first step, and how main() splits its own arguments from the script's."""
import pytest
import torch

import capture


def test_a_ctrl_c_before_the_first_step_goes_through_instead_of_becoming_a_capture_error():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture.capture_case(interrupted)


def test_an_error_after_a_backward_without_a_step_says_how_many_backward_calls_ran():
    def backward_then_fail():
        torch.ones(2, requires_grad=True).sum().backward()
        raise ValueError("no optimizer here")

    with pytest.raises(capture.CaptureError) as error:
        capture.capture_case(backward_then_fail)
    assert "(1 backward() calls and no torch.optim optimizer.step()" in str(error.value)


def test_an_error_before_any_backward_carries_no_backward_note():
    def fail():
        raise ValueError("broken data loader")

    with pytest.raises(capture.CaptureError) as error:
        capture.capture_case(fail)
    assert "backward()" not in str(error.value)


@pytest.fixture
def scripts_captured(monkeypatch):
    """main()'s calls of capture_script, recorded as (path, script arguments) instead of running a script."""
    calls = []

    def fake_capture_script(path, argv=()):
        calls.append((path, list(argv)))
        return {"captured": "a fake case"}

    monkeypatch.setattr(capture, "capture_script", fake_capture_script)
    return calls


def test_main_without_arguments_reads_the_command_line(scripts_captured, monkeypatch):
    monkeypatch.setattr("sys.argv", ["capture.py", "train.py", "--", "--lr", "0.5"])
    assert capture.main() == 0
    assert scripts_captured == [("train.py", ["--lr", "0.5"])]


def test_main_gives_the_arguments_after_the_double_dash_to_the_script(scripts_captured):
    assert capture.main(["train.py", "--", "--epochs", "1"]) == 0
    assert scripts_captured == [("train.py", ["--epochs", "1"])]


def test_main_without_a_double_dash_gives_the_script_no_arguments(scripts_captured):
    assert capture.main(["train.py"]) == 0
    assert scripts_captured == [("train.py", [])]
