"""An agent job's tickets (`live/agentahead.py`): on a budget whose tickets are a round trip
away (a distributed worker's), a follow-up is asked for `followup_lead_ns` before its wait
ends and taken at once when the wait is over; the start's ticket goes to the first turn;
in one process nothing is asked ahead; a job stopped during a wait sends nothing it had
not asked for and records, as cancelled with its job fields, a ticket it held.

Why: asked after the wait, each follow-up on a worker went out one master round trip late
(benchmarks/README.md, issue 48 item 6); asked early, a ticket held when the run stops is
a request issued and must still be recorded and given back (the master matches every
grant to a record)."""

from __future__ import annotations

import time
from typing import Any

import gevent

from anvil_metrics.live.agentahead import JobTickets
from anvil_metrics.live.agentrun import JobRun, Waits
from anvil_metrics.live.control import RequestBudget, Ticket
from anvil_metrics.load.agentjob import Job, Session, Turn

LEAD_NS = 20_000_000
TRIP_S = 0.005  # the fake master's round trip


class _Master:
    """A budget whose follow-ups come `TRIP_S` after they are asked for, numbered from 1;
    it keeps when each was asked and what was given back."""

    followup_lead_ns = LEAD_NS

    def __init__(self) -> None:
        self.asked_ns: list[int] = []
        self.answered_ns: list[int] = []  # when each follow-up's answer came back
        self.given_back: list[Ticket] = []
        self.trip_s = TRIP_S

    def take_followup(self) -> Ticket:
        self.asked_ns.append(time.perf_counter_ns())
        ticket = Ticket(len(self.asked_ns), False, 64)
        gevent.sleep(self.trip_s)
        self.answered_ns.append(time.perf_counter_ns())
        return ticket

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None:
        self.given_back.append(ticket)


def _extra(session: Session, k: int, tool_wait_ns: int) -> dict[str, Any]:
    return {"job": 3, "session": session.id, "turn": k + 1, "tool_wait_ns": tool_wait_ns}


def _job(tool_ms: float) -> Job:
    turns = tuple(Turn(t_s=k, input_tokens=100, output_tokens=10, tool_wait_ms=tool_ms)
                  for k in range(3))
    return Job("j", 64, (Session("root", turns),))


def test_a_follow_up_is_asked_for_before_its_wait_ends_and_taken_at_once() -> None:
    master = _Master()
    tickets = JobTickets(master, Ticket(0, False, 64, start=0), "h:1", _extra)
    sent: list[tuple[int, int, int]] = []  # (turn, ticket index, asks made while it waited)
    wait_end: dict[int, int] = {}
    job = _job(tool_ms=60.0)

    def send(session: Session, k: int, tool_ns: int, join_ns: int) -> int:
        asks = len(master.asked_ns)
        ticket = tickets.next(session)
        assert ticket is not None
        sent.append((k, ticket.request_index, len(master.asked_ns) - asks))
        return time.perf_counter_ns()

    def before_wait(session: Session, k: int, end_ns: int) -> None:
        wait_end[k] = end_ns
        assert tickets.before_wait is not None
        tickets.before_wait(session, k, end_ns)

    JobRun(job, send, Waits(), before_wait=before_wait).run()
    tickets.close()
    # the start's ticket first, then follow-ups 1 and 2, in turn order
    assert [(k, i) for k, i, _ in sent] == [(0, 0), (1, 1), (2, 2)]
    # asked no sooner than LEAD before the wait's end (how much later is the machine's: a
    # busy one wakes the ask late, which this test cannot tell from a fault: judged by the
    # stamps it has, and the precision is benchmarks/agent_timing.py's)
    for n, k in enumerate((1, 2)):
        assert wait_end[k] - LEAD_NS <= master.asked_ns[n]
        # the turn took the ticket asked ahead: it asked the master for none itself (a
        # structural test: how soon, on a busy machine, is the benchmark's to say)
        assert sent[k][2] == 0
    assert master.given_back == []


def test_a_wait_shorter_than_the_lead_asks_at_once() -> None:
    master = _Master()
    tickets = JobTickets(master, Ticket(0, False, 64, start=0), "h:1", _extra)
    root = _job(tool_ms=1.0).root
    tickets.ahead(root, 0, time.perf_counter_ns())  # the start's is unused: not asked
    gevent.sleep(0.001)
    assert master.asked_ns == []
    assert tickets.next(root) == Ticket(0, False, 64, start=0)
    t0 = time.perf_counter_ns()
    tickets.ahead(root, 1, t0 + 1_000_000)  # 1 ms: under the 20 ms lead
    gevent.sleep(0.001)
    # asked at once: at the first yield, before the 1 ms wait's end could pass by much
    assert len(master.asked_ns) == 1 and master.asked_ns[0] - t0 < 1_000_000 + 50e6
    assert tickets.next(root) == Ticket(1, False, 64)
    assert tickets.next(root) == Ticket(2, False, 64)  # none asked ahead: asked now


