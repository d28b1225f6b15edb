"""The `[conversation]` table: each conversation's draws (reproducible, per its own index,
with the distributions their definitions say) and every bad value as one named line."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.conversation import ConversationPlan, parse_conversation
from anvil_metrics.load.options import scenario_flags
from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict, scenario_with_flags

BASE = {"measurement_protocol": "t", "max_tokens": 100, "max_context_tokens": 8192,
        "requests": 16}


def plan(**table) -> ConversationPlan:
    out = parse_conversation({"turns": 4, "turn_tokens": 200, **table}, "s.toml")
    assert out is not None
    return out


def test_a_conversation_draws_the_same_whatever_runs_it_and_in_what_order() -> None:
    p = plan(turns={"dist": "uniform", "min": 2, "max": 9},
             think_time={"dist": "exponential", "mean": 2.0})
    forward = [p.draws(i) for i in range(50)]
    backward = [p.draws(i) for i in reversed(range(50))][::-1]
    assert forward == backward
    assert [d.index for d in forward] == list(range(50))
    assert all(len(d.think_s) == d.turns - 1 for d in forward)
    assert len({d.turns for d in forward}) > 3  # drawn, not one value
    other = plan(turns={"dist": "uniform", "min": 2, "max": 9},
                 think_time={"dist": "exponential", "mean": 2.0}, seed=1)
    assert [other.draws(i) for i in range(50)] != forward  # the seed is the draws' seed


def test_a_fixed_count_and_no_think_time() -> None:
    d = plan().draws(3)
    assert (d.turns, d.think_s) == (4, (0.0, 0.0, 0.0))


N = 4_000  # draws per distribution: 5 standard deviations still part a wrong one


def _binomial_ok(count: int, n: int, p: float) -> bool:
    """Within 5 standard deviations of n*p: a wrong distribution is far outside."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_uniform_turns_are_every_whole_number_equally_likely() -> None:
    p = plan(turns={"dist": "uniform", "min": 2, "max": 6})
    counts = Counter(p.draws(i).turns for i in range(N))
    assert sorted(counts) == [2, 3, 4, 5, 6]
    assert all(_binomial_ok(c, N, 1 / 5) for c in counts.values()), counts


def test_zipf_turns_follow_k_to_the_minus_alpha_capped_at_max() -> None:
    p = plan(turns={"dist": "zipf", "alpha": 2.0, "max": 5})
    counts = Counter(p.draws(i).turns for i in range(N))
    assert max(counts) == 5 and min(counts) == 1
    zeta2 = math.pi ** 2 / 6
    for k in (1, 2, 3, 4):
        assert _binomial_ok(counts[k], N, k ** -2 / zeta2), (k, counts)


@pytest.mark.parametrize("think", [{"dist": "exponential", "mean": 2.0},
                                   {"dist": "lognormal", "mean": 2.0, "sigma": 0.6}])
def test_think_times_have_the_mean_they_are_given(think: dict) -> None:
    p = plan(turns=2, think_time=think)
    values = np.array([p.draws(i).think_s[0] for i in range(N)])
    sd = values.std()
    assert abs(values.mean() - 2.0) <= 5 * sd / math.sqrt(N), (values.mean(), sd)
    assert (values >= 0).all()


def test_lognormal_turns_have_their_mean_as_whole_numbers_capped() -> None:
    p = plan(turns={"dist": "lognormal", "mean": 4.0, "sigma": 0.3, "max": 50})
    turns = np.array([p.draws(i).turns for i in range(N)])
    assert turns.min() >= 1 and turns.max() <= 50
    assert abs(turns.mean() - 4.0) < 0.1  # rounding moves the mean by far less


def test_the_plan_reads_back_from_the_scenario_it_writes() -> None:
    sc = scenario_from_dict({**BASE, "conversation": {
        "turns": {"dist": "zipf", "alpha": 1.5, "max": 6}, "turn_tokens": 300,
        "system_prompt_tokens": 512, "prefix_tokens": 64, "history": "fixed",
        "think_time": {"dist": "lognormal", "mean": 1.5, "sigma": 0.4, "max": 20},
        "session_header": "", "seed": 9}})
    assert sc.conversation is not None and sc.conversation.session_header is None
    again = scenario_from_dict(scenario_to_dict(sc))
    assert again.conversation == sc.conversation
    assert again == sc


def test_no_conversation_table_is_single_turn() -> None:
    assert scenario_from_dict(BASE).conversation is None
    assert parse_conversation({}, None) is None


