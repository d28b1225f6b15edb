"""What a check found: one `CaseResult` per question asked, one `SuiteResult` per suite.

Why its own module: every suite (coding, tools, retrieval, ...) reports through these two
types, and the rule that turns cases into a suite's verdict lives in one place:

* a case is `passed` (the answer was right), failed (the server answered, wrongly — or
  refused with a 4xx: it does not do what was asked), or errored (`error_kind="transport"`:
  no answer could be had — connection refused or reset, a timeout, a 5xx or 429 after its
  retries, a body that is not the protocol);
* a suite is ``"error"`` when any case errored (it could not be completed, so it can neither
  pass nor fail), else ``"pass"`` when every case passed, else ``"fail"``.

`answer` is cut to `ANSWER_CHARS` characters, so a server that writes a novel does not write
it into checks.json. Each retry a case needed (a 503 during start-up, say) is kept in
`retries`: nothing that happened is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANSWER_CHARS = 500
RESULTS = ("pass", "fail", "error")
ERROR_KINDS = ("transport", "refused")  # refused: a 4xx answer, which counts as a failure


@dataclass(frozen=True, slots=True)
class Retry:
    """One retried attempt: what came back, and how long the client waited before the next."""

    attempt: int  # 1 = the first attempt was retried
    status: int | None  # the HTTP status, None for a connection error
    reason: str
    wait_s: float

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "status": self.status, "reason": self.reason,
                "wait_s": round(self.wait_s, 3)}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One question and what the server answered.

    `expected` and `answer` are what a reader needs to judge the case themselves (strings or
    small JSON values); `error` says why a case failed or errored, None when it passed.
    """

    id: str
    passed: bool
    expected: Any
    answer: Any
    error: str | None = None
    error_kind: str | None = None  # "transport" (the case errored) or "refused" (a 4xx), else None
    elapsed_s: float = 0.0
    retries: tuple[Retry, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)  # suite-specific figures

    def __post_init__(self) -> None:
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind {self.error_kind!r} is not one of {ERROR_KINDS}")
        if self.passed and self.error_kind is not None:
            raise ValueError(f"case {self.id}: passed with an error_kind")

    @property
    def errored(self) -> bool:
        return self.error_kind == "transport"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "passed": self.passed,
            "expected": _cut(self.expected),
            "answer": _cut(self.answer),
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
        }
        if self.error_kind is not None:
            out["error_kind"] = self.error_kind
        if self.retries:
            out["retries"] = [r.to_json() for r in self.retries]
        out.update(self.extra)
        return out


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ANSWER_CHARS:
        return value[:ANSWER_CHARS]
    return value


def verdict(cases: Sequence[CaseResult]) -> str:
    """The suite's result from its cases (see the module docstring); no case is an error."""
    if not cases or any(c.errored for c in cases):
        return "error"
    return "pass" if all(c.passed for c in cases) else "fail"


@dataclass(frozen=True, slots=True)
class SuiteResult:
    """One suite's verdict, counts, time and cases, plus its own figures in `extra` (e.g.
    `thinking_disabled_reasoning_leakage`, `requested_context_tokens`, `parts`)."""

    suite: str
    cases: tuple[CaseResult, ...]
    elapsed_s: float
    extra: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # the suite could not start (e.g. a required extra is missing)

    @property
    def result(self) -> str:
        return "error" if self.error is not None else verdict(self.cases)

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def total(self) -> int:
        return len(self.cases)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "result": self.result,
            "passed": self.passed,
            "total": self.total,
            "elapsed_s": round(self.elapsed_s, 3),
        }
        if self.error is not None:
            out["error"] = self.error
        out.update(self.extra)
        out["cases"] = [c.to_json() for c in self.cases]
        return out
