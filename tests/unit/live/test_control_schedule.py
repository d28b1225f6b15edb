"""RequestBudget with an arrival schedule, under gevent: tickets at their due times.

Why real time: what an open loop promises is when a request goes out, so these tests take
tickets from greenlets and stamp the moment each `take()` returns with `perf_counter_ns`,
the clock the budget's due times are on. A ticket is never early; how late it may be is
what the test records beside it: anvil's own loop-lag monitor runs on the same hub for
the whole test (a greenlet waking every 1 ms), and a greenlet waiting for a due time wakes
no later than that monitor's worst wake-up plus one of its intervals and a ms of work. A
busy machine widens the bound as much as it delays the hub, no more; a budget that
handed tickets out at once, or by another schedule, fails them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import gevent
import pytest

from anvil_metrics.live.control import RequestBudget, Ticket
from anvil_metrics.live.lagmon import LoopLagMonitor
from anvil_metrics.load.arrivals import ArrivalPlan, Schedule

WORK_NS = 1_000_000  # beyond the hub's own lateness: the budget's and the taker's work


@pytest.fixture
def late_ns() -> Iterator[Callable[[], int]]:
    """How late a greenlet may wake for its moment, from what the hub did so far in this
    test: the worst wake-up of a loop-lag monitor running beside it, one of its intervals
    and `WORK_NS`."""
    monitor = LoopLagMonitor(0.001)
    monitor.start()

    def bound() -> int:
        # A stall that covered the span just measured is only recorded once the monitor
        # wakes after it: let it wake before reading its worst.
        gevent.sleep(2 * monitor.interval_s)
        worst = monitor.summary().max_ms or 0.0
        return round((worst + monitor.interval_s * 1e3) * 1e6) + WORK_NS

    yield bound
    monitor.stop()


def _taker(budget: RequestBudget, got: list[tuple[int, Ticket]], work_s: float,
           asked: dict[int, int] | None = None) -> None:
    """Take tickets until none is left: (the moment take() returned, the ticket) each, and
    in `asked` the moment this taker asked for it, by request index."""
    while True:
        before = time.perf_counter_ns()
        t = budget.take()
        now = time.perf_counter_ns()
        if t is None:
            return
        got.append((now, t))
        if asked is not None:
            asked[t.request_index] = before
        gevent.sleep(work_s)
        budget.give_back(t)


@pytest.mark.parametrize("plan", [ArrivalPlan(100.0, "poisson", seed=3),
                                  ArrivalPlan(50.0, "constant")])
def test_tickets_come_out_at_their_due_times_dense_in_due_order(plan: ArrivalPlan,
                                                                late_ns) -> None:
    n = 25
    done: list[int] = []
    budget = RequestBudget(n, 0, [10, 20], on_exhausted=lambda: done.append(1),
                           schedule=Schedule(plan))
    got: list[tuple[int, Ticket]] = []
    asked: dict[int, int] = {}
    start = time.perf_counter_ns()
    gevent.joinall([gevent.spawn(_taker, budget, got, 0.003, asked) for _ in range(4)],
                   timeout=10)
    assert len(got) == n and done == [1]
    tickets = [t for _, t in got]
    assert sorted(t.request_index for t in tickets) == list(range(n))
    by_due = sorted(tickets, key=lambda t: (t.due_ns, t.request_index))
    assert [t.request_index for t in by_due] == list(range(n))
    origin = budget.origin_ns
    assert origin is not None and start <= origin
    want = Schedule(plan)
    for now, t in got:
        assert t.due_ns is not None and not t.warmup
        # `waited`: no taker was asking when it fell due. Four takers of 3 ms each ask ahead
        # of a 100/s schedule, unless this process was held off the CPU just then (arrival
        # 1 of the Poisson plan is due 1.1 ms after arrival 0): judged by when its taker asked
        if asked[t.request_index] > t.due_ns:
            assert t.waited, (t, asked[t.request_index])
        elif t.waited:  # asked before it fell due, but take() itself stamped it after
            assert asked[t.request_index] > t.due_ns - late_ns(), (t, asked[t.request_index])
        assert t.due_ns - origin == want.offset_ns(t.request_index)
        assert t.due_ns <= now <= t.due_ns + late_ns(), (t, now - t.due_ns, late_ns())
        assert t.planned_context_tokens == [10, 20][t.request_index % 2]
    # the whole run took the schedule's span, not less (tickets were not handed out at once)
    last_due = max(t.due_ns for t in tickets)
    assert last_due - origin == want.offset_ns(n - 1) > 0
    assert max(now for now, _ in got) >= last_due


def test_a_taker_that_asks_late_gets_waited_one_that_asks_early_does_not(late_ns) -> None:
    gap_ns = 100_000_000  # constant 10/s
    budget = RequestBudget(None, 0, [10], schedule=Schedule(ArrivalPlan(10.0, "constant")))
    t0 = budget.take()
    assert t0 is not None and t0.request_index == 0 and not t0.waited
    assert t0.due_ns == budget.origin_ns
    gevent.sleep(0.15)  # arrival 1 fell due at 100 ms with no taker asking
    asked = time.perf_counter_ns()
    t1 = budget.take()
    back = time.perf_counter_ns()
    assert t1 is not None and t1.request_index == 1 and t1.waited
    assert t1.due_ns == t0.due_ns + gap_ns and t1.due_ns < asked
    assert back - asked <= late_ns()  # already due: handed out at once
    t2 = budget.take()  # asked at ~150 ms, due at 200 ms
    back2 = time.perf_counter_ns()
    assert t2 is not None and t2.request_index == 2 and not t2.waited
    assert t2.due_ns == t0.due_ns + 2 * gap_ns <= back2 <= t2.due_ns + late_ns()
    budget.close()


def test_close_while_waiting_returns_none_at_once_and_the_index_is_never_issued(late_ns
                                                                                ) -> None:
    budget = RequestBudget(None, 0, [10], schedule=Schedule(ArrivalPlan(1.0, "constant")))
    first = budget.take()
    assert first is not None and first.request_index == 0
    assert budget.issued == 1
    got: list[object] = []
    waiter = gevent.spawn(lambda: got.append(budget.take()))
    gevent.sleep(0.05)
    assert got == []  # arrival 1 is due 1 s after the origin
    closed = time.perf_counter_ns()
    budget.close()
    waiter.join(timeout=1)
    returned = time.perf_counter_ns()
    assert got == [None]
    assert returned - closed <= late_ns()  # not at the arrival's due time, 1 s after
    assert budget.issued == 1
    assert budget.take() is None and budget.issued == 1


def test_the_request_budget_ends_the_schedule(late_ns) -> None:
    done: list[int] = []
    budget = RequestBudget(3, 0, [10], on_exhausted=lambda: done.append(1),
                           schedule=Schedule(ArrivalPlan(1000.0, seed=1)))
    tickets = [budget.take() for _ in range(3)]
    assert [t.request_index for t in tickets if t is not None] == [0, 1, 2]
    started = time.perf_counter_ns()
    assert budget.take() is None  # at once: not the due time of arrival 3
    assert time.perf_counter_ns() - started <= late_ns()
    assert budget.issued == 3 and done == []
    for t in tickets:
        assert t is not None
        budget.give_back(t)
    assert done == [1] and budget.finished == 3


def test_warmups_come_first_without_due_times_and_the_origin_follows_them() -> None:
    budget = RequestBudget(3, 2, [10], schedule=Schedule(ArrivalPlan(50.0, "constant")))
    w0, w1 = budget.take(), budget.take()
    assert w0 is not None and w1 is not None
    assert (w0.warmup, w1.warmup) == (True, True)
    assert (w0.request_index, w1.request_index) == (0, 1)
    assert w0.due_ns is None and w1.due_ns is None and not w0.waited
    got: list[tuple[int, Ticket]] = []
    g = gevent.spawn(_taker, budget, got, 0.0)
    gevent.sleep(0.03)
    assert got == [] and budget.origin_ns is None  # measured load waits for the warm-ups
    budget.give_back(w0)
    released = time.perf_counter_ns()
    budget.give_back(w1)
    g.join(timeout=2)
    assert [t.request_index for _, t in got] == [0, 1, 2]
    origin = budget.origin_ns
    assert origin is not None and origin >= released
    assert [t.due_ns - origin for _, t in got] == [0, 20_000_000, 40_000_000]
    assert all(not t.warmup for _, t in got)


def test_follow_ups_take_the_next_index_at_once_and_leave_the_arrivals_offsets(late_ns
                                                                               ) -> None:
    """Conversations in an open loop: arrival k stays due at the schedule's offset of k
    however many follow-ups (later turns) took indices between two arrivals; a follow-up
    comes at once, without a due time; the request budget counts both."""
    gap_ns = 50_000_000  # constant 20/s
    budget = RequestBudget(6, 0, [10], schedule=Schedule(ArrivalPlan(20.0, "constant")))
    a0 = budget.take()
    asked = time.perf_counter_ns()
    f1, f2 = budget.take_followup(), budget.take_followup()
    assert time.perf_counter_ns() - asked <= late_ns()  # not at an arrival's due time
    a1 = budget.take()
    f3 = budget.take_followup()
    a2 = budget.take()
    assert [t.request_index for t in (a0, f1, f2, a1, f3, a2)] == [0, 1, 2, 3, 4, 5]
    assert f1.due_ns is f2.due_ns is f3.due_ns is None and not f1.waited
    assert (a1.due_ns - a0.due_ns, a2.due_ns - a0.due_ns) == (gap_ns, 2 * gap_ns)
    assert budget.take() is None and budget.take_followup() is None  # 6 requests in all
    assert budget.in_flight == 6


def test_a_closed_loops_follow_up_is_an_ordinary_ticket() -> None:
    budget = RequestBudget(2, 0, [10])
    assert [budget.take().request_index, budget.take_followup().request_index] == [0, 1]
    assert budget.take_followup() is None


def test_takers_waiting_together_start_no_more_conversations_than_the_budget() -> None:
    """Four takers wait for arrivals at once under a budget of two conversations: two get
    one, two get None (the cap is checked where the arrival is handed out, not before the
    wait)."""
    budget = RequestBudget(None, 0, [10], schedule=Schedule(ArrivalPlan(100.0, "constant")),
                           conversations=2)
    got = [g.get(timeout=2) for g in [gevent.spawn(budget.take) for _ in range(4)]]
    assert sorted(t.request_index for t in got if t is not None) == [0, 1]
    assert got.count(None) == 2
    budget.close()


def test_the_wait_for_a_due_time_never_ends_before_it_and_sleeps_through_it() -> None:
    """`_until` sleeps to SLEEP_MARGIN_NS before the due time, then waits on the timerfd: it never
    returns early, and on Linux it costs no CPU while it waits (a spin would cost the whole
    wait). A set event ends the wait at once."""
    import resource

    import gevent.event

    from anvil_metrics.live import control
    from anvil_metrics.live.duetimer import DueTimer

    timer = DueTimer()
    assert timer.precise  # Linux: a timerfd
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    waited_ns = 0
    for ahead_ms in (0.2, 1.0, 5.0, 20.0) * 5:
        start = time.perf_counter_ns()
        due = start + int(ahead_ms * 1e6)
        assert control._until(due, gevent.event.Event(), timer) is False
        end = time.perf_counter_ns()
        assert end >= due
        waited_ns += end - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_ns = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) * 1e9
    assert cpu_ns < 0.5 * waited_ns, (cpu_ns, waited_ns)  # a spin would be ~all of it
    changed = gevent.event.Event()
    changed.set()
    assert control._until(time.perf_counter_ns() + 10**9, changed, timer) is True
    timer.close()


def test_held_arrivals_begin_when_every_spawned_user_is_ready() -> None:
    """An open loop's origin is the moment the last of its users is ready, not the first
    take: a taker asking while users are still starting waits, and its ticket is arrival
    0 due at that moment."""
    budget = RequestBudget(None, 0, [10], schedule=Schedule(ArrivalPlan(100.0, "constant")))
    budget.hold_arrivals(30.0)
    got: list[tuple[int, Ticket | None]] = []

    def take() -> None:
        ticket = budget.take()
        got.append((time.perf_counter_ns(), ticket))

    taker = gevent.spawn(take)
    budget.user_ready()  # users start before and after Locust says all are spawned
    gevent.sleep(0.02)
    budget.all_spawned(3)
    budget.user_ready()
    gevent.sleep(0.02)
    assert got == [] and budget.origin_ns is None  # 2 of 3 users ready
    last_ready = time.perf_counter_ns()
    budget.user_ready()
    taker.join(timeout=5)
    assert len(got) == 1
    now, ticket = got[0]
    assert ticket is not None and ticket.request_index == 0 and not ticket.waited
    assert budget.origin_ns is not None and last_ready <= budget.origin_ns <= now
    assert ticket.due_ns == budget.origin_ns
    budget.close()


def test_held_arrivals_open_for_a_master_a_stop_or_the_time_limit() -> None:
    """A distributed master's `all_spawned` (its users start in its workers) opens at once;
    a close releases a waiting taker with None; a user that never gets ready holds arrivals
    no longer than the limit."""
    plan = ArrivalPlan(100.0, "constant")
    master = RequestBudget(None, 0, [10], schedule=Schedule(plan))
    master.hold_arrivals(30.0)
    master.all_spawned(4, started_here=False)
    assert master.take() is not None
    master.close()

    stopped = RequestBudget(None, 0, [10], schedule=Schedule(plan))
    stopped.hold_arrivals(30.0)
    got: list[Ticket | None] = []
    waiter = gevent.spawn(lambda: got.append(stopped.take()))
    gevent.sleep(0.02)
    stopped.close()
    waiter.join(timeout=5)
    assert got == [None] and stopped.issued == 0

    limited = RequestBudget(None, 0, [10], schedule=Schedule(plan))
    limited.hold_arrivals(0.05)
    limited.all_spawned(2)  # no user ever says it is ready
    asked = time.perf_counter_ns()
    ticket = limited.take()
    assert ticket is not None and ticket.request_index == 0
    assert limited.origin_ns is not None and limited.origin_ns - asked >= 50_000_000
    limited.close()


def test_a_closed_loop_is_never_held() -> None:
    budget = RequestBudget(None, 0, [10])
    budget.hold_arrivals(30.0)  # no schedule: nothing to hold
    ticket = budget.take()
    assert ticket is not None and ticket.request_index == 0
    budget.close()
