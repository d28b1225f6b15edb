"""jsonmatch: the one rule by which the json and tools suites compare an answer with the
value asked for — both rule sets (`VALUES`, `ARGUMENTS`), every wrapper, and where and what
a mismatch reports. (The suites' wording of it: `test_jsonmode.py`, `test_tools.py`; that
it gives the verdicts and messages of the two matchers it replaced: `test_jsonmatch_parity`.)
"""

from __future__ import annotations

from typing import Any

import pytest

from anvil_metrics.checks.jsonmatch import (
    ARGUMENTS,
    KINDS,
    VALUES,
    AnyOf,
    Exact,
    Mismatch,
    Unordered,
    loose_text,
    mismatch,
    trimmed_text,
)


def test_the_two_ways_of_reading_a_string() -> None:
    assert trimmed_text("  Alice \n") == trimmed_text("ALICE") == "alice"
    assert trimmed_text("New  York.") == "new  york."
    assert loose_text("  See you   at NOON. ") == "see you at noon"
    assert loose_text("Paid today!") == loose_text("paid today")


# (expected, answer, matches by VALUES, matches by ARGUMENTS)
CASES: list[tuple[Any, Any, bool, bool]] = [
    ("Paris", "paris ", True, True),
    ("Paris", " PARIS", True, True),
    ("Paris", "Paris.", False, True),
    ("See you at noon", "see  you at noon", False, True),
    ("Paris", "Pariss", False, False),
    ("Paris", 1, False, False),
    (3, 3, True, True),
    (3, 3.0, False, True),
    (30.0, 30, False, True),
    (21.5, 21.5 + 1e-12, False, True),
    (21.5, 22, False, False),
    (3, "3", False, False),
    (1, True, False, False),
    (True, True, True, True),
    (True, 1, False, False),
    (True, "true", False, False),
    (False, 0, False, False),
    (None, None, True, True),
    (None, 0, False, False),
    (["a@x.org"], ["A@x.org"], True, True),
    (["a", "b"], ["b", "a"], False, False),
    (["a", "b"], ["a"], False, False),
    ({"a": [1, 2]}, {"a": [1, 2], "b": 0}, True, True),
    ({"a": 1}, {"b": 1}, False, False),
    ({"a": 1}, [1], False, False),
    (Exact("USD"), "usd", False, False),
    (Exact("USD"), "USD", True, True),
    (AnyOf(("09:30", "09:30:00")), "09:30:00", True, True),
    (AnyOf(("09:30", "09:30:00")), "9.30", False, False),
    (Unordered((1, 2, 7)), [7, 1, 2], True, True),
    (Unordered((1, 2, 7)), [7, 1], False, False),
    (Unordered((1, 2, 7)), [7, 1, "2"], False, False),
    (Unordered(("a@x", AnyOf(("b@x", "c@x")))), ["C@X", "a@x"], True, True),
    ({"date": Exact("2025-03-14")}, {"date": "2025-03-14", "tz": "x"}, True, True),
    ({"date": Exact("2025-03-14")}, {"time": "09:30"}, False, False),
    ({"date": Exact("2025-03-14")}, "2025-03-14", False, False),
]


@pytest.mark.parametrize("expected, got, by_value, by_argument", CASES)
def test_verdicts_under_both_rule_sets(expected: Any, got: Any, by_value: bool,
                                       by_argument: bool) -> None:
    assert (mismatch(expected, got, VALUES) is None) is by_value
    assert (mismatch(expected, got, ARGUMENTS) is None) is by_argument


@pytest.mark.parametrize("expected, got, want", [
    ({"a": {"b": 1}}, {"a": {}}, Mismatch(("a", "b"), "missing", 1, None)),
    ({"a": {"b": 1}}, {"a": 5}, Mismatch(("a",), "not_object", {"b": 1}, 5)),
    ({"a": [1, 2]}, {"a": [1]}, Mismatch(("a",), "not_list", [1, 2], [1])),
    ({"a": [1, 2]}, {"a": [1, "2"]}, Mismatch(("a", 1), "wrong_type", 2, "2")),
    ([{"x": "Ab"}], [{"x": "b"}], Mismatch((0, "x"), "differs", "Ab", "b")),
    (AnyOf(("a", "b")), "c", Mismatch((), "none_of", AnyOf(("a", "b")), "c")),
    (Unordered((1, 2)), [1, 3], Mismatch((), "no_order", Unordered((1, 2)), [1, 3])),
    (Unordered((1, 2)), {"a": 1}, Mismatch((), "not_list", Unordered((1, 2)), {"a": 1})),
])
def test_a_mismatch_says_where_what_and_both_values(expected: Any, got: Any,
                                                     want: Mismatch) -> None:
    assert mismatch(expected, got, ARGUMENTS) == want
    assert want.kind in KINDS


def test_the_first_mismatch_in_document_order_is_the_one_reported() -> None:
    expected = {"a": 1, "b": [1, 2], "c": "x"}
    found = mismatch(expected, {"a": 1, "b": [1, 3], "c": "y"}, VALUES)
    assert found is not None and found.path == ("b", 1)
    assert mismatch(expected, {"c": "y"}, VALUES).path == ("a",)


def test_an_integer_where_a_whole_number_was_asked_is_a_type_fault_only_by_value() -> None:
    assert mismatch(30, 30.0, VALUES).kind == "wrong_type"
    assert mismatch(30, 31, VALUES).kind == "differs"
    assert mismatch(30, 31.0, ARGUMENTS).kind == "differs"
    assert mismatch(30, "30", ARGUMENTS).kind == "wrong_type"
