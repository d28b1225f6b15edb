"""Distributed runs: Locust's master and its workers produce one exact result.

Why the master owns everything but the sending: Locust's own distributed stop drops the
workers' last reports (the master waits 0.5 s for them) and its statistics are rounded.
So in an anvil run the master holds the run's single request budget, hands out tickets
(request index, warm-up or not, planned size) one at a time, receives every raw record,
writes the one `requests.jsonl` and `benchmark.json`, and drives the end of the run:
close the budget, tell the workers to stop, wait until every ticket it granted has come
back as a record (or its worker is known lost), collect each worker's final count and
health figures, then write. A ticket is returned to the budget when its record reaches the
master, so an exact `--requests N` across workers ends exactly when the N-th record is in.

The workers measure: each builds the same request bodies from the master's set-up (so no
prompt is built during the load and no worker needs the scenario file or a tokenizer),
streams requests on its own monotonic clock and ships each finished record, serialised
once, in bounded batches as it finishes. Durations are only ever computed from stamps of
one host; each worker's clock offset to the master's `perf_counter_ns` is measured once
(exactly 0 when both run on one kernel: same boot id) and written to the raw file as a
`"worker"` line, used only to place the workers' requests on one time line (the run's
`wall_clock_ms`, `finished_at`).

A worker that goes missing (Locust's heartbeat: ~3 s) or never returns a granted ticket
within the drain timeout gets each of its outstanding requests recorded as a failure of
kind `worker_lost`, naming the worker: `requests = completed + failed` always holds, and a
late record from a worker declared lost is dropped (and counted in the run's `run_end`).
A ticket still granted to a worker when it says it is done (it reached the worker as its
users stopped) was never sent: it is recorded `cancelled`, as one process records it.

Messages (Locust custom messages, plain data carried as msgpack; every one carries the
`run_id` it belongs to, and a message of another run is ignored; each is checked on
receipt, and a damaged one is refused with one log line and not acted on: `wire.py`)::

    master -> worker  anvil_setup    WorkerSetup.to_wire(): {version, run_id, scenario
                                     {source, document}, host, api_key, model, calibration
                                     {method, overhead_tokens, tokens_per_word}, run_nonce,
                                     shared {prefix_tokens, group_size} | None,
                                     words [[size, words], ...], prefix_words, sizes}
    worker -> master  anvil_hello    {worker, host, pid, boot_id, error} (run_id null: the
                                     worker could not read the set-up; `error` says why)
    master -> worker  anvil_ping     {seq, t_master_ns}           (clock offset, 8 rounds)
    worker -> master  anvil_pong     {seq, t_master_ns, t_worker_ns}
    worker -> master  anvil_take     {seq, followup}              (a user wants a ticket; a
                                                                   conversation's next turn)
    master -> worker  anvil_ticket   {seq, ticket: [index, warmup, size, due_ns, waited]
                                     | None}      (open loop: the master's schedule, its
                                                  due time placed on the worker's clock)
    worker -> master  anvil_drop     {}                           (a user stopped between two
                                                                   turns of a conversation)
    worker -> master  anvil_records  {lines: [orjson bytes, ...]} (<= 256 per message)
    master -> worker  anvil_stop     {}                           (stop users, flush)
    master -> worker  anvil_dead     {replica}   (the master counted it dead: skip it too)
    worker -> master  anvil_done     {sent, worker, health}       (after the last record)
    worker -> master  anvil_stuck    {the fields of live.stuck.StuckReport} (when changed)
    worker -> master  anvil_job_end  {job, answered, completed}   (an agent job ended)

This module is the master's side (`MasterCoordinator`, `MasterAgent`); `worker.py` is
the workers' and `wire.py` the messages' shapes and checks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import orjson
from locust.runners import STATE_MISSING

from anvil_metrics.cluster import wire
from anvil_metrics.cluster.wire import (
    SETUP,
    TICKET_LEAD_NS,
    WorkerSetup,
    boot_id,
    refusing,
    stuck_from_wire,
)
from anvil_metrics.events import anvil_events
from anvil_metrics.live.control import Ticket
from anvil_metrics.post import saturation
from anvil_metrics.records import Failure, RequestRecord, record_problem

if TYPE_CHECKING:
    from greenlet import greenlet
    from locust.env import Environment
    from locust.rpc.protocol import Message

    from anvil_metrics.live.session import RunSession

log = logging.getLogger("anvil")

PING_ROUNDS = 8
HELLO_TIMEOUT_S = 120.0  # a worker builds every planned body (a 393k-token one: ~0.1 s)
PONG_TIMEOUT_S = 2.0
DRAIN_TIMEOUT_S = 30.0  # after the stop: records of cancelled requests are already queued
LOST_POLL_S = 0.5


# --- master side ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Grant:
    client_id: str
    ticket: Ticket
    granted_ns: int


@dataclass(slots=True)
class _Worker:
    client_id: str
    info: dict[str, Any] = field(default_factory=dict)
    hello: gevent.event.Event = field(default_factory=gevent.event.Event)
    done: dict[str, Any] | None = None
    received: int = 0
    lost: bool = False
    offset_ns: int | None = None
    uncertainty_ns: int | None = None
    going: int = 0  # a budget of conversations: those started here and not yet over


class MasterCoordinator:
    """The master's side of one distributed run (see the module docstring).

    `session` is the master's `RunSession` (budget, raw writer, live figures); records that
    arrive are fired as `anvil_events.request_record`, exactly as a local user fires them.
    """

    def __init__(self, environment: Environment, session: RunSession, setup: WorkerSetup
                 ) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.session = session
        self.run_id = session.run_id
        self.setup_wire = setup.to_wire()  # plain data, built once for every worker
        self.workers: dict[str, _Worker] = {}
        self.outstanding: dict[tuple[bool, int], _Grant] = {}
        self.dropped: list[str] = []
        self.closing = False
        self._pongs: dict[tuple[str, int], gevent.event.AsyncResult] = {}
        self._listener: greenlet | None = None
        self._monitor = gevent.spawn(self._watch_lost)

    # set-up ------------------------------------------------------------------------------

    def set_up_workers(self, client_ids: list[str]) -> None:
        """Send the set-up to each worker, wait for its hello, measure its clock offset,
        and record it as a `"worker"` line. Raises RuntimeError if no worker is ready."""
        for cid in client_ids:
            self.add_worker(cid)
        ready = 0
        for cid in client_ids:
            w = self.workers[cid]
            if not w.hello.wait(HELLO_TIMEOUT_S):
                log.error("anvil: worker %s did not answer the set-up within %.0f s; its users "
                          "will stay idle", cid, HELLO_TIMEOUT_S)
                continue
            if w.info.get("error"):
                log.error("anvil: worker %s could not set up the run: %s", cid, w.info["error"])
                continue
            self._sync_clock(w)
            ready += 1
        if client_ids and not ready:
            raise RuntimeError("no worker could set up the run (see the errors above)")

    def add_worker(self, client_id: str) -> None:
        """Send the set-up to a worker (also one that joins mid-run)."""
        self.workers[client_id] = _Worker(client_id)
        self.runner.send_message(SETUP, self.setup_wire, client_id=client_id)

    def sync_late(self, client_id: str) -> None:
        w = self.workers.get(client_id)
        if w is not None and w.hello.wait(HELLO_TIMEOUT_S) and not w.info.get("error"):
            self._sync_clock(w)

    def _sync_clock(self, w: _Worker) -> None:
        """Offset of the worker's perf_counter_ns to the master's: exactly 0 on the same
        kernel; else from the ping with the shortest round trip (error <= half of it)."""
        info = w.info
        force_ping = os.environ.get("ANVIL_CLOCK_SYNC") == "ping"  # tests: measure anyway
        if info.get("boot_id") and info["boot_id"] == boot_id() and not force_ping:
            w.offset_ns, w.uncertainty_ns, method = 0, 0, "same_clock"
        else:
            best: tuple[int, int] | None = None  # (rtt, offset)
            for seq in range(PING_ROUNDS):
                result = gevent.event.AsyncResult()
                self._pongs[(w.client_id, seq)] = result
                t0 = time.perf_counter_ns()
                self.runner.send_message("anvil_ping", {"run_id": self.run_id, "seq": seq,
                                                        "t_master_ns": t0},
                                         client_id=w.client_id)
                try:
                    t_worker = result.get(timeout=PONG_TIMEOUT_S)
                except gevent.Timeout:
                    continue
                t1 = time.perf_counter_ns()
                rtt, offset = t1 - t0, (t0 + t1) // 2 - t_worker
                if best is None or rtt < best[0]:
                    best = (rtt, offset)
            if best is None:
                w.offset_ns, w.uncertainty_ns, method = None, None, "unknown"
            else:
                w.offset_ns, w.uncertainty_ns, method = best[1], best[0] // 2, "ping"
        self.session.writer.write({
            "type": "worker", "worker": info.get("worker"), "client_id": w.client_id,
            "host": info.get("host"), "pid": info.get("pid"), "clock": method,
            "perf_offset_ns": w.offset_ns, "offset_uncertainty_ns": w.uncertainty_ns})

    # messages (each one checked by `MasterAgent` first: `wire.MESSAGES`) ------------------

    def _worker_for(self, msg: Message) -> _Worker | None:
        data = msg.data
        if not isinstance(data, dict) or data.get("run_id") != self.run_id:
            return None
        return self.workers.get(msg.node_id)

    def on_hello(self, msg: Message) -> None:
        w = self.workers.get(msg.node_id)
        if w is not None and msg.data.get("run_id") in (self.run_id, None):  # None: failed
            w.info = dict(msg.data)
            w.hello.set()

    def on_pong(self, msg: Message) -> None:
        result = self._pongs.pop((msg.node_id, msg.data.get("seq")), None)
        if result is not None and msg.data.get("run_id") == self.run_id:
            result.set(int(msg.data["t_worker_ns"]))

    def on_take(self, msg: Message) -> None:
        w = self._worker_for(msg)
        if w is None:
            return
        if msg.data["followup"]:  # handed out at once: granted here, not a loop pass later
            self._grant(w, int(msg.data["seq"]), True)  # (an agent's wait ends meanwhile)
        else:  # a start may wait for its arrival
            gevent.spawn(self._grant, w, int(msg.data["seq"]), False)

    def _grant(self, w: _Worker, seq: int, followup: bool) -> None:
        budget = self.session.budget
        ticket = None if (self.closing or w.lost or w.done is not None) else (
            budget.take_followup() if followup else budget.take(lead_ns=TICKET_LEAD_NS))
        if ticket is not None and not followup and not ticket.warmup and (
                budget.conversations is not None):
            w.going += 1
        if ticket is not None:
            self.outstanding[(ticket.warmup, ticket.request_index)] = _Grant(
                w.client_id, ticket, time.perf_counter_ns())
            # the due time from the master's clock to the worker's (0 on one kernel)
            due = None if ticket.due_ns is None else ticket.due_ns - (w.offset_ns or 0)
            raw: list[int | bool | None] | None = [ticket.request_index, ticket.warmup,
                ticket.planned_context_tokens, due, ticket.waited, ticket.start]
        else:
            raw = None
        self.runner.send_message("anvil_ticket", {"run_id": self.run_id, "seq": seq,
                                                  "ticket": raw}, client_id=w.client_id)

    def on_records(self, msg: Message) -> None:
        self._listener = gevent.getcurrent()
        w = self._worker_for(msg)
        if w is None:
            return
        for line in msg.data.get("lines") or ():
            w.received += 1
            self._accept(w, line)

    def _accept(self, w: _Worker, line: bytes) -> None:
        try:
            d = orjson.loads(line)
            key = (bool(d["warmup"]), int(d["request_index"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            self.dropped.append(f"unreadable record from {w.client_id}")
            log.error("anvil: dropped an unreadable record from worker %s", w.client_id)
            return
        grant = self.outstanding.get(key)
        prime = key[0] and isinstance(d.get("extra"), dict) and "job" in d["extra"]
        if grant is None and prime:  # an agent job's prime (--start-at sampled): no ticket
            grant = self.outstanding[key] = _Grant(w.client_id, Ticket(key[1], True, 1), 0)
        if grant is None or grant.client_id != w.client_id:
            why = "already recorded as lost" if w.lost else "never granted to it"
            self.dropped.append(f"record {key[1]}{' (warm-up)' if key[0] else ''} from "
                                f"{w.client_id}: {why}")
            log.warning("anvil: dropped record %s from worker %s: %s", key[1], w.client_id, why)
            return
        del self.outstanding[key]
        problem = record_problem(d)
        if problem:  # a worker bug: keep the request, as a failure that says so
            log.error("anvil: invalid record %s from worker %s: %s", key[1], w.client_id, problem)
            record = self._failure_record(grant, Failure(
                "client_error", f"the worker sent an invalid record: {problem}"))
        else:
            record = RequestRecord.from_json_dict(d)
        anvil_events.request_record.fire(record=record)
        over = wire.conversation_over(record)
        if over and not grant.ticket.warmup and w.going > 0:
            w.going -= 1
        self.session.budget.give_back(grant.ticket, over)

    def on_drop(self, msg: Message) -> None:
        """A worker's user left a conversation between two turns, or ended an agent job."""
        w = self._worker_for(msg)
        if w is not None and w.going > 0:
            w.going -= 1
            self.session.budget.conversation_dropped()

    def on_job_end(self, msg: Message) -> None:
        """A worker's agent job ended: fired as a local user fires it (`jobfigures.py`)."""
        if self._worker_for(msg) is not None:
            anvil_events.job_end.fire(**{k: msg.data[k] for k in wire.JOB_END})

    def on_done(self, msg: Message) -> None:
        """A worker finished: every record it sent came before this message, so a ticket
        still granted to it was never sent (it reached the worker after its users stopped,
        or is on its way): recorded `cancelled` here, as one process records an orphan."""
        w = self._worker_for(msg)
        if w is not None:
            w.done = dict(msg.data)
            self._record_granted(w.client_id, Failure(
                "cancelled", "granted to this worker as it stopped; never sent", phase="connect"
            ), lost=False)

    def on_stuck(self, msg: Message) -> None:  # merged into the session's (live/stuck.py)
        if self._worker_for(msg) is not None:
            self.session.stuck.take(msg.node_id, stuck_from_wire(msg.data))

    # lost workers and the end ------------------------------------------------------------

    def _failure_record(self, grant: _Grant, failure: Failure, lost: bool = True
                        ) -> RequestRecord:
        """A record for a granted request whose worker's record never came. Its stamps are
        the grant and now, on the master's clock moved onto the worker's by the measured
        offset (0 on one host), so the run's time line stays one clock per worker."""
        w = self.workers.get(grant.client_id)
        offset = (w.offset_ns if w is not None and w.offset_ns is not None else 0)
        now = time.perf_counter_ns()
        worker = (w.info.get("worker") if w is not None else None) or grant.client_id
        return RequestRecord(
            request_index=grant.ticket.request_index, start_ns=grant.granted_ns - offset,
            end_ns=now - offset, warmup=grant.ticket.warmup,
            planned_context_tokens=grant.ticket.planned_context_tokens,
            failure=failure, worker=worker, extra={"lost_worker": True} if lost else None)

    def _record_granted(self, client_id: str, failure: Failure, lost: bool) -> int:
        """Record every request still granted to `client_id` as `failure`; how many."""
        w = self.workers.get(client_id)
        granted = [g for g in list(self.outstanding.values()) if g.client_id == client_id]
        for grant in sorted(granted, key=lambda g: (not g.ticket.warmup, g.ticket.request_index)):
            del self.outstanding[(grant.ticket.warmup, grant.ticket.request_index)]
            anvil_events.request_record.fire(record=self._failure_record(grant, failure, lost))
            if not grant.ticket.warmup and w is not None and w.going > 0:
                w.going -= 1
            self.session.budget.give_back(grant.ticket)
        return len(granted)

    def fail_outstanding(self, client_id: str, why: str) -> int:
        """Record every request still granted to `client_id` as `worker_lost`."""
        w = self.workers.get(client_id)
        if w is not None:
            w.lost = True
        name = (w.info.get("worker") if w is not None else None) or client_id
        lost = self._record_granted(client_id, Failure("worker_lost", (
            f"worker {name} ({client_id}) {why}; this request was in flight there and its "
            "outcome is unknown")), lost=True)
        # its conversations between two turns take no more either
        while w is not None and w.going > 0:
            w.going -= 1
            self.session.budget.conversation_dropped()
        if lost:
            log.error("anvil: worker %s %s: %d in-flight request(s) recorded as worker_lost",
                      name, why, lost)
        return lost

    def _gone(self, client_id: str) -> bool:
        node = self.runner.clients.get(client_id)
        return node is None or node.state == STATE_MISSING

    def _watch_lost(self) -> None:
        while True:
            gevent.sleep(LOST_POLL_S)
            for cid in {g.client_id for g in self.outstanding.values()} | {
                    c for c, w in self.workers.items() if w.going > 0}:
                w = self.workers.get(cid)
                if self._gone(cid) and not (w is not None and w.done is not None):
                    self.fail_outstanding(cid, "was lost (no heartbeat, or it quit)")

    def begin_stop(self) -> None:
        """The run is ending: no more tickets; every worker stops its users and flushes."""
        if self.closing:
            return
        self.closing = True
        self.session.budget.close()
        self.tell_workers("anvil_stop")

    def tell_workers(self, message: str, **data: Any) -> None:
        """`message` (the run's, with `data`) to every worker still here; `anvil_dead`
        (replica=i) is the master's FailureWatch's listener (`runs/plugin.py`)."""
        for cid in self.workers:
            if not self._gone(cid):
                self.runner.send_message(message, {"run_id": self.run_id, **data},
                                         client_id=cid)

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        """Wait until every granted ticket is back and every live worker confirmed its
        count; then fail what is left. Returns what `run_end` records about the workers."""
        self.begin_stop()
        if gevent.getcurrent() is not self._listener:  # else no message could arrive
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                pending = [w for w in self.workers.values()
                           if w.hello.is_set() and not w.info.get("error") and w.done is None
                           and not w.lost and not self._gone(w.client_id)]
                if not pending and not self.outstanding:
                    break
                gevent.sleep(0.02)
        for cid in {g.client_id for g in self.outstanding.values()}:
            self.fail_outstanding(cid, f"returned no record within {timeout_s:.0f} s of the "
                                  "stop")
        self._monitor.kill(block=False)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        workers = {}
        for w in self.workers.values():
            name = w.info.get("worker") or w.client_id
            sent = None if w.done is None else w.done.get("sent")
            workers[name] = {
                "client_id": w.client_id, "lost": w.lost, "records_received": w.received,
                "records_sent": sent, "confirmed": sent is not None and sent == w.received,
                "health": None if w.done is None else w.done.get("health"),
                "error": w.info.get("error")}
            if sent is not None and sent != w.received:
                log.error("anvil: worker %s says it sent %s records; %s arrived", name, sent,
                          w.received)
        return {"workers": workers, "dropped_records": list(self.dropped)}

    def client_health(self) -> dict[str, Any] | None:
        """The run's `client` block from the workers' figures (`saturation.workers_health`);
        every worker's own figures stay in `run_end`."""
        return saturation.workers_health(
            [(w.info.get("worker") or w.client_id, w.done["health"])
             for w in self.workers.values()
             if w.done is not None and isinstance(w.done.get("health"), dict)])


