"""rl_probes: Andy Jones's probe environments and unit checks, run against your RL agent to localise a bug.

Symptom
    Your RL agent runs without an error and never learns, or learns worse than it should, and the
    loss curve does not say why. Spinning Up: "broken RL code almost always fails silently"
    (evidence/spinningup-researcher.md#fails-silently). Andy Jones's answer is to "construct
    environments that *do* localise errors" (evidence/andyljones-rl-debugging.md#probe-environments).

What it checks
    Five probe environments, each adding one thing to the one before, and each run with a fresh
    agent from your factory (gamma 0.5, 16 parallel copies, rollouts of 3 steps; no gym):

      1 value        one action, observation 0, one step, reward +1: V(0) = 1
      2 backprop     one action, observation +1 or -1, one step, reward = observation: V(+-1) = +-1
      3 discounting  one action, observation 0 then 1, two steps, reward +1 at the end:
                     V(1) = 1, V(0) = gamma
      4 policy       two actions, observation 0, one step, reward +1 for action 1, -1 for action 0:
                     P(action 1) >= 0.9
      5 interaction  two actions, observation +1 or -1, reward +1 when the action matches the
                     observation's sign (action 1 for +1): P(right action) >= 0.9 in both
                     states, and V within 0.1 of the policy's own value 2P - 1

    A value must come within 0.1 of its target and stay there for 30 updates, within 150
    updates (our assumption: the reference agent learns each probe in 10-50 updates; Jones: a
    correct implementation learns them in a second or two). The first probe that fails is the report: the probes after
    it depend on what it tests.

    Unit checks, when the agent has a `returns` method: discounted returns over a hand-computed
    rollout: discounting within an episode, the reset at termination, bootstrapping from the
    value of the final observation at a truncation and at the end of the rollout, termination
    winning over truncation, and two environments kept apart. Jones names reward discounting and
    advantages around episode resets, and rewards paired with the wrong observations, as where
    RL bugs cluster (evidence/andyljones-rl-debugging.md#unit-test-tricky-bits).

    The agent interface (a file with a factory, `make_agent(n_actions, gamma)` by default):

      act(obs) -> actions        obs (B, 1) float; actions (B,) long
      value(obs) -> values       (B,)
      policy(obs) -> probs       (B, n_actions), rows summing to 1
      update(rollout)            one learning step; rollout holds (T, B) tensors obs (T, B, 1),
                                 actions, rewards, terminated, truncated (bool), and next_obs
                                 (T, B, 1): the observation after each step, before an auto-reset
      returns(rewards, terminated, truncated, next_values, gamma) -> returns   (optional, (T, B))

Command
    python diagnostics/rl_probes.py --agent my_agent.py[:make_agent] [--json]
    python diagnostics/rl_probes.py                # the embedded demo agent: its returns run across episode ends
    python diagnostics/rl_probes.py --bug flipped_advantage   # other planted bugs: shifted_reward, no_bootstrap
    python diagnostics/rl_probes.py --healthy      # the embedded reference agent

Output
    $ python diagnostics/rl_probes.py
    [FAIL] rl_probes: probe 1 (value) fails: the value loss or the optimizer
      probe 1 value        FAIL  V(0) 2.00, want 1 (after 150 updates)
      returns: 3/6 unit checks pass
        FAIL the discount resets at termination: expected [2, 2, 5], got [3.25, 4.5, 5]
        FAIL termination wins over truncation: expected [2, 2, 5], got [4.5, 7, 5]
        FAIL two environments stay apart: expected [2, 4.5, 2, 7, 5, 5], got [3.25, 4.5, 4.5, 7, 5, 5]
      next: print the value loss's target for probe 1 by hand (it is 1) and compare; check the optimizer steps the value net; returns also fails: the discount resets at termination
    (exit code 1)

How to read it
    Read the first failing probe, and believe that the ones before it work:

      1 fails   the value loss or the optimizer (a value near 1/(1-gamma) = 2: returns run on
                across episode ends, the discount is not reset at done)
      2 fails   backpropagation through the network, or rewards paired with the wrong
                observations (an off-by-one in the buffer)
      3 fails   reward discounting: the discount, or the bootstrap where a rollout or a time
                limit cuts an episode (a truncation is not a termination)
      4 fails   the advantage (its sign), the policy loss or the policy update
      5 fails   policy and value together: stale experience in the value's batches, or
                observations and actions out of step

    A failing unit check names the case and gives the expected and the computed returns.

Next step
    Fix the first failure and rerun until all five pass, then move to a real environment.
    refs/rl.md says what else to check (reward scale, observation normalisation, seeds).
"""
import argparse
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise
import torch.nn as nn
import torch.nn.functional as F

