"""session: a run from `RunSession.start` to `finish` against the simulator on 127.0.0.1 —
the header written before the first request, every ticket's record in the raw file, and
`benchmark.json` counting them; a plan the server cannot hold and a model it does not
serve refused before any load.

Why: everything a run measures passes through this session; a header missing the model,
a record lost between the event and the file, or a refusal that comes after the load has
begun would each cost the user a run. (The users are stood in for by the same calls a
`ChatUser` makes: take, stream, fire, give back.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from gevent.event import Event
from simfork import start_simulator

from anvil_metrics.errors import UsageError
from anvil_metrics.events import anvil_events
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.runclock import Controls
from anvil_metrics.live.session import RunOptions, RunSession
from anvil_metrics.load.body import BodyBuilder
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.scenariofields import Timeouts
from anvil_metrics.prep.prompts import NO_CALIBRATION, PromptFactory
from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver

SIM = ("--prefill-ms", "1", "--reasoning-tokens", "1", "--content-tokens", "2",
       "--interval-ms", "1", "--max-context", "2048")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """One simulator (SIM) for every test here: none reads its state, and each keeps its
    calibration cache in its own results folder (a simulator ~0.4 CPU-s and ~0.5 s to start)."""
    with start_simulator(list(SIM)) as started:
        yield started


def _opts(sim: SimProcess, tmp_path: Path, **scenario: object) -> RunOptions:
    sc = Scenario(measurement_protocol="test", requests=3, warmup_requests=1,
                  context_tokens=128, max_context_tokens=128, max_tokens=8,
                  context_distribution={128: 1}, **scenario)
    return RunOptions(scenario=sc, host=sim.url, users=1, results_dir=str(tmp_path),
                      run_dir=str(tmp_path / "run"), server_metrics=False)


def _send_all(session: RunSession) -> int:
    """What the users do: take a ticket, stream its body, fire its record, give it back."""
    client = ChatClient(session.endpoint, session.api_key)
    sent = 0
    try:
        while (ticket := session.budget.take()) is not None:
            obs = StreamObserver(ticket.request_index, 0, warmup=ticket.warmup,
                                 planned_context_tokens=ticket.planned_context_tokens,
                                 worker=session.worker)
            client.stream_chat(session.bodies.build_parts(
                ticket.planned_context_tokens, ticket.request_index, ticket.warmup), obs)
            anvil_events.request_record.fire(record=obs.finish())
            session.budget.give_back(ticket)
            sent += 1
    finally:
        client.close()
    return sent


def test_a_run_from_start_to_benchmark(sim: SimProcess, tmp_path: Path) -> None:
    ended: list[bool] = []
    session = RunSession.start(_opts(sim, tmp_path), lambda: ended.append(True))
    header = orjson.loads((tmp_path / "run" / "requests.jsonl").read_bytes().splitlines()[0])
    assert header["type"] == "run" and header["params"]["model"] == "sim-model"
    assert header["params"]["base_url"] == sim.url + "/v1"
    assert header["params"]["context_distribution"] == {"128": 3}
    session.begin_load()
    assert _send_all(session) == 4  # one warm-up and three measured
    assert ended == [True]  # the budget said the load is over
    path = session.finish()
    assert path == tmp_path / "run" / "benchmark.json" and session.finished
    doc = orjson.loads(path.read_bytes())
    assert (doc["requests"], doc["completed"], doc["warmup_requests"]) == (3, 3, 1)
    assert doc["run_id"] == session.run_id and doc["partial"] is False
    assert [r["output_tokens"] for r in doc["request_timings"]] == [3, 3, 3]
    assert session.finish() == path  # idempotent
    assert session.live.completed == 3  # the running figures took every measured record


def test_without_a_web_ui_the_records_reach_the_file_but_not_the_running_figures(
        sim: SimProcess, tmp_path: Path) -> None:
    """`RunOptions.live_figures` off (a headless run): the records are written and counted
    in `benchmark.json` as ever, the running figures derive none of them, and the table
    still ends with the file's exact figures."""
    opts = replace(_opts(sim, tmp_path), live_figures=False)
    session = RunSession.start(opts, lambda: None)
    session.begin_load()
    assert _send_all(session) == 4
    assert session.live.completed == 0 and not session.live._pending
    doc = orjson.loads(session.finish().read_bytes())
    assert doc["completed"] == 3
    ttft = next(m for m in session.live.snapshot()["metrics"] if m["field"] == "ttft_ms")
    assert ttft["count"] == 3 and ttft["p50"] is not None, ttft


