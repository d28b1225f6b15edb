"""client: the checks' one-request-at-a-time client against a 127.0.0.1 server — answers
capped, 503s retried and each retry kept, a server that keeps failing an error of kind
transport.

Why: a retried 503 is part of what happened and is kept in checks.json; a client that
hid it, or that called a persistent 503 a wrong answer, would misreport the server.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import orjson
import pytest
from conftest import http_server
from localhttp import serving

from anvil_metrics.checks.client import CheckClient, CheckError, chat_answer_of
from anvil_metrics.urls import Endpoint


class _Recorder(BaseHTTPRequestHandler):
    """Answers every POST with a fixed chat completion, after a 503 for the first `FAILS`,
    and keeps each request body."""

    bodies: list[dict] = []
    fails = 0

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if type(self).fails > 0:
            type(self).fails -= 1
            self._send(503, {"error": {"message": "model loading"}})
            return
        self._send(200, {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]})

    def _send(self, status: int, obj: dict) -> None:
        raw = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def test_the_client_caps_answers_retries_503s_and_keeps_each_retry() -> None:
    _Recorder.bodies, _Recorder.fails = [], 2
    with http_server(_Recorder) as port:
        client = CheckClient(Endpoint.parse(f"http://127.0.0.1:{port}"), "m", max_tokens=64,
                             backoff_s=0.01)
        answer = client.chat({"messages": [{"role": "user", "content": "2+2?"}],
                              "max_tokens": 2048})
        assert answer.content == "4"
        retries = client.take_retries()
        assert [(r.attempt, r.status, r.reason) for r in retries] == [
            (1, 503, "model loading"), (2, 503, "model loading")]
        client.chat({"messages": [], "max_tokens": 1})
        _Recorder.fails = 99
        with pytest.raises(CheckError) as e:
            client.chat({"messages": []})
        assert e.value.kind == "transport" and "HTTP 503" in str(e.value)
    assert [b.get("max_tokens") for b in _Recorder.bodies[:4]] == [64, 64, 64, 1]
    assert all(b["model"] == "m" for b in _Recorder.bodies)


def _answers(status: int, body: bytes, ctype: str = "application/json") -> dict:
    return {"/v1/chat/completions": (status, {"Content-Type": ctype}, body)}


@pytest.mark.parametrize(("status", "body", "kind", "says"), [
    (400, b'{"error": {"message": "response_format is not supported"}}', "refused",
     "HTTP 400: response_format is not supported"),
    (401, b'{"error": {"message": "bad key"}}', "transport", "HTTP 401: bad key"),
    (200, b"<html>", "transport", "the answer is not JSON"),
    (200, b"[1]", "transport", "the answer is JSON but not an object"),
    (200, b'{"choices": []}', "transport", "the answer has no choices"),
])
def test_what_an_answer_can_end_in(status: int, body: bytes, kind: str, says: str) -> None:
    with serving(_answers(status, body)) as url:
        client = CheckClient(Endpoint.parse(url), "m", retries=0)
        with pytest.raises(CheckError) as e:
            client.chat({"messages": []})
    assert e.value.kind == kind and says in str(e.value)


def test_a_streamed_answer_is_assembled_as_a_whole_one() -> None:
    chunks = [{"choices": [{"delta": {"reasoning_content": "hm"}}]},
              {"choices": [{"delta": {"content": "4", "reasoning": "!"}}]},
              {"choices": [{"delta": {}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"prompt_tokens": 7}}]
    sse = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    with serving(_answers(200, sse, "text/event-stream")) as url:
        answer = CheckClient(Endpoint.parse(url), "m").chat({"messages": [], "stream": True})
    assert (answer.content, answer.reasoning, answer.finish_reason) == ("4", "hm!", "stop")
    assert (answer.prompt_tokens, answer.chunks) == (7, 4)
    whole = chat_answer_of({"choices": [{"message": {
        "content": "4", "reasoning_content": "hm", "reasoning": "!", "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": True}})
    assert (whole.content, whole.reasoning, whole.prompt_tokens) == ("4", "hm!", None)
    assert whole.tool_calls[0].parsed_arguments() == {"a": 1}  # an object sent as itself


def test_a_stream_that_is_not_an_event_stream_is_a_transport_error() -> None:
    with serving(_answers(200, b'{"choices": []}')) as url, \
            pytest.raises(CheckError, match="not an event stream") as e:
        CheckClient(Endpoint.parse(url), "m").chat({"messages": [], "stream": True})
    assert e.value.kind == "transport"
