"""The `coding` suite against the real simulator: it passes when the answers are right, and
fails, saying why, for each fault the scripted simulator can play (wrong code, a syntax
error, no code block, a loop that never ends); the nonsense simulator fails it, a server
that is down makes it an error.

One scripted simulator serves the whole file; tests switch its faults with
`PUT /sim/script-faults`. The sandbox limits are short so the hang costs one second.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GONE_SINCE, anvil, load_json, set_script_faults
from simfork import start_simulator

from anvil_metrics.checks.client import CheckClient
from anvil_metrics.checks.coding import CASES, run_coding
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.runner import run_checks
from anvil_metrics.checks.sandbox import SandboxLimits
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.urls import Endpoint

pytestmark = pytest.mark.e2e

# the hang is a busy loop: the 1 s CPU limit stops it; the wall limit is roomy, since every
# other program ends by itself and its outcome is what is judged (a 1 s wall limit could
# time out a right answer still starting up on a busy machine)
SHORT = SandboxLimits(cpu_s=1, wall_s=30.0)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(["--script"]) as s:
        yield s


def set_faults(sim: SimProcess, faults: list[str]) -> None:
    set_script_faults(sim.url, faults)


def run(url: str) -> SuiteResult:
    client = CheckClient(Endpoint.parse(url), "sim-model", timeout_s=10.0, retries=0)
    return run_coding(CheckContext(client, CheckOptions()), SHORT)


def test_right_answers_pass_through_the_cli(sim: SimProcess, tmp_path: Path) -> None:
    set_faults(sim, [])
    out = tmp_path / "checks.json"
    proc = anvil("check", "coding", "--host", sim.url, "--out", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    coding = load_json(out)["checks"]["coding"]
    assert (coding["result"], coding["passed"], coding["total"]) == ("pass", len(CASES),
                                                                      len(CASES))
    assert coding["sandbox"]["works"] is True
    assert {"network_isolated", "filesystem_isolated", "user_isolated", "uid",
            "limits"} <= set(coding["sandbox"])
    case = coding["cases"][0]
    assert case["error"] is None and case["outcome"] == "ok"
    assert "def reverse_words" in case["answer"]
    assert case["expected"].startswith("the hidden tests pass: reverse_words(")


@pytest.mark.parametrize(("fault", "said"), [
    ("wrong", "assert failed: is_prime(4) returned True, expected False"),
    ("syntax", "syntax error: SyntaxError"),
    ("no_code", "no ```python code block in the answer"),
])
def test_each_fault_fails_every_case(sim: SimProcess, fault: str, said: str) -> None:
    set_faults(sim, [f"coding:{fault}"])
    result = run(sim.url)
    assert (result.result, result.passed) == ("fail", 0), result.to_json()
    errors = {c.id: c.error for c in result.cases}
    assert all(errors.values()), errors
    assert errors["is_prime"].startswith(said), errors["is_prime"]


def test_a_hang_is_stopped_by_the_limits_and_fails_its_case(sim: SimProcess) -> None:
    set_faults(sim, ["coding:hang"])
    result = run(sim.url)
    assert (result.result, result.passed) == ("fail", len(CASES) - 1)
    hung = next(c for c in result.cases if not c.passed)
    assert hung.id == "is_prime"
    assert hung.error.startswith(("timeout", "killed by the CPU time limit")), hung.error
    assert hung.elapsed_s < SHORT.wall_s + 1.5


def test_nonsense_answers_fail_never_pass_nor_error(tmp_path: Path) -> None:
    with start_simulator(["--prefill-ms", "0", "--interval-ms", "0"]) as plain:
        out = tmp_path / "checks.json"
        proc = anvil("check", "coding", "--host", plain.url, "--out", str(out), timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    coding = load_json(out)["checks"]["coding"]
    assert (coding["result"], coding["passed"]) == ("fail", 0)
    assert {c["error"] for c in coding["cases"]} == {"no ```python code block in the answer"}


def test_a_server_that_is_down_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed below: nothing listens there
    doc = run_checks(f"http://127.0.0.1:{port}", ["coding"], model="m",
                     options=CheckOptions(timeout_s=5.0), ask=GONE_SINCE)
    coding = doc["checks"]["coding"]
    assert coding["result"] == "error"
    assert all(c["error_kind"] == "transport" for c in coding["cases"])
