"""The run in progress, as users see it, and where it lives: on Locust's `Environment`.

Why a Protocol and an attribute rather than a module global: a user needs the same few
things from a local run (`session.RunSession`) and from a distributed worker's share of one
(`cluster.worker.WorkerSession`), and Locust already hands every user its `Environment`. So
the plugin stores the run there (`environment.anvil_run`, set at the start, cleared when it
ends; a worker's is set by `cluster.worker.WorkerAgent` through the callback the plugin
gives it), users read it from `self.environment`, and `RunContext` says exactly what they may read.
`environment.anvil_latest` is the run in progress, else the last one started: what the web
UI shows, which outlives the run.

Nothing here imports Locust or the run's machinery at run time: the types are for readers
and checkers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from locust.env import Environment

    from anvil_metrics.live.balance import Balancer
    from anvil_metrics.live.control import Ticket
    from anvil_metrics.live.prefillgate import PrefillGate
    from anvil_metrics.load.body import ConversationBodies, RequestBodies
    from anvil_metrics.load.scenario import Scenario
    from anvil_metrics.urls import Endpoint
    from anvil_metrics.wire.observe import StreamObserver
    from anvil_metrics.wire.transport import SendStats

RUN_ATTR = "anvil_run"
LATEST_ATTR = "anvil_latest"


@runtime_checkable
class TicketSource(Protocol):
    """The run's request budget: `take` blocks until the next request may be sent and
    returns its ticket (None: the budget is spent or the run is stopping); `take_followup`
    returns a conversation's next turn (or an agent job's next request) at once (an open
    loop's arrivals are conversation or job starts); every ticket taken is given back once
    its request is recorded; `user_ready` says one user of this process has finished its
    start (an open loop's arrivals wait for every user: `control.RequestBudget`).
    `followup_lead_ns`: how long before an agent job's follow-up is due its ticket is asked
    for (0: when due; a distributed worker's: the master's round trip kept out of the
    wait, `live/agentahead.py`)."""

    followup_lead_ns: int

    def take(self) -> Ticket | None: ...

    def take_followup(self) -> Ticket | None: ...

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None: ...

    def conversation_dropped(self) -> None: ...

    def user_ready(self) -> None: ...


@runtime_checkable
class RunContext(Protocol):
    """What a `ChatStreamUser` borrows from the run in progress (read-only).

    - `endpoint`, `api_key`: where to send and with which key (None: no key);
    - `replicas`: every replica of `--host URL,URL` (one: `endpoint` alone);
    - `balancer`: which replica each request goes to, this process's (`balance.py`);
    - `scenario`: its `timeouts` configure the user's HTTP client;
    - `budget`: which request to send next, and when (see `TicketSource`);
    - `bodies`: the prebuilt request body for a ticket's planned size and index, and what
      else its source says of the request (`load.body.RequestBodies`);
    - `worker`: `host:pid`, stamped on every record this process measures;
    - `conversations`: with a `[conversation]`, each conversation's turns (None: every
      request is one prompt from `bodies`);
    - `send_stats`: the run's count of request chunks written, which every user's client
      adds to (the raw `run_end`'s `send_chunk_ms_max`);
    - `in_flight`: this process's requests in flight, their observers: a user adds its
      request's before sending it and removes it once recorded (`stuck.StuckWatch` reads
      them);
    - `prefill_gate`: this process's prefill gate (`--prefill-concurrency`; None: none).
    """

    @property
    def endpoint(self) -> Endpoint: ...

    @property
    def replicas(self) -> tuple[Endpoint, ...]: ...

    @property
    def balancer(self) -> Balancer: ...

    @property
    def api_key(self) -> str | None: ...

    @property
    def scenario(self) -> Scenario: ...

    @property
    def budget(self) -> TicketSource: ...

    @property
    def bodies(self) -> RequestBodies: ...

    @property
    def worker(self) -> str: ...

    @property
    def conversations(self) -> ConversationBodies | None: ...

    @property
    def send_stats(self) -> SendStats: ...

    @property
    def prefill_gate(self) -> PrefillGate | None: ...

    @property
    def in_flight(self) -> set[StreamObserver]: ...


def run_in_progress(environment: Environment) -> RunContext | None:
    """The run users of this `environment` send for, if any (None: no run, or its start
    failed and the plugin is ending it)."""
    return getattr(environment, RUN_ATTR, None)


def set_run(environment: Environment, run: RunContext | None) -> None:
    """Make `run` the run in progress (None: it has ended); a run also becomes the latest."""
    setattr(environment, RUN_ATTR, run)
    if run is not None:
        setattr(environment, LATEST_ATTR, run)


def latest_run(environment: Environment) -> Any:
    """The run in progress, else the last one started in this process (a `RunSession`;
    the web UI reads its `live`, `run_id`, `run_dir` and `finished`); None before any."""
    return getattr(environment, LATEST_ATTR, None)
