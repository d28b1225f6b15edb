"""`anvil export --vllm-json FILE`: a run as `vllm bench serve --save-result` writes one, so
dashboards and scripts built on vLLM's result files take anvil runs as they are.

Why its own definitions: the keys mean what vLLM's `vllm/benchmarks/serve.py` computes, not
what anvil's `metrics` block computes, or a dashboard would plot two definitions under one
name. So:

- `duration` is the run's wall clock (s); `completed`/`failed` anvil's counts;
  `total_input_tokens` Σ prompt_tokens and `total_output_tokens` Σ output_tokens over the
  completed requests; `request_throughput`, `output_throughput`, `total_token_throughput`
  those over `duration`; `request_goodput` the run's goodput_rps (null without criteria);
- per request (completed first, in request order, then failed, as vLLM lists every
  output): `input_lens`, `output_lens`, `ttfts`, `latencies` (s), `itls` (s: the gaps
  between the stream's chunks after the first, from `requests.jsonl`; [] where the raw file
  is not beside the document), `start_times` (s after the run's header), `errors` ("" for
  a completed request), `generated_texts` ("": anvil keeps no text);
- vLLM's TTFT is its first chunk of any kind, which carries the first token even when a
  reasoning parser hides it: anvil's `time_to_first_chunk_ms` (its `time_to_first_output_ms`
  in a file from before anvil had that field), and for a request that streamed nothing (an
  embedding) its latency, as vLLM times a pooling request; TPOT is `(latency − ttft) /
  (output − 1)` for requests of more than one output token;
- `mean_*`, `median_*`, `std_*` and `p50/p90/p95/p99_*` of ttft, tpot, itl and e2el in ms
  are numpy's mean, median, std and linearly interpolated percentiles over the completed
  requests (the ITLs pooled), as vLLM computes them — not anvil's nearest-rank;
- `max_concurrent_requests` is the most requests in flight at once (from the starts and
  ends); `max_output_tokens_per_s` is null (vLLM bins token arrival times anvil does not
  keep per token);
- the run fields vLLM writes beside them (`date`, `backend`, `model_id`, `num_prompts`,
  `request_rate` ("inf" for a closed loop), `burstiness`, `max_concurrency`), and `anvil`:
  which run this was and which field each TTFT came from.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics.post.benchmark import measured_order
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.rawread import read_raw

PERCENTILES = (50, 90, 95, 99)
MS = 1000.0


def _stats(name: str, seconds: list[float]) -> dict[str, float | None]:
    """vLLM's mean/median/std/percentiles of `name` in ms (null with no values)."""
    v = np.asarray(seconds, dtype=np.float64) * MS
    out: dict[str, float | None] = {
        f"mean_{name}_ms": float(np.mean(v)) if len(v) else None,
        f"median_{name}_ms": float(np.median(v)) if len(v) else None,
        f"std_{name}_ms": float(np.std(v)) if len(v) else None}
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(v, p)) if len(v) else None
    return out


def _itls(run_dir: Path | None, n_rows: int) -> list[list[float]]:
    """Each completed request's chunk gaps after the first (s), in row order; [] each
    without the raw file."""
    raw_path = None if run_dir is None else run_dir / "requests.jsonl"
    if raw_path is None or not raw_path.is_file():
        return [[] for _ in range(n_rows)]
    raw = read_raw(raw_path)
    order = measured_order(raw.columns()).order
    done = [raw.records[i] for i in order.tolist() if raw.records[i].failure is None]
    return [[d / 1e9 for d in (r.chunk_deltas_ns or ())[1:]] for r in done]


def _max_in_flight(start_ms: Any, end_ms: Any) -> int | None:
    if not len(start_ms) or np.isnan(start_ms).any():
        return None
    t = np.concatenate([start_ms, end_ms])
    step = np.concatenate([np.ones(len(start_ms)), -np.ones(len(end_ms))])
    order = np.lexsort((step, t))  # an end before a start at the same instant
    return int(np.cumsum(step[order]).max())


