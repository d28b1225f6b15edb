"""The `/anvil/` page served by `webui.py`, as one string.

Why a page of its own: Locust's extended tabs show only a table, and the charts need
drawing. The page is self-contained (inline CSS and JS, SVG drawn by hand, no CDN or any
other outside resource: it must work on a closed network). It polls `live.json` beside it
once a second, redraws everything from it (so the charts move while the run goes) and fills
every value with `textContent`, never as HTML. It draws:

- the TTFT CDF (`ttft_cdf`: the nearest-rank percentiles 0…100 of `figures.py`) as a step
  line, fraction of requests over ms, its p50 and p95 marked;
- the measured requests in flight (mean over each second; its peak in the tooltip) and the
  output throughput (tok/s; requests/s in the tooltip) per second of the run (`flow`),
  once each second has passed;
- TTFT p50 and decode tok/s p50 per bucket of the run (`series`).

It says what the figures are (`accuracy`, from `figures.ACCURACY_RUNNING` / `ACCURACY_FINAL`):
while the run goes, percentiles within 1 % from bounded sketches; at its end, the table's
and the CDF's exact figures from benchmark.json's rows.
An agent replay's job figures (`jobs`: in flight, completed of planned, cut, job latency
p50/p95, `jobfigures.py`) are one line, `jobs`, shown only for such a run.
Element ids (`jobs`, `anvil-table`, `chart-cdf`, `chart-inflight`, `chart-throughput`,
`chart-ttft`, `chart-decode`, `downloads`, `status`, `accuracy`, `server`: the server's
newest gauges) are what the tests read; each chart's `data-points` is how many points it
drew. The per-bucket p50 charts, their captions and `series` keys are made from the
catalogue: one per field with a `series` title (`chart-<title in lower case>`).
"""

from __future__ import annotations

