"""A server's KV transfers over the measured window: disaggregated prefill/decode (the KV
sent from the prefill server to the decode server) and KV offloading (to CPU memory and
back), from the names in `engines.ENGINES` (their sources are cited there).

Why apart from `servermetrics.py`: these series exist only on a server with a KV connector
(vLLM's NIXL or offloading connector, SGLang's disaggregation mode), and each engine says
different things (vLLM counts transfers and bytes; SGLang keeps queue depths and the latest
transfers' latency and speed as gauges), so the member has its own rules:

- `transfers`: Δ`vllm:nixl_xfer_time_seconds_count` (one observation per transfer);
  `bytes`: Δ`vllm:nixl_bytes_transferred_sum`; `transfer_ms_mean`: Δ_sum / Δ_count of the
  transfer-time histogram, in ms; `failed`: Δ failed transfers (vLLM's
  `nixl_num_failed_transfers`, SGLang's `num_transfer_failed_reqs`);
- `latency_ms`, `speed_gb_s`, `queues`: SGLang's gauges over the window's samples (p50, max;
  latency and speed averaged over label sets, queue depths summed);
- `offload`: per `transfer_type` label (`GPU_to_CPU`, `CPU_to_GPU`), Δ bytes and Δ seconds
  (in ms) of vLLM's offloading counters.

A member the engine has no name for, or did not send, is null with its reason under
`kv_transfer.<member>` in the block's `null_reasons`; the whole member is null when the
server sent none of these series (no KV connector).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from anvil_metrics.telemetry.engines import RATIOS, delta_of, unreported, value_of
from anvil_metrics.telemetry.scrape import split_key

QUANTITIES = ("kv_xfer_time", "kv_xfer_bytes", "kv_xfer_failed", "kv_latency_gauge",
              "kv_speed_gauge", "prefill_prealloc_queue", "prefill_inflight_queue",
              "decode_prealloc_queue", "decode_transfer_queue", "kv_offload_bytes",
              "kv_offload_time")
QUEUES = ("prefill_prealloc_queue", "prefill_inflight_queue", "decode_prealloc_queue",
          "decode_transfer_queue")
_DIRECTION = re.compile(r'transfer_type="([^"]*)"')
NONE_SENT = "the server sent no KV-transfer series (no KV connector, or not disaggregated)"

Gauges = Callable[[str, bool], dict[str, float] | None]


def kv_transfer(names: Mapping[str, tuple[str, ...]], a: Mapping[str, float],
                b: Mapping[str, float], gauge: Gauges, reasons: dict[str, str]
                ) -> dict[str, Any] | None:
    """The `kv_transfer` member (module docstring) from the window's first and last series
    `a`, `b`; `gauge(quantity, mean)` is a gauge's p50 and max over the window (None: not
    sent). Reasons go to `reasons` as `kv_transfer.<member>`."""
    sent = [q for q in QUANTITIES if q in names and any(
        split_key(k).startswith(names[q]) for k in b)]
    if not sent:
        reasons["kv_transfer"] = NONE_SENT
        return None
    out: dict[str, Any] = {}

    def why(member: str, text: str | None) -> None:
        if out.get(member) is None:
            reasons[f"kv_transfer.{member}"] = text or "not reported"

    count, w = delta_of(names, "kv_xfer_time", a, b, "_count")
    out["transfers"] = None if count is None else int(count)
    why("transfers", w)
    total, w = delta_of(names, "kv_xfer_bytes", a, b, "_sum")
    out["bytes"] = None if total is None else int(round(total))
    why("bytes", w)
    seconds, w = delta_of(names, "kv_xfer_time", a, b, "_sum")
    out["transfer_ms_mean"] = (None if seconds is None or not count
                               else seconds * 1000 / count)
    why("transfer_ms_mean", w or "no transfer in the window")
    failed, w = delta_of(names, "kv_xfer_failed", a, b)
    out["failed"] = None if failed is None else int(failed)
    why("failed", w)
    for member, quantity in (("latency_ms", "kv_latency_gauge"),
                             ("speed_gb_s", "kv_speed_gauge")):
        out[member] = gauge(quantity, quantity in RATIOS)
        why(member, unreported(names, quantity))
    queues = {q.removesuffix("_queue"): gauge(q, False) for q in QUEUES if q in names}
    out["queues"] = {k: v for k, v in queues.items() if v is not None} or None
    why("queues", "this engine does not report them" if not queues
        else "the server sent none of its disaggregation queue gauges")
    out["offload"] = _offload(names, a, b)
    why("offload", unreported(names, "kv_offload_bytes"))
    return out


def _offload(names: Mapping[str, tuple[str, ...]], a: Mapping[str, float],
             b: Mapping[str, float]) -> dict[str, dict[str, float | int]] | None:
    """Per transfer direction: Δ bytes and Δ time (ms) of vLLM's offloading counters;
    None when not sent or a counter went down (a restart)."""
    if "kv_offload_bytes" not in names:
        return None
    out: dict[str, dict[str, float | int]] = {}
    for member, quantity, scale in (("bytes", "kv_offload_bytes", 1.0),
                                    ("ms", "kv_offload_time", 1000.0)):
        for direction in _directions(b, names[quantity]):
            x, y = (value_of(_only(s, direction), names[quantity]) for s in (a, b))
            if y is None or (x or 0.0) > y:
                return None
            value = (y - (x or 0.0)) * scale
            out.setdefault(direction, {})[member] = int(round(value)) if scale == 1.0 else value
    return out or None


def _directions(series: Mapping[str, float], metric_names: tuple[str, ...]) -> list[str]:
    found = {m.group(1) for k in series if split_key(k) in metric_names
             for m in [_DIRECTION.search(k)] if m}
    return sorted(found)


def _only(series: Mapping[str, float], direction: str) -> dict[str, float]:
    return {k: v for k, v in series.items() if f'transfer_type="{direction}"' in k}
