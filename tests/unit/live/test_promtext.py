"""`GET /anvil/metrics`: the live snapshot in Prometheus's text format, and nothing else.

The exposition is parsed back with `prometheus_client`'s own parser and compared with the
snapshot it was written from, sample by sample and bit for bit (ms / 1000 where the name
says seconds): no sample more, none missing, a figure the snapshot lacks absent rather than
0. The names are written out here by hand (`NAMES`), so a live figure added to the
catalogue fails here until someone has named it. Then the route on an in-process web UI
(behind `--web-login`, under `--web-base-path`), and a real Locust process against the
simulator, scraped while its run goes and after it, against `/anvil/live.json` and
`benchmark.json`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from conftest import load_json
from locust.env import Environment
from locust_ui import BENCHMARK_KEY, locust_ui
from prometheus_client.parser import text_string_to_metric_families
from rawbuild import rows_of

from anvil_metrics import catalog
from anvil_metrics.live import promtext, webui
from anvil_metrics.live.figures import LIVE_METRICS, LiveMetric, LiveStats
from anvil_metrics.live.runctx import LATEST_ATTR
from anvil_metrics.live.users import ChatUser
from anvil_metrics.records import Failure, RequestRecord

# every live figure's Prometheus name and what its value is divided by (ms → s)
NAMES = {
    "time_to_first_output_ms": ("anvil_time_to_first_output_seconds", 1000),
    "ttft_ms": ("anvil_ttft_seconds", 1000),
    "reasoning_ms": ("anvil_reasoning_seconds", 1000),
    "e2e_ms": ("anvil_e2e_seconds", 1000),
    "mean_inter_token_latency_ms": ("anvil_mean_inter_token_latency_seconds", 1000),
    "decode_tok_s": ("anvil_decode_tokens_per_second", 1),
    "effective_prefill_tok_s": ("anvil_effective_prefill_tokens_per_second", 1),
}
QUANTILE_OF = {"p50": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99", "min": "0",
               "max": "1"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: bytes | str) -> Samples:
    """Every sample of an exposition, by (name, sorted labels); a sample twice is an error."""
    if isinstance(text, bytes):
        text = text.decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, key
            out[key] = s.value
    return out


def expected(snap: dict[str, Any], model: str | None) -> Samples:
    """What the exposition of `snap` must hold, written from the snapshot's keys by hand."""
    out: Samples = {}
    for m in snap["metrics"]:
        name, divisor = NAMES[m["field"]]
        for key, quantile in QUANTILE_OF.items():
            if m[key] is not None:
                out[(name, (("quantile", quantile),))] = m[key] / divisor
        out[(f"{name}_count", ())] = m["count"]
    for name, key in (("requests_completed", "completed"), ("requests_failed", "failed"),
                      ("warmup_requests", "warmup_requests"),
                      ("output_tokens", "output_tokens")):
        out[(f"anvil_{name}_total", ())] = snap[key]
    for kind, n in snap["failures_by_kind"].items():
        out[("anvil_request_failures_total", (("kind", kind),))] = n
    if snap["requests_planned"] is not None:
        out[("anvil_requests_planned", ())] = snap["requests_planned"]
    flow = snap["flow"]
    if flow["t_s"] and flow["in_flight"][-1] is not None:
        out[("anvil_requests_in_flight", ())] = flow["in_flight"][-1]
    if flow["t_s"] and flow["in_flight_max"][-1] is not None:
        out[("anvil_requests_in_flight_max", ())] = flow["in_flight_max"][-1]
    out[("anvil_run_elapsed_seconds", ())] = snap["elapsed_s"]
    out[("anvil_run_finished", ())] = int(snap["finished"])
    out[("anvil_figures_exact", ())] = int(snap["exact"])
    out[("anvil_run_info", (("model", model or ""), ("run_id", snap["run_id"])))] = 1
    return out


def assert_is_the_snapshot(text: bytes | str, snap: dict[str, Any], model: str | None) -> None:
    got, want = parse(text), expected(snap, model)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key] == value, (key, got[key], value)
        assert float(got[key]).hex() == float(value).hex(), key  # bit for bit


# --- the exposition of a known snapshot ---------------------------------------------------


