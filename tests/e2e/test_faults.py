"""One test per injected fault (the simulator's `--fault`): the expected outcome, kind and
phase are recorded for the faulty request, every issued request is present exactly once,
and the run completes (requests = completed + failed).

The faults share runs: each `anvil run` starts a Locust process (~1 CPU-s of start-up) beside
its own simulator, and one run per fault cost the suite ~40 CPU-s here. So one simulator
carries all the faults of a timeout group, each at its own request index, and one run at
concurrency 1 (anvil's `request_index` i is the simulator's i-th chat request) reads them
all: `PATIENT` under 30 s timeouts, `IMPATIENT` (the stalls) under 0.5 s ones. The faults sit
at odd indices with a good request at every even one, so a user's back-off after a failure
is reset before the next fault and no run aborts (`--abort-after-failures`, after 10
unanswered in a row). Each fault keeps its own test, which names it when it fails and reads
its own request out of the shared run; the good requests on either side of it must have
been answered. The checks of the whole run (a valid benchmark, every request once) are made
in the fixture; the last two tests need other simulator settings (one simulator for both)
and keep runs of their own.

No run here scrapes the server's metrics (`--no-server-metrics`): no test reads the server
block, and the sampler is a process of its own beside each run (~0.3 CPU-s); the faults
count chat requests only, and every run is at concurrency 1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.benchmark import verify_benchmark
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "faults"
concurrency = 1
requests = {requests}
max_tokens = 12
context_tokens = 2048
max_context_tokens = 2048
[context_distribution]
512 = 4
[timeouts]
first_byte_s = {first_byte}
idle_s = {idle}
"""

SIM = ("--prefill-ms", "10", "--reasoning-tokens", "2", "--content-tokens", "10",
       "--interval-ms", "2", "--max-context", "2048")

# in the order they are issued; fault k hits request 2k + 1
PATIENT = ("http400", "http500", "http503", "http429=7", "reset_before_headers",
           "reset_mid_stream=3", "malformed_chunk=3", "stream_error=3", "no_done",
           "end_before_finish=3", "no_usage", "oversize_chunk", "slow_headers=0.4")
IMPATIENT = ("stall_first_byte=3", "stall_mid_stream=3")  # first_byte_s = idle_s = 0.5
ANSWERED = frozenset({"no_done", "no_usage", "oversize_chunk", "slow_headers=0.4"})


@dataclass(frozen=True)
class SharedRun:
    """One run whose request 2k + 1 met `faults[k]` and whose even requests are good."""

    faults: tuple[str, ...]
    doc: dict
    raw: dict[int, dict]  # request_index -> raw record (requests.jsonl)

    def index(self, fault: str) -> int:
        return 2 * self.faults.index(fault) + 1

    @property
    def rows(self) -> dict[int, dict]:
        return {r["request_index"]: r for r in self.doc["request_timings"]}

    @property
    def failures(self) -> dict[int, dict]:
        return {f["request_index"]: f for f in self.doc["failures"]}


def _shared_run(tmp_path: Path, faults: tuple[str, ...], *, first_byte: float,
                idle: float) -> SharedRun:
    """One simulator carrying `faults` (fault k at its request 2k + 1), one run of
    2 x len(faults) + 1 requests against it; the simulator is stopped before this returns."""
    n = 2 * len(faults) + 1
    specs = [a for k, fault in enumerate(faults) for a in ("--fault", f"{fault}@{2 * k + 1}")]
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.format(requests=n, first_byte=first_byte, idle=idle))
    with start_simulator([*SIM, *specs]) as sim:
        proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                     "--run-time", "120", "--no-server-metrics")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    assert doc["requests"] == n == doc["completed"] + doc["failed"]
    indices = sorted([r["request_index"] for r in doc["request_timings"]]
                     + [f["request_index"] for f in doc["failures"]])
    assert indices == list(range(n))  # every issued request exactly once
    raw = {x["request_index"]: x for x in raw_lines(path.parent) if x["type"] == "request"}
    assert sorted(raw) == list(range(n))
    return SharedRun(faults, doc, raw)


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """The faults that need no short timeout, under first_byte_s = idle_s = 30."""
    return _shared_run(tmp_path_factory.mktemp("patient"), PATIENT, first_byte=30, idle=30)


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """The stalls, under first_byte_s = idle_s = 0.5."""
    return _shared_run(tmp_path_factory.mktemp("impatient"), IMPATIENT, first_byte=0.5,
                       idle=0.5)


