"""anvil inside Locust: its command-line options and the run's start and end.

Importing this module (the locustfile does) registers listeners on Locust's events:

- `init_command_line_parser`: anvil's options, under the same names for `locust` and
  `anvil run`, shown in the web UI's start form (the API key masked);
- `init`: on a master or a worker, anvil's messages between them (`dist.py`);
- `test_start`: a `RunSession` is set up before any user sends (model, calibration,
  bodies, run folder, raw header); on a master, each worker then gets the set-up and its
  clock offset is measured, before Locust sends it users;
- `test_stopping` / `test_stop`: the load ends; a master drains its workers; the raw file
  is closed and `benchmark.json` written (by the single process, or by the master).

When the request budget is spent the run ends itself: a headless run quits (Locust then
prints its summary and exits), a web-UI run stops and waits for the next start.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import sys
from typing import Any

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from anvil_metrics import dist, dist_wire, dist_worker
from anvil_metrics.benchmark import CLIENT_KEYS
from anvil_metrics.errors import AnvilError, UsageError
from anvil_metrics.scenario import load_scenario, scenario_from_dict, with_overrides
from anvil_metrics.session import RunOptions, RunSession, current, set_current
from anvil_metrics.urls import api_key_from_env

log = logging.getLogger("anvil")

API_KEY_ENV = ("ANVIL_API_KEY", "OPENAI_API_KEY")
NONCE = re.compile(r"[A-Za-z0-9_-]{1,32}")

# A key given with --api-key lives here, not in Locust's options: Locust's web UI re-parses
# sys.argv to fill its start form, so a value left there would be served in the page.
_api_key: str | None = None


def _scrub_argv(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            out.append("")
            skip = False
        elif arg == "--api-key":
            out.append(arg)
            skip = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=")
        else:
            out.append(arg)
    return out


# The master's / a worker's message handlers, installed once per process at `init`.
_master: dist.MasterAgent | None = None
_worker: dist_worker.WorkerAgent | None = None


@events.init.add_listener
def take_secrets(environment: Any, **_: Any) -> None:
    """Move the API key out of Locust's options and argv before any page is served."""
    global _api_key
    o = environment.parsed_options
    if o is not None and getattr(o, "api_key", ""):
        _api_key = o.api_key.strip() or None
        o.api_key = ""
    sys.argv[:] = _scrub_argv(sys.argv)


@events.init.add_listener
def install_messages(environment: Any, **_: Any) -> None:
    """On a master or a worker, register anvil's messages (see `dist.py`)."""
    global _master, _worker
    runner = environment.runner
    if isinstance(runner, MasterRunner) and _master is None:
        _master = dist.MasterAgent(environment)
    elif isinstance(runner, WorkerRunner) and _worker is None:
        _worker = dist_worker.WorkerAgent(environment, set_current)


@events.init_command_line_parser.add_listener
def add_options(parser: Any, **_: Any) -> None:
    g = parser
    g.add_argument("--scenario", type=str, default="", env_var="ANVIL_SCENARIO",
                   help="scenario TOML file (see scenarios/); empty = built-in defaults")
    g.add_argument("--requests", type=str, default="",
                   help="stop after exactly this many measured requests (default: scenario's)")
    g.add_argument("--warmup-requests", type=str, default="",
                   help="warm-up requests before measuring (default: scenario's)")
    g.add_argument("--model", type=str, default="",
                   help="model name to request (default: scenario's, else the server's first)")
    g.add_argument("--max-tokens", type=str, default="",
                   help="completion cap per request (default: scenario's)")
    g.add_argument("--results-dir", type=str, default="results",
                   help="where run folders are created")
    g.add_argument("--run-dir", type=str, default="", include_in_web_ui=False,
                   help="use this (already created) run folder instead of a new one")
    g.add_argument("--run-nonce", type=str, default="",
                   help="reuse a previous run's run_nonce: its prompts hit the server's prefix "
                   "cache on purpose (default: a new random nonce)")
    g.add_argument("--recalibrate", action="store_true", default=False,
                   help="ignore the cached prompt calibration for this endpoint and model")
    g.add_argument("--tokenizer", type=str, default="",
                   help="count prompt tokens with this tokenizer.json (the served model's) "
                   "instead of asking the server; needs anvil-metrics[tokenizer]")
    g.add_argument("--api-key", type=str, default="", is_secret=True,
                   help="API key (default: $ANVIL_API_KEY or $OPENAI_API_KEY); never stored "
                   "or shown")


def _opt_int(opts: Any, name: str, flag: str) -> int | None:
    raw = getattr(opts, name, "")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0 or (flag != "--warmup-requests" and value < 1):
        raise UsageError(f"{flag} {raw!r} is not allowed; expected a whole number >= "
                         f"{0 if flag == '--warmup-requests' else 1}")
    return value


