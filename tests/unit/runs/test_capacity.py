"""`anvil capacity` without processes: the search (double, then bisect) as a pure object,
SLOs parsed and refused naming --slo, an SLO's value read from a small document, and
`search()` driven by a fake `run_step` — stopping at a step it cannot trust, with the reason.

Why pure: the search decides which runs to make and which answer to print; a wrong bisection
bound (off by one, or a retried load) would cost an hour of real runs before anyone saw it.
Each case below says the loads the search must try, in order, and its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from anvil_metrics.errors import UsageError
from anvil_metrics.runs import capacity
from anvil_metrics.runs.capacity import Search, Slo, parse_slos, slo_value


def drive(s: Search, ok: Callable[[float], bool], limit: int = 50) -> list[float]:
    """Run `s` to its end with `ok` deciding each load; the loads in the order tried."""
    tried = []
    while (load := s.next_load()) is not None:
        assert len(tried) < limit, tried
        tried.append(load)
        s.record(load, ok(load))
    return tried


# --- Search -----------------------------------------------------------------------------


def test_users_double_then_bisect_to_the_last_good_load() -> None:
    s = Search(1, 256, 1)
    assert drive(s, lambda u: u <= 8) == [1, 2, 4, 8, 16, 12, 10, 9]
    assert s.capacity() == 8


@pytest.mark.parametrize(("good_up_to", "want_tried", "want"), [
    (11, [1, 2, 4, 8, 16, 12, 10, 11], 11),
    (15, [1, 2, 4, 8, 16, 12, 14, 15], 15),
    (1, [1, 2], 1),
    (3, [1, 2, 4, 3], 3),
])
def test_users_bisection_finds_each_capacity(good_up_to: int, want_tried: list[int],
                                             want: int) -> None:
    s = Search(1, 256, 1)
    assert drive(s, lambda u: u <= good_up_to) == want_tried
    assert s.capacity() == want
    assert all(type(x) is int for x in want_tried)  # whole users, never 12.5


def test_the_first_load_failing_has_no_capacity() -> None:
    s = Search(4, 64, 1)
    assert drive(s, lambda u: False) == [4]
    assert s.capacity() is None


def test_the_maximum_reached_is_the_capacity() -> None:
    s = Search(1, 10, 1)
    assert drive(s, lambda u: True) == [1, 2, 4, 8, 10]  # the last doubling capped at --max
    assert s.capacity() == 10
    s = Search(16, 16, 1)
    assert drive(s, lambda u: True) == [16]
    assert s.capacity() == 16


def test_rate_search_bisects_to_its_resolution() -> None:
    s = Search(1.0, 100.0, 0.5, integer=False)
    # 1, 2 meet; 4 fails; 3 meets; 3.5 fails; 3.5 − 3 = 0.5: within the resolution
    assert drive(s, lambda r: r <= 3.3) == [1.0, 2.0, 4.0, 3.0, 3.5]
    assert s.capacity() == 3.0
    s = Search(1.0, 100.0, 0.1, integer=False)
    tried = drive(s, lambda r: r <= 3.3)
    assert tried[:5] == [1.0, 2.0, 4.0, 3.0, 3.5]
    assert 3.3 - 0.1 < s.capacity() <= 3.3
    # every bisection step halves the gap: it ends when the gap is at most the resolution
    bad = min(x for x in tried if x > 3.3)
    assert bad - s.capacity() <= 0.1


def test_a_good_load_above_a_bad_one_is_not_the_capacity() -> None:
    # meeting the SLO is not assumed monotonic: the answer is below the smallest failure
    s = Search(1, 64, 1)
    s.record(1, True)
    s.record(2, False)
    s.record(4, True)
    assert s.capacity() == 1
    assert s.next_load() is None  # 1 and 2 are one apart


# --- parse_slos -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [
    ("ttft_p95_ms<=2000", [Slo("ttft_p95_ms", "<=", 2000.0, "ttft_ms", 95)]),
    ("e2e_p99_ms<30000", [Slo("e2e_p99_ms", "<", 30000.0, "e2e_ms", 99)]),
    ("decode_tok_s_p10>=20", [Slo("decode_tok_s_p10", ">=", 20.0, "decode_tok_s", 10)]),
    ("time_to_first_output_p0_ms<1", [Slo("time_to_first_output_p0_ms", "<", 1.0,
                                          "time_to_first_output_ms", 0)]),
    ("e2e_from_due_p90_ms<=5", [Slo("e2e_from_due_p90_ms", "<=", 5.0, "e2e_from_due_ms",
                                    90)]),
    ("throughput_tok_s>100", [Slo("throughput_tok_s", ">", 100.0)]),
    ("goodput_rps>=2.5", [Slo("goodput_rps", ">=", 2.5)]),
    ("error_rate<=0.01", [Slo("error_rate", "<=", 0.01)]),
    (" ttft_p95_ms <= 150 , error_rate<0.05 ,",
     [Slo("ttft_p95_ms", "<=", 150.0, "ttft_ms", 95), Slo("error_rate", "<", 0.05)]),
])
def test_parse_slos_reads_good_texts(text: str, want: list[Slo]) -> None:
    assert list(parse_slos(text)) == want


def test_slo_text_round_trips() -> None:
    slos = parse_slos("ttft_p95_ms<=150,error_rate<0.05")
    assert [s.text() for s in slos] == ["ttft_p95_ms<=150", "error_rate<0.05"]


@pytest.mark.parametrize(("text", "says"), [
    ("ttft_p95<=1", "is not a metrics key"),
    ("ttft_p101_ms<=1", "is not a metrics key"),  # no 101st percentile
    ("latency<=1", "is not a metrics key"),
    ("ttft_p95_ms=<1", "is not allowed"),
    ("ttft_p95_ms==1", "is not allowed"),
    ("ttft_p95_ms<=", "is not allowed"),
    ("ttft_p95_ms<=soon", "is not allowed"),
    ("ttft_p95_ms<=1..5", "is not a number"),
    ("", "has nothing to check"),
    (",", "has nothing to check"),
])
def test_parse_slos_refuses_bad_ones_naming_the_flag(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_slos(text)
    assert str(e.value).startswith("--slo ") and says in str(e.value), str(e.value)


# --- slo_value on a small document ------------------------------------------------------

E2E = [float(v) for v in range(20, 0, -1)] + [None]  # 1…20 ms, unsorted, and a null

DOC: dict[str, Any] = {
    "requests": 10,
    "failures": [{"kind": "cancelled"}, {"kind": "http_error"}, {"kind": "timeout"}],
    "metrics": {"ttft_p95_ms": 120.5, "throughput_tok_s": 7, "goodput_rps": None},
    "request_timings": [{"e2e_ms": v, "decode_tok_s": 10.0 * (i + 1)}
                        for i, v in enumerate(E2E)],
}


def test_slo_value_reads_metrics_percentiles_and_error_rate() -> None:
    one = {s.key: s for s in parse_slos("ttft_p95_ms<=1,throughput_tok_s>1,goodput_rps>1,"
                                        "e2e_p99_ms<=1,e2e_p50_ms<=1,e2e_p0_ms<1,"
                                        "decode_tok_s_p10>1,error_rate<1")}
    # ttft_p95_ms is also a percentile key: read from the rows, and DOC has no ttft_ms
    assert slo_value(one["ttft_p95_ms"], DOC) is None
    assert slo_value(one["throughput_tok_s"], DOC) == 7.0
    assert type(slo_value(one["throughput_tok_s"], DOC)) is float
    assert slo_value(one["goodput_rps"], DOC) is None  # null: meets no SLO
    # nearest rank over the 20 non-null values 1…20: p99 → 20th, p50 → 10th, p0 → 1st
    assert slo_value(one["e2e_p99_ms"], DOC) == 20.0
    assert slo_value(one["e2e_p50_ms"], DOC) == 10.0
    assert slo_value(one["e2e_p0_ms"], DOC) == 1.0
    # decode 10, 20, … 210 over 21 rows: p10 → rank ceil(2.1) = 3 → 30
    assert slo_value(one["decode_tok_s_p10"], DOC) == 30.0
    # failures other than cancelled, over requests: 2 / 10
    assert slo_value(one["error_rate"], DOC) == 0.2
    assert slo_value(one["error_rate"], {"requests": 0, "failures": []}) is None
    assert slo_value(one["e2e_p99_ms"], {"request_timings": []}) is None


def test_meets_needs_every_slo_and_a_value() -> None:
    slos = parse_slos("ttft_p95_ms<=150,error_rate<0.05")
    assert capacity.meets(slos, {"ttft_p95_ms": 150.0, "error_rate": 0.0}) is True
    assert capacity.meets(slos, {"ttft_p95_ms": 150.1, "error_rate": 0.0}) is False
    assert capacity.meets(slos, {"ttft_p95_ms": 10.0, "error_rate": 0.05}) is False
    assert capacity.meets(slos, {"ttft_p95_ms": None, "error_rate": 0.0}) is False
    assert capacity.meets(slos, {"error_rate": 0.0}) is False


# --- search() with a fake run_step ------------------------------------------------------


def fake_doc(load: float, *, saturated: bool = False, ttft: float | None = None
             ) -> dict[str, Any]:
    """A step's document: TTFT p95 50 ms up to 8 users/requests per second, then 300 ms."""
    value = ttft if ttft is not None else (50.0 if load <= 8 else 300.0)
    return {"requests": 100, "failures": [],
            "metrics": {"ttft_p95_ms": value, "goodput_rps": load / 2},
            "request_timings": [{"ttft_ms": value}],
            "client": {"saturated": saturated, "verdict": "cpu 97 %" if saturated else "ok"},
            "load": None}


