"""events: anvil's hooks are Locust EventHooks, one per annotated moment, fired to every
listener with the arguments given.

Why: a user's locustfile listens here the way it listens to Locust's own events; a hook
left out of `__init__` would raise AttributeError only when the first stream arrives.
"""

from __future__ import annotations

from locust.event import EventHook

from anvil_metrics.events import AnvilEvents, anvil_events

NAMES = ("first_output", "first_content", "stream_end", "request_record", "job_end",
         "run_finished")


def test_every_declared_moment_is_its_own_hook() -> None:
    hooks = [getattr(anvil_events, n) for n in NAMES]
    assert all(isinstance(h, EventHook) for h in hooks)
    assert len({id(h) for h in hooks}) == len(NAMES)
    assert sorted(AnvilEvents.__annotations__) == sorted(NAMES)


def test_a_listener_hears_the_arguments_it_was_fired_with() -> None:
    events = AnvilEvents()  # a fresh set: the module's own stays untouched
    heard: list[dict] = []
    events.first_content.add_listener(lambda **kw: heard.append(kw))
    events.first_content.fire(request_index=4, t_ns=20, start_ns=10, warmup=False)
    events.first_output.fire(request_index=5, t_ns=1, start_ns=0, warmup=False)
    assert heard == [{"request_index": 4, "t_ns": 20, "start_ns": 10, "warmup": False}]


def test_two_sets_of_events_share_no_hook() -> None:
    assert AnvilEvents().stream_end is not AnvilEvents().stream_end
