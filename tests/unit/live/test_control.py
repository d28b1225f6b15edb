"""Request budget, run folders, request bodies: the pieces that decide what is sent."""

from __future__ import annotations

from pathlib import Path

import gevent
import orjson

from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.recorder import create_run_dir
from anvil_metrics.load.body import BodyBuilder, body_fields
from anvil_metrics.load.scenario import scenario_from_dict
from anvil_metrics.prep.prompts import Calibration, PromptFactory


def test_budget_hands_out_dense_indices_then_stops() -> None:
    exhausted = []
    b = RequestBudget(5, 0, [10, 20], on_exhausted=lambda: exhausted.append(1))
    tickets = [b.take() for _ in range(5)]
    assert [t.request_index for t in tickets] == [0, 1, 2, 3, 4]
    assert [t.planned_context_tokens for t in tickets] == [10, 20, 10, 20, 10]
    assert b.take() is None
    for t in tickets:
        b.give_back(t)
    assert exhausted == [1]


def test_before_measured_runs_once_between_the_warmups_and_the_first_measured_ticket() -> None:
    """The server-metrics scrape before the first measured request: after every warm-up
    finished, before any measured ticket; takers meanwhile wait for it, it runs once."""
    events: list[str] = []

    def gate() -> None:
        events.append("gate begins")
        gevent.sleep(0.05)
        events.append("gate ends")

    b = RequestBudget(3, 1, [10], before_measured=gate)
    w = b.take()
    assert w is not None and w.warmup and events == []
    takers = [gevent.spawn(lambda: events.append(f"ticket {b.take().request_index}"))
              for _ in range(2)]
    gevent.sleep(0.01)
    assert events == []  # the warm-up is in flight
    b.give_back(w)
    gevent.joinall(takers, timeout=2)
    assert events[:2] == ["gate begins", "gate ends"]
    assert sorted(events[2:]) == ["ticket 0", "ticket 1"]
    assert b.take().request_index == 2 and events.count("gate begins") == 1


def test_a_closed_budget_skips_the_gate() -> None:
    ran: list[int] = []
    b = RequestBudget(2, 0, [10], before_measured=lambda: ran.append(1))
    b.close()
    assert b.take() is None and ran == []


def test_warmups_finish_before_measured_tickets() -> None:
    b = RequestBudget(2, 2, [10])
    w0, w1 = b.take(), b.take()
    assert w0.warmup and w1.warmup and (w0.request_index, w1.request_index) == (0, 1)
    got = []
    g = gevent.spawn(lambda: got.append(b.take()))
    gevent.sleep(0.01)
    assert got == []  # blocked while a warm-up is in flight
    b.give_back(w0)
    gevent.sleep(0.01)
    assert got == []
    b.give_back(w1)
    g.join(timeout=1)
    assert got[0].request_index == 0 and not got[0].warmup


def test_unbounded_budget() -> None:
    b = RequestBudget(None, 0, [10])
    assert [b.take().request_index for _ in range(3)] == [0, 1, 2]
    b.close()
    assert b.take() is None


def test_run_dirs_in_the_same_second_never_collide(tmp_path: Path) -> None:
    ids = [create_run_dir(tmp_path, now=1_800_000_000.0)[0] for _ in range(3)]
    assert ids == ["benchmark-20270115T080000Z", "benchmark-20270115T080000Z-2",
                   "benchmark-20270115T080000Z-3"]
    assert all((tmp_path / i).is_dir() for i in ids)


def test_body_has_the_scenario_switches_and_a_unique_prefix() -> None:
    sc = scenario_from_dict({
        "measurement_protocol": "t", "max_tokens": 64, "max_context_tokens": 4096,
        "serve_flags": {"reasoning_effort": "low", "thinking_mode": "off"},
        "request": {"fixed_output_tokens": True, "extra_body": {"top_k": 5}},
    })
    fields = body_fields(sc, "m")
    assert fields["stream"] is True and fields["stream_options"] == {"include_usage": True}
    assert fields["reasoning_effort"] == "low"
    assert fields["chat_template_kwargs"] == {"enable_thinking": False}
    assert fields["ignore_eos"] is True and fields["min_tokens"] == 64
    assert fields["top_k"] == 5
    pf = PromptFactory(Calibration("none", 0.0, 1.3), seed=1, run_nonce="abcd")
    bb = BodyBuilder(sc, "m", pf)
    a = orjson.loads(bb.build(500, 0))
    b = orjson.loads(bb.build(500, 1))
    w = orjson.loads(bb.build(500, 0, warmup=True))
    ca, cb = a["messages"][-1]["content"], b["messages"][-1]["content"]
    assert ca.startswith("Request 000000 of run abcd. ")
    assert cb.startswith("Request 100000 of run abcd. ")  # digits least significant first
    assert ca[len("Request 000000 of run abcd. "):] == cb[len("Request 100000 of run abcd. "):]
    assert w["messages"][-1]["content"].startswith("Warmup 000000 of run abcd. ")
    # same seed and nonce → byte-identical bodies
    pf2 = PromptFactory(Calibration("none", 0.0, 1.3), seed=1, run_nonce="abcd")
    assert BodyBuilder(sc, "m", pf2).build(500, 1) == bb.build(500, 1)


