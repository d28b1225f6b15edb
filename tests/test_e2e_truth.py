"""End to end against known truth: simulator (real process) → `anvil run` (real Locust
process) → requests.jsonl → benchmark.json, every figure checked against the timing the
simulator was told to produce.

Plan: prefill 300 ms, then 20 reasoning + 50 content tokens 8 ms apart. So, per request:
first output at 300 ms, first content at 300 + 20·8 = 460 ms, end at 300 + 69·8 = 852 ms;
generation 552 ms over 69 gaps → decode 125 tok/s, mean ITL 8 ms.
"""

from __future__ import annotations

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario

from anvil_metrics.benchmark import verify_benchmark

pytestmark = pytest.mark.e2e

PREFILL_MS, N_REASON, N_CONTENT, STEP_MS = 300.0, 20, 50, 8.0
TTFO = PREFILL_MS
TTFT = PREFILL_MS + N_REASON * STEP_MS
E2E = PREFILL_MS + (N_REASON + N_CONTENT - 1) * STEP_MS
DECODE = (N_REASON + N_CONTENT - 1) / ((E2E - TTFO) / 1000)

SCENARIO = """
measurement_protocol = "truth"
concurrency = {users}
requests = {requests}
max_tokens = 256
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
1024 = 1
[request]
include_usage = {usage}
"""

SIM_ARGS = ("--prefill-ms", str(PREFILL_MS), "--reasoning-tokens", str(N_REASON),
            "--content-tokens", str(N_CONTENT), "--interval-ms", str(STEP_MS),
            "--max-context", "8192")


def _run(simulator, tmp_path, users: int, requests: int, usage: bool = True,
         reasoning_field: str = "reasoning_content") -> dict:
    sim = simulator(*SIM_ARGS, "--reasoning-field", reasoning_field)
    sc = write_scenario(tmp_path / "truth.toml", SCENARIO.format(
        users=users, requests=requests, usage=str(usage).lower()))
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return load_json(result_path(proc))


@pytest.mark.parametrize("users,requests", [(1, 4), (16, 32)])
def test_timings_match_truth(simulator, tmp_path, users: int, requests: int) -> None:
    doc = _run(simulator, tmp_path, users, requests,
               reasoning_field="reasoning" if users == 1 else "reasoning_content")
    assert doc["requests"] == requests and doc["completed"] == requests
    assert doc["failed"] == 0 and doc["concurrency"] == users
    rows = doc["request_timings"]
    assert len(rows) == requests
    for r in rows:
        assert abs(r["time_to_first_output_ms"] - TTFO) <= 2.0, r
        assert abs(r["ttft_ms"] - TTFT) <= 2.0, r
        assert abs(r["e2e_ms"] - E2E) <= 2.0, r
        assert abs(r["decode_tok_s"] - DECODE) / DECODE <= 0.01, r
        assert abs(r["mean_inter_token_latency_ms"] - STEP_MS) / STEP_MS <= 0.01, r
        assert r["output_token_source"] == "usage"
        assert r["output_tokens"] == N_REASON + N_CONTENT
        assert (r["reasoning_chunks"], r["content_chunks"]) == (N_REASON, N_CONTENT)
        assert r["prompt_tokens"] > 0
    assert verify_benchmark(doc) == []


def test_without_usage_counts_chunks(simulator, tmp_path) -> None:
    doc = _run(simulator, tmp_path, 2, 4, usage=False)
    for r in doc["request_timings"]:
        assert r["output_token_source"] == "chunks"
        assert r["output_tokens"] == N_REASON + N_CONTENT
        assert r["prompt_tokens"] is None
        assert abs(r["ttft_ms"] - TTFT) <= 2.0
    assert doc["metrics"]["output_token_sources"] == {"chunks": 4}
    assert doc["metrics"]["prompt_token_samples"] == 0
    assert verify_benchmark(doc) == []


def test_raw_chunk_arrivals_match_the_plan(simulator, tmp_path) -> None:
    doc = _run(simulator, tmp_path, 1, 2)
    run_dir = result_path_dir(doc, tmp_path)
    reqs = [x for x in raw_lines(run_dir) if x["type"] == "request"]
    assert len(reqs) == 2
    for rec in reqs:
        deltas = rec["chunk_deltas_ns"]
        assert len(deltas) == N_REASON + N_CONTENT
        assert rec["chunk_channels"] == "r" * N_REASON + "c" * N_CONTENT
        gaps_ms = sorted(d / 1e6 for d in deltas[1:])
        assert abs(gaps_ms[len(gaps_ms) // 2] - STEP_MS) <= 0.5  # per-chunk ITL p50


def result_path_dir(doc: dict, tmp_path):
    return tmp_path / "res" / doc["run_id"]
