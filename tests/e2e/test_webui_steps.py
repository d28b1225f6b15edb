"""A web-UI run whose user count is edited while it runs, then stopped: the edit is a step.

Why: in Locust's web UI a user changes the number of users of a running test (the "Edit"
dialog sends `/swarm` again); a benchmark that recorded one `concurrency` would report the
whole run at the first count. anvil watches the target count (`runclock.RunClock`) and
writes a step line at each change, so the document has one block per load. Driven over HTTP
(what the page sends), against the simulator; no request count: the run ends at `/stop`.
The same run checks the live page's TTFT CDF and flow (in flight, throughput) as
`/anvil/live.json` serves them before the edit, before the stop and at the end.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import load_json, raw_lines
from locust_ui import FAST_SIM, assert_final_cdf_and_flow, locust_ui
from simfork import start_simulator
from stepcheck import check_each_request_in_one_step, measured

from anvil_metrics.live.runclock import USERS_POLL_S
from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e


Run = tuple[Path, dict[str, Any], int, dict[str, dict[str, Any]]]


def _live_until(ui: Any, ready: Callable[[dict[str, Any]], bool],
                limit_s: float = 30.0) -> dict[str, Any]:
    """`/anvil/live.json` once `ready` says it holds what the tests read (bounded)."""
    deadline = time.monotonic() + limit_s
    while not ready(live := ui.json("/anvil/live.json")):
        assert time.monotonic() < deadline, live["flow"]
        time.sleep(0.2)
    return live


@pytest.fixture(scope="module")
def edited_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """2 users for ~2 s (a whole second of flow before the edit), edited to 4 for ~1.5 s,
    stopped: (run folder, benchmark.json, the perf_counter_ns just before the edit was
    sent, `/anvil/live.json` just before the edit, just before the stop and once
    finished)."""
    tmp_path = tmp_path_factory.mktemp("webui-steps")
    lives: dict[str, dict[str, Any]] = {}
    with start_simulator(list(FAST_SIM)) as sim, locust_ui(
            sim.url, tmp_path, "--results-dir", str(tmp_path / "res")) as ui:
        assert ui.swarm({"user_count": 2, "spawn_rate": 2, "host": sim.url})["success"]
        time.sleep(2.0)
        # output in a passed second after the first (the set-up can take the first second
        # and more on a busy machine: wait for what the tests read, not for a time)
        before = lives["before_edit"] = _live_until(ui, lambda live: any(
            v > 0 for v in live["flow"]["output_tok_s"][1:]))
        edit_ns = time.perf_counter_ns()
        assert ui.swarm({"user_count": 4, "spawn_rate": 4, "host": sim.url})["success"]
        time.sleep(1.5)
        # two passed seconds after the edit's second (the 4 users' figures)
        lives["before_stop"] = _live_until(ui, lambda live: sum(
            t > before["elapsed_s"] + 1 for t in live["flow"]["t_s"]) >= 2)
        with urllib.request.urlopen(ui.url + "/stop", data=b"", timeout=10) as r:
            assert r.status == 200
        live = lives["final"] = ui.wait_run_finished(timeout_s=30)
        run_dir = tmp_path / "res" / live["run_id"]
        return run_dir, load_json(run_dir / "benchmark.json"), edit_ns, lives


def test_a_user_count_edit_is_a_step(edited_run: Run) -> None:
    run_dir, doc, edit_ns, _ = edited_run
    steps = doc["steps"]
    lines = [x for x in raw_lines(run_dir) if x["type"] in ("step", "step_end")]
    print(f"\n[web UI edit] {doc['requests']} requests; "
          + "; ".join(f"step {b['step']} ({b['users']} users) {b['started_s']:.3f}-"
                      f"{b['ended_s']:.3f} s: {b['requests']} requests" for b in steps)
          + f"; concurrency {doc['concurrency']}")
    assert verify_benchmark(doc) == []
    assert doc["load"]["mode"] == "until_stopped"
    assert [(b["step"], b["users"]) for b in steps] == [(0, 2), (1, 4)]
    assert [x["type"] for x in lines] == ["step", "step"]  # stopped: no step_end
    # the edit seen within the watcher's poll (50 ms) of Locust starting it: two turns of
    # the hub after the /swarm answer (Locust's start greenlet, the watcher's sleep), each
    # late by at most the run's own worst loop lag, plus the HTTP exchange (sanity: 300 ms)
    lag_max_ms = doc["client"]["loop_lag_ms"]["max"]
    seen_ms = (lines[1]["t_ns"] - edit_ns) / 1e6
    assert 0 <= seen_ms < 300 + USERS_POLL_S * 1000 + 2 * lag_max_ms, (seen_ms, lag_max_ms)
    check_each_request_in_one_step(run_dir, doc)
    assert doc["failed"] == 0
    # the load doubled: requests in flight on average (Little's law, from the raw stamps)
    # 2 until the edit was sent, up to 4 from the step on (its users spawned at 4 a
    # second), whatever the machine made each request's latency
    reqs = [(x["start_ns"], x["end_ns"]) for x in measured(run_dir)]
    assert all(end is not None for _, end in reqs)
    windows = [(min(a for a, _ in reqs), edit_ns), (lines[1]["t_ns"], max(b for _, b in reqs))]
    in_flight = [sum(max(0, min(b, hi) - max(a, lo)) for a, b in reqs) / (hi - lo)
                 for lo, hi in windows]  # fmt: skip
    assert 1.5 < in_flight[0] <= 2 and 2.5 < in_flight[1] <= 4, in_flight


def test_an_edited_runs_concurrency_is_its_largest_step(edited_run: Run) -> None:
    _, doc, _, _ = edited_run
    assert doc["concurrency"] == max(b["users"] for b in doc["steps"]) == 4


def test_live_cdf_and_flow_move_while_the_run_goes(edited_run: Run) -> None:
    """`/anvil/live.json` while the run goes: the TTFT CDF over the requests completed so
    far, and one flow point per second passed, in flight never above the users (2, then 4
    after the edit); at the end, the CDF's p50/p95 are benchmark.json's bit for bit and the
    flow holds every request and output token once."""
    _, doc, _, lives = edited_run
    before, during, final = lives["before_edit"], lives["before_stop"], lives["final"]
    for live in (before, during):
        assert live["finished"] is False and live["run_id"] == doc["run_id"]
        cdf, flow = live["ttft_cdf"], live["flow"]
        assert cdf["count"] == live["completed"] > 0 and len(cdf["value"]) == 101
        assert cdf["value"] == sorted(cdf["value"])
        assert flow["t_s"] and flow["t_s"][-1] <= live["elapsed_s"]  # passed seconds only
        # requests end in the seconds after the first (the start-up's); not in every one:
        # beside the suite and a hog a process can be held a whole second
        assert any(v > 0 for v in flow["output_tok_s"][1:]), flow
        assert sum(flow["output_tokens"]) > 0
        assert sum(flow["completed"]) <= live["completed"]
    print(f"\n[live flow] before the edit: in flight {before['flow']['in_flight']}; "
          f"before the stop: {during['flow']['in_flight']}; tok/s "
          f"{[round(v) for v in during['flow']['output_tok_s']]}")
    assert 1 <= max(before["flow"]["in_flight_max"]) <= 2  # 2 users, back to back
    after = [m for t, m in zip(during["flow"]["t_s"], during["flow"]["in_flight_max"],
                               strict=True) if t > before["elapsed_s"] + 1]
    assert after and 3 <= max(after) <= 4  # 4 users once the edit is in
    # it moved: more points, more requests under the CDF
    assert len(during["flow"]["t_s"]) > len(before["flow"]["t_s"])
    assert during["ttft_cdf"]["count"] > before["ttft_cdf"]["count"]
    assert_final_cdf_and_flow(final, doc)
    assert max(final["flow"]["in_flight_max"]) <= 4
