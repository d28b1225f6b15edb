"""anvil in Locust's web UI: the LLM tab's rows, `/anvil/` and its JSON, the downloads.

Two halves: the routes on an in-process Locust `WebUI` through Flask's test client with a
stand-in run (fast, every edge: no run, run in progress, finished, names that try to leave
the run folder); and a real Locust process against the simulator whose run is started the
way the UI's form posts it, where `/anvil/live.json` must equal `benchmark.json` bit for
bit, every typed anvil option must show in the result, and a user mistake typed into the
form must give one log line, never a traceback.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import orjson
import pytest
from conftest import REPO, load_json, raw_lines
from locust.env import Environment
from locust_ui import FAST_SIM, assert_live_equals_benchmark, locust_ui

from anvil_metrics.live import webui
from anvil_metrics.live.figures import LIVE_METRICS, LiveStats
from anvil_metrics.live.runctx import LATEST_ATTR
from anvil_metrics.live.users import ChatUser
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.records import Failure, RequestRecord

SECRET = "sk-test-anvil-webui-0123456789"

# --- the routes, in process --------------------------------------------------------------


def _record(i: int, ttft_ms: int, warmup: bool = False, failure: str | None = None
            ) -> RequestRecord:
    start = 1_000_000_000 * (i + 1)
    if failure is not None:
        return RequestRecord(request_index=i, start_ns=start, end_ns=start + 5_000_000,
                             failure=Failure(kind=failure, message="boom"))
    first = start + ttft_ms * 1_000_000
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=first - 10_000_000,
        first_content_ns=first, end_ns=first + 200_000_000 + i * 1_000_000,
        planned_context_tokens=512, reasoning_chunks=1, content_chunks=4,
        chunk_deltas_ns=(ttft_ms * 1_000_000 - 10_000_000, 10_000_000, 50_000_000,
                         50_000_000, 50_000_000 + i * 1_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": 21}, warmup=warmup)


def _stand_in_run(run_dir: Path, ttfts: list[int]) -> SimpleNamespace:
    """What webui reads of a RunSession, with a real LiveStats fed real records."""
    live = LiveStats("benchmark-20260101T000000Z", requests_planned=len(ttfts) + 1)
    live.take(_record(0, 999, warmup=True))
    for i, ms in enumerate(ttfts):
        live.take(_record(i, ms))
    live.take(_record(len(ttfts), 0, failure="timeout"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "requests.jsonl").write_bytes(b'{"type":"run"}\n')
    return SimpleNamespace(live=live, run_id=live.run_id, run_dir=run_dir, finished=False,
                           benchmark_path=None)


@pytest.fixture
def ui(monkeypatch, tmp_path: Path) -> Any:
    """An in-process Locust WebUI (not listening) with anvil installed, and its client."""
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust re-parses argv for its form
    env = Environment(user_classes=[ChatUser])
    env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    webui.install(web_ui)

    def show(sess: Any) -> None:  # what the plugin does: the latest run, on the Environment
        setattr(env, LATEST_ATTR, sess)

    return SimpleNamespace(web_ui=web_ui, client=web_ui.app.test_client(), show=show,
                           run_dir=tmp_path / "benchmark-20260101T000000Z")


def test_tab_and_links_are_declared_in_locusts_template_args(ui) -> None:
    args = ui.web_ui.template_args
    assert args["extended_tabs"] == [{"title": "LLM", "key": "llm"}]
    (table,) = args["extended_tables"]
    assert table["key"] == "llm"
    assert [c["key"] for c in table["structure"]] == [
        "metric", "unit", "count", "p50", "p90", "p95", "p99", "min", "max"]
    hrefs = [f["href"] for f in args["extended_csv_files"]]
    assert hrefs == ["./anvil/", "./anvil/download/benchmark.json",
                     "./anvil/download/requests.jsonl"]
    ui.web_ui.update_template_args()  # Locust refreshes its own keys on every page load
    assert ui.web_ui.template_args["extended_tabs"] == [{"title": "LLM", "key": "llm"}]


def test_stats_requests_carries_the_tab_rows(ui) -> None:
    body = ui.client.get("/stats/requests").get_json()
    assert body["extended_stats"][0]["key"] == "llm"
    assert body["extended_stats"][0]["data"][0]["metric"] == "no anvil run yet in this process"
    assert "stats" in body and "state" in body  # Locust's own figures are untouched

    ui.show(_stand_in_run(ui.run_dir, [400, 100, 300, 200]))
    # Locust memoizes its part for 2 s; the LLM rows are fresh on every poll
    rows = ui.client.get("/stats/requests").get_json()["extended_stats"][0]["data"]
    assert [r["name"] for r in rows] == sorted(r["name"] for r in rows)  # Locust sorts by it
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["run benchmark-20260101T000000Z (in progress)"]
    assert by_metric["measured requests done (of 5 planned)"]["count"] == 5
    assert by_metric["completed"]["count"] == 4
    assert by_metric["failed"]["count"] == 1 and by_metric["failed: timeout"]["count"] == 1
    assert by_metric["warm-up requests (not measured)"]["count"] == 1
    assert ("table and charts: nearest-rank percentiles within 1 % (log-binned sketches of "
            "all 4 completed requests); exact in benchmark.json") in by_metric  # said once
    ttft = by_metric["TTFT (first content)"]
    assert ttft["count"] == 4 and ttft["unit"] == "ms"
    assert (ttft["min"], ttft["max"]) == (100.0, 400.0)  # exact
    assert ttft["p50"] == pytest.approx(200.0, rel=0.01)  # a running sketch: within 1 %
    assert ttft["p90"] == pytest.approx(400.0, rel=0.01)
    assert {r["metric"] for r in rows} >= {m.label for m in LIVE_METRICS}


def test_live_json_is_the_snapshot_with_exact_values(ui) -> None:
    empty = ui.client.get("/anvil/live.json")
    assert empty.status_code == 200 and empty.get_json()["run_id"] is None
    ui.show(_stand_in_run(ui.run_dir, [431, 107, 389, 212, 250]))
    resp = ui.client.get("/anvil/live.json")
    assert resp.headers["Cache-Control"] == "no-store"
    live = orjson.loads(resp.data)
    ttft = next(m for m in live["metrics"] if m["field"] == "ttft_ms")
    assert ttft["p50"] == pytest.approx(250.0, rel=0.01) and ttft["count"] == 5
    assert ttft["p95"] == pytest.approx(431.0, rel=0.01) and ttft["max"] == 431.0
    assert live["failures_by_kind"] == {"timeout": 1}
    assert live["series"]["ttft_ms_p50"] and live["series"]["decode_tok_s_p50"]
    cdf = live["ttft_cdf"]  # 101 points; ends exact, the rest within 1 % while running
    assert cdf["count"] == 5 and cdf["percent"] == list(range(101))
    assert (cdf["value"][0], cdf["value"][100]) == (107.0, 431.0)
    assert cdf["value"][50] == ttft["p50"] and cdf["value"][95] == ttft["p95"]
    assert live["flow"]["t_s"] == []  # no sampler ticked (a stand-in run): nothing yet
    assert live["flow"]["tick_s"] == 1.0
    assert live["accuracy"].startswith("table and charts: nearest-rank percentiles within 1 %")
    assert live["exact"] is False  # the run is in progress: exact once it ends
    assert live["downloads"] == {}  # the run is still in progress


def test_page_is_self_contained(ui) -> None:
    assert ui.client.get("/anvil").status_code == 302
    resp = ui.client.get("/anvil/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    page = resp.get_data(as_text=True)
    for element_id in ("anvil-table", "chart-cdf", "chart-inflight", "chart-throughput",
                       "chart-ttft", "chart-decode", "downloads", "status", "accuracy"):
        assert f'id="{element_id}"' in page
    assert 'fetch("live.json"' in page
    # nothing from anywhere else: no absolute URL in any src/href/import/fetch/url()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"""(@import|url\(|fetch\()\s*["']?(https?:)?//""", page)
    assert ".innerHTML" not in page  # every value goes in as text


def test_downloads_only_the_latest_runs_two_files_once_it_ended(ui) -> None:
    assert ui.client.get("/anvil/download/benchmark.json").status_code == 404  # no run yet
    run = _stand_in_run(ui.run_dir, [100, 200])
    ui.show(run)
    (ui.run_dir / "locust.log").write_text("not served")
    resp = ui.client.get("/anvil/download/requests.jsonl")
    assert resp.status_code == 404 and b"still in progress" in resp.data

    run.finished = True
    assert ui.client.get("/anvil/download/benchmark.json").status_code == 404  # none written
    (ui.run_dir / "benchmark.json").write_bytes(b'{"schema": "x"}')
    live = ui.client.get("/anvil/live.json").get_json()
    assert live["downloads"] == {"benchmark.json": "download/benchmark.json",
                                 "requests.jsonl": "download/requests.jsonl"}
    for name in ("benchmark.json", "requests.jsonl"):
        resp = ui.client.get(f"/anvil/download/{name}")
        assert resp.status_code == 200
        assert resp.data == (ui.run_dir / name).read_bytes()
        assert f"{run.run_id}-{name}" in resp.headers["Content-Disposition"]
        resp.close()
    (ui.run_dir.parent / "secret.txt").write_text("outside the run folder")
    for name in ("locust.log", "../secret.txt", "..%2Fsecret.txt", "%2e%2e/secret.txt",
                 "benchmark.json/../locust.log", "/etc/passwd", "./benchmark.json",
                 "BENCHMARK.JSON", ""):
        # (Werkzeug first redirects "//etc" to "/etc": follow it to the final answer)
        resp = ui.client.get(f"/anvil/download/{name}", follow_redirects=True)
        assert resp.status_code == 404, name
        assert b"outside" not in resp.data and b"not served" not in resp.data


def test_web_base_path(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["locust"])
    env = Environment(user_classes=[ChatUser])
    env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0, web_base_path="/lt", delayed_start=True)
    webui.install(web_ui, "/lt/")
    client = web_ui.app.test_client()
    assert client.get("/lt/anvil/live.json").status_code == 200
    assert client.get("/lt/anvil").headers["Location"].endswith("/lt/anvil/")
    assert "extended_stats" in client.get("/lt/stats/requests").get_json()


def test_web_login_guards_the_anvil_routes(monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["locust"])
    env = Environment(user_classes=[ChatUser])
    env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0, web_login=True, delayed_start=True)
    web_ui.app.secret_key = "test"
    web_ui.login_manager.user_loader(lambda user_id: None)
    webui.install(web_ui)
    client = web_ui.app.test_client()
    for path in ("/anvil/", "/anvil/live.json", "/anvil/download/benchmark.json"):
        resp = client.get(path)
        assert resp.status_code in (302, 401), path
        assert "login" in resp.headers.get("Location", "login"), path


