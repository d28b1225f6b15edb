"""The raw reader's two outputs and the row writer give what the plain ones give.

`anvil postprocess` reads `requests.jsonl` as columns (`rawpart.scan_raw`: each request line
decoded by its typed definition straight into int64 rows, `ColumnBuilder.add`, a large file
in parallel parts) and writes its rows a batch at a time from a byte template
(`rowjson.py`). The plain roads are the definition: `read_raw` (every record judged by the
same definition, built into a RequestRecord and into columns by way of its JSON line) and
`atomic_write_json` of the plain document. Here random runs and random
damage must give the same bytes, and the same exceptions with the same messages and lines,
through both.
"""

from __future__ import annotations

import copy
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from conftest import anvil
from fuzzing import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rawbuild import stamps

from anvil_metrics import catalog
from anvil_metrics.errors import RawFileError
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post import benchmark, derive, rawpart, rowjson, stats, verify
from anvil_metrics.post.benchmark import build, build_benchmark
from anvil_metrics.post.postprocess import postprocess_run
from anvil_metrics.post.rawcolumns import RawColumns
from anvil_metrics.post.rawpart import scan_raw
from anvil_metrics.post.rawread import RawReader, read_raw
from anvil_metrics.post.schema import fmt, same
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.records import FAILURE_KINDS, MAX_LINE_DEPTH, PHASES, RAW_SCHEMA


def postprocess(run_dir: Path) -> Path:
    return postprocess_run(run_dir).path

# --- random raw files ------------------------------------------------------------------------

_DUR = st.one_of(st.sampled_from([0, 1, 999_999, 1_000_000]), st.integers(0, 5 * 10**10))
_COUNT = st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 5000))
_ODD = st.sampled_from([None, True, -1, 2.5, "7", [3]])  # values usage readers must skip

_USAGE = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "completion_tokens": st.one_of(_COUNT, _ODD),
            "prompt_tokens": st.one_of(_COUNT, _ODD),
            "total_tokens": _COUNT,
            "prompt_tokens_details": st.one_of(
                _ODD, st.fixed_dictionaries({}, optional={"cached_tokens": st.one_of(_COUNT,
                                                                                      _ODD)})),
        },
    ),
)

_EXTRA = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"start_delay_ns": _COUNT}),
    st.just({"server": {"last_sent_ns": 5}}),  # a key the reader does not read
)

_PARTS = st.fixed_dictionaries(
    {
        "failed": st.integers(0, 5).map(lambda x: x == 0),
        "start": st.one_of(st.just(0), st.integers(0, 10**11)),
        "ttfo": _DUR, "to_content": _DUR, "to_end": _DUR,
        "output": st.sampled_from(["none", "reasoning", "content", "both"]),
        "reasoning_chunks": st.integers(1, 40), "content_chunks": st.integers(1, 40),
        "zero_gaps": st.booleans(),
        "usage": _USAGE,
        "planned": st.sampled_from([128, 4096, 30720, None]),
        "kind": st.sampled_from(FAILURE_KINDS),
        "phase": st.one_of(st.none(), st.sampled_from(PHASES)),
        "status": st.one_of(st.none(), st.sampled_from([200, 429, 500, 503])),
        "message": st.sampled_from(["boom", "", "line\nbreak \"quoted\" ünïcode"]),
        "worker": st.sampled_from([None, "a:1", "b:2"]),
        "extra": _EXTRA,
        "finish_reason": st.sampled_from([None, "stop", "length"]),
    }
)


def _line(parts: dict[str, Any], index: int, warmup: bool, base_ns: int) -> dict[str, Any]:
    """A `"request"` line as RequestRecord.to_json_dict writes it."""
    start = base_ns + parts["start"]
    reasoning, content, first_output, first_content, end = stamps(parts, start)
    n_chunks = reasoning + content
    gap = 0 if parts["zero_gaps"] else 1_000
    deltas = ([first_output - start] + [gap] * (n_chunks - 1)) if n_chunks else []
    failure = None
    if parts["failed"]:
        failure = {"kind": parts["kind"], "message": parts["message"],
                   "http_status": parts["status"], "phase": parts["phase"]}
    d = {
        "type": "request", "request_index": index, "warmup": warmup,
        "planned_context_tokens": parts["planned"], "start_ns": start,
        "first_output_ns": first_output, "first_content_ns": first_content, "end_ns": end,
        "reasoning_chunks": reasoning, "content_chunks": content, "chunk_deltas_ns": deltas,
        "chunk_channels": "r" * reasoning + "c" * content, "usage": parts["usage"],
        "finish_reason": None if failure else parts["finish_reason"],
        "http_status": parts["status"], "failure": failure, "worker": parts["worker"],
    }
    if parts["extra"]:
        d["extra"] = parts["extra"]
    return d