class MasterAgent:
    """Installs the master's message handlers once; routes them to the run's coordinator
    (`start_run` makes it, `end_run` lets it go: between runs, none)."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.runner = environment.runner
        self._coordinator: MasterCoordinator | None = None
        handlers: dict[str, Callable[[MasterCoordinator, Message], None]] = {
            "anvil_hello": lambda c, m: c.on_hello(m),
            "anvil_pong": lambda c, m: c.on_pong(m),
            "anvil_take": lambda c, m: c.on_take(m),
            "anvil_drop": lambda c, m: c.on_drop(m),
            "anvil_records": lambda c, m: c.on_records(m),
            "anvil_done": lambda c, m: c.on_done(m),
            "anvil_stuck": lambda c, m: c.on_stuck(m),
            "anvil_job_end": lambda c, m: c.on_job_end(m),
        }
        for name, route in handlers.items():
            self.runner.register_message(name, refusing(name, self._route(route),
                                                        lambda m: f"worker {m.node_id}"))
        environment.events.worker_connect.add_listener(self._on_worker_connect)

    @property
    def coordinator(self) -> MasterCoordinator | None:
        """The run in progress's coordinator (None between runs)."""
        return self._coordinator

    def start_run(self, session: RunSession, setup: WorkerSetup) -> MasterCoordinator:
        """A new run: its coordinator, to which the workers' messages go from now on."""
        self._coordinator = MasterCoordinator(self.environment, session, setup)
        return self._coordinator

    def end_run(self) -> None:
        """The run is written: its workers' messages are dropped from now on."""
        self._coordinator = None

    def _route(self, route: Callable[[MasterCoordinator, Message], None]
               ) -> Callable[[Message], None]:
        """A checked message to the run's coordinator (none between runs: dropped)."""
        def handler(msg: Message) -> None:
            c = self._coordinator
            if c is not None:
                route(c, msg)
        return handler

    def _on_worker_connect(self, client_id: str, **_: Any) -> None:
        """A worker joined while a run is going: give it the set-up before Locust gives it
        users (messages to one worker arrive in order)."""
        c = self._coordinator
        if c is not None and not c.closing and client_id not in c.workers:
            c.add_worker(client_id)
            gevent.spawn(c.sync_late, client_id)
