"""Decisions pinned at their boundaries, found by mutation testing: rl_probes' value tolerance and its --timeout 0
(no limit), and spikelog's one-part total loss."""
import json

import pytest
import torch

import rl_probes
from spikelog.read.columns import Columns


class _FixedValueAgent:
    """An agent that values every observation at `v` and has one action."""

    def __init__(self, v):
        self.v = v

    def value(self, obs):
        return torch.full((len(obs),), self.v)

    def policy(self, obs):
        return torch.ones(len(obs), 1)


def test_probe_1_value_within_the_tolerance_passes_and_just_beyond_it_fails():
    # TOLERANCE is 0.1: the target is V(0) = 1
    probe = rl_probes.PROBES[0]
    assert bool(probe.measure(_FixedValueAgent(1.095), rl_probes.GAMMA)[0])
    assert not bool(probe.measure(_FixedValueAgent(1.105), rl_probes.GAMMA)[0])


def test_timeout_0_is_accepted_as_no_limit_and_a_negative_one_is_refused(monkeypatch, capsys):
    # --help: "0: no limit"; the check itself is stubbed, only the option's gate is under test
    passed = {"id": "rl_probes", "status": "pass", "summary": "stub", "details": {}}
    monkeypatch.setattr(rl_probes, "check_rl_probes", lambda factory: passed)
    assert rl_probes.main(["--healthy", "--timeout", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pass"
    with pytest.raises(SystemExit) as exc:
        rl_probes.main(["--healthy", "--timeout", "-1", "--json"])
    assert exc.value.code == 2


def test_a_total_loss_with_one_logged_part_is_read_as_the_loss_alone():
    # two logged parts make the loss "the total of its parts"; one part alone does not
    assert Columns(["step", "loss", "loss_cls"]).loss_words() == "'loss'"
    assert Columns(["step", "loss", "loss_cls", "loss_box"]).loss_words() != "'loss'"
