"""`anvil export --llm-d FILE`: a run as llm-d's Benchmark Report v0.2.1, so llm-d-benchmark's
tools and dashboards (llm-d-prism) set anvil's runs beside every other harness's.

The schema is llm-d-benchmark's own (Apache-2.0), at commit
8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36 of github.com/llm-d/llm-d-benchmark, in its folder
`llmdbenchmark/analysis/benchmark_report/`: the pydantic models
`llmdbenchmark/analysis/benchmark_report/schema_v0_2.py` and
`llmdbenchmark/analysis/benchmark_report/schema_v0_2_1.py` (v0.2 extended by the media
fields), the units `llmdbenchmark/analysis/benchmark_report/base.py`, and the JSON Schema
generated from them, `br_v0_2_1_json_schema.json` (vendored for the tests under
`tests/fixtures/llmd/`). Its tools read a report as JSON or YAML alike
(`import_benchmark_report` in `llmdbenchmark/analysis/benchmark_report/core.py` loads
either with `yaml.safe_load`), so this writes JSON, as their `export_json` does: no YAML
library needed.

Why one table (`MAPPING`): each schema field is filled BY DEFINITION from one anvil figure,
or left out with its reason, and the README's table is rendered from the same rows
(`markdown_table`), so the code and the manual cannot disagree. A field without a value (no
row has the figure) is left out, never 0: the schema's `Statistics` needs a `mean`.

A `Statistics` of a row field is over the completed requests that have it: `mean`, `stddev`
(population, ddof 0), `min`, `max` and the percentiles `p0p1` … `p99p9` by anvil's own
nearest rank (rank ⌈q·n⌉ of the sorted values, q in thousandths so p0.1 and p99.9 are
exact), so `p50`/`p95` equal the benchmark's `metrics` figures; times in s (ms / 1000),
per-token times in s/token. A sweep (`steps`) is one report per step, as llm-d's converter
writes a several-benchmark file: `FILE`'s stem + `_<i>` + its suffix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics.post.derive import RowColumns

VERSION = "0.2.1"
AGG = "results.request_performance.aggregate."
# the schema's percentile keys and their rank in thousandths
PERCENTILE_KEYS = (("p0p1", 1), ("p1", 10), ("p5", 50), ("p10", 100), ("p25", 250),
                   ("p50", 500), ("p75", 750), ("p90", 900), ("p95", 950), ("p99", 990),
                   ("p99p9", 999))


@dataclass(frozen=True)
class Scope:
    """What one report covers: the run, or one step of a sweep."""

    uid: str
    eid: str | None  # the run's id, for a sweep's steps
    model: str | None
    started_at: str | None
    finished_at: str | None
    rows: RowColumns
    mask: Any  # bool per row: the rows of this scope
    metrics: dict[str, Any]
    wall_s: float | None
    requests: int | None
    completed: int | None
    failed: int | None

    def values(self, name: str) -> Any:
        """Row field `name` over this scope's rows, NaN for null (an all-NaN column when
        the file has no such field)."""
        if name in self.rows.absent:
            return np.full(int(self.mask.sum()), np.nan)
        return self.rows.values(name)[self.mask]

    def per_s(self, x: float | None) -> float | None:
        return None if x is None or not self.wall_s else x / self.wall_s


def _ntpot(s: Scope) -> Any:
    out = s.values("output_tokens")
    return np.where(out >= 1, s.values("e2e_ms") / np.where(out >= 1, out, 1), np.nan)


def _sum(s: Scope, name: str) -> float | None:
    v = s.values(name)
    return None if np.isnan(v).all() else float(np.nansum(v))


def _total_rate(s: Scope) -> float | None:
    i, o = s.metrics.get("input_throughput_tok_s"), s.metrics.get("throughput_tok_s")
    return None if i is None or o is None else i + o


@dataclass(frozen=True)
class Mapping:
    """One schema field: `path` under the report; `source`, the anvil figure in words;
    `how`, the conversion or why it is left out. `units`: the schema's units where it is
    filled from a figure. `column`: a Statistics of these per-request values, each divided by
    `divisor`; `figure`: a Statistics holding only its `mean`; `value`: the field's value as
    it is. A row with none of the three is left out (`how` says why)."""

    path: str
    source: str
    how: str
    units: str | None = None
    column: Callable[[Scope], Any] | None = None
    divisor: float = 1.0
    figure: Callable[[Scope], float | None] | None = None
    value: Callable[[Scope], Any] | None = None

    @property
    def left_out(self) -> bool:
        return self.column is None and self.figure is None and self.value is None


def _row(name: str) -> Callable[[Scope], Any]:
    return lambda s: s.values(name)


def _metric(name: str) -> Callable[[Scope], float | None]:
    return lambda s: s.metrics.get(name)


OUT = "left out: "
MAPPING: tuple[Mapping, ...] = (
    Mapping("version", "", "`0.2.1`", value=lambda s: VERSION),
    Mapping("run.uid", "`run_id`", "a sweep's step: `<run_id>-step<i>`",
            value=lambda s: s.uid),
    Mapping("run.eid", "`run_id`", "a sweep's steps only: one experiment, several reports",
            value=lambda s: s.eid),
    Mapping("run.description", "`model`, `run_id`",
            "`<model> [<uid>]`, the label llm-d's converter writes",
            value=lambda s: f"{s.model} [{s.uid}]"),
    Mapping("run.time.start", "`started_at`", "the run's stamp (a step: left out, anvil "
            "stamps a step by offsets only)", value=lambda s: s.started_at),
    Mapping("run.time.end", "`finished_at`", "as `run.time.start`",
            value=lambda s: s.finished_at),
    Mapping("run.time.duration", "`wall_clock_ms`; a step's `ended_s − started_s`",
            "ISO-8601 `PT<s>S`",
            value=lambda s: None if s.wall_s is None else f"PT{round(s.wall_s, 9)!r}S"),
    Mapping("run.cid, run.pid, run.user, run.keywords", "", OUT + "anvil records none"),
    Mapping("scenario", "", OUT + "its load block requires the generator's version and a "
            "typed input-length distribution, which a benchmark.json does not record"),
    Mapping(AGG + "requests.total", "`requests`", "measured requests, completed + failed",
            value=lambda s: s.requests),
    Mapping(AGG + "requests.failures", "`failed`", "measured requests that failed",
            value=lambda s: s.failed),
    Mapping(AGG + "requests.incomplete", "", OUT + "`failed` already counts every measured "
            "request that did not complete (cancelled ones included)"),
    Mapping(AGG + "requests.input_length", "`prompt_tokens`", "per request", "count",
            column=_row("prompt_tokens")),
    Mapping(AGG + "requests.output_length", "`output_tokens`", "per request", "count",
            column=_row("output_tokens")),
    Mapping(AGG + "requests.request_size", "`request_bytes`", "per request (a mix only)",
            "bytes", column=_row("request_bytes")),
    Mapping(AGG + "requests.multimodal.image.count", "`media_images`", "per request",
            "count", column=_row("media_images")),
    Mapping(AGG + "requests.multimodal.audio.count", "`media_audio_clips`", "per request",
            "count", column=_row("media_audio_clips")),
    Mapping(AGG + "requests.multimodal.*.filesize, pixels, aspect_ratio, duration; "
            "video", "", OUT + "anvil records no size per media instance, and sends no "
            "video"),
    Mapping(AGG + "latency.time_to_first_token", "`time_to_first_output_ms`",
            "ms / 1000: the first token generated, reasoning included (`ttft_ms` is the "
            "first content; a first chunk may carry no token)", "s",
            column=_row("time_to_first_output_ms"), divisor=1000.0),
    Mapping(AGG + "latency.normalized_time_per_output_token", "`e2e_ms / output_tokens`",
            "ms / 1000, requests with an output token", "s/token", column=_ntpot,
            divisor=1000.0),
    Mapping(AGG + "latency.time_per_output_token", "`mean_inter_token_latency_ms`",
            "ms / 1000: (latency − first token) / (output − 1), the schema's TPOT",
            "s/token", column=_row("mean_inter_token_latency_ms"), divisor=1000.0),
    Mapping(AGG + "latency.inter_token_latency", "", OUT + "anvil keeps the gaps between "
            "chunks, and a chunk may carry several tokens"),
    Mapping(AGG + "latency.request_latency", "`e2e_ms`", "ms / 1000", "s",
            column=_row("e2e_ms"), divisor=1000.0),
    Mapping(AGG + "throughput.input_token_rate", "`metrics.input_throughput_tok_s`",
            "`mean` only", "tokens/s", figure=_metric("input_throughput_tok_s")),
    Mapping(AGG + "throughput.output_token_rate", "`metrics.throughput_tok_s`",
            "`mean` only", "tokens/s", figure=_metric("throughput_tok_s")),
    Mapping(AGG + "throughput.total_token_rate", "the two above", "their sum (one wall "
            "clock)", "tokens/s", figure=_total_rate),
    Mapping(AGG + "throughput.request_rate", "`completed / (wall_clock_ms / 1000)`",
            "`mean` only", "queries/s", figure=lambda s: s.per_s(s.completed)),
    Mapping(AGG + "throughput.image_rate", "`Σ media_images / (wall_clock_ms / 1000)`",
            "`mean` only", "images/s", figure=lambda s: s.per_s(_sum(s, "media_images"))),
    Mapping(AGG + "throughput.audio_rate", "`Σ media_audio_clips / (wall_clock_ms / 1000)`",
            "`mean` only", "audios/s",
            figure=lambda s: s.per_s(_sum(s, "media_audio_clips"))),
    Mapping(AGG + "throughput.video_rate", "", OUT + "anvil sends no video"),
    Mapping("Statistics.mode", "", OUT + "no mode of continuous values is defined"),
    Mapping("results.request_performance.time_series", "", OUT + "anvil keeps "
            "per-request rows, not sampled series"),
    Mapping("results.session_performance", "", OUT + "the schema's sessions are "
            "inference-perf's lifecycle; anvil's conversations are not defined alike"),
    Mapping("results.observability", "", OUT + "its `Statistics` need a mean; the `server` "
            "block keeps p50 and max of the gauges, and a component needs `scenario`"),
    Mapping("results.profiling, results.component_health", "", OUT + "anvil records none"),
)


def statistics(values: Any, units: str, divisor: float = 1.0) -> dict[str, Any] | None:
    """The schema's `Statistics` of the non-NaN `values` (module docstring); None without
    any."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    v = v[~np.isnan(v)] / divisor
    n = len(v)
    if not n:
        return None
    out: dict[str, Any] = {"units": units, "mean": float(np.mean(v)),
                           "stddev": float(np.std(v)), "min": float(v[0])}
    for key, per_mille in PERCENTILE_KEYS:
        out[key] = float(v[max(1, (per_mille * n + 999) // 1000) - 1])
    out["max"] = float(v[-1])
    return out


def _put(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        doc = doc.setdefault(key, {})
    doc[last] = value


def report(scope: Scope) -> dict[str, Any]:
    """The Benchmark Report of one scope: every `MAPPING` row with a value, in order."""
    doc: dict[str, Any] = {}
    for m in MAPPING:
        if m.column is not None:
            value = statistics(m.column(scope), m.units or "", m.divisor)
        elif m.figure is not None:
            x = m.figure(scope)
            value = None if x is None else {"units": m.units, "mean": float(x)}
        elif m.value is not None:
            value = m.value(scope)
        else:
            continue
        if value is not None:
            _put(doc, m.path, value)
    return doc


def scopes(doc: dict[str, Any], rows: RowColumns) -> list[Scope]:
    """The run as one scope, or a sweep as one per step (rows by their `step`)."""
    run_id = doc.get("run_id")
    common = {"model": doc.get("model"), "rows": rows}
    steps = doc.get("steps") or []
    if not steps:
        wall_ms = doc.get("wall_clock_ms")
        return [Scope(uid=str(run_id), eid=None, started_at=doc.get("started_at"),
                      finished_at=doc.get("finished_at"), mask=np.ones(len(rows), bool),
                      metrics=doc.get("metrics") or {},
                      wall_s=None if wall_ms is None else wall_ms / 1000.0,
                      requests=doc.get("requests"), completed=doc.get("completed"),
                      failed=doc.get("failed"), **common)]
    step_of = rows.values("step")
    return [Scope(uid=f"{run_id}-step{st['step']}", eid=str(run_id), started_at=None,
                  finished_at=None, mask=step_of == st["step"], metrics=st.get("metrics") or {},
                  wall_s=st["ended_s"] - st["started_s"], requests=st.get("requests"),
                  completed=st.get("completed"), failed=st.get("failed"), **common)
            for st in steps]


def llmd_reports(doc: dict[str, Any], rows: RowColumns) -> list[dict[str, Any]]:
    """The run's Benchmark Reports: one, or one per step of a sweep."""
    return [report(s) for s in scopes(doc, rows)]


def report_paths(path: str | Path, n: int) -> list[Path]:
    """Where `n` reports go: `path` itself for one, else llm-d's `<stem>_<i><suffix>`."""
    p = Path(path)
    return [p] if n == 1 else [p.with_name(f"{p.stem}_{i}{p.suffix}") for i in range(n)]


def markdown_table() -> str:
    """The README's table of `MAPPING`, one line per row."""
    lines = ["| llm-d field | anvil figure | how |", "|---|---|---|"]
    for m in MAPPING:
        path = m.path.replace(AGG, "aggregate.")
        unit = f" ({m.units})" if m.units else ""
        lines.append(f"| `{path}`{unit} | {m.source or '—'} | {m.how} |")
    return "\n".join(lines)
