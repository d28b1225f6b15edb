"""`anvil sim --max-running N`: a capacity knee, exact to the scheduler's deadlines.

`Admission` on its own with fake connections (FIFO order, a client leaving the queue, a failed
start freeing its slot, never admitted before its arrival); then the real simulator process
on 127.0.0.1: with two slots and four simultaneous streams, two start prefill at once and the
other two exactly when the first ones end, a client that disconnects while queued gives its
place up, and faults free their slot. The schedulers' logical clock: test_scheduler.py.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.sim.admission import Admission
from anvil_metrics.sim.rawclient import (
    Capture,
    Event,
    Response,
    exchange,
    exchange_many,
    parse_capture,
    request_bytes,
)

MS = 1_000_000
PREFILL_MS, INTERVAL_MS, TOKENS = 40, 2, 30  # a running stream lasts 40 + 29 * 2 = 98 ms
RUN_MS = PREFILL_MS + (TOKENS - 1) * INTERVAL_MS
SLOW_MS = 1000  # a prefill that holds a slot while a test's clients come and go
SLOW_RUN_MS = SLOW_MS + (TOKENS - 1) * INTERVAL_MS
TIMING = ("--prefill-ms", str(PREFILL_MS), "--interval-ms", str(INTERVAL_MS),
          "--reasoning-tokens", "0", "--content-tokens", str(TOKENS), "--stamp-send")  # fmt: skip
RESET_AT = 25  # reset_mid_stream=K: the slot is freed at token chunk K's deadline
PAYLOAD = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}


# -- Admission on its own ------------------------------------------------------------------------


class FakeConn:
    def __init__(self) -> None:
        self.done: Callable[[], None] | None = None
        self.closed = False

    def when_done(self, callback: Callable[[], None]) -> None:
        self.done = callback

    def end(self) -> None:
        """The response ends (or the client goes): what `HttpConnection._settle` does."""
        done, self.done = self.done, None
        if done is not None:
            done()

    def abort(self) -> None:
        self.closed = True
        self.end()


def test_fifo_admission_at_the_release_moment() -> None:
    now = [0]
    adm = Admission(2, lambda: now[0])
    conns = [FakeConn() for _ in range(5)]
    started: list[tuple[int, int]] = []
    for k, conn in enumerate(conns):
        adm.enter(conn, lambda s, k=k: started.append((k, s)), 100 + k)  # type: ignore[arg-type]
    assert started == [(0, 100), (1, 101)]
    assert (adm.running, adm.waiting) == (2, 3)
    now[0] = 500
    conns[1].end()
    assert started[-1] == (2, 500) and (adm.running, adm.waiting) == (2, 2)
    conns[3].end()  # a queued client disconnects: it leaves the queue, takes no slot
    assert (adm.running, adm.waiting) == (2, 1)
    now[0] = 600
    conns[0].end()
    assert started[-1] == (4, 600)
    conns[2].end()
    conns[4].end()
    assert (adm.running, adm.waiting) == (0, 0)
    assert adm.stats() == {"max_running": 2, "running": 0, "waiting": 0}


def test_never_admitted_before_arrival_and_a_failed_start_frees_its_slot() -> None:
    adm = Admission(1, lambda: 50)
    first, second, third = FakeConn(), FakeConn(), FakeConn()
    started: list[int] = []

    def broken(start_ns: int) -> None:
        raise RuntimeError("bug")

    adm.enter(first, started.append, 10)  # type: ignore[arg-type]
    adm.enter(second, broken, 20)  # type: ignore[arg-type]
    adm.enter(third, started.append, 80)  # type: ignore[arg-type]
    first.end()  # second fails to start: aborted, and its slot goes on to third at once
    assert second.closed
    assert started == [10, 80]  # the clock says 50, but third arrived at 80
    assert (adm.running, adm.waiting) == (1, 0)
    with pytest.raises(ValueError, match="max_running"):
        Admission(0, lambda: 0)


# -- the real simulator ---------------------------------------------------------------------------


def port_of(sim: SimProcess) -> int:
    return int(sim.url.rsplit(":", 1)[1])


def token_events(resp: Response) -> list[Event]:
    """Events of token chunks (content or reasoning deltas): no role, usage or [DONE]."""
    out = []
    for e in resp.events:
        if e.chunk and e.chunk["choices"]:
            delta = e.chunk["choices"][0]["delta"]
            if delta.get("content") or delta.get("reasoning_content"):
                out.append(e)
    return out


def tokens(resp: Response) -> list[dict[str, Any]]:
    return [e.chunk for e in token_events(resp) if e.chunk is not None]


def stats(port: int) -> dict[str, Any]:
    _, resp = exchange(port, "/sim/stats", method="GET")
    return orjson.loads(resp.body)


def open_stream(port: int, payload: dict[str, Any] = PAYLOAD) -> tuple[socket.socket, int]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = time.perf_counter_ns()
    sock.sendall(request_bytes("/v1/chat/completions", payload))
    return sock, sent


def read_response(sock: socket.socket) -> Response:
    capture = Capture()
    while not capture.looks_complete():
        try:
            data = sock.recv(65536)
        except ConnectionResetError:  # a reset stream: what came before it
            break
        if not data:
            break
        capture.add(data, time.perf_counter_ns())
    sock.close()
    response = parse_capture(capture)
    assert response is not None
    return response


def wait_for(port: int, want: dict[str, int]) -> None:
    give_up = time.monotonic() + 5
    while time.monotonic() < give_up:
        got = stats(port)["admission"]
        if all(got[k] == v for k, v in want.items()):
            return
        time.sleep(0.005)
    raise AssertionError(f"admission never reached {want}: {got}")


def check_plan(resp: Response, plan_start_ns: int, first_ms: float) -> None:
    """The plan starts (the server's ``anvil-start-ns``) exactly at `plan_start_ns`, and token
    i is written no earlier than `first_ms + i * interval` after it and read by the client
    after the write (its ``anvil_sent_ns``: same host, same clock).

    A stream admitted at once starts at its own t0. A queued one starts when the stream ahead
    frees its slot: at that stream's last deadline (or its reset's), the scheduler's logical
    now, however late the server's process woke for it, so a chain of queued streams never
    drifts (`sim/admission.py`). A start taken from the wrong moment (a slot freed a stream
    late, admitted at arrival or at the late clock) differs, on a busy machine or not: the
    judgement rests on the server's own stamps, never on how late its process woke."""
    start_ns = int(resp.headers["anvil-start-ns"])
    assert start_ns == plan_start_ns, (start_ns - plan_start_ns) / MS
    assert t0_of(resp) <= start_ns
    events = token_events(resp)
    assert len(events) == TOKENS
    for i, e in enumerate(events):
        sent_ns = e.chunk["anvil_sent_ns"]  # type: ignore[index]
        planned_ns = start_ns + round((first_ms + i * INTERVAL_MS) * MS)
        assert e.arrival_ns >= sent_ns >= planned_ns, (i, e.arrival_ns, sent_ns, planned_ns)


