"""How many requests a run issues, and in what order: tickets.

Locust has no core request budget; anvil's users take a ticket before each request. A
ticket carries the request's index (its 0-based issue order: dense and unique, so a run of
`--requests 37` has rows 0…36 whatever the concurrency), whether it is a warm-up, and its
planned prompt size. Warm-up tickets come first and have their own index sequence; no
measured ticket is handed out until every warm-up request has finished, so warm-up load
never overlaps the measured window. When every measured ticket has been returned, the
budget calls `on_exhausted` once.

In shared-prefix burst mode (`group_size`), measured tickets come in groups of
`group_size` consecutive indices, and a group's tickets are handed out only after every
request of the groups before it has finished: each group arrives at the server as one
burst of requests sharing a prefix, as SGLang's and vLLM's shared-prefix benchmarks send
them, not spread over other groups' requests.

`before_measured` (given by the session: the first server-metrics scrape,
`telemetry/sampler.py`) runs once, after the warm-ups and before the first measured ticket
is handed out; every taker waits for it (it is bounded by its own timeout), so it lies
between the two.

Open loop (`schedule`, `arrivals.Schedule`): measured ticket k is handed out at its due time
(the schedule's origin is the first measured take, after the warm-ups and once the users
are ready, see below) to the user that
asks for it, one taker waiting for the next arrival at a time; the ticket carries its due
time and whether it waited for a user (no user was free when it fell due: the request goes
out late, and its lateness is recorded, never hidden). An arrival whose due time the run's
stop comes before is never issued: indices stay dense.

The users first (`hold_arrivals`, set by the plugin for an open loop it runs): Locust spawns
the users (`-r` = users: all in one batch here) and each opens its connection as it starts
(a `GET /models`; 128 users: the first ~100 ms of the loop's work). That work shared the
event loop with the first arrivals and sent them late (measured at 20 and 100 req/s: the
first arrivals 1-10 ms late, against ~0.3 ms after it).
So an open loop's schedule, and its duration (`wait_ready`), begin once every user has been
spawned (`all_spawned`: Locust's `spawning_complete`) and has finished its start
(`user_ready`, from `on_start`, counted in the users' own process; a distributed master
opens at its `spawning_complete`, which follows its workers' spawning). The warm-ups, a
closed loop and a run stopped meanwhile do not wait; no open loop waits longer than the
users' connect timeout (`hold_arrivals`).

Conversations in an open loop: the schedule's arrivals are conversation starts; a later
turn is a follow-up (`take_followup`), handed out at once with the next index and no due
time of the schedule's (the user's due time for it is the previous answer's end plus the
think time). So request indices count every request, arrivals only the schedule's: the
schedule's offset of arrival k stays k's, however many turns lie between two arrivals.

In flight (`in_flight`, `read_in_flight`): measured tickets handed out and not yet given
back, i.e. measured requests started and not yet recorded; with its integral over time and
its peak since the last reading, so the live page's series (`series.py`) shows the mean in
flight over each second, not a sample of one instant (a second's requests can all start
and end between two samples). O(1) a request: one clock read and a few integer updates at
each hand-out and give-back. On a distributed run's master this budget is the run's one
budget: a ticket granted to a worker and not yet returned as a record is in flight, so the
series needs no other source.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import gevent.event
import gevent.lock

from anvil_metrics.live.duetimer import DueTimer
from anvil_metrics.load.arrivals import Schedule
from anvil_metrics.load.replay import TraceSchedule

log = logging.getLogger("anvil")


@dataclass(frozen=True, slots=True)
class InFlight:
    """Measured requests in flight, read at `t_ns` (`perf_counter_ns`): how many now, their
    integral over time since the budget was made (request·ns: the mean over an interval is
    the difference of two readings' `area_ns` over their `t_ns`), and the most at once
    since the previous reading."""

    t_ns: int
    now: int
    area_ns: int
    peak: int


@dataclass(frozen=True, slots=True)
class Ticket:
    """One request to send. `due_ns` (open loop): when it fell due on the `perf_counter_ns`
    clock of the process that sends it; `waited`: no user was free when it fell due."""

    request_index: int
    warmup: bool
    planned_context_tokens: int
    due_ns: int | None = None
    waited: bool = False
    start: int | None = None  # a budget of starts: this start's number, 0-based (a job's)


# A due time is slept to until this much before it (gevent's loop wakes in whole ms, rounded
# up), then waited for exactly (`duetimer.DueTimer`: a timerfd; a spin where there is none)
SLEEP_MARGIN_NS = 1_500_000


def _until(due_ns: int, changed: gevent.event.Event, timer: DueTimer) -> bool:
    """Wait until `due_ns` (perf_counter_ns), never returning before it; True as soon as
    `changed` is set (stopped, or a new schedule) before the last SLEEP_MARGIN_NS."""
    wait_ns = due_ns - time.perf_counter_ns()
    if wait_ns > SLEEP_MARGIN_NS and changed.wait((wait_ns - SLEEP_MARGIN_NS) / 1e9):
        return True
    if changed.is_set():
        return True
    timer.wait_until(due_ns)
    return False


class RequestBudget:
    """Hands out tickets; `None` means the budget is spent (or the run is stopping).

    `requests=None` means unbounded (a run ended by time or by the user).
    """

    followup_lead_ns = 0  # a follow-up is taken when it is due: it is handed out at once

    def __init__(self, requests: int | None, warmup: int, sizes: list[int],
                 on_exhausted: Callable[[], None] | None = None,
                 group_size: int | None = None,
                 schedule: Schedule | TraceSchedule | None = None,
                 conversations: int | None = None,
                 before_measured: Callable[[], None] | None = None) -> None:
        if not sizes:
            raise ValueError("sizes must not be empty")
        if schedule is not None and group_size:
            raise ValueError("an arrival schedule and shared-prefix bursts exclude each other")
        self.group_size = group_size
        self.schedule = schedule
        # a budget of conversations or agent jobs (starts), not requests: a start's later
        # requests are follow-ups, and its end is `give_back(…, True)` or
        # `conversation_dropped` (an agent job's, when its last session ends)
        self.conversations = conversations
        self._started = 0  # conversations started (measured takes that were not follow-ups)
        self._going = 0  # of those, not over yet
        self.origin_ns: int | None = None  # open loop: when arrival 0 fell due
        self._turn = gevent.lock.Semaphore(1)
        self._changed = gevent.event.Event()  # set on close or a new schedule
        self._timer: DueTimer | None = None  # waits for a due time exactly (duetimer.py)
        self._waiting_due_ns: int | None = None  # the due time an arrival waits for now
        self._arrival = 0  # arrivals of the schedules handed out so far
        self._first = 0  # the arrival number of the current schedule's arrival 0
        self._progress = gevent.event.Event()
        self.requests = requests
        self.warmup = warmup
        self._sizes = sizes
        self._next_warmup = 0
        self._next = 0
        self._warmup_done = 0
        self._done = 0
        self._now_ns = time.perf_counter_ns  # the clock of the in-flight integral
        self._out = 0  # measured tickets handed out and not given back
        self._out_since_ns = self._now_ns()  # when _out last changed
        self._out_area_ns = 0  # ∫ _out dt up to _out_since_ns
        self._out_peak = 0  # the most at once since the last read_in_flight
        self._warm = gevent.event.Event()
        if warmup == 0:
            self._warm.set()
        self._closed = False
        self._on_exhausted = on_exhausted
        self._before_measured = before_measured
        self._ready = gevent.event.Event()  # an open loop's users are ready (module doc)
        self._ready.set()
        self._users_expected: int | None = None
        self._users_ready = 0
        self._opening = False
        self._opened = gevent.event.Event()  # before_measured has run

    def wait_warm(self) -> None:
        """Until every warm-up request has finished (or the budget closed)."""
        self._warm.wait()

    def hold_arrivals(self, at_most_s: float) -> None:
        """An open loop's arrivals wait until the users are ready (module docstring), but
        no longer than `at_most_s` (a user whose start never ends: its connect timeout)."""
        if self.schedule is not None and not self._closed:
            self._ready.clear()
            self._users_expected = None
            gevent.spawn_later(at_most_s, self._not_ready, at_most_s)

    def _not_ready(self, waited_s: float) -> None:
        if not self._ready.is_set():
            log.warning("anvil: %d of %s users had started after %g s; the arrivals begin "
                        "anyway", self._users_ready, self._users_expected, waited_s)
            self._ready.set()

    def user_ready(self) -> None:
        """One user of this process has finished its start (its connection is open)."""
        self._users_ready += 1
        self._open_if_ready()

    def all_spawned(self, users: int, started_here: bool = True) -> None:
        """Every user is spawned: arrivals begin once `users` of them are ready, or at once
        when they start elsewhere (`started_here` False: a distributed master's users start
        in its workers)."""
        self._users_expected = users if started_here else 0
        if not started_here and not self._ready.is_set():
            log.info("anvil: the arrivals begin: %d users spawned in the workers", users)
            self._ready.set()
        self._open_if_ready()

    def _open_if_ready(self) -> None:
        if (not self._ready.is_set() and self._users_expected is not None
                and self._users_ready >= self._users_expected):
            log.info("anvil: the arrivals begin: %d users spawned, %d ready",
                     self._users_expected, self._users_ready)
            self._ready.set()

    def wait_ready(self) -> None:
        """Until the measured load begins: the warm-ups are done, an open loop's users are
        ready, and `before_measured` has run (or the budget is closed)."""
        self._warm.wait()
        self._ready.wait()
        self._opened.wait()

    def size_for(self, index: int) -> int:
        return self._sizes[index % len(self._sizes)]

    def take(self, lead_ns: int = 0) -> Ticket | None:
        """The next ticket; an open loop's at its due time, or `lead_ns` before it (a
        distributed master: the worker waits the rest, `cluster.worker.RemoteBudget`)."""
        if self._closed:
            return None
        if self._next_warmup < self.warmup:
            i = self._next_warmup
            self._next_warmup += 1
            return Ticket(i, True, self.size_for(i))
        self._warm.wait()
        if not self._ready.is_set():
            self._ready.wait()
        if not self._opened.is_set():
            self._open()
        if self._no_start():  # (every conversation started: only follow-ups are left)
            return None
        if self.schedule is not None:
            return self._take_arrival(lead_ns)
        i = self._next
        self._next += 1
        if self.group_size:
            barrier = (i // self.group_size) * self.group_size
            while self._done < barrier and not self._closed:
                self._progress.wait()
            if self._closed:  # stopped while waiting: this index was never issued
                self._next = min(self._next, i)
                return None
        self._count_out(1)
        return self._count_start(Ticket(i, False, self.size_for(i)))

    def _all_started(self) -> bool:
        return self.conversations is not None and self._started >= self.conversations

    def _no_start(self) -> bool:
        """No new request or conversation may start: stopped, every request issued, or
        every conversation started."""
        return self._closed or (self.requests is not None
                                and self._next >= self.requests) or self._all_started()

    def _count_start(self, ticket: Ticket) -> Ticket:
        if self.conversations is not None:
            ticket = replace(ticket, start=self._started)
            self._started += 1
            self._going += 1
        return ticket

    def next_due_ns(self) -> int | None:
        """When the next open-loop request falls due (perf_counter_ns), while one waits for
        it; None otherwise (a closed loop, or nobody waiting). Work that can wait (the live
        figures) fits itself before it."""
        return self._waiting_due_ns

    def _open(self) -> None:
        """Run `before_measured` once; other takers wait until it has run."""
        if self._opening:
            self._opened.wait()
            return
        self._opening = True
        try:
            if self._before_measured is not None and not self._closed:
                self._before_measured()
        finally:
            self._opened.set()

    def _take_arrival(self, lead_ns: int = 0) -> Ticket | None:
        """The next arrival of the schedule, at its due time less `lead_ns` (see the module
        docstring)."""
        asked_ns = time.perf_counter_ns()
        with self._turn:
            while True:
                if self._no_start():
                    return None
                if self.origin_ns is None:
                    self.origin_ns = time.perf_counter_ns()
                assert self.schedule is not None
                due = self.origin_ns + self.schedule.offset_ns(self._arrival - self._first)
                if self._timer is None:  # made here: in the process that waits
                    self._timer = DueTimer()
                self._waiting_due_ns = due - lead_ns
                try:
                    if _until(due - lead_ns, self._changed, self._timer):
                        continue  # stopped (the loop's first test), or a new schedule
                finally:
                    self._waiting_due_ns = None
                if self._no_start():  # stopped, or follow-ups took the last requests
                    return None
                i = self._next
                self._next += 1
                self._arrival += 1
                self._count_out(1)
                return self._count_start(Ticket(i, False, self.size_for(i), due_ns=due,
                                                waited=asked_ns > due))

    def take_followup(self) -> Ticket | None:
        """A conversation's next turn: the next index at once, without a due time (see the
        module docstring); None when the budget is spent or closed."""
        if self._closed or (self.requests is not None and self._next >= self.requests):
            return None
        i = self._next
        self._next += 1
        self._count_out(1)
        return Ticket(i, False, self.size_for(i))

    def replan(self, schedule: Schedule, origin_ns: int) -> None:
        """From now on, arrivals follow `schedule` from `origin_ns` (a rate sweep's next
        step): the next arrival is its arrival 0; a taker waiting for an arrival of the old
        schedule takes the new one's instead."""
        self.schedule, self.origin_ns, self._first = schedule, origin_ns, self._arrival
        changed, self._changed = self._changed, gevent.event.Event()
        changed.set()

    def give_back(self, ticket: Ticket, conversation_over: bool = True) -> None:
        """A ticket's request has finished (success or failure); `conversation_over`: no
        later turn of its conversation will be taken (its last, a failed one, or a request
        outside any conversation)."""
        if ticket.warmup:
            self._warmup_done += 1
            if self._warmup_done >= self.warmup:
                self._warm.set()
            return
        self._done += 1
        self._count_out(-1)
        progress, self._progress = self._progress, gevent.event.Event()
        progress.set()
        if self.conversations is not None and conversation_over:
            self._going -= 1
        self._end_if_spent()

    def conversation_dropped(self) -> None:
        """A conversation will take no more turns though its last was not over: its user
        was stopped between two turns (a smaller user count, a sweep's step), or the
        worker holding it was lost. A budget of conversations counts it over."""
        if self.conversations is not None:
            self._going -= 1
            self._end_if_spent()

    def _end_if_spent(self) -> None:
        if (self.requests is not None and self._done >= self.requests) or (
                self._all_started() and self._going <= 0 and self._out == 0):
            self.close()
            if self._on_exhausted is not None:
                cb, self._on_exhausted = self._on_exhausted, None
                cb()

    def close(self) -> None:
        self._closed = True
        self._ready.set()
        self._opened.set()
        self._changed.set()
        self._warm.set()
        self._progress.set()

    @property
    def issued(self) -> int:
        return self._next

    @property
    def finished(self) -> int:
        return self._done

    def _count_out(self, change: int) -> None:
        now = self._now_ns()
        self._out_area_ns += self._out * (now - self._out_since_ns)
        self._out_since_ns = now
        self._out += change
        if self._out > self._out_peak:
            self._out_peak = self._out

    @property
    def in_flight(self) -> int:
        """Measured requests started (ticket handed out) and not yet finished (given back)."""
        return self._out

    @property
    def starts_going(self) -> int | None:
        """A budget of starts (conversations, agent jobs): those started and not over yet
        (None for a budget of requests)."""
        return None if self.conversations is None else self._going

    @property
    def warmups_in_flight(self) -> int:
        """Warm-up requests started and not yet finished (the live progress shows them)."""
        return self._next_warmup - self._warmup_done

    def read_in_flight(self) -> InFlight:
        """In flight now, its integral so far and its peak since the previous call (which
        this call starts again: one reader, the live page's sampler)."""
        now = self._now_ns()
        reading = InFlight(now, self._out,
                           self._out_area_ns + self._out * (now - self._out_since_ns),
                           self._out_peak)
        self._out_peak = self._out
        return reading
