"""The `server` block from known samples: every figure against hand-computed truth."""

from __future__ import annotations

import io

import numpy as np
import pytest

from anvil_metrics import catalog
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.telemetry import servermetrics
from anvil_metrics.telemetry.scrape import Sampler, parse_exposition, series_key, split_key
from anvil_metrics.telemetry.servermetrics import ClientFigures, server_block

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 0.5
"""

CLIENT = ClientFigures(first_chunk_ms_mean=210.0, e2e_ms_mean=520.0,
                       prefill_prompt_tokens=4000, prefill_first_chunk_ms=840.0,
                       prefill_requests=4)
# a server that sends its role-only chunk before prefill: the first chunk 90 ms before the
# server's first token (its TTFT mean is 200 ms)
EARLY_CHUNK = ClientFigures(first_chunk_ms_mean=110.0, e2e_ms_mean=520.0,
                            prefill_prompt_tokens=4000, prefill_first_chunk_ms=440.0,
                            prefill_requests=4)


def vllm(running: float, waiting: float, kv: float, drafts: float, draft_tokens: float,
         accepted: float, ttft: tuple[float, float], e2e: tuple[float, float],
         queue: tuple[float, float], prompt: tuple[float, float],
         gen: tuple[float, float], hits: float = 0.0, queries: float = 0.0
         ) -> dict[str, float]:
    lab = '{engine="0",model_name="m"}'
    s = {f"vllm:num_requests_running{lab}": running,
         f"vllm:num_requests_waiting{lab}": waiting, f"vllm:kv_cache_usage_perc{lab}": kv,
         f"vllm:spec_decode_num_drafts_total{lab}": drafts,
         f"vllm:spec_decode_num_draft_tokens_total{lab}": draft_tokens,
         f"vllm:spec_decode_num_accepted_tokens_total{lab}": accepted,
         f"vllm:prefix_cache_hits_total{lab}": hits,
         f"vllm:prefix_cache_queries_total{lab}": queries}
    for name, (total, count) in (("time_to_first_token_seconds", ttft),
                                 ("e2e_request_latency_seconds", e2e),
                                 ("request_queue_time_seconds", queue),
                                 ("request_prompt_tokens", prompt),
                                 ("request_generation_tokens", gen)):
        s[f"vllm:{name}_sum{lab}"] = total
        s[f"vllm:{name}_count{lab}"] = count
    return s


def sample(seq: int, series: dict[str, float] | None, mark: str | None = None,
           error: str | None = None) -> dict:
    if series is None:
        return {"type": "sample", "seq": seq, "t_ns": seq, "done_ns": seq, "mark": mark,
                "ok": False, "error": error or "no answer within 2 s"}
    return {"type": "sample", "seq": seq, "t_ns": seq, "done_ns": seq, "mark": mark,
            "ok": True, "series": series}


def vllm_window() -> list[dict]:
    before = vllm(0, 0, 0.0, 100, 300, 150, (5.0, 10), (20.0, 10), (1.0, 10), (9000, 10),
                  (900, 10), hits=100, queries=1000)
    mid1 = vllm(4, 2, 0.25, 110, 330, 170, (5.2, 11), (20.5, 11), (1.01, 11), (10000, 11),
                (990, 11), hits=150, queries=2000)
    mid2 = vllm(3, 0, 0.10, 120, 360, 195, (5.4, 12), (21.0, 12), (1.02, 12), (11000, 12),
                (1080, 12), hits=200, queries=3000)
    after = vllm(0, 0, 0.0, 140, 420, 234, (5.8, 14), (22.0, 14), (1.04, 14), (13000, 14),
                 (1260, 14), hits=300, queries=5000)
    outside = vllm(9, 9, 0.9, 999, 999, 999, (99, 99), (99, 99), (99, 99), (99, 99), (99, 99))
    return [sample(0, outside), sample(1, before, "first"), sample(2, mid1), sample(3, mid2),
            sample(4, after, "last"), sample(5, outside)]


def test_vllm_counters_gauges_and_means_over_the_window() -> None:
    identity = {"engine": "vllm", "version": "0.11.0", "max_model_len": 4096,
                "metrics_url": "http://127.0.0.1:1/metrics"}
    b = server_block(identity, vllm_window(), CLIENT)
    assert set(b) == set(servermetrics.SERVER_KEYS)
    assert b["samples"] == 4 and b["requests"] == 4
    spec = b["spec_decode"]
    # drafts 40, draft tokens 120, accepted 84: rate 84/120, length 1 + 84/40
    assert spec == {"acceptance_rate": 84 / 120, "accepted_length": 1 + 84 / 40, "drafts": 40,
                    "draft_tokens": 120, "accepted_tokens": 84, "source": "counters"}
    assert b["requests_running"] == {"p50": 0.0, "max": 4.0}  # nearest rank of 0, 0, 3, 4
    assert b["requests_waiting"] == {"p50": 0.0, "max": 2.0}
    assert b["kv_cache_usage"] == {"p50": 0.0, "max": 0.25}
    assert b["ttft_ms_mean"] == pytest.approx(0.8 / 4 * 1000)
    assert b["e2e_ms_mean"] == pytest.approx(2.0 / 4 * 1000)
    assert b["queue_time_ms_mean"] == pytest.approx(0.04 / 4 * 1000)
    assert b["prompt_tokens_mean"] == 1000.0 and b["generation_tokens_mean"] == 90.0
    assert b["prefix_cache_hit_rate"] == 200 / 4000
    assert b["client_minus_server_ms"] == pytest.approx(
        {"first_chunk_vs_ttft": 210.0 - 200.0, "e2e": 520.0 - 500.0, "tpot": None})
    # Σ prompt / (Σ first chunk − n × mean queue) = 4000 / ((840 − 4 × 10) / 1000)
    assert b["effective_prefill_excl_queue_tok_s"] == pytest.approx(4000 / 0.8)
    # not in this window; the steady state not judged without a judge (post/serversteady)
    assert set(b["null_reasons"]) == {"kv_transfer", "tpot_ms_mean", "steady_state"}
    assert b["version"] == "0.11.0" and b["max_model_len"] == 4096
    assert not any("role-only" in line for line in servermetrics.summary_lines({"server": b}))


def test_a_first_chunk_before_the_servers_first_token_times_no_prefill() -> None:
    """The client's first chunk 90 ms before the server's first token: the difference is
    kept (both figures are right, by their definitions) with a line saying why it is
    negative, and the prefill rate from time to first chunk is null with the reason."""
    b = server_block({"engine": "vllm"}, vllm_window(), EARLY_CHUNK)
    assert b["client_minus_server_ms"]["first_chunk_vs_ttft"] == pytest.approx(-90.0)
    assert b["effective_prefill_excl_queue_tok_s"] is None
    assert b["null_reasons"]["effective_prefill_excl_queue_tok_s"] == (
        "the client's first chunk came 90.0 ms before the server's first token on average "
        "(a role-only chunk sent before prefill), so time to first chunk does not time the "
        "prefill")
    lines = servermetrics.summary_lines({"server": b})
    assert any("sends a role-only chunk before its prefill" in line for line in lines), lines
    assert not any("effective prefill" in line for line in lines)


def test_a_failed_edge_scrape_nulls_the_counters_and_says_why() -> None:
    samples = vllm_window()
    samples[4] = sample(4, None, "last", "no answer within 2 s")
    b = server_block({"engine": "vllm"}, samples, CLIENT)
    assert b["spec_decode"] is None and b["ttft_ms_mean"] is None and b["requests"] is None
    assert "after the last request failed (no answer within 2 s)" in b["null_reasons"]["counters"]
    assert "1 of 6 scrapes failed" in b["null_reasons"]["scrapes"]
    assert b["requests_running"] == {"p50": 3.0, "max": 4.0}  # the gauges still count: 0, 4, 3
    assert b["client_minus_server_ms"] is None


def test_a_counter_that_goes_down_is_a_restart_not_a_negative_figure() -> None:
    samples = vllm_window()
    samples[4]["series"]['vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}'] = 5.0
    b = server_block({"engine": "vllm"}, samples, CLIENT)
    assert b["spec_decode"] is None
    assert "went down" in b["null_reasons"]["spec_decode"]


def test_speculation_off_is_null_with_a_reason() -> None:
    samples = vllm_window()
    for s in samples:
        s["series"] = {k: v for k, v in s["series"].items() if "spec_decode" not in k}
    b = server_block({"engine": "vllm"}, samples, CLIENT)
    assert b["spec_decode"] is None and "spec_decode" in b["null_reasons"]


def test_sglang_gauges_are_sampled_not_differenced() -> None:
    lab = '{model_name="m"}'

    def s(rate: float, length: float, queue: float, q_count: float, prompt: float,
          e2e: tuple[float, float]) -> dict[str, float]:
        return {f"sglang:num_running_reqs{lab}": 2.0, f"sglang:num_queue_reqs{lab}": 1.0,
                f"sglang:token_usage{lab}": 0.5, f"sglang:cache_hit_rate{lab}": 0.2,
                f"sglang:spec_accept_rate{lab}": rate, f"sglang:spec_accept_length{lab}": length,
                f"sglang:queue_time_seconds_sum{lab}": queue,
                f"sglang:queue_time_seconds_count{lab}": q_count,
                f"sglang:prompt_tokens_total{lab}": prompt,
                f"sglang:generation_tokens_total{lab}": prompt / 10,
                f"sglang:e2e_request_latency_seconds_sum{lab}": e2e[0],
                f"sglang:e2e_request_latency_seconds_count{lab}": e2e[1]}

    samples = [sample(0, s(0.6, 2.8, 1.0, 10, 1000, (5.0, 10)), "first"),
               sample(1, s(0.7, 3.1, 1.1, 12, 1400, (6.0, 12))),
               sample(2, s(0.8, 3.5, 1.3, 14, 1800, (7.0, 14)), "last")]
    b = server_block({"engine": None}, samples, CLIENT)
    assert b["engine"] == "sglang"
    assert b["spec_decode"] == {"acceptance_rate": 0.7, "accepted_length": 3.1,
                                "acceptance_rate_range": [0.6, 0.8],
                                "accepted_length_range": [2.8, 3.5], "drafts": None,
                                "draft_tokens": None, "accepted_tokens": None,
                                "source": "gauges"}
    assert b["queue_time_ms_mean"] == pytest.approx(0.3 / 4 * 1000)
    assert b["prompt_tokens_mean"] == 800 / 4 and b["generation_tokens_mean"] == 80 / 4
    assert b["prefix_cache_hit_rate"] == 0.2
    assert b["ttft_ms_mean"] is None and "ttft_ms_mean" in b["null_reasons"]


def test_unknown_names_and_no_scrapes() -> None:
    b = server_block({"engine": None}, [sample(0, {"foo": 1.0}, "first"),
                                        sample(1, {"foo": 2.0}, "last")], CLIENT)
    assert b["engine"] is None and b["samples"] == 2
    assert "raw series" in b["null_reasons"]["metrics"]
    off = server_block({"engine": "vllm"}, None, CLIENT, off_reason="not scraped: flag")
    assert off["samples"] == 0 and off["null_reasons"] == {"metrics": "not scraped: flag"}


def test_client_figures_are_means_over_the_rows_that_have_them() -> None:
    rows = RowColumns.from_rows([
        _row(0, chunk=10.0, e2e=100.0, prompt=1000), _row(1, chunk=None, e2e=200.0, prompt=500),
        _row(2, chunk=30.0, e2e=300.0, prompt=2000)])
    assert rows is not None
    c = servermetrics.client_figures(rows)
    assert c == ClientFigures(20.0, 200.0, 3000, 40.0, 2)


def _row(i: int, *, chunk: float | None, e2e: float, prompt: int) -> dict:
    """A row of the catalogue's fields (the values not read here are plausible filler)."""
    r = {name: None for name in catalog.ROW_FIELDS}
    r.update(request_index=i, planned_context_tokens=prompt, prompt_tokens=prompt,
             output_tokens=11, output_token_source="usage", reasoning_chunks=4,
             content_chunks=6, e2e_ms=e2e, time_to_first_output_ms=50.0, ttft_ms=60.0,
             time_to_first_chunk_ms=chunk)
    del r["cached_tokens"]
    return r


