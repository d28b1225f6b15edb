"""The server's gauges while the run goes: what the web UI shows of it, from the newest
samples of the `server_metrics.jsonl` the sampler is still writing.

Why apart from `servermetrics.py`: that module builds the benchmark's `server` block from the
whole file once the run is over; this one reads only the file's tail, often, and never the
measured window: the newest sample's gauges, and vLLM's acceptance over the last two samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anvil_metrics.telemetry.engines import ENGINES, RATIOS, delta_of, engine_of, value_of

TAIL_BYTES = 1 << 20  # enough for the last two samples of any server anvil knows


def newest_samples(path: Path, n: int = 2) -> list[dict[str, Any]]:
    """The last `n` successful samples of a `server_metrics.jsonl` that is being written
    (read from its tail only; a torn last line is skipped)."""
    import orjson

    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for line in reversed(data.splitlines()[1:] if size > TAIL_BYTES else data.splitlines()):
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(d, dict) and d.get("ok") and isinstance(d.get("series"), dict):
            out.append(d)
            if len(out) == n:
                break
    return out[::-1]


def live_gauges(samples: list[Mapping[str, Any]], now_ns: int) -> dict[str, Any] | None:
    """What the web UI shows of the server while the run goes, from its newest samples:
    running, waiting, KV-cache use (the newest sample), speculative acceptance (vLLM: over
    the last two samples' counters; SGLang: its gauge) and the newest sample's age."""
    if not samples:
        return None
    last = samples[-1]
    engine = engine_of([last])
    names = ENGINES.get(engine or "", {})
    series = last["series"]

    def now(quantity: str) -> float | None:
        return value_of(series, names[quantity], mean=quantity in RATIOS) \
            if quantity in names else None

    rate = now("accept_rate_gauge")
    if rate is None and len(samples) > 1 and "draft_tokens" in names:
        tokens, _ = delta_of(names, "draft_tokens", samples[-2]["series"], series)
        accepted, _ = delta_of(names, "accepted_tokens", samples[-2]["series"], series)
        if tokens and accepted is not None:
            rate = accepted / tokens
    return {"engine": engine, "requests_running": now("running"),
            "requests_waiting": now("waiting"), "kv_cache_usage": now("kv_cache"),
            "acceptance_rate": rate, "age_s": max(0.0, (now_ns - last["done_ns"]) / 1e9)}
