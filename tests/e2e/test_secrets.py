"""Secrets never reach a run's files, logs, reports or output: API keys from a flag or the
environment, and credentials written into the host URL."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, anvil, write_scenario
from simfork import start_simulator

from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "secrets"
concurrency = 2
requests = 4
warmup_requests = 1
max_tokens = 16
context_tokens = 2048
max_context_tokens = 2048
[context_distribution]
1024 = 4
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """One simulator for both tests: each judges only its own run folder and output (a
    simulator ~0.4 CPU-s and ~0.5 s to start)."""
    with start_simulator(["--prefill-ms", "5", "--content-tokens", "8", "--interval-ms", "1"]
                         ) as started:
        yield started


def _leaks(root: Path, texts: list[str], secrets: list[str]) -> list[str]:
    found = []
    for f in root.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            found += [f"{f}: {s}" for s in secrets if s.encode() in data]
    for i, t in enumerate(texts):
        found += [f"output {i}: {s}" for s in secrets if s in t]
    return found


def test_anvil_run_keeps_keys_and_url_credentials_out_of_everything(sim: SimProcess,
                                                                    tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    port = sim.url.rsplit(":", 1)[1]
    flag_key, url_user, url_pass, env_key = ("sk-flag-1234567890abcdefXYZ", "alice",
                                             "pw-in-url-0987654321", "sk-env-abcdef123456789")
    outputs = []
    p = anvil("run", str(sc), "--host", f"http://{url_user}:{url_pass}@127.0.0.1:{port}",
              "--api-key", flag_key, "--results-dir", str(tmp_path / "res"))
    assert p.returncode == 0, p.stdout + p.stderr
    outputs += [p.stdout, p.stderr]
    for var in ("OPENAI_API_KEY", "ANVIL_API_KEY"):
        p = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                  env={var: env_key})
        assert p.returncode == 0, p.stdout + p.stderr
        outputs += [p.stdout, p.stderr]
    # the Messages API's: the key also goes as x-api-key
    p = anvil("run", str(sc), "--host", sim.url, "--endpoint", "messages", "--api-key",
              flag_key, "--results-dir", str(tmp_path / "res"))
    assert p.returncode == 0, p.stdout + p.stderr
    outputs += [p.stdout, p.stderr]
    assert len(list((tmp_path / "res").glob("benchmark-*"))) == 4
    assert _leaks(tmp_path / "res", outputs, [flag_key, url_pass, env_key]) == []


def test_plain_locust_reports_and_logs_keep_the_key_out(sim: SimProcess, tmp_path: Path
                                                        ) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    key = "sk-locust-flag-5555555555abcdef"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless",
         "-H", sim.url, "-u", "2", "-r", "2", "--scenario", str(sc), "--api-key", key,
         "--results-dir", str(tmp_path / "res"), "--csv", str(tmp_path / "res" / "stats"),
         "--html", str(tmp_path / "res" / "report.html"),
         "--logfile", str(tmp_path / "res" / "locust.log"), "--run-time", "60s"],
        cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "res" / "report.html").exists()
    assert list((tmp_path / "res").glob("benchmark-*/benchmark.json"))
    assert _leaks(tmp_path / "res", [proc.stdout, proc.stderr], [key]) == []