# --- the sampler child's parts ---------------------------------------------------------------


def test_the_exposition_is_parsed_by_the_reference_parser_without_buckets() -> None:
    series = parse_exposition(VLLM_TEXT)
    assert series == {
        'vllm:num_requests_running{engine="0",model_name="m"}': 3.0,
        'vllm:num_requests_waiting{engine="0",model_name="m"}': 1.0,
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}': 10.0,
        'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"}': 2.0,
        'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"}': 0.5}
    assert split_key(series_key("a:b", {"z": '1"', "a": "2"})) == "a:b"
    assert series_key("x", {"z": '1"', "a": "2"}) == 'x{a="2",z="1\\""}'
    with pytest.raises(ValueError):
        parse_exposition("this is { not metrics")


def test_the_sampler_writes_marks_and_answers_them() -> None:
    calls = []

    def fetch(url: str, timeout_s: float) -> dict[str, float]:
        calls.append(url)
        if len(calls) == 1:
            raise OSError("no answer within 2 s")
        return {"up": float(len(calls))}

    out, answers = io.BytesIO(), io.BytesIO()
    import os

    r, w = os.pipe()
    os.write(w, b"first\nbogus\nlast\n")
    os.close(w)
    with os.fdopen(r, "rb") as commands:
        Sampler("http://x/metrics", out, 3600.0, 1.0, fetch).run(commands, answers, 10.0)
    lines = [__import__("orjson").loads(x) for x in out.getvalue().splitlines()]
    # marks are answered before the periodic scrape that is due; an unknown word is ignored
    assert [(x["seq"], x["mark"], x["ok"]) for x in lines] == [
        (0, "first", False), (1, "last", True)]
    assert lines[0]["error"] == "no answer within 2 s" and lines[1]["series"] == {"up": 2.0}
    assert answers.getvalue() == b"done 0\ndone 1\n"
    assert np.all(np.diff([x["t_ns"] for x in lines]) >= 0)


def test_the_llm_tab_shows_the_servers_gauges() -> None:
    from anvil_metrics.live.webui import server_text, tab_rows

    snap = {"finished": False, "requests_planned": None, "run_id": "r", "requests": 3,
            "completed": 3, "failed": 0, "failures_by_kind": {}, "warmup_requests": 0,
            "accuracy": "sketched", "metrics": []}
    g = {"engine": "sglang", "requests_running": 2.0, "requests_waiting": None,
         "kv_cache_usage": 0.125, "acceptance_rate": 0.7, "age_s": 1.2}
    line = server_text(g)
    assert line == ("server (sglang, 1 s ago): running 2, waiting –, KV cache 12.5 %, "
                    "speculative acceptance 0.7")
    assert any(r["metric"] == line for r in tab_rows(snap, g))
    assert not any(r["metric"].startswith("server (") for r in tab_rows(snap, None))