def test_an_ask_due_now_goes_at_the_first_yield_not_a_loop_poll_later() -> None:
    """A wait shorter than the lead: its ask runs as soon as the caller yields (a greenlet
    started by a callback), not after the loop's next poll (a 0 s timer, behind every
    socket ready then: ~2.5 ms p99 on a busy worker, benchmarks/README.md)."""
    master = _Master()
    tickets = JobTickets(master, Ticket(0, False, 64, start=0), "h:1", _extra)
    root = _job(tool_ms=1.0).root
    tickets.next(root)  # the start's, used
    tickets.ahead(root, 1, time.perf_counter_ns() + 1_000_000)
    assert master.asked_ns == []  # not in the caller: it goes on to its wait first
    gevent.sleep(0)  # one yield: callbacks run, no poll, no timer
    assert len(master.asked_ns) == 1
    assert tickets.next(root) == Ticket(1, False, 64)


def test_in_one_process_nothing_is_asked_ahead() -> None:
    budget = RequestBudget(None, 0, [64], conversations=1)
    first = budget.take()
    assert first is not None
    tickets = JobTickets(budget, first, "h:1", _extra)
    assert tickets.before_wait is None
    root = _job(tool_ms=5.0).root
    assert tickets.next(root) is first
    assert budget.in_flight == 1
    follow = tickets.next(root)
    assert follow is not None and follow.request_index == 1 and budget.in_flight == 2


def test_a_job_stopped_during_a_wait_records_the_ticket_it_held(fired: list[Any]) -> None:
    master = _Master()
    tickets = JobTickets(master, Ticket(0, False, 64, start=0), "h:1", _extra)
    job = Job("j", 64, (Session("root", _job(0).root.turns),
                        Session("a", _job(0).root.turns, "root", 1, spawn_after_turn=0),
                        Session("b", _job(0).root.turns, "root", 1, spawn_after_turn=0)))
    root, a, b = job.sessions
    assert tickets.next(root) is not None  # the start's
    now = time.perf_counter_ns()
    tickets.ahead(root, 1, now)  # asked at once: here before the stop
    tickets.ahead(a, 1, now + int(1e9))  # asked in ~1 s: never, the job stops first
    gevent.sleep(0.001)  # (root's asked, with a round trip of TRIP_S)
    master.trip_s = 0.2
    tickets.ahead(b, 1, now + LEAD_NS + 1_000_000)  # asked at 1 ms: on its way at the stop
    gevent.sleep(TRIP_S * 3)
    tickets.close()
    assert len(master.asked_ns) == 2  # a's was never asked for
    (record,) = fired  # root's ticket, held: recorded and given back
    assert record.request_index == 1 and record.failure.kind == "cancelled"
    assert record.extra == {"job": 3, "session": "root", "turn": 2, "tool_wait_ns": None,
                            "join_wait_ns": None}
    assert master.given_back == [Ticket(1, False, 64)]
    # b's ask was stopped on its way: the worker's budget records that one when it comes
    # (`RemoteBudget`'s orphan: tests/unit/cluster/test_worker.py)


def test_the_runner_tells_a_wait_only_when_no_join_can_hold_its_turn() -> None:
    told: list[tuple[str, int]] = []
    turns = tuple(Turn(t_s=k, input_tokens=100, output_tokens=10,
                       tool_wait_ms=2.0 if k else None) for k in range(3))
    child_turns = tuple(Turn(t_s=k, input_tokens=100, output_tokens=10) for k in range(2))
    job = Job("j", 64, (Session("root", turns),
                        Session("a", child_turns, "root", 1, spawn_after_turn=0,
                                join_before_turn=1)))

    def send(session: Session, k: int, tool_ns: int, join_ns: int) -> int:
        if session.id == "a":
            gevent.sleep(0.02)  # still running when the root's wait before turn 1 begins
        return time.perf_counter_ns()

    JobRun(job, send, Waits(), before_wait=lambda s, k, end: told.append((s.id, k))).run()
    # root turn 1 joins a (not ended when its wait began): asked after the join; turn 2
    # joins nothing; a's turns carry no wait
    assert told == [("root", 2)]
