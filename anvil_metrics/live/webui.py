"""anvil in Locust's web UI: the "LLM" tab, a live page with charts, and the run's files.

Why this shape: Locust 2.47's React UI takes extensions only as data. `extended_tabs` and
`extended_tables` in the page's template args declare a tab and its columns, the rows come
as `extended_stats` in the JSON the page polls (`/stats/requests`, while a run is going;
held while a stopped run is being written, so the page's last poll has its final figures),
and `extended_csv_files` adds links to its "Download Data" tab. A tab shows one table of
plain-text cells: no chart, no link. So anvil uses that mechanism for what it can carry and
serves the rest itself:

- the "LLM" tab: counts, failures by kind and exact nearest-rank percentiles (p50/p90/p95/
  p99, min, max) of time to first output, TTFT, E2E, decode tok/s, ITL and prefill, from
  `LiveStats.snapshot()` (raw records, as in `benchmark.json`; never Locust's buckets), and
  one line saying so (`figures.ACCURACY_RUNNING` / `ACCURACY_FINAL`: sketched within 1 %
  while the run goes, exact at its end); for an agent replay, its jobs in flight, completed
  and cut and the job latency p50/p95 (`jobfigures.py`); and, while the server's metrics
  are scraped, one line of its newest gauges (running, waiting, KV cache, speculative
  acceptance), read from the tail of `server_metrics.jsonl` when the page asks;
- `/anvil/`: one self-contained page (inline CSS and JS, nothing fetched from elsewhere)
  polling `/anvil/live.json` once a second and drawing SVG charts that move while the run
  goes: the TTFT CDF (nearest-rank p0…p100 over the completed requests: within 1 % while
  running, exact at the end, its p50/p95 then `benchmark.json`'s), the requests in flight
  and the output tok/s per second, and TTFT p50 and decode tok/s p50 over time (`figures.py`
  says how each is bounded); the same table, and the download links once the run has
  ended;
- `/anvil/metrics`: the same snapshot in Prometheus's text exposition format, for a
  scraper (`promtext.py` names each metric);
- `/anvil/download/benchmark.json` and `/anvil/download/requests.jsonl`: the latest run's
  files, only once it has ended; any other name is a 404 (no path ever comes from the URL).
  The "Download Data" tab links them and the page.

Everything is read from the latest run the plugin keeps on Locust's `Environment`
(`runctx.latest_run`), which on a distributed run's master is the merged run, so nothing
here knows about workers. No API key or endpoint URL is ever sent.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import gevent
import orjson
from flask import Blueprint, Response, redirect, request, send_file
from locust import events
from locust.runners import STATE_CLEANUP, STATE_STOPPED, STATE_STOPPING

from anvil_metrics.live.runctx import latest_run
from anvil_metrics.live.webui_page import PAGE_HTML
from anvil_metrics.telemetry.livegauges import live_gauges, newest_samples

log = logging.getLogger("anvil")

TAB_KEY = "llm"
DOWNLOADS = ("benchmark.json", "requests.jsonl")
PERCENTILE_COLUMNS = ("p50", "p90", "p95", "p99", "min", "max")
MISSING = "–"
# Locust's runner states from a stop to the end: a local runner's `stop` passes "cleanup"
# while its users finish, a master "stopping" while its workers do; both end "stopped"
ENDING_STATES = (STATE_CLEANUP, STATE_STOPPING, STATE_STOPPED)
HOLD_EXTRA_S = 30.0  # beyond the stop timeout: the post-processing of a long run
HOLD_POLL_S = 0.05

# Locust's table sorts rows by a `name` key until a header is clicked: each row's `name`
# is its position (not shown), the label is in `metric`.
TAB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("metric", "LLM metric (exact, from raw records)"),
    ("unit", "Unit"),
    ("count", "Count"),
    *((c, c) for c in PERCENTILE_COLUMNS),
)


def template_extensions() -> dict[str, Any]:
    """What Locust's page gets in its template args: the tab, its columns, the links."""
    return {
        "extended_tabs": [{"title": "LLM", "key": TAB_KEY}],
        "extended_tables": [{"key": TAB_KEY, "structure": [{"key": k, "title": t}
                                                           for k, t in TAB_COLUMNS]}],
        "extended_csv_files": [
            {"href": "./anvil/", "title": "anvil: live LLM charts and exact percentiles"},
            *({"href": f"./anvil/download/{name}",
               "title": f"anvil: {name} of the latest run (once it has ended)"}
              for name in DOWNLOADS),
        ],
    }


def _shown(value: Any) -> Any:
    """A cell of Locust's table: numbers to 3 decimals (the exact value is in live.json)."""
    if value is None:
        return MISSING
    return round(value, 3) if isinstance(value, float) else value


