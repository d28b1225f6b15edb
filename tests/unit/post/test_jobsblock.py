"""`post/jobsblock`: the `jobs` block's typed definition decodes a whole block and refuses
a field out of its bounds or its words; the block built by hand from a raw run (three jobs:
completed, cut by a refusal for length, cut by the run's end), verify naming a changed
figure, latency from due in an open loop, a sampled start's own plan, and the verdict at
exactly 1 % and just over."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rawbuild import HEADER, completed, failed, rows_of, write_raw

from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.jobsblock import INVALID_OVERFLOW_SHARE, Jobs, build_jobs, summary_lines
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.records import Failure

BLOCK = {"start_at": "first", "started": 3, "completed": 2, "cut": 1,
         "latency_p50_ms": 900.0, "latency_p95_ms": 1200.0, "latency_p99_ms": 1200.0,
         "jobs_per_hour": 720.0, "gpus": None, "jobs_per_hour_per_gpu": None,
         "model_share": 0.5, "tool_share": 0.3, "join_share": 0.15, "other_share": 0.05,
         "requests_per_job": 6.0, "prompt_tokens_per_job": 30000.0,
         "output_tokens_per_job": 600.0, "expected_reuse": 0.8, "reported_reuse": 0.79,
         "expected_reuse_p50": 0.8, "reported_reuse_p50": None, "requests": 14,
         "context_overflows": 0, "overflow_share": 0.0, "validity": "valid",
         "plan": [[0, 6, 30000, 24000]] * 3}


def test_a_whole_block_decodes() -> None:
    jobs = msgspec.convert(BLOCK, Jobs)
    assert jobs.completed == 2 and jobs.reported_reuse_p50 is None
    assert INVALID_OVERFLOW_SHARE == 0.01


@pytest.mark.parametrize(("field", "bad"), [("validity", "maybe"), ("start_at", "middle"),
                                            ("cut", -1), ("tool_share", -0.1)])
def test_a_bad_field_is_refused(field: str, bad: object) -> None:
    with pytest.raises(msgspec.ValidationError, match=field):
        msgspec.convert({**BLOCK, field: bad}, Jobs)


AGENT = {"file": "a.jsonl", "format": "agent-jsonl", "job_ids": ["a"], "jobs": 3,
         "job_requests": [3], "job_tokens": [[400, 128]], "start_at": "first",
         "start_seed": 0}
MS = 1_000_000
VLLM = ("This model's maximum context length is 4096 tokens. However, you requested 5000 "
        "tokens (4990 in the messages, 10 in the completion).")


def _turn(job: int, session: int, **kw: Any) -> dict[str, Any]:
    return {"job": job, "session": session, "parent_session": None if session == 0 else 0,
            "turn": 1, "depth": min(session, 1), "tool_wait_ns": 0, "join_wait_ns": 0, **kw}


def _doc(tmp_path: Path, agent: dict[str, Any] = AGENT, lag_ns: int | None = None,
         **params: Any) -> dict[str, Any]:
    """Job 0: root, child, root (2 ms tool wait, 1 ms join) all answered; job 1: two
    answered, a third refused for its length; job 2: one of its three sent. Request i
    starts at i × 10 ms after the anchor and takes 5 ms."""
    first = {} if lag_ns is None else {"start_delay_ns": lag_ns}
    recs = [completed(0, extra=_turn(0, 0, **first)), completed(1, extra=_turn(0, 1)),
            completed(2, extra=_turn(0, 0, tool_wait_ns=2 * MS, join_wait_ns=MS),
                      usage={"prompt_tokens": 130, "completion_tokens": 6,
                             "prompt_tokens_details": {"cached_tokens": 65}}),
            completed(3, extra=_turn(1, 0)), completed(4, extra=_turn(1, 0)),
            failed(5, extra=_turn(1, 0), http_status=400,
                   failure=Failure(kind="http_error", message=VLLM, http_status=400,
                                   phase="headers")),
            completed(6, extra=_turn(2, 0))]
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, "params": {"concurrency": 2, "agent": agent, **params}}, recs,
              {"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def test_the_block_by_hand(tmp_path: Path) -> None:
    doc = _doc(tmp_path, gpus=4)
    b = doc["jobs"]
    assert tuple(b) == Jobs.__struct_fields__
    assert (b["started"], b["completed"], b["cut"], b["requests"]) == (3, 1, 2, 7)
    assert b["latency_p50_ms"] == b["latency_p99_ms"] == 25.0  # 0 ms to 20 + 5 ms
    # the measured span: request 0's start to request 6's end, 65 ms
    assert b["jobs_per_hour"] == 1 / (65 / 3_600_000)
    assert b["jobs_per_hour_per_gpu"] == b["jobs_per_hour"] / 4 and b["gpus"] == 4
    # the root's two rows: 10 ms in the model, 2 ms of tools, 1 ms of joins, of 25 ms
    assert (b["model_share"], b["tool_share"], b["join_share"]) == (0.4, 0.08, 0.04)
    assert abs(b["other_share"] - 0.48) < 1e-12
    assert (b["requests_per_job"], b["prompt_tokens_per_job"],
            b["output_tokens_per_job"]) == (3.0, 390.0, 18.0)
    assert (b["expected_reuse"], b["expected_reuse_p50"]) == (128 / 400, 128 / 400)
    assert b["reported_reuse"] == b["reported_reuse_p50"] == 65 / 130  # the row reporting
    assert (b["context_overflows"], b["validity"]) == (1, "invalid")
    assert b["overflow_share"] == 1 / 7 and b["plan"] == [[0, 3, 400, 128]] * 3
    assert verify_benchmark(doc) == []
    lines = summary_lines(doc)
    assert lines[-1].startswith("INVALID RUN: 1 of 7 requests (14.3 %) overflowed")
    assert "1 completed, 2 cut of 3 started" in lines[0]


def test_verify_names_a_changed_figure(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    for key, value in (("latency_p50_ms", 24.0), ("completed", 2), ("validity", "valid"),
                       ("join_share", 0.05)):
        bad = copy.deepcopy(doc)
        bad["jobs"][key] = value
        problems = verify_benchmark(bad)
        assert any(p.startswith(f"jobs.{key}: file has") for p in problems), problems


def test_an_open_loop_job_is_timed_from_its_due(tmp_path: Path) -> None:
    load = {"mode": "budget", "arrivals": ArrivalPlan(10.0, "poisson").to_dict(),
            "duration_s": None}
    doc = _doc(tmp_path, lag_ns=3 * MS, load=load)
    assert doc["load"]["arrival"] == "poisson"
    assert doc["jobs"]["latency_p50_ms"] == 28.0  # due 3 ms before its start
    assert verify_benchmark(doc) == []
    closed = _doc(tmp_path, lag_ns=3 * MS)  # a closed loop: from its start
    assert closed["jobs"]["latency_p50_ms"] == 25.0


def test_a_sampled_start_counts_its_own_plan(tmp_path: Path) -> None:
    # job 0 started at root turn 2 with 3 requests left, job 1 at turn 1 with 2, job 2 at 0
    starts = [[2, 3, 300, 200], [1, 2, 250, 100], [0, 3, 400, 128]]
    doc = _doc(tmp_path, {**AGENT, "start_at": "sampled", "starts": starts})
    b = doc["jobs"]
    assert (b["start_at"], b["completed"], b["cut"]) == ("sampled", 1, 2)  # job 1 failed
    assert b["expected_reuse"] == 200 / 300 and b["plan"] == starts
    two = [[2, 3, 300, 200], [1, 3, 250, 100], [0, 1, 400, 128]]
    b = _doc(tmp_path, {**AGENT, "start_at": "sampled", "starts": two})["jobs"]
    assert b["completed"] == 2 and b["expected_reuse"] == (200 + 128) / (300 + 400)


@pytest.mark.parametrize(("requests", "verdict"), [(100, "valid"), (99, "invalid")])
def test_the_verdict_is_invalid_only_over_one_percent(requests: int, verdict: str) -> None:
    fails = [{"request_index": i, "kind": "http_error", "http_status": 400, "phase": "headers",
              "message": VLLM if i == 0 else "busy", "job_id": i} for i in range(requests)]
    b = build_jobs(start_at="first", plan=[[0, 1, 10, 0]] * requests, rows=rows_of([]),
                   failures=fails, wall_clock_ms=None, gpus=None, open_loop=False)
    assert (b["context_overflows"], b["overflow_share"]) == (1, 1 / requests)
    assert b["validity"] == verdict and b["jobs_per_hour"] is None
    assert b["completed"] == 0 and b["latency_p50_ms"] is None and b["model_share"] is None
