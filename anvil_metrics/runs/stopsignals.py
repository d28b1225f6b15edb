"""Ctrl-C and SIGTERM in a Locust process that runs anvil: the run is stopped, not dropped.

What a user expects of a benchmark interrupted by hand (issue 28): no new request starts;
the requests in flight get `--stop-timeout` to finish and what is still open then is kept as
`cancelled`; `benchmark.json` is written, marked `partial` with `ended_by: "signal"`; Locust
prints its summary; the process exits 130 (SIGINT) or 143 (SIGTERM); no traceback.

Locust alone does not: a Ctrl-C raises `KeyboardInterrupt` in its main greenlet and a second
one raises it again inside the shutdown (a traceback, no benchmark.json), and its exit code
says nothing of the signal. So on a master or a single process, anvil takes SIGINT itself:

- the first Ctrl-C marks the run (`ended_by: "signal"`, reason "SIGINT (Ctrl-C)"), sets the
  exit code and quits as a run's own end does (`runner.quit()`: Locust stops the users with
  `--stop-timeout`, anvil writes the run, Locust prints its summary and exits); with no run
  in progress it just quits;
- a second Ctrl-C cancels the requests still in flight at once (their users are killed:
  each is recorded `cancelled`, as after `--stop-timeout`), and the run is written. A
  SIGINT within `SAME_CTRL_C_S` of the one before is the same Ctrl-C, not a second: a
  terminal's Ctrl-C reaches `anvil run` and its Locust alike, and `anvil run` passes it on
  too (it must: a SIGINT sent to it alone would not reach Locust otherwise);
- on a worker, a Ctrl-C during a run is left to its master, which stops the run on every
  worker (a terminal's Ctrl-C reaches the master and `--processes` workers alike); a second
  one quits the worker.

SIGTERM keeps Locust's own handler (it shuts Locust down, stopping the users as above);
anvil marks the run and the exit code just before that handler runs (`mark_terminated`). A
worker drains its share of the run first (`drain_worker`): Locust's handler would tell the
master at once that it quit, and the master would count its requests in flight as lost.
Why "just before": Locust's handler fires `quitting`, and a master's own `quitting`
listener (registered after anvil's, fired first) stops the run at once, so a mark made by a
listener of anvil's would come after the run was written as merely "stopped". Locust
installs its handler with `gevent.signal_handler` in `main`, after the locustfile (and this
plugin) was imported; `first_mark_sigterm` wraps that function so a SIGTERM handler
installed through it marks the run first. The plugin's `quitting` listener marks it too,
for a shutdown no signal started (nothing else ends a run in progress that way).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import gevent
from locust.runners import WorkerRunner

from anvil_metrics.cluster.worker import WorkerSession
from anvil_metrics.errors import ExitCode
from anvil_metrics.live.runctx import run_in_progress
from anvil_metrics.live.runerror import set_up_in_progress
from anvil_metrics.live.session import RunSession

log = logging.getLogger("anvil")

SAME_CTRL_C_S = 0.5  # a person's second Ctrl-C comes later; a passed-on copy within ms
SIGINT_REASON = "SIGINT (Ctrl-C): stopped by hand"
SIGTERM_REASON = "SIGTERM: the process was asked to stop"


_ENVIRONMENTS: list[Any] = []  # the process's Locust environment, once StopSignals is made


class StopSignals:
    """One Locust process's Ctrl-C handling (installed once, at `init`)."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.interrupts = 0
        self.last_s: float | None = None
        self._handler = gevent.signal_handler(signal.SIGINT, self.on_sigint)
        _ENVIRONMENTS[:] = [environment]

    def on_sigint(self) -> None:
        """A Ctrl-C (module docstring)."""
        now = time.monotonic()
        if self.last_s is not None and now - self.last_s < SAME_CTRL_C_S:
            return  # the same Ctrl-C, passed on by `anvil run`
        self.last_s = now
        self.interrupts += 1
        env = self.environment
        runner = env.runner
        session = run_in_progress(env)
        if isinstance(runner, WorkerRunner):
            if session is not None and self.interrupts == 1:
                log.warning("anvil: Ctrl-C: this worker's master stops the run; Ctrl-C again "
                            "quits this worker now")
                return
            _quit(env)
            return
        if self.interrupts > 1:
            log.warning("anvil: Ctrl-C again: cancelling the requests in flight")
            if runner is not None:
                runner.user_greenlets.kill(block=False)
            return
        _stop_set_up(env, SIGINT_REASON, ExitCode.SIGINT)
        if isinstance(session, RunSession) and not session.finished:
            session.mark_end("signal", SIGINT_REASON)
            if env.process_exit_code is None:
                env.process_exit_code = ExitCode.SIGINT
            stop_timeout = getattr(env.parsed_options, "stop_timeout", None) or 0
            log.warning("anvil: Ctrl-C: stopping the run; requests in flight get up to %g s "
                        "(--stop-timeout) and are then cancelled; Ctrl-C again cancels them "
                        "now", float(stop_timeout))
        gevent.spawn(_quit, env)