def options_from_locust(environment: Any) -> RunOptions:
    """Turn Locust's parsed options (CLI or web form: values may be strings) into
    `RunOptions`; raises AnvilError naming the bad option."""
    o = environment.parsed_options
    if o.scenario:
        sc = load_scenario(o.scenario)
    else:
        sc = scenario_from_dict({"measurement_protocol": "adhoc"}, source="built-in defaults")
    requests = _opt_int(o, "requests", "--requests")
    sc = with_overrides(
        sc,
        requests=requests,
        max_tokens=_opt_int(o, "max_tokens", "--max-tokens"),
        model=(o.model or "").strip() or None,
        warmup_requests=_opt_int(o, "warmup_requests", "--warmup-requests"),
    )
    host = environment.host or ""
    if not host:
        raise UsageError("no host: pass -H/--host URL, e.g. -H http://127.0.0.1:8000")
    global _api_key
    typed = (o.api_key or "").strip()  # typed into the web UI's start form
    if typed:
        _api_key, o.api_key = typed, ""
    api_key = _api_key or api_key_from_env()
    runner = environment.runner
    users = getattr(runner, "target_user_count", None) or getattr(o, "num_users", None) or 1
    nonce = (getattr(o, "run_nonce", "") or "").strip() or None
    if nonce is not None and not NONCE.fullmatch(nonce):
        raise UsageError(f"--run-nonce {nonce!r} is not allowed; expected 1-32 letters, digits, "
                         "'-' or '_' (copy run_nonce from a previous benchmark.json)")
    tokenizer = (getattr(o, "tokenizer", "") or "").strip() or None
    if tokenizer is not None and not os.path.isfile(tokenizer):
        raise UsageError(f"--tokenizer {tokenizer!r} is not a file; pass the served model's "
                         "tokenizer.json")
    return RunOptions(
        scenario=sc, host=host, users=int(users), results_dir=o.results_dir or "results",
        run_dir=o.run_dir or None, api_key=api_key, run_nonce=nonce,
        recalibrate=bool(getattr(o, "recalibrate", False)), tokenizer_path=tokenizer,
    )


def _end_run(environment: Any) -> None:
    runner = environment.runner
    if runner is None:
        return
    if environment.parsed_options.headless:
        gevent.spawn(runner.quit)
    else:
        gevent.spawn(runner.stop)


def _start_workers(environment: Any, session: RunSession) -> None:
    """On a master: give every connected worker the run's set-up (bodies are built there
    from it), measure its clock, and route its messages to this run."""
    assert _master is not None and session.prompts is not None
    prompts = session.prompts
    setup = dist_wire.WorkerSetup(
        run_id=session.run_id, scenario=session.scenario, host=session.opts.host,
        api_key=session.api_key, model=session.model, calibration=prompts.calibration,
        run_nonce=prompts.run_nonce, shared=prompts.shared, words=dict(prompts.words),
        prefix_words=prompts.prefix_words, sizes=session.sizes)
    coordinator = dist.MasterCoordinator(environment, session, setup)
    _master.coordinator = coordinator
    runner = environment.runner
    ids = [w.id for w in runner.clients.ready + runner.clients.running + runner.clients.spawning]
    try:
        coordinator.set_up_workers(ids)
    except RuntimeError as e:
        raise AnvilError(str(e)) from None


@events.test_start.add_listener
def on_test_start(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):  # the set-up came from the master
        worker_session = current()
        if worker_session is not None:
            worker_session.begin_load()
        return
    old = current()
    if old is not None and not old.finished:
        old.finish()
    try:
        opts = options_from_locust(environment)
        session = RunSession.start(opts, lambda: _end_run(environment))
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
    # Locust, Flask and the prompt bodies are long-lived: freeze them out of the cyclic
    # collector, whose full passes over them stalled the hub (and every stream) ~8 ms.
    gc.collect()
    gc.freeze()
    session.begin_load()
    log.info("anvil: run %s → %s (model %s, %s requests, prompt sizing: %s)",
             session.run_id, session.run_dir, session.model, session.scenario.requests,
             session.calibration.method)


@events.test_stopping.add_listener
def on_test_stopping(**_: Any) -> None:
    """The run is being stopped (time limit, Ctrl-C, the UI's stop): the load is over, so
    freeze the generator-health figures before Locust's shutdown work stalls the hub."""
    session = current()
    if session is not None:
        session.end_load()
    if _master is not None and _master.coordinator is not None:
        _master.coordinator.begin_stop()


@events.test_stop.add_listener
def on_test_stop(environment: Any, **_: Any) -> None:
    session = current()
    if session is None:
        return
    total = environment.stats.total
    stats = {"num_requests": total.num_requests, "num_failures": total.num_failures}
    coordinator = _master.coordinator if _master is not None else None
    if coordinator is not None and coordinator.session is session:
        summary = coordinator.drain()
        client = coordinator.client_health() or dict.fromkeys(CLIENT_KEYS)
        path = session.finish(stats, client=client, distributed=summary)
        _master.coordinator = None
    else:
        path = session.finish(stats)
    if path is not None:
        log.info("anvil: wrote %s", path)
