"""A bare asyncio reference client: the yardstick anvil's timing and cost are compared with.

Plain asyncio streams, no HTTP or SSE library: one keep-alive HTTP/1.1 connection per stream,
``POST /v1/chat/completions`` with ``"stream": true``, the chunked body decoded chunk by chunk
(size line, then exactly that many bytes), split into lines, each ``data:`` line parsed with
``orjson.loads`` and stamped with ``time.perf_counter_ns()`` right after the chunk that
completed it was read. `--streams` tasks each send requests back to back until `--requests`
have been sent (like anvil's users); `--stagger-ms W` starts stream k's first request at
k/N × W, so the streams' token phases are spread rather than aligned. It does what a timing
client must do and nothing more: no retries, no Locust, no records beyond the stamps.

    .venv/bin/python benchmarks/refclient.py --url http://127.0.0.1:PORT --streams 16 \
        --requests 48 [--prompt-tokens 1024] [--max-tokens 4096] [--stagger-ms 10] \
        [--out refclient.jsonl]

It writes one JSON line per request to `--out` (start_ns, first_output_ns, first_content_ns
and its first_content_sent_ns, end_ns, arrivals_ns and sent_ns per output chunk — the
simulator's ``anvil_sent_ns`` with ``--stamp-send`` —, events = SSE ``data`` events parsed)
and prints one summary line:
{"requests", "failed", "events", "cpu_s", "load_s", "first_request_ns"}, where `cpu_s` is this
process's CPU time (`time.process_time`) over the load window `load_s` (first request written
to last stream ended). Only for 127.0.0.1 servers; the benchmarks start it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from urllib.parse import urlsplit

import orjson

_ns = time.perf_counter_ns


def build_body(index: int, prompt_tokens: int, max_tokens: int) -> bytes:
    """A chat request of about `prompt_tokens` tokens under the simulator's `words4` rule
    (a 4-letter word is one token; the chat template adds ~8), unique per request."""
    words = max(1, prompt_tokens - 9)
    content = f"r{index:07d} " + "word " * words
    return orjson.dumps({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    })


class Stream:
    """One connection; `request` sends one body and reads its whole streamed answer."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port, self.path = host, port, path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        # one round trip so the server has accepted it before the clock starts (as anvil)
        self.writer.write(f"GET /health HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        status, headers = await self._head()
        await self.reader.readexactly(int(headers.get(b"content-length", b"0")))

    async def _head(self) -> tuple[int, dict[bytes, bytes]]:
        assert self.reader is not None
        status = int((await self.reader.readline()).split(b" ", 2)[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                return status, headers
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()

    async def request(self, body: bytes) -> dict:
        reader, writer = self.reader, self.writer
        assert reader is not None and writer is not None
        head = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        rec: dict = {"start_ns": _ns(), "first_output_ns": None, "first_content_ns": None,
                     "first_content_sent_ns": None, "end_ns": None, "arrivals_ns": [],
                     "sent_ns": [], "events": 0, "ok": False}
        writer.write(head + body)
        await writer.drain()
        status, headers = await self._head()
        if status != 200 or b"chunked" not in headers.get(b"transfer-encoding", b""):
            rec["error"] = f"HTTP {status}"
            return rec
        arrivals, sent = rec["arrivals_ns"], rec["sent_ns"]
        partial = b""
        done = False
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:  # last chunk: skip trailers up to the blank line
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                break
            data = (await reader.readexactly(size + 2))[:-2]
            t = _ns()
            lines = (partial + data).split(b"\n")
            partial = lines.pop()  # an unterminated line waits for the next chunk
            for line in lines:
                if not line.startswith(b"data:") or done:
                    continue
                payload = line[5:].strip()
                rec["events"] += 1
                if payload == b"[DONE]":
                    rec["end_ns"], rec["ok"], done = t, True, True
                    continue
                chunk = orjson.loads(payload)
                choices = chunk.get("choices")
                if not choices:
                    continue
                delta = choices[0].get("delta") or {}
                content = delta.get("content")
                if content or delta.get("reasoning_content") or delta.get("reasoning"):
                    arrivals.append(t)
                    sent.append(chunk.get("anvil_sent_ns"))
                    if rec["first_output_ns"] is None:
                        rec["first_output_ns"] = t
                    if content and rec["first_content_ns"] is None:
                        rec["first_content_ns"] = t
                        rec["first_content_sent_ns"] = chunk.get("anvil_sent_ns")
        if not done:
            rec["error"] = "stream ended without [DONE]"
        return rec


async def run(args: argparse.Namespace) -> tuple[list[dict], dict]:
    url = urlsplit(args.url)
    if url.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("refclient: only 127.0.0.1 servers")
    path = url.path.rstrip("/")
    path = (path if path.endswith("/v1") else path + "/v1") + "/chat/completions"
    streams = [Stream(url.hostname, url.port or 80, path) for _ in range(args.streams)]
    await asyncio.gather(*(s.connect() for s in streams))
    bodies = [build_body(i, args.prompt_tokens, args.max_tokens) for i in range(args.requests)]
    tickets = itertools.count()
    records: list[dict] = []

    async def user(stream: Stream, k: int) -> None:
        if args.stagger_ms:  # stream k starts k/N of the way into the stagger window
            await asyncio.sleep(args.stagger_ms / 1000 * k / len(streams))
        while (i := next(tickets)) < args.requests:
            records.append(await stream.request(bodies[i]))

    cpu0, wall0 = time.process_time(), _ns()
    await asyncio.gather(*(user(s, k) for k, s in enumerate(streams)))
    cpu_s, load_s = time.process_time() - cpu0, (_ns() - wall0) / 1e9
    for s in streams:
        assert s.writer is not None
        s.writer.close()
    summary = {
        "requests": len(records),
        "failed": sum(1 for r in records if not r["ok"]),
        "events": sum(r["events"] for r in records),
        "cpu_s": cpu_s,
        "load_s": load_s,
        "first_request_ns": min((r["start_ns"] for r in records), default=None),
    }
    return records, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="http://127.0.0.1:PORT[/v1]")
    p.add_argument("--streams", type=int, default=1, help="concurrent streams (connections)")
    p.add_argument("--requests", type=int, default=10, help="requests in all")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--stagger-ms", type=float, default=0.0,
                   help="spread the streams' first requests evenly over this window (0: all "
                   "at once, so every stream's chunks are due in the same instant)")
    p.add_argument("--out", help="write one JSON line per request here")
    args = p.parse_args(argv)
    records, summary = asyncio.run(run(args))
    if args.out:
        with open(args.out, "wb") as f:
            for r in records:
                f.write(orjson.dumps(r) + b"\n")
    print(orjson.dumps(summary).decode(), flush=True)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
