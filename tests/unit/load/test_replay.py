"""replay: a trace as an open loop — its due offsets are its timestamps over the speed, the
rate it offers, what the header records, and the flags a replay refuses or reads as limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuild import mooncake_trace

from anvil_metrics.errors import UsageError
from anvil_metrics.load.options import run_options
from anvil_metrics.load.replay import TraceSchedule
from anvil_metrics.load.scenario import Scenario, scenario_from_dict, scenario_to_dict
from anvil_metrics.load.trace import TracePlan, TraceRequest, expected_reuse


def reqs(*ms: float) -> list[TraceRequest]:
    return [TraceRequest(i + 1, t, 100, 5) for i, t in enumerate(ms)]


def test_offsets_are_the_timestamps_over_the_speed_in_ns() -> None:
    s = TraceSchedule(reqs(1000.0, 1000.4, 1003.0, 2000.0), 4.0)
    assert [s.offset_ns(k) for k in range(4)] == [0, 100_000, 750_000, 250_000_000]
    assert TraceSchedule(reqs(5.0, 6.0), 1.0).offset_ns(1) == 1_000_000
    with pytest.raises(ValueError, match="speed"):
        TraceSchedule(reqs(0.0), 0.0)


def test_the_plan_offers_the_traces_mean_rate_and_records_its_reuse(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    cached, total = mooncake_trace(path, 200, rate_rps=20.0)
    plan = TracePlan(str(path), speed=2.0, limit=150)
    got = plan.read()
    assert len(got) == 150
    span_s = (got[-1].timestamp_ms - got[0].timestamp_ms) / 1000 / 2.0
    assert plan.arrivals(got) == {"arrival": "trace", "rate_rps": 149 / span_s,
                                  "burstiness": None, "seed": None}
    params = plan.to_params(got)
    assert params["file"] == "m.jsonl" and params["requests"] == 150
    c, t = expected_reuse(got)
    assert params["expected_reuse"] == c / t
    assert TracePlan(str(path)).to_params(TracePlan(str(path)).read())["expected_reuse"] == (
        cached / total)


def replay(path: Path, scenario: str = "", **flags: str) -> Scenario:
    """The scenario `anvil run SCENARIO --trace PATH --FLAGS` replays (read and checked)."""
    return run_options({"scenario": scenario, "trace": str(path), **flags},
                       host="http://h", users=1, api_key=None).scenario


def test_a_replay_is_the_traces_count_and_requests_is_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 50)
    got = replay(path, "scenarios/smoke.toml")  # its 24 requests, 2 warm-ups: the trace's
    assert (got.requests, got.warmup_requests, got.trace.limit) == (50, 0, None)
    assert replay(path, requests="20", trace_limit="30").requests == 20
    assert replay(path, trace_limit="7").trace.limit == 7
    # a file's [trace] is the flags' (the wire's document is one too)
    doc = {"measurement_protocol": "p", "trace": {"path": str(path), "speed": 2,
                                                  "window": "0.5:"}}
    sc = scenario_from_dict(doc)
    assert sc.trace == TracePlan(str(path), speed=2.0, window_s=(0.5, None))
    assert scenario_from_dict(scenario_to_dict(sc)) == sc


@pytest.mark.parametrize("flags,named", [
    ({"rate": "2"}, "--rate '2': rate = 2.0 is not allowed; use none with a trace"),
    ({"steps": "1,2", "step_duration": "2s"}, "--steps '1,2': steps = [1, 2] is not allowed"),
    ({"duration": "60"}, "--duration '60': duration = 60.0 is not allowed; use none with a"),
    ({"endpoint": "completions"}, "--trace "),
])  # fmt: skip
def test_flags_that_would_make_their_own_load_are_refused(tmp_path: Path, flags: dict,
                                                          named: str) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 5)
    with pytest.raises(UsageError) as e:
        replay(path, **flags)
    assert str(e.value).startswith(named) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(UsageError, match="makes the load itself"):
        replay(path, "scenarios/conversation.toml")


def test_agent_job_starts_are_their_recorded_times_over_the_speed(tmp_path: Path) -> None:
    """`JobSchedule`: start k due (start_k − start_0) / speed after the origin; past the
    trace's last job, round again one span and one mean gap later. A trace without starts
    (Weka) asked for them is refused in one line naming the flag, the job and the way out."""
    from dataclasses import replace

    from agentgen import agent_jobs, write_agent_jsonl, write_weka

    from anvil_metrics.load.replay import JobSchedule

    jobs = [replace(j, start_s=s) for j, s in zip(agent_jobs(3, seed=4), (100.0, 100.5, 102.0),
                                                   strict=True)]
    s = JobSchedule(jobs, 2.0)
    assert [s.offset_ns(k) for k in range(5)] == [0, 250_000_000, 1_000_000_000,
                                                  1_500_000_000, 1_750_000_000]
    assert s.arrivals()["rate_rps"] == pytest.approx(2.0) and s.arrivals()["arrival"] == "trace"
    with pytest.raises(ValueError, match="recorded start"):
        JobSchedule(agent_jobs(2, seed=4), 1.0)
    timed = write_agent_jsonl(tmp_path / "t.jsonl", jobs)
    sc = run_options({"trace": str(timed), "trace_speed": "2"}, host="http://h", users=None,
                     api_key=None).scenario
    assert sc.trace is not None and sc.trace.job_times
    weka = write_weka(tmp_path / "w.jsonl", jobs)
    with pytest.raises(UsageError, match=r"^--trace-speed 2: job 'j0' of .*w.jsonl records "
                       r"no start time \(a Weka trace never does.*--agents N or --rate R$"):
        run_options({"trace": str(weka), "trace_speed": "2"}, host="http://h", users=None,
                    api_key=None)


def test_an_open_loops_schedule_is_the_traces_or_the_rates_else_none(tmp_path: Path) -> None:
    from anvil_metrics.load.arrivals import Schedule
    from anvil_metrics.load.replay import TraceSchedule, open_loop_schedule

    closed = scenario_from_dict({"measurement_protocol": "p"})
    assert open_loop_schedule(closed, None) is None
    rate = scenario_from_dict({"measurement_protocol": "p", "rate": 2, "duration": 10})
    assert isinstance(open_loop_schedule(rate, None), Schedule)
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 5)
    sc = scenario_from_dict({"measurement_protocol": "p", "trace": {"path": str(path)}})
    got = open_loop_schedule(sc, sc.trace.read())
    assert isinstance(got, TraceSchedule)
