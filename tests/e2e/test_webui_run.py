"""Locust's web UI: anvil's options are in its start form, and a run started from the UI
stops by itself after exactly `requests` and writes the same files as a headless run."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, load_json

from anvil_metrics.post.benchmark import verify_benchmark
from anvil_metrics.runs.simproc import stop_process

pytestmark = pytest.mark.e2e


SECRET = "sk-test-anvil-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def test_web_ui_form_and_run(simulator, tmp_path: Path) -> None:
    sim = simulator("--prefill-ms", "10", "--reasoning-tokens", "2", "--content-tokens", "3",
                    "--interval-ms", "2", "--max-context", "8192")
    port = _free_port()
    ui = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", sim.url,
         "--web-host", "127.0.0.1", "--web-port", str(port), "--scenario",
         "scenarios/smoke.toml", "--results-dir", str(tmp_path), "--api-key", SECRET],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        page = b""
        for _ in range(100):
            try:
                page = _get(ui + "/")
                break
            except OSError:
                time.sleep(0.1)
        assert SECRET.encode() not in page  # a secret option's value is never served
        m = re.search(rb"templateArgs = (\{.*?\});?\s*</script>", page, re.S)
        assert m, "Locust's page has no templateArgs"
        extra = json.loads(m.group(1))["extra_options"]
        for name in ("scenario", "requests", "model", "max_tokens", "results_dir"):
            assert name in extra, name
        assert extra["api_key"]["is_secret"] is True
        assert "run_dir" not in extra  # internal to `anvil run`

        form = urllib.parse.urlencode({"user_count": 3, "spawn_rate": 3, "host": sim.url,
                                       "requests": 9}).encode()
        with urllib.request.urlopen(ui + "/swarm", data=form, timeout=5) as r:
            assert json.loads(r.read())["success"] is True
        deadline = time.monotonic() + 30
        runs: list[Path] = []
        while time.monotonic() < deadline:
            runs = [p for p in tmp_path.iterdir() if (p / "benchmark.json").exists()]
            state = json.loads(_get(ui + "/stats/requests"))["state"]
            if runs and state == "stopped":
                break
            time.sleep(0.2)
        assert len(runs) == 1, "no benchmark.json from the UI run"
        doc = load_json(runs[0] / "benchmark.json")
        assert doc["requests"] == 9 and doc["completed"] == 9 and doc["concurrency"] == 3
        assert verify_benchmark(doc) == []
        for f in runs[0].iterdir():  # nor written anywhere in the run's files
            assert SECRET.encode() not in f.read_bytes(), f
    finally:
        stop_process(proc)
