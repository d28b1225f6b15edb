"""The restoration check: after a campaign's last run, each serving alias answers again.

Why: a campaign switches placements, restarts servers and loads other models for hours; the
benchmark is only done when the names users call (a router's aliases, e.g. "llm.primary")
answer again. For each alias, in order: ``GET /v1/models`` must list it (an entry whose
``id`` is the alias) and a non-streaming chat completion with ``"model": alias`` and
``max_tokens`` 1 must answer 200 with a choice. A server coming back often answers 503 (or
drops the connection) for a moment, so one such transient answer per alias gets one managed
retry after a short pause, recorded (`attempts`, `retried_after`) so the summary can say
it in words; anything else, or a second transient answer, fails that alias.

Rules (as `provenance.py`'s probes): stdlib ``urllib``, no redirect followed (it would carry
the Authorization header elsewhere), no proxy from the environment; every request bounded by
`timeout_s` per socket wait and in total between body reads, bodies read up to
`plainhttp.MAX_BODY_BYTES`; the pause is capped at `MAX_PAUSE_S`. Nothing raises for the server's
doing; reasons name paths and statuses only, never the host, a header or a body.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_PAUSE_S = 2.0
MAX_PAUSE_S = 10.0
TRANSIENT_STATUS = 503
RESET = "connection reset"
MODELS = "GET /v1/models"
CHAT = "POST /v1/chat/completions"  # `retried_after` of a dropped connection


@dataclass(frozen=True, slots=True)
class AliasCheck:
    """One alias: listed by /v1/models, answered a one-token completion. `attempts` counts
    the requests sent for it; `retried_after` is what the retried request first got (503 or
    "connection reset"), None without a retry; `reason` says why it failed (None: it passed)."""

    alias: str
    listed: bool
    answered: bool
    attempts: int
    retried_after: int | str | None
    retried_request: str | None
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.listed and self.answered

    def to_json(self) -> dict[str, Any]:
        return {"alias": self.alias, "result": "pass" if self.ok else "fail",
                "listed": self.listed, "answered": self.answered, "attempts": self.attempts,
                "retried_after": self.retried_after, "retried_request": self.retried_request,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RestorationResult:
    """Every alias's check; "pass" only when every alias answered."""

    base_url: str  # without credentials
    aliases: tuple[AliasCheck, ...]

    @property
    def result(self) -> str:
        return "pass" if self.aliases and all(a.ok for a in self.aliases) else "fail"

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result, "base_url": self.base_url,
                "aliases": [a.to_json() for a in self.aliases]}


class _Transient(Exception):
    """A 503 or a dropped connection: worth one retry. `first` is what came back."""

    def __init__(self, message: str, first: int | str) -> None:
        super().__init__(message)
        self.first = first


class _Failed(Exception):
    """Any other failure, one line; `dead` when the server did not answer at all."""

    def __init__(self, message: str, dead: bool = False) -> None:
        super().__init__(message)
        self.dead = dead


def _is_reset(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError)


