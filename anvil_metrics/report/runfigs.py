"""A run's pictures: latency CDFs, prefill against prompt size, decode rates, the
per-request timeline, load over time, the client's health and the server's own series;
for a stepped run (a sweep), each figure against the load of its steps.

Why from the raw file: the timeline and the series over time need each request's stamps,
which `benchmark.json` does not hold. So the run is rebuilt from `requests.jsonl` exactly
as `anvil postprocess` builds it (`postprocess.build_run`: the catalogue's formulas, the
measured records in `benchmark.measured_order`'s order), and its `metrics` must equal the
folder's `benchmark.json`'s, bit for bit — else the report is refused: the pictures show
the figures `anvil verify` checks, or none. Stamps are placed on the master's clock with
each worker's measured offset, as the document's `wall_clock_ms` is.

Every array here is a numpy column of the measured requests; nothing makes a Python object
per request (a run of 100k requests is drawn in a few seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.errors import UsageError
from anvil_metrics.load.criteria import Criterion, parse_criteria
from anvil_metrics.post.benchmark import measured_order
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.docscan import scan_benchmark
from anvil_metrics.post.postprocess import BENCHMARK_FILE, RAW_FILE, build_run
from anvil_metrics.post.rawcolumns import COL, NULL
from anvil_metrics.report import draw
from anvil_metrics.report.draw import COLOURS
from anvil_metrics.report.frontier import frontier_section, sweep_curve
from anvil_metrics.report.jobsfigs import jobs_section, read_jobs, verdict_text
from anvil_metrics.report.page import Figure, Section, Table, cell
from anvil_metrics.telemetry.livegauges import live_gauges
from anvil_metrics.telemetry.servermetrics import SAMPLES_FILE, read_samples

LATENCIES = ("time_to_first_output_ms", "ttft_ms", "e2e_ms", "time_to_first_chunk_ms")
FAILURE_MARKERS = ("x", "v", "s", "D", "^", "P", "*", "<", ">", "o")


@dataclass(frozen=True, slots=True)
class RunData:
    """A run rebuilt from its raw file. Times are seconds after the run's header
    (`perf_anchor_ns`), on the master's clock; per measured request, in document order
    (`request_index`), NaN where a stamp is missing.

    - `rows`: the completed requests' rows (columns), `row_at`: their positions among the
      measured requests;
    - `failed`, `failure_kind`: per measured request (kind "" for a completed one);
    - `samples`: the server's metrics samples (`server_metrics.jsonl`), or None.
    """

    folder: Path
    doc: dict[str, Any]
    rows: RowColumns
    row_at: Any
    start_s: Any
    first_output_s: Any
    first_content_s: Any
    end_s: Any
    failed: Any
    failure_kind: Any
    output_tokens: Any  # per measured request; NaN for a failed one
    samples: list[dict[str, Any]] | None
    t0_ns: int
    sources: tuple[str, ...]


def load_run(folder: Path) -> RunData:
    """Rebuild the run in `folder`; refuse (UsageError) one whose `benchmark.json` disagrees."""
    raw, built = build_run(folder)
    doc = built.doc
    bench = folder / BENCHMARK_FILE
    sources = [RAW_FILE]
    if bench.exists():
        sources.append(BENCHMARK_FILE)
        written = scan_benchmark(bench).doc
        # a file written before anvil had a figure lacks its key; every key it has must hold
        # the value the raw file gives, bit for bit
        held = written.get("metrics") if isinstance(written.get("metrics"), dict) else {}
        if any(key not in doc["metrics"] or doc["metrics"][key] != value
               for key, value in held.items()) or written.get("requests") != doc["requests"]:
            raise UsageError(
                f"{bench}: its metrics differ from those {RAW_FILE} gives; the report draws "
                f"only figures anvil verify checks: run `anvil postprocess {folder}` (or "
                f"`anvil verify {bench}`) first")
    m = measured_order(raw)
    t = raw.table[m.order]
    offset = m.offset_ns[m.order]
    anchor = raw.header.get("perf_anchor_ns")
    t0 = int(anchor) if type(anchor) is int else (
        int((t[:, COL["start_ns"]] + offset).min()) if len(t) else 0)

    def seconds(name: str) -> Any:
        v = t[:, COL[name]]
        out = (v + offset - t0).astype(np.float64) / 1e9
        out[v == NULL] = np.nan
        return out

    failed = t[:, COL["failed"]] != 0
    kinds = np.full(len(t), "", dtype=object)
    for i in np.flatnonzero(failed).tolist():
        kinds[i] = raw.failures[int(m.order[i])][0]
    out_tokens = np.full(len(t), np.nan)
    row_at = np.flatnonzero(~failed)
    out_tokens[row_at] = built.rows.values("output_tokens")
    samples = read_samples(folder / SAMPLES_FILE)
    if samples is not None:
        sources.append(SAMPLES_FILE)
    return RunData(folder, doc, built.rows, row_at, seconds("start_ns"),
                   seconds("first_output_ns"), seconds("first_content_ns"), seconds("end_ns"),
                   failed, kinds, out_tokens, samples, t0, tuple(sources))


# -- the figures -----------------------------------------------------------------------------


def _label(name: str) -> str:
    return catalog.BY_NAME[name].long_label


def _pcts(doc: dict[str, Any], name: str) -> list[tuple[str, float | None]]:
    names = catalog.BY_NAME[name].percentile_names()
    return [(f"p{p}", doc["metrics"].get(key)) for p, key in
            zip(catalog.PERCENTILES, names, strict=True)]


def latency_cdf(d: RunData) -> Figure:
    fig, axes = draw.new()
    ax = axes[0][0]
    shown = [n for n in LATENCIES if n not in d.rows.absent
             and np.isfinite(d.rows.values(n)).any()]
    spread = [draw.present(d.rows.values(n)) for n in shown]
    for name in shown:
        draw.cdf(ax, d.rows.values(name), _label(name), COLOURS[name])
        draw.mark_percentiles(ax, _pcts(d.doc, name), COLOURS[name], catalog.PERCENTILES)
    if not shown:
        draw.no_data(ax, "no completed request")
    else:
        low = min(float(v.min()) for v in spread if len(v))
        high = max(float(v.max()) for v in spread if len(v))
        if low > 0 and high / low > 100:
            ax.set_xscale("log")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of completed requests")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right")
    return draw.finish(fig, "latency-cdf.png", "Latency CDFs",
                       "Empirical CDFs over the completed requests; dots are the document's "
                       "nearest-rank p50 and p95 (metrics.*_p50_ms, *_p95_ms).", d.sources)


def prefill(d: RunData) -> Figure:
    fig, axes = draw.new(ncols=2)
    x = d.rows.values("prompt_tokens")
    if not np.isfinite(x).any():
        x, xlabel = d.rows.values("planned_context_tokens"), "planned prompt tokens"
    else:
        xlabel = "prompt tokens (usage.prompt_tokens)"
    for ax, name in zip(axes[0], ("ttft_ms", "effective_prefill_tok_s"), strict=True):
        y = d.rows.values(name)
        ok = np.isfinite(x) & np.isfinite(y)
        if not ok.any():
            draw.no_data(ax, f"no {name}")
            continue
        ax.plot(x[ok], y[ok], ".", markersize=3, alpha=0.35, color=COLOURS[name],
                rasterized=True)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_label(name))
        ax.set_title(f"{catalog.BY_NAME[name].label or name} vs prompt size")
    return draw.finish(fig, "prefill.png", "Time to first token and effective prefill vs "
                       "prompt size", "One dot per completed request; effective prefill "
                       "counts queueing (prompt tokens / time to first output).", d.sources)


def decode(d: RunData) -> Figure:
    fig, axes = draw.new(ncols=2)
    for ax, name in zip(axes[0], ("decode_tok_s", "mean_inter_token_latency_ms"),
                        strict=True):
        v = draw.present(d.rows.values(name))
        if not len(v):
            draw.no_data(ax, f"no {name}")
            continue
        ax.hist(v, bins=min(80, max(10, int(np.sqrt(len(v))))), color=COLOURS[name],
                alpha=0.8)
        for (text, value), style in zip(_pcts(d.doc, name), ("-", "--"), strict=True):
            if value is not None:
                ax.axvline(value, color="#222222", linestyle=style, linewidth=1,
                           label=f"{text} {value:,.2f}")
        ax.set_xlabel(_label(name))
        ax.set_ylabel("requests")
        ax.legend()
    return draw.finish(fig, "decode.png", "Decode rate and inter-token latency",
                       "Distributions over the completed requests, with the document's p50 "
                       "(solid) and p95 (dashed).", d.sources)


def timeline(d: RunData) -> Figure:
    fig, axes = draw.new(draw.TALL)
    ax = axes[0][0]
    n = len(d.start_s)
    if not n:
        draw.no_data(ax, "no measured request")
    else:
        y = np.arange(n)
        lw = 1.5 if n <= 200 else max(0.6, 300 / n)
        mark = 4 if n <= 2000 else 2
        end = np.where(np.isfinite(d.end_s), d.end_s, d.start_s)
        first = np.where(np.isfinite(d.first_output_s), d.first_output_s, end)
        content = np.where(np.isfinite(d.first_content_s), d.first_content_s, end)
        ok = ~d.failed
        draw.segments(ax, y[ok], d.start_s[ok], first[ok], color="#bbbbbb", linewidth=lw,
                      label="start → first output (queue, prefill)")
        draw.segments(ax, y[ok], first[ok], np.maximum(first[ok], content[ok]),
                      color="#9467bd", linewidth=lw,
                      label="first output → first content (reasoning)")
        draw.segments(ax, y[ok], content[ok], end[ok], color="#2ca02c", linewidth=lw,
                      label="first content → end")
        if d.failed.any():
            draw.segments(ax, y[d.failed], d.start_s[d.failed], end[d.failed],
                          color=COLOURS["failure"], linewidth=lw, alpha=0.6)
            for i, kind in enumerate(sorted(set(d.failure_kind[d.failed].tolist()))):
                at = d.failed & (d.failure_kind == kind)
                ax.plot(end[at], y[at], FAILURE_MARKERS[i % len(FAILURE_MARKERS)],
                        color=COLOURS["failure"], markersize=mark, alpha=0.7,
                        label=f"failed: {kind} ({int(at.sum())})")
        ax.set_xlabel("seconds since the run started")
        ax.set_ylabel("request_index")
        ax.set_ylim(n, -1)
        legend = ax.legend(loc="lower left", fontsize=7, markerscale=4 / mark)
        for handle in legend.legend_handles:
            if handle is not None and handle.get_linestyle() not in ("None", "none"):
                handle.set_linewidth(2)
    return draw.finish(fig, "timeline.png", "Every request on one time line",
                       "One line per measured request (request_index down the page): grey "
                       "until its first output, purple while it reasoned, green while content "
                       "streamed; failures in red, marked by kind at the moment they failed.",
                       d.sources)


def _in_flight(d: RunData) -> tuple[Any, Any]:
    """(times, requests in flight just after each): +1 at each start, −1 at each end."""
    start = d.start_s[np.isfinite(d.start_s)]
    end = d.end_s[np.isfinite(d.end_s)]
    t = np.concatenate((start, end))
    step = np.concatenate((np.ones(len(start)), -np.ones(len(end))))
    by = np.lexsort((step, t))  # at one instant, ends before starts
    return t[by], np.cumsum(step[by])


def load_over_time(d: RunData) -> Figure:
    fig, axes = draw.new(draw.TALL, nrows=2, sharex=True)
    ax1, ax2 = axes[0][0], axes[1][0]
    if not np.isfinite(d.start_s).any():
        draw.no_data(ax1, "no measured request")
        draw.no_data(ax2, "no measured request")
    else:
        t, flight = _in_flight(d)
        ax1.step(t, flight, where="post", color=COLOURS["in_flight"], linewidth=1)
        ax1.set_ylabel("requests in flight")
        ended = np.isfinite(d.end_s)
        horizon = float(np.nanmax(np.where(ended, d.end_s, d.start_s)))
        edges = np.arange(0.0, np.floor(horizon) + 2.0)
        done = ended & ~d.failed
        tokens, _ = np.histogram(d.end_s[done], bins=edges, weights=d.output_tokens[done])
        count, _ = np.histogram(d.end_s[done], bins=edges)
        ax2.stairs(tokens, edges, color=COLOURS["throughput"], label="output tok/s")
        ax2.set_ylabel("output tokens per second")
        twin = ax2.twinx()
        twin.stairs(count, edges, color="#7f7f7f", linewidth=0.8,
                    label="completed requests/s")
        twin.set_ylabel("completed requests per second")
        twin.grid(False)
        ax2.set_xlabel("seconds since the run started")
        for step in d.doc.get("steps") or []:
            for ax in (ax1, ax2):
                ax.axvline(step["started_s"], color="#999999", linestyle=":", linewidth=0.8)
        ax2.legend(loc="upper left")
        twin.legend(loc="upper right")
    return draw.finish(fig, "load-over-time.png", "Requests in flight and throughput",
                       "In flight: measured requests started and not yet ended. Throughput: "
                       "the output tokens (and count) of the requests that completed in each "
                       "second; dotted lines mark a sweep's steps.", d.sources)


def client_health(d: RunData) -> Figure:
    fig, axes = draw.new(ncols=2)
    ax1, ax2 = axes[0]
    lag = d.rows.values("schedule_lag_ms") if "schedule_lag_ms" not in d.rows.absent else None
    starts = d.start_s[d.row_at]
    if lag is not None and np.isfinite(lag).any():
        ok = np.isfinite(lag)
        ax1.plot(starts[ok], lag[ok], ".", markersize=3, alpha=0.4, color="#1f77b4",
                 rasterized=True)
        ax1.set_ylabel("schedule lag (ms): start − due")
        ax1.set_xlabel("seconds since the run started")
        ax1.set_title("how late each request was written")
    else:
        draw.no_data(ax1, "no schedule_lag_ms in this run's records")
    client = d.doc.get("client") or {}
    lagms = client.get("loop_lag_ms") or {}
    stalls = lagms.get("stalls") or []
    if stalls:
        at = [s[0] for s in stalls]
        ms = [s[1] for s in stalls]
        ax2.plot(at, ms, "v", color=COLOURS["failure"], label="event-loop stalls")
        ax2.set_xlabel("seconds since the run started")
        ax2.set_ylabel("stall (ms)")
        ax2.legend()
    else:
        ax2.set_xticks([])
        ax2.set_yticks([])
    lines = [f"verdict: {client.get('verdict')}", f"saturated: {client.get('saturated')}",
             f"CPU: {cell(client.get('cpu_pct'))} % of one core",
             f"loop lag p50 / p99 / max: {cell(lagms.get('p50'))} / {cell(lagms.get('p99'))} "
             f"/ {cell(lagms.get('max'))} ms", f"stalls recorded: {len(stalls)}",
             f"achieved concurrency: {cell(client.get('achieved_concurrency'))}"]
    ax2.text(0.02, 0.98, "\n".join(lines), transform=ax2.transAxes, va="top", fontsize=8,
             family="monospace")
    ax2.set_title("load generator's own health (benchmark.json client)")
    return draw.finish(fig, "client-health.png", "Is the load generator keeping up?",
                       "Left: each request's schedule lag (rows' schedule_lag_ms). Right: the "
                       "run's client block — event-loop lag, stalls, CPU.", d.sources)


def server_series(d: RunData) -> Figure | None:
    ok = [s for s in d.samples or [] if s.get("ok")]
    if len(ok) < 2:
        return None
    t = np.array([(s["done_ns"] - d.t0_ns) / 1e9 for s in ok])
    gauges = [live_gauges(ok[max(0, i - 1):i + 1], s["done_ns"]) or {}
              for i, s in enumerate(ok)]

    def series(key: str) -> Any:
        return np.array([np.nan if g.get(key) is None else float(g[key]) for g in gauges])

    fig, axes = draw.new(draw.TALL, nrows=3, sharex=True)
    for ax, keys, ylabel in ((axes[0][0], ("requests_running", "requests_waiting"), "requests"),
                             (axes[1][0], ("kv_cache_usage",), "KV cache used (fraction)"),
                             (axes[2][0], ("acceptance_rate",), "draft acceptance")):
        drawn = False
        for key in keys:
            v = series(key)
            if np.isfinite(v).any():
                ax.plot(t, v, ".-", markersize=3, linewidth=1, label=key)
                drawn = True
        if drawn:
            ax.set_ylabel(ylabel)
            ax.legend(loc="upper right")
        else:
            draw.no_data(ax, f"the server reported no {' / '.join(keys)}", keep_x=True)
    axes[2][0].set_xlabel("seconds since the run started")
    engine = gauges[-1].get("engine")
    return draw.finish(fig, "server.png", f"What the server said ({engine or 'unknown engine'})",
                       "Its /metrics, sampled during the run (server_metrics.jsonl) on the "
                       "run's clock; acceptance over each pair of samples' counters.",
                       (SAMPLES_FILE,))


def steps_figure(d: RunData) -> Figure | None:
    steps = d.doc.get("steps") or []
    if not steps:
        return None
    by = "rate" if any(s.get("rate") is not None for s in steps) else "users"
    x = np.array([np.nan if s.get(by) is None else float(s[by]) for s in steps])
    fig, axes = draw.new(draw.TALL, ncols=2, nrows=2)

    def metric(key: str) -> Any:
        return np.array([np.nan if (s.get("metrics") or {}).get(key) is None
                         else float(s["metrics"][key]) for s in steps])

    criteria = {c.field: c for c in slo_criteria(d.doc)}
    for ax, name in ((axes[0][0], "ttft_ms"), (axes[0][1], "e2e_ms"),
                     (axes[1][0], "decode_tok_s")):
        for key, style in zip(catalog.BY_NAME[name].percentile_names(), ("o-", "s--"),
                              strict=True):
            ax.plot(x, metric(key), style, color=COLOURS[name], label=key)
        if name in criteria:
            ax.axhline(criteria[name].limit, color=COLOURS["slo"], linestyle=":",
                       label=f"goodput criterion: {criteria[name].text()}")
        ax.set_xlabel(by)
        ax.set_xticks(x[np.isfinite(x)])
        ax.set_ylabel(_label(name))
        ax.legend()
    ax = axes[1][1]
    ax.plot(x, metric("throughput_tok_s"), "o-", color=COLOURS["throughput"],
            label="throughput_tok_s")
    ax.set_ylabel("output tok/s")
    ax.set_xlabel(by)
    ax.set_xticks(x[np.isfinite(x)])
    good = np.array([np.nan if s.get("goodput_rps") is None else float(s["goodput_rps"])
                     for s in steps])
    if np.isfinite(good).any():
        twin = ax.twinx()
        twin.plot(x, good, "s--", color="#7f7f7f", label="goodput_rps")
        twin.set_ylabel("goodput (requests/s meeting every criterion)")
        twin.grid(False)
        twin.legend(loc="lower right")
    ax.legend(loc="upper left")
    return draw.finish(fig, "steps.png", f"Each figure against the load ({by})",
                       "One point per step of the sweep (benchmark.json steps[]); a request "
                       "belongs to the step in force when it started.", (BENCHMARK_FILE,))


def slo_criteria(doc: dict[str, Any]) -> tuple[Criterion, ...]:
    """The run's goodput criteria (its SLO lines), as the document states them."""
    texts = (doc.get("goodput") or {}).get("criteria")
    return parse_criteria(texts, flag="goodput.criteria") if texts else ()


