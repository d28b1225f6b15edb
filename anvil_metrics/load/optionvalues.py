"""What one value may be: the kinds of a scenario's keys and of anvil's flags, each checked
the same way whether a TOML file, a flag's text or Locust's form gave it.

Why one vocabulary: a scenario key and the flag that sets it are one value written two ways
(`max_tokens = 64` in a file, `--max-tokens 64` on a command line or in Locust's form). A
`Kind` says once what it may be: `allowed`, in the words every refusal uses; `accepts`, a
value as the file (or JSON) holds it; `read`, a flag's text as that same value. A Kind is
also a `Parse`, `kind(flag, text)`: the value, or one `UsageError` naming the flag, the text
and what is allowed. The scenario's table (`scenariofields.py`) and the options' table
(`options.py`) are written in these kinds; the other commands' flags (`cli/`) use them too.
What depends on other keys (a window inside the duration) is not a kind's: the scenario's
rules (`scenariorules.py`) check it, once, for files and flags alike.

Why not msgspec Structs (`fieldtypes.py`) here: a scenario's refusal is anvil's one line in
the table's order (`key = value is not allowed; use <allowed>`), a key's value also comes
from a flag's text, and half the keys are checked beside others; a Struct would state each
key a second time beside its row, and its errors be translated back into these words.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import UsageError

# `parse(flag, text)`: the typed value, or UsageError naming the flag, the text and what is
# allowed. It never sees an empty text on Locust's side (empty means "not set").
Parse = Callable[[str, str], Any]

NONCE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _refuse(flag: str, text: str, allowed: str) -> UsageError:
    return UsageError(f"{flag} {text!r} is not allowed; expected {allowed}")


def _same(text: str) -> Any:
    return text


def _number(v: Any) -> bool:
    """A finite JSON number (a TOML integer or float; never a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True, slots=True)
class Kind:
    """What one value may be: `allowed` in words; `accepts` a value as a file holds it;
    `read` a flag's text as that value (text that is not one is left for `accepts` to
    refuse); `written`: how a flag writes it, where that differs from the file (a list)."""

    allowed: str
    accepts: Callable[[Any], bool]
    read: Callable[[str], Any] = _same
    written: str | None = None

    def __call__(self, flag: str, text: str) -> Any:
        value = self.read(text.strip())
        if not self.accepts(value):
            raise _refuse(flag, text, self.written or self.allowed)
        return value


def _int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def whole(minimum: int, maximum: int | None = None) -> Kind:
    """A whole number >= `minimum` (and <= `maximum`)."""
    words = (f"a whole number >= {minimum}" if maximum is None
             else f"a whole number from {minimum} to {maximum}")
    return Kind(words, lambda v: type(v) is int and v >= minimum and (
        maximum is None or v <= maximum), _int)


def number(allowed: str, *, at_most: float | None = None) -> Kind:
    """A finite number > 0 (and <= `at_most`); `allowed` says so in the message."""
    return Kind(allowed, lambda v: _number(v) and v > 0 and (at_most is None or v <= at_most),
                _float)


def choice(*values: str) -> Kind:
    """One of `values`, as written."""
    return Kind(f"one of {values}", lambda v: v in values, written=f"one of {', '.join(values)}")


seconds = number("a number of seconds > 0")
positive = number("a number > 0")
seconds_or_zero = Kind("a finite number of seconds >= 0", lambda v: _number(v) and v >= 0,
                       _float)
ratio = number("a fraction > 0 and <= 1, e.g. 0.5 (1: every request)", at_most=1.0)
error_share = Kind("a fraction >= 0 and < 1, e.g. 0.05 (0: any failed request)",
                   lambda v: _number(v) and 0 <= v < 1, _float)
BOOL = Kind("true or false", lambda v: isinstance(v, bool),
            lambda t: {"true": True, "false": False}.get(t, t))