def start_of(resp: Response) -> int:
    return int(resp.headers["anvil-start-ns"])


def t0_of(resp: Response) -> int:
    return int(resp.headers["anvil-t0-ns"])


@pytest.mark.e2e
def test_two_slots_four_streams(simulator: Callable[..., SimProcess]) -> None:
    """Two start prefill at once; the other two start exactly when the first ones end."""
    port = port_of(simulator("--max-running", "2", *TIMING))
    results = exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 4)
    assert all(r.status == 200 and r.complete and len(tokens(r)) == TOKENS for _, r in results)
    order = sorted(range(4), key=lambda k: t0_of(results[k][1]))  # FIFO: the first two run
    running, queued = order[:2], order[2:]
    for k in running:
        sent, resp = results[k]
        assert sent < t0_of(resp)
        check_plan(resp, t0_of(resp), PREFILL_MS)
    for k, ahead in zip(queued, running, strict=True):
        # each queued stream starts when the one whose slot it takes ends: at that one's
        # last deadline, a whole running stream after its start
        first = results[ahead][1]
        resp = results[k][1]
        check_plan(resp, start_of(first) + RUN_MS * MS, PREFILL_MS)
        # t0 stays the arrival: stamped at admission it would be the start
        assert t0_of(resp) < start_of(resp)
        # nothing, not even the head, is sent while a request waits
        assert resp.headers_arrival_ns >= start_of(first) + RUN_MS * MS
    assert stats(port)["admission"] == {"max_running": 2, "running": 0, "waiting": 0}


@pytest.mark.e2e
def test_without_the_flag_every_stream_runs_at_once(
    simulator: Callable[..., SimProcess],
) -> None:
    port = port_of(simulator(*TIMING))
    results = exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 4)
    for sent, resp in results:
        assert sent < t0_of(resp)
        check_plan(resp, t0_of(resp), PREFILL_MS)
    assert "admission" not in stats(port)


