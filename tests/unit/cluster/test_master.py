"""The distributed pieces without processes (the worker's: `test_worker.py`): the master's
bookkeeping of granted tickets (exactly once, lost workers), clock offsets in the raw
file and the run's time line, and the live figures the web UI shows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import orjson
import pytest
from rawbuild import write_raw

from anvil_metrics.cluster.master import MasterCoordinator
from anvil_metrics.cluster.wire import WorkerSetup
from anvil_metrics.errors import RawFileError
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import LiveStats
from anvil_metrics.live.series import MAX_BUCKETS
from anvil_metrics.live.sketch import SKETCH_REL_ERROR
from anvil_metrics.load.scenario import scenario_from_dict
from anvil_metrics.post import stats
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.derive import RowColumns, derive_row
from anvil_metrics.post.rawread import RawRun, read_raw
from anvil_metrics.prep.prompts import NO_CALIBRATION
from anvil_metrics.records import Failure, RequestRecord

# --- master side -----------------------------------------------------------------------------


class FakeRunner:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, str | None]] = []
        self.clients: dict[str, Any] = {}

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None
                     ) -> None:
        self.sent.append((msg_type, data, client_id))


class FakeWriter:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def write(self, obj: dict) -> None:
        self.lines.append(obj)


def _coordinator(requests: int = 4) -> tuple[MasterCoordinator, FakeRunner, RequestBudget]:
    runner = FakeRunner()
    budget = RequestBudget(requests, 0, [4096])
    session = SimpleNamespace(run_id="run-1", budget=budget, writer=FakeWriter())
    sc = scenario_from_dict({"measurement_protocol": "t"})
    setup = WorkerSetup("run-1", sc, "http://127.0.0.1:1", None, "m", NO_CALIBRATION, "n",
                        None, {4096: 10}, None, [4096])
    c = MasterCoordinator(SimpleNamespace(runner=runner), session, setup)
    return c, runner, budget


def _msg(node: str, **data: Any) -> SimpleNamespace:
    return SimpleNamespace(node_id=node, data={"run_id": "run-1", **data})


def _line(index: int, worker: str = "h:1", start: int = 1_000) -> bytes:
    rec = RequestRecord(request_index=index, start_ns=start, end_ns=start + 500,
                        first_output_ns=start + 100, first_content_ns=start + 100,
                        content_chunks=2, chunk_deltas_ns=(100, 400), chunk_channels="cc",
                        usage={"prompt_tokens": 10, "completion_tokens": 2}, worker=worker)
    return orjson.dumps(rec.to_json_dict())


def _grant_two(c: MasterCoordinator, runner: FakeRunner) -> None:
    for cid in ("A", "B"):
        c.add_worker(cid)
        runner.clients[cid] = SimpleNamespace(state="running")
        c.on_hello(_msg(cid, worker=f"host:{cid}", error=None))
        c.on_take(_msg(cid, seq=1, followup=False))
    gevent.sleep(0)
    gevent.sleep(0)


def test_a_follow_up_is_granted_from_the_budgets_follow_ups(fired: list) -> None:
    """A conversation's next turn in an open loop: the master's budget hands it out at once
    (`take_followup`), not at the schedule's next due time."""
    c, runner, budget = _coordinator()
    asked: list[str] = []
    budget.take = lambda lead_ns=0: asked.append("take")  # type: ignore[method-assign]
    budget.take_followup = lambda: asked.append("followup")  # type: ignore[method-assign]
    c.add_worker("A")
    runner.clients["A"] = SimpleNamespace(state="running")
    c.on_hello(_msg("A", worker="host:A", error=None))
    c.on_take(_msg("A", seq=1, followup=True))
    c.on_take(_msg("A", seq=2, followup=False))
    gevent.sleep(0)
    assert asked == ["followup", "take"]


