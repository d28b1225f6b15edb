"""The ``--fault`` grammar and the picker (`sim/faults.py`): specs parsed into rules, each bad
spec refused in one line that names it, and which request gets which fault, by index, by
model and by a seeded draw (the draws checked against the same `random.Random` by hand)."""

from __future__ import annotations

import random

import pytest

from anvil_metrics.sim.faults import ALLOWED, Fault, FaultPicker, FaultRule, parse_rule


def test_indices_rates_and_models_parse() -> None:
    assert parse_rule("http503@0,2") == FaultRule(
        Fault("http503"), indices=frozenset({0, 2}), spec="http503@0,2")
    assert parse_rule("http429=2@1") == FaultRule(
        Fault("http429", 2.0), indices=frozenset({1}), spec="http429=2@1")
    rule = parse_rule("stall_first_byte=0.5%0.25")
    assert (rule.fault, rule.rate, rule.indices) == (Fault("stall_first_byte", 0.5), 0.25,
                                                     frozenset())
    routed = parse_rule("http503@llm.primary:0")
    assert (routed.model, routed.indices) == ("llm.primary", frozenset({0}))
    assert parse_rule("no_done%1").rate == 1.0 and parse_rule("no_done%0").rate == 0.0


def test_fault_arguments_in_units() -> None:
    assert Fault("stall_mid_stream", 0.25).ns == 250_000_000
    assert Fault("reset_mid_stream", 3.0).count == 3
    assert Fault("no_usage").count == 0 and Fault("no_usage").ns == 0


@pytest.mark.parametrize(("spec", "why"), [
    ("http503", "give exactly one of @INDICES or %RATE"),
    ("http503@1%0.5", "give exactly one of @INDICES or %RATE"),
    ("bogus@1", "unknown kind 'bogus'"),
    ("http500=1@0", "http500 takes no argument"),
    ("http429@0", "http429 needs =SECONDS"),
    ("http429=1.5@0", "SECONDS of http429 must be an integer, got '1.5'"),
    ("reset_mid_stream=x@0", "K of reset_mid_stream must be an integer, got 'x'"),
    ("stall_first_byte=-1@0", "SECONDS of stall_first_byte must be >= 0, got '-1'"),
    ("stall_first_byte=inf@0", "SECONDS of stall_first_byte must be >= 0, got 'inf'"),
    ("http503@:0", "MODEL before ':' must not be empty"),
    ("http503@1,,2", "indices must be integers >= 0 separated by commas, got '1,,2'"),
    ("http503@-1", "indices must be integers >= 0 separated by commas, got '-1'"),
    ("http503%1.5", "rate must be a number in 0..1, got '1.5'"),
    ("http503%half", "rate must be a number in 0..1, got 'half'"),
])
def test_bad_specs_are_one_line_naming_the_spec(spec: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rule(spec)
    assert str(info.value) == f"bad fault spec {spec!r}: {why}; {ALLOWED}"
    assert "\n" not in str(info.value)


def test_the_first_matching_rule_wins_by_index() -> None:
    picker = FaultPicker([parse_rule("http500@1"), parse_rule("http503@0,1")])
    assert [picker.pick() for _ in range(3)] == [Fault("http503"), Fault("http500"), None]
    assert picker.index == 3 and not picker.needs_model


def test_model_rules_count_that_models_requests_only() -> None:
    picker = FaultPicker([parse_rule("http503@m:1")])
    assert picker.needs_model
    got = [picker.pick(m) for m in ("m", "other", "other", "m", "m", None)]
    assert got == [None, None, None, Fault("http503"), None, None]


def test_every_rate_rule_draws_once_per_request() -> None:
    rules = [parse_rule("http500@0"), parse_rule("http503%0.5"), parse_rule("no_usage%0.5")]
    picker = FaultPicker(rules, seed=7)
    rng = random.Random(7)
    want = []
    for i in range(40):
        a, b = rng.random() < 0.5, rng.random() < 0.5  # both drawn, whatever matched first
        want.append(Fault("http500") if i == 0 else Fault("http503") if a
                    else Fault("no_usage") if b else None)
    assert [picker.pick() for _ in range(40)] == want
    assert len(set(map(str, want))) == 4  # all four outcomes occur: the test can tell them apart
