"""Fault injection for the simulator: the ``--fault`` grammar and which request gets which fault.

Why: a load generator must be tested against the ways real servers fail — error statuses,
rate limiting, connections reset before or during a stream, broken or truncated SSE streams,
stalls — and against each of them at a known request, so a test can say exactly what the
client should have recorded. This module only parses the specs and picks the fault of each
chat completion request (by its 0-based arrival index, or at random from a seeded RNG, so a
run is reproducible); what a fault does on the wire lives in `faultchat.py`, so the fault-free
path in `chat.py` stays as it was.

Grammar of one ``--fault`` value::

    KIND[=ARG]@I,J,K    the chat completion requests with these 0-based indices
    KIND[=ARG]%P        each chat completion request with probability P (0 <= P <= 1)
    KIND[=ARG]@MODEL:I,J   the requests naming "model": MODEL with these 0-based indices,
                        counted among those requests only (a router alias that answers 503
                        once: ``http503@llm.primary:0``)

A request gets at most one fault: the first matching rule in command-line order. Every rate
rule draws exactly one number per request (in command-line order, from one
``random.Random(seed)``), whether or not an earlier rule matched, so which requests are hit
depends only on the seed, the rules and the request index.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

NONE, COUNT, SECONDS = "", "K", "SECONDS"

# kind -> what its ARG is ("" for none); "K" is an integer >= 0, "SECONDS" a number >= 0
ARG_OF_KIND: dict[str, str] = {
    "http400": NONE,
    "http500": NONE,
    "http503": NONE,
    "http429": SECONDS,  # Retry-After is an integer (delta-seconds)
    "reset_before_headers": NONE,
    "reset_mid_stream": COUNT,
    "malformed_chunk": COUNT,
    "stream_error": COUNT,
    "stall_first_byte": SECONDS,
    "stall_mid_stream": SECONDS,
    "no_done": NONE,
    "end_before_finish": COUNT,
    "no_usage": NONE,
    "oversize_chunk": NONE,
    "slow_headers": SECONDS,
    # a hostile server's (`faultchat.py`: what a client must survive, each one bounded)
    "headers_then_silence": NONE,
    "endless_stream": NONE,
    "html_200": NONE,
    "huge_header": COUNT,
    "huge_line": COUNT,
    "invalid_utf8": COUNT,
    "nan_usage": NONE,
    "negative_usage": NONE,
    "comment_flood": COUNT,
}
_INTEGER_ARG = frozenset({"http429", "reset_mid_stream", "malformed_chunk", "stream_error",
                          "end_before_finish", "huge_header", "huge_line", "invalid_utf8",
                          "comment_flood"})  # fmt: skip
HTTP_STATUS = {"http400": 400, "http429": 429, "http500": 500, "http503": 503}

ALLOWED = (
    "expected KIND[=ARG]@I,J,... (0-based request indices), KIND[=ARG]@MODEL:I,J,... (indices "
    "among the requests naming that model) or KIND[=ARG]%P (0 <= P <= 1), "
    "KIND one of "
    + ", ".join(f"{kind}={arg}" if arg else kind for kind, arg in ARG_OF_KIND.items())
    + " (K an integer >= 0, SECONDS a number >= 0, whole seconds for http429)"
)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault kind and its argument (None for kinds without one)."""

    kind: str
    arg: float | None = None

    @property
    def count(self) -> int:
        """ARG of a chunk-count kind (K)."""
        return int(self.arg or 0)

    @property
    def ns(self) -> int:
        """ARG of a duration kind, in integer nanoseconds."""
        return round((self.arg or 0.0) * 1e9)


@dataclass(frozen=True, slots=True)
class FaultRule:
    """A fault and the requests it hits: the listed indices (among the requests naming
    `model` when it is set), or each with probability `rate`."""

    fault: Fault
    indices: frozenset[int] = frozenset()
    rate: float | None = None
    spec: str = ""
    model: str | None = None


def _bad(spec: str, why: str) -> ValueError:
    return ValueError(f"bad fault spec {spec!r}: {why}; {ALLOWED}")


def _parse_arg(spec: str, kind: str, text: str | None) -> float | None:
    what = ARG_OF_KIND[kind]
    if not what:
        if text is not None:
            raise _bad(spec, f"{kind} takes no argument")
        return None
    if text is None:
        raise _bad(spec, f"{kind} needs ={what}")
    try:
        value = float(int(text)) if kind in _INTEGER_ARG else float(text)
    except ValueError:
        kind_of = "an integer" if kind in _INTEGER_ARG else "a number"
        raise _bad(spec, f"{what} of {kind} must be {kind_of}, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise _bad(spec, f"{what} of {kind} must be >= 0, got {text!r}")
    return value


def parse_rule(spec: str) -> FaultRule:
    """Parse one ``--fault`` value; raises ValueError with a one-line message naming `spec`."""
    at, pct = spec.find("@"), spec.find("%")
    if (at < 0) == (pct < 0):
        raise _bad(spec, "give exactly one of @INDICES or %RATE")
    head, selector = (spec[:at], spec[at + 1 :]) if at >= 0 else (spec[:pct], spec[pct + 1 :])
    kind, eq, arg_text = head.partition("=")
    if kind not in ARG_OF_KIND:
        raise _bad(spec, f"unknown kind {kind!r}")
    fault = Fault(kind, _parse_arg(spec, kind, arg_text if eq else None))
    if at >= 0:
        model, colon, selector = selector.rpartition(":")
        if colon and not model:
            raise _bad(spec, "MODEL before ':' must not be empty")
        parts = selector.split(",")
        if not all(p.isascii() and p.isdigit() for p in parts):  # also refuses "", "-1", "1,,2"
            raise _bad(spec, f"indices must be integers >= 0 separated by commas, got {selector!r}")
        return FaultRule(fault, indices=frozenset(int(p) for p in parts), spec=spec,
                         model=model if colon else None)
    try:
        rate = float(selector)
    except ValueError:
        rate = math.nan
    if not 0.0 <= rate <= 1.0:
        raise _bad(spec, f"rate must be a number in 0..1, got {selector!r}")
    return FaultRule(fault, rate=rate, spec=spec)


class FaultPicker:
    """Numbers chat completion requests as they arrive and picks each one's fault (or None)."""

    __slots__ = ("_rules", "_rng", "index", "_per_model", "needs_model")

    def __init__(self, rules: Sequence[FaultRule], seed: int = 0) -> None:
        self._rules = tuple(rules)
        self._rng = random.Random(seed)
        self.index = 0  # index the next request gets
        self._per_model: dict[str, int] = {}  # model -> index its next request gets
        self.needs_model = any(r.model is not None for r in self._rules)

    def pick(self, model: str | None = None) -> Fault | None:
        """The fault of the next request (naming `model`, when the caller knows): the first
        matching rule; each rate rule draws once."""
        index = self.index
        self.index = index + 1
        model_index = -1
        if model is not None and self.needs_model:
            model_index = self._per_model.get(model, 0)
            self._per_model[model] = model_index + 1
        chosen: Fault | None = None
        for rule in self._rules:
            if rule.model is not None:
                hit = rule.model == model and model_index in rule.indices
            elif rule.rate is None:
                hit = index in rule.indices
            else:
                hit = self._rng.random() < rule.rate
            if hit and chosen is None:
                chosen = rule.fault
        return chosen
