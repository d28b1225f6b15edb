"""A web-UI run with no request count, ended by the Stop button, in headless Chromium.

Why: with no scenario and "requests" left blank, a run from Locust's form has no budget: it
runs until the user clicks Stop. That is the web UI's everyday use, and the one where the
end is the user's, not anvil's: the requests in flight at the click must still be measured
(they get --stop-timeout, 30 s by default, to finish), every issued request must be in
benchmark.json exactly once, and the pages must not claim a planned count ("of N").

The streams here last ~1 s, so at the click each user has one in flight; the test's
`time.perf_counter_ns()` is the same clock as the Locust process's stamps (CLOCK_MONOTONIC),
so "in flight at the click" is read straight off the raw records. A screenshot of `/anvil/`
is saved as `webui-until-stop.png` (and `webui-until-stop-failure.png` when it fails).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from chromium_cdp import Page
from conftest import load_json, raw_lines
from locust_ui import locust_ui
from webui_chromium import (
    BUTTON,
    INPUT,
    TAB,
    TABLE,
    open_custom_parameters,
    screenshot,
    tab_rows,
    type_options,
)

from anvil_metrics.post.verify import verify_benchmark

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# ~1 s a stream: 100 ms prefill, 3 + 40 tokens 20 ms apart
SLOW_SIM = ("--prefill-ms", "100", "--reasoning-tokens", "3", "--content-tokens", "40",
            "--interval-ms", "20", "--max-context", "8192")
USERS = 2




def test_web_ui_run_until_stop(simulator, page: Page, tmp_path: Path) -> None:
    sim = simulator(*SLOW_SIM)
    ui_dir = tmp_path / "ui"
    with locust_ui(sim.url, tmp_path, "--results-dir", str(tmp_path / "cli")) as ui:
        try:
            page.goto(ui.url + "/")
            page.wait_for(f"!!({INPUT.format('userCount')})", what="Locust's start form")
            open_custom_parameters(page)
            assert page.evaluate(f"({INPUT.format('requests')}).value") == ""  # left blank
            type_options(page, userCount=str(USERS), spawnRate=str(USERS), maxTokens="64",
                         resultsDir=str(ui_dir))
            page.click("document.querySelector('form button[type=submit]')")
            page.wait_for(f"!!({BUTTON.format('Stop')})", what="the Stop button")
            time.sleep(2.0)
            live = ui.json("/anvil/live.json")
            assert live["finished"] is False and live["requests_planned"] is None, live
            # click mid-stream, not where one ends (a user whose stream ends as the click
            # travels to Locust starts another, legitimately): a record just written means
            # a stream just ended and its user's next one just began
            raw_file = ui_dir / live["run_id"] / "requests.jsonl"
            seen = raw_file.read_bytes().count(b'"type":"request"')
            deadline = time.monotonic() + 5
            while (raw_file.read_bytes().count(b'"type":"request"') == seen
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            time.sleep(0.3)
            stop_ns = time.perf_counter_ns()
            page.click(BUTTON.format("Stop"))
            clicked = time.monotonic()
            live = ui.wait_run_finished(timeout_s=30)
            took = time.monotonic() - clicked

            run_dir = ui_dir / live["run_id"]
            doc = load_json(run_dir / "benchmark.json")
            raw = sorted((x for x in raw_lines(run_dir)
                          if x["type"] == "request" and not x["warmup"]),
                         key=lambda x: x["request_index"])
            in_flight = [x for x in raw if x["start_ns"] < stop_ns < x["end_ns"]]
            print(f"\n[until stop] {doc['requests']} requests ({doc['completed']} completed, "
                  f"{doc['failed']} failed); {len(in_flight)} in flight at the click, "
                  f"finished {[(x['end_ns'] - stop_ns) / 1e6 for x in in_flight]} ms after "
                  f"it; benchmark.json {took:.2f} s after the click; load {doc['load']}")

            assert verify_benchmark(doc) == []
            assert doc["load"]["mode"] == "until_stopped"
            assert doc["load"]["duration_s"] is None
            assert doc["concurrency"] == USERS
            # every issued request exactly once: a row or a failure, by index
            assert [x["request_index"] for x in raw] == list(range(len(raw)))
            rows = {r["request_index"]: r for r in doc["request_timings"]}
            fails = {f["request_index"]: f for f in doc["failures"]}
            assert not rows.keys() & fails.keys()
            assert sorted(rows.keys() | fails.keys()) == list(range(len(raw)))
            assert doc["requests"] == len(raw) >= 2 * USERS
            for x in raw:
                if x["failure"] is None:
                    assert rows[x["request_index"]]["e2e_ms"] == (
                        x["end_ns"] - x["start_ns"]) / 1e6
            # each user had a stream open at the click; it finished (30 s stop timeout)
            assert len(in_flight) == USERS
            for x in in_flight:
                assert x["failure"] is None, x["failure"]
                assert rows[x["request_index"]]["output_tokens"] > 0
            assert doc["failed"] == 0 and doc["load"]["cancelled"] == 0
            assert max(x["start_ns"] for x in raw) < stop_ns  # none started after the click

            # no planned count anywhere: the LLM tab and /anvil/
            page.wait_for(f"!!({TAB.format('LLM')})", 20, what="the LLM tab")
            page.click(TAB.format("LLM"))
            page.wait_for(f"{TABLE}.some(r => r[0] === 'run {doc['run_id']} (finished)')", 20,
                          what="the LLM tab to show the finished run")
            rows_shown = tab_rows(page)
            done = [k for k in rows_shown if k.startswith("measured requests done")]
            assert done == ["measured requests done"], list(rows_shown)
            assert rows_shown["measured requests done"][1] == str(doc["requests"])
            page.goto(ui.url + "/anvil/")
            page.wait_for(f"document.body.dataset.runId === '{doc['run_id']}' && "
                          "document.body.dataset.finished === 'true'",
                          what="/anvil/ to show the run")
            status = page.evaluate("document.getElementById('status').textContent")
            assert (f"{doc['requests']} measured requests done ({doc['completed']} completed,"
                    f" {doc['failed']} failed)") in status, status
            assert " of " not in status, status
            screenshot(page, tmp_path, "webui-until-stop.png")
        except BaseException:
            screenshot(page, tmp_path, "webui-until-stop-failure.png")
            raise
