"""A distributed run's worker side: it measures, the master (`master.py`) decides.

`WorkerAgent` answers the master's messages (set-up, clock pings, tickets, stop); on a
sound set-up it builds a `WorkerSession`: every request body of the run, prepared before the
load from the master's calibration, a `RemoteBudget` that asks the master for each ticket,
and a `RecordShipper` that sends each finished record back in bounded batches. Messages are
plain data, checked on receipt (`wire.py`): a damaged set-up is refused with one log
line, and the worker's hello tells the master, which then leaves this worker out of the run.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import orjson
from greenlet import GreenletExit

from anvil_metrics.cluster.wire import (
    SETUP,
    TICKET_LEAD_NS,
    WorkerSetup,
    boot_id,
    refusing,
    stuck_to_wire,
)
from anvil_metrics.errors import WireError
from anvil_metrics.events import anvil_events
from anvil_metrics.live.balance import Balancer
from anvil_metrics.live.control import Ticket
from anvil_metrics.live.duetimer import DueTimer
from anvil_metrics.live.loadwindow import LoadWindow
from anvil_metrics.live.prefillgate import gate_of
from anvil_metrics.live.recorder import Recorder
from anvil_metrics.live.stuck import StuckReport, StuckWatch
from anvil_metrics.load.agentbodies import AgentBodies
from anvil_metrics.load.agentread import read_jobs
from anvil_metrics.load.body import (
    BodyBuilder,
    ConversationBodies,
    DatasetBodies,
    RequestBodies,
    TraceBodies,
)
from anvil_metrics.load.dataset import DatasetEntry, DatasetTurns
from anvil_metrics.load.mixbodies import MixBodies
from anvil_metrics.prep.counting import token_ids_of
from anvil_metrics.prep.prompts import PromptFactory
from anvil_metrics.prep.traceprompts import TracePrompts
from anvil_metrics.prep.turns import ConversationPrompts, TurnTexts
from anvil_metrics.records import Failure, RequestRecord, worker_identity
from anvil_metrics.urls import Endpoint, api_key_from_env, parse_replicas
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver
from anvil_metrics.wire.transport import SendStats

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.rpc.protocol import Message
    from locust.runners import Runner

log = logging.getLogger("anvil")

BATCH_RECORDS = 256
# how a worker sends a message to the master: its type and its fields (plain data)
Send = Callable[[str, dict[str, Any]], None]


class RemoteBudget:
    """The worker's view of the master's request budget: `take()` (`take_followup()`) asks
    the master for a ticket (a conversation's next turn) and waits for it, and for its due
    time (an open loop's ticket comes `master.TICKET_LEAD_NS` early, its due time on this
    worker's clock); `give_back` is a no-op (the record returns the ticket). A None ends
    the asking, but for a budget of `conversations` a start's None ends only the starts:
    later turns are still asked for. `on_orphan` is given each ticket that arrives for a
    user no longer waiting for it. An agent job's follow-up is asked for
    `followup_lead_ns` before its wait ends (`live/agentahead.py`): the master's round
    trip then runs during the wait, not after it."""

    followup_lead_ns = TICKET_LEAD_NS

    def __init__(self, send: Send, run_id: str,
                 conversations: bool = False,
                 on_orphan: Callable[[Ticket], None] | None = None) -> None:
        self._send = send
        self._run_id = run_id
        self._seq = 0
        self._waiting: dict[int, gevent.event.AsyncResult] = {}
        self._abandoned: set[int] = set()
        self._closed = False
        self._starts: set[int] = set()  # asks (seq) for a new conversation or request
        self._no_starts = False
        self._conversations = conversations  # the master's budget counts conversations
        self._on_orphan = on_orphan
        self._timers: list[DueTimer] = []  # one per user waiting for a due time at once

    def take(self) -> Ticket | None:
        if self._no_starts:
            return None
        return self._ask(followup=False)

    def take_followup(self) -> Ticket | None:
        """A conversation's next turn: the master's budget hands it out at once."""
        return self._ask(followup=True)

    def _ask(self, *, followup: bool) -> Ticket | None:
        if self._closed:
            return None
        self._seq += 1
        seq = self._seq
        result = gevent.event.AsyncResult()
        self._waiting[seq] = result
        if not followup:
            self._starts.add(seq)
        self._send("anvil_take", {"run_id": self._run_id, "seq": seq, "followup": followup})
        try:
            ticket = result.get()
        except GreenletExit:  # the user is being stopped; a ticket may still come
            if self._waiting.pop(seq, None) is not None:
                self._abandoned.add(seq)
            raise
        if ticket is not None and ticket.due_ns is not None:  # sent ahead: wait out the rest
            timer = self._timers.pop() if self._timers else DueTimer()
            try:
                timer.wait_until(ticket.due_ns)
            finally:
                self._timers.append(timer)
        return ticket

    def deliver(self, seq: int, ticket: Ticket | None) -> None:
        result = self._waiting.pop(seq, None)
        start = seq in self._starts
        self._starts.discard(seq)
        if result is not None:
            result.set(ticket)
            if ticket is None and start and self._conversations:
                # a budget of conversations: none starts any more, but those going on
                # still take their later turns
                self._no_starts = True
            elif ticket is None:  # the master's budget is spent: stop asking
                self._closed = True
        elif ticket is not None and (seq in self._abandoned or self._closed):
            self._abandoned.discard(seq)
            if self._on_orphan is not None:
                self._on_orphan(ticket)

    def conversation_dropped(self) -> None:
        """A user stopped between two turns: the master's budget counts its conversation
        over."""
        if not self._closed:
            self._send("anvil_drop", {"run_id": self._run_id})

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None:
        """Nothing to do: the master returns a ticket when its record arrives (and reads
        from it whether its conversation is over)."""

    def user_ready(self) -> None:
        """Nothing to do: the master's arrivals begin at its `spawning_complete`, which
        follows every worker's spawning (`control.RequestBudget.all_spawned`)."""

    def close(self) -> None:
        self._closed = True
        waiting, self._waiting = self._waiting, {}
        for result in waiting.values():
            result.set(None)


class RecordShipper:
    """Sends finished records to the master in bounded batches, as they finish: records
    finishing in the same moment share a message; none waits for a timer."""

    def __init__(self, send: Send, run_id: str,
                 conversations: bool = False) -> None:
        self._send = send
        self._run_id = run_id
        self._pending: list[bytes] = []
        self._scheduled = False
        self.sent = 0

    def take(self, record: RequestRecord) -> None:
        """Queue `record` for the next message (a `recorder.RecordSink`)."""
        self._pending.append(orjson.dumps(record.to_json_dict()))
        if not self._scheduled:
            self._scheduled = True
            gevent.spawn(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        while self._pending:
            batch, self._pending = (self._pending[:BATCH_RECORDS],
                                    self._pending[BATCH_RECORDS:])
            self._send("anvil_records", {"run_id": self._run_id, "lines": batch})
            self.sent += len(batch)


def _conversations(setup: WorkerSetup, dataset: list[DatasetEntry] | None
                   ) -> ConversationBodies | None:
    """A conversation run's turns as the master sized them (its `turn_texts`), or a
    dataset's; None without a [conversation]."""
    sc = setup.scenario
    if sc.conversation is None:
        return None
    if dataset is not None:
        return ConversationBodies(sc, setup.model, DatasetTurns(dataset, setup.run_nonce))
    t = setup.turn_texts or {}
    texts = TurnTexts(t.get("turn") or "", t.get("prefix") or "", t.get("system"), {})
    return ConversationBodies(sc, setup.model, ConversationPrompts(texts, setup.run_nonce))


class WorkerSession:
    """A worker's share of a run: what `ChatStreamUser` borrows (a `runctx.RunContext`:
    endpoint, key, scenario, bodies, budget, send stats, requests in flight), the shipping
    of its records and of its stuck requests' reports, and its generator-health figures."""

    def __init__(self, setup: WorkerSetup, send: Send
                 ) -> None:
        self.run_id = setup.run_id
        self.scenario = setup.scenario
        self.replicas = parse_replicas(setup.host)
        self.endpoint = self.replicas[0]
        self.api_key = api_key_from_env() or setup.api_key  # its own key first
        self.model = setup.model
        prompts = PromptFactory(setup.calibration, setup.scenario.context_seed,
                                setup.run_nonce, setup.scenario.system_prompt, setup.shared,
                                words=setup.words, prefix_words=setup.prefix_words)
        sc = setup.scenario
        dataset = sc.dataset.read() if sc.dataset is not None else None  # the same file
        self.bodies: RequestBodies
        if sc.trace is not None and sc.trace.agent:  # agent jobs: the same file, read here
            self.bodies = AgentBodies(sc, setup.model, read_jobs(sc.trace.path, sc.trace.fmt),
                                      setup.run_nonce, round(setup.calibration.overhead_tokens),
                                      setup.opening_tokens)
        elif sc.trace is not None:  # a replay: the same trace file, read here
            self.bodies = TraceBodies(sc, setup.model, sc.trace.read(),
                                      TracePrompts(setup.run_nonce, sc.trace.block_tokens,
                                                   round(setup.calibration.overhead_tokens)),
                                      setup.run_nonce)
        elif dataset is not None and sc.conversation is None:
            self.bodies = DatasetBodies(sc, setup.model, dataset, setup.dataset_counted)
        elif sc.mix is not None and sc.conversation is None:  # each request's class, model
            mix = MixBodies(sc, setup.model, prompts, setup.sizes, setup.template_tokens)
            mix.prepare()  # the master sized its classes' prompts too (`words`)
            self.bodies = mix
        else:
            self.bodies = _single_bodies(setup, prompts, self.endpoint, self.api_key)
        self.conversations = _conversations(setup, dataset)
        self.worker = worker_identity()
        self.send_stats = SendStats()  # its users' writes (a worker does not report them)
        self._send = send
        self.budget = RemoteBudget(send, setup.run_id, conversations=bool(
            sc.conversation is not None and sc.conversation.conversations is not None
            or sc.trace is not None and sc.trace.agent), on_orphan=self._orphan)
        self.shipper = RecordShipper(send, setup.run_id)
        self.finished = False
        self.load = LoadWindow()
        self.recorder = Recorder(anvil_events.request_record, self.shipper)
        self.recorder.start()
        anvil_events.job_end.add_listener(self._job_end)  # the master's live job figures
        # its users' requests in flight, watched for stuck ones: each changed report goes
        # to the master (at most once a second), which logs them merged
        self.in_flight: set[StreamObserver] = set()
        self.stuck = StuckWatch(sc.timeouts.stuck_after_s, self.in_flight, say=None,
                                on_report=self._report_stuck)
        self._stuck_sent: StuckReport | None = None
        self.prefill_gate = gate_of(sc.prefill_concurrency)  # each worker gates its own
        self.balancer = Balancer(len(self.replicas), sc.balance)  # and balances its own

    def _job_end(self, job: int, answered: int, completed: bool, **_: Any) -> None:
        if not self.finished:
            self._send("anvil_job_end", {"run_id": self.run_id, "job": job,
                                         "answered": answered, "completed": completed})

    def _report_stuck(self, report: StuckReport) -> None:
        if report != self._stuck_sent:
            self._stuck_sent = report
            self._send("anvil_stuck", stuck_to_wire(self.run_id, report))

    def _orphan(self, ticket: Ticket) -> None:
        """A ticket arrived for a user that was stopped while waiting for it: the request
        was never sent, but it was issued, so it is recorded (never silently dropped)."""
        now = time.perf_counter_ns()
        record = RequestRecord(
            request_index=ticket.request_index, start_ns=now, end_ns=now,
            warmup=ticket.warmup, planned_context_tokens=ticket.planned_context_tokens,
            failure=Failure("cancelled", "the run was stopped before this request was sent",
                            phase="connect"),
            worker=self.worker)
        anvil_events.request_record.fire(record=record)

    def begin_load(self) -> None:
        if not self.load.started:
            self.load.begin()
        self.stuck.start()

    def end_load(self) -> None:
        self.load.end()

    def stop(self, runner: Runner) -> None:
        """End this worker's share now (the master's `anvil_stop`, or a SIGTERM here): no
        more tickets, the users stopped (their requests in flight get `--stop-timeout`, then
        are `cancelled`), every record shipped and the master told how many."""
        self.budget.close()
        runner.stop()
        self.finish()  # test_stop has done it already unless the runner was not running

    def finish(self, _stats: dict[str, Any] | None = None) -> None:
        """Stop taking tickets, ship what is left, then say how many records were sent
        (the master checks it received exactly that many)."""
        if self.finished:
            return
        self.finished = True
        self.budget.close()
        self.stuck.stop()
        self.end_load()
        self.recorder.stop()
        anvil_events.job_end.remove_listener(self._job_end)
        self.shipper.flush()
        self._send("anvil_done", {"run_id": self.run_id, "sent": self.shipper.sent,
                                  "worker": self.worker, "health": self.load.end()})


class WorkerAgent:
    """Installs the worker's message handlers; holds the worker's current session."""

    def __init__(self, environment: Environment,
                 set_current: Callable[[WorkerSession | None], None]) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.session: WorkerSession | None = None
        self._set_current = set_current
        self.runner.register_message(SETUP, self._on_setup)
        for name, act in (("anvil_ping", self._on_ping), ("anvil_ticket", self._on_ticket),
                          ("anvil_stop", self._on_stop), ("anvil_dead", self._on_dead)):
            self.runner.register_message(name, refusing(name, act, lambda _: "the master"))

    def send(self, msg_type: str, data: dict[str, Any]) -> None:
        self.runner.send_message(msg_type, data)

    def _on_setup(self, msg: Message, **_: Any) -> None:
        """A new run: end the previous one here, then set up from the master's set-up, or
        refuse it (one log line) when it cannot be read. Either way the hello says which."""
        hello: dict[str, Any] = {"run_id": None, "worker": worker_identity(),
                                 "host": socket.gethostname(), "pid": os.getpid(),
                                 "boot_id": boot_id(), "error": None}
        try:
            setup: WorkerSetup | None = WorkerSetup.from_wire(msg.data)
        except WireError as e:  # damaged, or from a master of another anvil version
            log.error("anvil: refused the run's set-up from the master: %s", e)
            setup, hello["error"] = None, str(e)
        old = self.session
        if old is not None and not old.finished:
            old.finish()
        self.session = None
        if setup is not None:
            hello["run_id"] = setup.run_id
            try:
                self.session = WorkerSession(setup, self.send)
            except Exception as e:  # a bug or a broken install on this worker: say so
                log.exception("anvil: this worker could not set up the run")
                hello["error"] = f"{type(e).__name__}: {e}"
        self._set_current(self.session)
        self.send("anvil_hello", hello)

    def _current(self, data: dict[str, Any]) -> WorkerSession | None:
        s = self.session
        return s if s is not None and data["run_id"] == s.run_id else None

    def _on_ping(self, msg: Message) -> None:
        t_worker = time.perf_counter_ns()
        d = msg.data
        self.send("anvil_pong", {"run_id": d["run_id"], "seq": d["seq"],
                                 "t_master_ns": d["t_master_ns"], "t_worker_ns": t_worker})

    def _on_ticket(self, msg: Message) -> None:
        s = self._current(msg.data)
        if s is None:
            return
        raw = msg.data["ticket"]
        s.budget.deliver(msg.data["seq"], None if raw is None else Ticket(*raw))

    def _on_stop(self, msg: Message) -> None:
        s = self._current(msg.data)
        if s is None:
            return
        s.stop(self.runner)

    def _on_dead(self, msg: Message) -> None:
        """The master counted a replica dead: this worker's balancer skips it too."""
        s = self._current(msg.data)
        if s is None:
            return
        replica = msg.data["replica"]
        if replica >= len(s.balancer.dead):
            log.error("anvil: refused a message from the master: anvil_dead: replica = %d is "
                      "not allowed: a replica of this run (0 to %d)", replica,
                      len(s.balancer.dead) - 1)
            return
        s.balancer.mark_dead(replica)


def _single_bodies(setup: WorkerSetup, prompts: PromptFactory, endpoint: Endpoint,
                   api_key: str | None) -> BodyBuilder:
    """A worker's single-turn bodies of the master's sizes; with `--prompt-ids`, the same
    texts' token ids, asked of the same server (`/tokenize` answers alike for every one)."""
    sc = setup.scenario
    probe = None
    if sc.prompt_ids:
        probe = ChatClient(endpoint, api_key,
                           connect_timeout_s=sc.timeouts.connect_s,
                           network_timeout_s=sc.timeouts.first_byte_s, extra_headers=sc.headers)
    try:
        bodies = BodyBuilder(sc, setup.model, prompts,
                             None if probe is None else token_ids_of(probe, setup.model))
        bodies.prepare(setup.sizes)
    finally:
        if probe is not None:
            probe.close()
    return bodies
