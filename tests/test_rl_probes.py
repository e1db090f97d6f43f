"""diagnostics/rl_probes.py: the reference agent passes every probe and unit check, each planted bug fails the probe
that localises it (and the probes before it pass), a user's agent file runs through the CLI, bad agents exit 2."""
import json
import textwrap

import pytest
import torch

import rl_probes  # noqa: E402  (conftest puts diagnostics/ on sys.path)


@pytest.fixture(scope="module")
def results():
    """One run of the whole battery per agent: the reference and the four planted bugs."""
    agents = {"reference": rl_probes.ReferenceAgent, **rl_probes.PLANTED}
    return {name: rl_probes.check_rl_probes(agent) for name, agent in agents.items()}


def statuses(result):
    return [(row["probe"], row["passed"]) for row in result["details"]["probes"]]


def test_reference_agent_passes_every_probe_and_unit_check(results):
    result = results["reference"]
    assert result["status"] == "pass"
    assert statuses(result) == [(1, True), (2, True), (3, True), (4, True), (5, True)]
    assert all(check["passed"] for check in result["details"]["returns_checks"])
    assert len(result["details"]["returns_checks"]) == 6


@pytest.mark.parametrize("bug,probe,failed_checks", [
    ("no_reset", 1, {"the discount resets at termination", "termination wins over truncation", "two environments stay apart"}),
    ("shifted_reward", 2, set()),
    ("no_bootstrap", 3, {"discount within an episode, bootstrap at the rollout's end", "the discount resets at termination",
                         "a truncation bootstraps from the final observation's value", "termination wins over truncation",
                         "two environments stay apart", "a one-step rollout bootstraps"}),
    ("flipped_advantage", 4, set()),
])
def test_each_planted_bug_fails_the_probe_that_localises_it(results, bug, probe, failed_checks):
    result = results[bug]
    assert result["status"] == "fail"
    assert statuses(result) == [(n, n < probe) for n in range(1, probe + 1)]  # the ones before pass, it fails, no more run
    assert result["summary"].startswith(f"probe {probe} ")
    assert result["details"]["next"].startswith(rl_probes.NEXT[probe])
    assert {c["case"] for c in result["details"]["returns_checks"] if not c["passed"]} == failed_checks


def test_no_reset_converges_to_the_geometric_sum(results):
    """Returns that run on across one-step episodes sum 1 + gamma + gamma^2 + ... = 1 / (1 - gamma) = 2."""
    assert results["no_reset"]["details"]["probes"][0]["measured"].startswith("V(0) 2.0")


def test_unit_checks_alone_catch_a_returns_bug_the_probes_miss():
    class TruncationAsTermination(rl_probes.ReferenceAgent):
        def returns(self, rewards, terminated, truncated, next_values, gamma):
            return super().returns(rewards, terminated | truncated, torch.zeros_like(truncated), next_values, gamma)  # BUG

    checks = rl_probes.check_returns(TruncationAsTermination(1, 0.5).returns)
    assert [c["case"] for c in checks if not c["passed"]] == ["a truncation bootstraps from the final observation's value",
                                                             "two environments stay apart"]


def test_the_check_leaves_the_global_rng_alone_also_when_the_agent_raises():
    class Raises(rl_probes.ReferenceAgent):
        def update(self, rollout):
            raise RuntimeError("a bug in the user's update")

    before = torch.get_rng_state()
    with pytest.raises(RuntimeError):
        rl_probes.check_rl_probes(Raises)
    assert torch.equal(torch.get_rng_state(), before)


