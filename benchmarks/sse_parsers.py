"""The SSE parse step alone: sseclient-py (the reference) against `EventSplitter` (the hot
path), on the same stream of chat-completion chunks, in this process.

What it answers: what the issue asks the note to give when the splitter replaces
sseclient-py on the hot path — both figures. Each path turns body bytes into event
payloads and hands every payload to `orjson.loads`, as the client does:

- sseclient-py, fed one `\\n`-terminated line at a time (`tests/sseref.py`'s `LineSource` over a
  `readline`, the only way it does not delay events), as anvil's first client did;
- `EventSplitter.feed`, one block per event (a server pacing tokens: each `recv` brings
  one event);
- `EventSplitter.feed`, 16 events per block (a server sending bursts, as `anvil sim
  --burst 16`).

The stream is what `anvil sim` sends for a reasoning model: a role chunk, reasoning deltas,
content deltas, a finish chunk, a usage chunk and `[DONE]`, repeated. It prints µs per
event (the best of `--repeat` passes, CPU time) and events per CPU-second for each path.
The parse step is only part of the client's work per event (`capacity.py` measures all of
it); this isolates the part the choice of parser changes.

    .venv/bin/python benchmarks/sse_parsers.py [--events 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the reference parser

from sseref import LineSource, iter_events, lines_from_bytes  # noqa: E402

from anvil_metrics.wire.sse import EventSplitter  # noqa: E402

WORDS = ("the", "model", "weighs", "each", "token", "before", "it", "answers", "with", "care")


def stream_events(n: int) -> list[bytes]:
    """`n` SSE events as `anvil sim` writes them (one `data:` line each, a blank line after),
    in requests of 16 reasoning + 48 content deltas with their role, finish, usage and
    [DONE] events."""
    head = (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,'
            b'"model":"sim","choices":[{"index":0,"delta":')
    out: list[bytes] = []
    i = 0
    while len(out) < n:
        out.append(b'data: ' + head + b'{"role":"assistant","content":""},'
                   b'"finish_reason":null}]}\n\n')
        for j in range(64):
            word = orjson.dumps(" " + WORDS[(i + j) % len(WORDS)])
            field = b'"reasoning_content"' if j < 16 else b'"content"'
            out.append(b"data: " + head + b"{" + field + b":" + word + b'},'
                       b'"finish_reason":null}]}\n\n')
        out.append(b"data: " + head + b'{},"finish_reason":"stop"}]}\n\n')
        out.append(b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],'
                   b'"usage":{"prompt_tokens":1024,"completion_tokens":64,"total_tokens":1088}}'
                   b'\n\n')
        out.append(b"data: [DONE]\n\n")
        i += 1
    return out[:n]


def via_sseclient(events: list[bytes]) -> int:
    done = 0
    for payload in iter_events(LineSource(lines_from_bytes(events))):
        if payload != "[DONE]":
            orjson.loads(payload)
        done += 1
    return done


def via_splitter(blocks: list[bytes]) -> int:
    splitter = EventSplitter()
    done = 0
    for block in blocks:
        for payload in splitter.feed(block):
            if payload != b"[DONE]" and payload != "[DONE]":
                orjson.loads(payload)
            done += 1
    return done


def best_us(fn: Callable[[list[bytes]], int], data: list[bytes], n: int, repeat: int) -> float:
    """The best CPU time of `repeat` passes, in µs per event (each pass must see all `n`)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        got = fn(data)
        best = min(best, time.process_time() - t0)
        if got != n:
            raise SystemExit(f"{fn.__name__} returned {got} events of {n}")
    return best / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    if a.events < 1 or a.repeat < 1:
        ap.error(f"--events and --repeat must be 1 or more, got {a.events} and {a.repeat}")
    events = stream_events(a.events)
    bursts = [b"".join(events[i:i + 16]) for i in range(0, len(events), 16)]
    print(f"{a.events:,} events ({sum(map(len, events)) / len(events):.0f} bytes each on "
          f"average), best of {a.repeat} passes, CPU time; each payload parsed by orjson")
    rows = [
        ("sseclient-py, one line per read", best_us(via_sseclient, events, a.events, a.repeat)),
        ("EventSplitter, one event per read", best_us(via_splitter, events, a.events, a.repeat)),
        ("EventSplitter, 16 events per read", best_us(via_splitter, bursts, a.events, a.repeat)),
    ]
    ref = rows[0][1]
    for name, us in rows:
        print(f"  {name:<36}{us:>7.2f} µs/event{1e6 / us:>12,.0f} events per CPU-second"
              f"{ref / us:>7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
