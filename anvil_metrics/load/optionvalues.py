"""The value parsers of anvil's options (`options.py`): each takes the flag and its text and
gives the typed value, or one `UsageError` naming the flag, the text and what is allowed.

Why apart from the options' table: the same parsers serve `anvil run`, Locust's parser and
its web form (`options.py`) and the other commands' flags (`cli/`), and none needs the
scenario module; the table and the one conversion of parsed values stay in `options.py`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any

from anvil_metrics.errors import UsageError

# `parse(flag, text)`: the typed value, or UsageError naming the flag, the text and what is
# allowed. It never sees an empty text on Locust's side (empty means "not set").
Parse = Callable[[str, str], Any]

NONCE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _refuse(flag: str, text: str, allowed: str) -> UsageError:
    return UsageError(f"{flag} {text!r} is not allowed; expected {allowed}")


def text(_flag: str, value: str) -> str | None:
    """Free text; blank is "not set"."""
    return value.strip() or None


def whole(minimum: int) -> Parse:
    """A whole number >= `minimum`."""
    def parse(flag: str, value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < minimum:
            raise _refuse(flag, value, f"a whole number >= {minimum}")
        return n
    return parse


def choice(*allowed: str) -> Parse:
    """One of `allowed`, as written."""
    def parse(flag: str, value: str) -> str:
        if value not in allowed:
            raise _refuse(flag, value, f"one of {', '.join(allowed)}")
        return value
    return parse


def above_zero(allowed: str) -> Parse:
    """A finite number > 0 (`allowed` says so in the message)."""
    def parse(flag: str, value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and x > 0):
            raise _refuse(flag, value, allowed)
        return x
    return parse


seconds = above_zero("a number of seconds > 0")
positive = above_zero("a number > 0")


def timespan(flag: str, value: str) -> float:
    """A time > 0 as Locust writes one: seconds, or "90s", "5m", "1h30m"."""
    from anvil_metrics.load.loadspec import parse_duration

    seconds = parse_duration(value)
    if seconds is None:
        raise _refuse(flag, value, 'a time > 0: seconds, or text such as "90s", "5m", "1h30m"')
    return seconds


def arrival(flag: str, value: str) -> str:
    """One of `arrivals.ARRIVALS`."""
    from anvil_metrics.load.arrivals import ARRIVALS

    if value not in ARRIVALS:
        raise _refuse(flag, value, f"one of {', '.join(ARRIVALS)}")
    return value


def counts(flag: str, value: str) -> tuple[int, ...]:
    """Comma-separated whole numbers >= 1, e.g. 1,4,16,64."""
    try:
        out = tuple(int(x) for x in value.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise _refuse(flag, value, "whole numbers >= 1, comma-separated, e.g. 1,4,16,64")
    return out


def rates(flag: str, value: str) -> tuple[float, ...]:
    """Comma-separated numbers > 0, e.g. 1,2,4,8."""
    try:
        out = tuple(float(x) for x in value.split(","))
    except ValueError:
        out = ()
    if not out or not all(math.isfinite(x) and x > 0 for x in out):
        raise _refuse(flag, value, "numbers > 0 (requests/s), comma-separated, e.g. 1,2,4,8")
    return out


def window(flag: str, value: str) -> tuple[float, float | None]:
    """`START:END` seconds (END may be left out: to the end), 0 <= START < END."""
    start_text, colon, end_text = value.partition(":")
    try:
        start = float(start_text)
        end = float(end_text) if end_text.strip() else None
    except ValueError:
        start, end = math.nan, None
    if not colon or not (math.isfinite(start) and start >= 0) or (
            end is not None and not (math.isfinite(end) and end > start)):
        raise _refuse(flag, value, "START:END in seconds with 0 <= START < END, e.g. 60:120 "
                      "(or 60: to the end)")
    return start, end


def ratio(flag: str, value: str) -> float:
    """A fraction 0 < r <= 1 (of requests that failed)."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and 0 < x <= 1):
        raise _refuse(flag, value, "a fraction > 0 and <= 1, e.g. 0.5 (1: every request)")
    return x


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


def http_url(flag: str, value: str) -> str:
    """An http(s) URL with a host."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse(flag, value, "an http:// or https:// URL, e.g. "
                      "http://127.0.0.1:8000/metrics")
    return value


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
