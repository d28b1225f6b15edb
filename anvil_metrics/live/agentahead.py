"""An agent job's tickets: its start's, then each follow-up's, asked for before its wait ends.

Why: on a distributed worker every ticket is a round trip through the master's loop
(`cluster/worker.py` `RemoteBudget`, ~1-4 ms, more on a busy master). Asked for after a
tool or idle wait, it made every wait that much late (p50 2.5-2.9 ms with two workers
against 0.25-0.4 ms in one process: benchmarks/README.md). So a follow-up whose turn waits
is asked for `followup_lead_ns` before its wait ends (at once when the wait is shorter),
in a greenlet of its own, and the turn takes it when its wait is over: the round trip runs
during the wait. In one process (`followup_lead_ns` 0) nothing is asked ahead: a ticket is
handed out at once.

What stays exact: the master grants the same follow-up it granted before, in the same
order of asks, so indices stay dense, records are matched to grants as before and a
budget of jobs counts the same; the ticket counts as in flight on the master from its
grant, at most `followup_lead_ns` before its request goes (as an open loop's arrival sent
ahead does). A turn followed by a join that may still hold it (a child not ended when its
wait begins: `agentrun.JobRun`'s `before_wait`) is asked for after the join, as before,
so no ticket is held through a sub-agent's run. A job stopped during a wait
(`close`): a follow-up not asked yet is never asked; one being asked is recorded
`cancelled` by the worker when it comes (`RemoteBudget`'s orphan, as before); one already
here is recorded `cancelled` with its turn's job fields and given back, so the master's
count of it ends and the job keeps every record it was granted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent

from anvil_metrics.events import anvil_events
from anvil_metrics.live.control import Ticket
from anvil_metrics.records import Failure, RequestRecord

if TYPE_CHECKING:
    from anvil_metrics.live.runctx import TicketSource
    from anvil_metrics.load.agentjob import Session


class JobTickets:
    """One job's tickets (module docstring): `first`, its start's, goes to the first turn
    that asks without one of its own; `ahead` (a `JobRun`'s `before_wait`) asks for a
    turn's follow-up before its wait ends; `next` is a session's ticket for its turn now;
    `close` settles what was asked for and not sent. `worker` and `extra(session, turn, 0)`
    (`AgentBodies.turn_extra` of the job) make the record of a ticket never sent."""

    def __init__(self, budget: TicketSource, first: Ticket, worker: str,
                 extra: Callable[[Session, int, int], dict[str, Any]]) -> None:
        self._budget = budget
        self._first: Ticket | None = first
        self._worker = worker
        self._extra = extra
        self._asked: dict[str, tuple[Session, int, gevent.Greenlet]] = {}

    @property
    def before_wait(self) -> Callable[[Session, int, int], None] | None:
        """`ahead`, where the budget asks for follow-ups ahead (None in one process)."""
        return self.ahead if self._budget.followup_lead_ns > 0 else None

    def ahead(self, session: Session, k: int, wait_end_ns: int) -> None:
        """Ask for turn `k` of `session`'s ticket `lead_ns` before `wait_end_ns`
        (`perf_counter_ns`), unless the start's ticket is still unused (the root's first
        turn may take it)."""
        lead_ns = self._budget.followup_lead_ns
        if lead_ns <= 0 or (self._first is not None and session.parent_id is None):
            return
        # a timer counts from the loop's cached time, which lags the clock while this pass
        # runs: brought up to now, the ask is not sent early by that lag
        gevent.get_hub().loop.update_now()
        delay_s = (wait_end_ns - lead_ns - time.perf_counter_ns()) / 1e9
        take = self._budget.take_followup
        # due now: asked as soon as this greenlet waits (a 0 s timer waits for the loop's
        # next poll, behind every socket ready then: p99 ~2.5 ms later with two workers)
        self._asked[session.id] = (session, k, gevent.spawn(take) if delay_s <= 0
                                   else gevent.spawn_later(delay_s, take))

    def next(self, session: Session) -> Ticket | None:
        """`session`'s ticket for its turn now: the one asked for ahead, else the start's
        unused one, else a follow-up asked for now (None: the budget is spent or closed)."""
        asked = self._asked.pop(session.id, None)
        if asked is not None:
            return asked[2].get()
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return self._budget.take_followup()

    def close(self) -> None:
        """The job is over (stopped during a wait, if anything was asked for and not
        taken): see the module docstring."""
        asked, self._asked = self._asked, {}
        gevent.killall([g for _, _, g in asked.values()])
        for session, k, g in asked.values():
            if isinstance(g.value, Ticket):  # here (a killed one's value: GreenletExit)
                self._never_sent(g.value, session, k)

    def _never_sent(self, ticket: Ticket, session: Session, k: int) -> None:
        now = time.perf_counter_ns()
        anvil_events.request_record.fire(record=RequestRecord(
            request_index=ticket.request_index, start_ns=now, end_ns=now,
            warmup=ticket.warmup, planned_context_tokens=ticket.planned_context_tokens,
            failure=Failure("cancelled", "the run was stopped before this request was sent",
                            phase="connect"),
            worker=self._worker,  # its waits were cut short: not known
            extra={**self._extra(session, k, 0), "tool_wait_ns": None, "join_wait_ns": None}))
        self._budget.give_back(ticket, conversation_over=False)
