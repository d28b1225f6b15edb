"""One test per injected fault (the simulator's `--fault`): the expected outcome, kind and
phase are recorded for the faulty request, every issued request is present exactly once,
and the run completes (requests = completed + failed)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario

from anvil_metrics.post.benchmark import verify_benchmark

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "faults"
concurrency = 1
requests = 4
max_tokens = 12
context_tokens = 2048
max_context_tokens = 2048
[context_distribution]
512 = 4
[timeouts]
first_byte_s = {first_byte}
idle_s = {idle}
"""

SIM = ("--prefill-ms", "10", "--reasoning-tokens", "2", "--content-tokens", "10",
       "--interval-ms", "2", "--max-context", "2048")


def _run(simulator, tmp_path: Path, fault: str, *, first_byte: float = 30,
         idle: float = 30, sim_args: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """A 4-request run whose request 1 (the simulator's second chat request) is faulty:
    returns the benchmark and the raw record of request 1."""
    sim = simulator(*SIM, *sim_args, "--fault", f"{fault}@1")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO.format(first_byte=first_byte, idle=idle))
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                 "--run-time", "120")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    assert doc["requests"] == 4 == doc["completed"] + doc["failed"]
    indices = sorted([r["request_index"] for r in doc["request_timings"]]
                     + [f["request_index"] for f in doc["failures"]])
    assert indices == [0, 1, 2, 3]  # every issued request exactly once
    raw = {x["request_index"]: x for x in raw_lines(path.parent) if x["type"] == "request"}
    assert sorted(raw) == [0, 1, 2, 3]
    return doc, raw[1]


def _failure(doc: dict) -> dict:
    (f,) = doc["failures"]
    assert f["request_index"] == 1
    return f


@pytest.mark.parametrize("status", [400, 500, 503])
def test_http_error(simulator, tmp_path: Path, status: int) -> None:
    doc, _ = _run(simulator, tmp_path, f"http{status}")
    f = _failure(doc)
    assert (f["kind"], f["http_status"], f["phase"]) == ("http_error", status, "headers")
    assert f["message"]


def test_rate_limited_keeps_retry_after(simulator, tmp_path: Path) -> None:
    doc, raw = _run(simulator, tmp_path, "http429=7")
    f = _failure(doc)
    assert (f["kind"], f["http_status"], f["phase"]) == ("rate_limited", 429, "headers")
    assert "7" in str(raw.get("failure")) or "retry" in f["message"].lower(), (f, raw)


def test_reset_before_headers(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "reset_before_headers")
    f = _failure(doc)
    assert f["kind"] == "connection" and f["phase"] in ("connect", "headers")


def test_reset_mid_stream(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "reset_mid_stream=3")
    f = _failure(doc)
    assert (f["kind"], f["phase"]) == ("truncated", "decode")


def test_malformed_chunk(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "malformed_chunk=3")
    f = _failure(doc)
    assert (f["kind"], f["phase"]) == ("malformed_chunk", "decode")


def test_error_object_in_stream(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "stream_error=3")
    f = _failure(doc)
    assert f["kind"] == "stream_error" and "injected failure" in f["message"]


def test_stall_past_the_first_byte_timeout(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "stall_first_byte=3", first_byte=0.5)
    f = _failure(doc)
    assert f["kind"] == "timeout" and f["phase"] in ("headers", "prefill")
    assert "first-byte timeout" in f["message"]


def test_stall_past_the_idle_timeout_mid_stream(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "stall_mid_stream=3", idle=0.5)
    f = _failure(doc)
    assert (f["kind"], f["phase"]) == ("timeout", "decode")
    assert "idle timeout" in f["message"]


def test_clean_end_without_done_after_finish_reason_is_success(simulator,
                                                               tmp_path: Path) -> None:
    doc, raw = _run(simulator, tmp_path, "no_done")
    assert doc["failed"] == 0 and raw["failure"] is None
    assert raw["finish_reason"] is not None


def test_end_before_any_finish_reason_is_truncated(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "end_before_finish=3")
    f = _failure(doc)
    assert f["kind"] == "truncated"


def test_no_usage_is_success_counted_from_chunks(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "no_usage")
    assert doc["failed"] == 0
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    assert rows[1]["output_token_source"] == "chunks" and rows[1]["prompt_tokens"] is None
    assert rows[0]["output_token_source"] == "usage"
    assert rows[1]["output_tokens"] == rows[1]["reasoning_chunks"] + rows[1]["content_chunks"]


def test_oversize_chunk_is_read_whole(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "oversize_chunk")
    assert doc["failed"] == 0


def test_slow_headers_within_timeouts_are_waited_for(simulator, tmp_path: Path) -> None:
    doc, _ = _run(simulator, tmp_path, "slow_headers=0.4")
    assert doc["failed"] == 0
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    assert rows[1]["time_to_first_output_ms"] >= 400  # the wait is part of the timing
    assert rows[0]["time_to_first_output_ms"] < 200


def test_headers_then_a_prefill_past_the_first_byte_timeout(simulator, tmp_path: Path) -> None:
    """The usual shape on real servers (vLLM, the simulator): headers at once, then a
    prefill longer than `first_byte_s`: a timeout in phase prefill, for every request."""
    sim = simulator("--prefill-ms", "2000", "--content-tokens", "4", "--max-context", "2048")
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.format(first_byte=0.5, idle=30).replace(
                            "requests = 4", "requests = 2"))
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                 "--run-time", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(result_path(proc))
    assert (doc["requests"], doc["completed"], doc["failed"]) == (2, 0, 2)
    for f in doc["failures"]:
        assert (f["kind"], f["phase"], f["http_status"]) == ("timeout", "prefill", 200), f
        assert "first-byte timeout (0.5 s)" in f["message"]


def test_total_timeout_bounds_the_whole_request(simulator, tmp_path: Path) -> None:
    """`total_s` ends a request whatever it is waiting for: here a 3 s prefill against a
    0.8 s total (the first-byte timeout alone would wait 20 s)."""
    sim = simulator("--prefill-ms", "3000", "--content-tokens", "4", "--max-context", "2048")
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.format(first_byte=20, idle=20).replace("requests = 4",
                                                                       "requests = 2")
                        + "total_s = 0.8\n")
    t0 = time.monotonic()
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                 "--run-time", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 20  # two requests, each cut at ~0.8 s, plus start-up
    doc = load_json(result_path(proc))
    assert (doc["requests"], doc["failed"]) == (2, 2)
    raw = {x["request_index"]: x for x in raw_lines(result_path(proc).parent)
           if x["type"] == "request"}
    for f in doc["failures"]:
        assert (f["kind"], f["phase"]) == ("timeout", "prefill"), f
        assert "total timeout (0.8 s)" in f["message"]
        rec = raw[f["request_index"]]
        assert 0.7e9 <= rec["end_ns"] - rec["start_ns"] <= 1.6e9, rec
