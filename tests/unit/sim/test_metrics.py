"""The simulator's self-report (`sim/ledger.py`'s hooks, `sim/metrics.py`) on its own, without
a server process.

The hooks with fake streams whose times are set, so queue time is exact and only wall-clock
figures get loose bounds; the rendered text is read back with ``prometheus_client``'s parser,
the one real scrapers use, and must give back exactly the numbers it was rendered from. The
draft account: test_specdecode.py; histograms: test_ledger.py; identity: test_identity.py.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import DoneCallbacks
from prometheus_client.parser import text_string_to_metric_families

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import HttpConnection, Intake
from anvil_metrics.sim.ledger import (
    RECENT_REQUESTS,
    Ledger,
    Snapshot,
)
from anvil_metrics.sim.metrics import escape_label, number, render
from anvil_metrics.sim.specdecode import SpecCounts, spec_counts

# -- the hooks, with fake streams -------------------------------------------------------------


class FakeConn(DoneCallbacks):
    """A connection whose response ends when the test says (`settle`)."""

    closed = False


@dataclass(eq=False)
class FakeStream:
    _usage: dict[str, Any]
    _t0: int
    _start: int
    _cfg: SimConfig = field(default_factory=SimConfig)
    _conn: FakeConn = field(default_factory=FakeConn)
    _next: int = 0
    _plan: Any = field(default_factory=lambda: SimpleNamespace(finish_reason="length"))


MS = 1_000_000


def stream(prompt: int, generated: int, *, queued_ms: float = 0.0, cached: int | None = None,
           ago_ms: float = 500.0, cfg: SimConfig | None = None) -> FakeStream:
    """A stream that arrived `ago_ms` ago and was admitted `queued_ms` after arriving."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": generated}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    t0 = time.monotonic_ns() - round(ago_ms * MS)
    return FakeStream(usage, t0, t0 + round(queued_ms * MS), cfg or SimConfig())


def snap(tel: Ledger, cfg: SimConfig | None = None, waiting: int = 0) -> Snapshot:
    cfg = cfg or SimConfig()
    return tel.snapshot(waiting=waiting, waiting_max=waiting, kv_capacity_tokens=cfg.kv_capacity,
                        spec_k=cfg.spec_k)


def test_hooks_count_each_figure_when_the_server_would() -> None:
    tel = Ledger(max_context=4096)
    a, b = stream(100, 20, queued_ms=0), stream(40, 5, queued_ms=250)
    tel.started(a)
    tel.started(b)
    s = snap(tel)
    assert (s.running, s.running_max) == (2, 2)
    assert s.queue_time.count == 2 and s.queue_time.total == pytest.approx(0.25, abs=1e-12)
    assert s.kv_used_tokens == 140 and s.ttft.count == 0 and s.e2e.count == 0
    a._next = 7  # seven tokens written: their KV is held too
    tel.first_token(a)
    tel.first_token(a)  # once per stream, whichever path calls it again
    s = snap(tel)
    assert s.kv_used_tokens == 147 and s.ttft.count == 1
    assert 0.4 < s.ttft.total < 60  # 500 ms ago, loosely: no timing in unit tests
    assert (s.prompt_tokens, s.generation_tokens) == (0, 0)  # tokens count at the end
    tel.completed(a)
    a._conn.settle()
    s = snap(tel)
    assert (s.running, s.kv_used_tokens, s.e2e.count) == (1, 40, 1)
    assert (s.prompt_tokens, s.generation_tokens) == (100, 20)
    assert s.prompt_hist.count == s.generation_hist.count == 1
    b._conn.settle()  # b's client went before its first token: queued, never finished
    s = snap(tel)
    assert (s.running, s.queue_time.count, s.ttft.count, s.e2e.count) == (0, 2, 1, 1)
    assert s.kv_cache_usage == 0.0
    truth = s.truth()
    assert truth["requests"] == 1 and truth["queue_time_s_count"] == 2
    assert truth["drafts"] is None and truth["spec_k"] == 0  # off: null, not 0


