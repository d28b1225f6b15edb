"""The `server` block's typed definition: each member's type, unit and words.

Why apart from `servermetrics.py`: that module says how each figure is computed from the
samples (its docstring defines them); this one says what the block holds, for `anvil
verify`'s type checks, the JSON Schema and `docs/fields.md` (`post/blocks.py` registers it).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Struct, UnsetType

from anvil_metrics.fieldtypes import Count, Figure, described

Mean = float | None  # a mean or a difference over the window; null where not reported
STEADY_VERDICTS = ("steady", "drifting", "unknown")
STEADY_GAUGES = ("requests_running", "requests_waiting")  # the gauges a verdict reads
# members added after files were written without them: absent there (not a mismatch), and
# recomputed only where a file holds them (server block; client_minus_server_ms)
ADDED_KEYS = frozenset({"tpot_ms_mean", "kv_transfer", "steady_state"})
ADDED_PAIRS = frozenset({"tpot"})


class Gauge(Struct, forbid_unknown_fields=True):
    """A gauge over the window's samples."""

    p50: Annotated[float, described("", "nearest-rank median of the samples")]
    max: Annotated[float, described("", "the largest sample")]


class SpecDecode(Struct, forbid_unknown_fields=True, kw_only=True):
    """Speculative decoding over the window: counters differenced, or gauges sampled (each
    source has its own members)."""

    acceptance_rate: Annotated[Mean | UnsetType, described(
        "ratio", "Δ accepted tokens / Δ draft tokens (SGLang: its gauge's median)")] = UNSET
    accepted_length: Annotated[Mean | UnsetType, described(
        "tok", "1 + Δ accepted tokens / Δ drafts, the bonus token counted (SGLang: its "
               "gauge's median)")] = UNSET
    acceptance_rate_range: Annotated[tuple[float, float] | None | UnsetType, described(
        "ratio", "[min, max] of SGLang's acceptance-rate gauge (gauges only)")] = UNSET
    accepted_length_range: Annotated[tuple[float, float] | None | UnsetType, described(
        "tok", "[min, max] of SGLang's accepted-length gauge (gauges only)")] = UNSET
    drafts: Annotated[Count | None | UnsetType, described(
        "", "Δ drafts proposed (counters; null from gauges)")] = UNSET
    draft_tokens: Annotated[Count | None | UnsetType, described(
        "tok", "Δ draft tokens proposed (counters; null from gauges)")] = UNSET
    accepted_tokens: Annotated[Count | None | UnsetType, described(
        "tok", "Δ draft tokens accepted (counters; null from gauges)")] = UNSET
    source: Annotated[Literal["counters", "gauges"], described(
        "", '"counters" (differenced over the window) or "gauges" (sampled)')]


class ClientMinusServer(Struct, forbid_unknown_fields=True, kw_only=True):
    """The client's mean over the measured completed requests minus the server's. Per
    role: the role named prefill pairs the first token only, decode the time per output
    token only (the others null); any other role has none."""

    first_chunk_vs_ttft: Annotated[Mean, described(
        "ms", "mean time_to_first_chunk_ms minus the server's mean time to first token")]
    e2e: Annotated[Mean, described("ms", "mean e2e_ms minus the server's mean end-to-end "
                                         "latency")]
    tpot: Annotated[Mean | UnsetType, described(
        "ms", "mean mean_inter_token_latency_ms minus the server's mean time per output "
              "token (its per-request histogram); absent in a file from before it")] = UNSET