def steps_table(d: RunData) -> Table:
    steps = d.doc.get("steps") or []
    keys = ("ttft_p50_ms", "ttft_p95_ms", "e2e_p95_ms", "throughput_tok_s")
    rows = []
    for s in steps:
        load = f"{s['rate']:g} req/s" if s.get("rate") is not None else f"{s.get('users')} users"
        m = s.get("metrics") or {}
        rows.append((str(s["step"]), load, f"{s['started_s']:.2f}–{s['ended_s']:.2f}",
                     str(s["requests"]), str(s["completed"]), str(s["failed"]),
                     *(cell(m.get(k)) for k in keys), cell(s.get("goodput_rps"))))
    return Table("Steps", ("step", "load", "seconds", "requests", "completed", "failed",
                           *keys, "goodput_rps"), tuple(rows))


def key_table(d: RunData) -> Table:
    rows = []
    for f in catalog.SUMMARY_FIELDS or catalog.LIVE_FIELDS:
        if f.name in d.rows.absent:
            continue
        values = [d.doc["metrics"].get(k) for k in f.percentile_names()]
        rows.append((f.label or f.name, f.unit or "-", *(cell(v) for v in values)))
    m = d.doc["metrics"]
    rows.append(("throughput (output)", "tok/s", cell(m.get("throughput_tok_s")), ""))
    return Table("Figures (benchmark.json metrics)",
                 ("figure", "unit", *(f"p{p}" for p in catalog.PERCENTILES)), tuple(rows),
                 note="nearest-rank percentiles over the completed requests' rows")