from ml_debug_contract import ArgumentParser, CaseError, json_text, run_command, run_user_code, user_function

GAMMA = 0.5  # far from 1, so a missing or doubled discount moves V(0) in probe 3 well past the tolerance
N_ENVS = 16
ROLLOUT = 3  # odd, so rollouts cut two-step episodes in the middle: a third of probe 3's first steps need the bootstrap
MAX_UPDATES = 150  # the reference agent meets every probe's targets within 50 updates (measured), 3x that
EVAL_EVERY = 10
STABLE_EVALS = 3  # a probe passes when its targets hold at this many evaluations in a row (30 updates)
TOLERANCE = 0.1  # our assumption; Jones: a value "more than an epsilon away from the correct value" is a bug
POLICY_TARGET = 0.9  # our assumption: P(best action) a softmax policy reaches within MAX_UPDATES when learning works


class AgentError(Exception):
    """An agent that cannot be loaded or does not keep the interface: one line, exit code 2."""


# --- the probe environments ------------------------------------------------------------------------


class Probe:
    """One probe environment, N copies stepped together; an episode that ends restarts at once."""

    def __init__(self, number, name, n_actions, length, summary, localises):
        self.number, self.name, self.n_actions, self.length = number, name, n_actions, length
        self.summary, self.localises = summary, localises

    def start(self, n, generator):
        """First observations of n new episodes: 0, or +1/-1 at random for probes 2 and 5."""
        if self.number in (2, 5):
            return (torch.randint(0, 2, (n, 1), generator=generator) * 2 - 1).float()
        return torch.zeros(n, 1)

    def reward(self, obs, actions, t):
        if self.number == 1:
            return torch.ones(len(obs))
        if self.number == 2:
            return obs[:, 0].clone()
        if self.number == 3:
            return (t == 1).float()
        if self.number == 4:
            return actions.float() * 2 - 1
        return torch.where(actions == (obs[:, 0] > 0).long(), 1.0, -1.0)

    def rollout(self, agent, state, generator):
        """T steps of every copy; returns the rollout dict and the state to continue from."""
        obs, t = state
        keys = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs")
        steps = {key: [] for key in keys}
        for _ in range(ROLLOUT):
            with torch.no_grad():
                actions = agent.act(obs)
            actions = check_tensor(actions, (len(obs),), "act(obs)").long()
            if ((actions < 0) | (actions >= self.n_actions)).any():
                raise AgentError(f"act(obs) returned an action outside 0..{self.n_actions - 1}")
            reward = self.reward(obs, actions, t)
            terminated = t + 1 == self.length
            next_obs = torch.where(terminated[:, None], torch.zeros_like(obs), obs + 1)  # probe 3: 0 -> 1; final obs: 0
            for key, value in zip(keys, (obs, actions, reward, terminated, torch.zeros_like(terminated), next_obs)):
                steps[key].append(value)
            t = torch.where(terminated, 0, t + 1)
            obs = torch.where(terminated[:, None], self.start(len(obs), generator), next_obs)
        return {key: torch.stack(values) for key, values in steps.items()}, (obs, t)

    def measure(self, agent, gamma):
        """(passed, description) of the agent's value and policy against this probe's targets."""
        with torch.no_grad():
            states = {1: [0.0], 2: [1.0, -1.0], 3: [0.0, 1.0], 4: [0.0], 5: [1.0, -1.0]}[self.number]
            obs = torch.tensor(states)[:, None]
            v = check_tensor(agent.value(obs), (len(states),), "value(obs)").float()
            p = check_tensor(agent.policy(obs), (len(states), self.n_actions), "policy(obs)").float()
        if self.number == 1:
            return abs(v[0] - 1) <= TOLERANCE, f"V(0) {v[0]:.2f}, want 1"
        if self.number == 2:
            return (v - obs[:, 0]).abs().max() <= TOLERANCE, f"V(+1) {v[0]:.2f}, V(-1) {v[1]:.2f}, want +-1"
        if self.number == 3:
            return ((v - torch.tensor([gamma, 1.0])).abs().max() <= TOLERANCE,
                    f"V(0) {v[0]:.2f}, V(1) {v[1]:.2f}, want {gamma:g} and 1")
        if self.number == 4:
            return p[0, 1] >= POLICY_TARGET, f"P(action 1) {p[0, 1]:.2f}, want >= {POLICY_TARGET}"
        right = torch.stack([p[0, 1], p[1, 0]])
        ok = (right >= POLICY_TARGET).all() and (v - (2 * right - 1)).abs().max() <= TOLERANCE
        return ok, (f"P(right | +1) {right[0]:.2f}, P(right | -1) {right[1]:.2f}, V(+1) {v[0]:.2f}, V(-1) {v[1]:.2f}, "
                    f"want P >= {POLICY_TARGET} and V = 2P-1")