def test_a_failing_snapshot_never_breaks_locusts_page(ui, caplog) -> None:
    class Broken:
        def snapshot(self) -> dict[str, Any]:
            raise RuntimeError("bug in LiveStats")

    ui.show(SimpleNamespace(live=Broken(), run_id="r", run_dir=Path("/"),
                            finished=False, benchmark_path=None))
    resp = ui.client.get("/stats/requests")
    assert resp.status_code == 200 and "stats" in resp.get_json()
    assert "could not add the LLM tab" in caplog.text


@pytest.mark.parametrize("ending", ["cleanup", "stopping"])
def test_a_poll_while_the_run_ends_waits_for_its_final_figures(ui, ending: str) -> None:
    # Locust's page stops polling at its first answer that is not "running": that answer
    # must carry the finished run, not the sketch (Locust says "stopped" before anvil writes;
    # a local runner says "cleanup" while its users finish, a master "stopping")
    sess = _stand_in_run(ui.run_dir, [400, 100, 300, 200])
    ui.show(sess)
    ui.web_ui.environment.runner.state = ending
    ended = []

    def write_the_run() -> None:
        gevent.sleep(0.3)
        ui.web_ui.environment.runner.state = "stopped"
        sess.live.finish()
        ended.append(time.monotonic())

    gevent.spawn(write_the_run)
    body = ui.client.get("/stats/requests").get_json()
    answered = time.monotonic()
    assert ended and answered >= ended[0]  # not before the run was written
    assert body["state"] == "stopped"  # Locust's state when it answered
    metrics = [r["metric"] for r in body["extended_stats"][0]["data"]]
    assert "run benchmark-20260101T000000Z (finished)" in metrics


