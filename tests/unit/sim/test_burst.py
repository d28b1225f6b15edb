"""`anvil sim --burst N`: the same bytes as token by token, N token chunks per write, on time.

Unit tests drive `BurstChatStream` and the plain `ChatStream` with a fake connection, a fake
scheduler and a fake clock, and compare what they write; one end-to-end test checks the
real process on 127.0.0.1 (framing, completeness, no chunk before its deadline).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import DoneCallbacks
from simfork import start_simulator
from simwire import FakeClock, FakeScheduler

from anvil_metrics.sim import burst as burst_module
from anvil_metrics.sim import chat as chat_module
from anvil_metrics.sim.burst import BurstChatStream
from anvil_metrics.sim.chat import ChatStream
from anvil_metrics.sim.chatrequest import ChatRequest, OutputPlan
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import STREAM_END
from anvil_metrics.sim.ledger import Ledger
from anvil_metrics.sim.rawclient import exchange
from anvil_metrics.sim.server import App

MS = 1_000_000
T0 = 1_000 * MS
_ID = re.compile(rb"chatcmpl-[0-9a-f]{32}")
_CREATED = re.compile(rb'"created":\d+')
_STAMP = re.compile(rb'"anvil_sent_ns":\d+,')


class FakeConn(DoneCallbacks):
    """Records every write with the fake time it happened at; runs the `when_done`
    callbacks (the ledger's running count) when the response ends, as the real one does."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.closed = False
        self.writes: list[tuple[int, bytes]] = []
        self.ended = False

    def write(self, data: bytes) -> None:
        self.writes.append((self.clock.now, data))

    def stream_head(self, content_type: str = "", extra: Any = ()) -> bytes:
        return b"HTTP/1.1 200 OK\r\n%s\r\n\r\n" % repr(tuple(extra)).encode()

    def stream_end(self, last: bytes = b"") -> None:
        self.write(last + STREAM_END)
        self.ended = True
        self.settle()

    def abort(self) -> None:
        self.closed = True
        self.settle()


def run_stream(
    cfg: SimConfig,
    reasoning: int,
    content: int,
    include_usage: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> FakeConn:
    clock = FakeClock()
    clock.now = T0
    monkeypatch.setattr(burst_module, "_monotonic_ns", clock)
    conn, sched = FakeConn(clock), FakeScheduler(clock)
    request = ChatRequest(
        prompt_tokens=10,
        max_tokens=None,
        stream=True,
        include_usage=include_usage,
        ignore_eos=False,
        min_tokens=0,
        thinking=True,
    )
    plan = OutputPlan(reasoning, content, "stop")
    make = BurstChatStream if cfg.burst > 1 else ChatStream
    stream = make(conn, sched, cfg, request, plan, T0)  # type: ignore[arg-type]
    stream.start()
    sched.run()
    assert conn.ended
    return conn


def normalised(data: bytes) -> bytes:
    data = _ID.sub(b"chatcmpl-ID", data)
    data = _CREATED.sub(b'"created":0', data)
    return _STAMP.sub(b'"anvil_sent_ns":0,', data)


def http_chunks(write: bytes) -> list[bytes]:
    """The HTTP chunks (payloads) of one write, after any response head."""
    head_end = write.find(b"\r\n\r\n")
    pos = head_end + 4 if write.startswith(b"HTTP/1.1") else 0
    out = []
    while pos < len(write):
        line_end = write.index(b"\r\n", pos)
        size = int(write[pos:line_end], 16)
        if size == 0:
            assert write[line_end:] == b"\r\n\r\n"
            break
        out.append(write[line_end + 2 : line_end + 2 + size])
        pos = line_end + 2 + size + 2
    return out


def token_deadline(cfg: SimConfig, i: int) -> int:
    return T0 + cfg.prefill_ns(10) + i * cfg.interval_ns


SHAPES = [  # (reasoning, content)
    (0, 0),
    (0, 1),
    (1, 0),
    (2, 3),
    (5, 7),
    (16, 48),
    (31, 70),
]


@pytest.mark.parametrize("burst", [1, 4])
def test_the_ledger_sees_each_stream_once(burst: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token by token or in bursts, a stream is admitted, reaches its first token and ends
    once each in the server's own counts (`ledger.py`), and stops counting as running."""
    tel = Ledger()
    for module in (chat_module, burst_module):
        monkeypatch.setattr(module, "LEDGER", tel)
    cfg = SimConfig(burst=burst, spec_k=2)
    run_stream(cfg, 3, 7, True, monkeypatch)
    s = tel.snapshot(waiting=0, waiting_max=0, kv_capacity_tokens=100, spec_k=2)
    assert (s.queue_time.count, s.ttft.count, s.e2e.count) == (1, 1, 1)
    assert (s.prompt_tokens, s.generation_tokens, s.running, s.running_max) == (10, 10, 0, 1)
    assert s.spec.drafts + s.spec.accepted_tokens == 10 - 1


@pytest.mark.parametrize("burst", [2, 3, 4, 16, 40])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"stamp_send": True},
        {"role_chunk": "with-first-token"},
        {"usage_in_finish_chunk": True, "no_done": True},
        {"reasoning_field": "reasoning", "stamp_send": True},
    ],
)
@pytest.mark.parametrize("include_usage", [True, False])
def test_same_bytes_fewer_writes_never_early(
    burst: int,
    shape: tuple[int, int],
    variant: dict[str, Any],
    include_usage: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reasoning, content = shape
    total = reasoning + content
    base = SimConfig(prefill_ms=20, interval_ms=5, **variant)
    cfg = SimConfig(prefill_ms=20, interval_ms=5, burst=burst, **variant)
    plain = run_stream(base, reasoning, content, include_usage, monkeypatch)
    bursty = run_stream(cfg, reasoning, content, include_usage, monkeypatch)

    # the same bytes on the wire (ids, created and stamps aside)
    assert normalised(b"".join(w for _, w in bursty.writes)) == normalised(
        b"".join(w for _, w in plain.writes)
    )

    # one write per burst (plus the head and role chunk when they go out at once)
    bursts = max(1, -(-total // burst))
    immediate = cfg.role_chunk == "immediate"
    assert len(bursty.writes) == bursts + immediate

    # each write holds whole HTTP chunks; token chunks never leave before their deadline,
    # and each burst leaves exactly at its last token's deadline (the fake clock is exact)
    token_writes = bursty.writes[1:] if immediate else bursty.writes
    i = 0
    for k, (at, data) in enumerate(token_writes):
        chunks = http_chunks(data)
        tokens = [c for c in chunks if b'"delta":{"' in c and b'"role"' not in c]
        last = min((k + 1) * burst, total) - 1
        assert at == token_deadline(cfg, max(last, 0))
        for _ in tokens:
            assert at >= token_deadline(cfg, i)
            i += 1
        if cfg.stamp_send:
            assert all(b'"anvil_sent_ns":' in c for c in chunks if c != b"data: [DONE]\n\n")
    assert i == total


def test_prefill_done_fire_waits_for_the_first_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefix cache's `PrefillDone` fires the stream at the prefill deadline: the first
    burst must still wait for its own last token's deadline."""
    clock = FakeClock()
    monkeypatch.setattr(burst_module, "_monotonic_ns", clock)
    cfg = SimConfig(prefill_ms=20, interval_ms=5, burst=4, role_chunk="with-first-token")
    conn, sched = FakeConn(clock), FakeScheduler(clock)
    request = ChatRequest(10, None, True, False, False, 0, True)
    stream = BurstChatStream(conn, sched, cfg, request, OutputPlan(0, 10, "stop"), T0)  # type: ignore[arg-type]
    clock.now = T0 + 20 * MS  # the prefill deadline
    stream.fire()
    assert conn.writes == []
    assert sched.heap[0][0] == T0 + 20 * MS + 3 * 5 * MS


def test_burst_wiring() -> None:
    class Loop:
        pass

    one = App(SimConfig(), FakeScheduler(FakeClock()), Loop())  # type: ignore[arg-type]
    many = App(SimConfig(burst=3), FakeScheduler(FakeClock()), Loop())  # type: ignore[arg-type]
    assert one.make_stream is ChatStream  # --burst 1: exactly today's token-by-token path
    assert many.make_stream is BurstChatStream


@pytest.mark.e2e
def test_real_simulator_bursts() -> None:
    """The real process: complete, one SSE event per HTTP chunk, no token before its time,
    and the tokens of one burst arrive together."""
    args = ["--prefill-ms", "20", "--interval-ms", "2", "--reasoning-tokens", "3",
            "--content-tokens", "20", "--burst", "5", "--stamp-send"]  # fmt: skip
    with start_simulator(args) as sim:
        port = int(sim.url.rsplit(":", 1)[1])
        payload = {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        _, resp = exchange(port, "/v1/chat/completions", payload)
    assert resp.status == 200 and resp.complete
    t0 = int(resp.headers["anvil-t0-ns"])
    tokens = [e for e in resp.events if e.chunk and e.chunk["choices"]][1:]
    assert len(tokens) == 23
    for i, event in enumerate(tokens):
        assert event.chunk is not None
        assert event.chunk["anvil_sent_ns"] >= t0 + 20 * MS + i * 2 * MS
    for k in range(0, 23, 5):
        group = tokens[k : k + 5]
        assert len({e.arrival_ns for e in group}) <= 2  # one write; a recv may split it
    assert resp.events[-1].data == b"[DONE]"
