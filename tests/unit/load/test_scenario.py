"""Scenario loading: the shipped scenarios load; each bad field is named with its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.scenario import load_scenario, scenario_from_dict, with_overrides

REPO = Path(__file__).resolve().parents[3]


def test_shipped_scenarios_load() -> None:
    cap = load_scenario(REPO / "scenarios" / "capacity-v4-reasoning.toml")
    assert cap.context_tokens == 32768 and cap.max_context_tokens == 32768
    assert cap.context_distribution == {30720: 12}
    assert cap.requests == 12 and cap.concurrency == 1 and cap.max_tokens == 1024
    assert cap.serve_flags() == {"no_thinking": False, "reasoning_effort": "low",
                                 "shared_prefix_burst": False, "thinking_mode": "default"}
    smoke = load_scenario(REPO / "scenarios" / "smoke.toml")
    assert smoke.requests == 24 and smoke.warmup_requests == 2


BASE = {"measurement_protocol": "t", "max_tokens": 100, "max_context_tokens": 1000}


def test_override_max_tokens_rechecks_context() -> None:
    sc = scenario_from_dict({**BASE, "context_distribution": {"800": 2}})
    assert with_overrides(sc, max_tokens=200).max_tokens == 200
    with pytest.raises(UsageError, match="--max-tokens 300"):
        with_overrides(sc, max_tokens=300)


def test_distribution_order_and_default_requests() -> None:
    sc = scenario_from_dict({**BASE, "context_distribution": {"100": 2, "200": 1}})
    assert sc.requests == 3
    assert sorted(sc.planned_sizes()) == [100, 100, 200]
    assert sc.planned_sizes() == sc.planned_sizes()  # seeded: the same every time
    many = scenario_from_dict({**BASE, "context_distribution": {"100": 12, "200": 12}})
    assert set(many.planned_sizes()[:6]) == {100, 200}  # a short run still mixes sizes


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("measurement_protocol = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_scenario(p)
    with pytest.raises(UsageError, match="does not exist"):
        load_scenario(tmp_path / "nope.toml")


def test_shared_prefix_table() -> None:
    base = {"measurement_protocol": "t", "max_tokens": 16, "max_context_tokens": 9000,
            "concurrency": 4, "context_distribution": {"4096": 4, "8192": 4}}
    sc = scenario_from_dict({**base, "serve_flags": {"shared_prefix_burst": True},
                             "shared_prefix": {"prefix_tokens": 3000}})
    assert sc.shared_prefix() == {"prefix_tokens": 3000, "group_size": 4}  # concurrency
    sc = scenario_from_dict({**base, "serve_flags": {"shared_prefix_burst": True},
                             "shared_prefix": {"prefix_tokens": 3000, "group_size": 2}})
    assert sc.shared_prefix() == {"prefix_tokens": 3000, "group_size": 2}
    assert scenario_from_dict(base).shared_prefix() is None
    bad = [
        ({"serve_flags": {"shared_prefix_burst": True}}, "shared_prefix.prefix_tokens"),
        ({"shared_prefix": {"prefix_tokens": 10}}, "shared_prefix"),
        ({"serve_flags": {"shared_prefix_burst": True},
          "shared_prefix": {"prefix_tokens": 4090}}, "shared_prefix.prefix_tokens"),
        ({"serve_flags": {"shared_prefix_burst": True},
          "shared_prefix": {"prefix_tokens": 100, "group_size": 0}}, "shared_prefix.group_size"),
        ({"serve_flags": {"shared_prefix_burst": True},
          "shared_prefix": {"prefix_tokens": 100, "group_size": 10_000}},
         "shared_prefix.group_size"),
        ({"serve_flags": {"shared_prefix_burst": True},
          "shared_prefix": {"prefix_tokens": 100, "size": 3}}, "shared_prefix.size"),
    ]
    for extra, field in bad:
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict({**base, **extra})
        assert e.value.field == field, (extra, e.value.field)
        assert "\n" not in str(e.value)


def test_the_conversation_flag_goes_over_the_scenarios_table_and_is_checked() -> None:
    from anvil_metrics.load.scenario import load_scenario, with_conversation

    sc = load_scenario("scenarios/conversation.toml")
    new = with_conversation(sc, {"turns": 3, "think_time": 0.5})
    assert new.conversation.turns.to_json() == 3 and new.conversation.turn_tokens == 256
    assert new.conversation.think_time.to_json() == 0.5 and new.requests == sc.requests
    counted = with_conversation(sc, {"conversations": 6})  # a budget of conversations
    assert (counted.requests, counted.conversation.conversations) == (None, 6)
    assert counted.load_mode == "budget"
    from anvil_metrics.load.scenario import scenario_from_dict

    plain = with_conversation(scenario_from_dict({"measurement_protocol": "p"}),
                              {"turns": 2, "turn_tokens": 64})  # a new table
    assert plain.conversation.max_turns == 2
    with pytest.raises(UsageError) as e:
        with_conversation(sc, {"turns": 0})
    assert str(e.value).startswith("--conversation turns=0: conversation.turns = 0 is not "
                                   "allowed") and e.value.exit_code == 2