def _neighbours_answered(run: SharedRun, i: int) -> None:
    """The good requests either side of request `i` were answered, not failed."""
    rows, failures = run.rows, run.failures
    for j in (i - 1, i + 1):
        assert j in rows and j not in failures, (j, failures.get(j))


def _failure(run: SharedRun, fault: str) -> dict:
    """The failure recorded for `fault`'s request; the good requests around it did not fail."""
    i = run.index(fault)
    _neighbours_answered(run, i)
    failures = run.failures
    assert i in failures and i not in run.rows, (fault, i, run.rows.get(i))
    return failures[i]


def _answered(run: SharedRun, fault: str) -> tuple[dict, dict]:
    """The timing row and raw record of `fault`'s request, which (as the good requests
    around it) was answered, not failed."""
    i = run.index(fault)
    _neighbours_answered(run, i)
    rows = run.rows
    assert i in rows and i not in run.failures, (fault, i, run.failures.get(i))
    return rows[i], run.raw[i]


@pytest.mark.parametrize("group", ["patient", "impatient"])
def test_only_the_failing_faults_fail(request: pytest.FixtureRequest, group: str) -> None:
    """Across a shared run, the failures are exactly the faults expected to fail."""
    run: SharedRun = request.getfixturevalue(group)
    failing = {run.index(f): f for f in run.faults if f not in ANSWERED}
    assert {i: run.faults[i // 2] if i % 2 else "good" for i in run.failures} == failing
    assert run.doc["failed"] == len(failing)


@pytest.mark.parametrize("status", [400, 500, 503])
def test_http_error(patient: SharedRun, status: int) -> None:
    f = _failure(patient, f"http{status}")
    assert (f["kind"], f["http_status"], f["phase"]) == ("http_error", status, "headers")
    assert f["message"]


def test_rate_limited_keeps_retry_after(patient: SharedRun) -> None:
    f = _failure(patient, "http429=7")
    raw = patient.raw[patient.index("http429=7")]
    assert (f["kind"], f["http_status"], f["phase"]) == ("rate_limited", 429, "headers")
    assert "7" in str(raw.get("failure")) or "retry" in f["message"].lower(), (f, raw)


def test_reset_before_headers(patient: SharedRun) -> None:
    f = _failure(patient, "reset_before_headers")
    assert f["kind"] == "connection" and f["phase"] in ("connect", "headers")


def test_reset_mid_stream(patient: SharedRun) -> None:
    f = _failure(patient, "reset_mid_stream=3")
    assert (f["kind"], f["phase"]) == ("truncated", "decode")


def test_malformed_chunk(patient: SharedRun) -> None:
    f = _failure(patient, "malformed_chunk=3")
    assert (f["kind"], f["phase"]) == ("malformed_chunk", "decode")


def test_error_object_in_stream(patient: SharedRun) -> None:
    f = _failure(patient, "stream_error=3")
    assert f["kind"] == "stream_error" and "injected failure" in f["message"]


def test_stall_past_the_first_byte_timeout(impatient: SharedRun) -> None:
    f = _failure(impatient, "stall_first_byte=3")
    assert f["kind"] == "timeout" and f["phase"] in ("headers", "prefill")
    assert "first-byte timeout" in f["message"]


def test_stall_past_the_idle_timeout_mid_stream(impatient: SharedRun) -> None:
    f = _failure(impatient, "stall_mid_stream=3")
    assert (f["kind"], f["phase"]) == ("timeout", "decode")
    assert "idle timeout" in f["message"]


def test_clean_end_without_done_after_finish_reason_is_success(patient: SharedRun) -> None:
    _, raw = _answered(patient, "no_done")
    assert raw["failure"] is None
    assert raw["finish_reason"] is not None


def test_end_before_any_finish_reason_is_truncated(patient: SharedRun) -> None:
    f = _failure(patient, "end_before_finish=3")
    assert f["kind"] == "truncated"


def test_no_usage_is_success_counted_from_chunks(patient: SharedRun) -> None:
    row, _ = _answered(patient, "no_usage")
    good = patient.rows[patient.index("no_usage") - 1]
    assert row["output_token_source"] == "chunks" and row["prompt_tokens"] is None
    assert good["output_token_source"] == "usage"
    assert row["output_tokens"] == row["reasoning_chunks"] + row["content_chunks"]


def test_oversize_chunk_is_read_whole(patient: SharedRun) -> None:
    _answered(patient, "oversize_chunk")


def test_slow_headers_within_timeouts_are_waited_for(patient: SharedRun) -> None:
    row, _ = _answered(patient, "slow_headers=0.4")
    good = patient.rows[patient.index("slow_headers=0.4") - 1]
    assert row["time_to_first_output_ms"] >= 400  # the wait is part of the timing
    assert good["time_to_first_output_ms"] < 200


@pytest.fixture(scope="module")
def slow_prefill() -> Iterator[SimProcess]:
    """A simulator whose every prefill lasts 3 s, for the last two tests: neither reads its
    state, only its own run's records (one simulator start fewer, ~0.5 CPU-s). Without
    `--max-running` each request is served on its own, so the requests a run left to it
    (cut by a timeout, their prefill still counting) hold nothing of the next run's."""
    with start_simulator(["--prefill-ms", "3000", "--content-tokens", "4",
                          "--max-context", "2048"]) as sim:
        yield sim


def test_headers_then_a_prefill_past_the_first_byte_timeout(slow_prefill: SimProcess,
                                                            tmp_path: Path) -> None:
    """The usual shape on real servers (vLLM, the simulator): headers at once, then a
    prefill longer than `first_byte_s` (3 s against 0.5 s): a timeout in phase prefill, for
    every request."""
    sim = slow_prefill
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.format(requests=2, first_byte=0.5, idle=30))
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                 "--run-time", "60", "--no-server-metrics")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # every measured request failed
    doc = load_json(result_path(proc))
    assert (doc["requests"], doc["completed"], doc["failed"]) == (2, 0, 2)
    for f in doc["failures"]:
        assert (f["kind"], f["phase"], f["http_status"]) == ("timeout", "prefill", 200), f
        assert "first-byte timeout (0.5 s)" in f["message"]


def test_total_timeout_bounds_the_whole_request(slow_prefill: SimProcess, tmp_path: Path
                                                ) -> None:
    """`total_s` ends a request whatever it is waiting for: here a 3 s prefill against a
    0.8 s total (the first-byte timeout alone would wait 20 s)."""
    sim = slow_prefill
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.format(requests=2, first_byte=20, idle=20)
                        + "total_s = 0.8\n")
    t0 = time.monotonic()
    proc = anvil("run", str(sc), "--host", sim.url, "--results-dir", str(tmp_path / "res"),
                 "--run-time", "60", "--no-server-metrics")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # every measured request failed
    assert time.monotonic() - t0 < 20  # two requests, each cut at ~0.8 s, plus start-up
    doc = load_json(result_path(proc))
    assert (doc["requests"], doc["failed"]) == (2, 2)
    raw = {x["request_index"]: x for x in raw_lines(result_path(proc).parent)
           if x["type"] == "request"}
    for f in doc["failures"]:
        assert (f["kind"], f["phase"]) == ("timeout", "prefill"), f
        assert "total timeout (0.8 s)" in f["message"]
        rec = raw[f["request_index"]]
        assert 0.7e9 <= rec["end_ns"] - rec["start_ns"] <= 1.6e9, rec
