"""anvil inside Locust: its command-line options and the run's start and end.

Importing this module (the locustfile does) registers listeners on Locust's events:

- `init_command_line_parser`: anvil's options (`options.OPTIONS`, the same table `anvil
  run` is made from), shown in the web UI's start form (the API key masked);
- `init`: on a master or a worker, anvil's messages between them (`cluster/`); given a run
  folder (`anvil run`), the first error anvil logs goes to its `error.json` (`runerror`);
- `test_start`: a `RunSession` is set up before any user sends (model, calibration,
  bodies, run folder, raw header) and kept on the `Environment` for the users
  (`runctx`); on a master, each worker then gets the set-up and its clock offset is
  measured, before Locust sends it users;
- `test_stopping` / `test_stop`: the load ends; a master drains its workers; the raw file
  is closed and `benchmark.json` written (by the single process, or by the master);
- `quitting`: the process does not exit while that is being written. Two greenlets can
  stop a run at once (Locust's `-t` timer and anvil's own end of the same duration, or of
  its budget): the second's `runner.quit()` finds the runner stopped and kills its
  greenlet at once, and Locust's `main` then shuts down while the first is still writing
  (seen: exit 0, a raw file without its end, no benchmark.json).

When the request budget is spent the run ends itself: a headless run quits (Locust then
prints its summary and exits), a web-UI run stops and waits for the next start.

What the listeners share (the API key, the master's or worker's message handlers, the
error file) is one `PluginState` on the `Environment` (`environment.anvil_plugin`), made by
the first `init` listener and read by the others: not module globals, so it lives exactly
as long as the process's Locust environment, through every start the web UI makes.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import orjson
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from anvil_metrics.cluster.master import MasterAgent
from anvil_metrics.cluster.wire import WorkerSetup
from anvil_metrics.cluster.worker import WorkerAgent, WorkerSession
from anvil_metrics.errors import AnvilError, ExitCode, UsageError
from anvil_metrics.headers import ENV_VAR as HEADERS_ENV
from anvil_metrics.headers import checked
from anvil_metrics.headers import parse_flag as parse_header
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.otlppush import OtlpPush
from anvil_metrics.live.runclock import Controls
from anvil_metrics.live.runctx import run_in_progress, set_run
from anvil_metrics.live.runerror import ErrorFile, SetUp, set_set_up
from anvil_metrics.live.session import RunSession
from anvil_metrics.load.agentbodies import AgentBodies
from anvil_metrics.load.body import DatasetBodies
from anvil_metrics.load.mixbodies import MixBodies
from anvil_metrics.load.options import LOCUST_OPTIONS, STOP_TIMEOUT_S, RunOptions, run_options
from anvil_metrics.post.clientblock import KEYS as CLIENT_KEYS
from anvil_metrics.post.outcome import failure_verdict
from anvil_metrics.prep.turns import ConversationPrompts
from anvil_metrics.runs import locustfix
from anvil_metrics.runs.launch import plan_text
from anvil_metrics.runs.progressrun import ProgressRun
from anvil_metrics.runs.stopsignals import StopSignals, first_mark_sigterm, mark_terminated
from anvil_metrics.urls import api_key_from_env

log = logging.getLogger("anvil")
locustfix.install()  # a worker's spawn messages cost ms, not a second (`locustfix`)
first_mark_sigterm()  # a SIGTERM marks the run before Locust's handler stops it

PLUGIN_ATTR = "anvil_plugin"


@dataclass
class PluginState:
    """What anvil's listeners share in one Locust process (mutable: the key typed into the
    web UI's form replaces the one given, the handlers are installed once at `init`).

    - `api_key`: a key given with --api-key (or typed in the form) lives here, not in
      Locust's options: Locust's web UI re-parses sys.argv to fill its start form, so a
      value left there would be served in the page;
    - `header_flags`: `locust --header K=V`, as typed, kept here for the same reason;
    - `master` / `worker`: the master's or a worker's message handlers (`cluster/`);
    - `error_file`: where the first error anvil logs goes (`runerror`), given a run folder;
    - `finishing`: set once the ending run's `benchmark.json` is written (`on_quitting`);
    - `signals`: the process's Ctrl-C handling (`stopsignals`), in Locust's own process only;
    - `progress`: the run's live progress and, headless, where it is shown (`progressrun`).
    """

    api_key: str | None = None
    header_flags: list[str] = field(default_factory=list)
    master: MasterAgent | None = None
    worker: WorkerAgent | None = None
    error_file: ErrorFile | None = None
    finishing: gevent.event.Event | None = None
    signals: StopSignals | None = None
    progress: ProgressRun | None = None


def plugin_state(environment: Any) -> PluginState:
    """This environment's `PluginState`, made on first use (the first `init` listener)."""
    state = getattr(environment, PLUGIN_ATTR, None)
    if state is None:
        state = PluginState()
        setattr(environment, PLUGIN_ATTR, state)
    return state