def test_a_follow_up_is_granted_in_the_listener_a_start_a_loop_pass_later(
        fired: list) -> None:
    """A follow-up never waits (`take_followup`): its ticket is sent before `on_take`
    returns, not by a greenlet a loop pass later (an agent's wait on the worker ends
    meanwhile); a start may wait for its arrival, so it is granted by a greenlet."""
    c, runner, _ = _coordinator()
    c.add_worker("A")
    runner.clients["A"] = SimpleNamespace(state="running")
    c.on_hello(_msg("A", worker="host:A", error=None))
    c.on_take(_msg("A", seq=1, followup=True))
    assert [(t, d["seq"]) for t, d, _ in runner.sent if t == "anvil_ticket"] == [(
        "anvil_ticket", 1)]
    c.on_take(_msg("A", seq=2, followup=False))
    assert len([t for t, _, _ in runner.sent if t == "anvil_ticket"]) == 1
    gevent.sleep(0)
    gevent.sleep(0)
    assert [d["seq"] for t, d, _ in runner.sent if t == "anvil_ticket"] == [1, 2]


def test_each_granted_ticket_is_recorded_exactly_once(fired: list) -> None:
    c, runner, budget = _coordinator()
    _grant_two(c, runner)
    tickets = [d["ticket"] for t, d, _ in runner.sent if t == "anvil_ticket"]
    assert sorted(t[0] for t in tickets) == [0, 1]
    idx_a = next(d["ticket"][0] for t, d, cid in runner.sent if t == "anvil_ticket" and cid == "A")
    c.on_records(_msg("A", lines=[_line(idx_a, "host:A")]))
    c.on_records(_msg("A", lines=[_line(idx_a, "host:A")]))  # a duplicate: dropped
    c.on_records(_msg("A", lines=[_line(1 - idx_a, "host:A")]))  # B's ticket: dropped
    assert [r.request_index for r in fired] == [idx_a]
    assert budget.finished == 1 and len(c.dropped) == 2
    assert c.outstanding and all(g.client_id == "B" for g in c.outstanding.values())


def test_a_lost_workers_in_flight_requests_become_failures(fired: list) -> None:
    c, runner, budget = _coordinator()
    _grant_two(c, runner)
    c.workers["B"].offset_ns = 5_000  # B's clock is 5 µs behind the master's
    idx_b = next(d["ticket"][0] for t, d, cid in runner.sent if t == "anvil_ticket" and cid == "B")
    grant = c.outstanding[(False, idx_b)]
    assert c.fail_outstanding("B", "was lost") == 1
    (rec,) = fired
    assert rec.request_index == idx_b and rec.failure is not None
    assert rec.failure.kind == "worker_lost" and "host:B" in rec.failure.message
    assert rec.worker == "host:B" and rec.start_ns == grant.granted_ns - 5_000
    assert budget.finished == 1
    c.on_records(_msg("B", lines=[_line(idx_b, "host:B")]))  # too late: already failed
    assert len(fired) == 1 and "already recorded as lost" in c.dropped[0]


def test_drain_fails_what_never_came_back(fired: list) -> None:
    c, runner, _ = _coordinator()
    _grant_two(c, runner)
    summary = c.drain(timeout_s=0.2)  # neither worker said it was done
    assert {r.failure.kind for r in fired} == {"worker_lost"} and len(fired) == 2
    assert not c.outstanding
    assert not any(w["confirmed"] for w in summary["workers"].values())
    assert ("anvil_stop", {"run_id": "run-1"}, "A") in runner.sent