class KvTransfer(Struct, forbid_unknown_fields=True):
    """KV transfers over the window (P/D disaggregation and KV offloading; the rules:
    `telemetry/kvtransfer.py`); a member the engine does not report is null."""

    transfers: Annotated[Count | None, described(
        "", "Δ KV transfers (vLLM NIXL: its transfer-time histogram's count)")]
    bytes: Annotated[Count | None, described(
        "B", "Δ bytes transferred (vLLM NIXL: its bytes histogram's sum)")]
    transfer_ms_mean: Annotated[Mean, described(
        "ms", "Δ_sum / Δ_count of the transfer-time histogram")]
    failed: Annotated[Count | None, described(
        "", "Δ failed transfers (vLLM NIXL's counter, SGLang's failed-transfer requests)")]
    latency_ms: Annotated[Gauge | None, described(
        "ms", "SGLang's latest-transfer latency gauge over the window's samples")]
    speed_gb_s: Annotated[Gauge | None, described(
        "GB/s", "SGLang's transfer-speed gauge over the window's samples")]
    queues: Annotated[dict[str, Gauge] | None, described(
        "", "SGLang's disaggregation queues (prefill_prealloc, prefill_inflight, "
            "decode_prealloc, decode_transfer) → their depth gauge over the window")]
    offload: Annotated[dict[str, dict[str, float]] | None, described(
        "", "vLLM KV offloading: transfer_type (GPU_to_CPU, CPU_to_GPU) → Δ bytes and Δ ms")]


class GaugeHalves(Struct, forbid_unknown_fields=True):
    """One gauge's samples over the window, its first half against its second."""

    samples: Annotated[Count, described("", "the window's samples that hold the gauge")]
    first_p50: Annotated[float, described("", "nearest-rank p50 of the first half's samples")]
    second_p50: Annotated[float, described("", "nearest-rank p50 of the second half's")]
    p_value: Annotated[Figure, described("", "Mann-Whitney U p of the second half's values "
                                             "against the first's")]
    moved: Annotated[bool, described(
        "", "|second_p50 - first_p50| > 10 % of max(first_p50, 1) with p < 0.001")]


class ServerSteady(Struct, forbid_unknown_fields=True):
    """Did this server hold its load over the measured window, by its own gauges (the
    rule: `post/serversteady.py`)."""

    verdict: Annotated[Literal[STEADY_VERDICTS], described(  # type: ignore[valid-type]
        "", "steady (no gauge moved between the window's halves), drifting (one did) or "
            "unknown (the server reported neither gauge)")]
    reason: Annotated[str, described("", "what the verdict rests on, in one sentence")]
    samples: Annotated[Count, described("", "successful scrapes in the window")]
    gauges: Annotated[dict[Literal[STEADY_GAUGES], GaugeHalves | None],  # type: ignore[valid-type]
                      described("", "requests_running and requests_waiting, each null when "
                                    "the server did not report it")]