NAME = Kind("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))
TEXT = Kind("a string", lambda v: isinstance(v, str))
TABLE = Kind("a table", lambda v: isinstance(v, dict))


def text(_flag: str, value: str) -> str | None:
    """Free text; blank is "not set"."""
    return value.strip() or None


def parse_duration(value: str) -> float | None:
    """Seconds of a Locust-style timespan ("90", "90s", "5m", "1h30m", "1.5h"), or None if
    it is not one (or not > 0)."""
    m = _TIMESPAN.fullmatch(value.strip().lower())
    if not m or not any(m.groups()):
        return None
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + sec
    return total if math.isfinite(total) and total > 0 else None


_TIMESPAN = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def seconds_of(v: Any) -> float | None:
    """A `timespan` value in seconds (None: none, or not one)."""
    if isinstance(v, str):
        return parse_duration(v)
    return float(v) if _number(v) and v > 0 else None


# a time > 0 as Locust writes one: seconds, or "90s", "5m", "1h30m" (a file's text is kept
# as written, a flag's read into seconds)
timespan = Kind('a time > 0: seconds, or text such as "90s", "5m", "1h30m"',
                lambda v: seconds_of(v) is not None,
                lambda t: parse_duration(t) or t)

# a threshold that 0 turns off: a file's number of seconds, a flag's also as a timespan
seconds_or_off = Kind("a finite number of seconds >= 0 (0: off)",
                      lambda v: _number(v) and v >= 0,
                      lambda t: 0.0 if _float(t.rstrip("s")) == 0 else parse_duration(t) or t,
                      'seconds >= 0 (0: off), e.g. 30, "30s" or "2m"')


def _whole_list(text: str) -> list[int] | str:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        return text


def _number_list(text: str) -> list[float] | str:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        return text


counts = Kind("a list of user counts >= 1, e.g. [1, 4, 16]",
              lambda v: isinstance(v, list | tuple) and bool(v) and all(
                  type(x) is int and x >= 1 for x in v),
              _whole_list, "whole numbers >= 1, comma-separated, e.g. 1,4,16,64")
rates = Kind("a list of rates > 0 (requests/s), e.g. [1, 2, 4]",
             lambda v: isinstance(v, list | tuple) and bool(v) and all(
                 _number(x) and x > 0 for x in v),
             _number_list, "numbers > 0 (requests/s), comma-separated, e.g. 1,2,4,8")
names = Kind("a non-empty list of names", lambda v: isinstance(v, list) and bool(v),
             lambda t: [n.strip() for n in t.split(",")], "names, comma-separated")


def window_of(value: str) -> tuple[float, float | None] | None:
    """`START:END` seconds (END may be left out: to the end), 0 <= START < END; None if the
    text is not one."""
    start_text, colon, end_text = value.partition(":")
    try:
        start = float(start_text)
        end = float(end_text) if end_text.strip() else None
    except ValueError:
        return None
    if not colon or not (math.isfinite(start) and start >= 0) or (
            end is not None and not (math.isfinite(end) and end > start)):
        return None
    return start, end


window_text = Kind("START:END in seconds with 0 <= START < END, e.g. 60:120 (or 60: to the end)",
                   lambda v: isinstance(v, str) and window_of(v) is not None)


def window(flag: str, value: str) -> tuple[float, float | None]:
    """`window_text`, as the two seconds it stands for."""
    return window_of(window_text(flag, value))  # type: ignore[return-value]


def criteria(flag: str, value: str) -> str:
    """Goodput criteria, e.g. "ttft_ms<=2000,mean_inter_token_latency_ms<=50"."""
    from anvil_metrics.load.criteria import parse_criteria

    return ",".join(c.text() for c in parse_criteria(value, flag))


def nonce(flag: str, value: str) -> str:
    """A previous run's `run_nonce`."""
    if not NONCE.fullmatch(value):
        raise _refuse(flag, value, "1-32 letters, digits, '-' or '_' (copy run_nonce from a "
                      "previous benchmark.json)")
    return value


def http_url(flag: str, value: str, what: str = "",
             example: str = "http://127.0.0.1:8000/metrics") -> str:
    """An http(s) URL with a host."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse(flag, value, f"an http:// or https:// URL{what}, e.g. {example}")
    return value


def otlp_endpoint(flag: str, value: str) -> str:
    """An OTLP/HTTP receiver: an http(s) URL with a host (its base, or its /v1/metrics)."""
    return http_url(flag, value, " of an OTLP/HTTP receiver", "http://127.0.0.1:4318")


ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


def metrics_target(flag: str, value: str) -> str:
    """`ROLE=URL` (a server of the topology: prefill, decode, replica-0, ...) or a bare URL
    (the one server), checked; kept as text (it travels to Locust's parser)."""
    split_target(flag, value)
    return value


def split_target(flag: str, value: str) -> tuple[str | None, str]:
    """A `metrics_target` as (role or None, URL)."""
    role, eq, url = value.partition("=")
    if not eq or value.startswith(("http://", "https://")):
        return None, http_url(flag, value)
    if not ROLE.fullmatch(role):
        raise _refuse(flag, value, "ROLE=URL with ROLE 1-32 letters, digits, '-' or '_' "
                      "(e.g. prefill=http://127.0.0.1:8001/metrics), or a bare URL")
    return role, http_url(flag, url)


def metrics_targets(flag: str, given: list[str] | None
                    ) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The repeated flag's values as (the one server's URL, ((role, URL), ...)): one bare
    URL, or roles each named once, never both."""
    given = [split_target(flag, g) for g in given or ()]
    bare = [url for role, url in given if role is None]
    roles = [(role, url) for role, url in given if role is not None]
    if bare and (roles or len(bare) > 1):
        raise UsageError(f"{flag} {bare[-1]!r} is not allowed beside other {flag} values; "
                         "expected one bare URL (the one server), or ROLE=URL for each "
                         "server")
    names = [role for role, _ in roles]
    twice = next((r for r in names if names.count(r) > 1), None)
    if twice is not None:
        raise UsageError(f"{flag} role {twice!r} is given twice; expected each ROLE once")
    return (bare[0] if bare else None), tuple(roles)


def tokenizer_file(flag: str, value: str) -> str:
    """An existing file (the served model's tokenizer.json)."""
    if not os.path.isfile(value):
        raise UsageError(f"{flag} {value!r} is not a file; pass the served model's "
                         "tokenizer.json")
    return value


PAIR = re.compile(r"([a-z_]+)=([^,=]+)")


def pairs(flag: str, value: str) -> dict[str, int | float | str | bool]:
    """`key=value,key=value` (lower-case keys; a value is a whole number, a number, true or
    false, or text): a scenario table's scalar keys given on the command line, e.g.
    `--conversation turns=4,turn_tokens=256`. The table's own check names a bad key or
    value."""
    got: dict[str, int | float | str | bool] = {}
    for part in value.split(","):
        m = PAIR.fullmatch(part.strip())
        if m is None or m.group(1) in got:
            raise _refuse(flag, value, "key=value pairs separated by commas, each key once, "
                          "e.g. turns=4,turn_tokens=256")
        key, raw = m.groups()
        if raw.strip() in ("true", "false"):  # TOML's booleans
            got[key] = raw.strip() == "true"
            continue
        for kind in (int, float):
            try:
                got[key] = kind(raw)
                break
            except ValueError:
                continue
        else:
            got[key] = raw.strip()
    return got