@st.composite
def raw_files(draw) -> list[bytes]:
    """The lines (with newlines) of a plausible requests.jsonl."""
    parts = draw(st.lists(_PARTS, min_size=0, max_size=40))
    warmups = draw(st.integers(0, min(3, len(parts))))
    base_ns = draw(st.one_of(st.just(0), st.integers(0, 2**61)))
    measured = [p for p in parts[warmups:]]
    params: dict[str, Any] = {"concurrency": draw(st.integers(1, 64)), "model": "m",
                              "base_url": "http://u:p@127.0.0.1:8000/v1"}
    if draw(st.booleans()):
        plan: dict[str, int] = {}
        for p in measured:
            if p["planned"] is not None:
                plan[str(p["planned"])] = plan.get(str(p["planned"]), 0) + 1
        if draw(st.booleans()) and plan:  # sometimes one request fewer than ran
            plan[next(iter(plan))] -= 1
        params["context_distribution"] = plan
    if draw(st.booleans()):
        params["prompt_calibration"] = {"method": draw(st.sampled_from(["probe", "bogus"]))}
    header = {"type": "run", "schema": RAW_SCHEMA,
              "run_id": draw(st.sampled_from(["benchmark-20260801T160039Z", "bad-id"])),
              "started_at": "2026-08-01T16:00:39Z", "params": params,
              "wall_anchor_ns": 1_785_600_039_000_000_000, "perf_anchor_ns": base_ns}
    lines = [header]
    if draw(st.booleans()):
        lines.append({"type": "worker", "worker": "b:2",
                      "perf_offset_ns": draw(st.one_of(st.none(), st.integers(-10**9, 10**9)))})
    order = list(range(len(parts)))
    if draw(st.booleans()):  # records are written as requests finish, not in index order
        order = draw(st.permutations(order))
    for i in order:
        warm = i < warmups
        lines.append(_line(parts[i], i if warm else i - warmups, warm, base_ns))
    if draw(st.booleans()):
        end: dict[str, Any] = {"type": "run_end"}
        if draw(st.booleans()):
            end["finished_at"] = "2026-08-01T16:09:00Z"
        client = draw(st.sampled_from([
            None, {"cpu_pct": 12.5, "saturated": False},
            {"cpu_pct": 95.0, "loop_lag_ms": {"p50": 1.0, "p99": 2.0}},
        ]))
        if client is not None:
            end["client"] = client
        lines.append(end)
    out = [orjson.dumps(x) + b"\n" for x in lines]
    tail = draw(st.sampled_from(["", "torn", "no newline"]))
    if tail == "torn" and len(out) > 1:
        out[-1] = out[-1][: len(out[-1]) // 2]
    elif tail == "no newline":
        out[-1] = out[-1][:-1]
    return out


def _outcome(fn) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:  # compared by type, message and line
        return ("error", type(exc).__name__, str(exc), getattr(exc, "line", None),
                getattr(exc, "problems", None))


def _reference_bytes(run_dir: Path) -> bytes:
    doc = build_benchmark(read_raw(run_dir / "requests.jsonl"),
                          (read_raw(run_dir / "requests.jsonl").run_end or {}).get("client"))
    atomic_write_json(run_dir / "reference.json", doc)
    return (run_dir / "reference.json").read_bytes()


def _postprocess_bytes(run_dir: Path) -> bytes:
    return postprocess(run_dir).read_bytes()


def _check_same(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as d:
        run_dir = Path(d)
        (run_dir / "requests.jsonl").write_bytes(b"".join(lines))
        want = _outcome(lambda: _reference_bytes(run_dir))
        got = _outcome(lambda: _postprocess_bytes(run_dir))
        assert got == want
        # the reader alone: the same verdict as read_raw unless it hands the file over
        path = run_dir / "requests.jsonl"
        scanned = _outcome(lambda: scan_raw(path, parallel=False))
        read = _outcome(lambda: read_raw(path))
        if scanned[0] == "error" or read[0] == "error":
            assert scanned == read
        # read in two parts (rawpart.py), cut at every line start, and in three, cut there
        # and at the next line start or at the first: the same columns
        one_pass = _comparable(scanned)
        starts = np.flatnonzero(np.frombuffer(path.read_bytes(), np.uint8) == 10) + 1
        starts = [x for x in starts.tolist() if rawpart.line_start_after(path, x) == x]
        cuts = [[x] for x in starts]
        cuts += [[a, b] for a, b in zip(starts, starts[1:], strict=False)]
        cuts += [[starts[0], b] for b in starts[2:]]
        for splits in cuts:
            assert _comparable(_outcome(lambda s=splits: _scan_split(path, s))) == one_pass


def _scan_split(path: Path, splits: list[int]) -> RawColumns:
    reader = RawReader(path, columns=True)
    rawpart.read_parts(reader, splits, rawpart.read_part)
    return reader.raw_columns()


def _comparable(outcome: Any) -> Any:
    if outcome[0] != "ok":
        return outcome
    c = outcome[1]
    return (c.header, c.table.tolist(), c.failures, c.worker_names, c.run_end, c.partial,
            c.torn_lines, c.notes, c.path, c.workers)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=raw_files())
def test_postprocess_equals_the_plain_build(lines: list[bytes]):
    _check_same(lines)


# --- damage anywhere: the same error, naming the same line -------------------------------------

_MUTATIONS: list[tuple[str, Any]] = [
    ("truncate", None), ("blank", None), ("not an object", b"[1, 2]"), ("null", b"null"),
    ("no type", {"type": None}), ("type bogus", {"type": "bogus"}), ("type 5", {"type": 5}),
    ("start float", {"start_ns": 1.5}), ("start bool", {"start_ns": True}),
    ("index -1", {"request_index": -1}), ("end null", {"end_ns": None, "failure": None}),
    ("content after end", "content_after_end"), ("no content chunks", {"content_chunks": 0}),
    ("deltas negative", {"chunk_deltas_ns": [1, -2]}),
    ("deltas bool", {"chunk_deltas_ns": [1, True]}), ("deltas float", {"chunk_deltas_ns": [1.0]}),
    ("deltas nested", {"chunk_deltas_ns": [[1]]}), ("deltas string", {"chunk_deltas_ns": "12"}),
    ("deltas huge", {"chunk_deltas_ns": [2**64 - 1]}), ("deltas null", {"chunk_deltas_ns": None}),
    ("channels int", {"chunk_channels": 5}), ("usage list", {"usage": [1]}),
    ("failure kind int", {"failure": {"kind": 5}}), ("warmup string", {"warmup": "no"}),
    ("failure kind bogus", {"failure": {"kind": "bogus", "message": "m"}}),
    ("failure message int", {"failure": {"kind": "timeout", "message": 5}}),
    ("failure phase bogus", {"failure": {"kind": "timeout", "phase": "x"}}),
    ("status string", {"http_status": "200"}), ("worker list", {"worker": [1]}),
    ("extra string", {"extra": "x"}),
    ("reasoning null", {"reasoning_chunks": None}), ("worker int", {"worker": 5}),
    ("extra list", {"extra": [1]}), ("start huge", {"start_ns": 2**63 - 1}),
    ("delay float", {"extra": {"start_delay_ns": 2.5}}),
    ("delay bool", {"extra": {"start_delay_ns": True}}),
    ("tokens huge", {"usage": {"completion_tokens": 2**60}}),
    ("missing key", {"-": "chunk_channels"}), ("duplicate index", "duplicate"),
    ("second run", "second run"), ("after run_end", "after run_end"),
    ("bad worker line", b'{"type":"worker","worker":7}'),
]


def _mutate(lines: list[bytes], k: int, mutation: Any) -> list[bytes]:
    lines = list(lines)
    name, change = mutation
    try:
        obj = orjson.loads(lines[k])
    except orjson.JSONDecodeError:  # damaged already: only more damage applies
        obj = None
    if not isinstance(obj, dict) and not (name in ("truncate", "blank")
                                          or isinstance(change, bytes)):
        return lines
    if name == "truncate":
        lines[k] = lines[k][: max(1, len(lines[k]) // 3)] + b"\n"
    elif name == "blank":
        lines[k] = b"\n"
    elif isinstance(change, bytes):
        lines[k] = change + b"\n"
    elif change == "content_after_end":
        if obj.get("end_ns") is not None and obj.get("first_content_ns") is not None:
            obj["first_content_ns"] = obj["end_ns"] + 1
        lines[k] = orjson.dumps(obj) + b"\n"
    elif change == "duplicate":
        others = []
        for j, x in enumerate(lines):
            if j != k and x.startswith(b'{"type":"request"'):
                try:  # an earlier fault may have damaged it
                    others.append(orjson.loads(x))
                except orjson.JSONDecodeError:
                    continue
        others = [o for o in others if isinstance(o, dict) and "request_index" in o]
        if others:
            obj["request_index"] = others[0]["request_index"]
            obj["warmup"] = others[0]["warmup"]
        lines[k] = orjson.dumps(obj) + b"\n"
    elif change == "second run":
        lines.insert(k, lines[0])
    elif change == "after run_end":
        lines.insert(k, b'{"type":"run_end"}\n')
    elif isinstance(change, dict) and "-" in change:
        obj.pop(change["-"], None)
        lines[k] = orjson.dumps(obj) + b"\n"
    else:
        if isinstance(obj, dict):
            obj.update(change)
        lines[k] = orjson.dumps(obj) + b"\n"
    return lines


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=raw_files(), data=st.data())
def test_damaged_files_fail_the_same_way(lines: list[bytes], data: st.DataObject):
    complete = [x for x in lines if x.endswith(b"\n")]
    if not complete:
        return
    for _ in range(data.draw(st.integers(1, 2), label="faults")):
        complete = [x for x in lines if x.endswith(b"\n")]
        k = data.draw(st.integers(0, len(complete) - 1), label="line")
        mutation = data.draw(st.sampled_from(_MUTATIONS), label="mutation")
        lines = _mutate(complete, k, mutation) + lines[len(complete):]
    _check_same(lines)


def test_stamps_beyond_what_the_columns_hold_are_refused_by_both_readers(tmp_path: Path):
    """A stamp beyond ±2**62 (146 years of uptime) is damage: named with its line."""
    header = {"type": "run", "run_id": "benchmark-20260801T160039Z",
              "started_at": "2026-08-01T16:00:39Z", "params": {}}
    rec = {"type": "request", "request_index": 0, "start_ns": 2**62, "end_ns": 2**62 + 10,
           "failure": None, "worker": None}
    lines = [orjson.dumps(x) + b"\n" for x in (header, rec)]
    _refused_on(tmp_path, lines, 2,
                r"start_ns: expected an integer within ±2\*\*62, file has 4611686018427387904")


def test_large_run_writes_several_batches(tmp_path: Path, monkeypatch):
    """Rows are written a batch at a time; the seams are invisible."""
    monkeypatch.setattr(rowjson, "ROW_BATCH", 7)
    header = {"type": "run", "run_id": "benchmark-20260801T160039Z",
              "started_at": "2026-08-01T16:00:39Z", "params": {"context_distribution": None}}
    lines = [orjson.dumps(header) + b"\n"]
    for i in range(50):
        s = 10**9 + i * 10**7
        usage = {"prompt_tokens": 100 + i, "completion_tokens": 9}
        if i % 3:
            usage["prompt_tokens_details"] = {"cached_tokens": i}
        lines.append(orjson.dumps({
            "type": "request", "request_index": i, "warmup": False,
            "planned_context_tokens": 100, "start_ns": s, "first_output_ns": s + 10**6,
            "first_content_ns": s + 2 * 10**6, "end_ns": s + 9 * 10**6 + i,
            "reasoning_chunks": 3, "content_chunks": 6, "chunk_deltas_ns": [10**6] * 9,
            "chunk_channels": "rrrcccccc", "usage": usage if i % 7 else None,
            "finish_reason": "stop", "http_status": 200, "failure": None, "worker": None,
            "extra": {"start_delay_ns": i}}) + b"\n")
    lines.append(b'{"type":"run_end","finished_at":"2026-08-01T16:09:00Z","client":{}}\n')
    (tmp_path / "requests.jsonl").write_bytes(b"".join(lines))
    assert postprocess(tmp_path).read_bytes() == _reference_bytes(tmp_path)
    built = build(scan_raw(tmp_path / "requests.jsonl"), {})
    assert built.to_dict() == orjson.loads((tmp_path / "benchmark.json").read_bytes())


def _mixed_run(path: Path, n: int) -> None:
    """A run of `n` requests from two workers, with failures, a worker line in the middle
    and a record only the slow path reads (no "worker" key)."""
    header = {"type": "run", "run_id": "benchmark-20260801T160039Z",
              "started_at": "2026-08-01T16:00:39Z", "params": {}}
    lines = [orjson.dumps(header) + b"\n"]
    for i in range(n):
        if i == n // 2:
            lines.append(b'{"type":"worker","worker":"w:2","perf_offset_ns":1000}\n')
        s = 10**9 + i * 10**7
        failed = i % 11 == 5
        lines.append(orjson.dumps({
            "type": "request", "request_index": i, "warmup": False,
            "planned_context_tokens": 100, "start_ns": s, "first_output_ns": s + 10**6,
            "first_content_ns": s + 2 * 10**6, "end_ns": s + 9 * 10**6 + i,
            "reasoning_chunks": 3, "content_chunks": 6, "chunk_deltas_ns": [10**6] * 9,
            "chunk_channels": "rrrcccccc",
            "usage": {"completion_tokens": 9},
            "finish_reason": "stop", "http_status": 200,
            "failure": {"kind": "truncated", "message": f"lost {i}", "phase": "decode"}
            if failed else None,
            "worker": None if i % 5 == 0 else f"w:{1 + (i * 7 // n) % 2}",
            "extra": {"start_delay_ns": i}}) + b"\n")
        if i == n - 3:  # no "worker" key at all: not a plain line, read the slow way
            lines[-1] = lines[-1].replace(b',"worker":"w:2"', b"").replace(
                b',"worker":"w:1"', b"")
    lines.append(b'{"type":"run_end","finished_at":"2026-08-01T16:09:00Z","client":{}}\n')
    path.write_bytes(b"".join(lines))


def _child_results(monkeypatch) -> list[Any]:
    """The list every `rawpart.child_result` outcome is appended to, from now on."""
    results: list[Any] = []
    real_result = rawpart.child_result

    def result_spy(proc: Any) -> Any:
        results.append(real_result(proc))
        return results[-1]

    monkeypatch.setattr(rawpart, "child_result", result_spy)
    return results


def test_a_large_file_is_read_in_two_processes_to_the_same_columns(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A file over `rawpart.MIN_BYTES` has each half read by a real child process (`python
    -m anvil_metrics.post.rawchild`); the columns are those of one pass, and a child that
    fails is replaced by reading its part in-process."""
    path = tmp_path / "requests.jsonl"
    _mixed_run(path, 400)
    outcome = _outcome(lambda: scan_raw(path, parallel=False))
    assert outcome[0] == "ok" and len(outcome[1].table) == 400 and len(outcome[1].failures) == 36
    one_pass = _comparable(outcome)
    monkeypatch.setattr(rawpart, "MIN_BYTES", 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # two CPUs
    started = []
    real_start = rawpart.start_child

    def spy(p: Path, offset: int, stop: int | None = None) -> Any:
        started.append((offset, stop))
        return real_start(p, offset, stop)

    monkeypatch.setattr(rawpart, "start_child", spy)
    results = _child_results(monkeypatch)
    assert _comparable(_outcome(lambda: scan_raw(path))) == one_pass
    assert len(started) == 2 and started[0] == (0, started[1][0])
    assert 0 < started[1][0] < path.stat().st_size and started[1][1] is None
    assert len(results) == 2 and None not in results  # the children's parts were merged
    heads = [r.segments[0][:2] for r in results]  # (taken in as each child ends)
    assert ("line", 1) in heads  # the header, for this process to judge
    assert any(seg[0] == "line" for r in results for seg in r.segments[1:])  # the worker
    assert postprocess(tmp_path).read_bytes() == _reference_bytes(tmp_path)

    # four CPUs: four children, each reading from its cut to the next one
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    started.clear()
    results.clear()
    assert _comparable(_outcome(lambda: scan_raw(path))) == one_pass
    assert [stop for _, stop in started] == [started[1][0], started[2][0], started[3][0],
                                             None]
    assert len(results) == 4 and all(r is not None and r.lines > 0 for r in results)
    assert postprocess(tmp_path).read_bytes() == _reference_bytes(tmp_path)

    def failing(p: Path, offset: int, stop: int | None = None) -> Any:
        import subprocess
        import sys
        return subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    monkeypatch.setattr(rawpart, "start_child", failing)
    assert _comparable(_outcome(lambda: scan_raw(path))) == one_pass


@pytest.mark.parametrize("script", [
    # the head promises more rows than follow (a child killed mid-write), exit 0
    "import struct, sys; sys.stdout.buffer.write(struct.pack('<QQ', 0, 800) + b'x' * 80)",
    # a whole message whose fields are not a pickle
    "import struct, sys; sys.stdout.buffer.write(struct.pack('<QQ', 4, 8) + b'nope' + b'\\0' * 8)",
    # half a head
    "import sys; sys.stdout.buffer.write(b'\\0' * 7)",
    # a head whose size for the rows is not what the fields describe (huge, here)
    "import pickle, struct, sys; f = pickle.dumps(([], {}, [], 0)); "
    "sys.stdout.buffer.write(struct.pack('<QQ', len(f), 2**62) + f)",
    # all of it, then a failure
    "import struct, sys; sys.stdout.buffer.write(struct.pack('<QQ', 0, 0)); sys.exit(1)",
])
def test_a_child_whose_output_is_cut_or_wrong_is_replaced_by_reading_its_part_here(
        tmp_path: Path, monkeypatch, script: str) -> None:
    path = tmp_path / "requests.jsonl"
    _mixed_run(path, 120)
    one_pass = _comparable(_outcome(lambda: scan_raw(path, parallel=False)))
    monkeypatch.setattr(rawpart, "MIN_BYTES", 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})

    def fake(p: Path, offset: int, stop: int | None = None) -> Any:
        import subprocess
        import sys
        return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)

    monkeypatch.setattr(rawpart, "start_child", fake)
    results = _child_results(monkeypatch)
    assert _comparable(_outcome(lambda: scan_raw(path))) == one_pass
    assert results == [None, None]


# --- percentiles, verify, rows ------------------------------------------------------------


@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5]) | st.floats(-5, 5),
                       max_size=40),
       p=st.integers(0, 100))
def test_nearest_rank_columns_takes_the_same_zero(values, p):
    got = stats.nearest_rank_columns(np.array(values, dtype=np.float64), (p,))[0]
    assert same(got, stats.nearest_rank(values, p))


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=raw_files(), data=st.data())
def test_rows_plainly_typed_pass_the_type_checks_alike(lines: list[bytes], data: st.DataObject):
    """verify takes rows as columns at once when `RowColumns.from_rows` accepts them, and
    type-checks them one by one otherwise: from_rows accepts exactly what the type checks
    pass, into the same columns; an altered row is named either way."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "requests.jsonl"
        path.write_bytes(b"".join(lines))
        try:
            doc = build_benchmark(read_raw(path))
        except Exception:
            return
    assert verify_benchmark(doc) == []
    rows = derive.RowColumns.from_rows(doc["request_timings"])
    assert rows is not None
    assert same(stats.aggregate(rows, doc["wall_clock_ms"]), doc["metrics"])
    if not doc["request_timings"]:
        return
    altered = copy.deepcopy(doc)
    i = data.draw(st.integers(0, len(altered["request_timings"]) - 1), label="row")
    row = altered["request_timings"][i]
    name = data.draw(st.sampled_from(sorted(row)), label="field")
    value = row[name]
    bad = data.draw(st.sampled_from([None, True, -0.0, 0.0, 1, 1.0, -1, 2**53, 2**64, "x",
                                     math.nextafter(value, math.inf)
                                     if isinstance(value, float) else value]),
                    label="value")
    dropped = data.draw(st.booleans(), label="drop")
    if dropped:
        del row[name]
    else:
        row[name] = bad
    if data.draw(st.booleans(), label="extra key"):
        row["other"] = 1
    found: list[Any] = []
    (typed, at), all_typed = verify._typed_rows(altered, [], found)
    fast = derive.RowColumns.from_rows(altered["request_timings"])
    assert (fast is not None) == (all_typed and not found)
    if fast is not None:
        assert at.tolist() == list(range(len(fast)))
        assert same(fast.row_dicts(), typed.row_dicts())
    messages = verify_benchmark(altered)
    if catalog.BY_NAME[name].derived and (dropped or not same(bad, value)):
        assert any(m.startswith(f"request_timings[{i}].{name}:") for m in messages), (
            name, value, bad, messages)


def test_from_rows_leaves_unusual_rows_to_the_row_by_row_checks():
    good = {name: 0 for name in catalog.ROW_FIELDS}
    good.update({name: 1.0 for name in catalog.FLOAT_FIELDS}, output_token_source="usage")
    assert derive.RowColumns.from_rows([good]) is not None
    for change in ({"e2e_ms": float("nan")}, {"ttft_ms": float("inf")}, {"output_tokens": True},
                   {"cached_tokens": None}, {"request_index": 2**64}, {"other": 1},
                   {"output_token_source": ["usage"]}, {"e2e_ms": None}, {"e2e_ms": -1.0}):
        assert derive.RowColumns.from_rows([{**good, **change}]) is None, change
    assert derive.RowColumns.from_rows([good, "row"]) is None
    assert derive.RowColumns.from_rows("rows") is None
    # the fields added after v1's first rows: in every row, or in none
    old = {k: v for k, v in good.items() if k not in catalog.ADDED}
    assert derive.RowColumns.from_rows([old, old]).absent == catalog.ADDED
    assert derive.RowColumns.from_rows([old, good]) is None
    assert derive.RowColumns.from_rows([good, old]) is None


def _request(i: int, *, warmup: bool = False, **change: Any) -> bytes:
    s = 10**9 + i % 1000 * 10**7
    d = {"type": "request", "request_index": i, "warmup": warmup,
         "planned_context_tokens": 100, "start_ns": s, "first_output_ns": s + 10**6,
         "first_content_ns": s + 2 * 10**6, "end_ns": s + 9 * 10**6, "reasoning_chunks": 1,
         "content_chunks": 1, "chunk_deltas_ns": [10**6, 10**6], "chunk_channels": "rc",
         "usage": {"prompt_tokens": 100, "completion_tokens": 2}, "finish_reason": "stop",
         "http_status": 200, "failure": None, "worker": None}
    d.update(change)
    return orjson.dumps(d) + b"\n"


_HEAD = orjson.dumps({"type": "run", "run_id": "benchmark-20260801T160039Z",
                      "started_at": "2026-08-01T16:00:39Z", "params": {}}) + b"\n"
_END = b'{"type":"run_end","finished_at":"2026-08-01T16:09:00Z"}\n'


@pytest.mark.parametrize(("lines", "line", "words"), [
    # a duplicate names both lines; warm-ups have their own indices
    ([_HEAD, _request(0), _request(1), _request(0), _END], 4, "already used on line 2"),
    ([_HEAD, _request(0, warmup=True), _request(0), _request(0, warmup=True)], 4,
     "already used on line 2"),
    # the first fault in line order wins ...
    ([_HEAD, _request(0), _request(0), _request(1, start_ns=1.5)], 3, "already used"),
    ([_HEAD, _request(0), _request(1, start_ns=1.5), _request(0)], 3, "start_ns"),
    ([_HEAD, _request(3), _request(1), _request(3), _request(1)], 4, "request_index 3"),
    # ... except that an unparseable line anywhere wins over any other fault
    ([_HEAD, _request(0), _request(0), _request(1), b'{"type": "req\n', _END], 5,
     "not valid JSON"),
    ([_HEAD, _END, _request(1), b"\n"], 4, "not valid JSON"),
    ([_HEAD, _END, _request(1)], 3, "after the run_end"),
    ([_HEAD, _request(0), _END, b"[1]\n"], 4, "not a JSON object"),
    ([_HEAD, _request(0), _request(2), _END], None, r"\[1\] have no record"),
    ([_HEAD, _request(0), _request(2**40), _END], None, r"\[1, 2, 3, 4, 5, 6, 7, 8, 9, 10\]"),
])
def test_faults_raise_the_same_error(tmp_path: Path, lines: list[bytes], line: int | None,
                                     words: str):
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    with pytest.raises(Exception, match=words) as exc:
        read_raw(raw)
    assert getattr(exc.value, "line", None) == line
    _check_same(lines)


@pytest.mark.parametrize("key", ["reasoning_chunks", "content_chunks"])
def test_a_null_chunk_count_is_none_in_both_readers(tmp_path: Path, key: str):
    """`null` counts no chunks, as an absent key does (record_problem reads it so)."""
    line = orjson.loads(_request(0))  # one reasoning chunk, one content chunk
    line[key] = None
    if key == "content_chunks":
        line["first_content_ns"] = None
    lines = [_HEAD, orjson.dumps(line) + b"\n", _request(1), _END]
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    assert getattr(read_raw(raw).records[0], key) == 0
    _check_same(lines)


@pytest.mark.parametrize("after", [b'{"type": "req\n', b'{"type":"bogus"}\n',
                                   _request(1, start_ns=1.5)])
def test_a_stamp_beyond_the_columns_is_found_before_what_follows_it(tmp_path: Path,
                                                                     after: bytes):
    """A line the plain road cannot take is judged where it stands, as by read_raw: its
    error is the first in line order (but an unparseable line wins, wherever it is)."""
    far = _request(1, start_ns=2**62, first_output_ns=2**62 + 1, first_content_ns=2**62 + 2,
                   end_ns=2**62 + 3)
    lines = [_HEAD, _request(0), far, _request(2), after, _END]
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    with pytest.raises(RawFileError) as exc:
        scan_raw(raw, parallel=False)
    assert exc.value.line == (5 if after.startswith(b'{"type": "req') else 3)
    _check_same(lines)


# Values nested deeper than orjson writes (254 levels) but not than it reads (1,023), where a
# plain repr recurses too deep: written as markers, put in the line's text by `_deepen`.
_DEEP = "@deep list@"  # a list nested 1,000 deep


def _deep_dict(levels: int) -> str:
    return f"@deep dict {levels}@"  # {"a": {"a": ... 1}}, `levels` objects


def _deepen(line: bytes) -> bytes:
    line = line.replace(b'"@deep list@"', b"[" * 1000 + b"]" * 1000)
    return re.sub(rb'"@deep dict (\d+)@"',
                  lambda m: b'{"a":' * int(m[1]) + b"1" + b"}" * int(m[1]), line)


def _refused_on(tmp_path: Path, lines: list[bytes], line: int, words: str) -> RawFileError:
    """`lines` as a raw file: both readers refuse it with `words`, naming `line`."""
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    with pytest.raises(RawFileError, match=words) as exc:
        read_raw(raw)
    assert exc.value.line == line
    _check_same(lines)
    return exc.value


@pytest.mark.parametrize(("change", "words"), [
    # what a benchmark takes as it is must have the type it holds there (verify's checks)
    ({"failure": {"kind": "bogus"}}, 'failure.kind: expected one of "aborted", "bad_response", '),
    ({"failure": {"kind": ["timeout"]}},
     "failure.kind: expected one of .*, file has \\[\"timeout\"\\]"),
    ({"failure": {"kind": "timeout", "message": 5}},
     "failure.message: expected a string, file has 5"),
    ({"failure": {"kind": "timeout", "http_status": "500"}},
     'failure.http_status: expected an integer or null, file has "500"'),
    ({"failure": {"kind": "timeout", "http_status": True}}, "failure.http_status"),
    ({"failure": {"kind": "timeout", "phase": "bogus"}}, "failure.phase: expected one of"),
    ({"failure": [1]}, r"failure: expected an object or null, file has \[1\]"),
    ({"http_status": "200"}, 'http_status: expected an integer or null, file has "200"'),
    ({"worker": [1]}, r"worker: expected a string or null, file has \[1\]"),
    ({"worker": {}}, "worker: expected a string or null"),
    ({"extra": [1]}, r"extra: expected an object or null, file has \[1\]"),
    ({"extra": "x"}, 'extra: expected an object or null, file has "x"'),
    # a value nested 1,000 deep is shown cut short (a plain repr of it raises RecursionError)
    ({"start_ns": _DEEP},
     r"start_ns: expected an integer within ±2\*\*62, file has \[\[\[\[\.\.\.\]\]\]\]"),
    ({"warmup": _DEEP}, "warmup: expected true or false"),
    ({"planned_context_tokens": _DEEP}, "planned_context_tokens: expected a non-negative integer"),
    ({"usage": _DEEP}, "usage: expected an object or null"),
    ({"extra": _DEEP}, "extra: expected an object or null"),
    ({"worker": _DEEP}, "worker: expected a string or null"),
    ({"failure": _DEEP}, "failure: expected an object or null"),
    ({"failure": {"kind": "timeout", "message": _DEEP}}, "failure.message: expected a string"),
    ({"start_ns": "9" * 5000},
     r'start_ns: expected an integer within ±2\*\*62, file has "9{20,}\.\.\.$'),
])
def test_fields_a_benchmark_takes_as_they_are_are_checked_on_reading(
        tmp_path: Path, change: dict[str, Any], words: str):
    """A damaged record is refused by both readers, naming its line, not built into a
    document that then fails verification (or raises on the way)."""
    lines = [_HEAD, _request(0), _deepen(_request(1, **change)), _END]
    assert len(str(_refused_on(tmp_path, lines, 3, words))) < 400


def test_a_failure_as_anvil_writes_it_is_read(tmp_path: Path):
    """Every kind and phase anvil writes, with and without a status, passes both readers."""
    lines = [_HEAD]
    for i, kind in enumerate(FAILURE_KINDS):
        failure = {"kind": kind, "message": "m", "http_status": [None, 503][i % 2],
                   "phase": [*PHASES, None][i % (len(PHASES) + 1)]}
        lines.append(_request(i, failure=failure, http_status=[None, 200][i % 2]))
    lines.append(_END)
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    assert [r.failure.kind for r in read_raw(raw).records] == list(FAILURE_KINDS)
    _check_same(lines)


_RUN = orjson.loads(_HEAD)


@pytest.mark.parametrize(("line", "at", "where"), [
    ({**_RUN, "params": {"model": _DEEP}}, 1, "params.model"),
    ({**_RUN, "params": {"serve_flags": {"x": _deep_dict(40)}}}, 1, "params.serve_flags"),
    ({"type": "run_end", "client": {"cpu_pct": _DEEP}}, 3, "client.cpu_pct"),
    ({"type": "run_end", "client": _deep_dict(300)}, 3, "client.a"),
    ({"type": "worker", "worker": "w1", "perf_offset_ns": 0, "x": _DEEP}, 2, r"x\[0\]"),
])
def test_a_run_line_nested_deeper_than_anvil_writes_is_refused(
        tmp_path: Path, line: dict[str, Any], at: int, where: str):
    """Header, worker and run_end values are copied into the document; one nested deeper
    than a JSON writer writes (orjson: 254 levels) made the write raise with a traceback."""
    text = _deepen(orjson.dumps(line)) + b"\n"
    lines = ([text, _request(0), _END] if at == 1 else [_HEAD, text, _request(0), _END]
             if at == 2 else [_HEAD, _request(0), text])
    _refused_on(tmp_path, lines, at,
                f"{where} holds values nested more than {MAX_LINE_DEPTH} levels deep")


_LAG = {"p50": 0.2, "p99": 1.1, "max": 3.0, "samples": 100, "over_5ms": 0}


@pytest.mark.parametrize(("client", "words"), [
    ({"loop_lag_ms": _LAG, "cpu_pct": 11.0, "saturated": True, "verdict": "saturated: x"},
     "run_end client.saturated: file has true"),
    ({"loop_lag_ms": [1], "cpu_pct": 11.0}, "run_end client.loop_lag_ms: expected an object"),
    ({"loop_lag_ms": {**_LAG, "p50": 2.0}, "cpu_pct": 11.0, "saturated": False},
     "run_end client.loop_lag_ms: p50 2.0 <= p99 1.1"),
    ({"cpu_pct": "x"}, "run_end client.cpu_pct: expected a non-negative number"),
    ([1], r"run_end client: expected an object or null, file has \[1\]"),
    ("ok", "run_end client: expected an object or null"),
])
def test_a_damaged_client_in_run_end_is_named_with_its_line(
        tmp_path: Path, client: Any, words: str):
    """The run_end's generator figures become the benchmark's `client` block; damaged, they
    are refused on reading (a list raised AttributeError; wrong figures made the built
    benchmark fail its verification, with advice to rebuild it that cannot help)."""
    end = orjson.dumps({"type": "run_end", "finished_at": "2026-08-01T16:09:00Z",
                        "client": client}) + b"\n"
    _refused_on(tmp_path, [_HEAD, _request(0), end], 3, words)


@pytest.mark.parametrize("client", [
    None, {},
    {"loop_lag_ms": _LAG, "cpu_pct": 11.0},  # figures from before the verdict existed
    {"loop_lag_ms": {**_LAG, "max_at_s": 1.5, "stalls": [[1.5, 6.2]]}, "cpu_pct": 95.0,
     "achieved_concurrency": None, "saturated": True,
     "verdict": "saturated: CPU 95 % of one core > 90 %", "load_s": 9.0, "cpu_s": 8.6},
])
def test_run_end_clients_anvil_writes_are_read(tmp_path: Path, client: Any):
    end = orjson.dumps({"type": "run_end", "finished_at": "2026-08-01T16:09:00Z",
                        "client": client}) + b"\n"
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(_HEAD + _request(0) + end)
    assert read_raw(raw).run_end["client"] == client
    assert postprocess(tmp_path).exists()


@pytest.mark.parametrize(("params", "words"), [
    ({"serve_flags": [1]}, r"run header: serve_flags: expected an object or null"),
    ({"concurrency": "4"}, r"run header: concurrency: expected an integer or null"),
    ({"prompt_calibration": {"method": "guess"}},
     r"run header: prompt_calibration.method: expected one of"),
    ({"serve_flags": {"shared_prefix_burst": True}, "shared_prefix": {"prefix_tokens": -1}},
     r"run header: shared_prefix.prefix_tokens: expected a non-negative integer"),
    ({"concurrency": 1.5, "max_tokens": "x"}, r"concurrency: .* \(and 1 more\)"),
    ({"model": ["a", "b"]}, r"run header: model: expected a string or null"),
    ({"gpu": 4090}, r"run header: gpu: expected a string or null"),
])
def test_a_damaged_run_header_is_named_with_its_line(
        tmp_path: Path, params: dict[str, Any], words: str):
    """The header's params become the benchmark's run fields; of the wrong type, they are
    refused on reading, not found when the built benchmark fails its verification."""
    _refused_on(tmp_path, [orjson.dumps({**_RUN, "params": params}) + b"\n", _request(0), _END],
                1, words)


def test_a_header_base_url_with_credentials_is_read_and_built_without_them(tmp_path: Path):
    """The build removes credentials from `base_url`, so the reader takes such a header
    (an old raw file) rather than refusing what the benchmark will not hold."""
    lines = [orjson.dumps({**_RUN, "params": {"base_url": "http://al:pw@127.0.0.1:9/v1"}})
             + b"\n", _request(0), _END]
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(b"".join(lines))
    assert read_raw(raw).header["params"]["base_url"].startswith("http://al:pw@")
    doc = orjson.loads(postprocess(tmp_path).read_bytes())
    assert doc["base_url"] == "http://127.0.0.1:9/v1"


def test_a_run_id_the_benchmark_cannot_hold_is_named_with_its_line(tmp_path: Path):
    _refused_on(tmp_path, [orjson.dumps({**_RUN, "run_id": "my-run"}) + b"\n", _request(0),
                           _END], 1, "run_id: expected a string like benchmark-YYYYMMDDTHHMMSSZ")


def test_run_lines_up_to_the_depth_limit_are_read(tmp_path: Path):
    """`MAX_LINE_DEPTH` levels in all, the line itself included, pass; one more does not."""
    def head(levels: int) -> bytes:  # the line, params, and levels - 2 objects in it
        return _deepen(orjson.dumps({**_RUN, "params": {"x": _deep_dict(levels - 2)}})) + b"\n"
    raw = tmp_path / "requests.jsonl"
    raw.write_bytes(head(MAX_LINE_DEPTH) + _request(0) + _END)
    assert read_raw(raw).header["params"]["x"]["a"]
    raw.write_bytes(head(MAX_LINE_DEPTH + 1) + _request(0) + _END)
    with pytest.raises(RawFileError, match="params.x holds values nested"):
        read_raw(raw)


def test_postprocess_of_a_damaged_record_is_one_line_no_traceback(tmp_path: Path):
    """The CLI a user runs on such a file: exit 1, one line naming the file, line and
    field."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    deep_message = orjson.dumps({"kind": "timeout", "message": "@"}).replace(
        b'"@"', b"[" * 1000 + b"]" * 1000)
    bad = _request(1).replace(b'"failure":null', b'"failure":' + deep_message)
    (run_dir / "requests.jsonl").write_bytes(b"".join([_HEAD, _request(0), bad, _END]))
    proc = anvil("postprocess", str(run_dir))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "requests.jsonl:3" in lines[0] and "failure.message: expected a string" in lines[0]
    assert not (run_dir / "benchmark.json").exists()


def test_fmt_shows_a_value_too_deep_for_orjson_cut_short():
    assert fmt(orjson.loads(_deepen(b'"@deep list@"'))) == "[[[[...]]]]"
    shown = fmt(orjson.loads(_deepen(b'"@deep dict 600@"')))
    assert shown == "{'a': {'a': {'a': {...}}}}"
    assert fmt([1, "x"]) == '[1,"x"]'  # orjson's text where it can write it


# Text a writer other than orjson could put in or around a chunk_deltas_ns array (leading
# zeros, whitespace, numbers past 64 bits, a second key, a nested one): the columns' fast
# checks must give the verdict of read_raw's whole parse.
_KEY = b'"chunk_deltas_ns":'
_CUTS = [
    (b"[1000000,1000000]", b"[0,7,1000000]"),  # zeros, fine
    (b"[1000000,1000000]", b"[]"),  # empty, fine
    (b"[1000000,1000000]", b"[9999999999999999999]"),  # 19 digits: below 2**64, fine
    (b"[1000000,1000000]", b"[18446744073709551615]"),  # 2**64 - 1: 20 digits, whole parse
    (b"[1000000,1000000]", b"[99999999999999999999]"),  # beyond 2**64: not JSON orjson reads
    (b"[1000000,1000000]", b"[01,2]"), (b"[1000000,1000000]", b"[1,00]"),  # leading zeros
    (b"[1000000,1000000]", b"[1,,2]"), (b"[1000000,1000000]", b"[,1]"),
    (b"[1000000,1000000]", b"[1,]"), (b"[1000000,1000000]", b"[1, 2]"),
    (b"[1000000,1000000]", b"[1,-2]"), (b"[1000000,1000000]", b"[1.5]"),
    (b"[1000000,1000000]", b"[1].5"), (b"[1000000,1000000]", b"[1]0"),
    (b"[1000000,1000000]", b"[1,[2]]"), (b"[1000000,1000000]", b"[1,true]"),
    (b"[1000000,1000000]", b'[1,"2"]'), (b"[1000000,1000000]", b"[1"),
    (_KEY + b"[", b'"chunk_deltas_ns" :['),  # whitespace before the colon
    (b'"finish_reason"', b'"chunk_deltas_ns":0,"finish_reason"'),  # a second key after
    (b'"finish_reason"', b'"chunk_deltas_ns":[1],"finish_reason"'),
    (b'"finish_reason"', b'"x":"chunk_deltas_ns","finish_reason"'),  # the name as a value
    (b'"request_index"', b'"x":{"chunk_deltas_ns":[5]},"request_index"'),  # nested before
    (b'"request_index"', b'"x":[1],"request_index"'),  # an array opens before the key
    # nested deeper than orjson writes (255), not deeper than it reads (1024)
    (b"[1000000,1000000]", b"[" * 300 + b"1" + b"]" * 300),
]


@pytest.mark.parametrize(("old", "new"), _CUTS, ids=[c[1].decode()[:40] for c in _CUTS])
def test_odd_deltas_text_gets_the_verdict_of_a_whole_parse(old: bytes, new: bytes):
    line = _request(0)
    assert line.count(old) == 1
    _check_same([_HEAD, line.replace(old, new), _request(1), _END])
    last = _request(2).replace(old, new)[:-1]  # the last line, without its newline
    _check_same([_HEAD, _request(0), _request(1), last])


_ROW_COUNT = st.one_of(st.sampled_from([0, 1, 9, 10]), st.integers(0, 2**53 - 1))
_ROW_FLOAT = st.one_of(st.sampled_from([0.0, 1e-7, 1e16, 0.1 + 0.2, 123456789.0]),
                       st.floats(0, 1e300, allow_nan=False), st.floats(-1e9, 1e9))
# made once: a strategy built inside a draw is validated and labelled anew each time
_ROW_COUNT_OR_NONE = st.one_of(st.none(), _ROW_COUNT)
_ROW_FLOAT_OR_NONE = st.one_of(st.none(), _ROW_FLOAT)
_SOURCES = st.sampled_from(["usage", "chunks"])


@st.composite
def _timing_rows(draw: Any) -> list[dict[str, Any]]:
    rows = []
    for i in range(draw(st.integers(1, 12))):
        row: dict[str, Any] = {name: draw(_ROW_COUNT) for name in catalog.COUNT_FIELDS}
        row["request_index"] = i
        for name in catalog.OPTIONAL_COUNT_FIELDS:
            row[name] = draw(_ROW_COUNT_OR_NONE)
        if row["cached_tokens"] is None:
            del row["cached_tokens"]  # not reported: no key
        for name in catalog.FLOAT_FIELDS:
            nullable = name in derive.NULLABLE_FLOATS
            value = draw(_ROW_FLOAT_OR_NONE if nullable else _ROW_FLOAT)
            duration = catalog.BY_NAME[name].kind == "duration"
            row[name] = abs(value) if duration and value is not None else value
        row["output_token_source"] = draw(_SOURCES)
        rows.append(row)
    return rows


@settings(max_examples=examples(100), deadline=None)
@given(_timing_rows(), st.sampled_from([1, 2, 3, 5, 1024]))
def test_rows_are_written_as_orjson_writes_them(rows: list[dict[str, Any]], batch: int):
    """`BuiltBenchmark` writes its rows, batch by batch, as orjson writes the plain document:
    nulls, `cached_tokens` absent or present, any float, any batch seam."""
    columns = derive.RowColumns.from_rows(rows)
    assert columns is not None
    doc = {"schema": "x", "request_timings": [], "wall_clock_ms": 1.5}
    built = benchmark.BuiltBenchmark(doc, columns)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rowjson, "ROW_BATCH", batch)
        written = b"".join(built.json_chunks())
    assert written == orjson.dumps({**doc, "request_timings": rows},
                                   option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def test_a_row_template_orjson_does_not_match_falls_back_to_orjson(monkeypatch):
    """The writer's template is orjson's layout today; were orjson to lay rows out otherwise
    (here: the template is made to differ), the rows are written by orjson itself."""
    rows = [{name: 0 for name in catalog.ROW_FIELDS} for _ in range(3)]
    for i, row in enumerate(rows):
        row.update({name: 1.5 for name in catalog.FLOAT_FIELDS}, output_token_source="usage",
                   request_index=i)
    columns = derive.RowColumns.from_rows(rows)
    doc = {"schema": "x", "request_timings": [], "wall_clock_ms": 1.5}
    want = orjson.dumps({**doc, "request_timings": rows},
                        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    built = benchmark.BuiltBenchmark(doc, columns)
    assert b"".join(built.json_chunks()) == want
    monkeypatch.setattr(rowjson, "_ROW_OPEN", b",\n   {\n")  # another layout
    text = rowjson._RowText.of(columns)
    assert rowjson._rows_json(text, 0, 3) != rowjson._rows_orjson(text, 0, 3)
    with monkeypatch.context() as m:
        m.setattr(rowjson, "ROW_BATCH", 2)  # and across a batch seam
        assert b"".join(built.json_chunks()) == want


def test_the_responses_apis_usage_names_are_read_as_the_chat_names() -> None:
    from anvil_metrics.post.rawcolumns import NULL, usage_counts

    responses = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 8},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}}
    chat = {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 8},
            "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}}
    assert usage_counts(responses, 1, 3) == usage_counts(chat, 1, 3) == (5, True, 40, 8, 2)
    # an embeddings answer: a prompt count, nothing generated (the chunk count, 0)
    assert usage_counts({"prompt_tokens": 12, "total_tokens": 12}, 0, 0) == (
        0, False, 12, NULL, NULL)


def test_the_messages_apis_usage_counts_its_cache_in_the_prompt() -> None:
    """Anthropic's `input_tokens` leaves the cache's reads and writes out: the prompt is
    their sum, the cached tokens the reads; vLLM's sends neither (its `input_tokens` is the
    whole prompt, nothing cached reported)."""
    from anvil_metrics.post.rawcolumns import NULL, usage_counts

    anthropic = {"input_tokens": 30, "cache_read_input_tokens": 8,
                 "cache_creation_input_tokens": 2, "output_tokens": 5}
    assert usage_counts(anthropic, 1, 3) == (5, True, 40, 8, NULL)
    assert usage_counts({"input_tokens": 40, "output_tokens": 5}, 1, 3) == (
        5, True, 40, NULL, NULL)
    nulls = {"input_tokens": 40, "cache_read_input_tokens": None, "output_tokens": 5}
    assert usage_counts(nulls, 1, 3) == (5, True, 40, NULL, NULL)
    odd = {"input_tokens": 40, "cache_creation_input_tokens": 1.5, "output_tokens": 5}
    assert usage_counts(odd, 1, 3) == (5, True, NULL, NULL, NULL)
