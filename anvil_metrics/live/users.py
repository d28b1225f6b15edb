"""The Locust user that streams chat completions. Thin: take a ticket, send, observe, fire.

Each `ChatStreamUser` owns one HTTP connection and issues one request at a time, so the
number of users is the number of simultaneous streams. The run's shared state (scenario,
request bodies, request budget) is a `runctx.RunContext` the plugin keeps on Locust's
`Environment` when the test starts; the user only borrows it.

For every request it fires anvil's events (`first_output`, `first_content` live;
`stream_end` and `request_record` at the end) and exactly one Locust `request` event with
the end-to-end time, so Locust's UI and `--csv` count requests and failures. Locust's
figures are rounded; anvil's exact ones come from the records.

With agent jobs (`--trace` of jobs: `load/agentbodies.py`), a user is one agent slot: a
task is one whole job, its root session sent here and each sub-agent's requests on a
connection of its own (`live/agentrun.py` keeps their order); every request is recorded
the same way (`_stream`).

After a failed request a closed-loop user waits before its next one (`backoff_s`: 50 ms
doubling to 1 s, reset by an answer), so a dead server is not hammered in a tight loop;
when it stays dead, the run ends itself (`abort.py`).

A request's start is stamped once, by the client just before its first byte is written
(`ChatClient.stream_chat`; when its connect fails, then): the observer's `start_ns`. The
stamp taken here before the send is provisional, kept only by a request stopped before the
client stamps it. Every consumer reads `start_ns`: the record, the `first_output` /
`first_content` events, the start delay, and Locust's `response_time` and `start_time`
(the same instant on the wall clock, `_wall_s`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
from greenlet import GreenletExit
from locust import User, task

from anvil_metrics.events import anvil_events
from anvil_metrics.live.agentahead import JobTickets
from anvil_metrics.live.agentrun import JobRun, Waits
from anvil_metrics.live.control import Ticket
from anvil_metrics.live.runctx import RunContext, run_in_progress
from anvil_metrics.load.agentbodies import AgentBodies
from anvil_metrics.load.agentjob import Session
from anvil_metrics.load.agentstart import start_turn
from anvil_metrics.load.body import Conversation, Judge
from anvil_metrics.load.scenariofields import ENDPOINT_PATHS, STREAMED_ENDPOINTS
from anvil_metrics.records import NOT_THE_SERVERS
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.eventsobs import OBSERVERS
from anvil_metrics.wire.observe import StreamObserver, prompt_tokens_of

log = logging.getLogger("anvil")

REQUEST_NAME = "chat.completions"  # Locust's name of a request (another endpoint's: its
WARMUP_NAME = "chat.completions [warm-up]"  # own, e.g. "responses [warm-up]")


def _wall_s(perf_ns: int) -> float:
    """The wall-clock time (`time.time()`, s) of the `perf_counter_ns` stamp `perf_ns`: the
    one start stamp, as Locust's `start_time` wants it."""
    return time.time() - (time.perf_counter_ns() - perf_ns) / 1e9


BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.05, 1.0


def backoff_s(failed_in_row: int) -> float:
    """A closed-loop user's wait before its next request after `failed_in_row` failures in a
    row: none after an answer, then 50 ms doubling to at most 1 s. A server that refuses
    connections answers in microseconds: without it each user would retry in a tight loop
    (seen: 40,927 failed requests in 12 s, 73 % of a CPU). An open loop's schedule sets its
    own pace and never waits here."""
    if failed_in_row <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(failed_in_row - 1, 16))


def _connected(run: RunContext, endpoint: Endpoint | None = None) -> ChatClient:
    client = _client(run, endpoint)
    client.connect()
    return client


def _client(run: RunContext, endpoint: Endpoint | None = None) -> ChatClient:
    """A user's HTTP client (one connection) to `endpoint` (None: the run's first), as the
    scenario sets it up."""
    sc = run.scenario
    return ChatClient(endpoint or run.endpoint, run.api_key,
                      connect_timeout_s=sc.timeouts.connect_s,
                      network_timeout_s=sc.timeouts.first_byte_s,
                      idle_timeout_s=sc.timeouts.idle_s, total_timeout_s=sc.timeouts.total_s,
                      extra_headers=sc.headers, path=ENDPOINT_PATHS[sc.endpoint],
                      streamed=sc.endpoint in STREAMED_ENDPOINTS, send_stats=run.send_stats,
                      max_line_bytes=sc.max_line_bytes)


