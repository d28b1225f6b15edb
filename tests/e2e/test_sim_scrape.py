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
from anvil_metrics.sim.rawclient import Response, exchange, exchange_many
from anvil_metrics.sim.specdecode import spec_counts

pytestmark = pytest.mark.e2e

PREFILL_MS, INTERVAL_MS, REASONING, CONTENT = 60, 2, 4, 12
TOKENS = REASONING + CONTENT
RUN_S = (PREFILL_MS + (TOKENS - 1) * INTERVAL_MS) / 1000  # one stream, admission to end
LIMIT, STREAMS, K, ACCEPT = 2, 6, 3, 0.7
ARGS = ("--prefill-ms", str(PREFILL_MS), "--interval-ms", str(INTERVAL_MS),
        "--reasoning-tokens", str(REASONING), "--content-tokens", str(CONTENT),
        "--max-running", str(LIMIT), "--spec-k", str(K), "--spec-accept", str(ACCEPT))
PAYLOAD = {"model": "sim-model", "messages": [{"role": "user", "content": "Count, please."}],
           "stream": True, "stream_options": {"include_usage": True}}
SLACK_S = 0.02  # per request: loopback and a shared 2-CPU machine, client side only

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


def first_token_ns(resp: Response) -> int:
    """Arrival of the first chunk with generated text (the role chunk is not a token)."""
    for e in resp.events:
        if e.chunk and e.chunk["choices"]:
            delta = e.chunk["choices"][0]["delta"]
            if delta.get("reasoning_content") or delta.get("content"):
                return e.arrival_ns
    raise AssertionError("no token chunk")


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

    # the queue as planned: pair k (0, 1, 2) is admitted k whole streams after the first
    planned = sum(k * RUN_S for k in range(STREAMS // LIMIT) for _ in range(LIMIT))
    assert delta["queue_time_s"] == pytest.approx(planned, abs=STREAMS * SLACK_S)
    # the server's figures, exactly bounded by its plan (a write never precedes its deadline)
    prefill_s, decode_s = PREFILL_MS / 1000, (TOKENS - 1) * INTERVAL_MS / 1000
    assert delta["ttft_s"] >= delta["queue_time_s"] + STREAMS * prefill_s - 1e-6
    assert delta["e2e_s"] >= delta["queue_time_s"] + STREAMS * (prefill_s + decode_s) - 1e-6
    # ... and by the client's clock: never more than it saw, and not much less
    client_ttft = sum(first_token_ns(r) - sent for sent, r in results) / 1e9
    client_e2e = sum(r.events[-1].arrival_ns - sent for sent, r in results) / 1e9
    assert client_ttft - STREAMS * SLACK_S <= delta["ttft_s"] <= client_ttft + 1e-6
    # E2E is stamped after the last write returns (`ledger.completed`), which the client may
    # have read already when the simulator's process is descheduled in between (seen: 0.26 ms
    # over six streams on a busy machine): bounded by the client's clock within the slack,
    # not exactly as TTFT is (stamped before its write)
    assert client_e2e - STREAMS * SLACK_S <= delta["e2e_s"] <= client_e2e + STREAMS * SLACK_S

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