PROBES = [
    Probe(1, "value", 1, 1, "one action, observation 0, one step, +1 reward",
          "the value loss or the optimizer"),
    Probe(2, "backprop", 1, 1, "one action, observation +-1, reward = observation",
          "backpropagation through the network, or rewards paired with the wrong observations"),
    Probe(3, "discounting", 1, 2, "one action, observation 0 then 1, +1 at the end",
          "reward discounting, or the bootstrap where a rollout cuts an episode"),
    Probe(4, "policy", 2, 1, "two actions, observation 0, action-dependent +-1 reward",
          "the advantage calculation, the policy loss or the policy update"),
    Probe(5, "interaction", 2, 1, "two actions, observation +-1, action-and-observation-dependent reward",
          "policy and value together: stale experience in the value's batches, or observations and actions out of step"),
]
NEXT = {
    1: "print the value loss's target for probe 1 by hand (it is 1) and compare; check the optimizer steps the value net",
    2: "check that rewards[t] is the reward for obs[t] in your buffer, and that gradients reach the value net's input layer",
    3: "unit-test your returns: discount within an episode, reset at termination, bootstrap at truncation and rollout end",
    4: "compute the expected advantage and policy loss by hand for probe 4 and compare with your code's values",
    5: "check that the value net trains on the current policy's experience, and that each action is paired with its observation",
}


