"""The job runner's order with fake clients: a child starts after its spawn turn's answer,
a join waits for all its joined children, a background child blocks nothing, a failed turn
ends its session, and a tool wait is its recorded time ÷ speed, capped."""

from __future__ import annotations

import time

import gevent
import pytest

from anvil_metrics.live.agentrun import JobRun, Waits
from anvil_metrics.load.agentjob import Job, Session, Turn


def _turns(n: int, tool_ms: float = 0.0, idle_ms: float | None = None) -> tuple[Turn, ...]:
    return tuple(Turn(t_s=k, input_tokens=100, output_tokens=10, tool_wait_ms=tool_ms,
                      idle_ms=idle_ms) for k in range(n))


def _job() -> Job:
    """Root of 4 turns; a, b spawned after turn 0 and joined before turn 2; c spawned after
    turn 1 in the background; d spawned by a after its turn 0, joined before a's turn 1."""
    return Job("j", 64, (
        Session("root", _turns(4)),
        Session("a", _turns(2), "root", 1, spawn_after_turn=0, join_before_turn=2),
        Session("b", _turns(3), "root", 1, spawn_after_turn=0, join_before_turn=2),
        Session("c", _turns(5), "root", 1, spawn_after_turn=1),
        Session("d", _turns(1), "a", 2, spawn_after_turn=0, join_before_turn=1),
    ))


class _Fake:
    """A fake client: each send logs its start and end, yielding `slow[session]` times
    between them (other greenlets run meanwhile); `fail` = (session, turn) not answered."""

    def __init__(self, slow: dict[str, int], fail: tuple[str, int] | None = None) -> None:
        self.log: list[tuple[str, str, int]] = []
        self.slow = slow
        self.fail = fail
        self.waits: list[tuple[str, int, float]] = []  # (session, turn, ms)
        self.joins: dict[tuple[str, int], int] = {}  # (session, turn) -> join wait ns
        self.ended: list[str] = []

    def send(self, s: Session, k: int, tool_ns: int, join_ns: int = 0) -> int | None:
        self.log.append(("start", s.id, k))
        self.joins[(s.id, k)] = join_ns
        self.waits.append((s.id, k, tool_ns / 1e6))
        for _ in range(self.slow.get(s.id, 1)):
            gevent.sleep(0)
        self.log.append(("end", s.id, k))
        return None if (s.id, k) == self.fail else time.perf_counter_ns()

    def at(self, what: str, sid: str, k: int) -> int:
        return self.log.index((what, sid, k))


def _run(fake: _Fake, job: Job | None = None, waits: Waits | None = None) -> None:
    JobRun(job or _job(), fake.send, waits or Waits(),
           on_session_end=lambda s: fake.ended.append(s.id)).run()


@pytest.mark.parametrize("slow", [{}, {"root": 9}, {"a": 7, "b": 2, "c": 30, "d": 11}])
def test_spawn_after_answer_join_waits_for_all_background_blocks_nothing(slow):
    f = _Fake(slow)
    _run(f)
    assert len(f.log) == 2 * (4 + 2 + 3 + 5 + 1)  # every turn of every session sent
    for child, parent, after in (("a", "root", 0), ("b", "root", 0), ("c", "root", 1),
                                 ("d", "a", 0)):
        assert f.at("start", child, 0) > f.at("end", parent, after)
    for child, last in (("a", 1), ("b", 2)):
        assert f.at("start", "root", 2) > f.at("end", child, last)
    assert f.at("start", "a", 1) > f.at("end", "d", 0)
    assert sorted(f.ended) == ["a", "b", "c", "d", "root"]


def test_background_child_outlives_its_parent_and_the_job_waits_for_it():
    f = _Fake({"c": 200})
    _run(f)
    assert f.at("end", "root", 3) < f.at("end", "c", 4)  # the root went on without c
    assert f.ended[-1] == "c"  # and the job ended with it


def test_a_failed_turn_ends_its_session_and_spawns_nothing_after():
    f = _Fake({}, fail=("root", 0))
    _run(f)
    assert [e for e in f.log if e[1] != "root"] == []  # a, b spawn after turn 0: never
    assert ("start", "root", 1) not in f.log
    assert f.ended == ["root"]


def test_a_failed_child_still_releases_its_join():
    f = _Fake({}, fail=("a", 0))
    _run(f)
    assert ("start", "a", 1) not in f.log
    assert f.at("start", "root", 2) > f.at("end", "a", 0)
    # a's turn 0 failed, so d (spawned after its answer) never ran
    assert ("start", "d", 0) not in f.log


@pytest.mark.parametrize("tool_ms,speed,cap_s,want_s", [
    (800.0, 1.0, None, 0.8), (800.0, 4.0, None, 0.2), (800.0, 1.0, 0.5, 0.5),
    (0.0, 2.0, None, 0.0), (None, 1.0, None, 0.0)])
def test_tool_wait_is_duration_over_speed_capped(tool_ms, speed, cap_s, want_s):
    w = Waits(tool_speed=speed, max_tool_wait_s=cap_s)
    assert w.before(Turn(0, 10, 1, tool_wait_ms=tool_ms))[0] == pytest.approx(want_s)