def test_a_ticket_granted_to_a_worker_that_is_done_is_recorded_cancelled(fired: list
                                                                        ) -> None:
    """A worker drained on its own (SIGTERM) says it is done while a ticket it asked for
    is on its way: that request was never sent. It is recorded `cancelled` at once (the run
    waits for no record that cannot come), and the worker gets no ticket after."""
    c, runner, budget = _coordinator()
    _grant_two(c, runner)
    for cid in ("A", "B"):
        c.on_done(_msg(cid, sent=0, health={"loop_lag_ms": {"p99": 1.0 if cid == "A" else 3.0},
                                            "cpu_pct": 20.0 if cid == "A" else 10.0}))
    assert [r.failure.kind for r in fired] == ["cancelled", "cancelled"]
    assert all(r.extra is None and r.failure.phase == "connect" for r in fired)
    assert not c.outstanding and budget.finished == 2
    c.on_take(_msg("A", seq=2, followup=False))
    gevent.sleep(0)
    gevent.sleep(0)
    assert runner.sent[-1][0] == "anvil_ticket" and runner.sent[-1][1]["ticket"] is None
    summary = c.drain(timeout_s=0.2)
    assert len(fired) == 2
    assert all(w["confirmed"] for w in summary["workers"].values())  # sent 0, received 0
    health = c.client_health()
    assert health is not None
    assert health["loop_lag_ms"] == {"p99": 3.0} and health["cpu_pct"] == 20.0


# --- clock offsets in the raw file -------------------------------------------------------------


def _rec(index: int, worker: str, start: int, end: int) -> RequestRecord:
    return RequestRecord(request_index=index, start_ns=start, end_ns=end,
                         first_output_ns=start + 10, content_chunks=0, reasoning_chunks=1,
                         chunk_deltas_ns=(10,), chunk_channels="r",
                         usage={"prompt_tokens": 5, "completion_tokens": 1}, worker=worker)


def test_wall_clock_places_each_worker_on_the_masters_clock() -> None:
    a = _rec(0, "a:1", 1_000_000, 3_000_000)
    b = _rec(1, "b:2", 50_000_000, 51_000_000)  # b's clock reads 49 ms ahead of a's
    header = {"run_id": "benchmark-20261130T000000Z", "started_at": "2026-11-30T00:00:00Z",
              "params": {}}

    def wall(workers: dict) -> float:
        raw = RawRun(header=header, records=(a, b), run_end=None, partial=True,
                     workers=workers)
        return build_benchmark(raw)["wall_clock_ms"]

    assert wall({}) == 50.0
    assert wall({"a:1": {"perf_offset_ns": 0}, "b:2": {"perf_offset_ns": -49_000_000}}) == 2.0


