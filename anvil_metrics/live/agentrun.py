"""One agent job replayed: its sessions in order, its sub-agents beside them, its waits.

Why a module apart from the Locust user: the order of a job's requests is the replay's
whole truth (a child's first request after its spawn turn's answer, a joined parent turn
after all its children's last answers, background children blocking nothing, a tool
result after its tool's recorded time), and it must be testable without a server. So the
runner knows nothing of HTTP: it is handed `send(session, turn_index, tool_wait_ns,
join_wait_ns) -> end_ns` (the user builds the body and records the request; the answer's
end, None when it was not answered) and `sleep`, and owns only the order (`agentjob`'s
docstring states the semantics it follows).

- The root session runs in the caller's greenlet (the Locust user's); each sub-agent in a
  greenlet of its own, started when its `spawn_after_turn` answer has ended (None: with
  its parent's start), each sending on its own connection (the caller's `send` keys its
  clients by session: a job's sessions in flight each need one).
- Before a turn: first the client's wait (`Waits.before`: a tool round trip's recorded
  time ÷ `--tool-speed`, capped by `--max-tool-wait`; else the recorded idle time, capped
  by `--max-idle`), timed from the previous answer's end (its last byte's arrival, as
  `send` tells it: not from when its record was written, which would make every wait
  late by that work) and waited to the microsecond
  (`wait_until`), then the join: every child whose `join_before_turn` is this turn must
  have ended. The tool wait actually slept goes into the request's record
  (`tool_wait_ns`; the row's `tool_wait_ms`), and so does the time the join held the
  turn after it (`join_wait_ns`; the row's `join_wait_ms`: what the job's time split
  counts as waiting for sub-agents).
- A job started at root turn k (`--start-at sampled`: `load/agentstart.py`, its prime
  sent by the caller before `run`) sends the root's turns from k, with no wait before
  the first; the sub-agents it skips never start and count as ended (a join on one is
  satisfied).
- A failed turn ends its session: its later turns are not sent and the children it had
  not spawned yet never start (a parent's joins still wait for the children that run).
  The job ends when every session it started has ended.
- `before_wait` (optional) is told each wait as it begins, with the turn it comes before
  and its end, when no join can hold that turn past it (every child it joins has ended):
  a distributed worker asks the master for that turn's ticket during the wait
  (`agentahead.py`), not after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.event import Event

from anvil_metrics.live.control import SLEEP_MARGIN_NS
from anvil_metrics.live.duetimer import DueTimer
from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.agentstart import skipped

# the largest idle gap replayed by default: a recorded idle gap is mostly a person reading
# or typing (minutes in the published captures), which measures nothing about the server
# and would leave a short run mostly idle; 10 s keeps the shape (a prefix cache may evict)
DEFAULT_MAX_IDLE_S = 10.0


@dataclass(frozen=True, slots=True)
class Waits:
    """The client's waits before a turn: `tool_speed` divides a tool's recorded time,
    `max_tool_wait_s` caps it (None: no cap), `max_idle_s` caps an idle gap (None: none)."""

    tool_speed: float = 1.0
    max_tool_wait_s: float | None = None
    max_idle_s: float | None = DEFAULT_MAX_IDLE_S

    def before(self, turn: Turn) -> tuple[float, float]:
        """(tool wait, idle wait) in seconds before `turn`; a time not recorded is 0."""
        tool = (turn.tool_wait_ms or 0.0) / 1000 / self.tool_speed
        if self.max_tool_wait_s is not None:
            tool = min(tool, self.max_tool_wait_s)
        idle = (turn.idle_ms or 0.0) / 1000
        if self.max_idle_s is not None:
            idle = min(idle, self.max_idle_s)
        return tool, idle


_TIMERS: list[DueTimer] = []  # free timers: one per session waiting at once
_DUE: list[int] = []  # the end of every wait going on (`next_wait_due_ns`)


def next_wait_due_ns() -> int | None:
    """The earliest end of the waits going on (`perf_counter_ns`; None: none), so work that
    can wait (the live figures' derivation, `figures.LiveStats`) fits itself before it, as
    it does before an open loop's next due request."""
    return min(_DUE) if _DUE else None


def wait_until(end_ns: int) -> None:
    """Wait until `end_ns` (`perf_counter_ns`) to the microsecond: gevent's sleep to just
    before it (its loop wakes in whole milliseconds, rounded up: a tool wait would run
    ~1 ms long), then a `DueTimer` (`duetimer.py`), as an open loop's due times are."""
    _DUE.append(end_ns)
    try:
        left_ns = end_ns - time.perf_counter_ns() - SLEEP_MARGIN_NS
        if left_ns > 0:
            gevent.sleep(left_ns / 1e9)
        timer = _TIMERS.pop() if _TIMERS else DueTimer()
        try:
            timer.wait_until(end_ns)
        finally:
            _TIMERS.append(timer)
    finally:
        _DUE.remove(end_ns)


# (session, turn, tool wait slept ns, join wait ns) → the answer's end (perf_counter_ns),
# None: unanswered
Send = Callable[[Session, int, int, int], int | None]


class JobRun:
    """One job's replay (module docstring). `send` sends one turn and tells when its answer
    ended (None: not answered); `sleep` waits (None: `wait_until`, to the microsecond; a
    test's fake); `on_session_end` is told each session that ended (the caller gives its
    connection back); `start_turn`: the root turn the job starts at; `before_wait`: told
    (session, turn, the wait's end ns) as a wait not followed by a join begins (module
    docstring)."""

    def __init__(self, job: Job, send: Send, waits: Waits = Waits(), *,
                 sleep: Callable[[float], None] | None = None,
                 on_session_end: Callable[[Session], None] | None = None,
                 start_turn: int = 0,
                 before_wait: Callable[[Session, int, int], None] | None = None) -> None:
        self.job = job
        self._send = send
        self._waits = waits
        self._sleep = sleep
        self._on_end = on_session_end
        self._ended = {s.id: Event() for s in job.sessions}
        self._children = {s.id: job.children(s.id) for s in job.sessions}
        self._greenlets: list[gevent.Greenlet] = []
        self._start = start_turn
        self._before_wait = before_wait
        for sid in skipped(job, start_turn):  # in the past: a join on one is satisfied
            self._ended[sid].set()

    def run(self) -> None:
        """Replay the job: its root here, every sub-agent in its own greenlet; return when
        every session that started has ended (a kill stops the children too)."""
        try:
            self._session(self.job.root)
            while any(not g.dead for g in self._greenlets):  # children may spawn children
                gevent.joinall([g for g in self._greenlets if not g.dead])
        finally:
            gevent.killall([g for g in self._greenlets if not g.dead])

    def _spawn(self, session: Session, after_turn: int | None) -> None:
        for child in self._children[session.id]:
            if child.spawn_after_turn == after_turn:
                self._greenlets.append(gevent.spawn(self._session, child))

    def _session(self, session: Session) -> None:
        first = self._start if session is self.job.root else 0
        try:
            if first == 0:
                self._spawn(session, None)
            free_ns = time.perf_counter_ns()  # the previous answer's end
            for k in range(first, len(session.turns)):
                turn = session.turns[k]
                # a sampled start's first turn follows its prime at once
                tool_s, idle_s = (0.0, 0.0) if 0 < first == k else self._waits.before(turn)
                if (self._before_wait is not None and tool_s + idle_s > 0
                        and not self._joins(session, k)):
                    self._before_wait(session, k, free_ns + round((tool_s + idle_s) * 1e9))
                slept_ns = self._wait_from(free_ns, tool_s + idle_s, tool_s)
                join_ns = self._join(session, k)
                end_ns = self._send(session, k, slept_ns, join_ns)
                if end_ns is None:
                    return
                free_ns = end_ns
                self._spawn(session, k)
        finally:
            self._ended[session.id].set()
            if self._on_end is not None:
                self._on_end(session)

    def _join(self, session: Session, k: int) -> int:
        """Wait until every child joining before turn `k` of `session` has ended; the
        time that took, ns (0: the turn joins none, or each had ended)."""
        joins = self._joins(session, k)
        if not joins:  # none, or every one already over (a skipped one: in the past)
            return 0
        t0 = time.perf_counter_ns()
        for child in joins:
            self._ended[child.id].wait()
        return time.perf_counter_ns() - t0

    def _joins(self, session: Session, k: int) -> list[Session]:
        """The children of `session` joining before its turn `k` that have not ended."""
        return [c for c in self._children[session.id]
                if c.join_before_turn == k and not self._ended[c.id].is_set()]

    def _wait_from(self, free_ns: int, total_s: float, tool_s: float) -> int:
        """Sleep until `total_s` after `free_ns` (again if a timer wakes early); what was
        slept less the idle part, ns: the tool wait, a late wake-up included (0 when the
        turn carries no tool time)."""
        if total_s <= 0:
            return 0
        end_ns = free_ns + round(total_s * 1e9)
        if self._sleep is None:
            wait_until(end_ns)
        while (left_ns := end_ns - time.perf_counter_ns()) > 0:  # a timer woke early
            (self._sleep or gevent.sleep)(left_ns / 1e9)
        slept_ns = time.perf_counter_ns() - free_ns
        return max(0, slept_ns - round((total_s - tool_s) * 1e9)) if tool_s > 0 else 0
