"""The run's clock: what time does to a run once its load has begun.

Why apart from the session (`session.py`): the session is the run's state (budget, raw
file, figures, telemetry) from start to written result; the clock is the one greenlet that
moves it on time — the duration (measured once the warm-ups are done, with the measured
window's marks written to the raw file), a sweep's steps, or the steps of a target user
count that changes under the run (a LoadTestShape, the web UI's edit). Everything it needs
is given to its constructor: the scenario, the budget, the raw writer, the user `Controls`
Locust offers and the `on_end` that ends the run; nothing is set on it afterwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import gevent

from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.recorder import RawWriter
from anvil_metrics.load.arrivals import Schedule
from anvil_metrics.load.scenario import Scenario

__all__ = ["NO_CONTROLS", "USERS_POLL_S", "Controls", "RunClock", "window_line"]

log = logging.getLogger("anvil")
USERS_POLL_S = 0.05  # how often a run's target user count is looked at (LoadTestShape steps)


@dataclass(frozen=True)
class Controls:
    """The users, as the plugin lets the run reach them: `set_users` changes their count (a
    sweep: as the web UI's edit does), `users_now` reads the target count (to see a
    LoadTestShape's steps), `shaped` says Locust runs a shape. None: not offered (a test,
    a distributed worker)."""

    set_users: Callable[[int], None] | None = None
    users_now: Callable[[], int] | None = None
    shaped: bool = False


NO_CONTROLS = Controls()


def window_line(t0_ns: int, duration_s: float, warmup_s: float | None,
                cooldown_s: float | None) -> dict[str, Any]:
    """The raw file's `window` line: the measured window inside a duration that began at
    `t0_ns` (`perf_counter_ns`), less its warm-up at the start and cool-down at the end."""
    return {"type": "window", "from_ns": t0_ns + round((warmup_s or 0) * 1e9),
            "to_ns": t0_ns + round((duration_s - (cooldown_s or 0)) * 1e9)}


class RunClock:
    """The run's one timing greenlet, from `start()` (the load begins) to `stop()`."""

    def __init__(self, scenario: Scenario, budget: RequestBudget, writer: RawWriter,
                 controls: Controls = NO_CONTROLS,
                 on_end: Callable[[], None] | None = None,
                 before_step: Callable[[int], None] | None = None) -> None:
        self.scenario = scenario
        self.before_step = before_step  # a sweep's steps after the first (a cache reset)
        self.budget = budget
        self.writer = writer
        self.controls = controls
        self.on_end = on_end
        self._greenlet: gevent.Greenlet | None = None
        self._stopped = False
        # what the live progress reads (`progresswatch.py`): when the duration began, and
        # a sweep's step now as (step, steps, its load in words)
        self.duration_began_ns: int | None = None
        self.step: tuple[int, int, str] | None = None

    def start(self) -> None:
        """Time the run: its duration when it has one, else watch the target user count
        when Locust offers it; once (a second call does nothing)."""
        if self._greenlet is not None:
            return
        duration = self.scenario.duration_s
        if duration is not None:
            self._greenlet = gevent.spawn(self._run_duration, duration)
        elif self.controls.users_now is not None:  # a LoadTestShape, maybe
            self._greenlet = gevent.spawn(self._watch_users, self.controls.users_now)

    def stop(self) -> None:
        """The run is over: no more steps or marks (idempotent)."""
        self._stopped = True
        if self._greenlet is not None:
            self._greenlet.kill(block=False)

    def _run_duration(self, duration_s: float) -> None:
        """The run's duration: measured load time, counted once the warm-ups are done; then
        no new request starts (the budget closes) and the run ends (Locust stops the users:
        requests in flight get --stop-timeout to finish). A sweep's steps are timed here
        too, each written to the raw file as it begins (`steps.py`). The duration begins
        with the measured load (`RequestBudget.wait_ready`): after the scrape before it,
        and for an open loop once its users are ready."""
        self.budget.wait_ready()
        self.duration_began_ns = time.perf_counter_ns()
        sc = self.scenario
        if sc.warmup_s or sc.cooldown_s:  # the measured window, inside the duration
            self.writer.write(window_line(time.perf_counter_ns(), duration_s, sc.warmup_s,
                                          sc.cooldown_s))
        if sc.step_duration_s is not None:
            self._run_steps(sc.step_duration_s)
        else:
            gevent.sleep(duration_s)
        log.info("anvil: the duration (%s s) is over; requests in flight may finish",
                 f"{duration_s:g}")
        self.budget.close()
        if self.on_end is not None:
            self.on_end()

    def _run_steps(self, step_s: float) -> None:
        sc = self.scenario
        loads: list[tuple[int | None, float | None]] = (
            [(u, None) for u in sc.step_users] if sc.step_users is not None
            else [(None, r) for r in sc.step_rates or ()])
        set_users = self.controls.set_users
        t0 = time.perf_counter_ns()
        for i, (users, rate) in enumerate(loads):
            if i and self.before_step is not None:  # step 0's: before the measured load
                self.before_step(i)
                if self._stopped:
                    return
            t = time.perf_counter_ns()
            self.writer.write({"type": "step", "step": i, "t_ns": t, "users": users,
                               "rate": rate})
            if users is not None and set_users is not None:
                set_users(users)
            if rate is not None and sc.arrivals is not None:
                plan = replace(sc.arrivals, rate_rps=rate, seed=sc.arrivals.seed + i)
                self.budget.replan(Schedule(plan), t)
            load = f"{users} users" if users is not None else f"{rate:g} requests/s"
            self.step = (i, len(loads), load)
            log.info("anvil: step %d: %s", i, load)
            # to the step's planned end: a late wake-up does not shift the steps after it
            gevent.sleep(max(0.0, (t0 + round((i + 1) * step_s * 1e9) - time.perf_counter_ns())
                             / 1e9))
        self.writer.write({"type": "step_end", "t_ns": time.perf_counter_ns()})

    def _watch_users(self, users_now: Callable[[], int]) -> None:
        """A run whose users change under it (a LoadTestShape, the web UI's edit): each
        change of the target user count after the warm-ups is a step (`steps.py`)."""
        self.budget.wait_warm()
        steps: list[tuple[int, int]] = []  # (t_ns, users) of each step, written or not
        written = 0
        while not self._stopped:
            users, t = users_now(), time.perf_counter_ns()
            if users and (not steps or users != steps[-1][1]):
                steps.append((t, users))
                # a shaped run's steps from the start; another run's from its first change
                # on, the load before it being step 0
                if self.controls.shaped or len(steps) > 1:
                    for k in range(written, len(steps)):
                        self.writer.write({"type": "step", "step": k, "t_ns": steps[k][0],
                                           "users": steps[k][1], "rate": None})
                    written = len(steps)
            gevent.sleep(USERS_POLL_S)
