"""The checks' HTTP client: one request at a time, JSON or SSE, with retries that are kept.

Why not the load's transport: checks ask a few hundred questions one after another, outside
the load, where what matters is reading the answer whole and classifying what went wrong,
not stamping bytes. So this is `urllib` through `plainhttp.OPENER` (no proxies from the
environment, no redirects: a redirect would carry the API key to another host), and SSE is
parsed by sseclient-py, the reference parser anvil's own splitter is tested against.

What a request can end in (`CheckError.kind`):

    "transport"  no answer: connection refused or reset, a timeout, a 5xx, a 429/502/503/504
                 still there after `retries` retries with backoff, a body that is not JSON /
                 not SSE. The case is an error — never a pass and never a failure.
    "refused"    a 4xx other than 401/403/407/408/429: the server understood and declined
                 (an unsupported `response_format`, an endpoint it does not serve). The case
                 fails: the server does not do what the check needs.

401/403/407 are "transport" too: the check could not be asked (fix the API key).
Every retried attempt is recorded (`take_retries`) and reaches the case's `retries`.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import sseclient

from anvil_metrics.checks.results import Retry
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.plainhttp import OPENER, BodyError, read_body

RETRY_STATUSES = (429, 502, 503, 504)
AUTH_STATUSES = (401, 403, 407, 408)
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF_S = 1.0  # waits 1, 2, 4, 8 s
MAX_LINE_BYTES = 8 << 20
MAX_TOOL_CALLS = 128  # a fragment's index at or past it is taken as a new call (no padding to it)
_BUDGET_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class CheckError(Exception):
    """A request that got no usable answer (`kind` "transport") or was declined with a 4xx
    (`kind` "refused"); the message says what was asked and what came back."""

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str  # "message" when the stream names none
    data: str


@dataclass(slots=True)
class ToolCall:
    """One tool call, assembled from its streamed fragments (or read whole)."""

    id: str | None
    name: str
    arguments: str  # the JSON text as sent; `parsed_arguments` parses it

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or None when they are not valid JSON."""
        try:
            return orjson.loads(self.arguments) if self.arguments else {}
        except orjson.JSONDecodeError:
            return None


@dataclass(slots=True)
class ChatAnswer:
    """A chat completion's answer, the same whether it was streamed or not.

    `reasoning` joins `reasoning_content` (SGLang, older vLLM) and `reasoning` (newer vLLM);
    `tool_calls` are in index order; `chunks` counts the stream's chunks (0 when not streamed).
    """

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunks: int = 0

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


