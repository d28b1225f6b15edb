"""The client-saturation verdict: a starved generator says so; a healthy one does not."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, load_json, write_scenario

from anvil_metrics.post import saturation

SCENARIO = """
measurement_protocol = "saturation"
max_tokens = 40
context_tokens = 4096
max_context_tokens = 8192
[context_distribution]
4096 = 1
"""

# A locustfile that is anvil's, plus a greenlet that holds the hub ~30 ms at a time for
# the whole run: every stream's stamps can be that late, and the process is busy.
STARVED = '''
import time

import gevent
from locust import events

from anvil_metrics.runs.locustfile import ChatUser  # noqa: F401

_stop = []


def _burn():
    while not _stop:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.03:
            pass
        gevent.sleep(0.001)


@events.test_start.add_listener
def _start(**_):
    gevent.spawn(_burn)


@events.test_stopping.add_listener
def _stopping(**_):
    _stop.append(True)
'''


def test_verdict_thresholds() -> None:
    assert saturation.verdict(None, None) == (None, [])
    assert saturation.verdict(10.0, 90.0) == (False, [])  # the limits themselves are fine
    sat, why = saturation.verdict(10.5, 20.0)
    assert sat is True and why == ["event-loop lag p99 10.5 ms > 10 ms"]
    sat, why = saturation.verdict(0.4, 97.0)
    assert sat is True and why == ["CPU 97 % of one core > 90 %"]
    assert saturation.verdict_text(True, why) == "saturated: CPU 97 % of one core > 90 %"


def test_achieved_concurrency_and_start_delay() -> None:
    start = np.arange(5, dtype=np.int64) * 10
    end = start + 40
    has_end = np.array([True] * 4 + [False])  # the last one failed without an end
    # busy 4 × 40 ns over a wall of 70 ns
    assert saturation.achieved_concurrency(start, end, has_end, 70 / 1e6) \
        == pytest.approx(160 / 70)
    assert saturation.achieved_concurrency(start, end, has_end, None) is None
    delays = np.array([1, 2, 3, 4], dtype=np.int64) * 1_000_000
    assert saturation.start_delay_ms(delays) == {"p50": 2.0, "p99": 4.0, "max": 4.0}
    assert saturation.start_delay_ms(np.array([], dtype=np.int64)) is None


# The floor: a bare gevent hub in a process of its own that does nothing but measure its own
# lag (anvil's monitor), beside the run, until SIGTERM; it prints its p99 in ms.
PROBE = """
import signal, gevent
from anvil_metrics.live.lagmon import LoopLagMonitor
mon = LoopLagMonitor()
mon.start()
done = []
gevent.signal_handler(signal.SIGTERM, done.append, True)
print("ready", flush=True)
while not done:
    gevent.sleep(0.05)
print(mon.stop().p99_ms, flush=True)
"""


def _run(tmp_path: Path, sim_url: str, locustfile: str, users: int, requests: int) -> dict:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", locustfile, "--headless", "-u", str(users),
         "-r", str(users), "-H", sim_url, "--scenario", str(sc), "--requests", str(requests),
         "--results-dir", str(results), "--only-summary"],
        cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("benchmark-")]
    doc = load_json(run_dir / "benchmark.json")
    doc["_log"] = proc.stderr
    return doc


@pytest.mark.e2e
def test_a_starved_client_is_marked_saturated(simulator, tmp_path: Path) -> None:
    sim = simulator("--prefill-ms", "20", "--reasoning-tokens", "0", "--content-tokens", "40",
                    "--interval-ms", "10", "--max-context", "8192")
    locustfile = tmp_path / "starved.py"
    locustfile.write_text(STARVED)
    doc = _run(tmp_path, sim.url, str(locustfile), users=4, requests=12)
    client = doc["client"]
    assert client["saturated"] is True, client
    assert "event-loop lag p99" in client["verdict"], client
    assert client["loop_lag_ms"]["p99"] > 10
    assert "the load generator was saturated" in doc["_log"]


@pytest.mark.e2e
def test_a_normal_run_is_not_saturated(simulator, tmp_path: Path) -> None:
    """8 streams × 50 tok/s against the simulator: the client keeps up.

    400 chunks a second in all: light enough that the client's own work adds no lag. How
    late its loop wakes is judged against the floor the machine gives at the same time: a
    bare hub in a process of its own (on a quiet machine ~0.2 ms; beside CPU hogs the OS
    alone can make both late by more than the verdict's limit, and the verdict must then say
    the stamps may be late, which is no fault of the client's)."""
    sim = simulator("--prefill-ms", "20", "--reasoning-tokens", "0", "--content-tokens", "20",
                    "--interval-ms", "20", "--max-context", "8192")
    probe = subprocess.Popen([sys.executable, "-c", PROBE], cwd=REPO, stdout=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        assert probe.stdout is not None and probe.stdout.readline() == "ready\n"
        doc = _run(tmp_path, sim.url, "locustfiles/chat.py", users=8, requests=32)
    finally:
        probe.send_signal(signal.SIGTERM)
        out, _ = probe.communicate(timeout=30)
    floor_p99_ms = float(out)
    client = doc["client"]
    lag_p99_ms = client["loop_lag_ms"]["p99"]
    assert lag_p99_ms <= saturation.LAG_P99_LIMIT_MS + floor_p99_ms, (floor_p99_ms, client)
    assert client["cpu_pct"] <= saturation.CPU_LIMIT_PCT, client
    # the verdict follows its figures: on a quiet machine it is "ok"
    assert client["saturated"] is (lag_p99_ms > saturation.LAG_P99_LIMIT_MS), client
    assert (client["verdict"] == "ok") is (not client["saturated"])
    assert ("saturated" in doc["_log"]) is client["saturated"]
    # 8 users back to back: in flight nearly all the time (ramp-up and tail excepted)
    assert 6 <= client["achieved_concurrency"] <= 8, client
    # a sanity bound only: a request waits for the loop, never for a whole stream (~0.4 s)
    assert client["start_delay_ms"]["p50"] < 50 + floor_p99_ms, client


def test_the_summary_warns_when_saturated() -> None:
    from anvil_metrics.runs.launch import summary_lines

    doc = {"concurrency": 4, "client": {"loop_lag_ms": {"p50": 1.0, "p99": 30.0, "max": 40.0},
                                        "cpu_pct": 50.0, "achieved_concurrency": 3.9,
                                        "saturated": True, "verdict": "saturated: x"}}
    lines = summary_lines(doc)
    assert any(line.startswith("WARNING: the load generator was saturated") for line in lines)
    doc["client"]["saturated"] = False
    assert not any("WARNING" in line for line in summary_lines(doc))