def _count_row(label: str, count: int | str, unit: str = "req") -> dict[str, Any]:
    return {"metric": label, "unit": unit, "count": count,
            **{c: "" for c in PERCENTILE_COLUMNS}}


def server_now(sess: Any) -> dict[str, Any] | None:
    """The server's newest gauges (`livegauges.live_gauges`) while the run scrapes its
    metrics; None otherwise."""
    if sess is None or getattr(sess, "telemetry", None) is None:
        return None
    return live_gauges(newest_samples(sess.telemetry.path), time.perf_counter_ns())


def server_text(g: dict[str, Any] | None) -> str | None:
    """One line for the tab and the page."""
    if g is None:
        return None

    def show(v: Any, scale: float = 1.0, unit: str = "") -> str:
        return MISSING if v is None else f"{v * scale:.3g}{unit}"

    return (f"server ({g['engine'] or 'unknown engine'}, {g['age_s']:.0f} s ago): running "
            f"{show(g['requests_running'])}, waiting {show(g['requests_waiting'])}, KV cache "
            f"{show(g['kv_cache_usage'], 100, ' %')}, speculative acceptance "
            f"{show(g['acceptance_rate'])}")


def tab_rows(snap: dict[str, Any] | None, server: dict[str, Any] | None = None
             ) -> list[dict[str, Any]]:
    """The LLM tab's rows for one `LiveStats.snapshot()` (None: no run yet) and the
    server's newest gauges (`server_now`)."""
    if snap is None:
        return _numbered([_count_row("no anvil run yet in this process", 0)])
    state = "finished" if snap["finished"] else "in progress"
    planned = snap["requests_planned"]
    rows = [
        _count_row(f"run {snap['run_id']} ({state})", "", ""),
        _count_row(f"measured requests done{f' (of {planned} planned)' if planned else ''}",
                   snap["requests"]),
        _count_row("completed", snap["completed"]),
        _count_row("failed", snap["failed"]),
        *(_count_row(f"failed: {kind}", n)
          for kind, n in sorted(snap["failures_by_kind"].items())),
        _count_row("warm-up requests (not measured)", snap["warmup_requests"]),
        _count_row(snap["accuracy"], "", ""),
    ]
    rows += job_rows(snap.get("jobs"))
    line = server_text(server)
    if line is not None:
        rows.append(_count_row(line, "", ""))
    for m in snap["metrics"]:
        rows.append({"metric": m["label"], "unit": m["unit"], "count": m["count"],
                     **{c: _shown(m[c]) for c in PERCENTILE_COLUMNS}})
    rows.append(_count_row("charts and downloads: open /anvil/ (or Download Data)", "", ""))
    return _numbered(rows)


