"""Which metric names each engine's `/metrics` uses, and one quantity read from a sample or
differenced between two.

Why apart: the benchmark's `server` block (`servermetrics.py`) and the web UI's live gauges
(`livegauges.py`) read the same quantities under the same names and the same rules (the first
name found wins; a series summed over its label sets, ratios averaged; a counter that goes
down is a restart, not a negative figure), so the names and the rules are written once here.

Every name is the engine's own, read in its source (a counter's sample carries `_total`;
a histogram is named by its base, read by `_sum` and `_count`):

- vLLM, vllm-project/vllm: `vllm/v1/metrics/loggers.py` (the request histograms, among
  them `vllm:request_time_per_output_token_seconds`, one observation per finished request:
  its decode time over its output tokens after the first);
  `vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py` (`NixlPromMetrics`, the
  NIXL connector's P/D KV transfers, observed by the instance that reads or writes the KV:
  histograms `vllm:nixl_xfer_time_seconds` (one transfer's duration),
  `vllm:nixl_bytes_transferred` (one transfer's bytes), `vllm:nixl_post_time_seconds`,
  `vllm:nixl_num_descriptors`; counters `vllm:nixl_num_failed_transfers`,
  `vllm:nixl_num_failed_notifications`, `vllm:nixl_num_kv_expired_reqs`);
  `vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py` (`OffloadPromMetrics`,
  the CPU-offloading connector: counters `vllm:kv_offload_total_bytes` and
  `vllm:kv_offload_total_time` (seconds) labelled `transfer_type` (`GPU_to_CPU` stores,
  `CPU_to_GPU` loads), histogram `vllm:kv_offload_size`).
- SGLang, sgl-project/sglang: `python/sglang/srt/metrics/collector.py`
  (`SchedulerMetricsCollector`'s "PD disaggregation" gauges
  `sglang:num_prefill_prealloc_queue_reqs`, `sglang:num_prefill_inflight_queue_reqs`,
  `sglang:num_decode_prealloc_queue_reqs`, `sglang:num_decode_transfer_queue_reqs`,
  `sglang:kv_transfer_speed_gb_s`, `sglang:kv_transfer_latency_ms` (the latest transfers',
  not a count) and the counter
  `sglang:num_transfer_failed_reqs_total`; `TokenizerMetricsCollector`'s
  `sglang:time_per_output_token_seconds`, one observation per finished request). SGLang
  counts neither transfers nor their bytes: those stay null.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from anvil_metrics.telemetry.scrape import split_key

# quantity -> the engine's metric name(s), first found wins; histograms by their base name
ENGINES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "drafts": ("vllm:spec_decode_num_drafts_total",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
        "prefix_queries": ("vllm:prefix_cache_queries_total",
                           "vllm:gpu_prefix_cache_queries_total"),
        "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "ttft": ("vllm:time_to_first_token_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        "prompt_hist": ("vllm:request_prompt_tokens",),
        "generation_hist": ("vllm:request_generation_tokens",),
        "tpot": ("vllm:request_time_per_output_token_seconds",),
        "kv_xfer_time": ("vllm:nixl_xfer_time_seconds",),
        "kv_xfer_bytes": ("vllm:nixl_bytes_transferred",),
        "kv_xfer_failed": ("vllm:nixl_num_failed_transfers_total",),
        "kv_offload_bytes": ("vllm:kv_offload_total_bytes_total",),
        "kv_offload_time": ("vllm:kv_offload_total_time_total",),
    },
    "sglang": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache": ("sglang:token_usage",),
        "hit_rate_gauge": ("sglang:cache_hit_rate",),
        "accept_rate_gauge": ("sglang:spec_accept_rate",),
        "accept_length_gauge": ("sglang:spec_accept_length",),
        "ttft": ("sglang:time_to_first_token_seconds",),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "queue": ("sglang:queue_time_seconds",),
        "prompt_total": ("sglang:prompt_tokens_total",),
        "generation_total": ("sglang:generation_tokens_total",),
        "tpot": ("sglang:time_per_output_token_seconds",),
        "kv_xfer_failed": ("sglang:num_transfer_failed_reqs_total",),
        "kv_latency_gauge": ("sglang:kv_transfer_latency_ms",),
        "kv_speed_gauge": ("sglang:kv_transfer_speed_gb_s",),
        "prefill_prealloc_queue": ("sglang:num_prefill_prealloc_queue_reqs",),
        "prefill_inflight_queue": ("sglang:num_prefill_inflight_queue_reqs",),
        "decode_prealloc_queue": ("sglang:num_decode_prealloc_queue_reqs",),
        "decode_transfer_queue": ("sglang:num_decode_transfer_queue_reqs",),
    },
    "llamacpp": {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_cache": ("llamacpp:kv_cache_usage_ratio",),
        "prompt_total": ("llamacpp:prompt_tokens_total",),
        "generation_total": ("llamacpp:tokens_predicted_total",),
    },
}
RATIOS = frozenset({"kv_cache", "hit_rate_gauge", "accept_rate_gauge", "accept_length_gauge",
                    "kv_latency_gauge", "kv_speed_gauge"})


def engine_of(samples: Iterable[Mapping[str, Any]]) -> str | None:
    """The engine whose metric names a sample holds (`vllm:`, `sglang:`, `llamacpp:`)."""
    for s in samples:
        for key in s.get("series") or {}:
            prefix = key.split(":", 1)[0]
            if prefix in ENGINES and ":" in key:
                return prefix
    return None


def value_of(series: Mapping[str, float], names: tuple[str, ...], suffix: str = "",
             mean: bool = False) -> float | None:
    """The first of `names` (+ `suffix`) present in `series`: summed over its label sets
    (averaged when `mean`); None when none is present."""
    for name in names:
        want = name + suffix
        vals = [v for k, v in series.items() if split_key(k) == want]
        if vals:
            total = sum(vals)
            return total / len(vals) if mean else total
    return None


def unreported(names: Mapping[str, tuple[str, ...]], quantity: str) -> str:
    """Why `quantity` has no value: the engine has no name for it, or sent none of them."""
    if quantity not in names:
        return "this engine does not report it"
    return f"the server reported none of {', '.join(names[quantity])} in the window"


def delta_of(names: Mapping[str, tuple[str, ...]], quantity: str, a: Mapping[str, float],
             b: Mapping[str, float], suffix: str = "") -> tuple[float | None, str | None]:
    """(Δ over the window, why it is None)."""
    if quantity not in names:
        return None, "this engine does not report it"
    x, y = value_of(a, names[quantity], suffix), value_of(b, names[quantity], suffix)
    if x is None or y is None:
        return None, unreported(names, quantity)
    if y < x:
        return None, (f"{names[quantity][0]}{suffix} went down over the window ({x:g} → "
                      f"{y:g}): the server restarted")
    return y - x, None
