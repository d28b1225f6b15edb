"""runclock: the measured window's marks, a sweep's steps written and the users changed, a
changing user count's steps, the run ended when its duration is over, and a stopped clock
that writes nothing more.

Why: a window or step line a few milliseconds off moves requests between steps in
`benchmark.json`; a clock that outlives its run writes into a closed file.
"""

from __future__ import annotations

from typing import Any

import gevent

from anvil_metrics.live import runclock
from anvil_metrics.live.runclock import Controls, RunClock, window_line
from anvil_metrics.load.scenario import Scenario

S = 10**9


class Budget:
    """What the clock asks of a request budget; warm (and its users ready) from the
    start."""

    def __init__(self) -> None:
        self.closed = 0
        self.replans: list[Any] = []
        self.waited_ready = 0

    def wait_warm(self) -> None:
        pass

    def wait_ready(self) -> None:
        self.waited_ready += 1

    def close(self) -> None:
        self.closed += 1

    def replan(self, schedule: Any, t_ns: int) -> None:
        self.replans.append((schedule, t_ns))


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write(self, obj: dict[str, Any]) -> None:
        self.lines.append(obj)


def _sc(**kw: Any) -> Scenario:
    return Scenario(measurement_protocol="test", **kw)


def test_the_window_leaves_out_the_warm_up_and_the_cool_down() -> None:
    assert window_line(5 * S, 60.0, 10.0, 5.0) == {"type": "window", "from_ns": 15 * S,
                                                   "to_ns": 60 * S}
    assert window_line(7, 2.0, None, 0.5) == {"type": "window", "from_ns": 7,
                                              "to_ns": 7 + 1_500_000_000}


def test_a_sweep_of_users_writes_each_step_changes_the_users_and_ends_the_run() -> None:
    budget, out, users, ended = Budget(), Lines(), [], []
    sc = _sc(duration_s=0.02, step_users=(1, 3), step_duration_s=0.01, warmup_s=0.005)
    clock = RunClock(sc, budget, out, Controls(set_users=users.append),  # type: ignore[arg-type]
                     on_end=lambda: ended.append(True))
    clock.start()
    clock.start()  # once
    gevent.sleep(0.1)
    kinds = [line["type"] for line in out.lines]
    assert kinds == ["window", "step", "step", "step_end"]
    window, s0, s1, end = out.lines
    assert window["to_ns"] - window["from_ns"] == round(0.015 * S)
    assert [(s0["step"], s0["users"]), (s1["step"], s1["users"])] == [(0, 1), (1, 3)]
    assert s0["t_ns"] < s1["t_ns"] < end["t_ns"] and s0["rate"] is None
    assert users == [1, 3] and ended == [True] and budget.closed == 1
    assert budget.waited_ready == 1  # the duration began once the users were ready


def test_a_changing_user_count_is_steps_from_its_first_change(monkeypatch: Any) -> None:
    monkeypatch.setattr(runclock, "USERS_POLL_S", 0.001)
    counts = iter([2, 2, 5, 5, 0, 5, 7])
    now = [2]

    def users_now() -> int:
        now[0] = next(counts, now[0])
        return now[0]

    out = Lines()
    clock = RunClock(_sc(), Budget(), out, Controls(users_now=users_now))  # type: ignore[arg-type]
    clock.start()
    gevent.sleep(0.05)
    clock.stop()
    # the load before the first change is step 0; a zero count is no step
    assert [(line["step"], line["users"]) for line in out.lines] == [(0, 2), (1, 5), (2, 7)]
    assert {line["type"] for line in out.lines} == {"step"}


def test_a_shaped_runs_steps_count_from_its_start_and_stop_ends_them(monkeypatch: Any) -> None:
    monkeypatch.setattr(runclock, "USERS_POLL_S", 0.001)
    now = [4]
    out = Lines()
    clock = RunClock(_sc(), Budget(), out,  # type: ignore[arg-type]
                     Controls(users_now=lambda: now[0], shaped=True))
    clock.start()
    gevent.sleep(0.01)
    clock.stop()
    gevent.sleep(0.01)
    now[0] = 9  # after the stop: not a step
    gevent.sleep(0.01)
    assert [(line["step"], line["users"]) for line in out.lines] == [(0, 4)]


def test_without_a_duration_or_a_user_count_there_is_nothing_to_time() -> None:
    out, ended = Lines(), []
    clock = RunClock(_sc(), Budget(), out, on_end=lambda: ended.append(True))  # type: ignore[arg-type]
    clock.start()
    gevent.sleep(0.01)
    clock.stop()
    assert out.lines == [] and ended == []