def job_rows(jobs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """An agent replay's rows (`jobfigures.JobFigures.snapshot`); none for other runs."""
    if jobs is None:
        return []
    planned = f" (of {jobs['planned']} planned)" if jobs["planned"] else ""
    latency = _count_row("job latency, completed jobs (first start to last answer)",
                         jobs["completed"], "ms")
    latency.update(p50=_shown(jobs["latency_p50_ms"]), p95=_shown(jobs["latency_p95_ms"]))
    return [_count_row("agent jobs in flight", _shown(jobs["in_flight"]), "jobs"),
            _count_row(f"agent jobs completed{planned}", jobs["completed"], "jobs"),
            _count_row("agent jobs cut (a request failed or was never sent)", jobs["cut"],
                       "jobs"), latency]


def _numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each row its position as `name`, the key Locust's table sorts by."""
    return [{"name": f"{i:03d}", **row} for i, row in enumerate(rows)]


def _available(sess: Any, name: str) -> Path | None:
    """The latest run's file `name` when it may be served: a known name, run ended, file
    present. Nothing from the URL ever becomes part of a path."""
    if sess is None or name not in DOWNLOADS or not sess.finished:
        return None
    path = Path(sess.run_dir) / name
    return path if path.is_file() else None


def live_payload(sess: Any) -> dict[str, Any]:
    """`/anvil/live.json`: the snapshot plus which downloads are ready (no run: run_id null)."""
    if sess is None:
        return {"run_id": None, "finished": False, "metrics": [], "downloads": {}}
    snap = sess.live.snapshot()
    snap["server"] = server_text(server_now(sess))
    snap["downloads"] = {name: f"download/{name}" for name in DOWNLOADS
                         if _available(sess, name) is not None}
    return snap


def _json(payload: Any, status: int = 200) -> Response:
    resp = Response(orjson.dumps(payload), status=status, mimetype="application/json")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _not_found(message: str) -> Response:
    return Response(message + "\n", status=404, mimetype="text/plain")


def make_blueprint(web_ui: Any, base_path: str) -> Blueprint:
    """The `/anvil` routes, behind Locust's login when `--web-login` is on."""
    bp = Blueprint("anvil", __name__, url_prefix=f"{base_path}/anvil")
    guard = web_ui.auth_required_if_enabled
    environment = web_ui.environment

    @bp.route("")
    @guard
    def to_page() -> Response:
        return redirect(f"{base_path}/anvil/", code=302)

    @bp.route("/")
    @guard
    def page() -> Response:
        resp = Response(PAGE_HTML, mimetype="text/html")
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @bp.route("/live.json")
    @guard
    def live_json() -> Response:
        return _json(live_payload(latest_run(environment)))

    @bp.route("/metrics")
    @guard
    def metrics() -> Response:
        # here, not at the top: prometheus_client costs every Locust process ~0.1 s to
        # import, and only a scraper asks for this page
        from anvil_metrics.live import promtext

        sess = latest_run(environment)
        body = promtext.exposition(None if sess is None else sess.live.snapshot(),
                                   getattr(sess, "model", None))
        resp = Response(body, status=200, content_type=promtext.CONTENT_TYPE)
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @bp.route("/download/<path:name>")
    @guard
    def download(name: str) -> Response:
        sess = latest_run(environment)
        path = _available(sess, name)
        if path is None:
            return _not_found(_why_not(sess, name))
        resp = send_file(path, as_attachment=True, download_name=f"{sess.run_id}-{name}",
                         mimetype="application/json" if name.endswith(".json")
                         else "application/x-ndjson", max_age=0)
        resp.headers["Cache-Control"] = "no-store"
        return resp

    return bp


def _why_not(sess: Any, name: str) -> str:
    if name not in DOWNLOADS:
        return f"anvil serves only {' and '.join(DOWNLOADS)}"
    if sess is None:
        return "no anvil run yet in this process"
    if not sess.finished:
        return f"run {sess.run_id} is still in progress: its files are served once it ends"
    return f"run {sess.run_id} has no {name}"


def _add_tab_rows(response: Response, stats_path: str, environment: Any) -> Response:
    """After Locust's `/stats/requests`: add the LLM tab's rows as `extended_stats`."""
    if request.path != stats_path or response.status_code != 200 or not response.is_json:
        return response
    try:
        sess = latest_run(environment)
        body = response.get_json()
        body["extended_stats"] = [{"key": TAB_KEY,
                                   "data": tab_rows(sess.live.snapshot() if sess else None,
                                                    server_now(sess))}]
        response.set_data(orjson.dumps(body))
    except Exception:  # never break Locust's own page over the LLM tab
        log.exception("anvil: could not add the LLM tab's figures")
    return response


def _ending(environment: Any) -> bool:
    """True while Locust has stopped (or is stopping) a run anvil has not yet written."""
    runner = environment.runner
    sess = latest_run(environment)
    return (runner is not None and runner.state in ENDING_STATES
            and sess is not None and not sess.live.finished)


def _hold_until_written(stats_path: str, environment: Any) -> None:
    """Before Locust's `/stats/requests`: while a run is ending, answer only once anvil has
    written it (at most `stop_timeout` + `HOLD_EXTRA_S`).

    Why: Locust's page polls only while it last saw "spawning" or "running", so its first
    answer saying "cleanup", "stopping" or "stopped" is its last. Locust sets "stopped" before its
    `test_stop`, where anvil writes the run, so that answer carried the sketched, in-progress
    figures and the LLM tab kept them. Held, it carries the state and the exact figures of
    the moment it is sent; the page shows the previous answer meanwhile."""
    if request.path != stats_path:
        return
    try:
        stop_timeout_s = float(getattr(environment, "stop_timeout", None) or 0)
        deadline = time.monotonic() + stop_timeout_s + HOLD_EXTRA_S
        while _ending(environment) and time.monotonic() < deadline:
            gevent.sleep(HOLD_POLL_S)
    except Exception:  # never break Locust's own page over the LLM tab
        log.exception("anvil: could not wait for the run's final figures")


def install(web_ui: Any, base_path: str = "") -> None:
    """Add the LLM tab, the `/anvil` routes and the links to a Locust `WebUI`."""
    base_path = (base_path or "").rstrip("/")
    web_ui.template_args.update(template_extensions())
    web_ui.app.register_blueprint(make_blueprint(web_ui, base_path))
    stats_path = f"{base_path}/stats/requests"
    web_ui.app.before_request(lambda: _hold_until_written(stats_path, web_ui.environment))
    web_ui.app.after_request(
        lambda response: _add_tab_rows(response, stats_path, web_ui.environment))


@events.init.add_listener
def on_init(environment: Any, **_: Any) -> None:
    """Locust's `init`: the web UI exists (delayed start) but serves nothing yet."""
    web_ui = environment.web_ui
    if web_ui is None:
        return
    opts = environment.parsed_options
    install(web_ui, getattr(opts, "web_base_path", "") or "")
