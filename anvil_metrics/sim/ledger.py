"""What the simulated server knows about its own work, counted when a real server counts it.

Why: anvil reads a server's ``/metrics`` (queue time, time to first token, end-to-end
latency, tokens, running and waiting requests, KV cache, prefix cache, speculative decoding)
and sets it beside its own figures. To test that reading, the simulator keeps the same
figures with known values: this module holds them, `metrics.py` renders them in vLLM's or
SGLang's naming, and ``GET /sim/stats`` reports them as plain numbers (the ground truth a test
compares a scrape with).

Definitions, server-side, as vLLM and SGLang define them (t0 = the request's arrival, the
moment its body was received; ``anvil-t0-ns`` with ``--stamp-send``, which an injected
``stall_first_byte`` or ``slow_headers`` fault moves, as it moves every deadline):

- Only streaming chat completions that start count (non-streaming requests, refused ones and
  every other endpoint never do).
- **Queue time** = t0 to admission (``--max-running``, `admission.py`; 0 when admitted at
  once). Observed at admission.
- **TTFT** = t0 to the write of the chunk that carries the first generated token, whatever it
  shows: a role-only chunk sent earlier does not count, and a reasoning token counts as a
  token (vLLM stamps its first token even when the reasoning parser hides it). Observed at
  that write; an answer of zero tokens has none.
- **E2E** = t0 to the write of the stream's last chunk. Observed then, with the request's
  **prompt tokens** and **generation tokens**, exactly its ``usage`` (prompt_tokens,
  completion_tokens), and its speculative drafts (`specdecode.py`). A stream that ends early
  (client gone, injected reset or error) counts its queue time and TTFT but no end, tokens or
  drafts, so the histograms' counts may differ: each says its own.
- **Running** = streams admitted whose response has not ended (in prefill or generating):
  with ``--max-running`` the slots held. **Waiting** = requests queued for a slot.
- **KV-cache usage** = Σ (prompt tokens + tokens generated so far) over running streams /
  ``--kv-capacity-tokens`` (default 16 x ``--max-context``), capped at 1: a request holds its
  whole prompt's KV from admission and one more slot per token written, until its response
  ends; requests sharing a prefix each count it (no block sharing). A simple, defensible
  model, not vLLM's block arithmetic.
- **Prefix cache**: queried tokens = the prompt tokens of each request looked up (only with
  ``--prefix-cache``), hit tokens = its ``cached_tokens``; counted at admission, where the
  lookup happens. Without ``--prefix-cache`` nothing is queried and nothing hits.
- SGLang's gauges are over recent work, not since boot: ``cache_hit_rate`` = Σ hits / Σ
  queried prompt tokens over the last `RECENT_REQUESTS` admitted requests (0 without a prefix
  cache: nothing is cached); ``spec_accept_length`` = 1 + Σ accepted / Σ drafts and
  ``spec_accept_rate`` = Σ accepted / Σ draft tokens over the last `RECENT_REQUESTS`
  completed requests that drafted. With no such request yet the gauge has no value.

- **Time per output token** (vLLM's per-request histogram, SGLang's likewise) = the write
  of the first generated token to just before the last chunk's, over the tokens after the
  first; observed then, for a stream of two or more tokens (`ending`: the plain stream's
  path; a ``--burst`` or ``--fault`` stream observes none).
- **KV transfers** (``--pd-role``, either side: each counts the transfers it takes part in)
  = one per completed streaming chat request, of ``prompt tokens x --kv-bytes-per-token``
  bytes, taking ``bytes / config.KV_TRANSFER_BYTES_PER_S`` seconds; none fails. Observed at
  completion, with its tokens. Without ``--pd-role`` there are none and no such series.

A scrape taken between two requests therefore agrees with the requests' own usage; one taken
mid-stream sees that stream's queue time and TTFT but not yet its tokens or drafts (vLLM
counts those step by step; here one source, the request's usage, defines them).

The counts live in one process-wide `LEDGER` (as the stream counts always did), fed by
three hooks the streams call: `Ledger.started`, `first_token`, `completed`.

Each answer's own stamps (`AnswerStamps`) go to `Ledger.on_answer` when it is set (`anvil
sim --log-answers`, `requestlog.py`): when a stream's response ends, on the monotonic clock
of t0, the write of its first generated token (TTFT's stamp) and the moment just before its
final write (the chunks' own `anvil_sent_ns` rule; a stream cut short: when it ended).
Nothing is kept per answer beyond the running stream's entry, so it is bounded.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from anvil_metrics.sim.config import KV_TRANSFER_BYTES_PER_S
from anvil_metrics.sim.specdecode import SpecCounts, spec_counts

RECENT_REQUESTS = 32  # SGLang-style gauges: over this many recent requests

# Bucket bounds (upper, inclusive), vLLM's own for these quantities.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TPOT_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
# vLLM's NIXL connector's bounds (telemetry/engines.py cites its source): seconds, bytes
XFER_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
XFER_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                     50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


def token_buckets(max_tokens: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, … up to `max_tokens` (vLLM's token-count histogram bounds)."""
    bounds: list[float] = []
    scale = 1
    while scale <= max_tokens:
        bounds += [float(m * scale) for m in (1, 2, 5) if m * scale <= max_tokens]
        scale *= 10
    return tuple(bounds)