def test_a_run_never_written_holds_a_poll_only_so_long(ui, monkeypatch) -> None:
    monkeypatch.setattr(webui, "HOLD_EXTRA_S", 0.2)
    ui.web_ui.environment.stop_timeout = 0.1
    ui.show(_stand_in_run(ui.run_dir, [400, 100]))
    ui.web_ui.environment.runner.state = "stopped"
    t0 = time.monotonic()
    body = ui.client.get("/stats/requests").get_json()
    assert 0.3 <= time.monotonic() - t0 < 10  # the stop timeout + HOLD_EXTRA_S, then answered
    metrics = [r["metric"] for r in body["extended_stats"][0]["data"]]
    assert "run benchmark-20260101T000000Z (in progress)" in metrics
    ui.web_ui.environment.runner.state = "running"  # a running run is never held
    t0 = time.monotonic()
    assert ui.client.get("/stats/requests").status_code == 200
    assert time.monotonic() - t0 < 0.3


# --- a real Locust process -----------------------------------------------------------------


def _form(**anvil_options: str) -> dict[str, str]:
    """The body Locust's React form posts: every field, snake_case, checkbox as true/false."""
    base = {"user_count": "3", "spawn_rate": "3", "run_time": "", "profile": "",
            "api_key": "", "max_tokens": "", "model": "", "recalibrate": "false",
            "requests": "", "run_nonce": "", "scenario": "scenarios/smoke.toml",
            "tokenizer": "", "warmup_requests": ""}
    return {**base, **anvil_options}


