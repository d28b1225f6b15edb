"""Is a model's JSON the value a question fixes? One rule for every suite that asks.

Why one: the `json` suite compares a structured answer with the value its question fixes,
the tool suites compare a call's arguments with the ones the user gave. Both are the same
walk, and two copies of it drifted apart on the way a string, a number or a path is read;
here the walk is written once, and what the suites differ in is data (`Rules`).

The rules of `mismatch(expected, got, rules)`:

    {...}           an object, key by key; a key `expected` does not name is ignored (the
                    schema, not this rule, says whether it may be there); one it names must
                    be there
    [...]           a list of the same length, item by item, in order
    "Paris"         a string, compared after `rules.text` on both sides: case and surrounding
                    space never count (`trimmed_text`); with `loose_text` neither do runs of
                    inner space nor a final ".!?"
    3, 21.5         a number: with `rules.numbers_by_value`, by value (3.0 is 3, close floats
                    are equal); without, of the same JSON type too (30 where an integer was
                    asked, never 30.0); never a string "3" nor a boolean
    true, null      exactly (true is not 1)
    Exact("USD")    a string compared as is (enum values, ids, dates)
    AnyOf((a, b))   any one of the alternatives (a model may write "09:30" or "09:30:00")
    Unordered(..)   a list of that length matching the items in some order (recipients, ids)

The verdict is data, `Mismatch` (where, what kind of fault, the expected value there and
the answer's), or None; each suite words it (`jsonmode.value_problem`,
`tools.argument_problem`), so checks.json keeps each suite's messages.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Exact:
    value: str


@dataclass(frozen=True, slots=True)
class AnyOf:
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Unordered:
    items: tuple[Any, ...]


def trimmed_text(text: str) -> str:
    """A string as the `json` suite compares it: case-folded, surrounding space dropped."""
    return text.strip().casefold()


def loose_text(text: str) -> str:
    """A string as the tool suites compare it: case-folded, whitespace collapsed, a final
    ".!?" dropped."""
    return " ".join(text.casefold().split()).rstrip(".!?").rstrip()


@dataclass(frozen=True, slots=True)
class Rules:
    """How strings and numbers compare (the module docstring)."""

    text: Callable[[str], str]
    numbers_by_value: bool


VALUES = Rules(trimmed_text, numbers_by_value=False)  # the json suite: the value asked for
ARGUMENTS = Rules(loose_text, numbers_by_value=True)  # a tool call's arguments

# what a Mismatch can say: a key missing; the answer not an object; not a list of the
# expected length; a string or number of another JSON type; none of the alternatives; no
# order of the list matches; a value that differs
KINDS = ("missing", "not_object", "not_list", "wrong_type", "none_of", "no_order", "differs")


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first place where the answer is not the expected value."""

    path: tuple[str | int, ...]  # object keys and list indices from the top
    kind: str  # one of KINDS
    expected: Any  # the expected value (or Exact / AnyOf / Unordered) at `path`
    got: Any  # the answer's value there (None for "missing")


def mismatch(expected: Any, got: Any, rules: Rules,
             path: tuple[str | int, ...] = ()) -> Mismatch | None:
    """None when `got` is `expected` by `rules`, else the first place it is not."""
    def fault(kind: str) -> Mismatch:
        return Mismatch(path, kind, expected, got)

    if isinstance(expected, AnyOf):
        ok = any(mismatch(e, got, rules, path) is None for e in expected.values)
        return None if ok else fault("none_of")
    if isinstance(expected, Exact):
        return None if got == expected.value else fault("differs")
    if isinstance(expected, Unordered):
        return _unordered(expected, got, rules, path)
    if isinstance(expected, bool) or expected is None:
        return None if got is expected else fault("differs")
    if _is_number(expected):
        if not (_is_number(got) if rules.numbers_by_value else type(got) is type(expected)):
            return fault("wrong_type")
        same = math.isclose(got, expected) if rules.numbers_by_value else got == expected
        return None if same else fault("differs")
    if isinstance(expected, str):
        if not isinstance(got, str):
            return fault("wrong_type")
        return None if rules.text(got) == rules.text(expected) else fault("differs")
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return fault("not_object")
        for key, want in expected.items():
            if key not in got:
                return Mismatch((*path, key), "missing", want, None)
            found = mismatch(want, got[key], rules, (*path, key))
            if found:
                return found
        return None
    if isinstance(expected, list | tuple):
        if not isinstance(got, list) or len(got) != len(expected):
            return fault("not_list")
        for i, (want, item) in enumerate(zip(expected, got, strict=True)):
            found = mismatch(want, item, rules, (*path, i))
            if found:
                return found
        return None
    return None if type(got) is type(expected) and got == expected else fault("differs")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unordered(expected: Unordered, got: Any, rules: Rules,
               path: tuple[str | int, ...]) -> Mismatch | None:
    if not isinstance(got, list) or len(got) != len(expected.items):
        return Mismatch(path, "not_list", expected, got)
    for order in itertools.permutations(got):
        if all(mismatch(e, v, rules, path) is None
               for e, v in zip(expected.items, order, strict=True)):
            return None
    return Mismatch(path, "no_order", expected, got)
