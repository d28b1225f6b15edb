"""The metric catalogue: every figure of benchmark/v1, defined once.

Why one place: a figure users promote a model on must mean the same thing in the file, in `anvil
verify`'s recomputation, in the CLI summary and in the web UI. So each per-request field (`ROW`)
and each aggregate (`AGGREGATES`) is one entry here (name, unit, JSON type, inputs, formula, label)
and all else is generated from them: the row layout and type rules, row derivation and
verification, the `metrics` block, the CLI summary, live tables and charts, the report's colours
and labels, `anvil metrics`. The public summary's figures and gates (means and comparisons of its
aggregates over runs) are defined beside this, in `summaryfigures.py`.

Formulas are numpy functions over whole columns (`Columns`: float64, NaN for null), and the only
implementation: a single row is a column of one. Each returns NaN — written as null — where an
input is missing or a divisor is zero or negative (the spec: "null, never NaN or Infinity"), and
follows the spec's evaluation order literally so that any implementation of the definitions gets
the same bits (`(output_tokens − 1) / (generation_ms / 1000)`, never `… * 1000 / …`).

Adding a per-request metric is one `RowField` in `ROW`; files before its generation lack it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anvil_metrics.mediafields import MEDIA_ROWS

Columns = Mapping[str, Any]  # field name -> float64 column, NaN for null
PERCENTILES = (50, 95)
CLOCK_METHODOLOGY = "client time.perf_counter"  # where every duration comes from


@dataclass(frozen=True, slots=True)
class RowField:
    """One field of a `request_timings[]` row.

    - `kind`: its JSON type — "count" (a non-negative integer), "duration" (a non-negative
      float, ms), "float" (a finite float), "source" ("usage" or "chunks");
    - `presence`: "always"; "reported" (the key is left out when the server did not report
      the value, as `cached_tokens`); "added" (always written, but files written before
      anvil had it lack it in every row; `since` is its generation, `ADDED_GENERATIONS`);
    - `inputs`: for a derived field, the row fields its formula reads (`compute`, a function
      of `Columns`); measured fields have none and `source` says where they come from;
    - `methodology`: (key, sentence) of the document's `timing_methodology` it defines;
    - `percentiles`: the `metrics` name pattern of its p50/p95 (`{p}` → `p50`), if any;
    - `live` / `summary`: shown in the live tables / the CLI summary, under `label`;
    - `better`: "higher" or "lower" when a larger value is better or worse (a rate, a
      time), None when neither (a size); the summary's figures and gates take it from here;
    - `stamps`: for a duration measured from the raw record, the two stamps (record keys,
      `extra.` for the extra block) it is the difference of, (from, to); its `source` says so;
    - `colour`: its colour in the report's figures (`report.draw.COLOURS`), if it is drawn;
    - `series`: its title in the web UI's per-bucket p50 chart (`live.series.SERIES_FIELDS`,
      the chart `chart-<series in lower case>`), if it is charted live.
    `long_label` is the label with its unit, as an axis or legend shows it.
    """

    name: str
    unit: str
    kind: str
    nullable: bool
    description: str
    presence: str = "always"
    since: int = 0  # an added field's generation (1, 2, …); 0 for the others
    source: str = ""
    inputs: tuple[str, ...] = ()
    formula: str = ""
    compute: Callable[[Columns], Any] | None = None
    label: str = ""
    methodology: tuple[str, str] | None = None
    percentiles: str | None = None
    live: bool = False
    summary: bool = False
    better: str | None = None
    stamps: tuple[str, str] | None = None
    colour: str = ""
    series: str = ""

    def __post_init__(self) -> None:
        if self.stamps is not None:  # a stamped duration's source is its two stamps
            object.__setattr__(self, "source", f"({self.stamps[1]} − {self.stamps[0]}) / 1e6")

    @property
    def derived(self) -> bool:
        return self.compute is not None

    @property
    def long_label(self) -> str:
        return f"{self.label or self.name} ({self.unit})" if self.unit else self.label or self.name

    def percentile_names(self) -> list[str]:
        return [self.percentiles.format(p=f"p{n}") for n in PERCENTILES if self.percentiles]


def _where(ok: Any, value: Any) -> Any:
    """`value` where `ok`, NaN elsewhere and where a division overflowed to ±inf."""
    out = np.where(ok, value, np.nan)
    out[np.isinf(out)] = np.nan
    return out


def _rate(count: Any, ms: Any) -> Any:
    """`count / (ms / 1000)` where the count is present and `ms / 1000 > 0`."""
    seconds = ms / 1000
    with np.errstate(all="ignore"):
        return _where(~np.isnan(count) & (seconds > 0), count / seconds)


def _generation_ms(c: Columns) -> Any:
    return c["e2e_ms"] - c["time_to_first_output_ms"]


def _visible_generation_ms(c: Columns) -> Any:
    return c["e2e_ms"] - c["ttft_ms"]


def _decode_tok_s(c: Columns) -> Any:
    after_first = c["output_tokens"] - 1
    seconds = c["generation_ms"] / 1000
    with np.errstate(all="ignore"):
        return _where((after_first >= 0) & (seconds > 0), after_first / seconds)


def _mean_inter_token_latency_ms(c: Columns) -> Any:
    gaps = c["output_tokens"] - 1
    generation = c["generation_ms"]
    with np.errstate(all="ignore"):
        return _where((gaps > 0) & ~np.isnan(generation), generation / gaps)


def _from_due(name: str) -> Callable[[Columns], Any]:
    """`name + schedule_lag_ms`: a latency counted from the moment the request was due."""
    def compute(c: Columns) -> Any:
        return c[name] + c["schedule_lag_ms"]
    return compute


def _effective_prefill_tok_s(c: Columns) -> Any:
    return _rate(c["prompt_tokens"], c["time_to_first_output_ms"])


def _reasoning_tok_s(c: Columns) -> Any:
    return _rate(c["reasoning_tokens"], c["reasoning_ms"])


def _content_tok_s(c: Columns) -> Any:
    after_first = c["output_tokens"] - c["reasoning_tokens"] - 1  # NaN without the split
    seconds = c["visible_generation_ms"] / 1000
    with np.errstate(all="ignore"):
        return _where((after_first >= 0) & (seconds > 0), after_first / seconds)


_SUM, _LOWER, _HIGHER = "summed into `metrics`", {"better": "lower"}, {"better": "higher"}

ROW: tuple[RowField, ...] = (
    RowField("request_index", "", "count", False,
             "0-based order in which the measured requests were issued (dense across "
             "request_timings and failures)", source="the raw records, renumbered"),
    RowField("planned_context_tokens", "tok", "count", True,
             "prompt size the scenario planned", source="raw record"),
    RowField("prompt_tokens", "tok", "count", True,
             "prompt tokens the server counted", source="usage.prompt_tokens",
             label="prompt tokens", percentiles="prompt_tokens_{p}", summary=True),
    RowField("output_tokens", "tok", "count", False,
             "output tokens (reasoning included)",
             source="usage.completion_tokens, else reasoning_chunks + content_chunks"),
    RowField("output_token_source", "", "source", False,
             "which of the two gave output_tokens", source='"usage" or "chunks"'),
    RowField("cached_tokens", "tok", "count", False,
             "prompt tokens served from the server's prefix cache", presence="reported",
             source="usage.prompt_tokens_details.cached_tokens (the key is absent when the "
                    "server does not report it)"),
    RowField("reasoning_chunks", "chunks", "count", False,
             f"SSE chunks with a non-empty reasoning delta ({_SUM})", source="raw record"),
    RowField("content_chunks", "chunks", "count", False,
             f"SSE chunks with a non-empty content delta ({_SUM})", source="raw record"),
    RowField("e2e_ms", "ms", "duration", False,
             "request written to stream finished", stamps=("start_ns", "end_ns"),
             label="end to end", percentiles="e2e_{p}_ms", live=True, summary=True,
             colour="#2ca02c", **_LOWER),
    RowField("time_to_first_output_ms", "ms", "duration", True,
             "request written to the first non-empty reasoning or content delta",
             stamps=("start_ns", "first_output_ns"), label="time to first output",
             methodology=("time_to_first_output", "request start through the first "
                          "non-empty streamed reasoning or content delta"),
             percentiles="time_to_first_output_{p}_ms", live=True, summary=True,
             colour="#1f77b4", **_LOWER),
    RowField("ttft_ms", "ms", "duration", True,
             "request written to the first non-empty content delta (null if no content)",
             stamps=("start_ns", "first_content_ns"), label="TTFT (first content)",
             methodology=("ttft", "request start through the first non-empty streamed "
                          "content delta"),
             percentiles="ttft_{p}_ms", live=True, summary=True, colour="#ff7f0e",
             series="TTFT", **_LOWER),
    RowField("generation_ms", "ms", "float", True, "time after the first output",
             inputs=("e2e_ms", "time_to_first_output_ms"),
             formula="e2e_ms − time_to_first_output_ms", compute=_generation_ms,
             label="generation",
             methodology=("generation", "client-observed E2E minus time to first output"),
             percentiles="generation_{p}_ms", summary=True, **_LOWER),
    RowField("visible_generation_ms", "ms", "float", True, "time after the first content",
             inputs=("e2e_ms", "ttft_ms"), formula="e2e_ms − ttft_ms",
             compute=_visible_generation_ms),
    RowField("decode_tok_s", "tok/s", "float", True,
             "output tokens after the first, per second of generation",
             inputs=("output_tokens", "generation_ms"),
             formula="(output_tokens − 1) / (generation_ms / 1000)", compute=_decode_tok_s,
             label="decode",
             methodology=("decode", "usage completion tokens after the first token divided "
                          "by client-observed generation time; completion tokens may include "
                          "reasoning tokens"),
             percentiles="decode_tok_s_{p}", live=True, summary=True, colour="#d62728",
             series="decode", **_HIGHER),
    RowField("mean_inter_token_latency_ms", "ms", "float", True,
             "generation time per output token after the first",
             inputs=("generation_ms", "output_tokens"),
             formula="generation_ms / (output_tokens − 1)",
             compute=_mean_inter_token_latency_ms, label="mean ITL",
             methodology=("mean_inter_token_latency", "client-observed generation time "
                          "divided by completion tokens after the first token; not a raw "
                          "per-token timestamp trace"),
             percentiles="mean_inter_token_latency_ms_{p}", live=True, summary=True,
             colour="#8c564b", **_LOWER),
    RowField("effective_prefill_tok_s", "tok/s", "float", True,
             "prompt tokens per second of time to first output (queueing included)",
             inputs=("prompt_tokens", "time_to_first_output_ms"),
             formula="prompt_tokens / (time_to_first_output_ms / 1000)",
             compute=_effective_prefill_tok_s, label="effective prefill",
             methodology=("effective_prefill", "usage.prompt_tokens divided by "
                          "client-observed time to first output; includes queueing, "
                          "scheduling, prefill, and first-token work"),
             percentiles="effective_prefill_tok_s_{p}", live=True, summary=True,
             colour="#17becf", **_HIGHER),
    RowField("reasoning_tokens", "tok", "count", True,
             "output tokens the server counted as reasoning", presence="added", since=1,
             source="usage.completion_tokens_details.reasoning_tokens"),
    RowField("reasoning_ms", "ms", "float", True,
             "the reasoning phase: first output to first content (null without reasoning "
             "chunks, or without content)", presence="added", since=1,
             inputs=("ttft_ms", "time_to_first_output_ms", "reasoning_chunks"),
             formula="ttft_ms − time_to_first_output_ms, where reasoning_chunks > 0",
             compute=lambda c: np.where(c["reasoning_chunks"] > 0,
                                        c["ttft_ms"] - c["time_to_first_output_ms"], np.nan),
             label="reasoning phase", percentiles="reasoning_{p}_ms", live=True, summary=True,
             **_LOWER),
    RowField("reasoning_tok_s", "tok/s", "float", True,
             "reasoning tokens per second of the reasoning phase (the first content token "
             "ends it; null unless usage splits reasoning tokens)", presence="added", since=1,
             inputs=("reasoning_tokens", "reasoning_ms"),
             formula="reasoning_tokens / (reasoning_ms / 1000)", compute=_reasoning_tok_s,
             label="reasoning decode", percentiles="reasoning_tok_s_{p}", summary=True,
             **_HIGHER),
    RowField("content_tok_s", "tok/s", "float", True,
             "content tokens after the first, per second after the first content (null "
             "unless usage splits reasoning tokens)", presence="added", since=1,
             inputs=("output_tokens", "reasoning_tokens", "visible_generation_ms"),
             formula="(output_tokens − reasoning_tokens − 1) / (visible_generation_ms / 1000)",
             compute=_content_tok_s, label="content decode", percentiles="content_tok_s_{p}",
             summary=True, **_HIGHER),
    RowField("step", "", "count", True,
             "the step of a stepped run in force when the request started (null in a run "
             "without steps)", presence="added", since=2,
             source="the run's step lines (steps.py)"),
    RowField("schedule_lag_ms", "ms", "duration", True,
             "how late the request was written after it was due: in an open-loop run, after "
             "its scheduled arrival; in a closed loop, after its user was free (the client's "
             "own delay)", presence="added", since=2,
             source="extra.start_delay_ns / 1e6 (start_ns − due)"),
    RowField("time_to_first_output_from_due_ms", "ms", "float", True,
             "time to first output counted from when the request was due, so a generator "
             "that falls behind its schedule cannot hide it", presence="added", since=2,
             inputs=("time_to_first_output_ms", "schedule_lag_ms"),
             formula="time_to_first_output_ms + schedule_lag_ms",
             compute=_from_due("time_to_first_output_ms"),
             label="time to first output from due",
             percentiles="time_to_first_output_from_due_{p}_ms", **_LOWER),
    RowField("e2e_from_due_ms", "ms", "float", True,
             "end to end counted from when the request was due", presence="added", since=2,
             inputs=("e2e_ms", "schedule_lag_ms"), formula="e2e_ms + schedule_lag_ms",
             compute=_from_due("e2e_ms"), label="end to end from due",
             percentiles="e2e_from_due_{p}_ms", **_LOWER),
    RowField("time_to_first_chunk_ms", "ms", "duration", True,
             "request written to the first SSE chunk of any kind, role-only included: what "
             "vLLM's server-side TTFT and its bench client measure (a reasoning parser may "
             "hide the first token; its chunk still arrives)", presence="added", since=3,
             stamps=("start_ns", "extra.first_chunk_ns"), label="time to first chunk",
             percentiles="time_to_first_chunk_{p}_ms", colour="#9467bd", **_LOWER),
    RowField("conversation_id", "", "count", True, "the conversation the request is a turn "
             "of: its first turn's request index (null without conversations)",
             presence="added", since=4, source="extra.conversation"),
    RowField("turn", "", "count", True, "the request's user turn in its conversation, or its "
             "turn in its agent session, from 1 (null without either)", presence="added",
             since=4, source="extra.turn"),
    RowField("history_tokens", "tok", "count", True, "the server's count of the previous "
             "turn's prompt, which begins this one's: the most a prefix cache can serve from "
             "the conversation (null on a first turn, or uncounted)", presence="added",
             since=4, source="extra.history_tokens"),
    RowField("start_offset_ms", "ms", "float", True, "the request's start after the run's "
             "header, on the master's clock: the steady-state verdict's time line (null "
             "without the header's anchor)", presence="added", since=5,
             source="(start_ns − header.perf_anchor_ns) / 1e6"),
    *(RowField(f"{k}_index", "", "count", True, f"the request's {k} in a mix: its position "
               f"in mix.{ks}, which names it (null: {none})", presence="added", since=6,
               source=f"extra.{k}_index") for k, ks, none in (("class", "classes", "no "
               "request classes"), ("model", "models", "the run's own model"))),
    *(RowField(name, "", "count", True, f"{words} (null outside an agent replay)",
               presence="added", since=7, source=f"extra.{key}") for name, key, words in (
        ("job_id", "job", "the agent job the request belongs to: the run's job number, in "
         "start order (the trace's job it replays: params.agent.job_ids[job_id % their "
         "count])"),
        ("session_id", "session", "the request's session (agent) in its job: its position "
         "among the job's sessions, the root 0"),
        ("parent_session_id", "parent_session", "the session that spawned the request's "
         "session, a position in its job (null for a root)"),
        ("depth", "depth", "the request's session's depth: the root 0, a sub-agent 1, its "
         "sub-agent 2"))),
    RowField("tool_wait_ms", "ms", "duration", True, "the tool wait the client slept before "
             "the request (its tool's recorded time ÷ --tool-speed, capped; 0: none; null outside "
             "an agent replay)", presence="added", since=7, source="extra.tool_wait_ns / 1e6"),
    RowField("join_wait_ms", "ms", "duration", True, "the time the request's turn waited "
             "for its sub-agents' joins after its tool or idle wait (0 when none; null outside "
             "an agent replay)", presence="added", since=7, source="extra.join_wait_ns / 1e6"),
    RowField("prefill_gate_wait_ms", "ms", "duration", True, "the time the request waited "
             "at the prefill gate (--prefill-concurrency) before it was sent: not in TTFT "
             "(counted from the send), in schedule_lag_ms and the from-due figures (null "
             "without a gate)", presence="added", since=8,
             source="extra.prefill_gate_wait_ns / 1e6"),
    RowField("replica", "", "count", True, "the replica the request was sent to (-H URL,URL; "
             "by request index): its position in the raw header's params.replicas (null with "
             "one host)", presence="added", since=9, source="extra.replica"),
    *(RowField(**row) for row in MEDIA_ROWS),  # images and audio as load (mediafields.py)
    RowField("check_passed", "", "count", True, "a check class's answer: 1 passed, 0 failed "
             "(null: not a check)", presence="added", since=11, source="extra.check_passed"),
)

BY_NAME: dict[str, RowField] = {f.name: f for f in ROW}
ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in ROW)  # the order rows are written in
DERIVED: tuple[RowField, ...] = tuple(f for f in ROW if f.derived)  # in dependency order
ADDED: frozenset[str] = frozenset(f.name for f in ROW if f.presence == "added")
# the added fields by generation: a file written before generation g lacks g and every later
ADDED_GENERATIONS: tuple[frozenset[str], ...] = tuple(
    frozenset(f.name for f in ROW if f.presence == "added" and f.since == g)
    for g in range(1, 1 + max((f.since for f in ROW), default=0)))
FLOAT_FIELDS = tuple(f.name for f in ROW if f.kind in ("duration", "float"))
COUNT_FIELDS = tuple(f.name for f in ROW if f.kind == "count" and not f.nullable
                     and f.presence == "always")
OPTIONAL_COUNT_FIELDS = tuple(f.name for f in ROW if f.kind == "count"
                              and (f.nullable or f.presence != "always"))
OUTPUT_TOKEN_SOURCES = ("usage", "chunks")


def absent_given(keys: Any) -> frozenset[str] | None:
    """The added fields rows with these `keys` lack (every generation from some point on, as
    in an older file), or None when the keys are no such cut."""
    missing = ADDED - set(keys)
    for g in range(len(ADDED_GENERATIONS) + 1):
        if missing == frozenset().union(*ADDED_GENERATIONS[g:]):
            return frozenset(missing)
    return None


def base_inputs(field: RowField) -> tuple[str, ...]:
    """The measured fields a derived field depends on, through other derived ones (what a
    verify message names), in row order."""
    seen: set[str] = set()
    todo = list(field.inputs)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(BY_NAME[name].inputs)
    return tuple(n for n in ROW_FIELDS if n in seen and not BY_NAME[n].derived)


def derive(columns: dict[str, Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The derived fields (`DERIVED`, except `skip`) of rows whose measured fields are in
    `columns` (float64, NaN for null), added to `columns` in dependency order; returns it."""
    with np.errstate(all="ignore"):
        for f in DERIVED:
            if f.name not in skip:
                columns[f.name] = f.compute(columns)  # type: ignore[misc]
    return columns