def run_sections(d: RunData) -> list[Section]:
    doc = d.doc
    failures: dict[str, int] = {}
    for kind in d.failure_kind[d.failed].tolist():
        failures[kind] = failures.get(kind, 0) + 1
    counts = Table("Requests", ("requests", "completed", "failed", "failed by kind",
                                "warm-up", "wall clock (s)"),
                   ((str(doc["requests"]), str(doc["completed"]), str(doc["failed"]),
                     ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "-",
                     str(doc["warmup_requests"]),
                     cell(None if doc["wall_clock_ms"] is None
                          else doc["wall_clock_ms"] / 1000)),))
    out = []
    steps = steps_figure(d)
    if steps is not None:
        out.append(Section("The sweep", "Each step's figures from benchmark.json steps[].",
                           tables=(steps_table(d),), figures=(steps,)))
        out.append(frontier_section([sweep_curve(doc, d.rows, doc["run_id"])],
                                    list(d.sources)))
    jobs = jobs_section(doc.get("jobs"))  # an agent replay's (`jobsfigs.py`)
    if jobs is not None:
        out.append(jobs)
    out.append(Section("Latency", tables=(counts, key_table(d)),
                       figures=(latency_cdf(d), prefill(d), decode(d))))
    out.append(Section("Over time", figures=(timeline(d), load_over_time(d))))
    health = [client_health(d)]
    server = server_series(d)
    if server is not None:
        health.append(server)
    out.append(Section("Client and server", figures=tuple(health)))
    return out


def run_page(folder: Path) -> tuple[str, str, list[str], list[Section], list[str]]:
    """(kind, title, lines under it, sections, source files) of a run's report."""
    d = load_run(folder)
    doc = d.doc
    kind = "sweep" if doc.get("steps") else "run"
    load = doc.get("load") or {}
    lines = [f"{doc.get('model') or 'unknown model'} at {doc.get('base_url') or '?'} "
             f"(engine {doc.get('engine') or 'unknown'}); {doc.get('measurement_protocol')} "
             f"protocol; started {doc.get('started_at')}, finished {doc.get('finished_at')}"
             + (" (partial)" if doc.get("partial") else ""),
             f"load: {load.get('mode') or 'budget'}"
             + (f", {len(doc['steps'])} steps" if doc.get("steps") else "")
             + f"; concurrency {doc.get('concurrency')}; {doc['requests']} measured requests"]
    jobs = read_jobs(doc.get("jobs"))
    if jobs is not None:  # an agent replay: its verdict at the top, plainly
        lines.append(f"agent jobs: {verdict_text(jobs)}")
    title = f"anvil {kind} {doc['run_id']}"
    return kind, title, lines, run_sections(d), list(d.sources)