def mark_terminated(environment: Any) -> None:
    """Locust is shutting down (its SIGTERM handler, or its main greenlet ended) while a run
    is still in progress and nothing ended it: mark it ended by SIGTERM and exit 143 (a
    Ctrl-C or a run's own end marked it before). On a worker, drain its share first."""
    if isinstance(environment.runner, WorkerRunner):
        drain_worker(environment)
        return
    _stop_set_up(environment, SIGTERM_REASON, ExitCode.SIGTERM)
    session = run_in_progress(environment)
    if isinstance(session, RunSession) and not session.finished and session.ended_by is None:
        session.mark_end("signal", SIGTERM_REASON)
        if environment.process_exit_code is None:
            environment.process_exit_code = ExitCode.SIGTERM
        log.warning("anvil: SIGTERM: stopping the run; requests in flight get up to "
                    "--stop-timeout and are then cancelled")


def _stop_set_up(environment: Any, reason: str, code: ExitCode) -> None:
    """A signal during a run's set-up (before its first request): error.json names the
    signal and the phase (`runerror.SetUp`), and the process exits 130 or 143."""
    setup = set_up_in_progress(environment)
    if setup is None or setup.stopped is not None:
        return
    log.warning("%s; in %s", setup.stop(reason), setup.run_dir)
    if environment.process_exit_code is None:
        environment.process_exit_code = code


def drain_worker(environment: Any) -> None:
    """SIGTERM on a worker during a run: end its share as the master's stop does before
    Locust's handler tells the master it quit. No new request starts; the requests in flight
    get `--stop-timeout` and are then `cancelled`; every record is shipped and the worker
    says it is done, so the master counts each request once (none `worker_lost`) and runs
    on with its other workers. The worker exits 143."""
    session = run_in_progress(environment)
    if isinstance(session, WorkerSession) and not session.finished:
        log.warning("anvil: SIGTERM: this worker stops its users (requests in flight get up "
                    "to --stop-timeout, then are cancelled), sends its records and quits")
        session.stop(environment.runner)
        if environment.process_exit_code is None:
            environment.process_exit_code = ExitCode.SIGTERM


_WRAPPED = "_anvil_marks_sigterm_first"


def first_mark_sigterm() -> None:
    """Wrap `gevent.signal_handler` (once) so that a SIGTERM handler installed through it
    (Locust's, in `main`) runs `mark_terminated` first (module docstring: why)."""
    original = gevent.signal_handler
    if getattr(original, _WRAPPED, False):
        return

    def signal_handler(signalnum: int, handler: Any, *args: Any, **kwargs: Any) -> Any:
        if signalnum == signal.SIGTERM:
            inner = handler

            def handler(*a: Any, **k: Any) -> Any:
                for environment in _ENVIRONMENTS:
                    mark_terminated(environment)
                return inner(*a, **k)
        return original(signalnum, handler, *args, **kwargs)

    setattr(signal_handler, _WRAPPED, True)
    gevent.signal_handler = signal_handler


def _quit(environment: Any) -> None:
    """End the process as a run's own end does: quit the runner (it stops the users), and
    stop the web UI when there is one (its greenlet is then Locust's main one)."""
    runner = environment.runner
    if runner is not None:
        runner.quit()
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is not None:
        web_ui.stop()
