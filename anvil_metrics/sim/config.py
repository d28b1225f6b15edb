"""The simulator's settings, one frozen object shared by every connection.

Kept apart from `server.py` so the chat logic and the HTTP layer can be tested without argparse.
"""

from __future__ import annotations

from dataclasses import dataclass

from anvil_metrics.sim.faults import FaultRule

REASONING_FIELDS = ("reasoning_content", "reasoning")
ROLE_CHUNK_MODES = ("immediate", "with-first-token")
TIMER_KINDS = ("auto", "timerfd", "asyncio")
TOKENIZE_APIS = ("vllm", "llamacpp", "sglang", "none")  # see `tokenapi` for their shapes


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What the simulated model answers and when (see `server.build_parser` for meanings)."""

    host: str = "127.0.0.1"
    port: int = 0
    model: str = "sim-model"
    prefill_ms: float = 300.0
    prefill_ms_per_token: float = 0.0
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
    prefix_cache_block: int = 16
    prefix_cache_tokens: int = 4_000_000
    faults: tuple[FaultRule, ...] = ()
    fault_seed: int = 0
    burst: int = 1  # token chunks per socket write (`burst.py`); 1 = one write per token
    max_running: int | None = None  # streams running at once (`admission.py`); None: no limit

    def prefill_ns(self, prompt_tokens: int) -> int:
        """Prefill duration for a prompt of `prompt_tokens` tokens, in integer nanoseconds."""
        return round((self.prefill_ms + self.prefill_ms_per_token * prompt_tokens) * 1e6)

    @property
    def interval_ns(self) -> int:
        """Gap between successive generated tokens, in integer nanoseconds."""
        return round(self.interval_ms * 1e6)
