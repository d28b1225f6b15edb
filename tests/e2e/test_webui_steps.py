"""A web-UI run whose user count is edited while it runs, then stopped: the edit is a step.

Why: in Locust's web UI a user changes the number of users of a running test (the "Edit"
dialog sends `/swarm` again); a benchmark that recorded one `concurrency` would report the
whole run at the first count. anvil watches the target count (`session._watch_users`) and
writes a step line at each change, so the document has one block per load. Driven over HTTP
(what the page sends), against the simulator; no request count: the run ends at `/stop`.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import load_json, raw_lines
from locust_ui import FAST_SIM, locust_ui
from test_sweeps import check_each_request_in_one_step

from anvil_metrics.simproc import start_simulator
from anvil_metrics.verify import verify_benchmark

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def edited_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    """2 users for ~1.5 s, edited to 4 for ~1.5 s, stopped: (run folder, benchmark.json, the
    perf_counter_ns just before the edit was sent)."""
    tmp_path = tmp_path_factory.mktemp("webui-steps")
    with start_simulator(list(FAST_SIM)) as sim, locust_ui(
            sim.url, tmp_path, "--results-dir", str(tmp_path / "res")) as ui:
        assert ui.swarm({"user_count": 2, "spawn_rate": 2, "host": sim.url})["success"]
        time.sleep(1.5)
        edit_ns = time.perf_counter_ns()
        assert ui.swarm({"user_count": 4, "spawn_rate": 4, "host": sim.url})["success"]
        time.sleep(1.5)
        with urllib.request.urlopen(ui.url + "/stop", data=b"", timeout=10) as r:
            assert r.status == 200
        live = ui.wait_run_finished(timeout_s=30)
        run_dir = tmp_path / "res" / live["run_id"]
        return run_dir, load_json(run_dir / "benchmark.json"), edit_ns


def test_a_user_count_edit_is_a_step(edited_run: tuple[Path, dict[str, Any], int]) -> None:
    run_dir, doc, edit_ns = edited_run
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
    # the edit seen within the watcher's poll (50 ms) of being sent
    assert 0 <= lines[1]["t_ns"] - edit_ns < 300_000_000, lines[1]["t_ns"] - edit_ns
    check_each_request_in_one_step(run_dir, doc)
    assert doc["failed"] == 0
    # about twice the requests per second at twice the users (far from the server's limit)
    rates = [b["requests"] / (b["ended_s"] - b["started_s"]) for b in steps]
    assert 1.3 < rates[1] / rates[0] < 2.7, rates


def test_an_edited_runs_concurrency_is_its_largest_step(
        edited_run: tuple[Path, dict[str, Any], int]) -> None:
    _, doc, _ = edited_run
    assert doc["concurrency"] == max(b["users"] for b in doc["steps"]) == 4
