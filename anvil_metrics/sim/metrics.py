"""``GET /metrics``: the simulator's own counts (`ledger.py`) as Prometheus text, named as
vLLM or SGLang name them (``--metrics-format vllm|sglang``).

Why: anvil samples a server's ``/metrics`` during a run and must know both engines' names; the
simulator answering in each naming, with values known exactly (``/sim/stats``), is what its
tests compare a scrape with. The text is rendered here by hand (exposition format 0.0.4: a
``# HELP`` and ``# TYPE`` line per family, counters sampled as ``NAME_total``, histograms as
cumulative ``NAME_bucket{le=…}`` up to ``+Inf`` plus ``NAME_sum`` and ``NAME_count``), so the
serving path needs no Prometheus library; the tests parse it with ``prometheus_client``'s
parser to prove real scrapers accept it.

Labels: ``model_name`` (the served model) on every series, and vLLM's ``engine="0"``. A value
the server does not have yet (SGLang's speculative gauges before any draft) is left out: the
family's HELP and TYPE lines stand alone, never a made-up 0.

What is emitted, by ``--metrics-format``:

- vllm: gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (0 … 1); counters ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``, ``vllm:prefix_cache_queries_total``,
  ``vllm:prefix_cache_hits_total`` (tokens) and, with ``--spec-k`` > 0,
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."K-1"}``; histograms
  ``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
  ``vllm:request_queue_time_seconds``, ``vllm:request_prompt_tokens``,
  ``vllm:request_generation_tokens``, ``vllm:request_time_per_output_token_seconds``; with
  ``--pd-role``, vLLM's NIXL connector's ``vllm:nixl_xfer_time_seconds`` and
  ``vllm:nixl_bytes_transferred`` (histograms) and ``vllm:nixl_num_failed_transfers_total``
  (always 0). SGLang's disaggregation gauges are not simulated.
- sglang: gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage``, ``sglang:cache_hit_rate`` and, with ``--spec-k`` > 0,
  ``sglang:spec_accept_length``, ``sglang:spec_accept_rate`` (over recent requests, see
  `ledger.py`); counters ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``;
  histograms ``sglang:time_to_first_token_seconds``, ``sglang:e2e_request_latency_seconds``,
  ``sglang:queue_time_seconds``, ``sglang:time_per_output_token_seconds``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from anvil_metrics.sim.config import METRICS_FORMATS
from anvil_metrics.sim.ledger import HistogramState, Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Value = int | float | None


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: its full sample name (``…_total`` for counters), kind, help text,
    and either one value, a histogram, or several values told apart by one extra label."""

    name: str
    kind: str  # "gauge" | "counter" | "histogram"
    help: str
    value: Value | HistogramState | tuple[tuple[str, str, Value], ...]


