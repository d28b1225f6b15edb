"""Test helper: Locust's web UI with anvil's locustfile as a real process on 127.0.0.1.

Shared by the web UI tests (routes over HTTP, and the headless-Chromium one). The process
gets a free port, logs to a file (never an unread pipe), is waited for with a bound, and is
always stopped by its PID.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import REPO

from anvil_metrics import catalog
from anvil_metrics.live.figures import LIVE_METRICS
from anvil_metrics.runs.simproc import stop_process

# a simulator that answers in well under 100 ms: a run of 9 requests takes ~0.5 s
FAST_SIM = ("--prefill-ms", "20", "--reasoning-tokens", "3", "--content-tokens", "8",
            "--interval-ms", "3", "--max-context", "8192")

# benchmark.json's key for (live field, percentile), from the catalogue
BENCHMARK_KEY = {(f.name, p): name for f in catalog.ROW if f.percentiles
                 for p, name in zip(catalog.PERCENTILES, f.percentile_names(), strict=True)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocustUI:
    url: str
    proc: subprocess.Popen
    log_path: Path

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return r.read()

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def json(self, path: str) -> Any:
        return json.loads(self.get(path))

    def swarm(self, form: dict[str, Any]) -> dict[str, Any]:
        """POST /swarm with a form body, as Locust's React form sends it."""
        data = urllib.parse.urlencode(form).encode()
        with urllib.request.urlopen(self.url + "/swarm", data=data, timeout=10) as r:
            return json.loads(r.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_run_finished(self, previous_run_id: str | None = None,
                          timeout_s: float = 30) -> dict[str, Any]:
        """`/anvil/live.json` once a run other than `previous_run_id` has finished."""
        deadline = time.monotonic() + timeout_s
        live: dict[str, Any] = {}
        while time.monotonic() < deadline:
            live = self.json("/anvil/live.json")
            if live["run_id"] not in (None, previous_run_id) and live["finished"]:
                return live
            time.sleep(0.2)
        raise AssertionError(f"no finished run in {timeout_s} s; last {live.get('run_id')}"
                             f"\nlocust log:\n{self.log()[-3000:]}")


@contextmanager
def locust_ui(host: str, tmp_path: Path, *args: str, timeout_s: float = 20
              ) -> Iterator[LocustUI]:
    """Start `locust -f locustfiles/chat.py` with its web UI; yield once it answers."""
    port = free_port()
    log_path = tmp_path / f"locust-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", host,
             "--web-host", "127.0.0.1", "--web-port", str(port), *args],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    ui = LocustUI(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ui.get("/")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"Locust's web UI did not start\n{ui.log()}") from None
                time.sleep(0.1)
        yield ui
    finally:
        stop_process(proc)


def assert_live_equals_benchmark(live: dict[str, Any], doc: dict[str, Any]) -> None:
    """Every p50/p95 of `/anvil/live.json` is benchmark.json's, bit for bit."""
    assert live["run_id"] == doc["run_id"] and live["finished"] is True
    assert live["completed"] == doc["completed"] and live["failed"] == doc["failed"]
    compared = 0
    for m in live["metrics"]:
        for p in catalog.PERCENTILES:
            key = BENCHMARK_KEY[(m["field"], p)]
            assert m[f"p{p}"] == doc["metrics"][key], (key, m[f"p{p}"], doc["metrics"][key])
            assert m[f"p{p}"] is None or m[f"p{p}"].hex() == float(doc["metrics"][key]).hex()
            compared += 1
    assert compared == 2 * len(LIVE_METRICS)
    assert_final_cdf_and_flow(live, doc)


def assert_final_cdf_and_flow(live: dict[str, Any], doc: dict[str, Any]) -> None:
    """The finished run's TTFT CDF: 101 nearest-rank points whose p50 and p95 are
    benchmark.json's bit for bit; its flow: every completed request and output token counted
    once, rates that are counts over the interval, the last point holding the end's sample."""
    cdf, m = live["ttft_cdf"], doc["metrics"]
    assert cdf["field"] == "ttft_ms" and cdf["unit"] == "ms"
    assert cdf["count"] == m["ttft_samples"] and cdf["percent"] == list(range(101))
    assert cdf["value"] == sorted(cdf["value"]) and len(cdf["value"]) == 101
    for p in (50, 95):
        assert cdf["value"][p].hex() == float(m[f"ttft_p{p}_ms"]).hex(), (p, cdf["value"][p])
    flow = live["flow"]
    assert flow["t_s"] and flow["t_s"] == sorted(flow["t_s"])
    assert sum(flow["completed"]) == doc["completed"] and sum(flow["failed"]) == doc["failed"]
    assert sum(flow["output_tokens"]) == m["output_tokens"]
    for tokens, done, span, tok_s, per_s in zip(flow["output_tokens"], flow["completed"],
                                                flow["span_s"], flow["output_tok_s"],
                                                flow["completed_per_s"], strict=True):
        assert (tok_s, per_s) == (tokens / span, done / span)
    assert flow["in_flight_max"][-1] is not None and flow["in_flight"][-1] is not None
