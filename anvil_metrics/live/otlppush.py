"""The load process's handle on the OTLP push child (`otlp.py`): started (and waited for) just
before the load, told
the gauges once an interval, told `end` once `benchmark.json` is written.

Why a handle of its own: the child does the work (reading `requests.jsonl`, recording, the
HTTP exports), so nothing here touches a request; what is left is small and must stay so —
one greenlet writing one short line an interval (the requests in flight, the users), and at
the end a bounded wait for the child's last push (`END_WAIT_S`), after which it is stopped
by its PID whatever it is doing. A child that cannot be told (it died) is logged once; the
run goes on.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import gevent
import orjson

from anvil_metrics.events import anvil_events
from anvil_metrics.live.otlp import EXPORT_TIMEOUT_S, attributes, signal_url

log = logging.getLogger("anvil")

END_WAIT_S = EXPORT_TIMEOUT_S + 5.0  # the last push: one export's timeout, and its reading
READY_WAIT_S = 30.0  # the child's imports (~0.5 CPU-s), before the load: not in its window


class OtlpPush:
    """The child pushing the run of a session (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes], interval_s: float,
                 in_flight: Callable[[], int], users: Callable[[], int] | None) -> None:
        self.proc = proc
        self.interval_s = interval_s
        self.in_flight, self.users = in_flight, users
        self._greenlet: gevent.Greenlet | None = gevent.spawn(self._run)

    @classmethod
    def start(cls, session: Any) -> OtlpPush | None:
        """Start pushing the run of `session` (a `RunSession`) when it asks for it (None
        else); the last push follows `anvil_events.run_finished`."""
        endpoint = session.opts.otlp_endpoint
        if endpoint is None:
            return None
        attrs = attributes(session.run_id, session.model, session.endpoint.root_url,
                           session.scenario.endpoint)
        proc = subprocess.Popen(
            [sys.executable, "-m", "anvil_metrics.live.otlp",
             str(session.run_dir / "requests.jsonl"), endpoint, orjson.dumps(attrs).decode(),
             "--interval-s", repr(session.opts.otlp_interval_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = False
        with gevent.Timeout(READY_WAIT_S, False):
            assert proc.stdout is not None
            ready = proc.stdout.readline().startswith(b"ready")
        if not ready:
            log.warning("anvil: the OTLP push child did not start within %g s; the run goes "
                        "on without it", READY_WAIT_S)
            proc.kill()
            proc.wait(5)
            return None
        push = cls(proc, session.opts.otlp_interval_s, lambda: session.budget.in_flight,
                   session.clock.controls.users_now)
        anvil_events.run_finished.add_listener(push.finish)
        log.info("anvil: pushing OpenTelemetry metrics to %s every %gs (child %d)",
                 signal_url(endpoint), push.interval_s, proc.pid)
        return push

    def _tell(self, word: bytes) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(word)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def _run(self) -> None:
        while True:
            users = "-" if self.users is None else str(self.users())
            if not self._tell(f"g {self.in_flight()} {users}\n".encode()):
                log.warning("anvil: the OTLP push child is gone; the run goes on without it")
                return
            gevent.sleep(self.interval_s)

    def finish(self, **_: Any) -> None:
        """The run is written: the child's last push (waited for, bounded), then it stops."""
        anvil_events.run_finished.remove_listener(self.finish)
        if self._greenlet is not None:
            self._greenlet.kill()
            self._greenlet = None
        done = False
        if self._tell(b"end\n") and self.proc.stdout is not None:
            with gevent.Timeout(END_WAIT_S, False):
                done = self.proc.stdout.readline().startswith(b"done")
        if not done:
            log.warning("anvil: the last OTLP push did not finish within %g s", END_WAIT_S)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