class ServerFigures(Struct, forbid_unknown_fields=True, kw_only=True):
    """What one server's metrics endpoint said about itself over the measured window
    (module docstring): the run's server, or one role's."""

    engine: Annotated[str | None, described(
        "", "the engine whose metrics were read (given, discovered, or told by the metric "
            "names); null when unknown")]
    version: Annotated[str | None, described(
        "", "the engine's version as the server reported it; null when unknown")]
    max_model_len: Annotated[Count | None, described(
        "tok", "the server's context limit; null when it does not say")]
    metrics_url: Annotated[str | None, described(
        "", "where the metrics were scraped; null when they were not")]
    samples: Annotated[Count, described(
        "", "successful scrapes from the first mark to the last, inclusive")]
    requests: Annotated[Count | None, described(
        "", "Δ end-to-end histogram count: requests the server finished in the window "
            "(other clients' included)")]
    spec_decode: Annotated[SpecDecode | None, described(
        "", "speculative decoding over the window; null when the server reported none "
            "(speculation off)")]
    requests_running: Annotated[Gauge | None, described(
        "", "the running-requests gauge over the window's samples")]
    requests_waiting: Annotated[Gauge | None, described(
        "", "the waiting (queued) requests gauge over the window's samples")]
    kv_cache_usage: Annotated[Gauge | None, described(
        "ratio", "the KV-cache usage gauge (0-1) over the window's samples")]
    prefix_cache_hit_rate: Annotated[Mean, described(
        "ratio", "Δ prefix-cache hits / Δ queries over the window (SGLang: its hit-rate "
                 "gauge's median)")]
    ttft_ms_mean: Annotated[Mean, described(
        "ms", "Δ_sum / Δ_count of the server's time-to-first-token histogram")]
    e2e_ms_mean: Annotated[Mean, described(
        "ms", "Δ_sum / Δ_count of the server's end-to-end latency histogram")]
    queue_time_ms_mean: Annotated[Mean, described(
        "ms", "Δ_sum / Δ_count of the server's queue-time histogram")]
    tpot_ms_mean: Annotated[Mean | UnsetType, described(
        "ms", "Δ_sum / Δ_count of the server's per-request time-per-output-token histogram "
              "(each finished request's decode time over its tokens after the first); absent "
              "in a file from before it")] = UNSET
    prompt_tokens_mean: Annotated[Mean, described(
        "tok", "Δ_sum / Δ_count of the server's prompt-token histogram (or Δ prompt tokens "
               "/ requests where it has counters)")]
    generation_tokens_mean: Annotated[Mean, described(
        "tok", "Δ_sum / Δ_count of the server's generation-token histogram (or Δ tokens / "
               "requests where it has counters)")]
    kv_transfer: Annotated[KvTransfer | None | UnsetType, described(
        "", "KV transfers over the window (P/D, offloading); null when the server sent none "
            "of their series; absent in a file from before it")] = UNSET
    steady_state: Annotated[ServerSteady | None | UnsetType, described(
        "", "did this server hold its load over the window (its gauges' halves compared); "
            "null with too few samples; absent in a file from before it")] = UNSET
    client_minus_server_ms: Annotated[ClientMinusServer | None, described(
        "ms", "the client's mean over the measured completed requests minus the server's "
              "mean over the window")]
    effective_prefill_excl_queue_tok_s: Annotated[Mean, described(
        "tok/s", "Σ prompt tokens / Σ (time to first chunk − the server's mean queue time) "
                 "over the rows that have both: prefill without queueing; null when "
                 "client_minus_server_ms.first_chunk_vs_ttft < 0 (a role-only chunk sent "
                 "before prefill)")]
    null_reasons: Annotated[dict[str, str], described(
        "", "member → why it is null (and scrapes, metrics, counters: what went wrong with "
            "the samples)")]


class Combined(Struct, forbid_unknown_fields=True):
    """The roles' sums, only of quantities that add (never means nor gauges); null where
    a role's is. A request served by two roles (prefill, then decode) counts in each."""

    requests: Annotated[Count | None, described(
        "", "Σ over the roles of their requests finished in the window")]
    prompt_tokens: Annotated[Count | None, described(
        "tok", "Σ over the roles of Δ prompt tokens (histogram sum or counter)")]
    generation_tokens: Annotated[Count | None, described(
        "tok", "Σ over the roles of Δ generation tokens (histogram sum or counter)")]
    kv_transfers: Annotated[Count | None, described(
        "", "Σ of kv_transfer.transfers over the roles that count them; null when none "
            "does")]
    kv_transfer_bytes: Annotated[Count | None, described(
        "B", "Σ of kv_transfer.bytes over the roles that count them; null when none does")]
    null_reasons: Annotated[dict[str, str], described("", "member → why it is null")]


class Server(ServerFigures, forbid_unknown_fields=True, kw_only=True):
    """The run's `server` block: one server's figures, and with `--server-metrics-url
    ROLE=URL` its own figures null and each role's in `roles`."""

    roles: Annotated[dict[str, ServerFigures] | UnsetType, described(
        "", "role → that server's figures, from server_metrics.<role>.jsonl; absent "
            "without roles")] = UNSET
    combined: Annotated[Combined | UnsetType, described(
        "", "the roles' sums of quantities that add; absent without roles")] = UNSET
