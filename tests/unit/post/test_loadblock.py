"""The benchmark's `load` block: built by anvil from a raw run, its figures are the ones
worked out here by hand, it verifies clean, and verify names each member a tampering breaks.

Why by hand: the block says whether an open-loop generator kept up (achieved vs offered
rate, schedule lag, requests that waited for a user) and how many requests a run's end
cancelled. If build and verify shared a mistake, a round trip alone would not see it; so the
expected figures below are computed from the records' own numbers in plain Python.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.load.arrivals import ArrivalPlan
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.loadblock import Load, behind, summary_lines
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.records import Failure

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "data").glob("benchmark-v1.*.json"))

BASE_NS = 2_000_000_000  # arrival 0 due 2 s after the header's perf anchor (1000 ns)
GAP_NS = 100_000_000  # constant 10 requests/s
# per measured request k: its lag after due (ns), whether it waited for a user, its outcome
LAGS_NS = [200_000, 500_000, 1_000_000, 300_000, 8_000_000, 100_000, 400_000, 25_000_000,
           600_000, 700_000, 3_000_000, 900_000]
WAITED = {4, 7, 10}
HTTP_FAILED = {5}  # a server error: a failure, not cancelled
CANCELLED = {10, 11}  # still open when the run stopped


def _records(open_loop: bool) -> list:
    recs = [completed(0, start_ns=BASE_NS - 500_000_000, warmup=True)]  # no due time
    for k, lag in enumerate(LAGS_NS):
        start = BASE_NS + k * GAP_NS + lag
        extra: dict[str, Any] = {"start_delay_ns": lag}
        if open_loop and k in WAITED:
            extra["waited_for_user"] = True
        if k in CANCELLED:
            recs.append(failed(k, start_ns=start, end_ns=start + 40_000_000, extra=extra,
                               http_status=200, planned_context_tokens=128, failure=Failure(
                                   kind="cancelled", message="the run stopped",
                                   phase="decode")))
        elif k in HTTP_FAILED:
            recs.append(failed(k, start_ns=start, extra=extra))
        else:
            recs.append(completed(k, start_ns=start, extra=extra))
    return recs


def _build(tmp_path: Path, *, open_loop: bool, mode: str = "duration") -> dict[str, Any]:
    plan = ArrivalPlan(10.0, "constant") if open_loop else None
    header = {**HEADER, "params": {
        "concurrency": 4, "requests_planned": None,
        "load": {"mode": mode, "arrivals": plan.to_dict() if plan else None,
                 "duration_s": 1.2, "stop_timeout_s": 30.0}}}
    path = tmp_path / "requests.jsonl"
    write_raw(path, header, _records(open_loop),
              run_end={"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def _nearest_rank(values: list[float], p: int) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(p * len(s) / 100)) - 1]


@pytest.fixture
def open_doc(tmp_path: Path) -> dict[str, Any]:
    return _build(tmp_path, open_loop=True)


def test_open_loop_block_is_what_the_records_say(open_doc: dict[str, Any]) -> None:
    doc = open_doc
    assert verify_benchmark(doc) == []
    load = doc["load"]
    assert set(load) == set(Load.__struct_fields__) and load["outside_window"] is None
    n = len(LAGS_NS)
    starts = [BASE_NS + k * GAP_NS + lag for k, lag in enumerate(LAGS_NS)]
    ends = [s + (40_000_000 if k in CANCELLED else 5_000 if k in HTTP_FAILED else 5_000_000)
            for k, s in enumerate(starts)]
    anchor = HEADER["perf_anchor_ns"]
    assert doc["requests"] == n and doc["warmup_requests"] == 1
    assert load["mode"] == "duration" and load["duration_s"] == 1.2
    assert (load["arrival"], load["offered_rate_rps"], load["burstiness"]) == (
        "constant", 10.0, None)
    assert load["achieved_rate_rps"] == (n - 1) / ((max(starts) - min(starts)) / 1e9)
    assert load["window_s"] == [(min(starts) - anchor) / 1e9, (max(ends) - anchor) / 1e9]
    assert load["waited_for_user"] == len(WAITED)
    assert load["cancelled"] == len(CANCELLED) == sum(
        f["kind"] == "cancelled" for f in doc["failures"])
    assert doc["failed"] == len(CANCELLED | HTTP_FAILED)
    # the lag of the completed rows only (failures have no row), nearest rank
    lags_ms = [lag / 1e6 for k, lag in enumerate(LAGS_NS) if k not in CANCELLED | HTTP_FAILED]
    assert load["schedule_lag_ms"] == {"p50": _nearest_rank(lags_ms, 50),
                                       "p99": _nearest_rank(lags_ms, 99),
                                       "max": max(lags_ms)}
    assert load["schedule_lag_ms"] == {"p50": 0.6, "p99": 25.0, "max": 25.0}
    rows = doc["request_timings"]
    assert [r["schedule_lag_ms"] for r in rows] == lags_ms
    assert [r["e2e_from_due_ms"] for r in rows] == [r["e2e_ms"] + r["schedule_lag_ms"]
                                                    for r in rows]


def test_closed_loop_block(tmp_path: Path) -> None:
    doc = _build(tmp_path, open_loop=False, mode="until_stopped")
    assert verify_benchmark(doc) == []
    load = doc["load"]
    assert (load["mode"], load["arrival"]) == ("until_stopped", "closed")
    assert [load[k] for k in ("offered_rate_rps", "burstiness", "schedule_lag_ms",
                              "waited_for_user")] == [None] * 4
    assert load["cancelled"] == len(CANCELLED) and load["achieved_rate_rps"] > 0
    # a run without a budget reports the sizes it issued (the 503 record has no size)
    assert doc["context_distribution"] == {"128": len(LAGS_NS) - len(HTTP_FAILED)}
    assert behind(load, doc["requests"]) is None
    assert not any("WARNING" in line for line in summary_lines(doc))


def _tamper(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    bad["load"].update(changes)
    return bad


@pytest.mark.parametrize("changes,member", [
    ({"cancelled": len(CANCELLED) + 1}, "cancelled"),
    ({"cancelled": 0}, "cancelled"),
    ({"schedule_lag_ms": {"p50": 0.6, "p99": 24.0, "max": 25.0}}, "schedule_lag_ms"),
    ({"mode": "sometimes"}, "mode"),
    ({"arrival": "uniform"}, "arrival"),
    ({"window_s": [3.0, 2.0]}, "window_s"),
    ({"surprise": 1}, "surprise"),
    ({"waited_for_user": len(LAGS_NS) + 1}, "waited_for_user"),
    ({"waited_for_user": -1}, "waited_for_user"),
    ({"waited_for_user": None}, "waited_for_user"),  # open loop: must be set
    ({"schedule_lag_ms": None}, "schedule_lag_ms"),
    ({"offered_rate_rps": 0}, "offered_rate_rps"),
    ({"achieved_rate_rps": -1.0}, "achieved_rate_rps"),
])
def test_each_tampering_of_an_open_loop_block_is_named(open_doc: dict[str, Any],
                                                       changes: dict, member: str) -> None:
    problems = verify_benchmark(_tamper(open_doc, **changes))
    assert problems, changes
    assert all(p.startswith(f"load.{member}") for p in problems), problems


def test_a_missing_member_is_named(open_doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(open_doc)
    del bad["load"]["waited_for_user"]
    problems = verify_benchmark(bad)
    assert problems and all(p.startswith("load.waited_for_user") for p in problems), problems


def test_a_closed_loop_block_with_an_offered_rate_is_caught(tmp_path: Path) -> None:
    doc = _build(tmp_path, open_loop=False)
    assert verify_benchmark(doc) == []
    for key, value in (("offered_rate_rps", 10.0), ("waited_for_user", 0),
                       ("schedule_lag_ms", {"p50": 0.1, "p99": 0.2, "max": 0.3})):
        problems = verify_benchmark(_tamper(doc, **{key: value}))
        assert problems and all(p.startswith(f"load.{key}") for p in problems), problems


def test_the_behind_warning(open_doc: dict[str, Any]) -> None:
    line = behind(open_doc["load"], open_doc["requests"])
    assert line is not None and line.startswith("the schedule outran the users: 3 of 12 ")
    warnings = [x for x in summary_lines(open_doc) if x.startswith("WARNING: ")]
    assert warnings == [f"WARNING: {line}"]
    # at most 1 % of the requests waiting is no warning
    assert behind({**open_doc["load"], "waited_for_user": 1}, 100) is None
    assert behind({**open_doc["load"], "waited_for_user": 2}, 100) is not None


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_file_without_a_load_block_still_verifies(path: Path) -> None:
    import orjson

    doc = orjson.loads(path.read_bytes())
    assert "load" not in doc
    assert verify_benchmark(doc) == []
    assert verify_benchmark({**doc, "load": None}) == []
    assert verify_benchmark({**doc, "load": "open"})[0].startswith("load: ")


def test_the_examples_are_there() -> None:
    assert EXAMPLES, "tests/data/benchmark-v1.*.json is missing"


# `burstiness` is the plan's: null in a closed loop and for constant gaps, 1 for poisson
@pytest.mark.parametrize("loop,changes", [
    ("closed", {"burstiness": 0.5}),
    ("open", {"burstiness": 0.5}),  # arrival "constant": burstiness is null
    ("open", {"arrival": "poisson", "burstiness": 0.5}),
    ("open", {"arrival": "gamma", "burstiness": None}),
])
def test_burstiness_that_contradicts_the_arrival_kind_is_caught(
        tmp_path: Path, loop: str, changes: dict) -> None:
    doc = _build(tmp_path, open_loop=loop == "open")
    assert verify_benchmark(doc) == []
    problems = verify_benchmark(_tamper(doc, **changes))
    assert problems and all(p.startswith("load.burstiness") for p in problems), problems


def test_a_duration_run_names_its_duration(tmp_path: Path) -> None:
    doc = _build(tmp_path, open_loop=False)
    problems = verify_benchmark(_tamper(doc, mode="duration", duration_s=None))
    assert problems == ['load.duration_s: null, but mode is "duration"'], problems


def test_an_open_loop_of_conversations_counts_first_turns_only_as_arrivals() -> None:
    """Arrivals are the conversation starts the schedule gave: first turns, 1 s apart here;
    later turns, and a record without a turn (the master's for a lost worker's request),
    are not arrivals."""
    import numpy as np

    from anvil_metrics.post.derive import RowColumns
    from anvil_metrics.post.loadblock import build_load
    from anvil_metrics.post.rawcolumns import NULL

    s = 1_000_000_000
    start = np.array([0, s // 2, s, 3 * s // 2, 2 * s, 2 * s + 1], dtype=np.int64)
    turn = np.array([1, 2, 1, 2, 1, NULL], dtype=np.int64)
    params = {"mode": "budget", "arrivals": {"arrival": "constant", "rate_rps": 1.0}}
    empty = RowColumns.from_rows([])
    assert empty is not None
    block = build_load(params, start, start + 10, np.zeros(6, dtype=bool), 0, empty, 0,
                       turn=turn)
    assert block["achieved_rate_rps"] == 1.0  # (3 - 1) / 2 s: the NULL one would make it 1.5


def test_an_agent_replays_arrivals_are_its_jobs_first_requests():
    """An open loop of agent jobs offers job starts: each job's earliest measured record
    (in any order of the records) is its arrival, its later requests and sub-agents none."""
    import numpy as np

    from anvil_metrics.post.loadblock import job_starts

    job = np.array([2, 0, 0, 1, 2, 1, 0], dtype=np.int64)
    start = np.array([50, 10, 5, 30, 40, 35, 7], dtype=np.int64)
    assert job_starts(job, start).tolist() == [0, 0, 1, 1, 1, 0, 0]
    assert job_starts(job[:0], start[:0]).tolist() == []
