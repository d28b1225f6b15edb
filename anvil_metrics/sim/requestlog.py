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
parts); a `/v1/completions` body's `"prompt"` likewise, as [characters, crc32] (null for
a chat body). A body that is not a JSON object is logged with `"messages": null`. Each line is
written and flushed as the request arrives, before it is answered.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, BinaryIO

import orjson


def message_digest(message: Any) -> list[Any]:
    """[role, characters, crc32] of one chat message (the line's `messages` entries)."""
    if not isinstance(message, dict):
        return [None, None, None]
    content = message.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return [message.get("role"), len(text), zlib.crc32(text.encode("utf-8", "surrogatepass"))]


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
        messages = data.get("messages") if isinstance(data, dict) else None
        prompt = data.get("prompt") if isinstance(data, dict) else None
        line = {"t_ns": t_ns, "path": path, "session": headers.get(self._header),
                "model": data.get("model") if isinstance(data, dict) else None,
                "max_tokens": data.get("max_tokens") if isinstance(data, dict) else None,
                "messages": ([message_digest(m) for m in messages]
                             if isinstance(messages, list) else None),
                "prompt": None if not isinstance(prompt, str) else message_digest(
                    {"role": None, "content": prompt})[1:],
                "headers": dict(headers)}
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
