"""`tools`, `streaming_tools` and `tool_result_recovery` against the real simulator over HTTP:
the scripted simulator answering right passes them, each scripted fault fails the cases it
breaks and says why, the nonsense-text simulator fails them, a down server errors them.

One scripted simulator serves the module; each test sets its faults with
`PUT /sim/script-faults`. Suites run in-process (a real client, real HTTP) except the pass
path, which goes through `anvil check` as a user would run it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from conftest import anvil, set_script_faults
from simfork import start_simulator

from anvil_metrics.checks.client import CheckClient
from anvil_metrics.checks.registry import suite_function
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.checks.toolcases import TOOL_CASES
from anvil_metrics.runs.simproc import SimProcess
from anvil_metrics.urls import Endpoint

SUITES = ("tools", "streaming_tools", "tool_result_recovery")
PARALLEL = {c.id for c in TOOL_CASES if c.kind == "parallel"}
CALLS = {c.id for c in TOOL_CASES if c.calls}  # every case but no_call
TYPED = {"choice_currency", "optional_present", "parallel_currency", "type_integer",
         "type_number", "type_boolean", "type_boolean_false", "type_array"}
USE = {"result_order_id", "result_tracking", "result_booking"}
FIX = {"error_city", "error_symbol", "error_date"}


@pytest.fixture(scope="module")
def scripted() -> Iterator[SimProcess]:
    with start_simulator(["--script"]) as sim:
        yield sim


def set_faults(sim: SimProcess, faults: list[str]) -> None:
    set_script_faults(sim.url, faults)


def run(url: str, suite: str) -> SuiteResult:
    client = CheckClient(Endpoint.parse(url), "sim-model", timeout_s=10, retries=0)
    return suite_function(suite)(CheckContext(client, CheckOptions()))


def failed(result: SuiteResult) -> dict[str, str]:
    return {c.id: c.error or "" for c in result.cases if not c.passed}


def test_right_answers_pass_through_the_cli(scripted, tmp_path):
    set_faults(scripted, [])
    out = tmp_path / "checks.json"
    proc = anvil("check", ",".join(SUITES), "-H", scripted.url, "--out", str(out), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = json.loads(out.read_text())["checks"]
    assert {s: (checks[s]["result"], checks[s]["passed"], checks[s]["total"]) for s in SUITES} \
        == {"tools": ("pass", 20, 20), "streaming_tools": ("pass", 20, 20),
            "tool_result_recovery": ("pass", 6, 6)}
    streamed = {c["id"]: c for c in checks["streaming_tools"]["cases"]}
    # the parallel answer came in fragments (name, then 7-character argument pieces) per index
    assert streamed["parallel_weather"]["chunks"] > 6
    assert [a["name"] for a in streamed["parallel_weather"]["answer"]] == ["get_weather"] * 2
    assert checks["tools"]["by_kind"]["parallel"] == "3/3"
    order = {c["id"]: c for c in checks["tool_result_recovery"]["cases"]}["result_order_id"]
    assert order["expected"]["answer_contains"] in order["answer"]


FAULTS = [
    # (fault, the cases it fails, a phrase every failure's reason holds)
    ("tools:wrong_name", CALLS, "called '"),
    ("tools:wrong_arguments", CALLS, "arguments."),
    ("tools:wrong_type", TYPED, "is not "),
    ("tools:no_call", CALLS, "no tool call; answered in text"),
    ("tools:bad_json", CALLS, "arguments are not JSON"),
    ("tools:missing_parallel", PARALLEL, "2 calls expected, 1 made"),
    ("tools:extra_call", CALLS | {"no_call"}, "call"),
    ("tools:extra_argument", CALLS, "arguments."),
    ("tools:missing_name", CALLS, "tool call 0 has no function name"),
    ("streaming_tools:index_reuse", PARALLEL, "several JSON values run together"),
    ("tool_result_recovery:ignore_result", USE, "does not quote"),
    ("tool_result_recovery:repeat_bad_call", FIX, "repeated the call the tool rejected"),
    ("tool_result_recovery:give_up", FIX, "no corrected call"),
]
FAULTS += [(f.replace("tools:", "streaming_tools:"), cases, reason)  # streamed, the same faults
           for f, cases, reason in FAULTS if f.startswith("tools:")]


@pytest.mark.parametrize("fault, cases, reason", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_fails_the_cases_it_breaks(scripted, fault, cases, reason):
    suite = fault.partition(":")[0]
    set_faults(scripted, [fault])
    result = run(scripted.url, suite)
    assert result.result == "fail"
    got = failed(result)
    assert set(got) == cases
    assert all(reason in why for why in got.values()), got


def test_faults_of_one_suite_leave_the_other_alone(scripted):
    """A streamed request plays the streaming_tools faults, an ordinary one the tools faults."""
    set_faults(scripted, ["tools:no_call"])
    assert run(scripted.url, "streaming_tools").result == "pass"
    set_faults(scripted, ["streaming_tools:no_call"])
    assert run(scripted.url, "tools").result == "pass"
    assert set(failed(run(scripted.url, "streaming_tools"))) == CALLS


def test_extra_argument_names_the_invented_optional_one(scripted):
    set_faults(scripted, ["tools:extra_argument"])
    got = failed(run(scripted.url, "tools"))
    assert "max_price was sent though the user gave none" in got["optional_absent"]
    assert "arguments.verbose is not a parameter of the tool" in got["single_weather"]


def test_nonsense_simulator_fails_every_suite():
    fast = ["--prefill-ms", "0", "--interval-ms", "0", "--reasoning-tokens", "0",
            "--content-tokens", "4"]
    with start_simulator(fast) as sim:
        for suite in SUITES:
            result = run(sim.url, suite)
            assert result.result == "fail", suite
            assert result.passed == 0 and not any(c.errored for c in result.cases), suite


def test_down_server_errors_every_suite():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for suite in SUITES:
        result = run(f"http://127.0.0.1:{port}", suite)
        assert result.result == "error", suite
        assert all(c.error_kind == "transport" for c in result.cases), suite
