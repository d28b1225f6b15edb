"""The simulator in process, without a socket: a real `HttpConnection` on a fake transport, a
fake clock and a scheduler that fires in deadline order (tests/unit/sim).

Why: the chat, fault, Responses and routing modules write their answers through an
`HttpConnection`; checking those bytes needs neither a process nor a port, and with a fake
clock every write's moment is its deadline exactly, so timing is checked without a
wall-clock figure. The bytes are parsed back with `sim.rawclient`, the simulator's own
yardstick.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import Handler, HttpConnection
from anvil_metrics.sim.rawclient import Capture, Response, parse_capture, request_bytes
from anvil_metrics.sim.server import App


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class FakeScheduler:
    """Fires items in deadline order, moving the fake clock to each deadline."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.heap: list[tuple[int, int, Any]] = []
        self.seq = itertools.count()

    def at(self, deadline_ns: int, item: Any) -> None:
        heapq.heappush(self.heap, (deadline_ns, next(self.seq), item))

    def now_ns(self) -> int:
        return self.clock.now

    def run(self) -> None:
        while self.heap:
            deadline, _, item = heapq.heappop(self.heap)
            self.clock.now = max(self.clock.now, deadline)
            item.fire()

    def close(self) -> None:
        pass


class FakeTransport(asyncio.Transport):
    """Records each write with the fake time it happened at; close and abort are flags."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.writes: list[tuple[int, bytes]] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append((self.clock.now, bytes(data)))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0  # every write is taken at once

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def sent(self) -> bytes:
        return b"".join(data for _, data in self.writes)


class NowIntake:
    """An `Intake` that handles each received request at once."""

    def push(self, conn: HttpConnection) -> None:
        conn.process_received()


class Wire:
    """One client connection to `handler` (default: an `App` of `cfg`), in process."""

    def __init__(self, handler: Handler | None = None, cfg: SimConfig | None = None) -> None:
        self.clock = FakeClock()
        self.sched = FakeScheduler(self.clock)
        self.transport = FakeTransport(self.clock)
        self.app: App | None = None
        if handler is None:
            self.app = App(cfg or SimConfig(), self.sched, NowIntake())  # type: ignore[arg-type]
            handler = self.app.handle
        self.conn = HttpConnection(handler, NowIntake())  # type: ignore[arg-type]
        self.conn.connection_made(self.transport)

    def send(self, data: bytes) -> None:
        self.conn.data_received(data)

    def response(self) -> Response:
        """The response written so far, parsed, each event stamped with its write's time."""
        capture = Capture()
        for at, data in self.transport.writes:
            capture.add(data, at)
        response = parse_capture(capture)
        assert response is not None, self.transport.writes
        return response

    def post(self, path: str, payload: Any = None, method: str = "POST") -> bytes:
        """Send one request and run the scheduler dry; the bytes written since, unparsed.
        The fake clock starts again from 0: a request after another is timed on its own."""
        before = len(self.transport.writes)
        self.clock.now = 0
        self.send(request_bytes(path, payload, method))
        self.sched.run()
        return b"".join(data for _, data in self.transport.writes[before:])

    def ask(self, path: str, payload: Any = None, method: str = "POST") -> Response:
        """`post`, and the response parsed (one SSE ``data:`` event per chunk expected)."""
        self.post(path, payload, method)
        return self.response()


def http_chunks(sent: bytes) -> list[bytes]:
    """Every HTTP chunk of a chunked response, framing included (a fault may not be JSON)."""
    pos, out = sent.index(b"\r\n\r\n") + 4, []
    while pos < len(sent):
        size = int(sent[pos : sent.index(b"\r\n", pos)], 16)
        end = sent.index(b"\r\n", pos) + 2 + size + 2
        out.append(sent[pos:end])
        pos = end
    return out