def vllm_result(doc: dict[str, Any], rows: RowColumns, run_dir: Path | None) -> dict[str, Any]:
    """The result document (module docstring) of a benchmark `doc` with these `rows`;
    `run_dir`: the folder holding its `requests.jsonl` (for the ITLs), if any."""
    chunk = "time_to_first_chunk_ms" not in rows.absent
    ttft_field = "time_to_first_chunk_ms" if chunk else "time_to_first_output_ms"
    ttft = rows.values(ttft_field)
    if chunk:  # a row without a first chunk stamp (an old raw record): its first output
        ttft = np.where(np.isnan(ttft), rows.values("time_to_first_output_ms"), ttft)
    # nothing streamed at all (an embedding): the whole answer, as vLLM times a pooling
    # request (`ttft = latency`)
    ttft = np.where(np.isnan(ttft), rows.values("e2e_ms"), ttft)
    ttft_s = (ttft / MS).tolist()
    lat_s = (rows.values("e2e_ms") / MS).tolist()
    out_lens = rows.counts["output_tokens"].tolist()
    in_lens = [None if np.isnan(v) else int(v) for v in rows.values("prompt_tokens")]
    itls = _itls(run_dir, len(rows))
    tpots = [(lat - t) / (o - 1) for lat, t, o in zip(lat_s, ttft_s, out_lens, strict=True)
             if o > 1 and t == t]
    failures = doc.get("failures") or []
    wall_s = (doc.get("wall_clock_ms") or 0.0) / MS
    total_in = sum(v for v in in_lens if v is not None)
    total_out = int(sum(out_lens))
    load = doc.get("load") or {}
    start = rows.values("start_offset_ms") if "start_offset_ms" not in rows.absent else (
        np.full(len(rows), np.nan))

    def per_s(x: float) -> float | None:
        return x / wall_s if wall_s > 0 else None

    result: dict[str, Any] = {
        "date": datetime.strptime(doc["run_id"][10:25], "%Y%m%dT%H%M%S").strftime(
            "%Y%m%d-%H%M%S") if isinstance(doc.get("run_id"), str) else None,
        "backend": "openai-chat", "endpoint_type": "openai-chat", "label": "anvil",
        "model_id": doc.get("model"), "tokenizer_id": None,
        "num_prompts": doc.get("requests"),
        "request_rate": load.get("offered_rate_rps") or "inf",
        "burstiness": load.get("burstiness") or 1.0,
        "max_concurrency": doc.get("concurrency"),
        "duration": wall_s, "completed": doc.get("completed"), "failed": doc.get("failed"),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": per_s(len(rows)),
        "request_goodput": (doc.get("metrics") or {}).get("goodput_rps"),
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "input_lens": in_lens + [0] * len(failures),
        "output_lens": out_lens + [0] * len(failures),
        "ttfts": ttft_s + [0.0] * len(failures),
        "itls": itls + [[] for _ in failures],
        "latencies": lat_s + [0.0] * len(failures),
        "start_times": [None if s != s else s / MS for s in start.tolist()]
        + [None] * len(failures),
        "generated_texts": [""] * (len(rows) + len(failures)),
        "errors": [""] * len(rows) + [f"{f.get('kind')}: {f.get('message')}"
                                      for f in failures],
        "max_output_tokens_per_s": None,
        "max_concurrent_requests": _max_in_flight(start, start + rows.values("e2e_ms")),
    }
    result.update(_stats("ttft", [t for t in ttft_s if t == t]))
    result.update(_stats("tpot", tpots))
    result.update(_stats("itl", [g for gaps in itls for g in gaps]))
    result.update(_stats("e2el", lat_s))
    result["anvil"] = {"run_id": doc.get("run_id"), "ttft_from": ttft_field,
                       "itls_from": "requests.jsonl chunk_deltas_ns" if any(itls) else None}
    return result