def test_a_plan_past_the_servers_context_is_refused_before_any_load(
        sim: SimProcess, tmp_path: Path) -> None:
    big = Scenario(measurement_protocol="test", requests=1, context_tokens=2040,
                   max_context_tokens=2040, max_tokens=16, context_distribution={2040: 1})
    with pytest.raises(UsageError, match="context limit is 2048 tokens"):
        RunSession.start(replace(_opts(sim, tmp_path), scenario=big), lambda: None)
    with pytest.raises(UsageError, match="--model 'other' is not served by"):
        RunSession.start(_opts(sim, tmp_path, meta={"model": "other"}), lambda: None)
    assert not (tmp_path / "run").exists()



def test_a_duration_run_is_ended_by_its_clock_with_the_controls_it_was_given(
        sim: SimProcess, tmp_path: Path) -> None:
    opts = _opts(sim, tmp_path)
    opts = replace(opts, scenario=replace(opts.scenario, requests=None, warmup_requests=0,
                                          duration_s=0.2, step_users=(1, 2),
                                          step_duration_s=0.1))
    ended = Event()
    asked: list[int] = []
    controls = Controls(set_users=asked.append)
    session = RunSession.start(opts, ended.set, controls)
    assert session.clock.controls is controls and asked == []  # nothing before the load
    session.begin_load()
    assert _send_all(session) > 0  # until the duration closes the budget
    # the clock then freezes the load's figures and ends the run (it may yield meanwhile)
    assert ended.wait(timeout=10) and asked == [1, 2]  # the sweep's steps, then the end
    assert session.client_health()["load_s"] > 0  # frozen when the load ended
    lines = [orjson.loads(b) for b in (tmp_path / "run" / "requests.jsonl").read_bytes()
             .splitlines()]
    assert [(x["step"], x["users"]) for x in lines if x["type"] == "step"] == [(0, 1), (1, 2)]
    assert session.finish() is not None


@pytest.mark.parametrize("stuck_after_s", [30.0, 0.0])
def test_the_sessions_stuck_report_reads_its_requests_in_flight(tmp_path: Path,
                                                               stuck_after_s: float) -> None:
    """`stuck_report()` (what the live display reads): the requests in its set, stuck or
    not by the scenario's threshold; None when the threshold is 0 (off)."""
    sc = Scenario(measurement_protocol="test", requests=2, context_tokens=128,
                  max_context_tokens=128, context_distribution={128: 2},
                  timeouts=Timeouts(stuck_after_s=stuck_after_s))
    bodies = BodyBuilder(sc, "m", PromptFactory(NO_CALIBRATION, 0, "n", None, None))
    opts = RunOptions(scenario=sc, host="http://127.0.0.1:1", users=1)
    session = RunSession(opts, Endpoint.parse(opts.host), "m", NO_CALIBRATION, "run-1",
                         tmp_path, None, bodies, RequestBudget(2, 0, [128]), {})
    session.recorder.stop()
    old, new = StreamObserver(0, 0), StreamObserver(1, 0)
    old.begin(time.perf_counter_ns() - 60 * 1_000_000_000)  # sent a minute ago
    new.begin(time.perf_counter_ns())
    session.in_flight.update((old, new))
    report = session.stuck_report()
    if stuck_after_s == 0:
        assert report is None and not session.stuck.on
        return
    assert report is not None
    assert (report.threshold_s, report.in_flight_requests, report.waiting_first_byte_requests,
            report.idle_mid_stream_requests) == (30.0, 2, 1, 0)
    assert report.oldest_s is not None and report.oldest_s >= 60.0
def test_the_set_up_says_its_phases_and_a_session_ended_before_its_load_is_kept(
        sim: SimProcess, tmp_path: Path) -> None:
    """`start` tells its `SetUp` each phase and the run folder (a signal's error.json names
    them: `runerror`); a session a signal stopped as its set-up ended is finished without
    any load (the plugin's path): a benchmark.json of nothing measured, partial."""
    from anvil_metrics.live.runerror import SetUp

    phases: list[str] = []

    class Seen(SetUp):
        def enter(self, phase: str) -> None:
            phases.append(phase)
            super().enter(phase)

    setup = Seen(str(tmp_path))
    session = RunSession.start(_opts(sim, tmp_path), lambda: None, setup=setup)
    assert phases == ["finding the model", "asking how the server counts tokens",
                      "sizing the prompts", "building the request bodies",
                      "asking the server what it is", "writing the run folder"]
    assert setup.run_dir == tmp_path / "run" and setup.stopped is None
    session.mark_end("signal", "SIGTERM: the process was asked to stop")
    doc = orjson.loads(session.finish().read_bytes())
    assert (doc["requests"], doc["partial"], doc["ended_by"]) == (0, True, "signal")