def test_zero_token_answer_has_no_ttft() -> None:
    tel = Ledger()
    empty = stream(10, 0)
    tel.started(empty)
    tel.first_token(empty)
    tel.completed(empty)
    s = snap(tel)
    assert (s.ttft.count, s.e2e.count, s.generation_tokens) == (0, 1, 0)


def test_a_closed_connection_is_never_counted_as_running() -> None:
    tel = Ledger()
    gone = stream(10, 3)
    gone._conn.closed = True
    tel.started(gone)
    assert snap(tel).running == 0 and snap(tel).queue_time.count == 1


def test_kv_usage_is_capped_at_one() -> None:
    cfg = SimConfig(kv_capacity_tokens=100)
    tel = Ledger()
    tel.started(stream(80, 5, cfg=cfg))
    tel.started(stream(80, 5, cfg=cfg))
    assert snap(tel, cfg).kv_used_tokens == 160 and snap(tel, cfg).kv_cache_usage == 1.0
    assert SimConfig(max_context=1000).kv_capacity == 16_000


def test_prefix_cache_counts_and_the_recent_hit_rate() -> None:
    tel = Ledger()
    assert snap(tel).cache_hit_rate is None  # nothing admitted yet: no value
    tel.started(stream(100, 1, cached=0))
    tel.started(stream(100, 1, cached=64))
    s = snap(tel)
    assert (s.prefix_queries, s.prefix_hits, s.cache_hit_rate) == (200, 64, 0.32)
    for _ in range(RECENT_REQUESTS):  # the older requests leave the window
        tel.started(stream(50, 1, cached=25))
    s = snap(tel)
    assert s.cache_hit_rate == 0.5 and (s.prefix_queries, s.prefix_hits) == (1800, 864)
    off = Ledger()
    off.started(stream(100, 1))  # without --prefix-cache nothing is queried nor hit
    s = snap(off)
    assert (s.prefix_queries, s.prefix_hits, s.cache_hit_rate) == (0, 0, 0.0)


def test_spec_counters_and_recent_gauges() -> None:
    cfg = SimConfig(spec_k=3, spec_accept=0.7)
    tel = Ledger()
    assert snap(tel, cfg).spec_accept_length is None  # no draft yet: no value
    assert snap(tel, cfg).spec == SpecCounts(0, 0, 0, (0, 0, 0))
    lengths = [15, 9, 2, 1, 40]
    for n in lengths:
        s = stream(10, n, cfg=cfg)
        tel.started(s)
        tel.completed(s)
    want = SpecCounts(accepted_per_pos=(0, 0, 0))
    for n in lengths:
        want += spec_counts(n, 3, 0.7)
    s = snap(tel, cfg)
    assert s.spec == want and s.generation_tokens == sum(lengths)
    # N = 1 + drafts + accepted for every answer of N >= 1 tokens
    assert s.generation_tokens == len(lengths) + want.drafts + want.accepted_tokens
    assert s.spec_accept_length == 1 + want.accepted_tokens / want.drafts
    assert s.spec_accept_rate == want.accepted_tokens / want.draft_tokens
    for _ in range(RECENT_REQUESTS):  # the window keeps only recent requests that drafted
        s2 = stream(10, 9, cfg=cfg)
        tel.started(s2)
        tel.completed(s2)
        want += spec_counts(9, 3, 0.7)
    recent = spec_counts(9, 3, 0.7)
    assert snap(tel, cfg).spec_accept_length == 1 + recent.accepted_tokens / recent.drafts
    truth = snap(tel, cfg).truth()
    assert (truth["drafts"], truth["draft_tokens"], truth["accepted_tokens"]) == (
        want.drafts, want.draft_tokens, want.accepted_tokens)
    assert truth["accepted_per_pos"] == list(want.accepted_per_pos)


def test_callbacks_run_last_registered_first() -> None:
    """A stream leaves the running count before its --max-running slot admits the next one
    (the ledger registers after `admission`), so running never reads limit + 1."""
    loop = asyncio.new_event_loop()
    try:
        conn = HttpConnection(lambda *a: None, Intake(loop))
        order: list[str] = []
        conn.when_done(lambda: order.append("slot"))
        conn.when_done(lambda: order.append("running"))
        conn.abort()
        conn.abort()  # once only
        assert order == ["running", "slot"]
    finally:
        loop.close()