class FakeRuns:
    """`run_step` recording the loads asked for, answering from `make(load)`."""

    def __init__(self, make: Callable[[float], dict[str, Any] | None]) -> None:
        self.make, self.loads = make, []  # type: ignore[var-annotated]

    def __call__(self, load: float) -> tuple[dict[str, Any] | None, str | None]:
        self.loads.append(load)
        doc = self.make(load)
        return doc, None if doc is None else f"/runs/{load:g}/benchmark.json"


SLOS = parse_slos("ttft_p95_ms<=150")


def test_search_finds_8_users_and_reports_each_step() -> None:
    runs = FakeRuns(fake_doc)
    shown: list[capacity.Step] = []
    s, steps, stopped = capacity.search("users", SLOS, runs, start=1, maximum=256,
                                        resolution=1, on_step=shown.append)
    assert stopped is None
    assert runs.loads == [1, 2, 4, 8, 16, 12, 10, 9]
    assert s.capacity() == 8 and shown == steps
    assert [(st.load, st.meets) for st in steps] == [
        (1, True), (2, True), (4, True), (8, True), (16, False), (12, False), (10, False),
        (9, False)]
    assert steps[3].values == {"ttft_p95_ms": 50.0} and steps[3].goodput_rps == 4.0
    assert steps[3].benchmark == "/runs/8/benchmark.json" and steps[3].trusted
    doc = capacity.result_doc("users", SLOS, s, steps, stopped)
    assert (doc["by"], doc["capacity"], doc["slo"], doc["stopped"]) == (
        "users", 8, ["ttft_p95_ms<=150"], None)
    assert [(x["users"], x["meets"]) for x in doc["steps"]] == [
        (st.load, st.meets) for st in steps]