def test_worker_lines_are_read_and_used(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    header = {"run_id": "benchmark-20261130T000000Z", "started_at": "2026-11-30T00:00:00Z",
              "wall_anchor_ns": 0, "perf_anchor_ns": 0,
              "params": {"measurement_protocol": "t", "concurrency": 2}}
    write_raw(path, header, [_rec(0, "a:1", 1_000_000, 3_000_000),
                             _rec(1, "b:2", 50_000_000, 51_000_000)],
              {"finished_at": "2026-11-30T00:00:01Z"})
    lines = path.read_bytes().splitlines()
    worker = orjson.dumps({"type": "worker", "worker": "b:2", "perf_offset_ns": -49_000_000})
    path.write_bytes(b"\n".join([lines[0], worker, *lines[1:]]) + b"\n")
    raw = read_raw(path)
    assert raw.clock_offsets_ns() == {"b:2": -49_000_000}
    assert build_benchmark(raw)["wall_clock_ms"] == 2.0
    path.write_bytes(b"\n".join([lines[0], b'{"type":"worker","worker":7}', *lines[1:]]) + b"\n")
    with pytest.raises(RawFileError, match="worker"):
        read_raw(path)


# --- live figures ------------------------------------------------------------------------------


def test_live_percentiles_equal_the_files() -> None:
    live = LiveStats("run", 40)
    records = []
    for i in range(40):
        start = i * 1_000_000
        rec = RequestRecord(request_index=i, start_ns=start, end_ns=start + 9_000_000 + i * 7919,
                            first_output_ns=start + 1_000_000 + (i * 104729) % 3_000_000,
                            first_content_ns=start + 4_500_000, reasoning_chunks=3,
                            content_chunks=4, chunk_deltas_ns=(), chunk_channels="",
                            usage={"prompt_tokens": 100, "completion_tokens": 7 + i % 5})
        records.append(rec)
        live.take(rec)
    live.take(RequestRecord(request_index=40, start_ns=0, end_ns=1,
                           failure=Failure("http_error", "x", 500)))
    snap = live.snapshot()
    assert snap["completed"] == 40 and snap["failed"] == 1
    assert snap["failures_by_kind"] == {"http_error": 1}
    rows = [derive_row(r) for r in records]
    for m in snap["metrics"]:  # while the run goes: the sketch, within 1 %
        for p in (50, 95, 99):
            exact = stats.nearest_rank([r[m["field"]] for r in rows], p)
            assert m[f"p{p}"] == pytest.approx(exact, rel=SKETCH_REL_ERROR), m
    columns = RowColumns.from_rows([{k: v for k, v in r.items() if v is not None
                                     or k != "cached_tokens"} for r in rows])
    assert columns is not None
    live.finish(columns)  # the run is over: the file's rows, exactly
    for m in live.snapshot()["metrics"]:
        for p in (50, 95, 99):
            assert m[f"p{p}"] == stats.nearest_rank([r[m["field"]] for r in rows], p), m


def test_live_series_stays_bounded() -> None:
    live = LiveStats("run", None)
    for i in range(MAX_BUCKETS * 3):
        live.series.add(float(i), {"ttft_ms": float(i), "decode_tok_s": 1.0})
    series = live.series.as_json()
    assert len(series["t_s"]) <= MAX_BUCKETS and series["bucket_s"] > 1
    assert sum(series["completed"]) == MAX_BUCKETS * 3


def test_on_the_master_in_flight_is_granted_and_not_yet_back(fired: list) -> None:
    """The live page's in-flight count on a distributed master is its budget's: a ticket
    granted to a worker is in flight until its record arrives (or its worker is lost); a
    dropped duplicate changes nothing."""
    c, runner, budget = _coordinator()
    assert budget.in_flight == 0
    _grant_two(c, runner)
    assert budget.in_flight == len(c.outstanding) == 2
    idx_a = next(d["ticket"][0] for t, d, cid in runner.sent if t == "anvil_ticket" and cid == "A")
    c.on_records(_msg("A", lines=[_line(idx_a, "host:A")]))
    assert budget.in_flight == 1
    c.on_records(_msg("A", lines=[_line(idx_a, "host:A")]))  # a duplicate: dropped
    assert budget.in_flight == 1
    c.fail_outstanding("B", "was lost")
    assert budget.in_flight == 0 and len(fired) == 2


def test_a_workers_conversations_between_turns_end_with_it(fired: list) -> None:
    """A budget of conversations on the master: a worker's dropped conversation (a user
    stopped between turns) counts over, and so does each one a lost worker held between
    turns, so the budget still ends."""
    c, runner, budget = _coordinator()
    budget.conversations, budget.requests = 3, None
    exhausted: list[int] = []
    budget._on_exhausted = lambda: exhausted.append(1)
    c.add_worker("A")
    runner.clients["A"] = SimpleNamespace(state="running")
    c.on_hello(_msg("A", worker="host:A", error=None))
    for seq in (1, 2, 3):  # three conversations start on A
        c.on_take(_msg("A", seq=seq, followup=False))
    gevent.sleep(0)
    assert c.workers["A"].going == 3
    done = [RequestRecord(request_index=k, start_ns=1, end_ns=2, worker="host:A",
                          extra={"conversation": k, "turn": 1, "turns": 2})
            for k in range(3)]
    c.on_records(_msg("A", lines=[orjson.dumps(r.to_json_dict()) for r in done]))
    assert c.workers["A"].going == 3 and budget.in_flight == 0  # all between two turns
    c.on_drop(_msg("A"))  # one user stopped in its think time
    assert c.workers["A"].going == 2 and exhausted == []
    c.fail_outstanding("A", "was lost")  # the other two go with the worker
    assert c.workers["A"].going == 0 and exhausted == [1]
