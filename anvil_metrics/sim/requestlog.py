"""`anvil sim --log-requests FILE`: what each chat request carried, one JSON line each.

Why: a multi-turn run must send, at each turn, every earlier message of its conversation in
order, with one session header value per conversation. The simulator is the only place that
sees what was actually sent, so with this option it appends, for every
`POST /v1/chat/completions` (and `/v1/completions`) it receives, a line a test can compare:

    {"t_ns": <perf_counter_ns at arrival>, "path": <the request's path>,
     "session": <the session header's value or null>,
     "model": ..., "max_tokens": ..., "messages": [[role, characters, crc32 of the content], ...],
     "headers": {<every header received, its name in lower case>: <its value>}}

The headers are kept whole, an Authorization too: the file is a test's view of the wire (a
run's `--header` flags arrive, and a credential's value reached the server while the run's
own files keep it out).

A message's content is summarised, not kept (a 393k-token prompt is ~1.5 MB): its length
in characters and the CRC-32 of its UTF-8 bytes (of its JSON when the content is a list of
parts); a `/v1/completions` body's `"prompt"` likewise, as [characters, crc32] (["ids",
count, crc32] for token ids; null for a chat body). A `/v1/responses` or `/v1/embeddings` line also
has `"input"` (each item's or text's digest) and `"previous_response_id"`; its `max_tokens` is
`max_output_tokens`. A `/v1/messages` line also has `"system"` (its top-level system
prompt's digest, when a string). A body that is not a JSON object is logged with
`"messages": null`. Each line is written and flushed as the request arrives, before it is
answered. Every line has `"body_bytes"` (the body's length as received); a chat body with
image or audio parts has `"media"`: each image's [w, h, tokens], each clip's [ms, tokens]
and their `image_tokens` and `audio_tokens` by `sim/media.py`'s rule (`{"error": ...}` if
unreadable).

Agent jobs: a line also names the replay's job, session and turn from the headers it sends
on each request (`AGENT_HEADERS`): `"anvil_job"`, `"anvil_session"` (strings) and
`"anvil_turn"` (the 0-based turn, an int when the value is one), each null when absent.

With `--log-answers` (`log_answers`), a second line when each chat answer's response ends
(`ledger.AnswerStamps`; a non-streamed answer's first and last byte are its one write), so
a test can set the job's order and timing against truth:

    {"answer_t0_ns": <the arrival line's t_ns>, "first_sent_ns": <its first generated
     token's write, or null>, "last_sent_ns": <just before its final write>,
     "prompt_tokens": <as the simulator counted them>, "cached_tokens": <its prefix-cache
     hits, or null without --prefix-cache>, "completed": <false: cut before its end>}

Every stamp is `time.monotonic_ns()` (`perf_counter_ns`'s clock on Linux): the clock of
`anvil-t0-ns` and of the chunks' `anvil_sent_ns` (`--stamp-send`, `wire/truth.py`), and of
a client's own `perf_counter_ns` on the same host, so a test compares them with a run's
stamps directly. The key `answer_t0_ns` is the request's arrival stamp, its `t_ns` (one
monotonic reading per request received; an injected `stall_first_byte` or `slow_headers`
fault moves it, as it moves `anvil-t0-ns`). The line is written when the response has ended,
off the stream's per-token path; other endpoints' answers get none.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from anvil_metrics.sim.ledger import AnswerStamps
from anvil_metrics.sim.media import MediaError, split_media

# the replay's headers on every request of an agent job, and the line's keys for them
AGENT_HEADERS = (("x-anvil-job", "anvil_job"), ("x-anvil-session", "anvil_session"),
                 ("x-anvil-turn", "anvil_turn"))


def message_digest(message: Any) -> list[Any]:
    """[role, characters, crc32] of one chat message (the line's `messages` entries)."""
    if not isinstance(message, dict):
        return [None, None, None]
    content = message.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return [message.get("role"), len(text), zlib.crc32(text.encode("utf-8", "surrogatepass"))]


def prompt_digest(prompt: Any) -> list[Any] | None:
    """[characters, crc32] of a text prompt, ["ids", count, crc32 of their JSON] of token
    ids, else None."""
    if isinstance(prompt, str):
        return message_digest({"role": None, "content": prompt})[1:]
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        return ["ids", len(prompt), zlib.crc32(orjson.dumps(prompt))]
    return None


def input_digest(value: Any) -> list[Any] | None:
    """A Responses or embeddings `input`: each message's or text's digest, in order."""
    if isinstance(value, str):
        return [prompt_digest(value)]
    if not isinstance(value, list):
        return None
    if value and all(type(t) is int for t in value):
        return [prompt_digest(value)]
    return [message_digest(v) if isinstance(v, dict) else prompt_digest(v) for v in value]


class RequestLog:
    """An open `--log-requests` file; `header` is the session header's name."""

    def __init__(self, path: str | Path, header: str) -> None:
        self._file: BinaryIO = open(path, "ab")  # noqa: SIM115 - open for the server's life
        self._header = header.lower()

    def write(self, headers: dict[str, str], body: bytes, t_ns: int,
              path: str = "/v1/chat/completions") -> None:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        data = data if isinstance(data, dict) else {}
        messages = data.get("messages")
        line = {"t_ns": t_ns, "path": path, "session": headers.get(self._header),
                "model": data.get("model"),
                "max_tokens": data.get("max_tokens", data.get("max_output_tokens")),
                "messages": ([message_digest(m) for m in messages]
                             if isinstance(messages, list) else None),
                "prompt": prompt_digest(data.get("prompt")),
                "headers": dict(headers), "body_bytes": len(body)}
        if isinstance(messages, list) and any(
                isinstance(m, dict) and isinstance(m.get("content"), list) and any(
                    isinstance(p, dict) and p.get("type") in ("image_url", "input_audio")
                    for p in m["content"]) for m in messages):
            try:
                line["media"] = split_media(messages)[1].log()
            except MediaError as e:
                line["media"] = {"error": str(e)}
        for name, key in AGENT_HEADERS:
            value = headers.get(name)
            whole = value is not None and value.isascii() and value.isdigit()
            line[key] = int(value) if key == "anvil_turn" and whole else value
        if path in ("/v1/responses", "/v1/embeddings"):
            line["input"] = input_digest(data.get("input"))
            line["previous_response_id"] = data.get("previous_response_id")
        elif path == "/v1/messages":  # the Messages API's top-level system prompt
            line["system"] = prompt_digest(data.get("system"))
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()

    def answer(self, stamps: AnswerStamps) -> None:
        """The `--log-answers` line of an answer whose response has ended (module
        docstring)."""
        line = {"answer_t0_ns": stamps.t0_ns, "first_sent_ns": stamps.first_sent_ns,
                "last_sent_ns": stamps.last_sent_ns, "prompt_tokens": stamps.prompt_tokens,
                "cached_tokens": stamps.cached_tokens, "completed": stamps.completed}
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
