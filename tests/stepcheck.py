"""Which step each request of a stepped run belongs to, worked out from the raw file alone,
and the check that the document put every request in that step exactly once (the sweep,
shape and web-UI step tests share it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from conftest import raw_lines

from anvil_metrics.post.rawread import read_raw


def measured(run_dir: Path) -> list[dict[str, Any]]:
    return sorted((x for x in raw_lines(run_dir) if x["type"] == "request" and not x["warmup"]),
                  key=lambda x: x["request_index"])


def expected_steps(run_dir: Path) -> dict[int, int]:
    """Request index -> the step it belongs to, worked out here from the raw file: the last
    step line at or before its start (placed on the master's clock; before the first
    step: step 0)."""
    offsets = read_raw(run_dir / "requests.jsonl").clock_offsets_ns()
    starts = [x["t_ns"] for x in raw_lines(run_dir) if x["type"] == "step"]
    out = {}
    for x in measured(run_dir):
        t = x["start_ns"] + offsets.get(x.get("worker"), 0)
        out[x["request_index"]] = max([0, *(i for i, s in enumerate(starts) if s <= t)])
    return out


def check_each_request_in_one_step(run_dir: Path, doc: dict[str, Any]) -> None:
    """Every measured raw request is exactly one row or one failure, in the step its start
    falls in; each step's counts are those requests."""
    raw = measured(run_dir)
    assert [x["request_index"] for x in raw] == list(range(len(raw)))
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    fails = {f["request_index"]: f for f in doc["failures"]}
    assert len(rows) == len(doc["request_timings"]) and len(fails) == len(doc["failures"])
    assert not rows.keys() & fails.keys()
    assert sorted(rows.keys() | fails.keys()) == list(range(len(raw))) and doc["requests"] == len(
        raw)
    want = expected_steps(run_dir)
    got = {i: (rows.get(i) or fails[i])["step"] for i in want}
    assert got == want
    per_step = Counter(want.values())
    assert [b["requests"] for b in doc["steps"]] == [per_step[i] for i in
                                                     range(len(doc["steps"]))]
    assert sum(b["requests"] for b in doc["steps"]) == doc["requests"]

