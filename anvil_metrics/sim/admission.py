"""``--max-running N``: at most N streams run at once, the rest wait their turn in FIFO order.

Why: a real server runs a bounded batch (vLLM's ``--max-num-seqs``, SGLang's
``--max-running-requests``) and queues the requests beyond it, so past its capacity the
waiting shows up in the client's time to first token. Without a limit the simulator serves
every stream at once and no load can saturate it; with one, it has a capacity knee that load
tests (open-loop arrival rates, ``anvil capacity``) can find, exactly and reproducibly.

Rules:

- Only streaming chat completions are admitted through here; non-streaming requests, refused
  ones (validation errors, injected http*/reset faults) and every other endpoint never wait
  and never hold a slot.
- A request arriving while N streams run joins the back of the queue. It holds a slot from its
  admission until its response ends: the last chunk (or terminator) written, the client gone,
  or the connection dropped by a fault or an error (`HttpConnection.when_done`). A client that
  disconnects while queued leaves the queue without ever taking a slot.
- The freed slot goes to the oldest waiting request at once, and that request's whole plan
  (response head, prefill, every token deadline) starts from that moment, so its wait adds to
  its time to first token exactly and nothing else changes. The moment is the scheduler's
  logical now (`Scheduler.now_ns`): the deadline of the chunk that ended the running stream,
  not the possibly late clock, so a chain of queued requests never drifts; never earlier than
  the request's own arrival.
- t0 keeps its meaning: the request's arrival (``anvil-t0-ns`` with ``--stamp-send``). The
  queue wait lies between t0 and the start of the prefill; a request admitted at once starts
  at t0, exactly as without ``--max-running``.
"""

from __future__ import annotations

import sys
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from anvil_metrics.sim.httpproto import HttpConnection

Begin = Callable[[int], None]  # starts a stream whose plan begins at the given monotonic ns


@dataclass(slots=True)
class _Waiting:
    """One queued request; `gone` once admitted or its client disconnected."""

    conn: HttpConnection
    begin: Begin
    t0_ns: int
    gone: bool = False


class Admission:
    """The running slots and the FIFO queue of one simulator (see the module docstring)."""

    def __init__(self, limit: int, clock: Callable[[], int]) -> None:
        if limit < 1:
            raise ValueError(f"max_running must be >= 1, got {limit}")
        self.limit = limit
        self._clock = clock
        self._queue: deque[_Waiting] = deque()
        self.running = 0  # streams holding a slot
        self.waiting = 0  # queued requests whose client is still there
        self.waiting_max = 0  # the most ever queued at once (``vllm:num_requests_waiting``)

    def enter(self, conn: HttpConnection, begin: Begin, t0_ns: int) -> None:
        """Start `begin` at `t0_ns` if a slot is free, else queue it behind the others."""
        if self.running < self.limit:
            self._run(conn, begin, t0_ns)
            return
        entry = _Waiting(conn, begin, t0_ns)
        self._queue.append(entry)
        self.waiting += 1
        self.waiting_max = max(self.waiting_max, self.waiting)
        conn.when_done(lambda: self._leave(entry))  # a no-op once admitted

    def _leave(self, entry: _Waiting) -> None:
        """The queued client disconnected: it no longer waits (dropped lazily from the deque)."""
        if not entry.gone:
            entry.gone = True
            self.waiting -= 1

    def _run(self, conn: HttpConnection, begin: Begin, start_ns: int) -> None:
        self.running += 1
        conn.when_done(self._release)
        try:
            begin(start_ns)
        except Exception:  # a bug fails this request (freeing its slot), not the one ending
            traceback.print_exc(file=sys.stderr)
            conn.abort()

    def _release(self) -> None:
        """A running stream ended: give its slot to the oldest request still waiting."""
        self.running -= 1
        while self._queue and self.running < self.limit:
            entry = self._queue.popleft()
            if entry.gone:
                continue
            entry.gone = True
            self.waiting -= 1
            self._run(entry.conn, entry.begin, max(self._clock(), entry.t0_ns))

    def stats(self) -> dict[str, int]:
        """For ``GET /sim/stats``: the limit, streams running, requests waiting."""
        return {"max_running": self.limit, "running": self.running, "waiting": self.waiting}
