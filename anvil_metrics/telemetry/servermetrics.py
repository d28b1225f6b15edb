"""The benchmark's `server` block: what the server said about itself over the measured window.

Input: the samples of `server_metrics.jsonl` (`scrape.py` writes them: one parsed `/metrics`
scrape each, on the run's clock), the server's identity (`provenance.py`, or the user's
flags) and a few client figures over the measured requests (`ClientFigures`). One function,
`server_block`, turns them into the block; `anvil postprocess` writes what it returns and
`anvil verify` calls it again on the same file to check the arithmetic.

The window: from the sample marked `first` (taken just before the first measured request
was handed out) to the one marked `last` (just after the run's last request finished).
Definitions, per quantity (the engines' own names are in `engines.ENGINES`):

- counters (`spec_decode` counts, prefix-cache queries and hits, token totals): the `last`
  sample's value minus the `first` sample's; a decrease (the server restarted) is null;
- histogram means (`ttft_ms_mean`, `e2e_ms_mean`, `queue_time_ms_mean`, `tpot_ms_mean`,
  `prompt_tokens_mean`, `generation_tokens_mean`): Δ`_sum` / Δ`_count` over the window
  (seconds become ms); where an engine has token counters instead of token histograms
  (SGLang), Δtokens / Δ(end-to-end count);
- gauges (`requests_running`, `requests_waiting`, `kv_cache_usage`, SGLang's speculative
  gauges and cache hit rate): every successful sample from `first` to `last`, inclusive;
  `p50` is the nearest-rank median, `max` the largest;
- vLLM speculative decoding: acceptance rate = Δaccepted tokens / Δdraft tokens, accepted
  length = 1 + Δaccepted tokens / Δdrafts (the bonus token counted, range 1 … k+1);
  SGLang's `spec_accept_rate` / `spec_accept_length` are gauges over its recent batches:
  their p50, and `[min, max]` as `acceptance_rate_range` / `accepted_length_range`;
- whose names to read is told by the samples themselves (`vllm:…`, `sglang:…`,
  `llamacpp:…`), whatever engine the user named; unknown names leave every figure null;
- a series summed over its label sets (several engines or data-parallel ranks behind one
  endpoint add up), except ratios (KV-cache usage, hit rates), which are averaged;
- `requests`: Δ(end-to-end histogram count), the requests the server finished in the window
  — compare it with the benchmark's `completed`: if other clients used the server meanwhile,
  the server's means include their requests;
- `client_minus_server_ms`: the client's mean over the measured completed requests minus
  the server's mean over the window — `first_chunk_vs_ttft` pairs the client's
  `time_to_first_chunk_ms` (role-only chunks included) with the server's time to first
  token, `e2e` the client's `e2e_ms` with the server's end-to-end latency, `tpot` the
  client's `mean_inter_token_latency_ms` (generation time over tokens after the first, per
  request) with the server's per-request time per output token (`tpot_ms_mean`: the same
  per-request quotient, averaged over requests, not vLLM's per-token inter-token histogram);
- `kv_transfer`: KV transfers (P/D, offloading), as `kvtransfer.py` defines them;
- `steady_state`: the running and waiting gauges' samples over the window, in order, judged
  by the caller's `Judge` (`post/serversteady.py` defines the verdict: the rank test lives a
  layer above this one);
- `effective_prefill_excl_queue_tok_s`: Σ prompt tokens / Σ (time to first chunk − the
  server's mean queue time), over the measured completed requests that have both: a
  prefill rate without queueing, derived from the server's MEAN queue time (per-request
  queue times are not exposed). Null when the client's first chunk came before the server's
  first token (`first_chunk_vs_ttft` < 0: the server sent a role-only chunk before its
  prefill, as the simulator does by default), since time to first chunk then times nothing
  of the prefill.

Every member the server did not report is null, with a line in `null_reasons` saying why;
an unreachable or broken endpoint leaves the block with its identity and the reasons.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.fieldtypes import num as figure
from anvil_metrics.telemetry.engines import (
    ENGINES,
    RATIOS,
    delta_of,
    engine_of,
    unreported,
    value_of,
)
from anvil_metrics.telemetry.kvtransfer import kv_transfer
from anvil_metrics.telemetry.serverfields import ADDED_KEYS, ADDED_PAIRS, ServerFigures

SAMPLES_FILE = "server_metrics.jsonl"  # beside requests.jsonl and benchmark.json
SERVER_KEYS = ServerFigures.__struct_fields__  # a role's block; the run's adds roles, combined
IDENTITY_KEYS = ("engine", "version", "max_model_len", "metrics_url")
FIGURE_KEYS = tuple(k for k in SERVER_KEYS if k not in IDENTITY_KEYS and k != "null_reasons")
# the steady-state verdict of {gauge key: its values over the window} and the window's
# sample count: (the verdict, or None and why)
Judge = Callable[[Mapping[str, list[float]], int], tuple[dict[str, Any] | None, str]]
NOT_JUDGED = "not judged (no judge given)"


@dataclass(frozen=True, slots=True)
class ClientFigures:
    """The client's side of the comparison, over the measured completed requests.

    `first_chunk_ms_mean` / `e2e_ms_mean`: means of the rows' `time_to_first_chunk_ms` /
    `e2e_ms` (None when no row has one), `itl_ms_mean` of `mean_inter_token_latency_ms`;
    `prefill_prompt_tokens` / `prefill_first_chunk_ms`
    / `prefill_requests`: Σ prompt tokens, Σ time to first chunk and how many rows, over the
    rows that have both."""

    first_chunk_ms_mean: float | None
    e2e_ms_mean: float | None
    prefill_prompt_tokens: int
    prefill_first_chunk_ms: float
    prefill_requests: int
    itl_ms_mean: float | None = None  # mean of the rows' mean_inter_token_latency_ms


NO_CLIENT = ClientFigures(None, None, 0, 0.0, 0)  # no rows paired with the server's


def client_figures(rows: Any) -> ClientFigures:
    """`ClientFigures` of `derive.RowColumns` (the measured completed requests' rows).
    Means and sums are over float64 columns in row order: `verify` recomputes them from the
    file's rows to the same bits."""
    import numpy as np

    def mean(name: str) -> float | None:
        if name in rows.absent:
            return None
        col = rows.values(name)
        col = col[~np.isnan(col)]
        return float(col.sum() / len(col)) if len(col) else None

    itl = mean("mean_inter_token_latency_ms")
    if "time_to_first_chunk_ms" in rows.absent:
        return ClientFigures(None, mean("e2e_ms"), 0, 0.0, 0, itl)
    chunk, prompt = rows.values("time_to_first_chunk_ms"), rows.values("prompt_tokens")
    both = ~np.isnan(chunk) & ~np.isnan(prompt)
    return ClientFigures(mean("time_to_first_chunk_ms"), mean("e2e_ms"),
                         int(rows.counts["prompt_tokens"][both].sum()),
                         float(chunk[both].sum()), int(np.count_nonzero(both)), itl)


def _p50_max(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"p50": ordered[(len(ordered) + 1) // 2 - 1], "max": ordered[-1]}


def server_block(identity: Mapping[str, Any], samples: list[Mapping[str, Any]] | None,
                 client: ClientFigures, identity_reasons: Mapping[str, str] | None = None,
                 off_reason: str | None = None, judge: Judge | None = None
                 ) -> dict[str, Any]:
    """The `server` block (module docstring). `identity`: engine, version, max_model_len,
    metrics_url as discovered or given; `samples`: the file's sample lines (None: none
    were taken, `off_reason` says why); `judge`: the steady-state verdict's rule."""
    reasons: dict[str, str] = dict(identity_reasons or {})
    out: dict[str, Any] = {k: identity.get(k) for k in IDENTITY_KEYS}
    out.update({k: None for k in FIGURE_KEYS})
    out["samples"] = 0
    if samples is None:
        reasons["metrics"] = off_reason or "the server's metrics were not scraped"
        return _finish(out, reasons)
    first = next((s for s in samples if s.get("mark") == "first"), None)
    last = next((s for s in samples if s.get("mark") == "last"), None)
    errors = [s for s in samples if not s.get("ok")]
    if errors:
        reasons["scrapes"] = (f"{len(errors)} of {len(samples)} scrapes failed; the first: "
                              f"{errors[0].get('error')}")
    lo = first["seq"] if first is not None else None
    hi = last["seq"] if last is not None else None
    window = [s for s in samples if s.get("ok") and (lo is None or s["seq"] >= lo)
              and (hi is None or s["seq"] <= hi)]
    out["samples"] = len(window)
    if not window:
        reasons["metrics"] = "no scrape in the window succeeded"
        return _finish(out, reasons)
    named = engine_of(window)  # whose metric names the samples hold
    if out["engine"] is None and named is not None:
        out["engine"] = named
    names = ENGINES.get(named or "")
    if names is None:
        reasons["metrics"] = ("no metric names anvil knows (vLLM's, SGLang's, llama.cpp's): "
                              "the raw series are in server_metrics.jsonl")
        return _finish(out, reasons)
    _gauges(out, names, window, reasons)
    series = {key: _sampled(names, window, quantity, False)
              for key, quantity in (("requests_running", "running"),
                                    ("requests_waiting", "waiting"))}
    out["steady_state"], why = judge(series, len(window)) if judge else (None, NOT_JUDGED)
    reasons["steady_state"] = why
    edge = _edge_problem(first, last)
    if edge is not None:
        reasons["counters"] = edge
        return _finish(out, reasons)
    assert first is not None and last is not None
    _counters(out, names, first["series"], last["series"], reasons)
    out["kv_transfer"] = kv_transfer(
        names, first["series"], last["series"],
        lambda q, m: _p50_max(_sampled(names, window, q, m)), reasons)
    _compare(out, client, reasons)
    return _finish(out, reasons)


def _edge_problem(first: Mapping[str, Any] | None, last: Mapping[str, Any] | None) -> str | None:
    for what, s in (("before the first measured request", first),
                    ("after the last request", last)):
        if s is None:
            return f"no scrape was taken {what}: counters and means cannot be differenced"
        if not s.get("ok"):
            return f"the scrape {what} failed ({s.get('error')}): counters cannot be differenced"
    return None


def _sampled(names: Mapping[str, tuple[str, ...]], window: list[Mapping[str, Any]],
             quantity: str, mean: bool) -> list[float]:
    """A gauge's values over the window's samples (those that hold it)."""
    if quantity not in names:
        return []
    vals = (value_of(s["series"], names[quantity], mean=mean) for s in window)
    return [v for v in vals if v is not None]


def _gauges(out: dict[str, Any], names: Mapping[str, tuple[str, ...]],
            window: list[Mapping[str, Any]], reasons: dict[str, str]) -> None:
    def sampled(quantity: str) -> list[float]:
        return _sampled(names, window, quantity, quantity in RATIOS)

    for key, quantity in (("requests_running", "running"), ("requests_waiting", "waiting"),
                          ("kv_cache_usage", "kv_cache")):
        out[key] = _p50_max(sampled(quantity))
        if out[key] is None:
            reasons[key] = unreported(names, quantity)
    rates, lengths = sampled("accept_rate_gauge"), sampled("accept_length_gauge")
    if rates or lengths:
        out["spec_decode"] = {
            "acceptance_rate": (_p50_max(rates) or {}).get("p50"),
            "accepted_length": (_p50_max(lengths) or {}).get("p50"),
            "acceptance_rate_range": [min(rates), max(rates)] if rates else None,
            "accepted_length_range": [min(lengths), max(lengths)] if lengths else None,
            "drafts": None, "draft_tokens": None, "accepted_tokens": None, "source": "gauges"}
    hits = sampled("hit_rate_gauge")
    if hits:
        out["prefix_cache_hit_rate"] = _p50_max(hits)["p50"]  # type: ignore[index]


def _counters(out: dict[str, Any], names: Mapping[str, tuple[str, ...]],
              a: Mapping[str, float], b: Mapping[str, float], reasons: dict[str, str]) -> None:
    def mean(key: str, quantity: str, scale: float) -> None:
        total, why = delta_of(names, quantity, a, b, "_sum")
        count, why2 = delta_of(names, quantity, a, b, "_count")
        if why or why2:
            reasons[key] = why or why2  # type: ignore[assignment]
        elif not count:
            reasons[key] = "the server finished no request in the window"
        else:
            out[key] = total * scale / count  # type: ignore[operator]

    mean("ttft_ms_mean", "ttft", 1000.0)
    mean("e2e_ms_mean", "e2e", 1000.0)
    mean("queue_time_ms_mean", "queue", 1000.0)
    mean("tpot_ms_mean", "tpot", 1000.0)
    finished, why = delta_of(names, "e2e", a, b, "_count")
    out["requests"] = None if finished is None else int(finished)
    if why:
        reasons["requests"] = why
    for key, hist, total in (("prompt_tokens_mean", "prompt_hist", "prompt_total"),
                             ("generation_tokens_mean", "generation_hist", "generation_total")):
        if hist in names:
            mean(key, hist, 1.0)
            continue
        tokens, why = delta_of(names, total, a, b)
        if why or finished is None:
            reasons[key] = why or reasons.get("requests", "no request count")
        elif not finished:
            reasons[key] = "the server finished no request in the window"
        else:
            out[key] = tokens / finished  # type: ignore[operator]
    if out["spec_decode"] is None:
        drafts, why1 = delta_of(names, "drafts", a, b)
        draft_tokens, why2 = delta_of(names, "draft_tokens", a, b)
        accepted, why3 = delta_of(names, "accepted_tokens", a, b)
        if why1 or why2 or why3:
            reasons["spec_decode"] = why1 or why2 or why3  # type: ignore[assignment]
        elif not drafts or not draft_tokens:
            reasons["spec_decode"] = "no speculative drafts in the window (speculation off?)"
        else:
            assert accepted is not None
            out["spec_decode"] = {"acceptance_rate": accepted / draft_tokens,
                                  "accepted_length": 1 + accepted / drafts,
                                  "drafts": int(drafts), "draft_tokens": int(draft_tokens),
                                  "accepted_tokens": int(accepted), "source": "counters"}
    if "prefix_hits" in names and out["prefix_cache_hit_rate"] is None:
        hits, why1 = delta_of(names, "prefix_hits", a, b)
        queries, why2 = delta_of(names, "prefix_queries", a, b)
        if why1 or why2:
            reasons["prefix_cache_hit_rate"] = why1 or why2  # type: ignore[assignment]
        elif not queries:
            reasons["prefix_cache_hit_rate"] = "no prefix-cache queries in the window"
        else:
            out["prefix_cache_hit_rate"] = hits / queries  # type: ignore[operator]
    elif out["prefix_cache_hit_rate"] is None:
        reasons["prefix_cache_hit_rate"] = unreported(names, "hit_rate_gauge")


def _compare(out: dict[str, Any], c: ClientFigures, reasons: dict[str, str]) -> None:
    pairs = {"first_chunk_vs_ttft": (c.first_chunk_ms_mean, out["ttft_ms_mean"]),
             "e2e": (c.e2e_ms_mean, out["e2e_ms_mean"]),
             "tpot": (c.itl_ms_mean, out["tpot_ms_mean"])}
    diff = {k: (None if a is None or b is None else a - b) for k, (a, b) in pairs.items()}
    if any(v is not None for v in diff.values()):
        out["client_minus_server_ms"] = diff
    else:
        reasons["client_minus_server_ms"] = "the server's or the client's means are missing"
    q = out["queue_time_ms_mean"]
    denominator_ms = c.prefill_first_chunk_ms - c.prefill_requests * (q or 0.0)
    early = diff["first_chunk_vs_ttft"]
    if q is None or not c.prefill_requests:
        reasons["effective_prefill_excl_queue_tok_s"] = (
            "needs the server's mean queue time and requests with prompt tokens and a first "
            "chunk")
    elif early is not None and early < 0:
        reasons["effective_prefill_excl_queue_tok_s"] = (
            f"the client's first chunk came {-early:,.1f} ms before the server's first token "
            "on average (a role-only chunk sent before prefill), so time to first chunk does "
            "not time the prefill")
    elif denominator_ms <= 0:
        reasons["effective_prefill_excl_queue_tok_s"] = (
            "the server's mean queue time is not below the client's time to first chunk")
    else:
        out["effective_prefill_excl_queue_tok_s"] = c.prefill_prompt_tokens / (
            denominator_ms / 1000)


def _finish(out: dict[str, Any], reasons: dict[str, str]) -> dict[str, Any]:
    out["null_reasons"] = {k: v for k, v in sorted(reasons.items())
                           if k not in out or out[k] is None or k in ("scrapes", "metrics",
                                                                        "counters")}
    return out


# --- reading the file, building from a raw header, checking --------------------------------


def role_samples_file(role: str) -> str:
    """A role's samples file (`--server-metrics-url ROLE=URL`), beside SAMPLES_FILE."""
    return f"server_metrics.{role}.jsonl"


def read_samples(path: Path) -> list[dict[str, Any]] | None:
    """The sample lines of a `server_metrics.jsonl` (a torn last line is dropped: the run
    may have died mid-write); None when the file does not exist."""
    import orjson

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    out = []
    for line in data.splitlines():
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(d, dict) and d.get("type") == "sample" and type(d.get("seq")) is int:
            if d.get("ok") and not isinstance(d.get("series"), dict):
                continue
            out.append(d)
    return out


def replica_rows(rows: Any, replicas: list[str] | None, metrics_url: str | None) -> Any:
    """The rows a server's metrics describe: all of them with one host; over replicas
    (`-H URL,URL`: `replicas` their URLs in order), only those of the replica whose host
    and port the metrics URL has (the default `/metrics` is the first replica's), None when
    it is none of them: its figures are then paired with no client figures."""
    if not replicas or len(replicas) < 2 or rows is None or "replica" not in rows.counts:
        return rows
    where = urllib.parse.urlsplit(metrics_url or "").netloc.rpartition("@")[2]
    at = [i for i, u in enumerate(replicas) if urllib.parse.urlsplit(u).netloc == where]
    if not at:
        return None
    return rows.select(rows.present["replica"] & (rows.counts["replica"] == at[0]))


def build_server(params: Mapping[str, Any], engine: Any, samples_path: Path | None,
                 rows: Any, replicas: list[str] | None = None,
                 judge: Judge | None = None) -> dict[str, Any]:
    """The block of a run whose raw header has `params` (its `server` parameters: the
    metrics URL, or why there is none, and what was discovered of the server), the
    document's `engine` (given or discovered), rows (`derive.RowColumns`) and replicas'
    URLs (`replica_rows`)."""
    identity = {"engine": engine, "version": params.get("version"),
                "max_model_len": params.get("max_model_len"),
                "metrics_url": params.get("metrics_url")}
    reasons = params.get("identity_reasons")
    samples = None
    if params.get("metrics_url") is not None and samples_path is not None:
        samples = read_samples(samples_path)
    off = params.get("off_reason")
    if samples is None and off is None:
        off = "no server_metrics.jsonl beside the raw file"
    mine = replica_rows(rows, replicas, params.get("metrics_url"))
    return server_block(identity, samples, NO_CLIENT if mine is None else client_figures(mine),
                        reasons if isinstance(reasons, dict) else None, off, judge)


def check_server_file(doc: Mapping[str, Any], rows: Any, samples_path: Path,
                      problems: list[str], judge: Judge | None = None) -> None:
    """Recompute the block's figures from the samples file beside the benchmark and the
    rows (`derive.RowColumns`); the identity (engine, version, limit, URL) is the file's
    own: it was read from the server, not computed."""
    block = doc.get("server")
    samples = read_samples(samples_path)
    if not isinstance(block, dict) or samples is None or rows is None:
        return
    reasons = block.get("null_reasons") or {}
    identity_reasons = {k: v for k, v in reasons.items() if k in IDENTITY_KEYS}
    reps = [e.get("url") for e in ((doc.get("replicas") or {}).get("endpoints") or ())]
    mine = replica_rows(rows, reps, block.get("metrics_url"))
    want = server_block({k: block.get(k) for k in IDENTITY_KEYS}, samples,
                        NO_CLIENT if mine is None else client_figures(mine), identity_reasons,
                        reasons.get("metrics"), judge)
    want = as_filed(block, want)
    for key in FIGURE_KEYS:
        if key in want and _differs(block.get(key), want[key]):
            problems.append(f"server.{key}: file has {block.get(key)!r}, recomputed "
                            f"{want[key]!r} from {samples_path.name} and the rows")


def as_filed(have: Mapping[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """`want` (a block recomputed now) without the members added after `have`'s file was
    written and absent from it (`serverfields.ADDED_KEYS`, `ADDED_PAIRS`): an older file
    verifies as it was written."""
    out = {k: v for k, v in want.items() if k in have or k not in ADDED_KEYS}
    pairs, filed = out.get("client_minus_server_ms"), have.get("client_minus_server_ms")
    if isinstance(pairs, dict) and isinstance(filed, dict):
        out["client_minus_server_ms"] = {k: v for k, v in pairs.items()
                                         if k in filed or k not in ADDED_PAIRS}
    return out


def _differs(a: Any, b: Any) -> bool:
    """Values differ beyond float rounding (1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() != b.keys() or any(_differs(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (
            isinstance(a, bool) or isinstance(b, bool)):
        return abs(a - b) > 1e-9 * max(1.0, abs(a), abs(b))
    return a != b


# --- the CLI's lines --------------------------------------------------------------------------


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """What the CLI summary says of the `server` block: identity, gauges, speculation and
    which client figure compares with which server figure."""
    s = doc.get("server")
    if not isinstance(s, dict):
        return []

    def num(v: Any, nd: int = 1) -> str:
        return figure(v, f",.{nd}f")

    def gauge(g: Any, scale: float = 1.0, unit: str = "") -> str:
        if not isinstance(g, dict):
            return "null"
        return f"p50 {num(g['p50'] * scale, 1)}{unit} max {num(g['max'] * scale, 1)}{unit}"

    lines = [f"server: {s['engine'] or 'engine unknown'} {s['version'] or ''}".rstrip()
             + f", context limit {s['max_model_len'] or 'unknown'}; {s['samples']} metrics "
             f"samples from {s['metrics_url'] or 'nowhere'}"]
    if s["samples"]:
        lines.append(f"server: running {gauge(s['requests_running'])}, waiting "
                     f"{gauge(s['requests_waiting'])}, KV cache "
                     f"{gauge(s['kv_cache_usage'], 100, ' %')}; queue time mean "
                     f"{num(s['queue_time_ms_mean'])} ms; {num(s['requests'], 0)} requests "
                     "finished")
    spec = s["spec_decode"]
    if isinstance(spec, dict):
        lines.append(f"server: speculative decoding acceptance {num(spec['acceptance_rate'], 3)}"
                     f", accepted length {num(spec['accepted_length'], 2)} (from "
                     f"{spec['source']})")
    diff = s["client_minus_server_ms"]
    if isinstance(diff, dict):
        lines.append(
            f"client vs server, same window: client first chunk minus server TTFT "
            f"{num(diff['first_chunk_vs_ttft'], 2)} ms; client minus server end to end "
            f"{num(diff['e2e'], 2)} ms (the server's TTFT counts a first token its reasoning "
            "parser may hide: compare it with time to first chunk, not time to first output)")
        early = diff["first_chunk_vs_ttft"]
        if early is not None and early < 0:
            lines.append("client vs server: the first chunk came before the server's first "
                         "token: this server sends a role-only chunk before its prefill, so "
                         "compare its TTFT with time to first output instead")
    if s["effective_prefill_excl_queue_tok_s"] is not None:
        lines.append(f"server: effective prefill without queueing "
                     f"{num(s['effective_prefill_excl_queue_tok_s'])} tok/s (derived from the "
                     "server's mean queue time)")
    for key in ("metrics", "scrapes", "counters"):
        if key in s["null_reasons"]:
            lines.append(f"server: {s['null_reasons'][key]}")
    return lines
