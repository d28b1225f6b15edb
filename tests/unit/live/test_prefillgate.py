"""The prefill gate: at most N requests between send and first token; a slot freed at the
first output token, or at the request's end (failed, cancelled) if none came; never twice,
never leaked; the wait recorded in the request's `extra`."""

from __future__ import annotations

import gevent

from anvil_metrics.live.prefillgate import PrefillGate, gate_of
from anvil_metrics.wire.observe import StreamObserver


def _obs(i: int, seen: list[int] | None = None) -> StreamObserver:
    def fired(o: StreamObserver, t_ns: int) -> None:
        if seen is not None:
            seen.append(o.request_index)
    return StreamObserver(i, 0, on_first_output=fired, extra={"turn": 1})


def test_no_limit_no_gate() -> None:
    assert gate_of(None) is None and gate_of(3).limit == 3


def test_the_third_waits_for_a_first_token_and_its_wait_is_recorded() -> None:
    gate, seen = PrefillGate(2), []
    a, b, c = _obs(0, seen), _obs(1, seen), _obs(2, seen)
    slots = [gate.admit(a), gate.admit(b)]
    assert gate.free == 0 and a.extra == {"turn": 1, "prefill_gate_wait_ns": a.extra[
        "prefill_gate_wait_ns"]}
    waiter = gevent.spawn(gate.admit, c)
    gevent.sleep(0.02)
    assert not waiter.ready()  # two in prefill: the third is held
    a.on_first_output(a, 1)  # a's first token frees its slot; the observer's own hook runs
    slot_c = waiter.get(timeout=1)
    assert seen == [0] and c.extra["prefill_gate_wait_ns"] >= 15_000_000
    assert b.extra["prefill_gate_wait_ns"] < c.extra["prefill_gate_wait_ns"]
    slots[0].release()  # a's end, after its first token: not released twice
    assert gate.free == 0
    for s in (slots[1], slot_c):  # b failed, c was cancelled: their ends free them
        s.release()
        s.release()
    assert gate.free == 2


def test_a_request_stopped_while_waiting_takes_no_slot() -> None:
    gate = PrefillGate(1)
    held = gate.admit(_obs(0))
    waiter = gevent.spawn(gate.admit, _obs(1))
    gevent.sleep(0.01)
    waiter.kill(block=True)  # the run stopped while it waited at the gate
    assert gate.free == 0
    held.release()
    assert gate.free == 1  # nothing leaked: the next one goes through at once
    gate.admit(_obs(2)).release()
    assert gate.free == 1


def test_a_request_without_a_hook_or_extra_is_gated_too() -> None:
    gate = PrefillGate(1)
    obs = StreamObserver(5, 0)
    slot = gate.admit(obs)
    assert set(obs.extra) == {"prefill_gate_wait_ns"}
    obs.on_first_output(obs, 1)
    assert gate.free == 1
    slot.release()
    assert gate.free == 1