def test_shared_prefix_groups_arrive_as_bursts() -> None:
    """Group g's tickets are handed out only after every request of group g-1 finished."""
    b = RequestBudget(6, 0, [10], group_size=3)
    first = [b.take() for _ in range(3)]
    assert [t.request_index for t in first] == [0, 1, 2]
    got: list = []
    waiters = [gevent.spawn(lambda: got.append(b.take())) for _ in range(3)]
    gevent.sleep(0.01)
    assert got == []  # group 1 waits while group 0 is in flight
    b.give_back(first[0])
    b.give_back(first[1])
    gevent.sleep(0.01)
    assert got == []
    b.give_back(first[2])
    gevent.joinall(waiters, timeout=1)
    assert sorted(t.request_index for t in got) == [3, 4, 5]


def test_stop_while_waiting_for_a_group_issues_nothing() -> None:
    b = RequestBudget(6, 0, [10], group_size=3)
    for _ in range(3):
        b.take()
    got: list = []
    g = gevent.spawn(lambda: got.append(b.take()))
    gevent.sleep(0.01)
    b.close()
    g.join(timeout=1)
    assert got == [None] and b.issued == 3


def test_in_flight_counts_measured_tickets_with_their_integral_and_peak() -> None:
    """Requests in flight (the live page's series): measured tickets out, not warm-ups;
    the integral over time (request·ns) and the most at once since the previous reading,
    on a clock the test sets."""
    b = RequestBudget(None, 1, [10])
    clock = [0]
    b._now_ns = lambda: clock[0]
    b._out_since_ns = 0
    warm = b.take()
    assert b.in_flight == 0  # a warm-up is not measured
    b.give_back(warm)
    first, second = b.take(), b.take()  # t = 0: two out
    clock[0] = 10
    b.give_back(first)  # t = 10: one
    clock[0] = 30
    got = b.read_in_flight()
    assert (got.t_ns, got.now, got.area_ns, got.peak) == (30, 1, 2 * 10 + 1 * 20, 2)
    clock[0] = 40
    third = b.take()  # t = 40: two again
    clock[0] = 50
    got = b.read_in_flight()
    assert (got.now, got.area_ns, got.peak) == (2, 40 + 1 * 10 + 2 * 10, 2)
    b.give_back(second)
    b.give_back(third)  # t = 50: none
    clock[0] = 60
    got = b.read_in_flight()  # the peak since the last reading: the 2 still out at t = 50
    assert (got.now, got.area_ns, got.peak) == (0, 70, 2)
    clock[0] = 70
    assert b.read_in_flight().peak == 0 and b.read_in_flight().area_ns == 70


def test_a_budget_of_conversations_counts_starts_and_ends_when_the_last_is_over() -> None:
    """Two conversations: `take` starts them (none after the second), follow-ups go on, and
    the budget is spent once both are over and every ticket is back."""
    exhausted: list[int] = []
    b = RequestBudget(None, 0, [10], on_exhausted=lambda: exhausted.append(1),
                      conversations=2)
    a, c = b.take(), b.take()  # two starts
    assert b.take() is None  # no third conversation
    a2 = b.take_followup()
    assert [t.request_index for t in (a, c, a2)] == [0, 1, 2]
    b.give_back(a, conversation_over=False)
    b.give_back(c, conversation_over=True)  # the second conversation ends (say, it failed)
    assert exhausted == []
    a3 = b.take_followup()
    b.give_back(a2, conversation_over=False)
    assert exhausted == [] and a3 is not None
    b.give_back(a3, conversation_over=True)
    assert exhausted == [1] and b.take_followup() is None


def test_a_conversation_dropped_between_turns_counts_over() -> None:
    """A user stopped in its think time gives no ticket back: `conversation_dropped` counts
    its conversation over, and the budget ends once the others are."""
    exhausted: list[int] = []
    b = RequestBudget(None, 0, [10], on_exhausted=lambda: exhausted.append(1),
                      conversations=2)
    a, c = b.take(), b.take()
    b.give_back(a, conversation_over=False)  # a's user thinks ... and is stopped
    b.give_back(c, conversation_over=True)
    assert exhausted == []
    b.conversation_dropped()
    assert exhausted == [1]
    RequestBudget(3, 0, [10]).conversation_dropped()  # a budget of requests: nothing to do
