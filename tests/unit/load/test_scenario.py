"""Scenario loading: the shipped scenarios load; each bad field is named with its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.options import scenario_flags
from anvil_metrics.load.scenario import (
    Scenario,
    load_scenario,
    read_scenario,
    scenario_from_dict,
    scenario_with_flags,
)

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


def flagged(doc: dict, **values: object) -> Scenario:
    """`doc` with the flags `values` (dest -> text, as Locust's form gives them) over it."""
    return scenario_with_flags(doc, scenario_flags(values), "t.toml")


def test_a_flag_over_the_file_is_checked_with_it_and_named() -> None:
    doc = {**BASE, "context_distribution": {"800": 2}}
    assert flagged(doc, max_tokens="200").max_tokens == 200
    with pytest.raises(UsageError) as e:
        flagged(doc, max_tokens="300")
    assert str(e.value) == (
        "--max-tokens '300' with t.toml: context_distribution.800 = 2 is not allowed; use "
        "planned sizes with size + max_tokens (300) <= max_context_tokens (1000); "
        "800 + 300 = 1100 (max_tokens at most 200)")
    # the flag's own key: the flag is its source
    with pytest.raises(UsageError, match=r"^--rate '5': rate = 5.0 is not allowed; use no "
                                         r"rate with serve_flags.shared_prefix_burst"):
        flagged({**doc, "serve_flags": {"shared_prefix_burst": True},
                 "shared_prefix": {"prefix_tokens": 64}}, rate="5")
    # a key the flag needs beside it, named with the flag that gives it
    with pytest.raises(UsageError, match=r"^--cancel-rate '0.2' needs cancel.after "
                                         r"\(--cancel-after\) too: prefill, decode"):
        flagged(doc, cancel_rate="0.2")
    # the file's own mistake stays the file's, whatever flags are beside it
    with pytest.raises(ScenarioError, match=r"^t.toml: concurrency = 0 is not allowed"):
        flagged({**doc, "concurrency": 0}, max_tokens="200")


def test_a_flag_wins_over_the_keys_of_the_file_it_replaces() -> None:
    doc = {**BASE, "requests": 9, "rate": 4.0, "arrival": "gamma", "burstiness": 0.5}
    timed = flagged(doc, duration="5s")  # a duration run: the file's budget goes
    assert (timed.requests, timed.duration_s, timed.load_mode) == (None, 5.0, "duration")
    both = flagged(doc, duration="5s", requests="3")  # both flags: a budget, a time limit
    assert (both.requests, both.duration_s, both.load_mode) == (3, 5.0, "budget")
    swept = flagged(doc, rates="1,3", step_duration="2s")  # the file's rate and budget go
    assert (swept.requests, swept.step_rates, swept.duration_s) == (None, (1.0, 3.0), 4.0)
    assert (swept.arrivals.rate_rps, swept.arrivals.arrival) == (2.0, "gamma")
    # an arrival that says what the file says keeps the file's burstiness; another drops it
    assert flagged(doc, arrival="gamma").arrivals.burstiness == 0.5
    assert flagged(doc, arrival="constant").arrivals.burstiness == 1.0
    with pytest.raises(UsageError, match=r"^--requests '3': requests = 3 is not allowed; "
                                         r"use no request count or duration with steps"):
        flagged(doc, steps="1,2", step_duration="2s", requests="3")


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
    doc = read_scenario("scenarios/conversation.toml")
    sc = scenario_from_dict(doc)
    new = flagged(doc, conversation="turns=3,think_time=0.5")
    assert new.conversation.turns.to_json() == 3 and new.conversation.turn_tokens == 256
    assert new.conversation.think_time.to_json() == 0.5 and new.requests == sc.requests
    counted = flagged(doc, conversation="conversations=6")  # a budget of conversations
    assert (counted.requests, counted.conversation.conversations) == (None, 6)
    assert counted.load_mode == "budget"
    plain = flagged({"measurement_protocol": "p"}, conversation="turns=2,turn_tokens=64")
    assert plain.conversation.max_turns == 2  # a new table
    smoke = flagged(read_scenario("scenarios/smoke.toml"), conversation="turns=2,turn_tokens=64")
    assert smoke.conversation.max_turns == 2  # the file's distribution goes
    with pytest.raises(UsageError) as e:
        flagged(doc, conversation="turns=0")
    assert str(e.value).startswith("--conversation 'turns=0': conversation.turns = 0 is not "
                                   "allowed; use") and e.value.exit_code == 2
