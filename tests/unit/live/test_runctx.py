"""runctx: the run in progress lives on Locust's Environment; the latest run outlives it.

Why: users read the run from their environment and the web UI shows the latest one after
it ends; were `set_run(None)` to clear the latest too, the page would go blank the moment
a run finished.
"""

from __future__ import annotations

from types import SimpleNamespace

from anvil_metrics.live.runctx import (
    LATEST_ATTR,
    RUN_ATTR,
    RunContext,
    TicketSource,
    latest_run,
    run_in_progress,
    set_run,
)


def test_no_run_before_one_starts() -> None:
    env = SimpleNamespace()
    assert run_in_progress(env) is None and latest_run(env) is None


def test_a_run_is_in_progress_until_it_ends_and_stays_the_latest() -> None:
    env = SimpleNamespace()
    first, second = object(), object()
    set_run(env, first)
    assert run_in_progress(env) is first and latest_run(env) is first
    set_run(env, None)
    assert run_in_progress(env) is None and latest_run(env) is first
    set_run(env, second)
    assert getattr(env, RUN_ATTR) is second and getattr(env, LATEST_ATTR) is second


def test_the_protocols_say_what_a_user_may_read() -> None:
    class Budget:
        followup_lead_ns = 0

        def take(self) -> None:
            return None

        def take_followup(self) -> None:
            return None

        def give_back(self, ticket: object, conversation_over: bool = True) -> None:
            pass

        def conversation_dropped(self) -> None:
            pass

        def user_ready(self) -> None:
            pass

    run = SimpleNamespace(endpoint=None, replicas=(), balancer=None, api_key=None, scenario=None,
                          budget=Budget(),
                          bodies=None, worker="h:1", conversations=None, send_stats=None,
                          in_flight=set(), prefill_gate=None)
    assert isinstance(Budget(), TicketSource) and isinstance(run, RunContext)
    assert not isinstance(SimpleNamespace(endpoint=None), RunContext)
    assert not isinstance(object(), TicketSource)