def _record(i: int, ttft_ms: int, reasoning: bool = True, warmup: bool = False,
            failure: str | None = None) -> RequestRecord:
    start = 1_000_000_000 * (i + 1)
    if failure is not None:
        return RequestRecord(request_index=i, start_ns=start, end_ns=start + 5_000_000,
                             failure=Failure(kind=failure, message="boom"))
    first = start + ttft_ms * 1_000_000
    output = first - 10_000_000 if reasoning else first
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=output, first_content_ns=first,
        end_ns=first + 200_000_000 + i * 1_000_000, planned_context_tokens=512,
        reasoning_chunks=1 if reasoning else 0, content_chunks=4,
        chunk_deltas_ns=(output - start, first - output, 50_000_000, 50_000_000,
                         100_000_000 + i * 1_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": 21}, warmup=warmup)


def _running(ttfts: list[int]) -> LiveStats:
    """A run in progress: a warm-up, `ttfts` completed, a timeout and two refusals, and one
    flow tick (2.5 requests in flight on average over its second, 3 at most)."""
    live = LiveStats("benchmark-20260101T000000Z", requests_planned=len(ttfts) + 3)
    live.take(_record(0, 999, warmup=True))
    for i, ms in enumerate(ttfts):
        live.take(_record(i, ms))
    live.take(_record(len(ttfts), 0, failure="timeout"))
    live.take(_record(len(ttfts) + 1, 0, failure="connection"))
    live.take(_record(len(ttfts) + 2, 0, failure="connection"))
    live.flow.sample(1.0, 2.5, 1.0, 3)
    return live


def test_each_live_figure_is_named_in_its_base_unit() -> None:
    assert {m.field for m in LIVE_METRICS} == {f.name for f in catalog.LIVE_FIELDS}
    assert {m.field: (name, divisor) for m, name, divisor in promtext.SUMMARIES} == NAMES
    assert [q for _, q in promtext.QUANTILES] == list(QUANTILE_OF.values())
    with pytest.raises(ValueError, match="no Prometheus unit for 'tok'"):
        promtext.metric_name(LiveMetric("prompt_tokens", "prompt tokens", "tok"))
    with pytest.raises(ValueError, match="does not end in '_ms'"):
        promtext.metric_name(LiveMetric("ttft", "TTFT", "ms"))


def test_the_exposition_is_the_running_snapshot_exactly() -> None:
    snap = _running([431, 107, 389, 212, 250]).snapshot()
    text = promtext.exposition(snap, "sim-model")
    assert_is_the_snapshot(text, snap, "sim-model")
    got = parse(text)
    # a few by hand: the min and max of a sketch are exact, the rest within 1 %
    assert got[("anvil_ttft_seconds", (("quantile", "0"),))] == 0.107
    assert got[("anvil_ttft_seconds", (("quantile", "1"),))] == 0.431
    assert got[("anvil_ttft_seconds", (("quantile", "0.5"),))] == pytest.approx(0.25, rel=0.01)
    assert got[("anvil_ttft_seconds_count", ())] == 5
    assert got[("anvil_requests_completed_total", ())] == 5
    assert got[("anvil_requests_failed_total", ())] == 3
    assert got[("anvil_request_failures_total", (("kind", "connection"),))] == 2
    assert got[("anvil_warmup_requests_total", ())] == 1
    assert got[("anvil_output_tokens_total", ())] == 5 * 21
    assert got[("anvil_requests_planned", ())] == 8
    assert got[("anvil_requests_in_flight", ())] == 2.5
    assert got[("anvil_requests_in_flight_max", ())] == 3
    assert got[("anvil_figures_exact", ())] == 0 and got[("anvil_run_finished", ())] == 0
    families = {f.name: f.type for f in text_string_to_metric_families(text.decode())}
    assert families["anvil_ttft_seconds"] == "summary"
    assert families["anvil_requests_completed"] == "counter"
    assert families["anvil_requests_in_flight"] == "gauge"
    assert families["anvil_run_info"] == "gauge"  # an info metric, in the 0.0.4 format


def test_the_finished_runs_exposition_is_the_exact_table() -> None:
    ttfts = [431, 107, 389, 212, 250, 333, 120]
    live = _running(ttfts)
    live.finish(rows_of([_record(i, ms) for i, ms in enumerate(ttfts)]))
    snap = live.snapshot()
    assert snap["exact"] and snap["finished"]
    text = promtext.exposition(snap, None)
    assert_is_the_snapshot(text, snap, None)
    got = parse(text)
    # nearest rank of 7: p50 is the 4th smallest, p95 the 7th (exact once the run is over)
    assert got[("anvil_ttft_seconds", (("quantile", "0.5"),))] == 0.25
    assert got[("anvil_ttft_seconds", (("quantile", "0.95"),))] == 0.431
    assert got[("anvil_figures_exact", ())] == 1 and got[("anvil_run_finished", ())] == 1
    assert got[("anvil_run_info", (("model", ""), ("run_id", live.run_id)))] == 1


def test_absent_figures_are_absent_never_zero() -> None:
    live = LiveStats("r", requests_planned=None)
    live.take(_record(0, 0, failure="timeout"))  # nothing completed yet, no flow tick
    snap = live.snapshot()
    got = parse(promtext.exposition(snap, "m"))
    assert_is_the_snapshot(promtext.exposition(snap, "m"), snap, "m")
    assert not [k for k in got if dict(k[1]).get("quantile") is not None]  # no figure at all
    for name, _ in NAMES.values():
        assert got[(f"{name}_count", ())] == 0  # a count of none is a count
    for name in ("anvil_requests_planned", "anvil_requests_in_flight",
                 "anvil_requests_in_flight_max"):
        assert not [k for k in got if k[0] == name], name
    assert got[("anvil_requests_failed_total", ())] == 1

    # completed requests without a reasoning phase: every figure but that one
    live.take(_record(1, 200, reasoning=False))
    snap = live.snapshot()
    got = parse(promtext.exposition(snap, "m"))
    assert_is_the_snapshot(promtext.exposition(snap, "m"), snap, "m")
    assert [k for k in got if k[0] == "anvil_reasoning_seconds"] == []
    assert got[("anvil_reasoning_seconds_count", ())] == 0
    assert got[("anvil_ttft_seconds", (("quantile", "0.5"),))] == 0.2


def test_no_run_yet_is_an_empty_exposition() -> None:
    assert promtext.exposition(None) == b""


# --- the route, in process -----------------------------------------------------------------


def _web_ui(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust re-parses argv for its form
    env = Environment(user_classes=[ChatUser])
    env.create_local_runner()
    return env.create_web_ui("127.0.0.1", 0, delayed_start=True, **kwargs)


def test_the_route_serves_the_latest_runs_snapshot(monkeypatch) -> None:
    web_ui = _web_ui(monkeypatch)
    webui.install(web_ui)
    client = web_ui.app.test_client()
    empty = client.get("/anvil/metrics")
    assert empty.status_code == 200 and empty.data == b""
    assert empty.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    live = _running([431, 107, 389])
    live.finish()  # the clock stops: elapsed_s is the same in both answers
    run = SimpleNamespace(live=live, run_id=live.run_id, run_dir=Path("/nonexistent"),
                          finished=False, benchmark_path=None, model="sim-model")
    setattr(web_ui.environment, LATEST_ATTR, run)
    resp = client.get("/anvil/metrics")
    assert resp.status_code == 200 and resp.headers["Cache-Control"] == "no-store"
    snap = orjson.loads(client.get("/anvil/live.json").data)
    assert_is_the_snapshot(resp.data, snap, "sim-model")


def test_web_login_guards_it_and_the_base_path_holds(monkeypatch) -> None:
    web_ui = _web_ui(monkeypatch, web_login=True)
    web_ui.app.secret_key = "test"
    web_ui.login_manager.user_loader(lambda user_id: None)
    webui.install(web_ui)
    resp = web_ui.app.test_client().get("/anvil/metrics")
    assert resp.status_code in (302, 401) and b"anvil_" not in resp.data
    assert "login" in resp.headers.get("Location", "login")

    web_ui = _web_ui(monkeypatch, web_base_path="/lt")
    webui.install(web_ui, "/lt/")
    assert web_ui.app.test_client().get("/lt/anvil/metrics").status_code == 200


# --- a real Locust process, scraped while it runs -------------------------------------------

# ~0.2 s a request (40 ms prefill, 2 + 8 tokens 15 ms apart): 30 requests by 2 users, ~3 s
PACED_SIM = ("--prefill-ms", "40", "--reasoning-tokens", "2", "--content-tokens", "8",
             "--interval-ms", "15", "--max-context", "8192")
FORM = {"user_count": "2", "spawn_rate": "2", "run_time": "", "profile": "", "api_key": "",
        "max_tokens": "", "model": "", "recalibrate": "false", "requests": "30",
        "run_nonce": "", "scenario": "scenarios/smoke.toml", "tokenizer": "",
        "warmup_requests": "1"}


def _wait_in_progress(ui: Any, timeout_s: float = 30) -> dict[str, Any]:
    """live.json once the run is going and at least 2 requests have completed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = ui.json("/anvil/live.json")
        if live["run_id"] is not None and not live["finished"] and live["completed"] >= 2:
            return live
        assert not live["finished"], "the run ended before it was seen going"
        time.sleep(0.05)
    raise AssertionError(f"the run did not start\n{ui.log()[-3000:]}")


def _assert_between(got: Samples, before: dict[str, Any], after: dict[str, Any]) -> None:
    """A scrape taken between two live.json answers of one run: every counter, count and
    the clock between theirs; min not above the earlier min nor below the later one, max
    the other way round; quantiles in order."""
    for name, key in (("requests_completed", "completed"), ("requests_failed", "failed"),
                      ("warmup_requests", "warmup_requests"),
                      ("output_tokens", "output_tokens")):
        assert before[key] <= got[(f"anvil_{name}_total", ())] <= after[key], name
    assert before["elapsed_s"] <= got[("anvil_run_elapsed_seconds", ())] <= after["elapsed_s"]
    assert got[("anvil_run_info", (("model", "sim-model"),
                                   ("run_id", before["run_id"])))] == 1
    for b, a in zip(before["metrics"], after["metrics"], strict=True):
        name, divisor = NAMES[b["field"]]
        assert b["count"] <= got[(f"{name}_count", ())] <= a["count"], name
        q = [got[(name, (("quantile", v),))] for v in QUANTILE_OF.values()]
        assert q[-2] <= q[0] <= q[1] <= q[2] <= q[3] <= q[-1], (name, q)
        assert a["min"] / divisor <= q[-2] <= b["min"] / divisor, name
        assert b["max"] / divisor <= q[-1] <= a["max"] / divisor, name


@pytest.mark.e2e
def test_scraped_during_and_after_a_real_run(simulator, tmp_path: Path) -> None:
    sim = simulator(*PACED_SIM)
    results = tmp_path / "runs"
    with locust_ui(sim.url, tmp_path, "--results-dir", str(results)) as ui:
        assert ui.get("/anvil/metrics") == b""  # no run yet
        assert ui.swarm({**FORM, "host": sim.url, "model": "sim-model"})["success"] is True
        before = _wait_in_progress(ui)
        scraped = parse(ui.get("/anvil/metrics"))
        after = ui.json("/anvil/live.json")
        assert after["run_id"] == before["run_id"]
        assert scraped[("anvil_run_finished", ())] == 0  # taken while the run was going
        _assert_between(scraped, before, after)

        final = ui.wait_run_finished()
        text = ui.get("/anvil/metrics")
        assert ui.json("/anvil/live.json") == final  # nothing moves once it has ended
        assert_is_the_snapshot(text, final, "sim-model")

    doc = load_json(results / final["run_id"] / "benchmark.json")
    got = parse(text)
    assert (doc["completed"], doc["model"]) == (30, "sim-model")
    assert got[("anvil_requests_completed_total", ())] == doc["completed"]
    assert got[("anvil_run_info", (("model", doc["model"]), ("run_id", doc["run_id"])))] == 1
    for m in LIVE_METRICS:  # p50 and p95 are benchmark.json's, in seconds, bit for bit
        name, divisor = NAMES[m.field]
        for p in catalog.PERCENTILES:
            want = doc["metrics"][BENCHMARK_KEY[(m.field, p)]]
            if want is None:
                assert (name, (("quantile", f"{p / 100:g}"),)) not in got
            else:
                assert got[(name, (("quantile", f"{p / 100:g}"),))] == want / divisor