def vllm_families(snap: Snapshot) -> list[Family]:
    """vLLM's names for the snapshot's figures."""
    fams = [
        Family("vllm:num_requests_running", "gauge",
               "Requests being run (prefill or decode) now.", snap.running),
        Family("vllm:num_requests_waiting", "gauge",
               "Requests queued for a running slot now.", snap.waiting),
        Family("vllm:kv_cache_usage_perc", "gauge",
               "Fraction of the KV cache in use, 0 to 1.", snap.kv_cache_usage),
        Family("vllm:prompt_tokens_total", "counter",
               "Prompt tokens of the finished requests.", snap.prompt_tokens),
        Family("vllm:generation_tokens_total", "counter",
               "Generated tokens of the finished requests.", snap.generation_tokens),
        Family("vllm:prefix_cache_queries_total", "counter",
               "Prompt tokens looked up in the prefix cache.", snap.prefix_queries),
        Family("vllm:prefix_cache_hits_total", "counter",
               "Prompt tokens found in the prefix cache.", snap.prefix_hits),
        # as vLLM 0.32: a request its client abandoned is in no finish reason (measured on
        # vLLM's CPU build: 4 disconnects left finished_reason="abort" at 0)
        Family("vllm:request_success_total", "counter",
               "Finished requests by finish reason.",
               tuple(("finished_reason", r, n) for r, n in snap.finished)),
    ]  # fmt: skip
    if snap.spec_k:
        spec = snap.spec
        per_pos = tuple(("position", str(p), n) for p, n in enumerate(spec.accepted_per_pos))
        fams += [
            Family("vllm:spec_decode_num_drafts_total", "counter",
                   "Speculative decoding drafts (verification steps).", spec.drafts),
            Family("vllm:spec_decode_num_draft_tokens_total", "counter",
                   "Draft tokens proposed.", spec.draft_tokens),
            Family("vllm:spec_decode_num_accepted_tokens_total", "counter",
                   "Draft tokens accepted.", spec.accepted_tokens),
            Family("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                   "Drafts whose token at this position was accepted.", per_pos),
        ]  # fmt: skip
    fams += [
        Family("vllm:time_to_first_token_seconds", "histogram",
               "Arrival to the first generated token, seconds.", snap.ttft),
        Family("vllm:e2e_request_latency_seconds", "histogram",
               "Arrival to the last chunk, seconds.", snap.e2e),
        Family("vllm:request_queue_time_seconds", "histogram",
               "Arrival to admission, seconds.", snap.queue_time),
        Family("vllm:request_prompt_tokens", "histogram",
               "Prompt tokens per finished request.", snap.prompt_hist),
        Family("vllm:request_generation_tokens", "histogram",
               "Generated tokens per finished request.", snap.generation_hist),
        Family("vllm:request_time_per_output_token_seconds", "histogram",
               "Per request: first token to last chunk over tokens after the first.",
               snap.tpot),
    ]  # fmt: skip
    if snap.kv_xfer_time is not None:  # --pd-role: vLLM's NIXL connector's series
        fams += [
            Family("vllm:nixl_xfer_time_seconds", "histogram",
                   "Duration of each KV transfer, seconds.", snap.kv_xfer_time),
            Family("vllm:nixl_bytes_transferred", "histogram",
                   "Bytes of each KV transfer.", snap.kv_xfer_bytes),
            Family("vllm:nixl_num_failed_transfers_total", "counter",
                   "Failed KV transfers.", 0),
        ]  # fmt: skip
    return fams


def sglang_families(snap: Snapshot) -> list[Family]:
    """SGLang's names for the snapshot's figures."""
    fams = [
        Family("sglang:num_running_reqs", "gauge", "Running requests now.", snap.running),
        Family("sglang:num_queue_reqs", "gauge", "Queued requests now.", snap.waiting),
        Family("sglang:token_usage", "gauge",
               "Fraction of the KV token pool in use, 0 to 1.", snap.kv_cache_usage),
        Family("sglang:cache_hit_rate", "gauge",
               "Prefix cache hit rate of recent requests' prompt tokens.", snap.cache_hit_rate),
    ]  # fmt: skip
    if snap.spec_k:
        fams += [
            Family("sglang:spec_accept_length", "gauge",
                   "Mean tokens per draft step over recent requests.", snap.spec_accept_length),
            Family("sglang:spec_accept_rate", "gauge",
                   "Accepted share of draft tokens over recent requests.", snap.spec_accept_rate),
        ]  # fmt: skip
    fams += [
        Family("sglang:prompt_tokens_total", "counter",
               "Prompt tokens of the finished requests.", snap.prompt_tokens),
        Family("sglang:generation_tokens_total", "counter",
               "Generated tokens of the finished requests.", snap.generation_tokens),
        Family("sglang:time_to_first_token_seconds", "histogram",
               "Arrival to the first generated token, seconds.", snap.ttft),
        Family("sglang:e2e_request_latency_seconds", "histogram",
               "Arrival to the last chunk, seconds.", snap.e2e),
        Family("sglang:queue_time_seconds", "histogram",
               "Arrival to admission, seconds.", snap.queue_time),
        Family("sglang:time_per_output_token_seconds", "histogram",
               "Per request: first token to last chunk over tokens after the first.",
               snap.tpot),
    ]  # fmt: skip
    return fams


def number(value: int | float) -> str:
    """A sample value or bound as the text format writes it (exact: floats round-trip)."""
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return "NaN" if math.isnan(value) else repr(value)


def escape_label(text: str) -> str:
    """A label value with backslash, double quote and newline escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_families(fams: list[Family], labels: dict[str, str]) -> str:
    """The exposition text of `fams`, each sample carrying `labels` (and its own)."""
    base = ",".join(f'{k}="{escape_label(v)}"' for k, v in sorted(labels.items()))

    def sample(name: str, value: int | float, extra: str = "") -> str:
        both = ",".join(x for x in (extra, base) if x)
        return f"{name}{{{both}}} {number(value)}"

    lines: list[str] = []
    for fam in fams:
        lines += [f"# HELP {fam.name} {fam.help}", f"# TYPE {fam.name} {fam.kind}"]
        value = fam.value
        if isinstance(value, HistogramState):
            bounds = [number(float(b)) for b in value.bounds] + ["+Inf"]
            for bound, n in zip(bounds, value.cumulative, strict=True):
                lines.append(sample(f"{fam.name}_bucket", n, f'le="{bound}"'))
            lines.append(sample(f"{fam.name}_sum", value.total))
            lines.append(sample(f"{fam.name}_count", value.count))
        elif isinstance(value, tuple):
            for key, label, v in value:
                if v is not None:
                    lines.append(sample(fam.name, v, f'{key}="{escape_label(label)}"'))
        elif value is not None:
            lines.append(sample(fam.name, value))
    return "\n".join(lines) + "\n"


def render(snap: Snapshot, fmt: str, model: str) -> bytes:
    """The whole ``/metrics`` body for `fmt` (one of `METRICS_FORMATS`)."""
    if fmt == "vllm":
        return render_families(vllm_families(snap), {"engine": "0", "model_name": model}).encode()
    if fmt == "sglang":
        return render_families(sglang_families(snap), {"model_name": model}).encode()
    raise ValueError(f"metrics format must be one of {METRICS_FORMATS}, got {fmt!r}")