_SECRET_FLAGS = ("--api-key", "--header")  # their values leave argv (a header may be a key)


def _scrub_argv(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            out.append("")
            skip = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            skip = True
        elif arg.startswith(tuple(f"{flag}=" for flag in _SECRET_FLAGS)):
            out.append(arg.partition("=")[0] + "=")
        else:
            out.append(arg)
    return out


@events.init.add_listener
def take_secrets(environment: Any, **_: Any) -> None:
    """Move the API key out of Locust's options and argv before any page is served."""
    state = plugin_state(environment)
    o = environment.parsed_options
    if o is not None and getattr(o, "api_key", ""):
        state.api_key = o.api_key.strip() or None
        o.api_key = ""
    if o is not None and getattr(o, "header", None):  # checked when the run starts
        state.header_flags, o.header = list(o.header), []
    sys.argv[:] = _scrub_argv(sys.argv)


@events.init.add_listener
def watch_spawning(environment: Any, **_: Any) -> None:
    """Locust's `spawning_complete` (which carries no environment) opens an open loop's
    arrivals once this process's users have started; a master's users start in its
    workers, so it opens them at once (`control.RequestBudget.all_spawned`)."""
    if isinstance(environment.runner, WorkerRunner):
        return

    def spawned(user_count: int = 0, **_: Any) -> None:
        run = run_in_progress(environment)
        if run is not None and isinstance(run.budget, RequestBudget):
            run.budget.all_spawned(int(user_count),
                                   started_here=not isinstance(environment.runner, MasterRunner))

    environment.events.spawning_complete.add_listener(spawned)


@events.init.add_listener
def install_messages(environment: Any, **_: Any) -> None:
    """On a master or a worker, register anvil's messages (see `cluster/wire.py`)."""
    state = plugin_state(environment)
    runner = environment.runner
    if isinstance(runner, MasterRunner) and state.master is None:
        state.master = MasterAgent(environment)
    elif isinstance(runner, WorkerRunner) and state.worker is None:
        state.worker = WorkerAgent(environment,
                                               lambda run: set_run(environment, run))


def _in_locusts_own_process() -> bool:
    """Locust's command runs this process (`locust`, `python -m locust`, anvil's
    `python -m anvil_metrics.runs.locustmain`, or a worker one of them forked), not a
    program that drives Locust as a library (a test): only then is Ctrl-C Locust's to
    handle, so only then does anvil take it over."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    return (name.startswith("locust") or name == "anvil_metrics.runs.locustmain"
            or Path(sys.argv[0]).name == "locust")


@events.init.add_listener
def handle_ctrl_c(environment: Any, **_: Any) -> None:
    """Ctrl-C stops a run and keeps it (`stopsignals`)."""
    state = plugin_state(environment)
    if state.signals is None and _in_locusts_own_process():
        state.signals = StopSignals(environment)


@events.init.add_listener
def fresh_loop_clock(**_: Any) -> None:
    """Bring the event loop's cached clock up to now. Locust sets its `-t` timer right after
    `init` from that clock, which stood still since gevent was imported: the imports in
    between (seconds on a busy machine) came off the run time, all of it once, so the run
    ended before anvil had started it."""
    gevent.get_hub().loop.update_now()


@events.init.add_listener
def report_errors(environment: Any, **_: Any) -> None:
    """Given a run folder (`anvil run` passes one), keep the first error anvil logs in its
    `error.json`, where `anvil run` looks for the reason a run failed."""
    state = plugin_state(environment)
    o = environment.parsed_options
    run_dir = getattr(o, "run_dir", "") if o is not None else ""
    if run_dir and state.error_file is None:
        state.error_file = ErrorFile(run_dir)
        log.addHandler(state.error_file)


@events.init_command_line_parser.add_listener
def add_options(parser: Any, **_: Any) -> None:
    """anvil's options on Locust's parser: strings defaulting to "" (see `load/options.py`);
    and anvil's defaults for two of Locust's own: --stop-timeout (`options.STOP_TIMEOUT_S`:
    why) and --exit-code-on-error 0 (a run with some failed requests exits 0, as `anvil run`
    does; anvil's exit codes say more: `_exit_code`)."""
    parser.set_defaults(stop_timeout=STOP_TIMEOUT_S, exit_code_on_error=0)
    for o in LOCUST_OPTIONS:
        extra: dict[str, Any] = {}
        if o.env_var:
            extra["env_var"] = o.env_var
        if not o.web_ui:
            extra["include_in_web_ui"] = False
        if o.secret:
            extra["is_secret"] = True
        if o.switch:
            parser.add_argument(o.flag, action="store_true", default=o.default, help=o.help,
                                **extra)
        elif o.repeat:
            parser.add_argument(o.flag, action="append", type=str, default=[], help=o.help,
                                **extra)
        else:
            parser.add_argument(o.flag, type=str, default=o.locust_default, help=o.help,
                                **extra)


def options_from_locust(environment: Any) -> RunOptions:
    """Turn Locust's parsed options (CLI or web form: values may be strings) into
    `RunOptions`; raises AnvilError naming the bad option."""
    o = environment.parsed_options
    state = plugin_state(environment)
    typed = (o.api_key or "").strip()  # typed into the web UI's start form
    if typed:
        state.api_key, o.api_key = typed, ""
    runner = environment.runner
    users = getattr(runner, "target_user_count", None) or getattr(o, "num_users", None) or 1
    values = {opt.dest: getattr(o, opt.dest, None) for opt in LOCUST_OPTIONS}
    run_time = getattr(o, "run_time", None)  # Locust's -t (its own timer stops the run)
    opts = run_options(values, host=environment.host or "", users=int(users),
                       api_key=state.api_key or api_key_from_env(),
                       run_time_s=float(run_time) if run_time else None,
                       stop_timeout_s=float(environment.stop_timeout or 0),
                       headers=_header_flags(state))
    # the running figures where a web UI or the live progress shows them (--headless
    # --quiet: nobody reads them; the file has them all)
    return replace(opts, live_figures=environment.web_ui is not None
                   or opts.progress_every_s is not None)


def _header_flags(state: PluginState) -> list[tuple[str, str]]:
    """The `--header` flags: `anvil run`'s (by the environment, already checked there) and
    Locust's own (`locust --header K=V`), each checked here."""
    found: list[tuple[str, str]] = []
    passed = os.environ.get(HEADERS_ENV)
    if passed:
        try:
            table = orjson.loads(passed)
        except orjson.JSONDecodeError:
            table = None
        if not isinstance(table, dict):
            raise UsageError(f"${HEADERS_ENV} is not allowed as set; use a JSON object of "
                             "header names and values (anvil run sets it from --header)")
        found += [checked(f"${HEADERS_ENV}", k, v) for k, v in table.items()]
    return found + [parse_header("--header", raw) for raw in state.header_flags]


def _end_run(environment: Any) -> None:
    runner = environment.runner
    if runner is None:
        return
    if environment.parsed_options.headless:
        gevent.spawn(runner.quit)
    else:
        gevent.spawn(runner.stop)


def _user_controls(environment: Any) -> Controls:
    """How the session may change the users (a sweep: `runner.start` with the new count, as
    the web UI's edit does) and see them change (a LoadTestShape's steps)."""
    runner = environment.runner
    rate = float(getattr(environment.parsed_options, "spawn_rate", None) or 0)

    def set_users(n: int) -> None:
        gevent.spawn(runner.start, n, max(rate, float(n)))  # all of them within a second

    return Controls(set_users=set_users,
                    users_now=lambda: int(getattr(runner, "target_user_count", 0) or 0),
                    shaped=environment.shape_class is not None)


def _turn_texts(session: RunSession) -> dict[str, str | None] | None:
    """A conversation run's sized texts, for its workers (None: not one, or a dataset's)."""
    convs = session.conversations
    if convs is None or not isinstance(convs.prompts, ConversationPrompts):
        return None
    texts = convs.prompts.texts
    return {"turn": texts.turn, "prefix": texts.prefix, "system": texts.system}


def _start_workers(environment: Any, session: RunSession) -> None:
    """On a master: give every connected worker the run's set-up (bodies are built there
    from it, with what the master's own bodies were given: a dataset's local counts, a
    mix's template tokens), measure its clock, and route its messages to this run."""
    master = plugin_state(environment).master
    assert master is not None and session.prompts is not None
    prompts, bodies = session.prompts, session.bodies
    setup = WorkerSetup(
        run_id=session.run_id, scenario=session.scenario, host=session.opts.host,
        api_key=session.api_key, model=session.model, calibration=prompts.calibration,
        run_nonce=prompts.run_nonce, shared=prompts.shared, words=dict(prompts.words),
        prefix_words=prompts.prefix_words, sizes=session.sizes,
        turn_texts=_turn_texts(session),
        dataset_counted=bodies.counted if isinstance(bodies, DatasetBodies) else None,
        template_tokens=bodies.template_tokens if isinstance(bodies, MixBodies) else 0,
        opening_tokens=bodies.opening_tokens if isinstance(bodies, AgentBodies) else 0)
    coordinator = master.start_run(session, setup)
    session.watch.on_dead.append(  # a replica counted dead: every worker's balancer skips it
        lambda replica: coordinator.tell_workers("anvil_dead", replica=replica))
    runner = environment.runner
    ids = [w.id for w in runner.clients.ready + runner.clients.running + runner.clients.spawning]
    try:
        coordinator.set_up_workers(ids)
    except RuntimeError as e:
        raise AnvilError(str(e)) from None


@events.test_start.add_listener
def on_test_start(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):  # the set-up came from the master
        worker_session = run_in_progress(environment)
        if worker_session is not None:
            worker_session.begin_load()
        return
    old = run_in_progress(environment)
    if old is not None and not old.finished:
        old.finish()
    set_run(environment, None)  # until this run has started, users have nothing to send
    try:
        opts = options_from_locust(environment)
        # a signal now stops the set-up: its error.json names the phase (`runerror.SetUp`)
        setup = SetUp(opts.results_dir, Path(opts.run_dir) if opts.run_dir else None)
        set_set_up(environment, setup)
        try:
            session = RunSession.start(opts, lambda: _end_run(environment),
                                       _user_controls(environment), setup)
        finally:
            set_set_up(environment, None)
        if setup.stopped is not None:  # a signal came as the set-up ended: no load, kept
            session.mark_end("signal", setup.stopped)
            session.finish()
            return
        # an open loop's arrivals: once the users are ready, or their connect timeout
        session.budget.hold_arrivals(opts.scenario.timeouts.connect_s + 5.0)
        set_run(environment, session)
        if isinstance(environment.runner, MasterRunner):
            _start_workers(environment, session)
    except AnvilError as e:
        log.error("anvil: %s", e)
        environment.process_exit_code = e.exit_code
        _end_run(environment)
        return
    except Exception:  # a bug in anvil: keep the traceback, end the run
        log.exception("anvil: could not start the run")
        environment.process_exit_code = 1
        _end_run(environment)
        return
    OtlpPush.start(session)  # --otlp-endpoint: its child ready before the load
    # Locust, Flask and the prompt bodies are long-lived: freeze them out of the cyclic
    # collector, whose full passes over them stalled the hub (and every stream) ~8 ms.
    gc.collect()
    gc.freeze()
    session.begin_load()
    log.info("anvil: run %s → %s (model %s, %s prompt sizing: %s)",
             session.run_id, session.run_dir, session.model,
             plan_text(session.scenario, session.opts.users), session.calibration.method)
    plugin_state(environment).progress = ProgressRun.start(
        session, headless=environment.parsed_options.headless,
        distributed=isinstance(environment.runner, MasterRunner))


def _stop_cause(environment: Any, session: RunSession) -> str:
    """Why Locust is stopping a run anvil has not ended itself: its -t is over (the load has
    lasted that long), else it was stopped (the web UI's stop, a shape's end)."""
    run_time = getattr(environment.parsed_options, "run_time", None)
    began = session.began_ns
    if run_time and began is not None:
        # Locust's timer starts a little before the load (the session's set-up is inside it)
        if time.perf_counter_ns() - began >= (float(run_time) - 1.0) * 1e9:
            return "duration"
    return "stopped"


@events.test_stopping.add_listener
def on_test_stopping(environment: Any, **_: Any) -> None:
    """The run is being stopped (time limit, Ctrl-C, the UI's stop): the load is over, so
    freeze the generator-health figures before Locust's shutdown work stalls the hub."""
    session = run_in_progress(environment)
    if session is not None:
        if isinstance(session, RunSession):  # unless something named it (not a worker's)
            session.mark_end(_stop_cause(environment, session))
        session.end_load()
        session.budget.close()  # no new request; users waiting for a ticket stop at once
    master = plugin_state(environment).master
    if master is not None and master.coordinator is not None:
        master.coordinator.begin_stop()


@events.test_stop.add_listener
def on_test_stop(environment: Any, **_: Any) -> None:
    session = run_in_progress(environment)
    if session is None:
        return
    set_run(environment, None)  # ended (it stays the latest, for the web UI)
    state = plugin_state(environment)
    done = state.finishing = gevent.event.Event()
    progress, state.progress = state.progress, None
    try:
        if progress is not None:
            progress.watch.stop()  # no readings while the workers drain and the file is built
        _finish(environment, session)
    finally:
        try:  # the last reading after `benchmark.json`: its exact figures (a distributed
            if progress is not None:  # run's jobs stopped mid-way are only counted there)
                progress.stop()
        finally:
            done.set()


def _finish(environment: Any, session: RunSession | WorkerSession) -> None:
    """Drain the workers (on a master), write `benchmark.json`, set the exit code."""
    # the server stopped answering (a worker's share of a run names no end of its own)
    if isinstance(session, RunSession) and session.ended_by == "aborted":
        environment.process_exit_code = ExitCode.ABORTED
    total = environment.stats.total
    stats = {"num_requests": total.num_requests, "num_failures": total.num_failures}
    master = plugin_state(environment).master
    coordinator = master.coordinator if master is not None else None
    if coordinator is not None and coordinator.session is session:
        summary = coordinator.drain()
        client = coordinator.client_health() or dict.fromkeys(CLIENT_KEYS)
        path = session.finish(stats, client=client, distributed=summary)
        master.end_run()
    else:
        path = session.finish(stats)
    if path is not None:
        log.info("anvil: wrote %s", path)
    if isinstance(session, RunSession):  # a worker's share of a run has no exit code of its own
        _exit_code(environment, session)


def _exit_code(environment: Any, session: RunSession) -> None:
    """The exit code a run's end says (the README's table), unless an abort (3) or a signal
    set it: 4 when its measured requests failed (`post.outcome`: the line, last in the log);
    1 when a user's task raised (a bug in anvil: Locust's own code for it, under anvil's
    --exit-code-on-error default of 0, would be 0)."""
    if environment.process_exit_code is not None:
        return
    verdict = (failure_verdict(session.summary, session.opts.fail_on_error_rate)
               if session.summary is not None else None)
    if verdict is not None:
        log.warning(verdict)
        environment.process_exit_code = ExitCode.FAILED
    elif getattr(environment.runner, "exceptions", None):
        environment.process_exit_code = ExitCode.PROBLEM


FINISH_WAIT_S = 600.0  # a run of millions of requests takes seconds to post-process


@events.quitting.add_listener
def on_quitting(environment: Any, **_: Any) -> None:
    """Locust is about to exit: if a run's `benchmark.json` is being written (by the greenlet
    that stopped the run), wait for it, so the process never exits in the middle. A run
    still in progress here was ended by SIGTERM (Locust's handler shuts down at once): it is
    marked so (`stopsignals.mark_terminated`) before Locust stops it."""
    mark_terminated(environment)
    done = plugin_state(environment).finishing
    if done is not None and not done.is_set():
        log.info("anvil: the run is being written; exiting once it is")
        if not done.wait(FINISH_WAIT_S):
            log.error("anvil: the run was still being written after %g s; exiting without it",
                      FINISH_WAIT_S)
