"""The simulator's ``/metrics`` as a real process serves it, read as a scraper reads it.

Each naming (``--metrics-format vllm|sglang``) is started with ``--max-running 2`` and
speculative decoding on; six streams are sent at once so four queue. ``/metrics`` is parsed
with ``prometheus_client`` before, during and after, and its deltas are compared with three
independent truths: the simulator's own exact sums (``/sim/stats``), the requests' own
``usage``, and the client's own clock (a server's TTFT and E2E can only be shorter than what
the client saw: it stamps arrival after the client sent and writes before the client
receives). The queue follows from the plan: two at a time, each pair admitted when a stream
of the pair before it ends.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.sim.rawclient import Event, Response, exchange, exchange_many
from anvil_metrics.sim.specdecode import spec_counts

pytestmark = pytest.mark.e2e

PREFILL_MS, INTERVAL_MS, REASONING, CONTENT = 60, 2, 4, 12
TOKENS = REASONING + CONTENT
RUN_S = (PREFILL_MS + (TOKENS - 1) * INTERVAL_MS) / 1000  # one stream, admission to end
LIMIT, STREAMS, K, ACCEPT = 2, 6, 3, 0.7
ARGS = ("--prefill-ms", str(PREFILL_MS), "--interval-ms", str(INTERVAL_MS),
        "--reasoning-tokens", str(REASONING), "--content-tokens", str(CONTENT),
        "--max-running", str(LIMIT), "--spec-k", str(K), "--spec-accept", str(ACCEPT),
        "--stamp-send")
PAYLOAD = {"model": "sim-model", "messages": [{"role": "user", "content": "Count, please."}],
           "stream": True, "stream_options": {"include_usage": True}}
MS = 1_000_000

# the names each format gives the same figure: (figure, vLLM's name, SGLang's name)
SAME_FIGURE = (
    ("running", "vllm:num_requests_running", "sglang:num_running_reqs"),
    ("waiting", "vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    ("kv", "vllm:kv_cache_usage_perc", "sglang:token_usage"),
    ("prompt", "vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    ("generation", "vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    ("ttft", "vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    ("e2e", "vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    ("queue", "vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
)
NAMES = {fmt: {row[0]: row[k] for row in SAME_FIGURE} for k, fmt in ((1, "vllm"), (2, "sglang"))}


def port_of(sim: SimProcess) -> int:
    return int(sim.url.rsplit(":", 1)[1])


def scrape(port: int) -> dict[str, float]:
    """Every sample of ``/metrics`` by name (an extra label appended: ``name{position=0}``),
    checking the parser accepts it and every sample names the model."""
    _, resp = exchange(port, "/metrics", method="GET")
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/plain")
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(resp.body.decode()):
        for s in fam.samples:
            labels = dict(s.labels)
            assert labels.pop("model_name") == "sim-model"
            labels.pop("engine", None)
            extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            out[f"{s.name}{{{extra}}}" if extra else s.name] = s.value
    return out


def truth(port: int) -> dict[str, Any]:
    _, resp = exchange(port, "/sim/stats", method="GET")
    return orjson.loads(resp.body)["metrics"]


def usage_of(resp: Response) -> dict[str, Any]:
    return next(e.chunk["usage"] for e in resp.events if e.chunk and e.chunk.get("usage"))


def first_token(resp: Response) -> Event:
    """The first chunk with generated text (the role chunk is not a token)."""
    for e in resp.events:
        if e.chunk and e.chunk["choices"]:
            delta = e.chunk["choices"][0]["delta"]
            if delta.get("reasoning_content") or delta.get("content"):
                return e
    raise AssertionError("no token chunk")


def stamps(resp: Response) -> tuple[int, int, int, int]:
    """The server's own stamps of one stream (``--stamp-send``, the client's clock): its
    arrival t0, the start of its plan (its admission), its first token's write and the write
    of its last stamped chunk."""
    sent = [e.chunk["anvil_sent_ns"] for e in resp.events if e.chunk]
    return (int(resp.headers["anvil-t0-ns"]), int(resp.headers["anvil-start-ns"]),
            first_token(resp).chunk["anvil_sent_ns"], sent[-1])  # type: ignore[index]  # fmt: skip


def poll_gauges(port: int, names: dict[str, str], want: tuple[int, int]) -> dict[str, float]:
    """Scrape until (running, waiting) == `want`; at most 200 scrapes or 5 s."""
    give_up = time.monotonic() + 5
    for _ in range(200):
        seen = scrape(port)
        if (seen[names["running"]], seen[names["waiting"]]) == want or (
                time.monotonic() > give_up):
            return seen
        time.sleep(0.005)
    return seen


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_scrape_deltas_match_truth_usage_and_the_clients_clock(simulator: Any, fmt: str) -> None:
    port = port_of(simulator(*ARGS, "--metrics-format", fmt))
    names = NAMES[fmt]
    exchange(port, "/v1/chat/completions", PAYLOAD)  # earlier work: the deltas must subtract
    exchange(port, "/v1/chat/completions", {**PAYLOAD, "stream": False})  # never counted
    before, truth0 = scrape(port), truth(port)
    results: list[tuple[int, Response]] = []
    sender = threading.Thread(target=lambda: results.extend(
        exchange_many(port, "/v1/chat/completions", [PAYLOAD] * STREAMS)))
    sender.start()
    mid = poll_gauges(port, names, (LIMIT, STREAMS - LIMIT))
    sender.join(30)
    after, truth1 = scrape(port), truth(port)
    after_ns = time.perf_counter_ns()
    assert len(results) == STREAMS and all(r.status == 200 for _, r in results)

    # gauges: two running and four queued while it ran, nothing after
    assert (mid[names["running"]], mid[names["waiting"]]) == (LIMIT, STREAMS - LIMIT)
    assert 0 < mid[names["kv"]] <= 1
    assert (after[names["running"]], after[names["waiting"]], after[names["kv"]]) == (0, 0, 0)
    assert (truth1["running_max"], truth1["waiting_max"]) == (LIMIT, STREAMS - LIMIT)

    # counters: exactly the requests' usage
    usages = [usage_of(r) for _, r in results]
    prompt = sum(u["prompt_tokens"] for u in usages)
    generated = sum(u["completion_tokens"] for u in usages)
    assert generated == STREAMS * TOKENS
    assert after[names["prompt"]] - before[names["prompt"]] == prompt
    assert after[names["generation"]] - before[names["generation"]] == generated
    assert truth1["prompt_tokens"] - truth0["prompt_tokens"] == prompt

    # histograms: each delta is the truth's, and counts every stream once
    delta: dict[str, float] = {}
    for key, series in (("queue_time_s", "queue"), ("ttft_s", "ttft"), ("e2e_s", "e2e")):
        name = names[series]
        count = after[f"{name}_count"] - before[f"{name}_count"]
        assert count == truth1[f"{key}_count"] - truth0[f"{key}_count"] == STREAMS
        delta[key] = after[f"{name}_sum"] - before[f"{name}_sum"]
        assert delta[key] == pytest.approx(truth1[f"{key}_sum"] - truth0[f"{key}_sum"], abs=1e-9)
        assert after[f"{name}_bucket{{le=+Inf}}"] == after[f"{name}_count"]

    # the queue as planned: each slot is a chain, each stream in it admitted when the one
    # before it ends, a whole stream after that one's start (the scheduler's logical now, so
    # exact in ns however busy the machine); the first two start at their arrival
    run_ns = (PREFILL_MS + (TOKENS - 1) * INTERVAL_MS) * MS
    t0s, starts, firsts, lasts = zip(*(stamps(r) for _, r in results), strict=True)
    chains = sorted(starts)[:LIMIT]
    assert sorted(starts) == sorted(s + k * run_ns for s in chains
                                    for k in range(STREAMS // LIMIT))  # fmt: skip
    assert all(t0 == start for t0, start in zip(t0s, starts, strict=True) if start in chains)
    # the server's histograms, exactly against its own stamps: queue time is arrival to
    # start; TTFT ends at the first token, stamped by the ledger just before its write (so
    # between that token's deadline and the write); E2E after the last write, and before the
    # server answered the scrape that followed
    assert delta["queue_time_s"] == pytest.approx(
        sum(start - t0 for t0, start in zip(t0s, starts, strict=True)) / 1e9, abs=1e-6)
    prefill_s, decode_s = PREFILL_MS / 1000, (TOKENS - 1) * INTERVAL_MS / 1000
    assert delta["queue_time_s"] + STREAMS * prefill_s - 1e-6 <= delta["ttft_s"] <= (
        sum(f - t0 for t0, f in zip(t0s, firsts, strict=True)) / 1e9 + 1e-6)
    assert delta["queue_time_s"] + STREAMS * (prefill_s + decode_s) - 1e-6 <= delta["e2e_s"]
    assert sum(last - t0 for t0, last in zip(t0s, lasts, strict=True)) / 1e9 - 1e-6 <= (
        delta["e2e_s"]) <= sum(after_ns - t0 for t0 in t0s) / 1e9
    # ... and the client saw no less: it sent before t0 and read after each write
    for (sent, resp), (t0, _, first, _) in zip(results, (stamps(r) for _, r in results),
                                               strict=True):  # fmt: skip
        assert sent < t0 and first_token(resp).arrival_ns >= first

    # speculative decoding: the documented account of each answer
    one = spec_counts(TOKENS, K, ACCEPT)
    if fmt == "vllm":
        drafts = after["vllm:spec_decode_num_drafts_total"] - before[
            "vllm:spec_decode_num_drafts_total"]
        drafted = after["vllm:spec_decode_num_draft_tokens_total"] - before[
            "vllm:spec_decode_num_draft_tokens_total"]
        accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before[
            "vllm:spec_decode_num_accepted_tokens_total"]
        assert (drafts, drafted, accepted) == (
            STREAMS * one.drafts, STREAMS * one.draft_tokens, STREAMS * one.accepted_tokens)
        assert generated == STREAMS + drafts + accepted  # N = 1 + drafts + accepted each
        per_pos = [after[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}"]
                   - before[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}"]
                   for p in range(K)]
        assert sum(per_pos) == accepted and per_pos == [STREAMS * n for n in one.accepted_per_pos]
        assert (truth1["drafts"], truth1["accepted_tokens"]) == (
            after["vllm:spec_decode_num_drafts_total"],
            after["vllm:spec_decode_num_accepted_tokens_total"])
        assert not any(name.startswith("sglang:") for name in after)
    else:  # gauges over recent requests, all of the same length here
        assert after["sglang:spec_accept_length"] == truth1["spec_accept_length"] == (
            1 + one.accepted_tokens / one.drafts)
        assert after["sglang:spec_accept_rate"] == truth1["spec_accept_rate"] == (
            one.accepted_tokens / one.draft_tokens)
        assert not any(name.startswith("vllm:") for name in after)


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_prefix_cache_series_match_the_usage(simulator: Any, fmt: str) -> None:
    sim = simulator("--prefill-ms", "5", "--interval-ms", "0", "--reasoning-tokens", "0",
                    "--content-tokens", "2", "--prefix-cache", "--prefix-cache-block", "4",
                    "--metrics-format", fmt)
    port = port_of(sim)
    long = {**PAYLOAD, "messages": [{"role": "user", "content": "the same long prompt " * 20}]}
    before = scrape(port)
    usages = [usage_of(exchange(port, "/v1/chat/completions", long)[1]) for _ in range(3)]
    after, t = scrape(port), truth(port)
    queried = sum(u["prompt_tokens"] for u in usages)
    hits = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert hits > 0 and usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    assert (t["prefix_cache_queries"], t["prefix_cache_hits"]) == (queried, hits)
    if fmt == "vllm":
        assert after["vllm:prefix_cache_queries_total"] - before[
            "vllm:prefix_cache_queries_total"] == queried
        assert after["vllm:prefix_cache_hits_total"] - before[
            "vllm:prefix_cache_hits_total"] == hits
    else:
        assert "sglang:cache_hit_rate" not in before  # no request yet: no value, not 0
        assert after["sglang:cache_hit_rate"] == t["cache_hit_rate"] == hits / queried