@pytest.mark.e2e
def test_ui_run_figures_options_downloads(simulator, tmp_path: Path) -> None:
    sim = simulator(*FAST_SIM)
    ui_dir = tmp_path / "ui"
    with locust_ui(sim.url, tmp_path, "--scenario", "scenarios/smoke.toml",
                   "--results-dir", str(tmp_path / "cli")) as ui:
        # every anvil option, typed as the form posts it
        started = ui.swarm(_form(host=sim.url, requests="9", max_tokens="6",
                                 warmup_requests="1", model="sim-model", run_nonce="uiNonce-1",
                                 results_dir=str(ui_dir), api_key=SECRET))
        assert started["success"] is True
        live = ui.wait_run_finished()
        run_dir = ui_dir / live["run_id"]
        doc = load_json(run_dir / "benchmark.json")
        assert verify_benchmark(doc) == []
        assert (doc["requests"], doc["completed"], doc["concurrency"]) == (9, 9, 3)
        assert (doc["max_tokens"], doc["warmup_requests"], doc["model"]) == (6, 1, "sim-model")
        assert doc["run_nonce"] == "uiNonce-1" and doc["measurement_protocol"] == "smoke"
        assert not (tmp_path / "cli").exists()  # the typed results dir won
        assert_live_equals_benchmark(live, doc)
        assert live["downloads"] == {"benchmark.json": "download/benchmark.json",
                                     "requests.jsonl": "download/requests.jsonl"}
        for name in ("benchmark.json", "requests.jsonl"):
            assert ui.get(f"/anvil/download/{name}") == (run_dir / name).read_bytes()
        assert raw_lines(run_dir)[0]["params"]["prompt_sizing"]["cache"] == "stored"

        # the tab's rows, as Locust's page polls them, hold the same (rounded) figures
        rows = ui.json("/stats/requests")["extended_stats"][0]["data"]
        ttft = next(r for r in rows if r["metric"] == "TTFT (first content)")
        assert ttft["p50"] == round(doc["metrics"]["ttft_p50_ms"], 3) and ttft["count"] == 9

        # the checkbox: recalibrate=true ignores the calibration the first run stored
        ui.swarm(_form(host=sim.url, requests="3", results_dir=str(ui_dir),
                       recalibrate="true"))
        live2 = ui.wait_run_finished(live["run_id"])
        raw2 = raw_lines(ui_dir / live2["run_id"])
        assert raw2[0]["params"]["prompt_sizing"]["cache"] == "stored"  # not "hit"
        ui.swarm(_form(host=sim.url, requests="3", results_dir=str(ui_dir)))
        live3 = ui.wait_run_finished(live2["run_id"])
        assert raw_lines(ui_dir / live3["run_id"])[0]["params"]["prompt_sizing"]["cache"] \
            == "hit"

        # a conversation run typed into the form: --conversation's field over the scenario
        ui.swarm(_form(host=sim.url, results_dir=str(ui_dir),
                       conversation="turns=2,turn_tokens=64,conversations=3"))
        live4 = ui.wait_run_finished(live3["run_id"])
        doc4 = load_json(ui_dir / live4["run_id"] / "benchmark.json")
        assert verify_benchmark(doc4) == [] and doc4["requests"] == 6
        block = doc4["conversation"]
        assert (block["conversations"], block["completed"], block["plan"]["turns"]) == (3, 3, 2)

        # user mistakes typed into the form: one line each in the log, no traceback
        for bad, needle in (({"requests": "abc"}, "--requests 'abc' is not allowed"),
                            ({"tokenizer": str(tmp_path / "missing.json")},
                             "missing.json' is not a file"),
                            ({"run_nonce": "no spaces"}, "--run-nonce 'no spaces' is not")):
            ui.swarm(_form(host=sim.url, results_dir=str(ui_dir), **bad))
            _wait_for_log(ui, needle)
        log = ui.log()
        assert "Traceback" not in log, log[-3000:]
        runs = [p for p in ui_dir.iterdir() if p.name.startswith("benchmark-")]
        assert len(runs) == 4  # the refused starts made no run folder

        # the key typed into the form is never served, logged or written
        served = [ui.get(p) for p in ("/", "/stats/requests", "/anvil/", "/anvil/live.json",
                                      "/anvil/download/benchmark.json",
                                      "/anvil/download/requests.jsonl")]
        for blob in [*served, log.encode(), *(f.read_bytes() for f in run_dir.iterdir())]:
            assert SECRET.encode() not in blob

    # a headless run of the same locustfile leaves the same files as the UI run
    headless = tmp_path / "headless"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless", "-H",
         sim.url, "-u", "3", "-r", "3", "--scenario", "scenarios/smoke.toml", "--requests",
         "9", "--results-dir", str(headless)],
        cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (head_run,) = [p for p in headless.iterdir() if p.name.startswith("benchmark-")]
    assert sorted(f.name for f in head_run.iterdir()) == sorted(f.name for f in
                                                                run_dir.iterdir())


def _wait_for_log(ui: Any, needle: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in ui.log():
        assert time.monotonic() < deadline, f"{needle!r} not logged:\n{ui.log()[-3000:]}"
        time.sleep(0.1)