# -- the text, read back by the reference parser ----------------------------------------------


def parsed(text: bytes) -> dict[str, Any]:
    """family name -> {sample name + sorted labels: value}, and the families' types."""
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text.decode()):
        samples = {}
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        out[fam.name] = (fam.type, samples)
    return out


def busy_ledger(cfg: SimConfig) -> Ledger:
    tel = Ledger(max_context=cfg.max_context)
    for k, n in enumerate((15, 9, 40, 1)):
        s = stream(30 + k, n, queued_ms=10.0 * k, cached=16 if k else 0, cfg=cfg)
        tel.started(s)
        tel.first_token(s)
        if k < 3:
            tel.ending(s)
            tel.completed(s)
            s._conn.settle()
    return tel


def test_vllm_text_parses_back_to_the_snapshot() -> None:
    cfg = SimConfig(spec_k=3, spec_accept=0.7, max_context=2048)
    s = snap(busy_ledger(cfg), cfg, waiting=2)
    fams = parsed(render(s, "vllm", cfg.model))
    lab = (("engine", "0"), ("model_name", "sim-model"))

    def one(name: str, sample: str | None = None) -> float:
        kind, samples = fams[name]
        return samples[(sample or name, lab)]

    assert fams["vllm:num_requests_running"][0] == "gauge"
    assert one("vllm:num_requests_running") == s.running == 1
    assert one("vllm:num_requests_waiting") == 2
    assert one("vllm:kv_cache_usage_perc") == s.kv_cache_usage
    assert fams["vllm:prompt_tokens"][0] == "counter"
    assert one("vllm:prompt_tokens", "vllm:prompt_tokens_total") == s.prompt_tokens
    assert one("vllm:generation_tokens", "vllm:generation_tokens_total") == 15 + 9 + 40
    assert one("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total") == 30 + 31 + 32 + 33
    assert one("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == 48
    spec = s.spec
    assert one("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total") == spec.drafts
    assert one("vllm:spec_decode_num_draft_tokens",
               "vllm:spec_decode_num_draft_tokens_total") == spec.draft_tokens
    assert one("vllm:spec_decode_num_accepted_tokens",
               "vllm:spec_decode_num_accepted_tokens_total") == spec.accepted_tokens
    _, per_pos = fams["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert {dict(k[1])["position"]: v for k, v in per_pos.items()} == {
        str(p): n for p, n in enumerate(spec.accepted_per_pos)}
    for name, hist in (("vllm:time_to_first_token_seconds", s.ttft),
                       ("vllm:e2e_request_latency_seconds", s.e2e),
                       ("vllm:request_queue_time_seconds", s.queue_time),
                       ("vllm:request_prompt_tokens", s.prompt_hist),
                       ("vllm:request_generation_tokens", s.generation_hist),
                       ("vllm:request_time_per_output_token_seconds", s.tpot)):
        assert hist is not None
        kind, samples = fams[name]
        assert kind == "histogram"
        assert samples[(f"{name}_sum", lab)] == hist.total  # exactly: the text round-trips
        assert samples[(f"{name}_count", lab)] == hist.count
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                         if k[0] == f"{name}_bucket")
        assert buckets[-1] == (math.inf, hist.count)
        assert [v for _, v in buckets] == list(hist.cumulative)
    assert s.queue_time.count == 4 and s.e2e.count == 3 and s.ttft.count == 4