BAD = [
    ({"turns": 0}, "conversation.turns = 0", "a whole number >= 1"),
    ({"turns": 2.5}, "conversation.turns = 2.5", "a whole number >= 1"),
    ({"turns": "four"}, "conversation.turns = 'four'", "a distribution"),
    ({"turns": {"dist": "normal"}}, "conversation.turns.dist = 'normal'", "'uniform'"),
    ({"turns": {"dist": "exponential", "mean": 3}}, "conversation.turns.dist", "'zipf'"),
    ({"turns": {"dist": "zipf", "alpha": 2.0}}, "conversation.turns.max = None",
     "required for dist = 'zipf'"),
    ({"turns": {"dist": "zipf", "alpha": 1.0, "max": 4}}, "conversation.turns.alpha = 1.0",
     "a number > 1"),
    ({"turns": {"dist": "uniform", "min": 5, "max": 2}}, "conversation.turns.min = 5",
     "at most max (2)"),
    ({"turns": {"dist": "uniform", "min": 2, "max": 4, "mean": 3}},
     "conversation.turns.mean = 3", "one of the keys"),
    ({"think_time": -1}, "conversation.think_time = -1", "seconds >= 0"),
    ({"think_time": {"dist": "zipf", "alpha": 2}}, "conversation.think_time.dist = 'zipf'",
     "'exponential'"),
    ({"think_time": {"dist": "lognormal", "mean": 2}}, "conversation.think_time.sigma = None",
     "required for dist = 'lognormal'"),
    ({"history": "client"}, "conversation.history = 'client'", "['server', 'fixed']"),
    ({"session_header": "X Session"}, "conversation.session_header = 'X Session'",
     "an HTTP header name"),
    ({"turn_tokens": 0}, "conversation.turn_tokens = 0", "a whole number >= 1"),
    ({"prefix_tokens": -5}, "conversation.prefix_tokens = -5", "a whole number >= 0"),
    ({"seed": True}, "conversation.seed = True", "a whole number >= 0"),
    ({"rounds": 3}, "conversation.rounds = 3", "one of the keys"),
]


@pytest.mark.parametrize("change,named,allowed", BAD)
def test_each_bad_value_is_one_line_naming_it(change: dict, named: str, allowed: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict({**BASE, "conversation": {"turns": 4, "turn_tokens": 200,
                                                     **change}}, source="s.toml")
    text = str(e.value)
    assert text.startswith(f"s.toml: {named}"), text
    assert allowed in text and "\n" not in text
    assert e.value.exit_code == 2


@pytest.mark.parametrize("extra,named", [
    ({"context_distribution": {"1000": 2}}, "context_distribution"),
    ({"serve_flags": {"shared_prefix_burst": True}, "shared_prefix": {"prefix_tokens": 100}},
     "serve_flags.shared_prefix_burst"),
])
def test_what_a_conversation_cannot_go_with(extra: dict, named: str) -> None:
    with pytest.raises(ScenarioError, match=f"^s.toml: {named} "):
        scenario_from_dict({**BASE, **extra, "conversation": {"turns": 4, "turn_tokens": 200}},
                           source="s.toml")


def test_the_longest_conversation_must_fit_the_context() -> None:
    table = {"turns": {"dist": "uniform", "min": 1, "max": 8}, "turn_tokens": 900,
             "system_prompt_tokens": 100}
    # 100 + 8 x (900 + 100) = 8100 fits 8192; 8 x (950 + 100) + 100 = 8500 does not
    sc = scenario_from_dict({**BASE, "conversation": table})
    assert sc.conversation is not None and sc.conversation.longest_tokens(100) == 8100
    with pytest.raises(ScenarioError, match=r"conversation.turn_tokens = 950 .*= 8500"):
        scenario_from_dict({**BASE, "conversation": {**table, "turn_tokens": 950}})
    with pytest.raises(UsageError, match="--max-tokens '200' .* 8900 tokens"):
        scenario_with_flags(scenario_to_dict(sc), scenario_flags({"max_tokens": "200"}), None)


def test_a_distribution_in_the_flag_is_the_table_the_file_would_hold() -> None:
    from anvil_metrics.load.conversation import dist_from_text
    from anvil_metrics.load.scenario import read_scenario

    assert dist_from_text("uniform:2:6") == {"dist": "uniform", "min": 2, "max": 6}
    assert dist_from_text("lognormal:4:0.5:12") == {"dist": "lognormal", "mean": 4,
                                                    "sigma": 0.5, "max": 12}
    assert dist_from_text("exponential:2.5") == {"dist": "exponential", "mean": 2.5}
    for left_as_is in ("uniform:2", "zipf:1:2:3", "bogus:1", "server", "uniform"):
        assert dist_from_text(left_as_is) == left_as_is
    flagged = scenario_with_flags(read_scenario("scenarios/smoke.toml"), scenario_flags(
        {"conversation": "turns=uniform:2:6,turn_tokens=64,think_time=exponential:0.5"}), None)
    table = scenario_from_dict({"measurement_protocol": "x", "max_tokens": 8, "conversation": {
        "turns": {"dist": "uniform", "min": 2, "max": 6}, "turn_tokens": 64,
        "think_time": {"dist": "exponential", "mean": 0.5}}})
    assert flagged.conversation is not None and table.conversation is not None
    assert [flagged.conversation.draws(k) for k in range(20)] == [
        table.conversation.draws(k) for k in range(20)]