def check_tensor(value, shape, what):
    if not isinstance(value, torch.Tensor):
        raise AgentError(f"{what} returned {type(value).__name__}, expected a tensor of shape {tuple(shape)}")
    if tuple(value.shape) != tuple(shape):
        raise AgentError(f"{what} returned shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value


def run_probe(probe, make_agent, seed=0):
    """Train a fresh agent on one probe; {"passed", "measured", "updates"}."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    agent = make_agent(probe.n_actions, GAMMA)
    state = (probe.start(N_ENVS, generator), torch.zeros(N_ENVS, dtype=torch.long))
    streak, first_ok = 0, None
    for update in range(1, MAX_UPDATES + 1):
        rollout, state = probe.rollout(agent, state, generator)
        agent.update(rollout)
        if update % EVAL_EVERY == 0:
            ok, measured = probe.measure(agent, GAMMA)
            streak, first_ok = (streak + 1, first_ok or update) if ok else (0, None)
            if streak == STABLE_EVALS:
                return {"passed": True, "measured": measured, "updates": first_ok}
    return {"passed": False, "measured": measured, "updates": MAX_UPDATES}


# --- unit checks for returns ---------------------------------------------------------------------


def returns_cases(gamma=GAMMA):
    """(name, rewards, terminated, truncated, next_values, expected), each (T, B), worked out by hand.

    Three steps, rewards 1, 2, 3; next_values[t] is the value of the observation after step t (10 after
    step 1, 4 after step 2); an event (termination or truncation) happens at step 1 or not at all.
    """
    g = gamma
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    next_values = torch.tensor([[0.0], [10.0], [4.0]])
    no = torch.zeros(3, 1, dtype=torch.bool)
    at_1 = torch.tensor([[False], [True], [False]])
    tail = 3 + g * 4  # step 2 bootstraps from the value after it: the rollout ends there
    plain = [[1 + g * (2 + g * tail)], [2 + g * tail], [tail]]
    reset = [[1 + g * 2], [2], [tail]]
    cut = [[1 + g * (2 + g * 10)], [2 + g * 10], [tail]]
    two = lambda a, b: torch.cat([a, b], 1)  # noqa: E731  (two environments side by side)
    cases = [
        ("discount within an episode, bootstrap at the rollout's end", rewards, no, no, next_values, plain),
        ("the discount resets at termination", rewards, at_1, no, next_values, reset),
        ("a truncation bootstraps from the final observation's value", rewards, no, at_1, next_values, cut),
        ("termination wins over truncation", rewards, at_1, at_1, next_values, reset),
        ("two environments stay apart", two(rewards, rewards), two(at_1, no), two(no, at_1), two(next_values, next_values),
         [a + b for a, b in zip(reset, cut)]),
        ("a one-step rollout bootstraps", rewards[:1], no[:1], no[:1], torch.tensor([[6.0]]), [[1 + g * 6]]),
    ]
    return [(name, r, term, trunc, nv, torch.tensor(expected)) for name, r, term, trunc, nv, expected in cases]


def check_returns(returns_fn, gamma=GAMMA):
    """Run the agent's returns function on the hand-computed cases: [{"case", "passed", "expected", "got"}]."""
    results = []
    for name, rewards, terminated, truncated, next_values, expected in returns_cases(gamma):
        got = returns_fn(rewards.clone(), terminated.clone(), truncated.clone(), next_values.clone(), gamma)
        got = check_tensor(got, expected.shape, "returns(...)").float()
        results.append({"case": name, "passed": bool(torch.allclose(got, expected, atol=1e-5)),
                        "expected": expected.flatten().tolist(), "got": got.flatten().tolist()})
    return results


# --- the report ----------------------------------------------------------------------------------


def check_rl_probes(make_agent, seed=0):
    """Every probe in order (stopping at the first failure), then the returns unit checks; a CheckResult-shaped dict."""
    rows, first_fail = [], None
    with torch.random.fork_rng(devices=[]):  # the agents draw from torch's RNG: yours is left as it was
        for probe in PROBES:
            result = run_probe(probe, make_agent, seed)
            rows.append({"probe": probe.number, "name": probe.name, "environment": probe.summary, **result})
            if not result["passed"]:
                first_fail = probe
                break
        agent = make_agent(2, GAMMA)
        units = check_returns(agent.returns) if callable(getattr(agent, "returns", None)) else None
    failed_units = [u for u in units or [] if not u["passed"]]
    details = {"gamma": GAMMA, "n_envs": N_ENVS, "rollout": ROLLOUT, "probes": rows, "returns_checks": units}
    if first_fail:
        before = {1: "", 2: " after probe 1 passes"}.get(first_fail.number, f" after probes 1-{first_fail.number - 1} pass")
        summary = f"probe {first_fail.number} ({first_fail.name}) fails{before}: {first_fail.localises}"
        details["next"] = NEXT[first_fail.number]
        status = "fail"
    elif failed_units:
        summary = f"all 5 probes pass, but returns fails: {failed_units[0]['case']}"
        details["next"] = "fix the returns computation for that case (expected and computed values are in details)"
        status = "fail"
    else:
        summary = "all 5 probes pass" + ("" if units is None else f"; returns: {len(units)}/{len(units)} unit checks pass")
        status = "pass"
    if failed_units and first_fail:
        details["next"] += f"; returns also fails: {failed_units[0]['case']}"
    return {"id": "rl_probes", "status": status, "summary": summary, "details": details}


def report_text(result):
    lines = [f"[{result['status'].upper()}] {result['id']}: {result['summary']}"]
    for row in result["details"]["probes"]:
        how = f"learned in {row['updates']} updates" if row["passed"] else f"after {row['updates']} updates"
        lines.append(f"  probe {row['probe']} {row['name']:<12} {'pass' if row['passed'] else 'FAIL'}  {row['measured']} ({how})")
    units = result["details"]["returns_checks"]
    if units is None:
        lines.append("  returns: the agent has no returns(...) method, unit checks skipped")
    elif result["status"] == "fail":
        passed = sum(u["passed"] for u in units)
        lines.append(f"  returns: {passed}/{len(units)} unit checks pass")
        lines += [f"    FAIL {u['case']}: expected {fmt(u['expected'])}, got {fmt(u['got'])}" for u in units if not u["passed"]]
    if "next" in result["details"]:
        lines.append(f"  next: {result['details']['next']}")
    return "\n".join(lines)


def fmt(values):
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


# --- the reference agent and its broken twins ---------------------------------------------------


class ReferenceAgent:
    """A small advantage actor-critic, correct on purpose: every probe and unit check must pass it."""

    def __init__(self, n_actions, gamma, lr=1e-2):
        self.gamma = gamma
        self.value_net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
        self.policy_net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, n_actions))
        self.optimizer = torch.optim.Adam([*self.value_net.parameters(), *self.policy_net.parameters()], lr=lr)

    def value(self, obs):
        return self.value_net(obs).squeeze(-1)

    def policy(self, obs):
        return self.policy_net(obs).softmax(-1)

    def act(self, obs):
        return torch.multinomial(self.policy(obs), 1).squeeze(-1)

    def returns(self, rewards, terminated, truncated, next_values, gamma):
        """G_t = r_t + gamma * (0 at termination; V(next obs) at truncation or the rollout's end; else G_t+1)."""
        out = torch.zeros_like(rewards)
        future = next_values[-1]
        for t in reversed(range(len(rewards))):
            if t < len(rewards) - 1:
                future = torch.where(truncated[t], next_values[t], out[t + 1])
            out[t] = rewards[t] + gamma * torch.where(terminated[t], torch.zeros_like(future), future)
        return out

    def advantages(self, returns, values):
        return returns - values

    def paired_rewards(self, rollout):
        return rollout["rewards"]

    def update(self, rollout):
        with torch.no_grad():
            next_values = self.value(rollout["next_obs"])
            returns = self.returns(self.paired_rewards(rollout), rollout["terminated"], rollout["truncated"],
                                   next_values, self.gamma)
        values = self.value(rollout["obs"])
        advantages = self.advantages(returns, values).detach()
        log_probs = F.log_softmax(self.policy_net(rollout["obs"]), -1).gather(-1, rollout["actions"][..., None]).squeeze(-1)
        loss = F.mse_loss(values, returns) - (advantages * log_probs).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


