"""The reference SSE parser anvil's `sse.EventSplitter` is held to: sseclient-py fed one
`\n`-terminated line at a time (tests, and `benchmarks/sse_parsers.py`).

Why under tests/: it is an oracle, not a part of the measuring path; the splitter replaced
it there because it cost two thirds of the client's CPU per event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from sseclient import SSEClient

ReadLine = Callable[[], bytes]

_perf_ns = time.perf_counter_ns


class LineSource:
    """Iterator of byte lines from `readline`, stamping each; ends at the first b"".

    `bytes_read` counts the body bytes seen (for Locust's response_length).
    """

    __slots__ = ("_readline", "_clock", "last_line_ns", "bytes_read", "eof")

    def __init__(self, readline: ReadLine, clock: Callable[[], int] = _perf_ns) -> None:
        self._readline = readline
        self._clock = clock
        self.last_line_ns = 0
        self.bytes_read = 0
        self.eof = False

    def __iter__(self) -> Iterator[bytes]:
        readline = self._readline
        clock = self._clock
        while True:
            line = readline()
            self.last_line_ns = clock()
            if not line:
                self.eof = True
                return
            self.bytes_read += len(line)
            yield line

    def close(self) -> None:  # sseclient-py's SSEClient.close() calls this
        pass


def iter_events(source: LineSource) -> Iterator[str]:
    """Yield the `data` payload of each SSE event (multi-line data joined by newlines).

    Comments, `event:`/`id:`/`retry:`-only events and events without data are skipped by
    sseclient-py, as the SSE specification says.
    """
    for event in SSEClient(source).events():
        yield event.data


def lines_from_bytes(chunks: list[bytes]) -> ReadLine:
    """A `readline` over arbitrary byte chunks (tests, replays): returns one line ending in
    b"\\n" at a time, then the unterminated remainder, then b""."""
    buf = bytearray()
    it = iter(chunks)

    def readline() -> bytes:
        while True:
            i = buf.find(b"\n")
            if i >= 0:
                line = bytes(buf[: i + 1])
                del buf[: i + 1]
                return line
            nxt = next(it, None)
            if nxt is None:
                rest = bytes(buf)
                buf.clear()
                return rest
            buf.extend(nxt)

    return readline
