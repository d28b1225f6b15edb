"""benchmark: a document built from a tiny raw file, its counts, renumbering, wall clock
and times worked out by hand; the built document written as its plain form; a file that
is not strict JSON refused, naming it.

Why by hand: build is where warm-ups leave the counts and indices are renumbered; an
off-by-one there shifts every request's index and every rate, while verify (which reads
the same document) would still agree with it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.errors import VerifyError
from anvil_metrics.post.benchmark import (
    build,
    build_benchmark,
    load_benchmark,
    measured_order,
    wall_clock_ms,
)
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark

MS = 1_000_000


def _raw(tmp_path: Path, **header: object) -> Path:
    # two warm-ups sharing the index counter, then 2 completed and 1 failed measured
    records = [completed(0, warmup=True), completed(1, warmup=True), completed(2),
               completed(3), failed(4)]
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, **header}, records)
    return path


def test_counts_and_renumbering(tmp_path: Path) -> None:
    doc = build_benchmark(read_raw(_raw(tmp_path)))
    assert (doc["requests"], doc["completed"], doc["failed"], doc["warmup_requests"]) == (
        3, 2, 1, 2)
    assert [r["request_index"] for r in doc["request_timings"]] == [0, 1]
    assert doc["failures"] == [{"request_index": 2, "kind": "http_error", "http_status": 503,
                                "message": "503 busy", "phase": "headers"}]
    assert doc["partial"] is True  # no run_end line
    assert doc["concurrency"] == 1 and doc["model"] is None


def test_an_agent_jobs_failed_request_names_its_job(tmp_path: Path) -> None:
    agent = {"session": 0, "turn": 1, "depth": 0, "tool_wait_ns": 0}
    path = tmp_path / "requests.jsonl"
    plan = {"jobs": 6, "job_requests": [1], "job_tokens": [[100, 0]], "start_at": "first"}
    write_raw(path, {**HEADER, "params": {"concurrency": 1, "agent": plan}},
              [completed(0, extra={"job": 0, **agent}), failed(1, extra={"job": 5, **agent})])
    doc = build_benchmark(read_raw(path))
    assert [f.get("job_id") for f in doc["failures"]] == [5]
    assert (doc["jobs"]["started"], doc["jobs"]["completed"]) == (2, 1)
    assert verify_benchmark(doc) == []
    assert doc["request_timings"][0]["job_id"] == 0
    assert "job_id" not in build_benchmark(read_raw(_raw(tmp_path)))["failures"][0]


def test_wall_clock_and_finished_at_by_hand(tmp_path: Path) -> None:
    doc = build_benchmark(read_raw(_raw(tmp_path)))
    # first measured start: 1_000 + 20 ms; last end: failed(4)'s, 1_000 + 40 ms + 5 µs
    assert doc["wall_clock_ms"] == 20.005
    # the header's anchors place that last stamp 40.005 ms after 16:00:39 (floored)
    assert doc["finished_at"] == "2026-08-01T16:00:39Z"


def test_a_password_in_the_base_url_is_not_stored(tmp_path: Path) -> None:
    params = {"concurrency": 1, "base_url": "http://u:pw@127.0.0.1:9/v1"}
    doc = build_benchmark(read_raw(_raw(tmp_path, params=params)))
    assert doc["base_url"] == "http://127.0.0.1:9/v1"


def test_measured_order_leaves_the_warmups_out(tmp_path: Path) -> None:
    order = measured_order(read_raw(_raw(tmp_path)).columns())
    assert order.order.tolist() == [2, 3, 4] and order.outside is None
    assert order.offset_ns.tolist() == [0] * 5


def test_wall_clock_ms() -> None:

    assert wall_clock_ms(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) is None
    assert wall_clock_ms(np.array([5 * MS, 2 * MS]), np.array([7 * MS, 9 * MS])) == 7.0


def test_the_written_file_is_the_plain_document(tmp_path: Path) -> None:
    built = build(read_raw(_raw(tmp_path)))
    out = tmp_path / "benchmark.json"
    built.write(out)
    assert orjson.loads(out.read_bytes()) == orjson.loads(orjson.dumps(built.to_dict()))
    assert load_benchmark(out)["run_id"] == HEADER["run_id"]


@pytest.mark.parametrize(("text", "says"), [
    (b"{\"a\": NaN}", "not strict JSON"),
    (b"[1, 2]", "the top level is not a JSON object"),
])
def test_load_benchmark_refuses_what_is_not_a_document(tmp_path: Path, text: bytes,
                                                       says: str) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(text)
    with pytest.raises(VerifyError, match=says) as e:
        load_benchmark(path)
    assert str(path) in str(e.value)
    with pytest.raises(VerifyError, match="failed verification: the file does not exist"):
        load_benchmark(tmp_path / "missing.json")