from anvil_metrics import catalog
from anvil_metrics.live.series import SERIES_FIELDS, series_key

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>anvil · LLM</title>
<style>
  :root { color-scheme: light dark; --fg: #1d2430; --muted: #667085; --line: #d0d5dd;
          --accent: #1f6feb; --accent2: #c2410c; --accent3: #7c3aed; --accent4: #15803d;
          --bg: #ffffff; }
  @media (prefers-color-scheme: dark) {
    :root { --fg: #e6edf3; --muted: #9aa4b2; --line: #3a4250; --bg: #0d1117; } }
  body { font: 14px/1.45 system-ui, sans-serif; margin: 1.2rem 1.6rem; color: var(--fg);
         background: var(--bg); }
  header { display: flex; gap: 1.2rem; align-items: baseline; }
  h1 { font-size: 1.3rem; margin: 0; } h2 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
  a { color: var(--accent); }
  #status { color: var(--muted); margin: .4rem 0 0; }
  table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th, td { padding: .25rem .7rem; border-bottom: 1px solid var(--line); text-align: right; }
  th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
  .charts { display: flex; flex-wrap: wrap; gap: 1rem 1.2rem; }
  figure { margin: 0; width: 420px; max-width: 100%; }
  figcaption { font-weight: 600; margin-bottom: .2rem; }
  svg { width: 420px; max-width: 100%; height: auto; border: 1px solid var(--line); }
  svg text { fill: var(--muted); font-size: 11px; }
  svg .axis { stroke: var(--line); } svg .grid { stroke: var(--line); stroke-dasharray: 2 3; }
  svg .line { fill: none; stroke-width: 2; } svg .dot { stroke: none; }
  svg .mark { stroke: var(--muted); stroke-dasharray: 3 3; }
  svg .label { paint-order: stroke; stroke: var(--bg); stroke-width: 3px; }
  #chart-ttft .line, #chart-cdf .line { stroke: var(--accent); }
  #chart-ttft .dot, #chart-cdf .dot { fill: var(--accent); }
  #chart-decode .line { stroke: var(--accent2); } #chart-decode .dot { fill: var(--accent2); }
  #chart-inflight .line { stroke: var(--accent3); } #chart-inflight .dot { fill: var(--accent3); }
  #chart-throughput .line { stroke: var(--accent4); }
  #chart-throughput .dot { fill: var(--accent4); }
</style>
</head>
<body>
<header><h1>anvil · LLM</h1><a href="../">back to Locust</a></header>
<p id="status">waiting for figures…</p>
<p id="jobs" hidden></p>
<h2>Exact percentiles (nearest rank over every completed request so far)</h2>
<table id="anvil-table">
  <thead><tr><th>metric</th><th>unit</th><th>count</th><th>p50</th><th>p90</th><th>p95</th>
  <th>p99</th><th>min</th><th>max</th></tr></thead>
  <tbody></tbody>
</table>
<p id="accuracy"></p>
<p id="server"></p>
<p id="failures"></p>
<div class="charts">
  <figure><figcaption>TTFT CDF: fraction of requests with TTFT &le; x</figcaption>
    <svg id="chart-cdf" viewBox="0 0 420 220" role="img" aria-label="TTFT CDF"></svg>
  </figure>
  <figure><figcaption>requests in flight (mean over each second)</figcaption>
    <svg id="chart-inflight" viewBox="0 0 420 220" role="img"
         aria-label="requests in flight"></svg>
  </figure>
  <figure><figcaption>output tok/s (of requests finished each second)</figcaption>
    <svg id="chart-throughput" viewBox="0 0 420 220" role="img"
         aria-label="output throughput"></svg>
  </figure>
@SERIES_FIGURES@</div>
<h2>Files of the run</h2>
<ul id="downloads"><li>served here once the run has ended</li></ul>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLUMNS = ["count", "p50", "p90", "p95", "p99", "min", "max"];
const W = 420, H = 220, LEFT = 52, RIGHT = 24, TOP = 12, BOTTOM = 30;
const MAX_DOTS = 120;  // more points than this: the line only

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return v.toFixed(a >= 1000 ? 1 : a >= 10 ? 2 : 3);
}

function tick(v) {  // an axis label: at most 4 significant digits, no trailing zeros
  return String(Number(v.toPrecision(4)));
}

function el(tag, text) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function renderTable(metrics) {
  const body = document.querySelector("#anvil-table tbody");
  body.replaceChildren();
  for (const m of metrics) {
    const tr = el("tr");
    tr.dataset.field = m.field;
    tr.append(el("td", m.label), el("td", m.unit));
    for (const c of COLUMNS) {
      const td = el("td", fmt(m[c]));
      td.dataset.col = c;
      if (typeof m[c] === "number") td.title = String(m[c]);  // the exact value
      tr.append(td);
    }
    body.append(tr);
  }
}

function ticks(max, n) {
  if (!(max > 0)) max = 1;
  const raw = max / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(k => k * mag).find(s => s >= raw);
  const out = [];
  for (let v = 0; v < max + step * 0.999; v += step) out.push(v);
  return out;
}

function rangeTicks(lo, hi, n) {  // ticks from a round value at or below lo to one above hi
  if (!(hi > lo)) { const d = Math.abs(lo) * 0.05 || 1; lo -= d; hi += d; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(k => k * mag).find(s => s >= raw);
  const out = [];
  for (let v = Math.floor(lo / step) * step; v < hi + step * 0.999; v += step) {
    out.push(Number(v.toPrecision(12)));
  }
  return out;
}

function noData(svg) {
  svg.dataset.points = "0";
  svg.append(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data yet"));
}

function axes(svg, xt, yt, sx, sy, xUnit, yLabel) {
  for (const y of yt) {
    svg.append(svgEl("line", {x1: LEFT, x2: W - RIGHT, y1: sy(y), y2: sy(y),
                              class: y === yt[0] ? "axis" : "grid"}));
    svg.append(svgEl("text", {x: LEFT - 6, y: sy(y) + 4, "text-anchor": "end"}, yLabel(y)));
  }
  for (const x of xt) {
    svg.append(svgEl("text", {x: sx(x), y: H - BOTTOM + 16, "text-anchor": "middle"},
                     tick(x) + " " + xUnit));
  }
  svg.append(svgEl("line", {x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, class: "axis"}));
}

// a time series, x in s from 0, y from 0: a line through the points or, given each
// point's interval (`spans`: it covers [x - span, x]), a step across each interval
function drawChart(svg, xs, ys, describe, spans) {
  svg.replaceChildren();
  const pts = xs.map((x, i) => [x, ys[i], i]).filter(p => typeof p[1] === "number");
  if (!pts.length) return noData(svg);
  svg.dataset.points = String(pts.length);
  const xt = ticks(Math.max(...pts.map(p => p[0])), 6);
  const yt = ticks(Math.max(...pts.map(p => p[1])) * 1.05, 4);
  const xMax = xt[xt.length - 1], yMax = yt[yt.length - 1];
  const sx = x => LEFT + (W - LEFT - RIGHT) * x / xMax;
  const sy = y => H - BOTTOM - (H - TOP - BOTTOM) * y / yMax;
  axes(svg, xt, yt, sx, sy, "s", tick);
  const line = spans ? pts.flatMap(p => [[p[0] - spans[p[2]], p[1]], p]) : pts;
  svg.append(svgEl("polyline", {class: "line",
    points: line.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ")}));
  if (pts.length > MAX_DOTS) return;
  for (const p of pts) {
    const dot = svgEl("circle", {class: "dot", cx: sx(p[0]), cy: sy(p[1]), r: 2.5});
    dot.append(svgEl("title", {}, describe ? describe(p[2])
                                           : fmt(p[1]) + " at " + fmt(p[0]) + " s"));
    svg.append(dot);
  }
}

function drawCdf(svg, cdf) {  // a step line through (value at p, p / 100), p = 0..100
  svg.replaceChildren();
  const vs = (cdf && cdf.value) || [], ps = (cdf && cdf.percent) || [];
  if (!vs.length || vs.some(v => typeof v !== "number")) return noData(svg);
  svg.dataset.points = String(vs.length);
  const xt = rangeTicks(vs[0], vs[vs.length - 1], 5);
  const yt = [0, 0.25, 0.5, 0.75, 1];
  const xLo = xt[0], xHi = xt[xt.length - 1];
  const sx = x => LEFT + (W - LEFT - RIGHT) * (x - xLo) / (xHi - xLo);
  const sy = y => H - BOTTOM - (H - TOP - BOTTOM) * y;
  axes(svg, xt, yt, sx, sy, cdf.unit, y => String(y));
  const steps = [[vs[0], 0]];
  for (let i = 0; i < vs.length; i++) {  // across at the level below, then up to p / 100
    steps.push([vs[i], i ? ps[i - 1] / 100 : 0], [vs[i], ps[i] / 100]);
  }
  svg.append(svgEl("polyline", {class: "line",
    points: steps.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ")}));
  for (const p of [50, 95]) {
    const i = ps.indexOf(p), x = sx(vs[i]), y = sy(p / 100);
    svg.append(svgEl("line", {class: "mark", x1: LEFT, x2: x, y1: y, y2: y}));
    const dot = svgEl("circle", {class: "dot", cx: x, cy: y, r: 3});
    dot.append(svgEl("title", {}, "p" + p + " = " + vs[i] + " " + cdf.unit));
    svg.append(dot);
    // the label above the mark, at the left: left of v_p the curve is below p / 100
    svg.append(svgEl("text", {x: LEFT + 4, y: y - 4, class: "label"},
                     "p" + p + " " + fmt(vs[i]) + " " + cdf.unit));
  }
  svg.append(svgEl("text", {x: W - RIGHT - 4, y: H - BOTTOM - 6, "text-anchor": "end"},
                   "over " + cdf.count + " completed requests"));
}

function renderStatus(s) {
  if (!s.run_id) {
    document.getElementById("status").textContent =
      "no anvil run yet in this process: start one from Locust's form";
    return;
  }
  const planned = s.requests_planned ? " of " + s.requests_planned : "";
  const parts = ["run " + s.run_id, s.finished ? "finished" : "in progress",
    s.requests + planned + " measured requests done (" + s.completed + " completed, " +
    s.failed + " failed)", s.warmup_requests + " warm-up", s.output_tokens + " output tokens"];
  if (!s.finished) parts.push(fmt(s.elapsed_s) + " s");
  document.getElementById("status").textContent = parts.join(" · ");
  document.getElementById("accuracy").textContent = s.accuracy || "";
  document.getElementById("server").textContent = s.server || "";
  const kinds = Object.entries(s.failures_by_kind || {});
  document.getElementById("failures").textContent = kinds.length
    ? "failures by kind: " + kinds.map(([k, n]) => k + " " + n).join(", ") : "";
}

function renderJobs(j) {  // an agent replay's jobs (null for any other run: hidden)
  const p = document.getElementById("jobs");
  p.hidden = !j;
  if (!j) return;
  const planned = j.planned ? " of " + j.planned : "";
  p.textContent = "agent jobs: " + (j.in_flight === null ? "-" : j.in_flight) +
    " in flight · " + j.completed + planned + " completed · " + j.cut + " cut · " +
    "job latency p50 " + fmt(j.latency_p50_ms) + " ms, p95 " + fmt(j.latency_p95_ms) +
    " ms" + (j.exact ? " (exact, benchmark.json)" : " (completed jobs so far, within 1 %)");
}

function renderDownloads(s) {
  const list = document.getElementById("downloads");
  const names = Object.keys(s.downloads || {});
  list.replaceChildren();
  if (!names.length) {
    list.append(el("li", s.run_id ? "served here once run " + s.run_id + " has ended"
                                  : "no run yet"));
    return;
  }
  for (const name of names) {
    const a = el("a", name);
    a.href = s.downloads[name];
    a.setAttribute("download", s.run_id + "-" + name);
    const li = el("li");
    li.append(a);
    list.append(li);
  }
}

function render(s) {
  renderStatus(s);
  renderJobs(s.jobs);
  renderTable(s.metrics || []);
  const series = s.series || {t_s: [], @SERIES_EMPTY@};
  drawCdf(document.getElementById("chart-cdf"), s.ttft_cdf);
  const f = s.flow || {t_s: [], in_flight: [], output_tok_s: []};
  const at = i => " in the " + fmt(f.span_s[i]) + " s to " + fmt(f.t_s[i]) + " s";
  drawChart(document.getElementById("chart-inflight"), f.t_s, f.in_flight,
            i => fmt(f.in_flight[i]) + " in flight on average, " + fmt(f.in_flight_max[i]) +
                 " at most" + at(i), f.span_s);
  drawChart(document.getElementById("chart-throughput"), f.t_s, f.output_tok_s,
            i => fmt(f.output_tok_s[i]) + " tok/s, " + fmt(f.completed_per_s[i]) +
                 " requests/s (" + f.completed[i] + " completed, " + f.failed[i] +
                 " failed)" + at(i), f.span_s);
@SERIES_DRAWN@  renderDownloads(s);
  document.body.dataset.runId = s.run_id || "";
  document.body.dataset.finished = String(Boolean(s.finished));
}

async function poll() {
  try {
    const r = await fetch("live.json", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    document.getElementById("status").textContent = "Locust is not answering (" + e + ")";
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
"""


def _series_parts() -> dict[str, str]:
    """The page's per-bucket p50 charts, one per charted catalogue field (`RowField.series`,
    `live.series.SERIES_FIELDS`): its figure, its empty series and its draw call."""
    fields = [catalog.BY_NAME[name] for name in SERIES_FIELDS]
    figures = "".join(
        f'  <figure><figcaption>{f.series} p50 ({f.unit}) per bucket, within 1 %</figcaption>\n'
        f'    <svg id="chart-{f.series.lower()}" viewBox="0 0 420 220" role="img" '
        f'aria-label="{f.series} p50"></svg>\n  </figure>\n' for f in fields)
    drawn = "".join(
        f'  drawChart(document.getElementById("chart-{f.series.lower()}"), series.t_s, '
        f'series.{series_key(f.name)});\n' for f in fields)
    empty = ", ".join(f"{series_key(f.name)}: []" for f in fields)
    return {"@SERIES_FIGURES@": figures, "@SERIES_EMPTY@": empty, "@SERIES_DRAWN@": drawn}


def _page() -> str:
    page = _TEMPLATE
    for mark, text in _series_parts().items():
        page = page.replace(mark, text)
    return page


PAGE_HTML = _page()
