"""End to end: a user-written LoadTestShape (the shipped `locustfiles/shape_steps.py`, with
shorter stages) is recorded as steps: every request in the step in force when it started,
each step's figures recomputable, with plain `locust -f` on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, load_json, raw_lines

from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

FAST_SIM = ("--prefill-ms", "20", "--reasoning-tokens", "3", "--content-tokens", "10",
            "--interval-ms", "5", "--max-context", "8192")


def test_a_load_test_shape_is_recorded_as_steps(simulator, tmp_path: Path) -> None:
    sim = simulator(*FAST_SIM)
    shipped = (REPO / "locustfiles" / "shape_steps.py").read_text()
    fast, n = re.subn(r"STAGES = \(.*\)\n", "STAGES = ((0, 1), (1, 3), (2, 6))\n", shipped)
    fast, m = re.subn(r"END_S = \d+", "END_S = 3", fast)
    assert n == m == 1, "the shipped shape's STAGES / END_S lines changed"
    shape = tmp_path / "shape.py"
    shape.write_text(fast)
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(shape), "--headless", "-H", sim.url,
         "--results-dir", str(tmp_path / "res")],
        cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "res").glob("benchmark-*")
    doc = load_json(run_dir / "benchmark.json")
    assert verify_benchmark(doc) == []
    steps = doc["steps"]
    assert [s["users"] for s in steps] == [1, 3, 6]
    # the shape's ticks are 1 s apart and anvil looks every 50 ms: the second stage, between
    # two ticks, lasted ~1 s; the first began when anvil first looked, after its set-up (on
    # a busy machine late: seen 0.37 s after the header, and 0.46 s long), so only its end
    # is a tick
    assert 0.5 < steps[1]["ended_s"] - steps[1]["started_s"] < 2.0, steps
    assert 0 < steps[0]["ended_s"] - steps[0]["started_s"] < 2.0, steps
    # every measured record is in exactly one step: the one that began last before its start
    raw = raw_lines(run_dir)
    starts = [x["t_ns"] for x in raw if x["type"] == "step"]
    measured = [x for x in raw if x["type"] == "request" and not x["warmup"]]
    want = [sum(1 for x in measured if sum(t <= x["start_ns"] for t in starts) - 1 == i
                or (i == 0 and x["start_ns"] < starts[0])) for i in range(3)]
    assert [s["requests"] for s in steps] == want and sum(want) == doc["requests"]
    # more users, more requests in flight: each step's mean from the raw stamps (the time
    # requests were open in its window, over the window; Little's law). A user has one
    # request at a time, so a step holds at most its users, but for the next step's users
    # in its last moments: anvil writes a step's line when it sees the new count, up to its
    # 50 ms look after Locust started them (seen 3.07 in a 3-user step; the bound allows a
    # tenth of the window). The 6 users' step holds more than 3 users could: they ran at
    # once. (The first step may hold none: its user waits for the run's set-up, which on a
    # busy machine took its whole second.) Not requests per second: a machine too busy to
    # serve 6 streams as fast as 3 sends fewer a second, with 6 still in flight (seen: 34.0
    # and 33.4 req/s at 3 and 6 users beside a CPU hog and the whole suite).
    last_end = starts[2] + round((steps[2]["ended_s"] - steps[2]["started_s"]) * 1e9)
    windows = list(zip(starts, [*starts[1:], last_end], strict=True))
    in_flight = [sum(max(0, min(x["end_ns"], b) - max(x["start_ns"], a)) for x in measured)
                 / (b - a) for a, b in windows]
    users = [s["users"] for s in steps]
    most = [u + (v - u) / 10 for u, v in zip(users, [*users[1:], users[-1]], strict=True)]
    assert all(f <= m for f, m in zip(in_flight, most, strict=True)), in_flight
    assert in_flight[0] <= in_flight[1] < in_flight[2] and in_flight[2] > users[1], in_flight