@pytest.mark.e2e
def test_disconnect_while_queued_gives_up_its_place(
    simulator: Callable[..., SimProcess],
) -> None:
    # a prefill of 1 s holds the slot while the leaver and the stayer come and go (at 40 ms a
    # busy machine could end the running stream first, and nothing would wait)
    port = port_of(simulator("--max-running", "1", *TIMING, "--prefill-ms", str(SLOW_MS)))
    running, _ = open_stream(port)
    wait_for(port, {"running": 1, "waiting": 0})
    leaver, _ = open_stream(port)
    wait_for(port, {"running": 1, "waiting": 1})
    leaver.close()
    wait_for(port, {"running": 1, "waiting": 0})
    stayer, _ = open_stream(port)
    first, second = read_response(running), read_response(stayer)
    assert first.complete and second.complete
    # the stayer took the slot when the running stream ended, not one stream later: its
    # plan starts at the running stream's logical end (the deadline of its last chunk,
    # `sim/admission.py`), judged as every plan is, against the server's own stamps
    check_plan(first, t0_of(first), SLOW_MS)
    check_plan(second, start_of(first) + SLOW_RUN_MS * MS, SLOW_MS)
    wait_for(port, {"running": 0, "waiting": 0})
    _, resp = exchange(port, "/v1/chat/completions", PAYLOAD)  # no slot leaked
    check_plan(resp, t0_of(resp), SLOW_MS)
    _, whole = exchange(port, "/v1/chat/completions", {**PAYLOAD, "stream": False})
    assert whole.status == 200


@pytest.mark.e2e
def test_non_streaming_and_refused_requests_never_wait(
    simulator: Callable[..., SimProcess],
) -> None:
    """A mid-stream reset frees its slot at that moment; an http503 fault and a non-streaming
    request are answered while the only slot is taken."""
    sim = simulator("--max-running", "1", "--fault", f"reset_mid_stream={RESET_AT}@0",
                    "--fault", "http503@1", *TIMING, "--prefill-ms", str(SLOW_MS))  # fmt: skip
    port = port_of(sim)
    doomed, _ = open_stream(port)
    wait_for(port, {"running": 1})
    _, refused = exchange(port, "/v1/chat/completions", PAYLOAD)
    both = exchange_many(port, "/v1/chat/completions", [PAYLOAD, {**PAYLOAD, "stream": False}])
    cut = read_response(doomed)  # up to the reset
    assert not cut.complete
    (_, after), (_, whole) = both
    cut_first_ns = int(token_events(cut)[0].chunk["anvil_sent_ns"])  # type: ignore[index]
    # refused while the slot was held: before the running stream wrote its first token (1 s
    # of prefill; behind it, the answer would come after its reset)
    assert refused.status == 503
    assert refused.headers_arrival_ns < cut_first_ns
    # the whole answer's plan starts at its own arrival, as if no stream ran, and it is
    # written at that plan's end (its own 1 s + 29 tokens), not after the reset
    assert whole.status == 200 and start_of(whole) == t0_of(whole)
    assert whole.headers_arrival_ns >= t0_of(whole) + SLOW_RUN_MS * MS
    # the stream behind the reset starts at token chunk K's deadline
    assert after.complete
    reset_ns = start_of(cut) + (SLOW_MS + RESET_AT * INTERVAL_MS) * MS
    check_plan(after, reset_ns, SLOW_MS)
    wait_for(port, {"running": 0, "waiting": 0})


@pytest.mark.e2e
def test_bursts_queue_too(simulator: Callable[..., SimProcess]) -> None:
    port = port_of(simulator("--max-running", "1", "--burst", "5", *TIMING))
    results = sorted((r for _, r in exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 2)),
                     key=start_of)  # fmt: skip
    first, second = results
    assert start_of(first) == t0_of(first)
    # the second's plan starts when the first's slot is freed: at its last burst's deadline,
    # the first's planned end, however late the server's process woke for it
    assert start_of(second) == start_of(first) + RUN_MS * MS
    assert t0_of(second) < start_of(second)
    for resp in results:
        # each burst of 5 leaves with its last token, never before that token's deadline
        chunks = tokens(resp)
        assert len(chunks) == TOKENS
        for b in range(0, TOKENS, 5):
            due_ns = start_of(resp) + (PREFILL_MS + (b + 4) * INTERVAL_MS) * MS
            assert min(c["anvil_sent_ns"] for c in chunks[b:b + 5]) >= due_ns, b
