"""The server's own metrics beside a run: scraped by a child process, never in the way.

Real processes throughout: the simulator, `anvil run` (Locust), the sampler child, and for the
broken-endpoint cases a stub metrics server in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, result_path

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

# /metrics that answers after `delay` seconds with `body` (a process of its own, so a hang
# costs the test process nothing); prints its port
STUB = textwrap.dedent("""
    import sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    delay, body = float(sys.argv[1]), sys.argv[2].encode()
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(delay)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the scraper gave up waiting: expected here
                pass
        def log_message(self, *a):
            pass
    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    s.daemon_threads = True
    print(s.server_address[1], flush=True)
    deadline = time.monotonic() + 300
    s.timeout = 1
    while time.monotonic() < deadline:
        s.handle_request()
""")


@pytest.fixture
def stub_metrics() -> Iterator:
    procs: list[subprocess.Popen] = []

    def start(delay_s: float, body: str) -> str:
        p = subprocess.Popen([sys.executable, "-c", STUB, str(delay_s), body],
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        port = p.stdout.readline().strip()
        return f"http://127.0.0.1:{port}/metrics"

    yield start
    for p in procs:
        p.kill()
        p.wait(10)


def _run(sim_url: str, out: Path, *extra: str) -> dict:
    proc = anvil("run", "scenarios/smoke.toml", "--host", sim_url, "--requests", "80",
                 "--users", "4", "--results-dir", str(out), *extra, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_json(result_path(proc))


def test_a_hanging_metrics_endpoint_never_touches_the_measurement(
        simulator, stub_metrics, tmp_path: Path) -> None:
    """Each scrape hangs 5 s (beyond the 2 s timeout): the run's requests and loop lag are
    those of a run without scraping, and `server` says why it has no figures."""
    sim = simulator("--prefill-ms", "20", "--interval-ms", "5", "--content-tokens", "30")
    hang = stub_metrics(5.0, "vllm:num_requests_running 1\n")
    pairs = []
    for attempt in range(2):  # this VM's noise: a second pair before calling it a failure
        t0 = time.monotonic()
        off = _run(sim.url, tmp_path / f"off{attempt}", "--no-server-metrics")
        hung = _run(sim.url, tmp_path / f"hung{attempt}", "--server-metrics-url", hang)
        pairs.append((off["client"]["loop_lag_ms"]["p99"], hung["client"]["loop_lag_ms"]["p99"],
                      time.monotonic() - t0))
        assert hung["completed"] == off["completed"] == 80
        assert off["server"]["null_reasons"] == {"metrics": "not scraped: --no-server-metrics"}
        reasons = hung["server"]["null_reasons"]
        assert "no answer within 2 s" in reasons["scrapes"], reasons
        assert hung["server"]["samples"] == 0 and hung["server"]["spec_decode"] is None
        if abs(pairs[-1][1] - pairs[-1][0]) <= 1.0:
            break
    print(f"loop-lag p99 without scraping vs with a hanging endpoint (ms, s): {pairs}")
    assert abs(pairs[-1][1] - pairs[-1][0]) <= 1.0, pairs


def test_garbage_metrics_are_recorded_as_such(simulator, stub_metrics, tmp_path: Path) -> None:
    sim = simulator("--prefill-ms", "5", "--interval-ms", "2", "--content-tokens", "10")
    junk = stub_metrics(0.0, "<html>this is { not metrics</html>")
    doc = _run(sim.url, tmp_path, "--server-metrics-url", junk)
    reasons = doc["server"]["null_reasons"]
    assert "not Prometheus text" in reasons["scrapes"], reasons
    run_dir = result_path_dir(doc, tmp_path)
    lines = [orjson.loads(x) for x in (run_dir / "server_metrics.jsonl").read_bytes().splitlines()]
    assert lines[0]["type"] == "scrape" and lines[0]["url"] == junk
    marks = [x["mark"] for x in lines[1:] if x["mark"]]
    assert marks == ["first", "last"]


def result_path_dir(doc: dict, root: Path) -> Path:
    return next(root.glob(f"{doc['run_id']}"))
