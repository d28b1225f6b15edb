"""`anvil sim --max-running N`: a capacity knee, exact to the scheduler's deadlines.

`Admission` on its own with fake connections (FIFO order, a client leaving the queue, a failed
start freeing its slot, never admitted before its arrival); then the real simulator process
on 127.0.0.1: with two slots and four simultaneous streams, two start prefill at once and the
other two exactly when the first ones end, a client that disconnects while queued gives its
place up, and faults free their slot. The schedulers' logical clock: test_scheduler.py.
"""

from __future__ import annotations

import socket
import statistics
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
TIMING = ("--prefill-ms", str(PREFILL_MS), "--interval-ms", str(INTERVAL_MS),
          "--reasoning-tokens", "0", "--content-tokens", str(TOKENS), "--stamp-send")  # fmt: skip
RESET_AT = 25  # reset_mid_stream=K: the slot is freed at token chunk K's deadline
TOLERANCE_MS = 5.0  # client-side slack: loopback, a shared 2-CPU machine
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
        data = sock.recv(65536)
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


def check_plan(resp: Response, origin_ns: int, first_ms: float) -> None:
    """Token i arrives `first_ms + i * interval` after `origin_ns` (a client stamp taken before
    the server's t0): never earlier, and within a few ms at the median (a multi-ms stall of
    this shared VM may delay a few chunks; later deadlines are absolute, so they catch up)."""
    errors = [
        (e.arrival_ns - origin_ns) / MS - (first_ms + i * INTERVAL_MS)
        for i, e in enumerate(token_events(resp))
    ]
    assert len(errors) == TOKENS and min(errors) >= 0, errors
    assert statistics.median(errors) < TOLERANCE_MS, errors


def check_sent(resp: Response, start_ns: int) -> None:
    """Server stamps: token i written at or after ``start + prefill + i * interval``, and the
    earliest lateness well under a ms: the plan starts exactly at `start_ns`."""
    late = [
        chunk["anvil_sent_ns"] - (start_ns + (PREFILL_MS + i * INTERVAL_MS) * MS)
        for i, chunk in enumerate(tokens(resp))
    ]
    assert min(late) >= 0 and min(late) < MS, late


@pytest.mark.e2e
def test_two_slots_four_streams(simulator: Callable[..., SimProcess]) -> None:
    """Two start prefill at once; the other two start exactly when the first ones end."""
    port = port_of(simulator("--max-running", "2", *TIMING))
    results = exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 4)
    assert all(r.status == 200 and r.complete and len(tokens(r)) == TOKENS for _, r in results)

    def t0(k: int) -> int:
        return int(results[k][1].headers["anvil-t0-ns"])

    order = sorted(range(4), key=t0)  # FIFO: the first two to arrive run, the others wait
    running, queued = order[:2], order[2:]
    for k in running:
        check_plan(results[k][1], results[k][0], PREFILL_MS)
        check_sent(results[k][1], t0(k))
    for k, ahead in zip(queued, running, strict=True):
        # each queued stream starts when the one whose slot it takes ends: its time to first
        # token, from that one's send, is a whole running stream plus its own prefill
        check_plan(results[k][1], results[ahead][0], RUN_MS + PREFILL_MS)
        check_sent(results[k][1], t0(ahead) + RUN_MS * MS)
        assert t0(k) < t0(running[0]) + 5 * MS  # t0 stays the arrival, with the others
        # nothing, not even the head, is sent while a request waits
        assert results[k][1].headers_arrival_ns - results[running[0]][0] >= RUN_MS * MS
    assert stats(port)["admission"] == {"max_running": 2, "running": 0, "waiting": 0}


@pytest.mark.e2e
def test_without_the_flag_every_stream_runs_at_once(
    simulator: Callable[..., SimProcess],
) -> None:
    port = port_of(simulator(*TIMING))
    results = exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 4)
    for sent, resp in results:
        check_plan(resp, sent, PREFILL_MS)
    assert "admission" not in stats(port)


@pytest.mark.e2e
def test_disconnect_while_queued_gives_up_its_place(
    simulator: Callable[..., SimProcess],
) -> None:
    port = port_of(simulator("--max-running", "1", *TIMING))
    running, t_run = open_stream(port)
    wait_for(port, {"running": 1, "waiting": 0})
    leaver, _ = open_stream(port)
    wait_for(port, {"running": 1, "waiting": 1})
    leaver.close()
    wait_for(port, {"running": 1, "waiting": 0})
    stayer, _ = open_stream(port)
    first, second = read_response(running), read_response(stayer)
    assert first.complete and second.complete
    # the stayer took the slot when the running stream ended, not one stream later
    check_plan(second, t_run, RUN_MS + PREFILL_MS)
    wait_for(port, {"running": 0, "waiting": 0})
    sent, resp = exchange(port, "/v1/chat/completions", PAYLOAD)  # no slot leaked
    check_plan(resp, sent, PREFILL_MS)
    _, whole = exchange(port, "/v1/chat/completions", {**PAYLOAD, "stream": False})
    assert whole.status == 200


@pytest.mark.e2e
def test_non_streaming_and_refused_requests_never_wait(
    simulator: Callable[..., SimProcess],
) -> None:
    """A mid-stream reset frees its slot at that moment; an http503 fault and a non-streaming
    request are answered while the only slot is taken."""
    sim = simulator("--max-running", "1", "--fault", f"reset_mid_stream={RESET_AT}@0",
                    "--fault", "http503@1", *TIMING)  # fmt: skip
    port = port_of(sim)
    doomed, t_doomed = open_stream(port)
    wait_for(port, {"running": 1})
    sent, refused = exchange(port, "/v1/chat/completions", PAYLOAD)
    assert refused.status == 503
    assert (time.perf_counter_ns() - sent) / MS < PREFILL_MS
    both = exchange_many(port, "/v1/chat/completions", [PAYLOAD, {**PAYLOAD, "stream": False}])
    doomed.close()
    (_, after), (sent, whole) = both
    assert whole.status == 200  # its own full duration; behind the running one: >= 170 ms
    assert RUN_MS <= (whole.headers_arrival_ns - sent) / MS < RUN_MS + 30
    assert after.complete
    reset_ms = PREFILL_MS + RESET_AT * INTERVAL_MS  # token chunk K's deadline: the reset
    check_plan(after, t_doomed, reset_ms + PREFILL_MS)
    wait_for(port, {"running": 0, "waiting": 0})


@pytest.mark.e2e
def test_bursts_queue_too(simulator: Callable[..., SimProcess]) -> None:
    port = port_of(simulator("--max-running", "1", "--burst", "5", *TIMING))
    results = exchange_many(port, "/v1/chat/completions", [PAYLOAD] * 2)
    firsts = sorted(tokens(r)[0]["anvil_sent_ns"] for _, r in results)
    t0 = min(int(r.headers["anvil-t0-ns"]) for _, r in results)
    burst_ms = PREFILL_MS + 4 * INTERVAL_MS  # the first burst leaves with token 4
    assert firsts[0] - t0 >= burst_ms * MS
    assert firsts[1] - t0 >= (RUN_MS + burst_ms) * MS
    assert firsts[1] - t0 < (RUN_MS + burst_ms + 2) * MS
