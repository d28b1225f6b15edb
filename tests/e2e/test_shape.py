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
    # each stage lasted ~1 s (the shape's ticks are 1 s apart, anvil looks every 50 ms)
    for s in steps[:2]:
        assert 0.5 < s["ended_s"] - s["started_s"] < 2.0, steps
    # every measured record is in exactly one step: the one that began last before its start
    raw = raw_lines(run_dir)
    starts = [x["t_ns"] for x in raw if x["type"] == "step"]
    measured = [x for x in raw if x["type"] == "request" and not x["warmup"]]
    want = [sum(1 for x in measured if sum(t <= x["start_ns"] for t in starts) - 1 == i
                or (i == 0 and x["start_ns"] < starts[0])) for i in range(3)]
    assert [s["requests"] for s in steps] == want and sum(want) == doc["requests"]
    # more users, more requests per second (a fast simulator: the users are the limit)
    rates = [s["requests"] / (s["ended_s"] - s["started_s"]) for s in steps]
    assert rates[0] < rates[1] < rates[2], rates