# Stream counts for ``GET /sim/stats`` (the server's own count, which tests compare with the
# records a load generator kept); every stream, faulty or not.
STREAM_COUNTS: dict[str, int] = {"started": 0, "completed": 0}


@dataclass(frozen=True, slots=True)
class HistogramState:
    """One histogram as scraped: cumulative counts per upper bound (+Inf last), sum, count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # len(bounds) + 1 entries; the last is +Inf (== count)
    total: float
    count: int


@dataclass(slots=True)
class Histogram:
    """Observations in fixed buckets; a value equal to a bound falls in that bound's bucket."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def state(self) -> HistogramState:
        running, cumulative = 0, []
        for n in self.counts:
            running += n
            cumulative.append(running)
        return HistogramState(self.bounds, tuple(cumulative), self.total, self.count)


class StreamView(Protocol):
    """What the hooks read of a `chat.ChatStream` (its own fields, read, never written)."""

    _conn: Any  # HttpConnection: closed, when_done
    _cfg: Any  # SimConfig: spec_k, spec_accept
    _t0: int  # arrival, monotonic ns
    _start: int  # admission, monotonic ns
    _usage: dict[str, Any]  # prompt_tokens, completion_tokens, prompt_tokens_details
    _next: int  # tokens written so far
    _plan: Any  # OutputPlan: finish_reason


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``/metrics`` and ``/sim/stats`` show, taken at one moment."""

    running: int
    waiting: int
    running_max: int
    waiting_max: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    prompt_tokens: int
    generation_tokens: int
    prefix_queries: int
    prefix_hits: int
    recent_admitted: int  # of the last RECENT_REQUESTS admitted requests, how many so far
    recent_queries: int  # their queried prompt tokens
    recent_hits: int
    queue_time: HistogramState
    ttft: HistogramState
    e2e: HistogramState
    prompt_hist: HistogramState
    generation_hist: HistogramState
    spec_k: int  # 0: no speculative decoding, and no spec series
    spec: SpecCounts
    recent_spec: SpecCounts  # over the last RECENT_REQUESTS completed requests that drafted
    # requests that ended with their client gone before the last chunk: before the first
    # token was written (queued or prefilling: "prefill") or after it ("decode"); and the
    # completed ones by finish_reason (vLLM's vllm:request_success_total labels)
    aborted_prefill: int = 0
    aborted_decode: int = 0
    finished: tuple[tuple[str, int], ...] = ()
    tpot: HistogramState | None = None
    kv_xfer_time: HistogramState | None = None  # None: not a P/D role (--pd-role)
    kv_xfer_bytes: HistogramState | None = None

    @property
    def kv_cache_usage(self) -> float:
        """Σ running streams' tokens / capacity, 0 … 1."""
        return min(1.0, self.kv_used_tokens / self.kv_capacity_tokens)

    @property
    def cache_hit_rate(self) -> float | None:
        """SGLang's gauge: recent hits / recent queried tokens; 0 without a prefix cache
        (requests were admitted, nothing hit); None before any request."""
        if self.recent_queries:
            return self.recent_hits / self.recent_queries
        return 0.0 if self.recent_admitted else None

    @property
    def spec_accept_length(self) -> float | None:
        """SGLang's gauge: 1 + accepted / drafts over recent requests; None without drafts."""
        spec = self.recent_spec
        return 1 + spec.accepted_tokens / spec.drafts if spec.drafts else None

    @property
    def spec_accept_rate(self) -> float | None:
        """SGLang's gauge: accepted / draft tokens over recent requests; None without drafts."""
        spec = self.recent_spec
        return spec.accepted_tokens / spec.draft_tokens if spec.draft_tokens else None

    def truth(self) -> dict[str, Any]:
        """The ``"metrics"`` object of ``GET /sim/stats``: the exact values the series hold
        (histogram sums are the same floats the scrape shows). Spec fields are null when
        speculative decoding is off."""
        on = self.spec_k > 0
        spec = self.spec
        return {
            "requests": self.e2e.count,
            "queue_time_s_sum": self.queue_time.total,
            "queue_time_s_count": self.queue_time.count,
            "ttft_s_sum": self.ttft.total,
            "ttft_s_count": self.ttft.count,
            "e2e_s_sum": self.e2e.total,
            "e2e_s_count": self.e2e.count,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "prefix_cache_queries": self.prefix_queries,
            "prefix_cache_hits": self.prefix_hits,
            "running": self.running,
            "waiting": self.waiting,
            "running_max": self.running_max,
            "waiting_max": self.waiting_max,
            "kv_used_tokens": self.kv_used_tokens,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "kv_cache_usage": self.kv_cache_usage,
            "cache_hit_rate": self.cache_hit_rate,
            "spec_k": self.spec_k,
            "drafts": spec.drafts if on else None,
            "draft_tokens": spec.draft_tokens if on else None,
            "accepted_tokens": spec.accepted_tokens if on else None,
            "accepted_per_pos": list(spec.accepted_per_pos) if on else None,
            "spec_accept_length": self.spec_accept_length if on else None,
            "spec_accept_rate": self.spec_accept_rate if on else None,
            "aborted_prefill": self.aborted_prefill,
            "aborted_decode": self.aborted_decode,
            "tpot_s_sum": self.tpot.total if self.tpot else None,
            "tpot_s_count": self.tpot.count if self.tpot else None,
            **self.kv_truth(),
        }

    def kv_truth(self) -> dict[str, Any]:
        """The KV-transfer counts (null when not a P/D role)."""
        time, size = self.kv_xfer_time, self.kv_xfer_bytes
        return {"kv_transfers": time.count if time else None,
                "kv_transfer_s_sum": time.total if time else None,
                "kv_transfer_bytes": int(size.total) if size else None,
                "kv_failed_transfers": 0 if time else None}


