"""`anvil check retrieval,near_limit,quality` against the real simulator: the pass path, each
failure the suites detect (scripted faults, switched on one shared simulator), the
nonsense-answering simulator (every suite fails) and a down server (every suite errors).

Small contexts keep it fast: retrieval at 4096 tokens, near_limit at the simulator's 12288
less the margin (8000); the simulator answers at once (`--prefill-ms 1 --interval-ms 0.1`).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import GONE_SINCE, anvil, set_script_faults
from simfork import start_simulator

from anvil_metrics.checks.runner import run_checks
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.prep.provenance import discover
from anvil_metrics.runs.simproc import SimProcess

FAST = ["--prefill-ms", "1", "--interval-ms", "0.1", "--max-context", "12288"]
SUITES = ["retrieval", "near_limit", "quality"]
OPTIONS = CheckOptions(context_tokens=4096, timeout_s=20, long_timeout_s=20)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(["--script", *FAST]) as s:
        yield s


def _faults(sim: SimProcess, *names: str) -> None:
    set_script_faults(sim.url, list(names))


def _check(url: str, suites: list[str], *faults: str, sim: SimProcess | None = None,
           options: CheckOptions = OPTIONS, model: str | None = None,
           ask: Any = discover) -> dict:
    if sim is not None:
        _faults(sim, *faults)
    return run_checks(url, suites, options=options, model=model, ask=ask)["checks"]


def test_cli_passes_all_three_on_a_right_server(sim, tmp_path: Path):
    _faults(sim)
    out = tmp_path / "checks.json"
    proc = anvil("check", "retrieval,near_limit,quality", "--host", sim.url, "--context",
                 "4096", "--out", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = orjson.loads(out.read_bytes())["checks"]
    assert {k: v["result"] for k, v in checks.items()} == dict.fromkeys(SUITES, "pass")
    ret = checks["retrieval"]
    assert ret["requested_context_tokens"] == 4096 and ret["total"] == 4
    for case in ret["cases"]:
        assert case["planned_tokens"] == 4096
        assert abs(case["prompt_tokens"] - 4096) <= 0.005 * 4096
        assert case["expected"] in case["answer"]
    near = checks["near_limit"]
    assert near["requested_context_tokens"] == 8000
    assert abs(near["prompt_tokens"] - 8000) <= 40 and near["request_elapsed_s"] >= 0
    quality = checks["quality"]
    assert quality["parts"] == {"intelligence": {"passed": 6, "total": 6},
                                "session": {"passed": 3, "total": 3},
                                "tools": {"passed": 3, "total": 3}}
    assert [c["id"].split("/")[0] for c in quality["cases"]] == (
        ["intelligence"] * 6 + ["session"] * 3 + ["tools"] * 3)


@pytest.mark.parametrize("fault,why", [
    ("retrieval:wrong_value", "answered another key's value"),
    ("retrieval:no_answer", "is not in the answer"),
    ("retrieval:prompt_size", "% off the planned 4096"),
])
def test_retrieval_detects(sim, fault, why):
    ret = _check(sim.url, ["retrieval"], fault, sim=sim)["retrieval"]
    assert ret["result"] == "fail" and ret["passed"] == 0
    assert all(why in c["error"] for c in ret["cases"]), ret["cases"]


def test_near_limit_detects_a_wrong_value(sim):
    near = _check(sim.url, ["near_limit"], "near_limit:wrong_value", sim=sim)["near_limit"]
    assert near["result"] == "fail"
    assert "another key's value" in near["cases"][0]["error"]
    assert near["prompt_tokens"] is not None


def test_a_context_above_the_limit_fails_unsent(sim):
    options = CheckOptions(context_tokens=16384, near_limit_tokens=12288)
    checks = _check(sim.url, ["retrieval", "near_limit"], sim=sim, options=options)
    assert checks["retrieval"]["result"] == checks["near_limit"]["result"] == "fail"
    errors = [c["error"] for s in checks.values() for c in s["cases"]]
    assert "context 16384 (+2048 answer tokens) exceeds the server's max_model_len 12288" \
        in errors[0]
    assert "pass --near-limit" in errors[-1]
    assert all(c["prompt_tokens"] is None for s in checks.values() for c in s["cases"])


@pytest.mark.parametrize("fault,part,why", [
    ("quality:intelligence_wrong", "intelligence", "is not in the answer"),
    ("quality:session_forget", "session", "is not in the answer"),
    ("quality:tools_skip_step", "tools", "was never called"),
])
def test_quality_detects(sim, fault, part, why):
    quality = _check(sim.url, ["quality"], fault, sim=sim)["quality"]
    assert quality["result"] == "fail"
    for name, counts in quality["parts"].items():
        assert counts["passed"] == (0 if name == part else counts["total"])
    broken = [c for c in quality["cases"] if c["id"].startswith(part + "/")]
    assert all(why in c["error"] for c in broken)


def test_nonsense_answers_fail_every_suite():
    with start_simulator(FAST) as plain:
        checks = _check(plain.url, SUITES, options=OPTIONS)
    assert {k: v["result"] for k, v in checks.items()} == dict.fromkeys(SUITES, "fail")
    # the prompts were the planned size: the failure is the answers, not the sizing
    assert all("% off" not in c["error"] for c in checks["retrieval"]["cases"])


def test_a_down_server_errors_every_suite():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    checks = _check(f"http://127.0.0.1:{port}", SUITES, model="m",
                    options=CheckOptions(context_tokens=4096, near_limit_tokens=8000),
                    ask=GONE_SINCE)
    assert {k: v["result"] for k, v in checks.items()} == dict.fromkeys(SUITES, "error")
    assert all(c.get("error_kind") == "transport" for v in checks.values()
               for c in v["cases"])
