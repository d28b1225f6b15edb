"""`anvil export --vllm-json`: vLLM's result keys by vLLM's definitions, worked out by hand
from records whose stamps are known: TTFT from the first chunk, TPOT, the chunk gaps as
ITLs, numpy's mean/median/std/linear percentiles, a failure listed after the completed
requests, the most in flight at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.compare.runs import read_run
from anvil_metrics.export.vllmjson import vllm_result
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw

MS = 1_000_000


def test_the_keys_are_vllms_definitions_of_known_stamps(tmp_path: Path) -> None:
    """Request i starts at 100 ms · i, its first chunk comes (10 + i) ms later, then 4 more
    chunks 2 ms apart, 6 output tokens; the first two overlap in time."""
    records = []
    for i in range(4):
        start = HEADER["perf_anchor_ns"] + 100 * MS * i if i else HEADER["perf_anchor_ns"]
        if i == 1:
            start = HEADER["perf_anchor_ns"] + 5 * MS  # in flight beside request 0
        first = start + (10 + i) * MS
        records.append(completed(i, start_ns=start, extra={"first_chunk_ns": first - MS},
                                 first_output_ns=first, first_content_ns=first + 2 * MS,
                                 end_ns=first + 8 * MS,
                                 chunk_deltas_ns=((10 + i) * MS, 2 * MS, 2 * MS, 2 * MS,
                                                  2 * MS)))
    records.append(failed(4, start_ns=HEADER["perf_anchor_ns"] + 500 * MS))
    write_raw(tmp_path / "requests.jsonl", HEADER, records)
    atomic_write_json(tmp_path / "benchmark.json",
                      build_benchmark(read_raw(tmp_path / "requests.jsonl")))
    run = read_run(tmp_path)
    r = vllm_result(run.doc, run.rows, tmp_path)
    ttft = [(9 + i) / 1000 for i in range(4)]  # the first chunk, 1 ms before the output
    lat = [(18 + i) / 1000 for i in range(4)]
    assert r["ttfts"] == pytest.approx([*ttft, 0.0], abs=1e-12)
    assert r["latencies"] == pytest.approx([*lat, 0.0], abs=1e-12)
    assert r["anvil"]["ttft_from"] == "time_to_first_chunk_ms"
    assert r["itls"] == [[0.002] * 4] * 4 + [[]]
    assert (r["completed"], r["failed"], r["num_prompts"]) == (4, 1, 5)
    assert r["errors"][:4] == [""] * 4 and r["errors"][4].startswith("http_error: ")
    assert r["output_lens"] == [6, 6, 6, 6, 0]
    assert r["total_output_tokens"] == 24 and r["total_input_tokens"] == 4 * 130
    tpot = [(la - t) / 5 for la, t in zip(lat, ttft, strict=True)]
    assert r["mean_tpot_ms"] == pytest.approx(1000 * np.mean(tpot))
    assert r["median_ttft_ms"] == pytest.approx(1000 * np.median(ttft))
    assert r["p90_ttft_ms"] == pytest.approx(1000 * np.percentile(ttft, 90))  # linear
    assert r["std_e2el_ms"] == pytest.approx(1000 * np.std(lat))
    assert r["mean_itl_ms"] == pytest.approx(2.0) and r["p99_itl_ms"] == pytest.approx(2.0)
    assert r["duration"] == pytest.approx(run.doc["wall_clock_ms"] / 1000)
    assert r["request_throughput"] == pytest.approx(4 / r["duration"])
    assert r["max_concurrent_requests"] == 2  # requests 0 and 1
    assert r["request_rate"] == "inf" and r["date"] == "20260801-160039"  # the run_id's


def test_without_the_raw_file_the_itls_are_empty_not_made_up(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    write_raw(tmp_path / "run" / "requests.jsonl", HEADER, [completed(i) for i in range(3)])
    doc = build_benchmark(read_raw(tmp_path / "run" / "requests.jsonl"))
    atomic_write_json(tmp_path / "benchmark.json", doc)
    run = read_run(tmp_path / "benchmark.json")
    r = vllm_result(run.doc, run.rows, None)
    assert r["itls"] == [[], [], []] and r["mean_itl_ms"] is None
    assert r["anvil"]["itls_from"] is None


def test_an_embeddings_ttft_is_its_latency_as_vllm_times_a_pooling_request(
        tmp_path: Path) -> None:
    """Nothing streamed (no first chunk, no output): vLLM's bench sets ttft = latency."""
    records = [completed(i, start_ns=HEADER["perf_anchor_ns"] + 50 * MS * i,
                         end_ns=HEADER["perf_anchor_ns"] + 50 * MS * i + (20 + i) * MS,
                         first_output_ns=None, first_content_ns=None, reasoning_chunks=0,
                         content_chunks=0, chunk_deltas_ns=(), chunk_channels="",
                         usage={"prompt_tokens": 40, "total_tokens": 40})
               for i in range(3)]
    write_raw(tmp_path / "requests.jsonl", HEADER, records)
    atomic_write_json(tmp_path / "benchmark.json",
                      build_benchmark(read_raw(tmp_path / "requests.jsonl")))
    run = read_run(tmp_path)
    r = vllm_result(run.doc, run.rows, tmp_path)
    assert r["ttfts"] == pytest.approx([0.020, 0.021, 0.022], abs=1e-12) == r["latencies"]
    assert r["output_lens"] == [0, 0, 0] and r["total_input_tokens"] == 120
    assert (r["mean_tpot_ms"], r["mean_itl_ms"]) == (None, None)  # no tokens: null, not 0