def timing_methodology() -> dict[str, str]:
    """The document's `timing_methodology`: the clock and each defining field's sentence."""
    out = {"clock": CLOCK_METHODOLOGY}
    out.update(f.methodology for f in ROW if f.methodology is not None)
    return dict(sorted(out.items()))


# --- aggregates ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One key of the `metrics` block: its unit, formula text and the row fields it reads
    (`stats.aggregate` computes it; `added` keys may be absent from older files); `better`
    as `RowField.better` (a percentile's is its field's)."""

    name: str
    unit: str
    formula: str
    inputs: tuple[str, ...]
    added: bool = False
    conditional: bool = False  # only in some runs (`goodput.py`), not `stats.aggregate`'s
    better: str | None = None


_GPU = "; only with gpus (the per_gpu block)"
# per GPU and per dollar: the run's own figures over its measured window (`wall_clock_ms`;
# a step's: its own), set by `post/pergpu.py` where the run names its GPUs
PER_GPU_AGGREGATES: tuple[Aggregate, ...] = (
    Aggregate("output_tok_s_per_gpu", "tok/s", f"throughput_tok_s / gpus{_GPU}",
              ("output_tokens",), added=True, conditional=True, better="higher"),
    Aggregate("requests_s_per_gpu", "req/s", "completed / (wall_clock_ms / 1000) / gpus"
              + _GPU, (), added=True, conditional=True, better="higher"),
    Aggregate("usd_per_m_output_tokens", "USD/Mtok", "gpu_hour_price_usd × gpus × "
              "(wall_clock_ms / 3600000) / output_tokens × 1e6: the window's GPU-hours all "
              f"charged to the output tokens; null without a price{_GPU}", ("output_tokens",),
              added=True, conditional=True, better="lower"),
    Aggregate("usd_per_m_input_tokens", "USD/Mtok", "gpu_hour_price_usd × gpus × "
              "(wall_clock_ms / 3600000) / prompt_tokens × 1e6: the same GPU-hours all "
              "charged to the prompt tokens (each figure on its own, as a price list's); null "
              f"without a price or prompt tokens{_GPU}", ("prompt_tokens",), added=True,
              conditional=True, better="lower"),
)


def _aggregates() -> tuple[Aggregate, ...]:
    out = [Aggregate(name, f.unit, f"nearest-rank p{p} of {f.name} over the rows that have "
                     "it", (f.name,), f.presence == "added", better=f.better)
           for f in ROW if f.percentiles
           for name, p in zip(f.percentile_names(), PERCENTILES, strict=True)]
    out += [
        Aggregate("output_tokens", "tok", "Σ output_tokens", ("output_tokens",)),
        Aggregate("prompt_tokens", "tok", "Σ prompt_tokens over the rows that have it",
                  ("prompt_tokens",)),
        Aggregate("reasoning_chunks", "chunks", "Σ reasoning_chunks", ("reasoning_chunks",)),
        Aggregate("content_chunks", "chunks", "Σ content_chunks", ("content_chunks",)),
        Aggregate("output_token_sources", "rows", "rows per output_token_source",
                  ("output_token_source",)),
        Aggregate("ttft_samples", "rows", "rows that have a ttft_ms", ("ttft_ms",)),
        Aggregate("prompt_token_samples", "rows", "rows that have a prompt_tokens",
                  ("prompt_tokens",)),
        Aggregate("throughput_tok_s", "tok/s", "output_tokens / (wall_clock_ms / 1000)",
                  ("output_tokens",), better="higher"),
        Aggregate("input_throughput_tok_s", "tok/s", "prompt_tokens / (wall_clock_ms / 1000), "
                  "null when no row has one", ("prompt_tokens",), added=True, better="higher"),
        Aggregate("content_chunks_s", "chunks/s",
                  "Σ content_chunks / fsum(visible_generation_ms / 1000) over the rows whose "
                  "output_token_source is \"chunks\" and that have a visible_generation_ms",
                  ("content_chunks", "visible_generation_ms", "output_token_source")),
        Aggregate("prefix_cache_hit_avg", "ratio",
                  "fsum(cached_tokens / prompt_tokens) / rows, over the rows that have "
                  "cached_tokens and a positive prompt_tokens",
                  ("cached_tokens", "prompt_tokens")),
        Aggregate("decode_tok_s_mean", "tok/s", "fsum(decode_tok_s) / rows, over the rows "
                  "that have it: tok/s per user, each request's own (InferenceX's "
                  "interactivity, 1 / TPOT)", ("output_tokens", "e2e_ms",
                                               "time_to_first_output_ms"),
                  added=True, better="higher"),
        Aggregate("decode_tok_s_weighted", "tok/s", "Σ (output_tokens − 1) / fsum(generation_ms"
                  " / 1000), over the rows that have a decode_tok_s: tok/s per user weighted "
                  "by each request's generation time (its time in flight after the first "
                  "output)", ("output_tokens", "e2e_ms", "time_to_first_output_ms"),
                  added=True, better="higher"),
        *PER_GPU_AGGREGATES,
        Aggregate("goodput_rps", "req/s",
                  "requests meeting every goodput criterion / (wall_clock_ms / 1000); only "
                  "when criteria were given (goodput.criteria)", (), added=True,
                  conditional=True, better="higher"),
    ]
    return tuple(out)


AGGREGATES: tuple[Aggregate, ...] = _aggregates()
AGGREGATES_BY_NAME: dict[str, Aggregate] = {a.name: a for a in AGGREGATES}
METRIC_KEYS: frozenset[str] = frozenset(a.name for a in AGGREGATES)
# the order in which tables show the fields (the phases of a request, then rates and sizes);
# which tables show a field is its `live` / `summary`
DISPLAY_ORDER = ("time_to_first_output_ms", "ttft_ms", "reasoning_ms", "e2e_ms", "generation_ms",
                 "decode_tok_s", "reasoning_tok_s", "content_tok_s",
                 "mean_inter_token_latency_ms", "effective_prefill_tok_s", "prompt_tokens")
_SHOWN = sorted((f for f in ROW if f.live or f.summary), key=lambda f: DISPLAY_ORDER.index(f.name))
LIVE_FIELDS: tuple[RowField, ...] = tuple(f for f in _SHOWN if f.live)
SUMMARY_FIELDS: tuple[RowField, ...] = tuple(f for f in _SHOWN if f.summary)


def describe() -> list[tuple[str, str, str, str]]:
    """`anvil metrics`: (block, name, unit, definition) per row field ("request_timings[]")
    and `metrics` key ("metrics"); a definition is a field's source or formula, then its
    description."""
    out = []
    for f in ROW:
        how = f.formula or f.source
        out.append(("request_timings[]", f.name, f.unit or "-", f"{how} — {f.description}"))
    for a in sorted(AGGREGATES, key=lambda a: a.name):
        out.append(("metrics", a.name, a.unit, a.formula))
    return out
