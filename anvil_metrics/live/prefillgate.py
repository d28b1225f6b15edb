"""The prefill gate (`--prefill-concurrency N`): at most N requests of this load process
between their send and their first token at once, as AIPerf's `--prefill-concurrency`.

Why a gate of its own rather than fewer users: with N users the run would also cap the
streams decoding; the gate caps only the prefill phase, so a disaggregated server's
prefill side can be held at a chosen queue depth while decode runs as many as the users
give it. Why per load process: a gate shared by `--processes` workers would cost a round
trip to the master before every send and at every first token; each process gates its own
requests, so P processes let up to P × N through at once (the README says so).

A request waits here before it is sent; its wait goes into the record (`extra.
prefill_gate_wait_ns`, the row's `prefill_gate_wait_ms`). The client stamps the request's
start just before writing it, after the gate, so TTFT leaves the wait out; a due time (an
open loop's arrival) is before the gate, so `schedule_lag_ms` and the from-due figures hold
it. The slot is freed at the first output token, or when the request ends without one
(failed, cancelled, stopped): `Slot.release` is idempotent and the user calls it in its
`finally`, so no path leaks one.
"""

from __future__ import annotations

import time

from gevent.lock import Semaphore

from anvil_metrics.wire.observe import StreamObserver


class Slot:
    """One request's place in the gate, freed once (at its first token or its end)."""

    __slots__ = ("_gate", "_held")

    def __init__(self, gate: Semaphore) -> None:
        self._gate = gate
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._gate.release()


class PrefillGate:
    """At most `limit` requests of this process between send and first token."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sem = Semaphore(limit)

    @property
    def free(self) -> int:
        """Slots free now (for tests and the log)."""
        return self._sem.counter

    def admit(self, obs: StreamObserver) -> Slot:
        """Wait for a slot for `obs`'s request (killable: a stop while waiting takes none);
        record the wait in its `extra` and free the slot at its first output token."""
        t0 = time.perf_counter_ns()
        self._sem.acquire()
        slot = Slot(self._sem)
        obs.gated(time.perf_counter_ns() - t0, slot.release)
        return slot


def gate_of(limit: int | None) -> PrefillGate | None:
    """The process's gate for a scenario's `prefill_concurrency` (None: no gate)."""
    return None if limit is None else PrefillGate(limit)
