"""worker: a distributed worker's budget (each ticket asked of the master, waiters woken
when it closes, a ticket for a stopped user recorded, never dropped), its record shipper
(records finishing together share a bounded message) and the `anvil_done` count.

Why: the master checks that it received exactly the records a worker says it sent; a
ticket lost between them is a request issued and never counted, a run that hangs waiting
for it, or both. (The messages' checks on receipt: `test_wire.py`.)
"""

from __future__ import annotations

from typing import Any

import gevent
import orjson
import pytest
from rawbuild import completed

from anvil_metrics.cluster import worker
from anvil_metrics.cluster.wire import WorkerSetup
from anvil_metrics.cluster.worker import RecordShipper, RemoteBudget, WorkerSession
from anvil_metrics.live.control import Ticket
from anvil_metrics.load.scenario import scenario_from_dict
from anvil_metrics.prep.prompts import NO_CALIBRATION


class _Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, msg_type: str, data: dict[str, Any]) -> None:
        self.sent.append((msg_type, data))


def test_remote_budget_waits_for_the_masters_ticket() -> None:
    sent: list[tuple[str, dict]] = []
    budget = RemoteBudget(lambda t, d: sent.append((t, d)), "run-1")
    got: list[Ticket | None] = []
    g = gevent.spawn(lambda: got.append(budget.take()))
    gevent.sleep(0)
    assert sent == [("anvil_take", {"run_id": "run-1", "seq": 1, "followup": False})]
    assert not got
    budget.deliver(1, Ticket(7, False, 4096))
    g.join(1)
    assert got == [Ticket(7, False, 4096)]
    g = gevent.spawn(lambda: got.append(budget.take_followup()))  # a conversation's turn
    gevent.sleep(0)
    assert sent[-1] == ("anvil_take", {"run_id": "run-1", "seq": 2, "followup": True})
    budget.deliver(2, Ticket(8, False, 4096))
    g.join(1)
    assert got[-1] == Ticket(8, False, 4096)


def test_remote_budget_stops_asking_once_the_budget_is_spent() -> None:
    sent: list[tuple[str, dict]] = []
    budget = RemoteBudget(lambda t, d: sent.append((t, d)), "r")
    g = gevent.spawn(budget.take)
    gevent.sleep(0)
    budget.deliver(1, None)
    assert g.get(timeout=1) is None
    assert budget.take() is None and len(sent) == 1  # no second message


def test_a_ticket_for_a_stopped_user_is_reported_not_dropped() -> None:
    orphans: list[Ticket] = []
    budget = RemoteBudget(lambda t, d: None, "r", on_orphan=orphans.append)
    budget.deliver(7, Ticket(6, False, 128))  # for no one who asked: ignored
    g = gevent.spawn(budget.take)
    gevent.sleep(0)
    g.kill()  # Locust stops the user while it waits
    budget.deliver(1, Ticket(3, False, 4096))
    budget.deliver(1, Ticket(3, False, 4096))  # the same seq again: reported once
    assert orphans == [Ticket(3, False, 4096)]


def test_close_wakes_every_waiting_user() -> None:
    budget = RemoteBudget(_Wire(), "run-1")
    waiting = [gevent.spawn(budget.take) for _ in range(3)]
    gevent.sleep(0)
    budget.close()
    assert [g.get(timeout=1) for g in waiting] == [None, None, None]


def test_records_finishing_together_share_bounded_messages(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(worker, "BATCH_RECORDS", 2)
    wire = _Wire()
    shipper = RecordShipper(wire, "run-1")
    records = [completed(i) for i in range(3)]
    for rec in records:
        shipper.take(rec)
    assert wire.sent == []  # not before the hub runs the flush
    gevent.sleep(0)
    assert [len(d["lines"]) for _, d in wire.sent] == [2, 1] and shipper.sent == 3
    lines = [line for _, d in wire.sent for line in d["lines"]]
    assert [orjson.loads(line) for line in lines] == [
        orjson.loads(orjson.dumps(r.to_json_dict())) for r in records]


def test_a_sessions_done_message_counts_what_it_sent() -> None:
    sc = scenario_from_dict({"measurement_protocol": "t"})
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:9", None, "m", NO_CALIBRATION, "n",
                        None, {4096: 10}, None, [4096])
    wire = _Wire()
    session = WorkerSession(setup, wire)
    try:
        session.begin_load()
        waiting = gevent.spawn(session.budget.take)
        gevent.sleep(0)
        waiting.kill()  # a user stopped while it waited; its ticket still comes
        session.budget.deliver(1, Ticket(3, False, 4096))
        gevent.sleep(0)  # the shipper's flush
    finally:
        session.finish()
    session.finish()  # idempotent
    records = [m for m in wire.sent if m[0] == "anvil_records"]
    (line,) = records[0][1]["lines"]
    assert orjson.loads(line)["failure"]["kind"] == "cancelled"
    (done,) = [d for t, d in wire.sent if t == "anvil_done"]
    assert (done["run_id"], done["sent"], done["worker"]) == ("run-1", 1, session.worker)
    assert {"loop_lag_ms", "cpu_pct", "saturated"} <= done["health"].keys()


