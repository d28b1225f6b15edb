"""The `/anvil/` page served by `webui.py`, as one string.

Why a page of its own: Locust's extended tabs show only a table, and the charts of TTFT and
decode tok/s over time need drawing. The page is self-contained (inline CSS and JS, SVG
drawn by hand, no CDN or any other outside resource: it must work on a closed network). It
polls `live.json` beside it once a second and fills every value with `textContent`, never
as HTML. It says what the figures are (`accuracy`, from `live.ACCURACY_RUNNING` /
`ACCURACY_FINAL`): while the run goes, percentiles within 1 % from bounded sketches; at its
end, the table's exact figures from benchmark.json's rows.
Element ids (`anvil-table`, `chart-ttft`, `chart-decode`, `downloads`, `status`, `accuracy`,
`server`: the server's newest gauges) are what the browser test reads.
"""

from __future__ import annotations

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>anvil · LLM</title>
<style>
  :root { color-scheme: light dark; --fg: #1d2430; --muted: #667085; --line: #d0d5dd;
          --accent: #1f6feb; --accent2: #c2410c; --bg: #ffffff; }
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
  .charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
  figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: .2rem; }
  svg { width: 640px; max-width: 100%; height: auto; border: 1px solid var(--line); }
  svg text { fill: var(--muted); font-size: 11px; }
  svg .axis { stroke: var(--line); } svg .grid { stroke: var(--line); stroke-dasharray: 2 3; }
  svg .line { fill: none; stroke-width: 2; } svg .dot { stroke: none; }
  #chart-ttft .line { stroke: var(--accent); } #chart-ttft .dot { fill: var(--accent); }
  #chart-decode .line { stroke: var(--accent2); } #chart-decode .dot { fill: var(--accent2); }
</style>
</head>
<body>
<header><h1>anvil · LLM</h1><a href="../">back to Locust</a></header>
<p id="status">waiting for figures…</p>
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
  <figure><figcaption>TTFT p50 (ms) over the run, per bucket, within 1 %</figcaption>
    <svg id="chart-ttft" viewBox="0 0 640 240" role="img" aria-label="TTFT p50"></svg>
  </figure>
  <figure><figcaption>decode p50 (tok/s) over the run, per bucket, within 1 %</figcaption>
    <svg id="chart-decode" viewBox="0 0 640 240" role="img" aria-label="decode p50"></svg>
  </figure>
</div>
<h2>Files of the run</h2>
<ul id="downloads"><li>served here once the run has ended</li></ul>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLUMNS = ["count", "p50", "p90", "p95", "p99", "min", "max"];
const W = 640, H = 240, LEFT = 58, RIGHT = 14, TOP = 12, BOTTOM = 30;

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

function drawChart(svg, xs, ys) {
  svg.replaceChildren();
  const pts = xs.map((x, i) => [x, ys[i]]).filter(p => typeof p[1] === "number");
  svg.dataset.points = String(pts.length);
  if (!pts.length) {
    svg.append(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data yet"));
    return;
  }
  const xt = ticks(Math.max(...pts.map(p => p[0])), 6);
  const yt = ticks(Math.max(...pts.map(p => p[1])) * 1.05, 4);
  const xMax = xt[xt.length - 1], yMax = yt[yt.length - 1];
  const sx = x => LEFT + (W - LEFT - RIGHT) * x / xMax;
  const sy = y => H - BOTTOM - (H - TOP - BOTTOM) * y / yMax;
  for (const y of yt) {
    svg.append(svgEl("line", {x1: LEFT, x2: W - RIGHT, y1: sy(y), y2: sy(y),
                              class: y === 0 ? "axis" : "grid"}));
    svg.append(svgEl("text", {x: LEFT - 6, y: sy(y) + 4, "text-anchor": "end"}, tick(y)));
  }
  for (const x of xt) {
    svg.append(svgEl("text", {x: sx(x), y: H - BOTTOM + 16, "text-anchor": "middle"},
                     tick(x) + " s"));
  }
  svg.append(svgEl("line", {x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM, class: "axis"}));
  svg.append(svgEl("polyline", {class: "line",
    points: pts.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ")}));
  for (const p of pts) {
    const dot = svgEl("circle", {class: "dot", cx: sx(p[0]), cy: sy(p[1]), r: 2.5});
    dot.append(svgEl("title", {}, fmt(p[1]) + " at " + fmt(p[0]) + " s"));
    svg.append(dot);
  }
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
  renderTable(s.metrics || []);
  const series = s.series || {t_s: [], ttft_ms_p50: [], decode_tok_s_p50: []};
  drawChart(document.getElementById("chart-ttft"), series.t_s, series.ttft_ms_p50);
  drawChart(document.getElementById("chart-decode"), series.t_s, series.decode_tok_s_p50);
  renderDownloads(s);
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