TABULAR_AGENT = '''
import torch


class TabularAgent:
    """A lookup table of values and action preferences over the observations -1, 0, +1 (Jones's probe agent)."""

    def __init__(self, n_actions, gamma):
        self.gamma, self.v, self.logits = gamma, torch.zeros(3), torch.zeros(3, n_actions)

    def index(self, obs):
        return obs[:, 0].round().long() + 1

    def value(self, obs):
        return self.v[self.index(obs)]

    def policy(self, obs):
        return self.logits[self.index(obs)].softmax(-1)

    def act(self, obs):
        return torch.multinomial(self.policy(obs), 1).squeeze(-1)

    def returns(self, rewards, terminated, truncated, next_values, gamma):
        out, future = torch.zeros_like(rewards), next_values[-1]
        for t in reversed(range(len(rewards))):
            if t < len(rewards) - 1:
                future = torch.where(truncated[t], next_values[t], out[t + 1])
            out[t] = rewards[t] + gamma * torch.where(terminated[t], 0.0, future)
        return out

    def update(self, rollout):
        s = self.index(rollout["obs"].flatten(0, 1))
        g = self.returns(rollout["rewards"], rollout["terminated"], rollout["truncated"],
                         self.value(rollout["next_obs"].flatten(0, 1)).view(rollout["rewards"].shape), self.gamma).flatten()
        advantage = g - self.v[s]
        counts = torch.bincount(s, minlength=3).clamp_min(1)
        grad = -self.logits[s].softmax(-1)  # d log pi(a) / d logits = onehot(a) - pi
        grad[torch.arange(len(s)), rollout["actions"].flatten()] += 1
        self.v += 0.5 * torch.zeros(3).index_add_(0, s, advantage) / counts
        self.logits += 2.0 * torch.zeros_like(self.logits).index_add_(0, s, advantage[:, None] * grad) / counts[:, None]


def make_agent(n_actions, gamma):
    return TabularAgent(n_actions, gamma)
'''


def test_a_users_tabular_agent_file_passes_through_the_cli(tmp_path, capsys):
    path = tmp_path / "agent.py"
    path.write_text(TABULAR_AGENT)
    assert rl_probes.main(["--agent", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "pass" and all(row["passed"] for row in result["details"]["probes"])


@pytest.mark.hostile
@pytest.mark.parametrize("source,spec_suffix,says", [
    (None, "", "agent file not found"),
    ("raise ImportError('no gym here')\n", "", "raised ImportError on import: no gym here"),
    ("x = 1\n", "", "has no function make_agent(n_actions, gamma)"),
    ("def build(n, g):\n    return object()\n", ":build", "the agent raised during the probes: AttributeError"),
    (TABULAR_AGENT.replace("return torch.multinomial(self.policy(obs), 1).squeeze(-1)", "return [0]"), "",
     "act(obs) returned list, expected a tensor of shape (16,)"),
    (TABULAR_AGENT.replace("return self.v[self.index(obs)]", "return self.v[self.index(obs)][:, None]"), "",
     "value(obs) returned shape (1, 1), expected (1,)"),
    (TABULAR_AGENT.replace("return torch.multinomial(self.policy(obs), 1).squeeze(-1)", "return torch.full((len(obs),), 7)"), "",
     "act(obs) returned an action outside 0..0"),
])
def test_bad_agents_exit_2_with_one_line(tmp_path, capsys, source, spec_suffix, says):
    """In-process (main() is what the CLI runs); tests/test_diagnostic_conventions.py runs the real CLI."""
    path = tmp_path / "agent.py"
    if source is not None:
        path.write_text(textwrap.dedent(source))
    assert rl_probes.main(["--agent", f"{path}{spec_suffix}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err


def test_a_probe_is_measured_every_10_updates_and_passes_at_one_of_them(results):
    probes = results["reference"]["details"]["probes"]
    assert all(row["updates"] % rl_probes.EVAL_EVERY == 0 for row in probes), probes


def test_the_text_report_lists_the_unit_checks_only_when_the_agent_fails(results):
    """A pass says 6/6 in its summary line; a fail gets a line of its own, and one per failed check."""
    def returns_lines(name):
        return [line for line in rl_probes.report_text(results[name]).splitlines() if line.startswith("  returns:")]

    assert returns_lines("reference") == []
    assert returns_lines("no_reset") == ["  returns: 3/6 unit checks pass"]