def test_with_a_budget_of_conversations_no_start_ends_only_the_starts() -> None:
    """The master's None for a new conversation: no more starts are asked for, but a
    conversation going on still asks for (and gets) its next turn."""
    sent: list[tuple[str, dict]] = []
    budget = RemoteBudget(lambda t, d: sent.append((t, d)), "r", conversations=True)
    g = gevent.spawn(budget.take)
    gevent.sleep(0)
    budget.deliver(1, None)  # every conversation has started
    assert g.get(timeout=1) is None
    assert budget.take() is None and len(sent) == 1  # no second ask for a start
    g = gevent.spawn(budget.take_followup)
    gevent.sleep(0)
    assert sent[-1][1] == {"run_id": "r", "seq": 2, "followup": True}
    budget.deliver(2, Ticket(9, False, 10))
    assert g.get(timeout=1) == Ticket(9, False, 10)


def test_a_ticket_sent_ahead_is_handed_to_its_user_at_its_due_time() -> None:
    """The master sends an open loop's ticket `TICKET_LEAD_NS` early; the worker's user gets
    it at its due time on the worker's clock, never before, and several users wait at once
    (a timer each); a ticket already due, or without a due time, is handed over at once."""
    import time

    from anvil_metrics.cluster.master import TICKET_LEAD_NS

    assert TICKET_LEAD_NS > 0
    budget = RemoteBudget(lambda t, d: None, "r")
    now = time.perf_counter_ns()
    dues = [now + 30_000_000, now + 20_000_000, now - 5_000_000, None]
    got: dict[int, int] = {}

    def user(seq: int) -> None:
        budget.take()
        got[seq] = time.perf_counter_ns()

    users = [gevent.spawn(user, seq) for seq in range(1, 5)]
    gevent.sleep(0)
    for seq, due in enumerate(dues, start=1):
        budget.deliver(seq, Ticket(seq, False, 64, due_ns=due))
    gevent.joinall(users, timeout=2)
    assert got[1] >= dues[0] and got[2] >= dues[1]
    # at once, not after the others' waits: before either timed ticket, judged by their
    # order rather than a wall time (a busy machine once held this loop past the 20 ms)
    assert max(got[3], got[4]) < min(got[1], got[2])


def test_a_follow_up_asked_ahead_and_stopped_on_its_way_is_recorded_when_it_comes() -> None:
    """An agent job's follow-up is asked for `TICKET_LEAD_NS` before its wait ends
    (`live/agentahead.py`); a job stopped while that ask is on its way still gets its
    ticket recorded (the orphan), so the master matches every grant to a record."""
    from anvil_metrics.cluster.wire import TICKET_LEAD_NS
    from anvil_metrics.live.agentahead import JobTickets
    from anvil_metrics.load.agentjob import Session, Turn

    sent: list[tuple[str, dict]] = []
    orphans: list[Ticket] = []
    budget = RemoteBudget(lambda t, d: sent.append((t, d)), "r", conversations=True,
                          on_orphan=orphans.append)
    assert budget.followup_lead_ns == TICKET_LEAD_NS > 0
    tickets = JobTickets(budget, Ticket(0, False, 64, start=0), "h:1",
                         lambda s, k, w: {"job": 0})
    root = Session("root", tuple(Turn(t_s=k, input_tokens=9, output_tokens=1)
                                 for k in range(3)))
    assert tickets.next(root) == Ticket(0, False, 64, start=0)
    tickets.ahead(root, 1, 0)  # its wait ended long ago: asked at once
    gevent.sleep(0.001)
    assert sent == [("anvil_take", {"run_id": "r", "seq": 1, "followup": True})]
    tickets.close()  # stopped before the master's answer came
    budget.deliver(1, Ticket(5, False, 64))
    assert orphans == [Ticket(5, False, 64)]
