"""Custom headers reach the server on every request, and a credential's value nowhere else.

What the simulator received is the truth (`anvil sim --log-requests`: every header of every
chat request): the scenario's `[headers]` with the `--header` flags over them, and through
plain `locust --header` (that a distributed run's workers get them with the scenario:
tests/unit/cluster/test_wire.py).
The run's folder, its output and Locust's report must not hold the credential's value, and
`benchmark.json`'s `request_headers` shows it redacted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import REPO, anvil, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "headers"
concurrency = 2
requests = 6
warmup_requests = 1
max_tokens = 8
context_tokens = 1024
max_context_tokens = 2048

[headers]
X-Tenant = "from-the-file"
X-Team = "blue"
"""
SECRET = "sk-header-0123456789abcdefXYZ"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProcess, Path]]:
    """One simulator for the module, logging every chat request's headers; each test reads
    the lines its own run added."""
    log = tmp_path_factory.mktemp("sim") / "received.jsonl"
    with start_simulator(["--log-requests", str(log), "--prefill-ms", "2",
                          "--content-tokens", "4", "--interval-ms", "1"]) as started:
        yield started, log


def _received(log: Path, skip: int = 0) -> list[dict[str, str]]:
    return [orjson.loads(line)["headers"] for line in log.read_bytes().splitlines()[skip:]]


def _lines(log: Path) -> int:
    return len(log.read_bytes().splitlines()) if log.exists() else 0


def _leaks(root: Path, texts: list[str]) -> list[str]:
    found = [str(f) for f in root.rglob("*") if f.is_file() and SECRET.encode() in f.read_bytes()]
    return found + [f"output {i}" for i, t in enumerate(texts) if SECRET in t]


def test_anvil_run_sends_the_headers_and_keeps_the_credential_out(
        sim: tuple[SimProcess, Path], tmp_path: Path) -> None:
    server, log = sim
    before = _lines(log)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    p = anvil("run", str(sc), "--host", server.url, "--header", "x-tenant=from-the-flag",
              "--header", f"X-Api-Key={SECRET}", "--results-dir", str(tmp_path / "res"))
    assert p.returncode == 0, p.stdout + p.stderr
    received = _received(log, before)
    assert len(received) == 7  # the warm-up and the 6 measured requests
    for h in received:  # the flag over the file's, names compared without case
        assert (h["x-tenant"], h["x-team"], h["x-api-key"]) == ("from-the-flag", "blue",
                                                                SECRET), h
    doc = orjson.loads(result_path(p).read_bytes())
    assert doc["request_headers"] == {"x-tenant": "from-the-flag", "X-Team": "blue",
                                      "X-Api-Key": "[redacted]"}
    assert _leaks(tmp_path / "res", [p.stdout, p.stderr]) == []
    check = anvil("verify", str(result_path(p)))
    assert check.returncode == 0, check.stdout + check.stderr


def test_plain_locust_sends_a_header_flag_and_its_report_keeps_it_out(
        sim: tuple[SimProcess, Path], tmp_path: Path) -> None:
    server, log = sim
    before = _lines(log)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    res = tmp_path / "res"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless",
         "-H", server.url, "-u", "2", "-r", "2", "--scenario", str(sc),
         "--header", f"Authorization=Basic {SECRET}", "--results-dir", str(res),
         "--html", str(res / "report.html"), "--logfile", str(res / "locust.log"),
         "--run-time", "60s"],
        cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    received = _received(log, before)
    assert len(received) == 7
    assert all(h["authorization"] == f"Basic {SECRET}" for h in received)
    assert all(h["x-tenant"] == "from-the-file" for h in received)
    assert (res / "report.html").exists()
    assert _leaks(res, [proc.stdout, proc.stderr]) == []


def test_a_bad_header_is_one_line_and_exit_2(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    for given, says in ((f"Authorization: Bearer {SECRET}", "use KEY=VALUE"),):
        p = anvil("run", str(sc), "--host", "http://127.0.0.1:9", "--header", given)
        assert p.returncode == 2, p.stdout + p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and SECRET not in p.stderr, p.stderr
    bad = write_scenario(tmp_path / "bad.toml", SCENARIO + 'X-Api-Key = "a\\nb"\n')
    p = anvil("run", str(bad), "--host", "http://127.0.0.1:9")
    assert p.returncode == 2 and "headers.X-Api-Key = '[redacted]' is not allowed" in p.stderr, (
        p.stderr)