def test_search_stops_at_a_saturated_step_with_the_reason() -> None:
    runs = FakeRuns(lambda load: fake_doc(load, saturated=load >= 4))
    s, steps, stopped = capacity.search("users", SLOS, runs, start=1, maximum=256,
                                        resolution=1)
    assert runs.loads == [1, 2, 4]  # nothing after the step it cannot trust
    assert stopped is not None
    assert stopped.startswith("the step at users 4 is not trusted: the load generator was "
                              "saturated (cpu 97 %)")
    assert "--processes" in stopped
    assert [(st.load, st.trusted) for st in steps] == [(1, True), (2, True), (4, False)]
    assert steps[-1].why is not None and 4 not in s.tried  # not counted as met or failed
    doc = capacity.result_doc("users", SLOS, s, steps, stopped)
    assert doc["capacity"] is None and doc["stopped"] == stopped
    assert doc["steps"][-1]["trusted"] is False


def test_search_stops_when_an_open_loop_step_fell_behind() -> None:
    def behind(load: float) -> dict[str, Any]:
        doc = fake_doc(load)
        if load >= 2:
            doc["load"] = {"waited_for_user": 60, "offered_rate_rps": load,
                           "achieved_rate_rps": load / 2, "schedule_lag_ms": {"p99": 900.0,
                                                                             "max": 1200.0}}
        return doc
    runs = FakeRuns(behind)
    _, steps, stopped = capacity.search("rate", SLOS, runs, start=1.0, maximum=100.0,
                                        resolution=0.5)
    assert runs.loads == [1.0, 2.0]
    assert stopped is not None and stopped.startswith("the step at rate 2 is not trusted: "
                                                      "the schedule outran the users")
    assert steps[-1].trusted is False