class StreamFailure(Exception):
    """What Locust's failure table shows for a failed stream: kind and status only, so
    failures group by cause rather than by message."""


def _fire_first_output(obs: StreamObserver, t_ns: int) -> None:
    anvil_events.first_output.fire(request_index=obs.request_index, t_ns=t_ns,
                                   start_ns=obs.start_ns, warmup=obs.warmup)


def _fire_first_content(obs: StreamObserver, t_ns: int) -> None:
    anvil_events.first_content.fire(request_index=obs.request_index, t_ns=t_ns,
                                    start_ns=obs.start_ns, warmup=obs.warmup)


class ChatStreamUser(User):
    """Streams `/v1/chat/completions` back to back (no think time: load is set by -u)."""

    abstract = True

    _idle = False  # nothing left to send: wait (killable) until the run stops
    _backoff_s = 0.0  # closed loop: the wait after a failed request (`backoff_s`)
    _failed_in_row = 0
    _talk: Conversation | None = None  # the conversation this user is in, if any
    _think_s = 0.0  # a conversation's think time before its next turn
    _open_loop = False  # the last request the schedule gave was due at a time of its own
    # Locust's names of a request, by warm-up (another endpoint's are set in on_start)
    _names = {False: REQUEST_NAME, True: WARMUP_NAME}
    _observer: type[StreamObserver] = StreamObserver  # another endpoint's: set in on_start

    def wait_time(self) -> float:
        return 3600.0 if self._idle else self._backoff_s + self._think_s

    def _idle_until_stopped(self) -> None:
        """Wait the way Locust can stop at once (its `wait`), not inside a running task,
        which a stop would wait --stop-timeout for."""
        self._idle = True
        try:
            self.wait()
        finally:
            self._idle = False

    def on_start(self) -> None:
        run = run_in_progress(self.environment)
        self.run = run
        self.client = None
        # an agent slot's connections for sub-agents, opened before the load: a job's
        # fan-out opening several at once took ~0.3 ms of the loop each, and the first
        # wave's ~60 made waits due then ~20 ms late
        self._spares: list[ChatClient] = []
        # --host URL,URL: one connection per replica, each request on the balancer's pick
        self._replica_clients: list[ChatClient] = []
        if run is None:  # the run failed to start (logged); the plugin is ending it
            return
        try:
            self.client = _client(run)
            self.client.connect()
            if len(run.replicas) > 1:
                self._replica_clients = [self.client, *(
                    _connected(run, e) for e in run.replicas[1:])]
            if isinstance(run.bodies, AgentBodies):  # sub-agents' connections, opened now
                self._spares = [_connected(run) for _ in range(run.bodies.spare_connections)]
        finally:  # an open loop's arrivals begin when every user is ready (control.py)
            run.budget.user_ready()
        self._free_ns = time.perf_counter_ns()  # when this user could send its next request
        endpoint = run.scenario.endpoint
        if endpoint != "chat":
            self._names = {False: endpoint, True: f"{endpoint} [warm-up]"}
        self._observer = OBSERVERS.get(endpoint, StreamObserver)

    def on_stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        for other in (*getattr(self, "_spares", ()), *getattr(self, "_replica_clients", ())[1:]):
            other.close()
        run = getattr(self, "run", None)
        if self._talk is not None and not self._talk.over and run is not None:
            # stopped between two turns: the conversation takes no more
            self._talk.end()
            run.budget.conversation_dropped()

    @task
    def chat(self) -> None:
        run = self.run
        if run is None:
            self._idle_until_stopped()
            return
        self._think_s = 0.0  # waited (Locust's wait) before this task
        if isinstance(run.bodies, AgentBodies):
            self._agent_job(run, run.bodies)
            return
        take0 = time.perf_counter_ns()
        # a conversation going on sends its next turn now: in an open loop the schedule's
        # arrivals are conversation starts, so its later turns are follow-ups
        going_on = self._talk is not None and not self._talk.over
        ticket = run.budget.take_followup() if going_on else run.budget.take()
        if ticket is None:
            # The budget is spent: this user idles until the run is stopped.
            self._idle_until_stopped()
            return
        if not going_on:  # a follow-up keeps its conversation's start's kind of loop
            self._open_loop = ticket.due_ns is not None
        if ticket.due_ns is not None:  # open loop: the schedule's due time
            due_ns = ticket.due_ns
        else:  # the previous request's end (and think time), moved by the wait for this
            # ticket (a planned wait: a burst barrier, or the master's reply); the client's
            # own delay is the rest
            due_ns = getattr(self, "_free_ns", take0) + (time.perf_counter_ns() - take0)
        talk = None if ticket.warmup else self._turn_of(run, ticket.request_index)
        if talk is None:
            body = run.bodies.build_parts(ticket.planned_context_tokens, ticket.request_index,
                                          ticket.warmup)
            headers = b"" if ticket.warmup else run.bodies.header_for(ticket.request_index)
        else:  # the conversation's history and its next message
            body, headers = talk.next_body(), talk.header
        judge = None if talk is not None else run.bodies.judge(ticket.request_index)
        cancel = run.scenario.cancel  # a planned cancellation (`load/cancel.py`)
        extra = talk.extra() if talk is not None else run.bodies.extra(ticket.request_index)
        # --host URL,URL: the balancer picks a replica just before the send (None here)
        client = None if self._replica_clients else self.client

        def done(obs: StreamObserver) -> None:
            if talk is not None:
                self._answered(talk, obs)
            self._after(obs, closed_loop=not self._open_loop)
            run.budget.give_back(ticket, talk is None or talk.over)

        self._stream(
            run, client, ticket, due_ns, body, headers, done,
            planned=self._planned(run, ticket, talk), keep_text=talk is not None,
            # a conversation's turn, else what the bodies say (a mix's class and model)
            extra=extra, judge=judge,
            # the cap its body sends: a stream past it is an `overrun` (`wire.observe`)
            max_tokens=(talk.output_cap if talk is not None
                        else run.bodies.output_cap(ticket.request_index)),
            cancel_after=(cancel.after if cancel is not None and not ticket.warmup
                          and cancel.cancels(ticket.request_index) else None))

    def _stream(self, run: RunContext, client: ChatClient | None, ticket: Ticket, due_ns: int,
                body: tuple[bytes, ...] | bytes, headers: bytes,
                done: Callable[[StreamObserver], None], *, planned: int | None,
                keep_text: bool, extra: dict[str, Any] | None, max_tokens: int | None,
                cancel_after: Any = None, judge: Judge | None = None) -> StreamObserver:
        """Send one request on `client` (None: the replica `run.balancer` picks after the
        prefill gate, in the record's `extra.replica`), observe it, record it, and call
        `done` with its observer (whatever happened: its ticket goes back there)."""
        now = time.perf_counter_ns()
        obs = self._observer(
            ticket.request_index, now, warmup=ticket.warmup, planned_context_tokens=planned,
            worker=run.worker, on_first_output=_fire_first_output,
            on_first_content=_fire_first_content, keep_text=keep_text, extra=extra,
            max_tokens=max_tokens, judge=judge)
        # provisional: the client stamps the start again, keeping `due_ns`, just before
        # the request is written (a request stopped before that keeps this one)
        obs.begin(now, due_ns, waited_for_user=ticket.waited)
        nbytes = 0
        slot = None  # its place in the prefill gate, if the run has one (`prefillgate`)
        replica = None  # the replica it went to, in flight there until it ends
        # Whatever happens, the request is recorded once and its ticket returned: a run
        # stopped mid-stream records it as `cancelled`, an unforeseen error as
        # `client_error` (with its traceback in the log), a stream already finished keeps
        # its result even if the stop lands during the bookkeeping below.
        try:
            if run.prefill_gate is not None:  # waits here, before the send's own stamp
                slot = run.prefill_gate.admit(obs)
            if client is None:
                replica = run.balancer.pick(ticket.request_index)
                client = self._replica_clients[replica]
                obs.sent_to(replica)
            run.in_flight.add(obs)  # watched for a stuck wait (`stuck.py`) until recorded
            nbytes = client.stream_chat(body, obs, headers, cancel_after)
            # Yield once before the bookkeeping: streams of one server batch end together,
            # and every other stream whose end is already readable gets to stamp it first,
            # rather than after this one's record, Locust event and next request.
            gevent.sleep(0)
        except GreenletExit:
            if not obs.done:
                obs.fail("cancelled", "the run was stopped while this request was in flight",
                         time.perf_counter_ns(), phase=obs.phase)
            raise
        except Exception as e:
            if not obs.done:
                log.exception("anvil: request %d failed inside the client", ticket.request_index)
                obs.fail("client_error", f"{type(e).__name__}: {e}", time.perf_counter_ns(),
                         phase=obs.phase)
        finally:
            if slot is not None:  # freed at its first token, else here: never leaked
                slot.release()
            if replica is not None:
                run.balancer.done(replica)
            try:
                self._report(obs, nbytes)
            finally:
                run.in_flight.discard(obs)
                done(obs)
        return obs

    def _agent_job(self, run: RunContext, agents: AgentBodies) -> None:
        """One agent job, start to end (`live/agentrun.py`): its first request takes the
        budget's next start (an open loop's: at its due time), every later one a follow-up
        (`agentahead.py`); each sub-agent sends on a connection of its own, its spare,
        given back when it ends answered (closed if not). The job's end counts it over
        (`conversation_dropped`). A sampled start first sends its prime (`_start_turn`)."""
        first = run.budget.take()
        if first is None:
            self._idle_until_stopped()
            return
        n = first.start  # the run's job number (a budget of jobs numbers its starts)
        assert n is not None
        tickets = JobTickets(run.budget, first, run.worker, partial(agents.turn_extra, n))
        clients: dict[str, ChatClient] = {}
        plan = run.scenario.trace
        assert plan is not None
        answered_last: set[str] = set()  # sessions whose latest turn was answered
        # each session's next body, built once its previous answer ended: during the wait
        # before it, not between its due time and its send (a 30k-token prompt: ~0.2 ms)
        ahead: dict[str, tuple[int, bytes]] = {}

        def send(session: Session, k: int, tool_wait_ns: int, join_wait_ns: int) -> int | None:
            answered_last.discard(session.id)
            ticket = tickets.next(session)
            if ticket is None:  # the budget is spent or the run is stopping
                return None
            # due now (after the job's waits), or at the schedule's arrival: a sub-agent's
            # connection, opened before its first request, is the client's delay
            due_ns = ticket.due_ns if ticket.due_ns is not None else time.perf_counter_ns()
            client = self.client if session.parent_id is None else clients.get(session.id)
            if client is None:
                client = clients[session.id] = (self._spares.pop() if self._spares
                                                else _connected(run))
            turn = session.turns[k]
            built = ahead.pop(session.id, None)
            body = built[1] if built is not None and built[0] == k else agents.body(
                n, session, k)
            obs = self._stream(
                run, client, ticket, due_ns, body,
                agents.headers(n, session, k),
                lambda o: run.budget.give_back(ticket, conversation_over=False),
                planned=turn.input_tokens, keep_text=False,
                extra=agents.turn_extra(n, session, k, tool_wait_ns, join_wait_ns),
                max_tokens=turn.output_tokens)
            if session.parent_id is None:  # a closed loop's backoff follows the root's
                self._after(obs, closed_loop=first.due_ns is None)
            if obs.failure is not None:
                return None
            answered_last.add(session.id)
            if k + 1 < len(session.turns):
                ahead[session.id] = (k + 1, agents.body(n, session, k + 1))
            return obs.end_ns if obs.end_ns is not None else time.perf_counter_ns()

        def ended(session: Session) -> None:
            client = clients.pop(session.id, None)
            if client is None:
                return
            if session.id in answered_last:  # its connection is sound: kept for the next
                self._spares.append(client)
            else:
                client.close()

        tally = _JobTally()  # what the job's end tells the live figures (`jobfigures.py`)
        send = tally.counting(send)

        try:
            k = self._start_turn(run, agents, n)
            JobRun(agents.job(n), send, Waits(plan.tool_speed, plan.max_tool_wait_s,
                                              plan.max_idle_s),
                   on_session_end=ended, start_turn=k, before_wait=tickets.before_wait).run()
        finally:
            tickets.close()
            for c in clients.values():
                c.close()
            agents.job_ended(n)
            # completed: every turn answered, and not stopped (no exception in flight: a
            # user stopped between two turns has all it sent answered, yet is cut)
            anvil_events.job_end.fire(job=n, answered=tally.answered,
                                      completed=tally.all_answered and sys.exc_info()[0] is None)
            run.budget.conversation_dropped()  # the job is over

    def _start_turn(self, run: RunContext, agents: AgentBodies, n: int) -> int:
        """The root turn run job `n` starts at (`load/agentstart.py`: 0, or a sampled
        start's seeded draw), its prime sent first where it has one (a warm-up of its own,
        index n, outside the budget)."""
        plan = run.scenario.trace
        assert plan is not None
        job = agents.job(n)
        k = 0 if plan.start_at == "first" else start_turn(plan.start_seed, n,
                                                           len(job.root.turns))
        prime = agents.prime(n, k)
        if prime is not None:
            self._stream(run, self.client, Ticket(n, True, prime[1]),
                         time.perf_counter_ns(), prime[0], agents.headers(n, job.root, k),
                         lambda o: None, planned=prime[1], keep_text=False,
                         extra=agents.turn_extra(n, job.root, k, 0), max_tokens=1)
        return k

    @staticmethod
    def _planned(run: RunContext, ticket: Ticket, talk: Conversation | None) -> int | None:
        """The request's planned prompt size: the bodies' (`RequestBodies.planned`: the
        ticket's, a mix's class's, a dataset entry's as counted before the load or none),
        none for a conversation's turn (its history is the server's answers:
        `history_tokens` says what it was)."""
        if talk is not None:
            return None
        return run.bodies.planned(ticket.request_index, ticket.planned_context_tokens)

    def _turn_of(self, run: RunContext, request_index: int) -> Conversation | None:
        """The conversation whose turn request `request_index` is (None: single-turn
        requests): this user's, or a new one when it has none or its last is over. A
        conversation's number is the request index of its first turn, unique in the run,
        so its draws (turns, think times) are the same whichever user runs it."""
        if run.conversations is None:
            return None
        if self._talk is None or self._talk.over:
            self._talk = run.conversations.start(request_index)
        return self._talk

    def _answered(self, talk: Conversation, obs: StreamObserver) -> None:
        """An answered turn joins the history and the next one waits its think time; a
        failed or stopped one ends the conversation (its later turns are never sent)."""
        if obs.failure is None and obs.text is not None:
            talk.answered("".join(obs.text), prompt_tokens_of(obs.usage), obs.response_id)
            self._think_s = talk.think_s()
        else:
            talk.end()  # the next request opens a new conversation
            self._think_s = 0.0
        if talk.over:
            self._talk = None

    def _after(self, obs: StreamObserver, *, closed_loop: bool) -> None:
        """When this user may send again: at once after an answer; in a closed loop, after
        `backoff_s` of its failures in a row, and in a conversation after its think time
        (both waited in Locust's `wait`, so a stop ends them at once; the next request's
        start delay is counted from their end)."""
        failure = obs.failure
        if failure is None or failure.kind in NOT_THE_SERVERS or not closed_loop:
            self._failed_in_row = 0
        else:
            self._failed_in_row += 1
        self._backoff_s = backoff_s(self._failed_in_row)
        end = obs.end_ns if obs.end_ns is not None else time.perf_counter_ns()
        self._free_ns = end + int((self._backoff_s + self._think_s) * 1e9)

    def _report(self, obs: StreamObserver, nbytes: int) -> None:
        record = obs.finish()
        anvil_events.stream_end.fire(record=record)
        anvil_events.request_record.fire(record=record)
        if record.failure is not None and record.failure.kind in NOT_THE_SERVERS:
            # stopped by the run's end or cancelled on purpose, not answered badly: counted
            # in anvil's load.cancelled or cancel block, and kept out of Locust's figures
            # (and its exit code)
            return
        end = record.end_ns if record.end_ns is not None else time.perf_counter_ns()
        exc = None
        if record.failure is not None:
            f = record.failure
            status = f" HTTP {f.http_status}" if f.http_status else ""
            exc = StreamFailure(f"{f.kind}{status} ({f.phase or 'unknown phase'})")
        self.environment.events.request.fire(
            request_type="POST",
            name=self._names[record.warmup],
            response_time=(end - record.start_ns) / 1e6,
            response_length=nbytes,
            response=None,
            context={"request_index": record.request_index},
            exception=exc,
            start_time=_wall_s(record.start_ns),
            url=None,
        )


class ChatUser(ChatStreamUser):
    """The concrete user a locustfile exposes (subclass `ChatStreamUser` to customise)."""

    abstract = False


class _JobTally:
    """An agent job's turns as its end tells them (`anvil_events.job_end`): how many were
    answered, and whether all were (a failed turn, or one the budget did not let go, is
    not). Counted around the job's `send`, which says so by what it returns (nothing, or
    False: not answered)."""

    def __init__(self) -> None:
        self.answered = 0
        self.all_answered = True

    def counting(self, send: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            got = send(*args)
            if got is None or got is False:
                self.all_answered = False
            else:
                self.answered += 1
            return got
        return counted
