"""The probe block from probe.jsonl's lines: groups, delays, steps; verify's recomputation."""

from __future__ import annotations

from pathlib import Path

import orjson

from anvil_metrics.post.probeblock import (
    PROBE_FILE,
    check_probe_file,
    probe_block,
    read_probe_file,
    summary_lines,
)


def _probe(k: int, phase: str, ttft_ms: float | None, step: int | None = None,
           failure: str | None = None) -> dict:
    start = 1_000_000_000 * (k + 1)
    first = None if ttft_ms is None else start + round(ttft_ms * 1e6)
    return {"type": "probe", "probe": k, "phase": phase, "step": step, "due_ns": start,
            "start_ns": start, "first_output_ns": first, "end_ns": first, "failure": failure}


LINES = [{"type": "plan", "rate_rps": 2.0, "idle": 2, "seed": 7919},
         _probe(0, "idle", 20.0), _probe(1, "idle", 22.0),
         _probe(2, "load", 30.0, 0), _probe(3, "load", 50.0, 1), _probe(4, "load", 70.0, 1),
         _probe(5, "load", None, 1, failure="timeout")]


def test_groups_delays_and_steps_follow_their_definitions() -> None:
    b = probe_block(LINES)
    assert b is not None
    assert (b["sent"], b["answered"], b["failed"]) == (6, 5, 1)
    assert b["idle"] == {"sent": 2, "answered": 2, "ttft_p50_ms": 20.0, "ttft_p99_ms": 22.0}
    assert b["load"] == {"sent": 4, "answered": 3, "ttft_p50_ms": 50.0, "ttft_p99_ms": 70.0}
    assert (b["delay_p50_ms"], b["delay_p99_ms"]) == (30.0, 48.0)
    assert [(s["step"], s["sent"], s["answered"], s["delay_p50_ms"]) for s in b["steps"]] == [
        (0, 1, 1, 10.0), (1, 3, 2, 30.0)]
    assert "the load delayed it 30.0 ms" in summary_lines({"probe": b})[0]


def test_missing_is_null_never_zero() -> None:
    b = probe_block(LINES[:1] + [_probe(0, "load", None, 0, failure="connect")])
    assert b is not None
    assert b["idle"]["ttft_p50_ms"] is None and b["delay_p50_ms"] is None
    assert b["steps"] == [{"step": 0, "sent": 1, "answered": 0, "ttft_p50_ms": None,
                           "ttft_p99_ms": None, "delay_p50_ms": None}]
    assert probe_block([]) is None  # no plan line: no block


def test_verify_recomputes_the_block_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / PROBE_FILE
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in LINES) + b'{"type": "pro')
    lines = read_probe_file(path)  # a line cut by a killed run is left out
    assert lines == LINES
    doc = {"probe": probe_block(lines)}
    problems: list[str] = []
    check_probe_file(doc, path, problems)
    assert problems == []
    doc["probe"] = dict(doc["probe"], delay_p50_ms=1.0)
    check_probe_file(doc, path, problems)
    assert problems == ["probe.delay_p50_ms: file has 1.0, recomputed 30.0 from probe.jsonl"]
    notes: list[str] = []
    check_probe_file(doc, tmp_path / "gone.jsonl", problems, notes)
    assert len(problems) == 1 and notes and "not recomputed" in notes[0]
