"""`restoration.check_aliases` against stdlib stubs: a transient 503 gets its one managed
retry (recorded), an alias never listed fails with its reason, a second 503 fails, a dropped
connection counts as transient, a hanging server is bounded, and the key never shows."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from conftest import http_server

from anvil_metrics.campaign.restoration import RESET, check_aliases

SECRET = "sk-test-not-a-real-key-0123"
Answer = Callable[[str, dict[str, Any] | None], tuple[int, Any]]


@contextmanager
def stub(answer: Answer) -> Iterator[tuple[str, list[tuple[str, str, dict[str, str]]]]]:
    """A server where `answer(path, json body or None)` gives (status, JSON); status 0 drops
    the connection. Yields its /v1 URL and every (method, path, headers) it got."""
    seen: list[tuple[str, str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append((self.command, self.path, headers))
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            status, value = answer(self.path, body)
            if status == 0:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.close_connection = True
                self.connection.close()
                return
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _any  # noqa: N815 (the stdlib's names)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}/v1", seen


def serving(names: list[str], fail_first: dict[str, int] | None = None) -> Answer:
    """A router serving `names`; `fail_first[path]` = status (0: reset) of the next N calls
    to that path, one each, listed as [status, ...] per path."""
    pending = {k: list(v) for k, v in (fail_first or {}).items()}

    def answer(path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        if pending.get(path):
            return pending[path].pop(0), {"error": {"message": "warming up"}}
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": n} for n in names]}
        if path == "/v1/chat/completions" and body and body.get("model") in names:
            assert body["max_tokens"] == 1 and body["stream"] is False
            return 200, {"choices": [{"index": 0, "message": {"content": "O"}}]}
        return 404, {"error": {"message": "no such model"}}

    return answer


def test_a_503_once_is_retried_and_recorded() -> None:
    pauses: list[float] = []
    with stub(serving(["llm.primary", "vision.ocr"],
                      {"/v1/chat/completions": [503]})) as (url, seen):
        got = check_aliases(url, ["llm.primary", "vision.ocr"], pause_s=2.0,
                            headers={"Authorization": f"Bearer {SECRET}"}, sleep=pauses.append)
    assert got.result == "pass"
    first, second = got.aliases
    assert (first.attempts, first.retried_after, first.retried_request, first.reason) == (
        3, 503, "POST /v1/chat/completions", None)
    assert (second.attempts, second.retried_after) == (2, None)
    assert pauses == [2.0]
    assert [(m, p) for m, p, _ in seen] == [
        ("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions")]
    assert all(h["authorization"] == f"Bearer {SECRET}" for _, _, h in seen)
    assert SECRET not in json.dumps(got.to_json())


def test_a_reset_connection_counts_as_transient() -> None:
    with stub(serving(["a"], {"/v1/models": [0]})) as (url, _):
        got = check_aliases(url, ["a"], sleep=lambda s: None)
    assert got.result == "pass"
    assert (got.aliases[0].retried_after, got.aliases[0].retried_request) == (
        RESET, "GET /v1/models")


def test_a_second_503_fails_the_alias() -> None:
    with stub(serving(["a"], {"/v1/chat/completions": [503, 503]})) as (url, _):
        got = check_aliases(url, ["a"], sleep=lambda s: None)
    a = got.aliases[0]
    assert got.result == "fail" and (a.listed, a.answered, a.attempts) == (True, False, 3)
    assert a.reason == "POST /v1/chat/completions: HTTP 503 again, after a retry"


def test_an_alias_never_listed_fails_with_its_reason() -> None:
    with stub(serving(["llm.primary"])) as (url, _):
        got = check_aliases(url, ["llm.primary", "vision.general"], sleep=lambda s: None)
    assert got.result == "fail"
    assert [a.ok for a in got.aliases] == [True, False]
    missing = got.aliases[1]
    assert (missing.listed, missing.answered, missing.retried_after) == (False, False, None)
    assert missing.reason == ("GET /v1/models: 'vision.general' is not listed; "
                              "POST /v1/chat/completions: HTTP 404")
    assert got.to_json()["aliases"][1]["result"] == "fail"


def test_a_hanging_server_is_bounded_and_the_rest_not_tried() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        start = time.monotonic()
        got = check_aliases(url, ["a", "b"], timeout_s=0.3, sleep=lambda s: None)
        elapsed = time.monotonic() - start
    finally:
        listener.close()
    assert got.result == "fail"
    assert got.aliases[0].reason == "GET /v1/models: no answer within 0.3 s"
    assert got.aliases[0].attempts == 1  # a timeout is not retried
    assert got.aliases[1].reason.startswith("not tried") and got.aliases[1].attempts == 0
    assert elapsed < 10  # loose: one 0.3 s wait (the server never answers)


def test_no_alias_is_not_a_pass() -> None:
    assert check_aliases("http://127.0.0.1:9/v1", []).result == "fail"
