"""`anvil check` as a user runs it, every suite at once, against three servers: the scripted
simulator (every suite passes), the simulator without its script — it answers nonsense, so
every suite must fail and none pass by accident — and a port nothing listens on (every suite
is an error: a transport error is never a pass and never a failure). Each document written
verifies (`anvil verify checks.json`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import anvil, load_json
from simfork import start_simulator

from anvil_metrics.checks.registry import SUITES
from anvil_metrics.runs.simproc import SimProcess

FAST = ["--max-context", "12288", "--prefill-ms", "1", "--interval-ms", "0.1"]
ARGS = ["--context", "4096", "--timeout", "20"]


@pytest.fixture(scope="module")
def scripted() -> Iterator[SimProcess]:
    with start_simulator(["--script", *FAST]) as sim:
        yield sim


@pytest.fixture(scope="module")
def nonsense() -> Iterator[SimProcess]:
    with start_simulator([*FAST, "--content-tokens", "6", "--reasoning-tokens", "0"]) as sim:
        yield sim


def check_all(url: str, out: Path) -> tuple[dict, str]:
    proc = anvil("check", "all,near_limit", "--host", url, "--out", str(out), *ARGS,
                 timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    verified = anvil("verify", str(out))
    assert verified.returncode == 0, verified.stdout
    return load_json(out), proc.stdout


def test_every_suite_passes_on_the_scripted_simulator(scripted: SimProcess,
                                                      tmp_path: Path) -> None:
    doc, shown = check_all(scripted.url, tmp_path / "checks.json")
    assert list(doc["checks"]) == list(SUITES)
    assert {k: v["result"] for k, v in doc["checks"].items()} == dict.fromkeys(SUITES, "pass")
    assert doc["model"] == "sim-model" and doc["host"] == scripted.url + "/v1"
    assert doc["max_model_len"] == 12288 and doc["engine"] == "vllm"
    assert shown.splitlines()[-1].startswith(f"model sim-model: {len(SUITES)} passed, 0 failed")


def test_every_suite_fails_on_a_server_that_answers_nonsense(nonsense: SimProcess,
                                                             tmp_path: Path) -> None:
    doc, _ = check_all(nonsense.url, tmp_path / "checks.json")
    results = {k: v["result"] for k, v in doc["checks"].items()}
    assert results == dict.fromkeys(SUITES, "fail")
    for name, suite in doc["checks"].items():
        assert suite["passed"] < suite["total"], name
        assert not any(c.get("error_kind") == "transport" for c in suite["cases"]), name


def test_a_server_that_is_down_is_one_line_and_no_suite(tmp_path: Path) -> None:
    """Nothing listens: one line saying so, exit 2 (as `anvil run`), no document; a server
    that goes down after it answered makes each suite an error (test_check_rq and others)."""
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "checks.json"
    proc = anvil("check", "all,near_limit", "--host", f"http://127.0.0.1:{port}",
                 "--model", "m", "--out", str(out), *ARGS, "--near-limit", "8000")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr == (f"anvil: cannot reach http://127.0.0.1:{port}/v1 (GET /version: "
                           "ConnectionRefusedError: [Errno 111] Connection refused); is the "
                           "server running? check --host\n")
    assert not out.exists()


def test_keys_never_reach_the_document_or_the_output(scripted: SimProcess,
                                                     tmp_path: Path) -> None:
    """A key in the URL and one in the environment are used, never written or shown."""
    out = tmp_path / "checks.json"
    host = scripted.url.replace("http://", "http://alice:url-s3cret@")
    proc = anvil("check", "json,reasoning_leakage", "--host", host, "--out", str(out),
                 *ARGS, env={"ANVIL_API_KEY": "env-s3cret"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text() + proc.stdout + proc.stderr
    assert "s3cret" not in text and "alice" not in text
    assert load_json(out)["host"] == scripted.url + "/v1"
