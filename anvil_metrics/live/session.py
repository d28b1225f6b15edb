"""One run's shared state in a Locust process, from test start to the written result.

`RunSession.start` does everything that must happen before the first measured byte: it
resolves the model, calibrates prompt sizing, builds every request body template (so no
prompt is built on the hub during the load: `prepare.py`), creates the run folder
exclusively and writes the raw file's header. `RunSession.finish` closes the raw file and
writes `benchmark.json`. Both run inside Locust's `test_start` / `test_stop` events (see
`plugin.py`), which also keep the session on Locust's `Environment` for the users (a
`runctx.RunContext`). The session is the run's state; what time does to it once the load
has begun (the duration, a sweep's steps, the user count watched) is its `RunClock`
(`runclock.py`), given the user controls and `on_end` when the session is made.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent

from anvil_metrics.errors import AnvilError
from anvil_metrics.events import anvil_events
from anvil_metrics.headers import shown
from anvil_metrics.live.abort import FailureWatch
from anvil_metrics.live.agentrun import next_wait_due_ns
from anvil_metrics.live.balance import Balancer
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import LiveStats
from anvil_metrics.live.hooks import RunHooks, server_running
from anvil_metrics.live.jobfigures import JobFigures
from anvil_metrics.live.loadwindow import LoadWindow
from anvil_metrics.live.overload import OverloadWatch
from anvil_metrics.live.prefillgate import gate_of
from anvil_metrics.live.prepare import Prepared, prepare_requests
from anvil_metrics.live.probe import ProbeRunner, start_probe
from anvil_metrics.live.recorder import (
    RawWriter,
    Recorder,
    RecordSink,
    create_run_dir,
    new_run_id,
)
from anvil_metrics.live.runclock import NO_CONTROLS, Controls, RunClock
from anvil_metrics.live.runerror import SetUp
from anvil_metrics.live.stuck import StuckReport, StuckWatch
from anvil_metrics.load.agentparams import agent_params, starts_budget
from anvil_metrics.load.agentread import read_jobs
from anvil_metrics.load.body import ConversationBodies, RequestBodies
from anvil_metrics.load.dataset import DatasetEntry
from anvil_metrics.load.options import RunOptions
from anvil_metrics.load.replay import JobSchedule, open_loop_schedule
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.trace import TraceRequest
from anvil_metrics.post.loadblock import behind
from anvil_metrics.post.schema import RUN_ID
from anvil_metrics.prep.prompts import Calibration, PromptFactory, SharedPrefix
from anvil_metrics.prep.provenance import Discovery, discover, merge
from anvil_metrics.records import ENDED_BY, worker_identity
from anvil_metrics.telemetry.sampler import ServerTelemetry, start_server_telemetry
from anvil_metrics.urls import Endpoint, parse_replicas
from anvil_metrics.wire.observe import StreamObserver
from anvil_metrics.wire.transport import SendStats

__all__ = ["RunOptions", "RunSession"]

log = logging.getLogger("anvil")


class RunSession:
    def __init__(self, opts: RunOptions, endpoint: Endpoint, model: str,
                 calibration: Calibration, run_id: str, run_dir: Path, writer: RawWriter,
                 bodies: RequestBodies, budget: RequestBudget,
                 header: dict[str, Any],
                 prompts: PromptFactory | None = None, controls: Controls = NO_CONTROLS,
                 on_end: Callable[[], None] | None = None,
                 conversations: ConversationBodies | None = None,
                 hooks: RunHooks | None = None) -> None:
        self.opts = opts
        self.scenario = opts.scenario
        self.endpoint, self.replicas = endpoint, parse_replicas(opts.host)  # the first, all
        self.api_key = opts.api_key
        self.model, self.calibration = model, calibration
        self.run_id, self.run_dir = run_id, run_dir
        self.writer, self.bodies = writer, bodies
        self.conversations, self.prompts = conversations, prompts
        self.sizes = opts.scenario.planned_sizes()
        self.budget, self.header = budget, header
        self.worker = worker_identity()
        self.send_stats = SendStats()  # this run's users' writes (`end_load` reads them)
        # its users' requests in flight, watched for stuck ones (on a master: its workers')
        self.in_flight: set[StreamObserver] = set()
        self.stuck = StuckWatch(opts.scenario.timeouts.stuck_after_s, self.in_flight)
        self.prefill_gate = gate_of(opts.scenario.prefill_concurrency)  # this process's
        self.balancer = Balancer(len(self.replicas), opts.scenario.balance)  # likewise
        self.finished = False
        # why the run ended (`records.ENDED_BY`) and, for a signal or an abort, one line
        # saying what happened; the first to end the run names it (`mark_end`)
        self.ended_by: str | None = None
        self.began_ns: int | None = None  # when the load began (`begin_load`)
        self.end_reason: str | None = None
        self.benchmark_path: Path | None = None
        self.summary: dict[str, Any] | None = None  # the written document, without its rows
        self.cache_warning: str | None = None
        self.live = LiveStats(run_id, opts.scenario.requests, _job_figures(opts, budget))
        self._on_end = on_end
        # the run ends itself when the server stops answering (`abort.py`): one line per
        # unit of --abort-after-failures is a user (closed loop) or an arrival (open loop)
        sc = opts.scenario
        pace = 1 if sc.arrivals is not None else max(sc.step_users or (opts.users,))
        self.watch = FailureWatch(opts.abort, pace, [e.root_url for e in self.replicas],
                                  self._abort, began_ns=lambda: self.began_ns,
                                  on_dead=self.balancer.mark_dead)  # each replica's own
        # the running figures only where a web UI shows them (`RunOptions.live_figures`);
        # `finish` gives the table the file's exact figures either way
        sinks: list[RecordSink] = [writer, self.live, self.watch] if opts.live_figures else [
            writer, self.watch]
        if opts.abort.overload_window_s:  # --stop-overloaded: the server over capacity
            sinks.append(OverloadWatch(opts.abort.overload_window_s, endpoint.root_url,
                                       lambda: budget.in_flight, self._abort,
                                       began_ns=lambda: self.began_ns))
        self.recorder = Recorder(anvil_events.request_record, *sinks)
        self.recorder.start()
        self._jobs_heard = opts.live_figures and self.live.jobs is not None
        if self._jobs_heard:  # agent jobs' ends, for the live job figures
            anvil_events.job_end.add_listener(self.live.job_ended)
        self.load = LoadWindow()
        self._health: dict[str, Any] | None = None
        # the run's timing (`runclock.py`): `on_end` ends the run when its duration is over
        self.hooks = hooks or RunHooks()  # the control hooks (`live/hooks.py`)
        before_step = None if self.hooks.reset is None else (
            lambda step: self.hooks.before_step(writer, self._abort, step))
        self.clock = RunClock(opts.scenario, budget, writer, controls, on_end, before_step)
        self.telemetry: ServerTelemetry | None = None  # the server-metrics sampler
        self.energy: ServerTelemetry | None = None  # the energy reader (--energy)
        self.probe: ProbeRunner | None = None  # --probe-rate (live/probe.py)

    def mark_end(self, ended_by: str, reason: str | None = None) -> None:
        """Name why the run ends (one of `records.ENDED_BY`), once: what ends it first (its
        budget spent, its duration over, a signal, an abort, Locust's stop) is the cause,
        whatever stops it afterwards. Kept in the raw `run_end` line; a signal or an abort
        marks the run partial."""
        if ended_by not in ENDED_BY:
            raise ValueError(f"ended_by {ended_by!r} is not one of {ENDED_BY}")
        if self.ended_by is None:
            self.ended_by, self.end_reason = ended_by, reason

    def _abort(self, reason: str) -> None:
        """The server is not answering (`abort.py`): no new request, and the run ends as
        when its budget is spent, marked aborted with `reason` (the exit code is 3)."""
        self.mark_end("aborted", reason)
        log.error("anvil: run aborted: %s", reason)
        self.budget.close()
        if self._on_end is not None:
            self._on_end()

    def begin_load(self) -> None:
        """Start the generator-health figures: call when set-up work is over and the users
        are about to send (set-up stalls, e.g. a final garbage collection, are not load)."""
        self.began_ns = time.perf_counter_ns()
        self.load.begin()
        if self.opts.live_figures:  # the live page's in-flight series; the derivation of
            # the pending records keeps clear of due requests and agent jobs' waits
            self.live.start_flow(self.budget.read_in_flight, self._next_due_ns)
        self.clock.start()  # the duration, a sweep's steps, or the user count watched
        if self.probe is not None:
            self.probe.start()
        self.stuck.start()  # the warm-ups too

    def _next_due_ns(self) -> int | None:
        """The earliest of the open loop's next due request and the agent waits' ends."""
        dues = [d for d in (self.budget.next_due_ns(), next_wait_due_ns()) if d is not None]
        return min(dues) if dues else None

    def stuck_report(self) -> StuckReport | None:
        """The requests in flight that are stuck now (`live/stuck.py`; a distributed run's
        master: its workers' latest reports merged); None when `--stuck-after` is 0."""
        return self.stuck.report() if self.stuck.on else None

    def end_load(self) -> None:
        """Freeze the generator-health figures: the load is over (the budget is spent, or
        the run is being stopped); shutting Locust down is not load."""
        if self._health is not None:
            return
        self.hooks.after_measured(self.writer)  # the profile stops before the drain
        self._health = {**self.load.end(),
                        # raw record only: the longest single write of a request chunk
                        "send_chunk_ms_max": self.send_stats.max_chunk_ns / 1e6,
                        "send_chunks": self.send_stats.chunks}

    def client_health(self) -> dict[str, Any]:
        """The benchmark's `client` block, as far as this issue measures it: event-loop lag
        over the load and this process's CPU share meanwhile (`achieved_concurrency` and
        `saturated` are the performance issue's)."""
        self.end_load()
        assert self._health is not None
        return self._health

    @classmethod
    def start(cls, opts: RunOptions, on_exhausted: Callable[[], None],
              controls: Controls = NO_CONTROLS, setup: SetUp | None = None) -> RunSession:
        """Everything before the first measured byte (module docstring); `on_exhausted` is
        called when the last measured request is done (or the duration is over);
        `controls`: the users, as Locust lets the run reach them (`runclock.Controls`);
        `setup`: told each phase as it begins, and the run folder (`runerror.SetUp`)."""
        sc = opts.scenario
        setup = setup or SetUp(opts.results_dir)
        endpoint = parse_replicas(opts.host)[0]  # discovery, hooks, probe, /metrics: the first
        nonce = opts.run_nonce or secrets.token_hex(4)
        # agent jobs (live/agentrun.py), or a request trace's replay (replay.py)
        jobs = read_jobs(sc.trace.path, sc.trace.fmt) if sc.trace and sc.trace.agent else None
        trace = sc.trace.read() if sc.trace is not None and jobs is None else None
        sizes = ([r.input_tokens for r in trace] if trace else [
            t.input_tokens for j in jobs for x in j.sessions for t in x.turns] if jobs
            else sc.planned_sizes())
        shared_doc = sc.shared_prefix(users=opts.users)
        shared = SharedPrefix(**shared_doc) if shared_doc else None
        # bursts hold the load to one group at a time: that many streams at most; a sweep
        # of users holds at most its largest step
        concurrency = min(opts.users, shared.group_size) if shared else opts.users
        if sc.step_users is not None:
            concurrency = max(sc.step_users)
        dataset = sc.dataset.read() if sc.dataset is not None else None
        ready = prepare_requests(opts, endpoint, nonce, sizes, shared, trace, dataset,
                                 setup.enter, jobs)
        setup.enter("asking the server what it is")
        # who the server is (bounded probes; the flags and [meta] win): provenance.py
        auth = {**_auth(opts.api_key), **sc.headers}
        identity = merge(discover(endpoint.base_url, headers=auth, model=ready.model),
                         {"engine": sc.meta.get("engine")})
        holder: list[RunSession] = []
        hooks = RunHooks.of(opts, identity.engine, endpoint.root_url, auth)

        def ended(cause: str) -> Callable[[], None]:
            def end() -> None:  # the last measured request is done, or the duration over
                if holder:
                    holder[0].mark_end(cause)
                    holder[0].end_load()
                on_exhausted()
            return end

        exhausted = ended("requests")

        def scrape_first() -> None:  # just before the first measured request
            if holder:  # the cache reset (after the warm-ups), the profile's start
                hooks.before_measured(writer, holder[0]._abort, sc,
                                      lambda: server_running(holder[0].telemetry))
            for child in (holder[0].telemetry, holder[0].energy) if holder else ():
                if child is not None:
                    child.mark("first")

        budget = RequestBudget(sc.requests, sc.warmup_requests, sizes, exhausted,
                               group_size=shared.group_size if shared else None,
                               schedule=open_loop_schedule(sc, trace, jobs),
                               conversations=starts_budget(sc, jobs),
                               before_measured=scrape_first)
        setup.enter("writing the run folder")
        run_id, run_dir = _run_folder(opts)
        setup.made(run_dir)
        writer = RawWriter(run_dir / "requests.jsonl")
        params = _header_params(opts, endpoint, identity, ready, nonce, concurrency, shared_doc,
                                _context_distribution(sc, lambda i: ready.bodies.planned(
                                    i, budget.size_for(i))),
                                trace, dataset)
        if jobs is not None:
            params["agent"] = agent_params(sc, jobs)
            if isinstance(budget.schedule, JobSchedule):  # the jobs' own starts
                params["load"]["arrivals"] = budget.schedule.arrivals()
        header = writer.write_header(run_id, params)
        hooks.before_load(writer, setup.enter)  # before any load: a failure stops the run
        session = cls(opts, endpoint, ready.model, ready.prompts.calibration, run_id, run_dir,
                      writer, ready.bodies, budget, header, ready.prompts,
                      controls=controls, on_end=ended("duration"),
                      conversations=ready.conversations, hooks=hooks)
        holder.append(session)
        session._start_probe(endpoint, nonce)  # its idle baseline before the children start
        session._start_telemetry(params["server"])
        return session

    def _start_probe(self, endpoint: Endpoint, nonce: str) -> None:
        """The head-of-line probe with `--probe-rate` (`live/probe.py`; its idle baseline
        before the load), told the step in force as it sends."""
        self.probe = start_probe(self.opts.scenario, endpoint, self.opts.api_key, self.model,
                                 nonce, self.run_dir,
                                 lambda: self.clock.step[0] if self.clock.step else None)

    def _start_telemetry(self, server: dict[str, Any]) -> None:
        """Start the server-metrics sampler when its metrics are scraped, and the energy
        reader with `--energy` (after its idle baseline, which the load waits for): a
        reading just before the first measured request (the budget's `before_measured`,
        given in `start`), and one after the last (`finish`)."""
        plan = self.opts.scenario.energy
        if plan is not None:  # the GPUs' energy (energy.jsonl), an idle baseline first
            self.energy = ServerTelemetry.start_energy(plan, self.run_dir)
            if plan.idle_s is not None and self.energy.mark("idle_start"):
                gevent.sleep(plan.idle_s)  # the load waits: nothing is sent meanwhile
                self.energy.mark("idle_end")
        self.telemetry = start_server_telemetry(server, self.run_dir)  # one, a role each

    def finish(self, locust_stats: dict[str, Any] | None = None,
               client: dict[str, Any] | None = None,
               distributed: dict[str, Any] | None = None) -> Path | None:
        """Close the raw file and write `benchmark.json`; idempotent. Logs a warning when
        the server reported prefix-cache hits this run's prompts should not have had.

        `client`: the generator-health figures when they were measured elsewhere (the
        workers of a distributed run), else this process's own; `distributed`: what the
        master knows of its workers, kept in the raw `run_end` line."""
        if self.finished:
            return self.benchmark_path
        self.finished = True
        self.budget.close()
        self.clock.stop()
        self.stuck.stop()
        self.recorder.stop()
        if self.probe is not None:
            self.probe.stop()
        if self._jobs_heard:
            anvil_events.job_end.remove_listener(self.live.job_ended)
        self.live.end_flow()  # every record is in: the live page's series ends here
        for child in (self.telemetry, self.energy):  # the reading after the last request
            if child is not None:
                child.finish()
        from anvil_metrics.post.postprocess import postprocess_run

        try:
            own = self.client_health()
            end: dict[str, Any] = {"ended_by": self.ended_by or "stopped",
                                   "end_reason": self.end_reason,
                                   "client": own if client is None else client,
                                   **self.watch.replicas_end()}
            if end["client"].get("saturated"):
                log.warning("anvil: the load generator was saturated (%s): its own delays may "
                            "be in the figures; use more worker processes or fewer users",
                            end["client"].get("verdict"))
            if distributed is not None:
                end["distributed"] = {**distributed, "master": own}
            if locust_stats:
                end["locust"] = locust_stats
            self.writer.write_end(end)
        finally:
            self.writer.close()
        done = None
        try:
            done = postprocess_run(self.run_dir)
        except AnvilError as e:
            log.error("anvil: could not build benchmark.json for %s: %s", self.run_dir, e)
            self.benchmark_path = None
        else:
            self.benchmark_path, self.summary = done.path, done.summary
            self.cache_warning = done.cache_warning
            if self.cache_warning:
                log.warning("anvil: %s", self.cache_warning)
            late = behind(done.summary.get("load"), done.summary.get("requests"))
            if late:
                log.warning("anvil: %s", late)
            scrapes = ((done.summary.get("server") or {}).get("null_reasons") or {}).get(
                "scrapes")
            if scrapes:  # once per run: the samples file has every failure
                log.warning("anvil: server metrics: %s", scrapes)
        self.live.finish(done.rows if done is not None else None,  # the file's figures
                         None if done is None else done.summary.get("jobs"))
        anvil_events.run_finished.fire(run_dir=self.run_dir, benchmark_path=self.benchmark_path)
        return self.benchmark_path


SCRAPE_TIMEOUT_S = 2.0  # one /metrics scrape (a healthy server answers in milliseconds)


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _server_params(opts: RunOptions, endpoint: Endpoint, identity: Discovery
                   ) -> dict[str, Any]:
    """The raw header's `server` parameters: what the server said of itself (each with its
    source or why unknown), where its metrics are scraped from (no credentials: neither
    stored nor sent to /metrics; per role: `roles`) and how often, or why they are not."""
    from anvil_metrics.post.schema import redact_url

    scrape = opts.server_metrics_url or f"{endpoint.root_url}/metrics"
    roles = {k: redact_url(u) for k, u in opts.server_metrics_roles  # a sampler each
             } if opts.server_metrics else {}
    on = opts.server_metrics and not roles
    return {**({"roles": roles} if roles else {}),
            "version": identity.version, "max_model_len": identity.max_model_len,
            "identity_sources": dict(identity.sources),
            "identity_reasons": {k: v for k, v in identity.null_reasons.items()
                                 if k in ("engine", "version", "max_model_len")},
            "metrics_url": redact_url(scrape) if on else None,
            "interval_s": opts.server_metrics_interval_s, "timeout_s": SCRAPE_TIMEOUT_S,
            "off_reason": None if on else "scraped per role: see roles" if roles
            else "not scraped: --no-server-metrics"}


def _run_folder(opts: RunOptions) -> tuple[str, Path]:
    """The run's id and folder: the one given (`--run-dir`, made if missing; its name is the
    id when it is one), else a new folder made exclusively under the results folder."""
    if opts.run_dir:
        run_dir = Path(opts.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        return (run_dir.name if RUN_ID.fullmatch(run_dir.name) else new_run_id()), run_dir
    return create_run_dir(opts.results_dir)


def _context_distribution(sc: Scenario, size_for: Callable[[int], int | None]
                          ) -> dict[str, int] | None:
    """How many measured requests plan each prompt size (`size_for`: request k's, a mix's
    class's own or the budget's); None without a request budget (counted at the end), in a
    conversation run (a turn's size is its history's), and when some request has no
    planned size (a dataset's, a mix's dataset class's)."""
    if sc.requests is None or sc.conversation is not None or sc.dataset is not None:
        return None
    distribution: dict[str, int] = {}
    for i in range(sc.requests):
        size = size_for(i)
        if size is None:
            return None
        distribution[str(size)] = distribution.get(str(size), 0) + 1
    return distribution


def _job_figures(opts: RunOptions, budget: RequestBudget) -> JobFigures | None:
    """An agent replay's running job figures (`live/jobfigures.py`), else None."""
    sc = opts.scenario
    if sc.trace is None or not sc.trace.agent:
        return None
    return JobFigures(budget.conversations, from_due=budget.schedule is not None,
                      in_flight=lambda: budget.starts_going)


def _header_params(opts: RunOptions, endpoint: Endpoint, identity: Discovery,
                   ready: Prepared, nonce: str, concurrency: int,
                   shared_doc: dict[str, Any] | None, distribution: dict[str, int] | None,
                   trace: list[TraceRequest] | None = None,
                   dataset: list[DatasetEntry] | None = None) -> dict[str, Any]:
    """The raw header's `params`: the run as planned, in the order the file has them."""
    sc = opts.scenario
    params = {
        "measurement_protocol": sc.measurement_protocol,
        "concurrency": concurrency,
        "context_tokens": sc.context_tokens,
        "max_context_tokens": sc.max_context_tokens,
        "context_distribution": distribution,
        "context_seed": sc.context_seed,
        "max_tokens": sc.max_tokens,
        "model": ready.model,
        "engine": identity.engine,
        "gpu": sc.meta.get("gpu"),
        "gpus": sc.meta.get("gpus"),
        "gpu_hour_price_usd": sc.meta.get("gpu_hour_price"),
        "tier": sc.meta.get("tier"),
        "manifest": sc.meta.get("manifest"),
        "source_recipe": sc.meta.get("source_recipe"),
        "base_url": endpoint.base_url,
        # --host URL,URL: every replica's URL (no credentials), by row `replica`; else null
        "replicas": [e.base_url for e in parse_replicas(opts.host)] if "," in opts.host else None,
        "balance": sc.balance if "," in opts.host else None,  # and how they were spread
        "serve_flags": sc.serve_flags(),
        "run_nonce": nonce,
        "prompt_calibration": {"method": ready.prompts.calibration.method},
        "warmup_requests": sc.warmup_requests,
        "requests_planned": sc.requests,
        # not benchmark fields: how prompts were sized, for the raw record and checks
        "prompt_sizing": ready.sizing,
        "nonce_reused": opts.run_nonce is not None,
        # how load was offered (the benchmark's `load` block is made from it and the
        # records): mode, the open-loop plan, the duration and the stop timeout
        "load": {"mode": sc.load_mode,
                 "arrivals": (sc.trace.arrivals(trace) if sc.trace and trace
                              else sc.arrivals.to_dict() if sc.arrivals else None),
                 "duration_s": sc.duration_s, "stop_timeout_s": opts.stop_timeout_s,
                 "warmup_s": sc.warmup_s, "cooldown_s": sc.cooldown_s,
                 "steps": None if sc.step_duration_s is None else {
                     "users": sc.step_users, "rates": sc.step_rates,
                     "step_duration_s": sc.step_duration_s}},
        "goodput": sc.goodput.split(",") if sc.goodput else None,
    }
    if shared_doc is not None:
        params["shared_prefix"] = shared_doc
    if sc.conversation is not None:  # multi-turn: the plan as checked (`conversation.py`)
        params["conversation"] = sc.conversation.to_table()
    if sc.trace is not None and trace:  # a replay: the flags and the trace's own reuse
        params["trace"] = sc.trace.to_params(trace)
    if sc.dataset is not None and dataset is not None:  # prompts from a file: which, how many
        params["dataset"] = sc.dataset.to_params(dataset)
    params["endpoint"] = sc.endpoint  # what the requests were posted to
    if sc.prompt_ids:  # and their prompts as token ids
        params["prompt_ids"] = True
    if sc.mix is not None:  # request classes and models: the plan as checked (`mix.py`)
        params["mix"] = sc.mix.to_table()
    if sc.cancel is not None:  # requests closed on purpose (`cancel.py`)
        params["cancel"] = {**sc.cancel.to_table(), "seed": sc.cancel.seed}
    if sc.headers:  # sent with every request; a credential's value never written
        params["request_headers"] = shown(sc.headers)
    params["server"] = _server_params(opts, endpoint, identity)
    return params