def test_search_stops_when_a_step_wrote_no_document() -> None:
    runs = FakeRuns(lambda load: None if load == 4 else fake_doc(load))
    _, steps, stopped = capacity.search("users", SLOS, runs, start=1, maximum=256,
                                        resolution=1)
    assert runs.loads == [1, 2, 4] and len(steps) == 2
    assert stopped == "the step at users 4 wrote no benchmark.json (see its log)"


def test_search_by_rate_passes_float_loads() -> None:
    runs = FakeRuns(fake_doc)
    s, _, stopped = capacity.search("rate", SLOS, runs, start=1.0, maximum=100.0,
                                    resolution=0.25)
    assert stopped is None
    assert runs.loads[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert runs.loads[5:] == [12.0, 10.0, 9.0, 8.5, 8.25]
    assert s.capacity() == 8.0


# --- the CLI's checks, before any run (run_capacity replaced) ---------------------------


@pytest.fixture
def cli_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[list[dict[str, Any]]]:
    """`anvil capacity` with its runs replaced: each call's keyword arguments, answered by a
    search that found 8 users."""
    import signal

    calls: list[dict[str, Any]] = []

    def fake(scenario_path: str, host: str, **kw: Any) -> tuple[dict[str, Any], str]:
        calls.append({"scenario": scenario_path, "host": host, **kw})
        return ({"by": kw["by"], "capacity": 8, "stopped": None, "steps": []},
                str(tmp_path / "capacity-x"))

    monkeypatch.setattr(capacity, "run_capacity", fake)
    handler = signal.getsignal(signal.SIGTERM)
    yield calls
    signal.signal(signal.SIGTERM, handler)  # cli.main sets its own


def _cli(*args: str) -> int:
    from anvil_metrics.cli import main as cli

    try:
        return cli.main(["capacity", "scenarios/smoke.toml", "-H", "http://127.0.0.1:9",
                         *args])
    except SystemExit as e:  # argparse's refusals
        return int(e.code or 0)


def test_cli_passes_the_search_and_prints_the_answer(cli_runs: list[dict[str, Any]],
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert _cli("--slo", "ttft_p95_ms<=150", "--start", "4", "--max", "16",
                "--step-requests", "60") == 0
    (call,) = cli_runs
    assert (call["by"], call["start"], call["maximum"], call["resolution"]) == (
        "users", 4, 16, 1.0)
    assert [s.text() for s in call["slos"]] == ["ttft_p95_ms<=150"]
    assert call["values"]["requests"] == 60 and call["values"].get("duration") is None
    out = capsys.readouterr().out.splitlines()
    assert "capacity: 8 users" in out


@pytest.mark.parametrize(("args", "says"), [
    (("--slo", "ttft_p95<=150"), "--slo"),
    (("--slo", "ttft_p95_ms<=150", "--start", "1.5"), "whole numbers"),
    (("--slo", "ttft_p95_ms<=150", "--max", "0"), "--max"),
])
def test_cli_refuses_bad_input_before_any_run(cli_runs: list[dict[str, Any]],
                                              capsys: pytest.CaptureFixture[str],
                                              args: tuple[str, ...], says: str) -> None:
    assert _cli(*args) == 2
    assert cli_runs == []
    assert says in capsys.readouterr().err


def test_cli_refuses_a_start_above_the_maximum(cli_runs: list[dict[str, Any]],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("--slo", "ttft_p95_ms<=150", "--start", "32", "--max", "16") == 2
    assert cli_runs == []
    assert "--start" in capsys.readouterr().err


def test_search_stops_at_an_aborted_step_with_its_cause() -> None:
    def dead(load: float) -> dict[str, Any]:
        doc = fake_doc(load)  # the few requests before the server died met the SLO
        if load >= 4:
            doc.update(ended_by="aborted", end_reason="the server at http://h stopped "
                       "answering at 3.0 s: refused")
        return doc
    runs = FakeRuns(dead)
    _, steps, stopped = capacity.search("users", SLOS, runs, start=1, maximum=256,
                                        resolution=1)
    assert runs.loads == [1, 2, 4]
    assert stopped == ("the step at users 4 is not trusted: the run was aborted: the server "
                       "at http://h stopped answering at 3.0 s: refused")
    assert steps[-1].trusted is False


def _all_failed(load: float, status: int | None, ended_by: str = "requests") -> dict[str, Any]:
    """A step whose every one of its 12 measured requests failed (HTTP `status`, or none)."""
    kind = "http_error" if status else "connection"
    return {**fake_doc(load), "requests": 12, "ended_by": ended_by,
            "end_reason": "the server failed 12 of the 12 requests",
            "failures": [{"request_index": i, "kind": kind, "http_status": status}
                         for i in range(12)],
            "metrics": {"ttft_p95_ms": None, "goodput_rps": 0.0}, "request_timings": []}


@pytest.mark.parametrize("ended_by", ["requests", "aborted"])
def test_a_step_whose_every_request_failed_fails_its_slos_and_the_search_goes_on(
        ended_by: str) -> None:
    """Above 8 users the server answers every request 503 (its run exits 4, or ends itself
    on them): those steps fail the SLO, the search bisects, and finds 8."""
    runs = FakeRuns(lambda load: fake_doc(load) if load <= 8 else _all_failed(load, 503,
                                                                                ended_by))
    s, steps, stopped = capacity.search("users", parse_slos("ttft_p95_ms<=150,error_rate<=0.1"),
                                        runs, start=1, maximum=256, resolution=1)
    assert stopped is None and s.capacity() == 8
    assert runs.loads == [1, 2, 4, 8, 16, 12, 10, 9]
    assert steps[4].values == {"ttft_p95_ms": None, "error_rate": 1.0}
    assert (steps[4].meets, steps[4].trusted) == (False, True)


def test_a_step_aborted_with_no_answer_still_stops_the_search() -> None:
    """Every request refused (no HTTP status): the server is gone, not slow."""
    runs = FakeRuns(lambda load: fake_doc(load) if load <= 2 else _all_failed(load, None,
                                                                                "aborted"))
    _, steps, stopped = capacity.search("users", SLOS, runs, start=1, maximum=256,
                                        resolution=1)
    assert runs.loads == [1, 2, 4] and steps[-1].trusted is False
    assert stopped is not None and "the run was aborted" in stopped