def _request(what: str, url: str, body: bytes | None, headers: Mapping[str, str],
             timeout_s: float) -> Any:
    """The JSON answer of one request (`what`: "GET /v1/models", for the reasons)."""
    method = what.split(" ", 1)[0]
    req = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    try:
        with OPENER.open(req, timeout=timeout_s) as response:
            answer = read_body(response, what, timeout_s)
    except BodyError as exc:
        raise _Failed(str(exc), dead=exc.fatal) from None
    except urllib.error.HTTPError as exc:
        if exc.code == TRANSIENT_STATUS:
            raise _Transient(f"{what}: HTTP {exc.code}", exc.code) from None
        raise _Failed(f"{what}: HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        if _is_reset(exc.reason):  # type: ignore[arg-type]
            raise _Transient(f"{what}: {RESET}", RESET) from None
        if isinstance(exc.reason, TimeoutError):
            raise _Failed(f"{what}: no answer within {timeout_s:g} s", dead=True) from None
        raise _Failed(f"{what}: {type(exc.reason).__name__}", dead=True) from None
    except TimeoutError:
        raise _Failed(f"{what}: no answer within {timeout_s:g} s", dead=True) from None
    except (http.client.HTTPException, OSError) as exc:
        if _is_reset(exc):
            raise _Transient(f"{what}: {RESET}", RESET) from None
        raise _Failed(f"{what}: {type(exc).__name__}", dead=True) from None
    except _Failed:
        raise
    except Exception as exc:  # e.g. a header value urllib refuses: its text may hold a key
        raise _Failed(f"{what}: {type(exc).__name__}", dead=True) from None
    try:
        return orjson.loads(answer)
    except orjson.JSONDecodeError:
        raise _Failed(f"{what}: not JSON ({len(answer)} bytes)") from None


class _Alias:
    """One alias's requests, with its one managed retry."""

    def __init__(self, alias: str, headers: Mapping[str, str], timeout_s: float,
                 pause_s: float, sleep: Callable[[float], None]) -> None:
        self.alias = alias
        self.headers = headers
        self.timeout_s = timeout_s
        self.pause_s = pause_s
        self.sleep = sleep
        self.attempts = 0
        self.retried_after: int | str | None = None
        self.retried_request: str | None = None

    def ask(self, what: str, url: str, body: bytes | None = None) -> Any:
        """The JSON answer of `what`, retried once (after the pause) on its first 503/reset."""
        def call() -> Any:
            return _request(what, url, body, self.headers, self.timeout_s)

        self.attempts += 1
        try:
            return call()
        except _Transient as exc:
            if self.retried_after is not None:  # its one retry is used: a failure now
                raise _Failed(f"{exc}, after the alias's one retry was used") from None
            self.retried_after, self.retried_request = exc.first, what
        self.sleep(self.pause_s)
        self.attempts += 1
        try:
            return call()
        except _Transient as exc:
            raise _Failed(f"{exc} again, after a retry") from None


def _lists(models: Any, alias: str) -> bool:
    data = models.get("data") if isinstance(models, dict) else None
    return isinstance(data, list) and any(
        isinstance(c, dict) and c.get("id") == alias for c in data)


def _has_choice(answer: Any) -> bool:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    return isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict)


def check_aliases(base_url: str, aliases: tuple[str, ...] | list[str], *,
                  headers: Mapping[str, str] | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, pause_s: float = DEFAULT_PAUSE_S,
                  sleep: Callable[[float], None] = time.sleep) -> RestorationResult:
    """Check each alias at `base_url` (``http(s)://HOST:PORT/v1``, no credentials: pass the
    key in `headers`). At most 4 requests per alias, each within `timeout_s`; once the server
    does not answer at all, the remaining aliases are not tried (said in their reasons)."""
    sent = {"Accept": "application/json", "Content-Type": "application/json",
            "User-Agent": "anvil", **(headers or {})}
    timeout_s = max(timeout_s, 0.001)
    pause_s = min(max(pause_s, 0.0), MAX_PAUSE_S)
    root = base_url.rstrip("/")
    dead: str | None = None
    checks: list[AliasCheck] = []
    for alias in aliases:
        if dead is not None:
            checks.append(AliasCheck(alias, False, False, 0, None, None,
                                     f"not tried ({dead})"))
            continue
        a = _Alias(alias, sent, timeout_s, pause_s, sleep)
        listed = answered = False
        reasons: list[str] = []
        body = orjson.dumps({"model": alias, "max_tokens": 1, "stream": False,
                             "messages": [{"role": "user", "content": "Say OK."}]})
        try:
            models = a.ask(MODELS, root + "/models")
            listed = _lists(models, alias)
            if not listed:
                reasons.append(f"{MODELS}: {alias!r} is not listed")
            answer = a.ask(CHAT, root + "/chat/completions", body)
            answered = _has_choice(answer)
            if not answered:
                reasons.append(f"{CHAT}: 200 without a choice")
        except _Failed as exc:
            reasons.append(str(exc))
            if exc.dead:
                dead = "the server did not answer an earlier request"
        checks.append(AliasCheck(alias, listed, answered, a.attempts, a.retried_after,
                                 a.retried_request, "; ".join(reasons) or None))
    return RestorationResult(root, tuple(checks))
