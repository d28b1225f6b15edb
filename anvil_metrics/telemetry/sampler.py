"""The load process's handle on the server-metrics sampler (`scrape.py`, a child process).

Why this shape: the sampler must never touch the measurement (a scrape that hangs 5 s or
answers garbage changes no request's stamps), so everything slow happens in the child; the
load process only starts it, writes `first` / `last` to its stdin and, for those two,
waits — bounded — for the child's `done` line:

- `first` is taken just before the first measured request is handed out (the request
  budget's gate, after the warm-ups): counters differenced from it count no warm-up work,
  and the first measured request, which waits for it, cannot be in it;
- `last` just after the run's last request finished (`RunSession.finish`, before the
  benchmark is built); then the child exits.

A sampler that does not answer in time is waited for no longer (two scrape timeouts and
`MARK_WAIT_S`: a periodic scrape may be under way): the run goes on and the benchmark's
`server.null_reasons` says which edge is missing. The child is always stopped by its PID,
at the latest when the run finishes.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import gevent

from anvil_metrics.load.energyplan import EnergyPlan
from anvil_metrics.telemetry.energy import READ_TIMEOUT_S, child_args
from anvil_metrics.telemetry.energyfile import ENERGY_FILE
from anvil_metrics.telemetry.servermetrics import SAMPLES_FILE, role_samples_file

log = logging.getLogger("anvil")

MARK_WAIT_S = 1.0  # beyond two scrape timeouts, how long a mark is waited for
_MOMENTS = {"first": "before the first measured request",
            "last": "after the last request",
            "idle_start": "at the idle baseline's start", "idle_end": "at its end"}


class ServerTelemetry:
    """One run's sampler child: `start`, then `mark("first")`, `finish()`. The energy
    reader's child (`energy.py`) is handled alike (`start_energy`)."""

    def __init__(self, proc: subprocess.Popen[bytes], path: Path, timeout_s: float,
                 told: tuple[str, str] = ("server-metrics scrape", "server.null_reasons")
                 ) -> None:
        self.proc = proc
        self.path = path
        self.timeout_s = timeout_s
        # what the warnings call the child's reading, and where the run says it is missing
        self.what, self.told_in = told
        self.marked: dict[str, bool] = {}  # mark -> answered in time
        # a periodic scrape may be under way when a mark is asked for: two scrapes' worth
        self.wait_s = 2 * timeout_s + MARK_WAIT_S

    @classmethod
    def start(cls, url: str, run_dir: Path, interval_s: float, timeout_s: float,
              name: str = SAMPLES_FILE) -> ServerTelemetry:
        """Start the child scraping `url` (no credentials in it: it is on the command
        line and in the file) into `run_dir`'s file `name`."""
        path = run_dir / name
        proc = subprocess.Popen(
            [sys.executable, "-m", "anvil_metrics.telemetry.scrape", url, str(path),
             "--interval-s", repr(interval_s), "--timeout-s", repr(timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return cls(proc, path, timeout_s)

    @classmethod
    def start_energy(cls, plan: EnergyPlan, run_dir: Path,
                     timeout_s: float = READ_TIMEOUT_S) -> ServerTelemetry:
        """Start the energy child (`energy.py`) reading `plan`'s source into `run_dir`'s
        ENERGY_FILE, each reading bounded by `timeout_s`."""
        path = run_dir / ENERGY_FILE
        proc = subprocess.Popen(child_args(plan, str(path), timeout_s), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return cls(proc, path, timeout_s, ("energy reading", "the energy block"))

    def mark(self, which: str) -> bool:
        """Ask for the `first` / `last` scrape and wait (bounded) until it is written.
        True when it was; a mark is asked for once."""
        if which in self.marked:
            return self.marked[which]
        return self.answer(which, self.ask(which))

    def ask(self, which: str) -> bool:
        """Write the mark's word to the child; False when it cannot be told."""
        if self.proc.poll() is None and self.proc.stdin and self.proc.stdout:
            try:
                self.proc.stdin.write(f"{which}\n".encode())
                self.proc.stdin.flush()
                return True
            except OSError:
                pass
        return False

    def answer(self, which: str, asked: bool) -> bool:
        """Wait (bounded) for the child's `done` of a mark asked for."""
        ok = False
        if asked and self.proc.stdout:
            try:
                with gevent.Timeout(self.wait_s, False):
                    ok = self.proc.stdout.readline().startswith(b"done")
            except OSError:
                ok = False
        if not ok:
            log.warning("anvil: the %s %s did not finish within %g s; the run goes on, "
                        "and %s will say so", self.what, _MOMENTS.get(which, which),
                        self.wait_s, self.told_in)
        self.marked[which] = ok
        return ok

    def finish(self) -> None:
        """The `last` scrape, then stop the child (by its PID, whatever it is doing)."""
        try:
            if "first" in self.marked:
                self.mark("last")
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


class RoleTelemetry:
    """One sampler child per role (`--server-metrics-url ROLE=URL`), each writing its own
    `server_metrics.<role>.jsonl`; a mark is asked of every child before any answer is
    waited for, so the roles' `first` (and `last`) scrapes are taken together. Its `path`
    is the first role's file (the live page's gauges)."""

    def __init__(self, children: dict[str, ServerTelemetry]) -> None:
        self.children = children
        self.path = next(iter(children.values())).path
        self.marked: dict[str, bool] = {}

    def mark(self, which: str) -> bool:
        if which not in self.marked:
            asked = {role: c.ask(which) for role, c in self.children.items()}
            answers = [c.answer(which, asked[role]) for role, c in self.children.items()]
            self.marked[which] = all(answers)
        return self.marked[which]

    def finish(self) -> None:
        try:
            if "first" in self.marked:
                self.mark("last")
        finally:
            for child in self.children.values():
                child.stop()


def start_server_telemetry(server: dict[str, Any], run_dir: Path
                           ) -> ServerTelemetry | RoleTelemetry | None:
    """The sampler(s) of the raw header's `server` parameters: one child for the one
    server's `metrics_url`, one per role of its `roles`, or none (not scraped)."""
    interval_s, timeout_s = server["interval_s"], server["timeout_s"]
    if server.get("roles"):
        return RoleTelemetry({role: ServerTelemetry.start(url, run_dir, interval_s, timeout_s,
                                                          role_samples_file(role))
                              for role, url in server["roles"].items()})
    if server["metrics_url"] is None:
        return None
    return ServerTelemetry.start(server["metrics_url"], run_dir, interval_s, timeout_s)
