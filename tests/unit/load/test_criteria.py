"""criteria: `NAME OP NUMBER` texts parsed into criteria, and refused — naming the flag, the
bad part and what is allowed — when a field, an operator or a number is wrong; a capacity
SLO's bounds read the same way.

Why: criteria are checked when a run is asked for, long before any row exists; a text
that parses to something else than the user wrote (`<` taken as `<=`, a field silently
dropped) would count goodput against a rule nobody set.
"""

from __future__ import annotations

from typing import Any

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.load.criteria import NUMERIC, parse_bounds, parse_criteria


@pytest.mark.parametrize(("text", "want"), [
    ("ttft_ms<=2000", [("ttft_ms", "<=", 2000.0)]),
    (" ttft_ms <= 2000 , e2e_ms>1.5", [("ttft_ms", "<=", 2000.0), ("e2e_ms", ">", 1.5)]),
    ("decode_tok_s>=20,mean_inter_token_latency_ms<50",
     [("decode_tok_s", ">=", 20.0), ("mean_inter_token_latency_ms", "<", 50.0)]),
    ("output_tokens>=1e2", [("output_tokens", ">=", 100.0)]),
    ("ttft_ms<=2000,,", [("ttft_ms", "<=", 2000.0)]),  # empty parts are skipped
    (["ttft_ms<=1", "e2e_ms<=2,output_tokens>3"],
     [("ttft_ms", "<=", 1.0), ("e2e_ms", "<=", 2.0), ("output_tokens", ">", 3.0)]),
])
def test_parse_criteria_reads_good_texts(text: Any, want: list[tuple[str, str, float]]) -> None:
    got = parse_criteria(text)
    assert [(c.field, c.op, c.limit) for c in got] == want
    assert all(type(c.limit) is float for c in got)


def test_criterion_text_round_trips() -> None:
    crit = parse_criteria("ttft_ms<=2000,decode_tok_s>12.5")
    assert [c.text() for c in crit] == ["ttft_ms<=2000", "decode_tok_s>12.5"]
    assert parse_criteria([c.text() for c in crit]) == crit


@pytest.mark.parametrize(("text", "says"), [
    ("nope_ms<=5", "'nope_ms' is not a numeric field"),  # unknown field
    ("output_token_source<=5", "is not a numeric field"),  # a text field
    ("request_index<=5", "is not a numeric field"),  # an index, not a measure
    ("ttft_ms=<5", "is not allowed"),  # bad op
    ("ttft_ms==5", "is not allowed"),
    ("ttft_ms!=5", "is not allowed"),
    ("ttft_ms<=", "is not allowed"),  # no number
    ("ttft_ms<=fast", "is not allowed"),
    ("ttft_ms<=1.2.3", "'1.2.3' is not a number"),
    ("<=5", "is not allowed"),
    ("", "has nothing to check"),  # empty
    (" , ", "has nothing to check"),
])
def test_parse_criteria_refuses_bad_texts_naming_the_flag(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_criteria(text)
    assert str(e.value).startswith("--goodput ")
    assert says in str(e.value)
    with pytest.raises(UsageError) as e:
        parse_criteria(text, flag="goodput.criteria")
    assert str(e.value).startswith("goodput.criteria ")


def test_unknown_field_message_lists_the_allowed_fields() -> None:
    with pytest.raises(UsageError) as e:
        parse_criteria("ttft<=5")
    assert "ttft_ms" in str(e.value) and "e2e_ms" in str(e.value)


def test_parse_bounds_keeps_each_part_and_takes_any_name() -> None:
    assert parse_bounds(["ttft_p95_ms<=2000", " x>1 "], "--slo", "ttft_p95_ms<=2000") == [
        ("ttft_p95_ms", "<=", 2000.0, "ttft_p95_ms<=2000"), ("x", ">", 1.0, "x>1")]
    with pytest.raises(UsageError, match=r"^--slo 'a=1' is not allowed; .* e\.g\. b<=2$"):
        parse_bounds("a=1", "--slo", "b<=2")


def test_the_numeric_fields_are_measures_not_indices_or_texts() -> None:
    assert "ttft_ms" in NUMERIC and "output_tokens" in NUMERIC
    assert "request_index" not in NUMERIC and "output_token_source" not in NUMERIC
