"""replay: a trace as an open loop — its due offsets are its timestamps over the speed, the
rate it offers, what the header records, and the flags a replay refuses or reads as limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuild import mooncake_trace

from anvil_metrics.errors import UsageError
from anvil_metrics.load.replay import TraceSchedule, replay_scenario
from anvil_metrics.load.scenario import scenario_from_dict
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


def _v(path: Path, **kw: object) -> dict:
    return {"trace": str(path), "trace_format": None, "trace_speed": None, "trace_limit": None,
            "trace_block": None, "trace_model": None, "requests": None, "rate": None,
            "rates": None, "steps": None, "duration": None, **kw}


def test_a_replay_is_the_traces_count_and_requests_is_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 50)
    sc = scenario_from_dict({"measurement_protocol": "p", "warmup_requests": 3})
    got = replay_scenario(sc, _v(path))
    assert (got.requests, got.warmup_requests, got.trace.limit) == (50, 0, None)
    assert replay_scenario(sc, _v(path, requests=20, trace_limit=30)).requests == 20
    assert replay_scenario(sc, _v(path, trace_limit=7)).trace.limit == 7


@pytest.mark.parametrize("kw,named", [
    ({"rate": 2.0}, "--rate is not allowed with --trace"),
    ({"steps": (1, 2)}, "--steps is not allowed with --trace"),
    ({"duration": 60.0}, "--duration is not allowed with --trace"),
])  # fmt: skip
def test_flags_that_would_make_their_own_load_are_refused(tmp_path: Path, kw: dict,
                                                          named: str) -> None:
    path = tmp_path / "m.jsonl"
    mooncake_trace(path, 5)
    with pytest.raises(UsageError, match=named):
        replay_scenario(scenario_from_dict({"measurement_protocol": "p"}), _v(path, **kw))
    conv = scenario_from_dict({"measurement_protocol": "p", "max_tokens": 8,
                               "conversation": {"turns": 2, "turn_tokens": 20}})
    with pytest.raises(UsageError, match="make the load itself"):
        replay_scenario(conv, _v(path))
