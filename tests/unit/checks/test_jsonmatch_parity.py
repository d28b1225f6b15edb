"""jsonmatch against the two matchers it replaced: on answers near every expected value the
suites ask (`jsonmode.CASES`, `toolcases.TOOL_CASES` and the recovery cases' corrected calls),
the json suite's `value_problem` and the tools suites' `argument_problem` give the verdict
and the message the old `jsonmode.value_problem` and `tools.match_value` gave.

Why: checks.json carries these messages and a verdict is a pass or a fail a campaign acts
on; folding two rule sets into one must not move either. The answers are every change of
one place in a right answer (each leaf's look-alikes, each key dropped or added, each list
cut, grown, turned round or replaced), and random mixes of them. The old code is kept
here, word for word, as the oracle; drop this file when a rule is meant to change.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics.checks import jsonmode, tools
from anvil_metrics.checks.jsonmatch import AnyOf, Exact, Unordered
from anvil_metrics.checks.toolcases import RECOVERY_CASES, TOOL_CASES, concrete, spec_json

# -- the old matchers, as they were at 691e380 (the oracle) ------------------------------------


def old_value_problem(expected: Any, got: Any, where: str = "") -> str | None:
    """Where `got` differs from the value the question fixes, None when it does not.
    Strings compare without case and surrounding spaces; keys not in `expected` are
    ignored (the schema decides whether they may be there)."""
    here = where or "(top)"
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return f"{here}: expected an object"
        for key, want in expected.items():
            if key not in got:
                return f"{where}/{key}: missing"
            problem = old_value_problem(want, got[key], f"{where}/{key}")
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return (f"{here}: expected {orjson.dumps(expected).decode()}, got "
                    f"{orjson.dumps(got).decode()}")
        for i, (want, item) in enumerate(zip(expected, got, strict=True)):
            problem = old_value_problem(want, item, f"{where}/{i}")
            if problem:
                return problem
        return None
    if isinstance(expected, str):
        same = isinstance(got, str) and got.strip().casefold() == expected.casefold()
    else:
        same = type(got) is type(expected) and got == expected
    return None if same else f"{here}: expected {expected!r}, got {got!r}"


def _old_loose_text(text: str) -> str:
    """A string as compared by default: case-folded, whitespace collapsed, a final ".!?"
    dropped."""
    return " ".join(text.casefold().split()).rstrip(".!?").rstrip()


def _old_is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def old_match_value(spec: Any, value: Any, path: str) -> str | None:
    """None when `value` satisfies `spec` (see `toolcases` for the rules), else why not."""
    if isinstance(spec, AnyOf):
        if any(old_match_value(s, value, path) is None for s in spec.values):
            return None
        return f"{path}: {_show(value)} is none of {_show(spec_json(spec)['any_of'])}"
    if isinstance(spec, Exact):
        return None if value == spec.value else f"{path}: {_show(value)} != {_show(spec.value)}"
    if isinstance(spec, bool):
        return None if value is spec else f"{path}: {_show(value)} is not {_show(spec)}"
    if _old_is_number(spec):
        if not _old_is_number(value):
            return f"{path}: {_show(value)} is not a number ({spec} expected)"
        return None if math.isclose(value, spec) else f"{path}: {value} != {spec}"
    if isinstance(spec, str):
        if not isinstance(value, str):
            return f"{path}: {_show(value)} is not a string ({_show(spec)} expected)"
        if _old_loose_text(value) == _old_loose_text(spec):
            return None
        return f"{path}: {_show(value)} != {_show(spec)}"
    if isinstance(spec, Unordered):
        return _old_match_unordered(spec.items, value, path)
    if isinstance(spec, Mapping):
        if not isinstance(value, dict):
            return f"{path}: {_show(value)} is not an object"
        for key, sub in spec.items():
            if key not in value:
                return f"{path}.{key}: missing"
            why = old_match_value(sub, value[key], f"{path}.{key}")
            if why:
                return why
        return None
    if isinstance(spec, list | tuple):
        if not isinstance(value, list) or len(value) != len(spec):
            return f"{path}: {_show(value)} is not a list of {len(spec)}"
        for i, (sub, item) in enumerate(zip(spec, value, strict=True)):
            why = old_match_value(sub, item, f"{path}[{i}]")
            if why:
                return why
        return None
    return None if value == spec else f"{path}: {_show(value)} != {_show(spec)}"


def _old_match_unordered(items: Sequence[Any], value: Any, path: str) -> str | None:
    if not isinstance(value, list) or len(value) != len(items):
        return f"{path}: {_show(value)} is not a list of {len(items)} (any order)"
    for order in itertools.permutations(value):
        if all(old_match_value(s, v, path) is None for s, v in zip(items, order, strict=True)):
            return None
    return f"{path}: {_show(value)} is not {_show(spec_json(list(items)))} in any order"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


# -- the answers ----------------------------------------------------------------------------------


JSON_VALUES = {c.id: c.value for c in jsonmode.CASES}
ARGUMENTS = {f"{c.id}:{e.name}:{i}": dict(e.arguments)
             for c in TOOL_CASES for i, e in enumerate(c.calls)}
ARGUMENTS |= {c.id: dict(c.fixed.arguments) for c in RECOVERY_CASES if c.fixed}


def _texts(s: str) -> list[Any]:
    return [s, s.upper(), s.lower(), s.swapcase(), f"  {s} ", f"{s}.", f"{s}!", f"{s} ?",
            s.replace(" ", "   "), s.replace(" ", "\t"), s[:-1], f"{s}x", "", " ", 3, None,
            [s], {"v": s}]


def _numbers(n: float) -> list[Any]:
    return [n, float(n), int(n), n + 1, n - 0.5, n * (1 + 1e-12), -n, str(n), True, False,
            None, [n]]


def look_alikes(expected: Any) -> list[Any]:
    """Values a model might send where `expected` is asked (right ones among them)."""
    if isinstance(expected, AnyOf):
        return [v for alt in expected.values for v in look_alikes(alt)]
    if isinstance(expected, Exact):
        return _texts(expected.value)
    if isinstance(expected, Unordered):
        right = concrete(expected)
        return [right, right[::-1], right[1:], [*right, right[0]], right[:1] * len(right),
                "x", {"a": 1}]
    if isinstance(expected, bool):
        return [expected, not expected, int(expected), str(expected).lower(), None]
    if isinstance(expected, int | float):
        return _numbers(expected)
    if isinstance(expected, str):
        return _texts(expected)
    return [concrete(expected), None, "x", 0, [], {}]


def one_change(expected: Any) -> Iterator[Any]:
    """A right answer with one place changed, for every place and change."""
    right = concrete(expected)
    yield right
    if isinstance(expected, Mapping):
        for key, sub in expected.items():
            yield {k: v for k, v in right.items() if k != key}
            for changed in one_change(sub):
                yield {**right, key: changed}
        yield {**right, "extra": 1}
        yield list(right.values())
    elif isinstance(expected, list | tuple):
        for i, sub in enumerate(expected):
            for changed in one_change(sub):
                yield [*right[:i], changed, *right[i + 1:]]
        yield right[:-1]
        yield [*right, right[-1]] if right else [1]
        yield right[::-1]
        yield {"0": right}
    else:
        yield from look_alikes(expected)


def near(expected: Any) -> st.SearchStrategy[Any]:
    """Answers with any number of places changed."""
    if isinstance(expected, Mapping):
        # orjson reads a larger integer as a float, so an answer never holds one
        extra = st.integers(-(2**63), 2**63 - 1)
        full = st.fixed_dictionaries({k: near(v) for k, v in expected.items()},
                                     optional={"extra": extra})
        some = st.fixed_dictionaries({}, optional={k: near(v) for k, v in expected.items()})
        return st.one_of(full, some, st.sampled_from(look_alikes(expected)))
    if isinstance(expected, list | tuple) and not isinstance(expected, Unordered):
        items = st.tuples(*(near(v) for v in expected)).map(list)
        return st.one_of(items, items.map(lambda v: v[::-1]), items.map(lambda v: v[1:]),
                         st.sampled_from(look_alikes(expected)))
    return st.sampled_from(look_alikes(expected))


# made once: a strategy built inside a draw is validated and labelled anew each time
_JSON_EXPECTED = st.sampled_from(list(JSON_VALUES.values()))
_ARGUMENT_SPECS = st.sampled_from(list(ARGUMENTS.values()))
_NEAR: dict[int, tuple[Any, st.SearchStrategy[Any]]] = {}


def near_once(expected: Any) -> st.SearchStrategy[Any]:
    """`near(expected)`, made once for each expected value (the module's own objects, kept
    alive here with their strategy)."""
    made = _NEAR.get(id(expected))
    if made is None or made[0] is not expected:
        made = _NEAR[id(expected)] = (expected, near(expected))
    return made[1]


def _same_json(expected: Any, got: Any) -> None:
    assert jsonmode.value_problem(expected, got) == old_value_problem(expected, got), got


def _same_arguments(spec: Any, got: Any) -> None:
    assert tools.argument_problem(spec, got) == old_match_value(spec, got, "arguments"), got


@pytest.mark.parametrize("case", JSON_VALUES)
def test_json_suite_every_one_place_change(case: str) -> None:
    verdicts = set()
    for got in one_change(JSON_VALUES[case]):
        _same_json(JSON_VALUES[case], got)
        verdicts.add(old_value_problem(JSON_VALUES[case], got) is None)
    assert verdicts == {True, False}


@pytest.mark.parametrize("case", ARGUMENTS)
def test_tool_arguments_every_one_place_change(case: str) -> None:
    verdicts = set()
    for got in one_change(ARGUMENTS[case]):
        _same_arguments(ARGUMENTS[case], got)
        verdicts.add(old_match_value(ARGUMENTS[case], got, "arguments") is None)
    assert verdicts == {True, False}


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_json_suite_random_answers(data: st.DataObject) -> None:
    expected = data.draw(_JSON_EXPECTED)
    _same_json(expected, data.draw(near_once(expected)))


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_tool_arguments_random_answers(data: st.DataObject) -> None:
    spec = data.draw(_ARGUMENT_SPECS)
    _same_arguments(spec, data.draw(near_once(spec)))