class CheckClient:
    """Asks one server questions for the checks; see the module docstring for the rules."""

    def __init__(self, endpoint: Endpoint, model: str, *, api_key: str | None = None,
                 timeout_s: float = 120.0, retries: int = DEFAULT_RETRIES,
                 backoff_s: float = DEFAULT_BACKOFF_S, max_tokens: int | None = None) -> None:
        self.endpoint = endpoint
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens  # caps every request's answer budget (None: the suite's)
        self._api_key = api_key
        self._retried: list[Retry] = []

    # -- what a case records ----------------------------------------------------------
    def take_retries(self) -> tuple[Retry, ...]:
        """The retries since the last call of this method (a case's own)."""
        out, self._retried = tuple(self._retried), []
        return out

    # -- requests -----------------------------------------------------------------------
    def post_json(self, path: str, body: dict[str, Any], timeout_s: float | None = None
                  ) -> dict[str, Any]:
        """POST `body` to `path` (below /v1) and return the JSON object answered."""
        wait = timeout_s or self.timeout_s
        what = f"POST {path}"
        response = self._open(path, body, wait)
        try:
            raw = read_body(response, what, wait)
        except BodyError as e:
            raise CheckError(str(e), "transport") from None
        except OSError as e:
            raise CheckError(f"{what}: reading the answer failed ({e})", "transport") from None
        finally:
            response.close()
        return _json_object(raw, f"{what}: the answer")

    def stream_events(self, path: str, body: dict[str, Any], timeout_s: float | None = None
                      ) -> Iterator[SseEvent]:
        """POST `body` and yield the SSE events of the answer as they arrive (a `[DONE]`
        data line is yielded too: the caller decides what it means)."""
        wait = timeout_s or self.timeout_s
        give_up = time.monotonic() + wait
        what = f"POST {path} (stream)"
        response = self._open(path, body, wait)
        try:
            ctype = response.headers.get("Content-Type", "")
            if "text/event-stream" not in ctype:
                raw = read_body(response, what, max(give_up - time.monotonic(), 0.1))
                raise CheckError(f"{what}: the answer is {ctype or 'untyped'}, not an event "
                                 f"stream: {raw[:200]!r}", "transport")
            for event in sseclient.SSEClient(_lines(response, give_up, what)).events():
                yield SseEvent(event.event or "message", event.data)
        except (BodyError, OSError) as e:
            raise CheckError(f"{what}: the stream broke off ({e})", "transport") from None
        finally:
            response.close()

    def chat(self, body: dict[str, Any], timeout_s: float | None = None) -> ChatAnswer:
        """A chat completion, streamed when `body["stream"]` is true; `model` is filled in."""
        body = {"model": self.model, **body}
        if not body.get("stream"):
            data = self.post_json("/chat/completions", body, timeout_s)
            return chat_answer_of(data)
        answer = ChatAnswer()
        for event in self.stream_events("/chat/completions", body, timeout_s):
            if event.data.strip() == "[DONE]":
                break
            add_chunk(answer, _json_event(event, "/chat/completions"))
        return answer

    # -- plumbing -------------------------------------------------------------------------
    def _open(self, path: str, body: dict[str, Any], wait_s: float) -> Any:
        url = self.endpoint.base_url + path
        headers = {"Content-Type": "application/json", "Accept": "application/json, "
                   "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        if self.max_tokens is not None:
            body = {k: min(v, self.max_tokens) if k in _BUDGET_KEYS and isinstance(v, int)
                    else v for k, v in body.items()}
        payload = orjson.dumps(body)
        what = f"POST {path}"
        for attempt in range(1, self.retries + 2):
            request = urllib.request.Request(url, data=payload, headers=headers, method="POST")
            try:
                return OPENER.open(request, timeout=wait_s)
            except urllib.error.HTTPError as e:
                detail = _error_detail(e)
                e.close()
                if e.code in RETRY_STATUSES and attempt <= self.retries:
                    pause = self.backoff_s * 2 ** (attempt - 1)
                    self._retried.append(Retry(attempt, e.code, detail, pause))
                    time.sleep(pause)
                    continue
                kind = ("refused" if 400 <= e.code < 500 and e.code not in AUTH_STATUSES
                        and e.code not in RETRY_STATUSES else "transport")
                raise CheckError(f"{what}: HTTP {e.code}: {detail}", kind, e.code) from None
            except OSError as e:  # URLError, timeouts, resets
                reason = getattr(e, "reason", e)
                raise CheckError(f"{what} to {self.endpoint.base_url}: {reason}",
                                 "transport") from None
        raise AssertionError("unreachable")  # the loop returns or raises


def _error_detail(e: urllib.error.HTTPError) -> str:
    try:
        raw = e.read(4096)
    except OSError:
        return e.reason if isinstance(e.reason, str) else ""
    try:
        data = orjson.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message") if isinstance(err, dict) else None
        if isinstance(message, str):
            return message[:300]
    except orjson.JSONDecodeError:
        pass
    return raw[:300].decode("utf-8", "replace")


def _lines(response: Any, give_up: float, what: str) -> Iterator[bytes]:
    while True:
        left = give_up - time.monotonic()
        if left <= 0:
            raise BodyError(f"{what}: not finished within the time allowed", fatal=True)
        sock = getattr(getattr(response, "fp", None), "raw", None)
        sock = getattr(sock, "_sock", None)
        if sock is not None:
            sock.settimeout(left)
        line = response.readline(MAX_LINE_BYTES)
        if not line:
            return
        yield line


def _json_object(raw: bytes | str, what: str) -> dict[str, Any]:
    """`raw` parsed as a JSON object; anything else is a transport error naming `what`."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CheckError(f"{what} is not JSON: {raw[:200]!r}", "transport") from None
    if not isinstance(data, dict):
        raise CheckError(f"{what} is JSON but not an object", "transport")
    return data


def _json_event(event: SseEvent, path: str) -> dict[str, Any]:
    return _json_object(event.data, f"POST {path}: a stream event")


def chat_answer_of(data: dict[str, Any]) -> ChatAnswer:
    """A non-streamed `chat.completion` as a `ChatAnswer`."""
    answer = ChatAnswer(usage=data.get("usage") if isinstance(data.get("usage"), dict) else None)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CheckError("POST /chat/completions: the answer has no choices", "transport")
    message = choices[0].get("message") or {}
    answer.finish_reason = choices[0].get("finish_reason")
    answer.content = _text(message.get("content"))
    answer.reasoning = _text(message.get("reasoning_content")) + _text(message.get("reasoning"))
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = call.get("function") or {}
            answer.tool_calls.append(ToolCall(call.get("id"), _text(fn.get("name")),
                                              _arguments(fn.get("arguments"))))
    return answer


def add_chunk(answer: ChatAnswer, chunk: dict[str, Any]) -> None:
    """Fold one `chat.completion.chunk` into `answer`: text appended, tool-call fragments
    assembled by their `index` (the name from the first fragment that has one, arguments
    concatenated), usage and finish reason kept."""
    answer.chunks += 1
    if isinstance(chunk.get("usage"), dict):
        answer.usage = chunk["usage"]
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        answer.content += _text(delta.get("content"))
        answer.reasoning += _text(delta.get("reasoning_content")) + _text(delta.get("reasoning"))
        add_tool_fragments(answer.tool_calls, delta.get("tool_calls") or ())


def add_tool_fragments(calls: list[ToolCall], fragments: Iterable[Any]) -> None:
    """Fold streamed `delta.tool_calls` fragments into `calls` by their `index` (the name
    from the first fragment that has one, arguments concatenated, the id when one comes):
    the one assembly, `anvil check`'s and a check class's under load (`underload`)."""
    for frag in fragments:
        if not isinstance(frag, dict):
            continue
        index = frag.get("index", len(calls))
        index = index if isinstance(index, int) and 0 <= index < MAX_TOOL_CALLS else len(calls)
        while len(calls) <= index:
            calls.append(ToolCall(None, "", ""))
        call = calls[index]
        fn = frag.get("function") or {}
        if frag.get("id"):
            call.id = frag["id"]
        if fn.get("name"):
            call.name = call.name or fn["name"]
        call.arguments += _arguments(fn.get("arguments"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # some servers send the object itself
        return orjson.dumps(value).decode()
    return ""
