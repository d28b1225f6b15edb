"""`runs/stopsignals`: what a Ctrl-C or SIGTERM does to the run in progress, with a stand-in
session and runner (the real processes: tests/e2e/test_stop_signals.py)."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from anvil_metrics.errors import ExitCode
from anvil_metrics.live.runctx import set_run
from anvil_metrics.live.session import RunSession
from anvil_metrics.runs import stopsignals


class FakeSession(RunSession):
    """Only what the handlers read: `finished`, `ended_by`, `mark_end`."""

    def __init__(self) -> None:  # no run: nothing of RunSession's set-up
        self.finished = False
        self.ended_by: str | None = None
        self.end_reason: str | None = None


def environment(runner: Any = None) -> Any:
    return SimpleNamespace(runner=runner, process_exit_code=None, web_ui=None,
                           parsed_options=SimpleNamespace(stop_timeout=30))


def test_sigterm_marks_a_run_in_progress_once_and_sets_143() -> None:
    env, session = environment(), FakeSession()
    set_run(env, session)
    stopsignals.mark_terminated(env)
    assert (session.ended_by, env.process_exit_code) == ("signal", ExitCode.SIGTERM)
    assert session.end_reason == stopsignals.SIGTERM_REASON
    env.process_exit_code = 3
    stopsignals.mark_terminated(env)  # a second time, or after another end: nothing changes
    assert env.process_exit_code == 3


def test_sigterm_leaves_an_ended_run_and_no_run_alone() -> None:
    env, session = environment(), FakeSession()
    session.mark_end("requests")
    set_run(env, session)
    stopsignals.mark_terminated(env)
    assert (session.ended_by, env.process_exit_code) == ("requests", None)
    empty = environment()
    stopsignals.mark_terminated(empty)
    assert empty.process_exit_code is None


def test_locusts_sigterm_handler_runs_after_the_mark(monkeypatch) -> None:
    """Wrapped `gevent.signal_handler`: a SIGTERM handler installed through it marks the run
    first; other signals' handlers are installed as they are; wrapping twice wraps once."""
    installed: list[tuple[int, Any]] = []
    monkeypatch.setattr(gevent, "signal_handler",
                        lambda signum, handler, *a, **k: installed.append((signum, handler)))
    stopsignals.first_mark_sigterm()
    wrapped = gevent.signal_handler
    stopsignals.first_mark_sigterm()
    assert gevent.signal_handler is wrapped
    env, session = environment(), FakeSession()
    set_run(env, session)
    monkeypatch.setattr(stopsignals, "_ENVIRONMENTS", [env])
    seen = []

    def locusts(*args: Any) -> None:
        seen.append((session.ended_by, args))

    gevent.signal_handler(signal.SIGTERM, locusts)
    gevent.signal_handler(signal.SIGUSR1, locusts)
    (_, on_term), (_, on_usr1) = installed
    assert on_usr1 is locusts
    on_term("x")
    assert seen == [("signal", ("x",))]


@pytest.mark.parametrize("worker", [False, True])
def test_ctrl_c_stops_once_then_cancels(monkeypatch, worker: bool) -> None:
    """A single process or a master: the first Ctrl-C marks the run and quits the runner,
    the second kills the users. A worker leaves its run to its master, then quits."""
    quits, kills = [], []

    class Runner:
        user_greenlets = SimpleNamespace(kill=lambda block: kills.append(block))

        def quit(self) -> None:
            quits.append(1)

    runner = Runner()
    if worker:
        monkeypatch.setattr(stopsignals, "WorkerRunner", Runner)
    monkeypatch.setattr(stopsignals.gevent, "signal_handler", lambda *a, **k: None)
    monkeypatch.setattr(stopsignals.gevent, "spawn", lambda f, *a: f(*a))
    env, session = environment(runner), FakeSession()
    set_run(env, session)
    handler = stopsignals.StopSignals(env)
    handler.on_sigint()
    handler.on_sigint()  # the same Ctrl-C, passed on by `anvil run`: nothing more
    handler.last_s -= stopsignals.SAME_CTRL_C_S  # a person's second Ctrl-C, later
    if worker:
        assert (quits, session.ended_by, env.process_exit_code) == ([], None, None)
        handler.on_sigint()
        assert quits == [1] and kills == []
        return
    assert (session.ended_by, env.process_exit_code) == ("signal", ExitCode.SIGINT)
    assert quits == [1] and kills == []
    handler.on_sigint()
    assert quits == [1] and kills == [False]


def test_a_signal_in_the_set_up_writes_error_json_and_sets_its_code(tmp_path) -> None:
    """SIGTERM while `RunSession.start` asks the server (no run in progress yet): error.json
    names the signal and the phase, the exit code is 143; marked once."""
    from anvil_metrics.live.runerror import SetUp, read_error, set_set_up

    env = environment()
    setup = SetUp(str(tmp_path), tmp_path)
    setup.enter("sizing the prompts")
    set_set_up(env, setup)
    stopsignals.mark_terminated(env)
    stopsignals.mark_terminated(env)  # Locust's `quitting` marks again: nothing changes
    assert env.process_exit_code == ExitCode.SIGTERM
    assert read_error(tmp_path) == (f"anvil: {stopsignals.SIGTERM_REASON} in the run's set-up "
                                    "(sizing the prompts), before its first request: nothing "
                                    "was measured")
    set_set_up(env, None)
    fresh = environment()
    stopsignals.mark_terminated(fresh)  # no set-up, no run: nothing
    assert fresh.process_exit_code is None