class NoResetAgent(ReferenceAgent):
    def returns(self, rewards, terminated, truncated, next_values, gamma):
        out = torch.zeros_like(rewards)
        future = next_values[-1]
        for t in reversed(range(len(rewards))):
            if t < len(rewards) - 1:
                future = torch.where(truncated[t], next_values[t], out[t + 1])
            out[t] = rewards[t] + gamma * future  # BUG: the discount is not reset at done: returns run into the next episode
        return out


class NoBootstrapAgent(ReferenceAgent):
    def returns(self, rewards, terminated, truncated, next_values, gamma):
        out = torch.zeros_like(rewards)
        future = torch.zeros_like(next_values[-1])  # BUG: the rollout's end is treated as a termination: no bootstrap
        for t in reversed(range(len(rewards))):
            if t < len(rewards) - 1:
                future = torch.where(truncated[t], next_values[t], out[t + 1])
            out[t] = rewards[t] + gamma * torch.where(terminated[t], torch.zeros_like(future), future)
        return out


class ShiftedRewardAgent(ReferenceAgent):
    def paired_rewards(self, rollout):
        return rollout["rewards"].roll(1, 0)  # BUG: an off-by-one in the buffer: obs[t] gets the reward of step t-1


class FlippedAdvantageAgent(ReferenceAgent):
    def advantages(self, returns, values):
        return values - returns  # BUG: the advantage's sign is flipped: the policy learns to avoid what paid


PLANTED = {"no_reset": NoResetAgent, "no_bootstrap": NoBootstrapAgent, "shifted_reward": ShiftedRewardAgent,
           "flipped_advantage": FlippedAdvantageAgent}


# --- the CLI -------------------------------------------------------------------------------------


def load_agent_factory(spec):
    return user_function(spec, "make_agent", "agent file", AgentError, arguments="n_actions, gamma")[2]


TIMEOUT = 600.0  # seconds the user's code may run: five probes train a small agent for seconds on a CPU; a user's agent may be 100x slower


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", metavar="FILE.py[:factory]",
                        help="a file whose factory(n_actions, gamma) returns your agent (default factory: make_agent); "
                             "without it, the embedded demo agent with a planted bug")
    parser.add_argument("--healthy", action="store_true", help="run the embedded reference agent instead")
    parser.add_argument("--bug", choices=sorted(PLANTED), default="no_reset",
                        help="which planted bug the demo agent carries (default: no_reset)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds your code may run (default {TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if not args.timeout >= 0:
        parser.error("--timeout must be a number of seconds >= 0")


    def work():  # with --agent, in the supervised child: the file is the user's code
        factory = load_agent_factory(args.agent) if args.agent else ReferenceAgent if args.healthy else PLANTED[args.bug]
        return check_rl_probes(factory)

    try:
        result = run_user_code(work, args.agent and f"running {args.agent}", args.timeout, args.json, AgentError,
                               "the agent raised during the probes")
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json_text(result) if args.json else report_text(result))
    return 1 if result["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # Ctrl-C: 130; a closed or full stdout: no traceback