def test_a_pd_role_counts_one_kv_transfer_per_completed_request_in_nixl_names() -> None:
    cfg = SimConfig(pd_role="decode", kv_bytes_per_token=1000)
    tel = busy_ledger(cfg)  # three completed of prompts 30, 31, 32; one still running
    s = tel.snapshot(waiting=0, waiting_max=0, kv_capacity_tokens=cfg.kv_capacity,
                     spec_k=0, pd_role=cfg.pd_role)
    truth = s.truth()
    assert truth["kv_transfers"] == 3 and truth["kv_failed_transfers"] == 0
    assert truth["kv_transfer_bytes"] == (30 + 31 + 32) * 1000
    assert truth["kv_transfer_s_sum"] == pytest.approx((30 + 31 + 32) * 1000 / 1e10)
    assert truth["tpot_s_count"] == 3  # every completed one had 2 or more tokens
    fams = parsed(render(s, "vllm", cfg.model))
    lab = (("engine", "0"), ("model_name", "sim-model"))
    xfer = fams["vllm:nixl_xfer_time_seconds"][1]
    assert xfer[("vllm:nixl_xfer_time_seconds_count", lab)] == 3
    assert xfer[("vllm:nixl_xfer_time_seconds_sum", lab)] == truth["kv_transfer_s_sum"]
    assert fams["vllm:nixl_bytes_transferred"][1][
        ("vllm:nixl_bytes_transferred_sum", lab)] == truth["kv_transfer_bytes"]
    assert fams["vllm:nixl_num_failed_transfers"][1][
        ("vllm:nixl_num_failed_transfers_total", lab)] == 0
    plain = snap(busy_ledger(SimConfig()))  # not a P/D role: no such series, null truth
    assert plain.truth()["kv_transfers"] is None
    assert not any("nixl" in n for n in parsed(render(plain, "vllm", "m")))


def test_sglang_text_parses_back_to_the_snapshot() -> None:
    cfg = SimConfig(spec_k=3, spec_accept=0.7, metrics_format="sglang")
    s = snap(busy_ledger(cfg), cfg, waiting=1)
    fams = parsed(render(s, "sglang", cfg.model))
    lab = (("model_name", "sim-model"),)
    values = {name: samples.get((name, lab)) for name, (_, samples) in fams.items()}
    assert values["sglang:num_running_reqs"] == 1 and values["sglang:num_queue_reqs"] == 1
    assert values["sglang:token_usage"] == s.kv_cache_usage
    assert values["sglang:cache_hit_rate"] == s.cache_hit_rate == 48 / (30 + 31 + 32 + 33)
    assert values["sglang:spec_accept_length"] == s.spec_accept_length
    assert values["sglang:spec_accept_rate"] == s.spec_accept_rate
    assert fams["sglang:prompt_tokens"][1][("sglang:prompt_tokens_total", lab)] == s.prompt_tokens
    assert {n for n, (kind, _) in fams.items() if kind == "histogram"} == {
        "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds",
        "sglang:queue_time_seconds", "sglang:time_per_output_token_seconds"}
    assert fams["sglang:queue_time_seconds"][1][("sglang:queue_time_seconds_sum", lab)] == (
        s.queue_time.total)
    assert not any(name.startswith("vllm:") for name in fams)


def test_spec_series_only_with_spec_k_and_missing_values_left_out() -> None:
    off = snap(Ledger())
    names = set(parsed(render(off, "vllm", "m")))
    assert not any("spec" in n for n in names) and "vllm:num_requests_running" in names
    cfg = SimConfig(spec_k=2)
    fresh = parsed(render(snap(Ledger(), cfg), "sglang", "m"))
    assert fresh["sglang:spec_accept_length"] == ("gauge", {})  # HELP/TYPE, no made-up value
    assert fresh["sglang:cache_hit_rate"] == ("gauge", {})
    per_pos = parsed(render(snap(Ledger(), cfg), "vllm", "m"))[
        "vllm:spec_decode_num_accepted_tokens_per_pos"][1]
    assert sorted(dict(k[1])["position"] for k in per_pos) == ["0", "1"]
    with pytest.raises(ValueError, match="metrics format"):
        render(off, "tgi", "m")


def test_labels_and_numbers_survive_the_parser() -> None:
    model = 'we"ird\\model\nname'
    fams = parsed(render(snap(Ledger()), "vllm", model))
    _, samples = fams["vllm:num_requests_running"]
    assert dict(next(iter(samples))[1])["model_name"] == model
    assert escape_label('a"b') == 'a\\"b'
    assert [number(x) for x in (3, 0.1, math.inf, 1e-7)] == ["3", "0.1", "+Inf", "1e-07"]
    assert float(number(0.1 + 0.2)) == 0.1 + 0.2
