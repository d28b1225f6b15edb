"""The simulator's settings, one frozen object shared by every connection.

Kept apart from `server.py` so the chat logic and the HTTP layer can be tested without argparse.
"""

from __future__ import annotations

from dataclasses import dataclass

from anvil_metrics.sim.energy import PowerModel
from anvil_metrics.sim.faults import FaultRule

REASONING_FIELDS = ("reasoning_content", "reasoning")
ROLE_CHUNK_MODES = ("immediate", "with-first-token")
TIMER_KINDS = ("auto", "timerfd", "asyncio")
TOKENIZE_APIS = ("vllm", "llamacpp", "sglang", "none")  # see `tokenapi` for their shapes
METRICS_FORMATS = ("vllm", "sglang")  # /metrics names and identity endpoints (`metrics.py`)
KV_CAPACITY_CONTEXTS = 16  # default --kv-capacity-tokens: this many full contexts
PD_ROLES = ("prefill", "decode")  # --pd-role: a disaggregated server's side (`ledger.py`)
KV_TRANSFER_BYTES_PER_S = 10_000_000_000  # --pd-role: a KV transfer's time = bytes / this


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What the simulated model answers and when (see `options.OPTIONS` for meanings)."""

    host: str = "127.0.0.1"
    port: int = 0
    model: str = "sim-model"
    aliases: tuple[str, ...] = ()  # more names served as `model` (a router's aliases)
    prefill_ms: float = 300.0
    prefill_ms_per_token: float = 0.0
    prefill_drift_ms_per_s: float = 0.0  # prefill grows this much per second of uptime
    origin_ns: int = 0  # the server's start (monotonic_ns), where the drift begins
    reasoning_tokens: int = 20
    content_tokens: int = 50
    interval_ms: float = 8.0
    reasoning_field: str = "reasoning_content"
    role_chunk: str = "immediate"
    max_context: int = 32768
    tokenizer: str = "words4"
    usage_in_finish_chunk: bool = False
    no_done: bool = False
    stamp_send: bool = False
    timer: str = "auto"
    tokenize_api: str = "vllm"
    prefix_cache: bool = False
    media: bool = False  # image and audio parts counted (`sim/media.py`), not refused
    prefix_cache_block: int = 16
    prefix_cache_tokens: int = 4_000_000
    faults: tuple[FaultRule, ...] = ()
    fault_seed: int = 0
    burst: int = 1  # token chunks per socket write (`burst.py`); 1 = one write per token
    max_running: int | None = None  # streams running at once (`admission.py`); None: no limit
    metrics_format: str = "vllm"  # whose /metrics names and identity endpoints (`metrics.py`)
    spec_k: int = 0  # draft tokens per speculative step (`specdecode.py`); 0: off
    spec_accept: float = 0.7  # probability a draft token is accepted
    kv_capacity_tokens: int | None = None  # KV-cache size (`ledger.py`); None: the default
    pd_role: str | None = None  # P/D side: one KV transfer per request (`ledger.py`); None: off
    kv_bytes_per_token: int = 65536  # with pd_role: a transfer's bytes per prompt token
    script: bool = False  # answer anvil check's questions from the script (`script.py`)
    script_faults: tuple[str, ...] = ()  # "suite:kind": answer that way wrong (`script.py`)
    script_fault_above: int | None = None  # the faults only while more streams run (None: always)
    log_requests: str | None = None  # a JSON line per chat request (`requestlog.py`)
    session_header: str = "X-Session-ID"  # the header `log_requests` records
    log_answers: bool = False  # also a line when each chat answer ends (`requestlog.py`)
    gpus: int = 1  # the simulated GPUs (`energy.py`), with a power model
    power_model: PowerModel | None = None  # DCGM gauges on /metrics (`energy.py`); None: none

    def prefill_ns(self, prompt_tokens: int, start_ns: int | None = None) -> int:
        """Prefill duration for a prompt of `prompt_tokens` tokens, in integer nanoseconds;
        with `--prefill-drift-ms-per-s`, plus that drift per second from the server's
        start (`origin_ns`) to the request's `start_ns` (a server that slows as it runs:
        the steady-state verdict's `drifting` case)."""
        drift = 0.0
        if self.prefill_drift_ms_per_s and start_ns is not None:
            drift = self.prefill_drift_ms_per_s * max(0, start_ns - self.origin_ns) / 1e9
        return round((self.prefill_ms + self.prefill_ms_per_token * prompt_tokens + drift)
                     * 1e6)

    @property
    def kv_capacity(self) -> int:
        """KV-cache capacity in tokens: ``--kv-capacity-tokens``, else 16 full contexts."""
        if self.kv_capacity_tokens is not None:
            return self.kv_capacity_tokens
        return KV_CAPACITY_CONTEXTS * self.max_context

    @property
    def interval_ns(self) -> int:
        """Gap between successive generated tokens, in integer nanoseconds."""
        return round(self.interval_ms * 1e6)
