"""The run's abort rules (`live/abort.py`) and a closed-loop user's back-off, fed records
whose outcome and arrival time the test sets, so every threshold is exact."""

from __future__ import annotations

import pytest

from anvil_metrics.live.abort import FailureWatch
from anvil_metrics.live.users import BACKOFF_MAX_S, backoff_s
from anvil_metrics.load.options import AbortRule
from anvil_metrics.records import Failure, RequestRecord

S = 1_000_000_000


def rec(i: int, kind: str | None = None, status: int | None = None,
        message: str = "") -> RequestRecord:
    failure = None if kind is None else Failure(kind, message or kind, status)
    return RequestRecord(i, 0, 1, failure=failure)


class Clock:
    def __init__(self) -> None:
        self.t = 100 * S

    def __call__(self) -> int:
        return self.t


def watch(rule: AbortRule, pace: int, clock: Clock, began: int | None = 90 * S
          ) -> tuple[FailureWatch, list[str]]:
    said: list[str] = []
    return FailureWatch(rule, pace, "http://127.0.0.1:9", said.append,
                        began_ns=lambda: began, clock_ns=clock), said


def test_a_streak_of_unanswered_requests_ends_the_run_at_after_failures_times_the_pace():
    clock = Clock()
    w, said = watch(AbortRule(after_failures=3, failure_ratio=1.0, window_s=30), 4, clock)
    for i in range(11):  # 3 × 4 users = 12 in a row
        w.take(rec(i, "connection", message="could not connect: refused"))
        clock.t += S // 10
    assert said == [] and w.streak == 11
    w.take(rec(11, "connection", message="could not connect: refused"))
    assert len(said) == 1
    assert said[0].startswith("the server at http://127.0.0.1:9 stopped answering at 10.0 s: "
                              "could not connect: refused (12 requests in a row")
    w.take(rec(12, "connection"))  # once only
    assert len(said) == 1


def test_an_answer_resets_the_streak_and_http_errors_are_answers():
    clock = Clock()
    w, said = watch(AbortRule(after_failures=2, failure_ratio=1.0, window_s=30), 2, clock)
    for i in range(30):
        kinds = ("timeout", "truncated", "connection", None)
        w.take(rec(i, kinds[i % 4]))  # 3 unanswered, then an answer: never 4 in a row
    w.take(rec(30, "http_error", 500))  # an HTTP error is an answer: it ends a streak
    assert said == [] and w.streak == 0


def test_cancelled_requests_are_the_runs_own_stop():
    clock = Clock()
    w, said = watch(AbortRule(after_failures=1, failure_ratio=1.0, window_s=30), 1, clock)
    for i in range(50):
        w.take(rec(i, "cancelled"))
    assert said == [] and w.streak == 0


def test_the_failure_ratio_counts_only_the_window():
    clock = Clock()
    rule = AbortRule(after_failures=0, failure_ratio=0.5, window_s=10)
    w, said = watch(rule, 8, clock)
    assert w.window_min == 10  # the streak rule is off: the least a window must hold
    for i in range(20):  # 20 answers, one a second: the window keeps the last 10 s
        w.take(rec(i))
        clock.t += S
    for i in range(20, 24):  # 4 failures beside the window's answers: below half
        w.take(rec(i, "http_error", 404, "model not found"))
    assert said == []
    clock.t += 11 * S  # the answers leave the window; the failures too
    for i in range(24, 33):
        w.take(rec(i, "http_error", 404, "model not found"))
    assert said == []  # 9 in the window: fewer than 10 say too little
    w.take(rec(33, "http_error", 404, "model not found"))
    assert len(said) == 1 and "failed 10 of the 10 requests that ended in 10 s" in said[0]
    assert "the latest: http_error 404: model not found" in said[0]


def test_the_ratio_waits_for_as_many_requests_as_the_streak_rule():
    clock = Clock()
    w, said = watch(AbortRule(after_failures=10, failure_ratio=1.0, window_s=30), 16, clock)
    for i in range(159):  # a burst of 16 users answered 429, ten times over, less one
        w.take(rec(i, "rate_limited", 429))
    assert said == [] and w.window_min == 160
    w.take(rec(159, "rate_limited", 429))
    assert len(said) == 1


def test_before_the_load_began_the_reason_gives_no_time():
    clock = Clock()
    w, said = watch(AbortRule(after_failures=1, failure_ratio=1.0, window_s=30), 1, clock,
                    began=None)
    w.take(rec(0, "connection", message="refused"))
    assert said == ["the server at http://127.0.0.1:9 stopped answering: refused (1 requests "
                    "in a row could not reach it; --abort-after-failures 1)"]


@pytest.mark.parametrize("n,wait", [(0, 0.0), (1, 0.05), (2, 0.1), (5, 0.8), (6, 1.0),
                                    (1000, 1.0)])
def test_backoff_doubles_from_50_ms_to_1_s(n, wait):
    assert backoff_s(n) == pytest.approx(wait) and backoff_s(n) <= BACKOFF_MAX_S


def rrec(i: int, replica: int, kind: str | None = None) -> RequestRecord:
    failure = None if kind is None else Failure(kind, f"{kind} on {replica}", None)
    return RequestRecord(i, 0, 1, failure=failure, extra={"replica": replica})


def test_over_replicas_each_counts_its_own_streak_and_the_run_ends_when_all_are_dead():
    clock = Clock()
    dead: list[int] = []
    said: list[str] = []
    w = FailureWatch(AbortRule(after_failures=2, failure_ratio=1.0, window_s=30), 2,
                     ["http://a:1", "http://b:2"], said.append, began_ns=lambda: 90 * S,
                     clock_ns=clock, on_dead=dead.append)
    # replica 1 fails every request while replica 0 answers between them: run-wide the
    # streak never passes 1, per replica it reaches 4 = 2 × 2 users
    for i in range(8):
        w.take(rrec(i, i % 2, None if i % 2 == 0 else "connection"))
        clock.t += S
    assert dead == [1] and said == []
    assert w.stopped_at_s == [None, 11.0]  # its streak's first failure: 1 s after 100 s
    assert w.reasons[1] is not None and w.reasons[1].startswith(
        "the server at http://b:2 stopped answering at 11.0 s")
    for i in range(8, 11):  # replica 0 dies too: 3 failures are not yet 4
        w.take(rrec(i, 0, "timeout"))
    assert said == []
    w.take(rrec(11, 0, "timeout"))
    assert dead == [1, 0] and len(said) == 1
    assert said[0].startswith("every replica stopped answering: the server at http://a:1 "
                              "stopped answering at 18.0 s")
    assert "; the server at http://b:2 stopped answering at 11.0 s" in said[0]


def test_over_replicas_the_failure_ratio_is_each_replicas_own():
    clock = Clock()
    dead: list[int] = []
    w = FailureWatch(AbortRule(after_failures=0, failure_ratio=0.5, window_s=30), 1,
                     ["http://a:1", "http://b:2"], [].append, clock_ns=clock,
                     on_dead=dead.append)
    for i in range(20):  # 10 each: replica 0 one failure in 10, replica 1 all 500s
        w.take(rrec(i, i % 2, ("http_error" if i % 2 else ("timeout" if i == 0 else None))))
    assert dead == [1] and w.stopped_at_s == [None, 0.0]  # before the load began: 0