def test_idle_capped_by_max_idle():
    assert Waits(max_idle_s=10.0).before(Turn(0, 10, 1, idle_ms=60_000.0))[1] == 10.0
    assert Waits(max_idle_s=None).before(Turn(0, 10, 1, idle_ms=60_000.0))[1] == 60.0
    assert Waits().before(Turn(0, 10, 1, idle_ms=None))[1] == 0.0


def test_the_runner_sleeps_the_whole_wait_and_records_what_it_slept():
    calls: list[tuple[int, float, int]] = []  # (called ns, asked s, returned ns)

    def sleep(s: float) -> None:  # a timer that wakes at once every other time
        t0 = time.perf_counter_ns()
        if len(calls) % 2:
            gevent.sleep(s)
        calls.append((t0, s, time.perf_counter_ns()))

    f = _Fake({})
    job = Job("j", 64, (Session("root", _turns(2, tool_ms=30.0)),))
    JobRun(job, f.send, Waits(tool_speed=3.0), sleep=sleep).run()
    # every wake before the time asked was followed by another sleep (however busy the
    # machine: judged by each call's own stamps, not by how many there were)
    early = [i for i, (t0, s, t1) in enumerate(calls) if t1 < t0 + s * 1e9]
    assert early and all(i + 1 < len(calls) for i in early)
    assert [w[2] >= 10.0 for w in f.waits] == [True, True]  # never less than 30 ms / 3


def test_a_real_sleep_is_recorded_as_slept():
    f = _Fake({})
    job = Job("j", 64, (Session("root", _turns(1, tool_ms=40.0, idle_ms=5.0)),))
    JobRun(job, f.send, Waits(tool_speed=2.0)).run()
    assert f.waits[0][2] >= 20.0  # its 20 ms at least (the idle 5 ms not counted in)


def test_a_joined_turn_reports_its_wait_for_the_join_and_others_none():
    job = Job("j", 64, (Session("root", _turns(3)),
                        Session("a", _turns(1), "root", 1, spawn_after_turn=0,
                                join_before_turn=1)))
    joins: dict[tuple[str, int], int] = {}

    def send(s: Session, k: int, tool_ns: int, join_ns: int) -> int | None:
        joins[(s.id, k)] = join_ns
        if s.id == "a":
            gevent.sleep(0.03)  # the child's answer takes 30 ms: the root's turn 1 waits
        return time.perf_counter_ns()

    JobRun(job, send).run()
    assert joins[("root", 0)] == joins[("root", 2)] == joins[("a", 0)] == 0
    assert 25e6 <= joins[("root", 1)] < 1e9  # loose: the machine is shared


@pytest.mark.parametrize(("k", "sent"), [
    (0, {"root", "a", "b", "c", "d"}),
    (1, {"root", "c"}),  # a, b (and a's d) were spawned after turn 0: in the past
    (2, {"root"}),  # c too; the join before turn 2 is satisfied
])
def test_a_sampled_start_sends_the_root_from_k_and_skips_the_past_sub_agents(k, sent):
    f = _Fake({})
    JobRun(_job(), f.send, on_session_end=lambda s: f.ended.append(s.id), start_turn=k).run()
    starts = [(sid, t) for what, sid, t in f.log if what == "start"]
    assert {sid for sid, _ in starts} == sent
    assert [t for sid, t in starts if sid == "root"] == list(range(k, 4))
    assert sorted(f.ended) == sorted(sent)
    if k == 2:
        assert f.joins[("root", 2)] == 0  # the joined children are in the past


def test_a_wait_is_timed_from_the_answers_end_that_send_tells():
    """The answer ended 20 ms before `send` returned (its record written since): the next
    turn's 30 ms tool wait ends 30 ms after that end, ~10 ms after the return."""
    returned: list[int] = []
    starts: list[int] = []

    def send(s: Session, k: int, tool_ns: int, join_ns: int) -> int | None:
        starts.append(time.perf_counter_ns())
        gevent.sleep(0.02)
        returned.append(time.perf_counter_ns())
        return returned[-1] - 20_000_000

    job = Job("j", 64, (Session("root", _turns(2, tool_ms=30.0)),))
    JobRun(job, send, Waits()).run()
    gap_ms = (starts[1] - returned[0]) / 1e6
    assert 10.0 - 0.5 <= gap_ms < 30.0  # not the whole 30 ms after the return


def test_a_wait_going_on_is_told_to_work_that_can_wait():
    """`next_wait_due_ns` names the earliest end of the waits going on (the live figures
    fit their derivation before it), and nothing once they are over."""
    from anvil_metrics.live.agentrun import next_wait_due_ns, wait_until
    now = time.perf_counter_ns()
    ends = [now + 30_000_000, now + 20_000_000]
    waiters = [gevent.spawn(wait_until, e) for e in ends]
    gevent.sleep(0)
    assert next_wait_due_ns() == min(ends)
    gevent.joinall(waiters)
    assert next_wait_due_ns() is None