@dataclass(slots=True)
class _Live:
    """A running stream: its prompt (KV held from admission), whether TTFT was taken (and
    when: `first_ns`) and whether it completed."""

    prompt_tokens: int
    first_seen: bool = False
    completed: bool = False
    first_ns: int | None = None
    last_ns: int | None = None  # just before its final write (with `on_answer` only)


@dataclass(frozen=True, slots=True)
class AnswerStamps:
    """One answer as the server saw it (module docstring): its arrival `t0_ns`, the write of
    its first generated token (None: it wrote none) and the end of its response (just before
    its final write, or when its connection ended), all monotonic ns; its prompt tokens and
    prefix-cache hit tokens as its `usage` says (None: no prefix cache); whether it
    completed (False: its client went, or a fault cut it)."""

    t0_ns: int
    first_sent_ns: int | None
    last_sent_ns: int
    prompt_tokens: int
    cached_tokens: int | None
    completed: bool


class Ledger:
    """The server-side counts of one simulator process (see the module docstring)."""

    def __init__(self, max_context: int = 32768) -> None:
        self._live: dict[StreamView, _Live] = {}
        self.running_max = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self._recent_cache: deque[tuple[int, int]] = deque(maxlen=RECENT_REQUESTS)
        self.spec = SpecCounts()
        self._recent_spec: deque[SpecCounts] = deque(maxlen=RECENT_REQUESTS)
        self.queue_time = Histogram(LATENCY_BUCKETS_S)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.e2e = Histogram(LATENCY_BUCKETS_S)
        self.tpot = Histogram(TPOT_BUCKETS_S)
        self.kv_xfer_time = Histogram(XFER_BUCKETS_S)
        self.kv_xfer_bytes = Histogram(XFER_BYTES_BUCKETS)
        self.aborted = {"prefill": 0, "decode": 0}
        self.finished: dict[str, int] = {}
        self.on_answer: Callable[[AnswerStamps], None] | None = None  # --log-answers
        self.set_max_context(max_context)

    def set_max_context(self, max_context: int) -> None:
        """Size the token histograms for this context window (before any request)."""
        self.prompt_hist = Histogram(token_buckets(max_context))
        self.generation_hist = Histogram(token_buckets(max_context))

    # -- hooks, called by the streams -------------------------------------------------------

    def started(self, stream: StreamView) -> None:
        """Admission (`ChatStream.start`): queue time, prefix-cache lookup, one more running."""
        STREAM_COUNTS["started"] += 1
        self.queue_time.observe((stream._start - stream._t0) / 1e9)
        usage = stream._usage
        prompt = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details")
        if details is not None:  # --prefix-cache: this prompt was looked up
            self.prefix_queries += prompt
            self.prefix_hits += details["cached_tokens"]
            self._recent_cache.append((prompt, details["cached_tokens"]))
        else:
            self._recent_cache.append((0, 0))
        conn = stream._conn
        if conn.closed:  # its client has gone already (cancelled once written)
            self.aborted["prefill"] += 1
            return
        self._live[stream] = _Live(prompt)
        self.running_max = max(self.running_max, len(self._live))
        conn.when_done(lambda: self._done(stream))

    def _done(self, stream: StreamView) -> None:
        """The stream's response ended: completed, or its client gone (an abort)."""
        live = self._live.pop(stream, None)
        if live is not None and not live.completed:
            self.aborted["decode" if live.first_seen else "prefill"] += 1
        if live is not None and self.on_answer is not None:
            usage = stream._usage
            details = usage.get("prompt_tokens_details")
            last = live.last_ns if live.last_ns is not None else time.monotonic_ns()
            self.on_answer(AnswerStamps(
                stream._t0, live.first_ns, last, usage["prompt_tokens"],
                None if details is None else details["cached_tokens"], live.completed))

    def first_token(self, stream: StreamView) -> None:
        """The chunk carrying generated token 0 is being written: TTFT (once per stream)."""
        live = self._live.get(stream)
        if live is None or live.first_seen or not stream._usage["completion_tokens"]:
            return
        live.first_seen = True
        live.first_ns = now = time.monotonic_ns()
        self.ttft.observe((now - stream._t0) / 1e9)

    def ending(self, stream: StreamView) -> None:
        """Its last chunk is about to be written: when its response ends it completed."""
        live = self._live.get(stream)
        if live is not None:
            live.completed = True
            now = time.monotonic_ns()
            if self.on_answer is not None:
                live.last_ns = now
            generated = stream._usage["completion_tokens"]
            if live.first_ns is not None and generated > 1:
                self.tpot.observe((now - live.first_ns) / 1e9 / (generated - 1))

    def completed(self, stream: StreamView) -> None:
        """The last chunk was written: e2e, tokens, drafts."""
        STREAM_COUNTS["completed"] += 1
        usage = stream._usage
        generated = usage["completion_tokens"]
        self.answered(stream._t0, usage["prompt_tokens"], generated, stream._plan.finish_reason)
        cfg = stream._cfg
        if cfg.pd_role is not None:
            size = usage["prompt_tokens"] * cfg.kv_bytes_per_token
            self.kv_xfer_bytes.observe(float(size))
            self.kv_xfer_time.observe(size / KV_TRANSFER_BYTES_PER_S)
        if cfg.spec_k:
            counts = spec_counts(generated, cfg.spec_k, cfg.spec_accept)
            self.spec += counts
            if counts.drafts:
                self._recent_spec.append(counts)

    def answered(self, t0_ns: int, prompt: int, generated: int, reason: str) -> None:
        """A request answered (a stream's last chunk, or a whole answer such as an
        embedding's, written): its end to end, tokens and finish reason."""
        self.finished[reason] = self.finished.get(reason, 0) + 1
        self.e2e.observe((time.monotonic_ns() - t0_ns) / 1e9)
        self.prompt_tokens += prompt
        self.generation_tokens += generated
        self.prompt_hist.observe(prompt)
        self.generation_hist.observe(generated)

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self, *, waiting: int, waiting_max: int, kv_capacity_tokens: int,
                 spec_k: int, pd_role: str | None = None) -> Snapshot:
        """The figures now; `waiting` and `waiting_max` come from the admission queue."""
        kv = sum(live.prompt_tokens + stream._next for stream, live in self._live.items())
        zero = SpecCounts(accepted_per_pos=(0,) * spec_k)  # every position, drafted or not
        recent_spec = zero
        for counts in self._recent_spec:
            recent_spec += counts
        return Snapshot(
            running=len(self._live),
            waiting=waiting,
            running_max=self.running_max,
            waiting_max=waiting_max,
            kv_used_tokens=kv,
            kv_capacity_tokens=kv_capacity_tokens,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits,
            recent_admitted=len(self._recent_cache),
            recent_queries=sum(q for q, _ in self._recent_cache),
            recent_hits=sum(h for _, h in self._recent_cache),
            queue_time=self.queue_time.state(),
            ttft=self.ttft.state(),
            e2e=self.e2e.state(),
            prompt_hist=self.prompt_hist.state(),
            generation_hist=self.generation_hist.state(),
            spec_k=spec_k,
            spec=self.spec + zero if spec_k else zero,
            recent_spec=recent_spec,
            aborted_prefill=self.aborted["prefill"],
            aborted_decode=self.aborted["decode"],
            finished=tuple(sorted(self.finished.items())),
            tpot=self.tpot.state(),
            kv_xfer_time=self.kv_xfer_time.state() if pd_role else None,
            kv_xfer_bytes=self.kv_xfer_bytes.state() if pd_role else None,
        )


LEDGER = Ledger()
