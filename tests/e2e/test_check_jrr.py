"""`anvil check json / reasoning_leakage / responses_subset` against real simulator processes:
the scripted one (right answers, then each fault via PUT /sim/script-faults), the ordinary
one (nonsense text: every suite must fail, never pass, never error) and a port nothing
listens on (every suite must error)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
from conftest import anvil, load_json, set_script_faults
from simfork import start_simulator

from anvil_metrics.checks.client import CheckClient
from anvil_metrics.checks.registry import suite_function
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.sim.chat import full_text
from anvil_metrics.urls import Endpoint

SUITES = ("json", "reasoning_leakage", "responses_subset")
NONSENSE = full_text("c", 50)  # what the ordinary simulator answers (with --content-tokens 50)


@pytest.fixture(scope="module")
def scripted() -> Iterator[str]:
    with start_simulator(["--script", "--prefill-ms", "0"]) as sim:
        yield sim.url


@pytest.fixture(scope="module")
def nonsense() -> Iterator[str]:
    with start_simulator(["--prefill-ms", "0", "--interval-ms", "0", "--content-tokens", "50"]
                         ) as sim:
        yield sim.url


def set_faults(url: str, faults: list[str]) -> None:
    set_script_faults(url, faults)


def run(url: str, suite: str) -> SuiteResult:
    client = CheckClient(Endpoint.parse(url), "sim-model", timeout_s=10, retries=0)
    return suite_function(suite)(CheckContext(client, CheckOptions()))


def failed(result: SuiteResult) -> dict[str, str]:
    return {c.id: c.error or "" for c in result.cases if not c.passed}


def test_the_cli_passes_all_three_against_the_scripted_server(scripted, tmp_path) -> None:
    set_faults(scripted, [])
    out = tmp_path / "checks.json"
    proc = anvil("check", ",".join(SUITES), "-H", scripted, "--out", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = load_json(out)["checks"]
    assert {s: checks[s]["result"] for s in SUITES} == dict.fromkeys(SUITES, "pass")
    assert (checks["json"]["total"], checks["reasoning_leakage"]["total"],
            checks["responses_subset"]["total"]) == (5, 4, 3)
    assert checks["reasoning_leakage"]["thinking_disabled_reasoning_leakage"] is False
    output = next(c for c in checks["responses_subset"]["cases"] if c["id"] ==
                  "function_output")
    assert output["call_from"] == "server"


@pytest.mark.parametrize("fault,why", [
    ("json:not_json", "not JSON"),
    ("json:fenced", "fenced"),
    ("json:schema_violation", "schema violation"),
    ("json:wrong_value", "expected"),
])
def test_json_faults(scripted, fault: str, why: str) -> None:
    set_faults(scripted, [fault])
    result = run(scripted, "json")
    assert result.result == "fail" and result.passed == 0
    assert all(why in error for error in failed(result).values()), failed(result)


@pytest.mark.parametrize("fault,why,leaked", [
    ("reasoning_leakage:reasoning_delta", "reasoning streamed", True),
    ("reasoning_leakage:think_tag", "<think> in the content", True),
    ("reasoning_leakage:wrong_answer", "expected", False),
])
def test_reasoning_faults(scripted, fault: str, why: str, leaked: bool) -> None:
    set_faults(scripted, [fault])
    result = run(scripted, "reasoning_leakage")
    assert result.result == "fail" and result.passed == 0
    assert all(why in error for error in failed(result).values()), failed(result)
    assert result.extra["thinking_disabled_reasoning_leakage"] is leaked


@pytest.mark.parametrize("fault,cases,why", [
    ("no_completed", {"text", "function_call", "function_output"}, "without response.completed"),
    ("wrong_order", {"text", "function_call", "function_output"}, "the first event is"),
    ("delta_mismatch", {"text", "function_call", "function_output"}, "deltas add up to"),
    ("no_function_call", {"function_call"}, "no function_call item"),
    ("ignore_output", {"function_output"}, "does not quote"),
])
def test_responses_faults(scripted, fault: str, cases: set[str], why: str) -> None:
    set_faults(scripted, [f"responses_subset:{fault}"])
    result = run(scripted, "responses_subset")
    assert result.result == "fail"
    assert set(failed(result)) == cases
    assert all(why in error for error in failed(result).values()), failed(result)


def test_without_a_call_from_the_server_the_output_turn_is_still_judged(scripted) -> None:
    set_faults(scripted, ["responses_subset:no_function_call"])
    output = run(scripted, "responses_subset").cases[2]
    assert output.passed and output.extra["call_from"] == "check"


@pytest.mark.parametrize("suite", SUITES)
def test_nonsense_fails_every_suite(nonsense, suite: str) -> None:
    result = run(nonsense, suite)
    assert result.result == "fail" and result.passed == 0, result.to_json()
    assert not any(c.error_kind for c in result.cases)
    # the answer is wrong, the protocol right: nonsense is judged on what it says
    assert set(failed(result).values()) <= {
        "json": {"the content is not JSON: " + repr(NONSENSE[:80])},
        "reasoning_leakage": {"not a short answer (36 words): " + repr(NONSENSE[:80])},
        "responses_subset": {
            "not a short answer (36 words): " + repr(NONSENSE[:80]),
            "no function_call item: the server answered " + repr(NONSENSE[:80]),
            "the answer does not quote the tool output's resolution code ZQ-7731: "
            + repr(NONSENSE[:80])},
    }[suite]
    if suite == "reasoning_leakage":  # thinking disabled: no reasoning, only a wrong answer
        assert result.extra["thinking_disabled_reasoning_leakage"] is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("suite", SUITES)
def test_a_down_server_is_an_error(suite: str) -> None:
    result = run(f"http://127.0.0.1:{_free_port()}", suite)
    assert result.result == "error"
    assert all(c.error_kind == "transport" for c in result.cases)
    if suite == "reasoning_leakage":
        assert result.extra["thinking_disabled_reasoning_leakage"] is None


def test_the_sim_answers_only_streamed_responses(scripted) -> None:
    body = {"model": "sim-model", "input": "hello"}
    request = urllib.request.Request(f"{scripted}/v1/responses", data=orjson.dumps(body),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    assert e.value.code == 400 and b"only stream=true" in e.value.read()
