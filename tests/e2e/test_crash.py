"""Crash safety: a single-process run killed with SIGKILL mid-run keeps what it measured.

Raw records are appended and flushed as each request ends, so after `kill -9` the run
folder holds every finished request; `anvil postprocess` turns exactly those into a valid
`benchmark.json` marked `partial`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import REPO, anvil, load_json, write_scenario

from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "crash"
concurrency = 3
requests = 400
max_tokens = 40
context_tokens = 4096
max_context_tokens = 4096
[context_distribution]
512 = 1
"""


def test_kill_9_mid_run_then_postprocess(simulator, tmp_path: Path) -> None:
    sim = simulator("--prefill-ms", "20", "--content-tokens", "40", "--interval-ms", "5",
                    "--max-context", "4096")
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    res = tmp_path / "res"
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless", "-H",
         sim.url, "-u", "3", "-r", "3", "--scenario", str(sc), "--results-dir", str(res),
         "--run-time", "120s"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL)
    try:
        raw = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until some requests are on disk
            found = list(res.glob("benchmark-*/requests.jsonl"))
            if found and found[0].read_bytes().count(b'"type":"request"') >= 12:
                raw = found[0]
                break
            time.sleep(0.05)
        assert raw is not None, "the run wrote no records"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    run_dir = raw.parent
    assert not (run_dir / "benchmark.json").exists()
    lines = raw.read_bytes().splitlines()
    complete = []
    for line in lines:
        try:
            complete.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            assert line is lines[-1], "only the last line may be torn"
    measured = [x for x in complete if x.get("type") == "request" and not x.get("warmup")]
    assert len(measured) >= 12 and not any(x.get("type") == "run_end" for x in complete)

    out = anvil("postprocess", str(run_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    doc = load_json(run_dir / "benchmark.json")
    assert doc["partial"] is True and verify_benchmark(doc) == []
    assert doc["requests"] == len(measured)
    ok = sorted((x["request_index"], x["end_ns"] - x["start_ns"]) for x in measured
                if x.get("failure") is None)
    rows = sorted((r["request_index"], r["e2e_ms"]) for r in doc["request_timings"])
    assert [i for i, _ in rows] == list(range(len(ok)))  # dense, in issue order
    assert [e / 1e6 for _, e in ok] == [e for _, e in rows]
    assert "[PARTIAL]" in out.stdout
