"""Stepped runs after the run: each request attributed to the step in force when it started,
`steps[]` worked out by hand from a raw file with step lines, verify naming each tampering,
and the raw reader refusing step lines that cannot be a run's.

Why by hand: a sweep's point is its per-step figures; a request counted in the wrong step,
or a step's window off by one line, moves every figure of two steps at once and still adds
up. The expected blocks below are the records' own numbers, counted in plain Python.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rawbuild import HEADER, completed, failed

from anvil_metrics.errors import RawFileError
from anvil_metrics.jsonio import dump_line
from anvil_metrics.post import rawpart
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawcolumns import NULL
from anvil_metrics.post.rawread import RawReader, read_raw
from anvil_metrics.post.steps import attribute
from anvil_metrics.post.verify import verify_benchmark

ANCHOR = HEADER["perf_anchor_ns"]  # 1000 ns
MS = 1_000_000
RUN_END = {"type": "run_end", "finished_at": "2026-08-01T16:00:45Z"}

# --- attribute --------------------------------------------------------------------------


def test_attribute_places_each_start_in_the_last_step_begun() -> None:
    steps = [100, 200, 300]
    starts = np.array([50, 99, 100, 150, 199, 200, 299, 300, 10**12], dtype=np.int64)
    got = attribute(steps, starts)
    # before the first step: step 0; exactly at a step's t_ns: that step; after the last
    assert got.tolist() == [0, 0, 0, 0, 0, 1, 1, 2, 2]
    assert got.dtype == np.int64


def test_attribute_with_two_steps_at_the_same_instant_takes_the_later() -> None:
    assert attribute([100, 200, 200], np.array([199, 200, 250])).tolist() == [0, 2, 2]


def test_attribute_without_steps_is_null() -> None:
    got = attribute([], np.array([1, 2, 3], dtype=np.int64))
    assert got.tolist() == [NULL] * 3


# --- a stepped raw run ------------------------------------------------------------------

STEP1_NS = ANCHOR + 30 * MS  # request 3 starts exactly here (1000 + 3 × 10 ms)
END_NS = ANCHOR + 80 * MS


def _slow(i: int, ttft_ms: int) -> Any:
    """A completed request whose content starts `ttft_ms` after it did."""
    start = 1_000 + i * 10_000_000
    first_out = start + (ttft_ms - 1) * MS
    return completed(i, first_output_ns=first_out, first_content_ns=first_out + MS,
                     end_ns=first_out + 4 * MS, chunk_deltas_ns=((ttft_ms - 1) * MS,
                                                                 *[MS] * 4))


def _lines(*, goodput: bool = True, step_end: bool = True) -> list[dict[str, Any]]:
    """Header, step 0 (1 user) at the anchor, a warm-up, requests 0-2 (step 0), step 1
    (2 users) at 30 ms, requests 3-6 (3 starts exactly at step 1; 5 fails; 6 has a 101 ms
    TTFT), step_end at 80 ms, run_end."""
    params: dict[str, Any] = {"concurrency": 2}
    if goodput:
        params["goodput"] = ["ttft_ms<=100"]
    recs = [completed(0, start_ns=ANCHOR - 5 * MS, warmup=True)]
    recs += [completed(i) for i in range(5)] + [failed(5), _slow(6, 101)]
    lines: list[dict[str, Any]] = [{**HEADER, "params": params, "type": "run"},
                                   {"type": "step", "step": 0, "t_ns": ANCHOR, "users": 1,
                                    "rate": None}]
    for rec in recs:
        if not rec.warmup and rec.request_index == 3:
            lines.append({"type": "step", "step": 1, "t_ns": STEP1_NS, "users": 2,
                          "rate": None})
        lines.append(rec.to_json_dict())
    if step_end:
        lines.append({"type": "step_end", "t_ns": END_NS})
    lines.append(RUN_END)
    return lines


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(dump_line(x) for x in lines))
    return path


def _doc(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return build_benchmark(read_raw(_write(tmp_path / "requests.jsonl", _lines(**kw))))


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    return _doc(tmp_path)


def test_steps_blocks_by_hand(doc: dict[str, Any]) -> None:
    b0, b1 = doc["steps"]
    assert set(b0) == {"step", "users", "started_s", "ended_s", "requests", "completed",
                       "failed", "metrics", "goodput_rps"}
    assert (b0["step"], b0["users"], b0["started_s"], b0["ended_s"]) == (0, 1, 0.0, 0.03)
    assert (b1["step"], b1["users"], b1["started_s"], b1["ended_s"]) == (1, 2, 0.03, 0.08)
    assert (b0["requests"], b0["completed"], b0["failed"]) == (3, 3, 0)
    assert (b1["requests"], b1["completed"], b1["failed"]) == (4, 3, 1)
    assert doc["requests"] == 7 and doc["warmup_requests"] == 1
    # the rows' steps, by index, and the failure's
    assert {r["request_index"]: r["step"] for r in doc["request_timings"]} == {
        0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 6: 1}
    assert doc["failures"] == [{"request_index": 5, "kind": "http_error", "http_status": 503,
                                "message": "503 busy", "phase": "headers", "step": 1}]
    # metrics over each step's own rows and window
    assert b0["metrics"]["ttft_p50_ms"] == 2.0 and b0["metrics"]["ttft_p95_ms"] == 2.0
    assert b1["metrics"]["ttft_p50_ms"] == 2.0 and b1["metrics"]["ttft_p95_ms"] == 101.0
    assert b0["metrics"]["output_tokens"] == 18 and b1["metrics"]["output_tokens"] == 18
    assert b0["metrics"]["throughput_tok_s"] == pytest.approx(18 / 0.03, rel=1e-12)
    assert b1["metrics"]["throughput_tok_s"] == pytest.approx(18 / 0.05, rel=1e-12)
    # goodput: all 3 of step 0 meet ttft<=100; 2 of step 1 (6 has 101 ms, 5 failed)
    assert b0["goodput_rps"] == pytest.approx(3 / 0.03, rel=1e-12)
    assert b1["goodput_rps"] == pytest.approx(2 / 0.05, rel=1e-12)
    assert doc["goodput"]["met"] == 5
    assert verify_benchmark(doc) == []


def test_without_criteria_steps_have_null_goodput(tmp_path: Path) -> None:
    doc = _doc(tmp_path, goodput=False)
    assert [b["goodput_rps"] for b in doc["steps"]] == [None, None]
    assert verify_benchmark(doc) == []


def test_without_step_end_the_last_step_ends_at_the_last_request(tmp_path: Path) -> None:
    doc = _doc(tmp_path, step_end=False)
    last_end = 1_000 + 6 * 10 * MS + 104 * MS  # request 6: 101 ms to content, 3 ms more
    assert doc["steps"][1]["ended_s"] == (last_end - ANCHOR) / 1e9
    assert verify_benchmark(doc) == []


def test_a_run_without_step_lines_has_no_steps(tmp_path: Path) -> None:
    lines = [x for x in _lines() if x["type"] not in ("step", "step_end")]
    doc = build_benchmark(read_raw(_write(tmp_path / "plain.jsonl", lines)))
    assert doc.get("steps") is None
    assert all(r["step"] is None for r in doc["request_timings"])
    assert all("step" not in f for f in doc["failures"])
    assert verify_benchmark(doc) == []


# --- verify: each tampering named -------------------------------------------------------


def _problems(doc: dict[str, Any], change: Any) -> list[str]:
    bad = copy.deepcopy(doc)
    change(bad)
    return verify_benchmark(bad)


def _row(doc: dict[str, Any], index: int) -> dict[str, Any]:
    return next(r for r in doc["request_timings"] if r["request_index"] == index)


def test_verify_catches_a_row_moved_to_another_step(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: _row(d, 2).update(step=1))
    assert any(p.startswith("steps[0].requests: file has 3, recomputed 2") for p in probs)
    assert any(p.startswith("steps[1].completed: file has 3, recomputed 4") for p in probs)


def test_verify_catches_a_failure_moved_to_another_step(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["failures"][0].update(step=0))
    assert any(p.startswith("steps[0].failed: file has 0, recomputed 1") for p in probs), probs


def test_verify_catches_a_step_metrics_value(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["steps"][1]["metrics"].update(ttft_p95_ms=100.0))
    assert any(p.startswith("steps[1].metrics: file has") for p in probs), probs


def test_verify_catches_a_step_goodput_rps(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["steps"][0].update(goodput_rps=101.0))
    assert any(p.startswith("steps[0].goodput_rps: file has 101.0") for p in probs), probs


def test_verify_catches_a_step_window(doc: dict[str, Any]) -> None:
    # a longer window changes the step's rates: recomputed from the file's own window
    probs = _problems(doc, lambda d: d["steps"][1].update(ended_s=0.09))
    assert any(p.startswith("steps[1].metrics") for p in probs), probs
    probs = _problems(doc, lambda d: d["steps"][1].update(started_s=0.1))
    assert any("started_s <= ended_s" in p for p in probs), probs


def test_verify_catches_requests_not_adding_up(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["steps"][1].update(requests=5))
    assert any(p.startswith("steps[1].requests: file has 5, recomputed 4") for p in probs)

    def more(d: dict[str, Any]) -> None:
        d["requests"] += 1
    probs = _problems(doc, more)
    assert "steps: 7 requests over the steps, but requests is 8; each request is in " \
           "exactly one step" in probs, probs


@pytest.mark.parametrize("key", ["step", "started_s", "ended_s", "requests", "completed",
                                 "failed", "metrics", "goodput_rps"])
def test_verify_catches_a_missing_member(doc: dict[str, Any], key: str) -> None:
    probs = _problems(doc, lambda d: d["steps"][0].pop(key))
    assert f"steps[0].{key}: missing" in probs, probs


def test_verify_catches_a_block_with_users_and_rate_or_neither(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["steps"][0].update(rate=2.0))
    assert any(p.startswith("steps[0]: expected") and "one of users, rate" in p
               for p in probs), probs
    probs = _problems(doc, lambda d: d["steps"][1].pop("users"))
    assert any(p.startswith("steps[1]: expected") for p in probs), probs
    probs = _problems(doc, lambda d: d["steps"][1].update(extra=1))
    assert any(p.startswith("steps[1].extra: unknown field") for p in probs), probs


def test_verify_catches_steps_renumbered_or_dropped(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["steps"][1].update(step=2))
    assert any(p.startswith("steps[1].step: expected 1, file has 2") for p in probs), probs
    probs = _problems(doc, lambda d: d["steps"].pop())
    assert any(p.startswith("request_timings[].step: every row of a stepped run names one "
                            "of its 1 steps") for p in probs), probs


def test_verify_catches_rows_without_a_step_in_a_stepped_run(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: _row(d, 4).update(step=None))
    assert any(p.startswith("request_timings[].step: every row of a stepped run")
               for p in probs), probs
    probs = _problems(doc, lambda d: d["failures"][0].pop("step"))
    assert any(p.startswith("failures[].step: every failure of a stepped run")
               for p in probs), probs


def test_verify_catches_step_in_rows_of_a_file_without_steps(tmp_path: Path) -> None:
    lines = [x for x in _lines() if x["type"] not in ("step", "step_end")]
    plain = build_benchmark(read_raw(_write(tmp_path / "plain.jsonl", lines)))
    probs = _problems(plain, lambda d: _row(d, 0).update(step=0))
    assert "request_timings[].step: set, but the file has no steps" in probs, probs


# --- the raw reader refuses step lines that cannot be a run's ---------------------------


def _step(step: int, t_ns: int, users: Any = 1, rate: Any = None) -> dict[str, Any]:
    return {"type": "step", "step": step, "t_ns": t_ns, "users": users, "rate": rate}


BAD_STEP_LINES = [
    # (what, the lines after the header, the 1-based line at fault)
    ("out of order", [_step(0, 5_000), completed(0).to_json_dict(), _step(1, 4_999)], 4),
    ("numbered from 1", [_step(1, 5_000)], 2),
    ("a number skipped", [_step(0, 5_000), _step(2, 6_000)], 3),
    ("a number repeated", [_step(0, 5_000), _step(0, 6_000)], 3),
    ("a text step", [{**_step(0, 5_000), "step": "0"}], 2),
    ("after step_end", [_step(0, 5_000), {"type": "step_end", "t_ns": 9_000},
                        _step(1, 9_500)], 4),
    ("step_end twice", [_step(0, 5_000), {"type": "step_end", "t_ns": 9_000},
                        {"type": "step_end", "t_ns": 9_500}], 4),
    ("step_end before its step", [_step(0, 5_000), {"type": "step_end", "t_ns": 4_000}], 3),
    ("no t_ns", [{"type": "step", "step": 0, "users": 1, "rate": None}], 2),
    ("a float t_ns", [_step(0, 5_000.0)], 2),  # type: ignore[arg-type]
    ("negative users", [_step(0, 5_000, users=-1)], 2),
    ("a zero rate", [_step(0, 5_000, users=None, rate=0)], 2),
    ("a text rate", [_step(0, 5_000, users=None, rate="2")], 2),
]


@pytest.mark.parametrize(("what", "body", "line"), BAD_STEP_LINES,
                         ids=[b[0] for b in BAD_STEP_LINES])
def test_reader_refuses_bad_step_lines(tmp_path: Path, what: str, body: list[dict[str, Any]],
                                       line: int) -> None:
    path = _write(tmp_path / "requests.jsonl",
                  [{**HEADER, "type": "run"}, *body, RUN_END])
    for read in (read_raw, lambda p: rawpart.scan_raw(p, parallel=False)):
        with pytest.raises(RawFileError) as e:
            read(path)
        assert e.value.line == line, (what, str(e.value))
        assert f"requests.jsonl:{line}:" in str(e.value)
        assert "step" in e.value.reason


def test_reader_accepts_good_step_lines_and_a_rate_sweep(tmp_path: Path) -> None:
    lines = [{**HEADER, "type": "run"}, _step(0, 5_000, users=None, rate=2),
             completed(0).to_json_dict(), _step(1, 5_000, users=None, rate=4.5),
             {"type": "step_end", "t_ns": 5_000}, RUN_END]
    path = _write(tmp_path / "requests.jsonl", lines)
    want = ({"step": 0, "t_ns": 5_000, "users": None, "rate": 2.0},
            {"step": 1, "t_ns": 5_000, "users": None, "rate": 4.5})
    for raw in (read_raw(path), rawpart.scan_raw(path, parallel=False)):
        assert raw.steps == want and raw.steps_end_ns == 5_000
        assert type(raw.steps[0]["rate"]) is float
    doc = build_benchmark(read_raw(path))
    assert [(b["step"], b.get("rate"), "users" in b) for b in doc["steps"]] == [
        (0, 2.0, False), (1, 4.5, False)]
    assert verify_benchmark(doc) == []


def test_step_lines_in_a_later_part_read_as_in_one_pass(tmp_path: Path) -> None:
    """A large file is read in parts (child processes); a step line in the second part
    must count as it does in a one-pass read."""
    path = _write(tmp_path / "requests.jsonl", _lines())
    data = path.read_bytes()
    split = data.index(b'"step":1')  # inside step 1's line: the part starts after it...
    split = data.rindex(b"\n", 0, split) + 1  # ...so split at its start instead
    reader = RawReader(path, columns=True)
    rawpart.read_parts(reader, [split], rawpart.read_part)
    parted = reader.raw_columns()
    whole = read_raw(path)
    assert parted.steps == whole.steps and len(parted.steps) == 2
    assert parted.steps_end_ns == whole.steps_end_ns == END_NS
    assert build_benchmark(parted)["steps"] == build_benchmark(whole)["steps"]


# --- what `anvil run` says it will do, for a sweep --------------------------------------


def _sweep_plan(**kw: Any) -> str:
    from anvil_metrics.load.options import RUN_OPTIONS, run_options
    from anvil_metrics.runs.launch import plan_text

    values: dict[str, Any] = {o.dest: None for o in RUN_OPTIONS}
    values.update(scenario="scenarios/smoke.toml", step_duration=3.0, **kw)
    opts = run_options(values, host="http://127.0.0.1:9", users=kw.get("users"),
                       api_key=None)
    return plan_text(opts.scenario, opts.users)


@pytest.mark.parametrize(("kw", "loads", "wrong"), [
    # smoke.toml's concurrency is 4: not one of the sweep's steps
    ({"steps": (1, 2, 8)}, ("1", "2", "8"), " 4 users back to back"),
    ({"rates": (5.0, 20.0), "users": 8}, ("5", "20"), "12.5 requests/s"),
])
def test_the_plan_line_names_a_sweeps_steps(kw: dict[str, Any], loads: tuple[str, ...],
                                            wrong: str) -> None:
    text = _sweep_plan(**kw)
    assert wrong not in text, text
    assert all(x in text for x in loads), text
