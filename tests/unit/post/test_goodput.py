"""Goodput: `meets` per row, the block and rate worked out by hand, and verify naming each
tampering of a document anvil built (the criteria's text: `load/test_criteria.py`).

Why by hand: goodput is "how many requests the user would accept, per second". If build and
verify shared a mistake (a null that meets, `<` taken as `<=`, the fraction over completed
rather than issued requests), a round trip alone would not see it; so the expected figures
below are counted from the rows' own numbers in plain Python.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.load.criteria import Criterion, parse_criteria
from anvil_metrics.post import goodput
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.goodput import meets
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark

# --- meets and goodput on rows ----------------------------------------------------------


def _template_row(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "template.jsonl"
    write_raw(path, HEADER, [completed(0)], run_end={"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))["request_timings"][0]


def _rows(tmp_path: Path, values: list[dict[str, Any]]) -> RowColumns:
    base = _template_row(tmp_path)
    rows = [{**base, "request_index": i, **v} for i, v in enumerate(values)]
    cols = RowColumns.from_rows(rows)
    assert cols is not None
    return cols


# ttft_ms, e2e_ms per row; None: no content (a null TTFT)
TTFT = [10.0, 50.0, 100.0, 150.0, None, 100.5]
E2E = [200.0, 400.0, 250.0, 300.0, 90.0, 260.0]


@pytest.fixture
def rows(tmp_path: Path) -> RowColumns:
    return _rows(tmp_path, [{"ttft_ms": t, "e2e_ms": e} for t, e in zip(TTFT, E2E,
                                                                          strict=True)])


@pytest.mark.parametrize(("op", "limit"), [("<=", 100.0), ("<", 100.0), (">=", 100.0),
                                           (">", 100.0), ("<=", 100.5), (">", 9.0)])
def test_meets_each_op_and_null_never_meets(rows: RowColumns, op: str, limit: float) -> None:
    compare = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
               ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}[op]
    want = [t is not None and compare(t, limit) for t in TTFT]
    got = meets(rows, [Criterion("ttft_ms", op, limit)])
    assert got.dtype == np.bool_
    assert got.tolist() == want
    assert got[4] == False  # noqa: E712 - the null TTFT meets no bound


def test_meets_needs_every_criterion(rows: RowColumns) -> None:
    both = [Criterion("ttft_ms", "<=", 100.0), Criterion("e2e_ms", "<", 300.0)]
    # ttft ok: rows 0, 1, 2; of those, e2e < 300: rows 0 and 2
    assert meets(rows, both).tolist() == [True, False, True, False, False, False]
    assert meets(rows, []).tolist() == [True] * 6  # no criterion: nothing to fail


def test_goodput_block_and_rate_by_hand(rows: RowColumns) -> None:
    crit = parse_criteria("ttft_ms<=100")
    block, rps = goodput.goodput(rows, 8, 2000.0, crit)  # 6 rows + 2 failed requests, 2 s
    assert block == {"criteria": ["ttft_ms<=100"], "met": 3, "fraction": 3 / 8}
    assert rps == 1.5
    block, rps = goodput.goodput(rows, 8, 500.0, parse_criteria("ttft_ms<100,e2e_ms>=250"))
    # ttft < 100: rows 0 (e2e 200) and 1 (e2e 400); e2e >= 250 of those: row 1
    assert block == {"criteria": ["ttft_ms<100", "e2e_ms>=250"], "met": 1, "fraction": 1 / 8}
    assert rps == 2.0
    block, rps = goodput.goodput(rows, 8, 500.0, parse_criteria("ttft_ms>1000"))
    assert (block["met"], block["fraction"], rps) == (0, 0.0, 0.0)
    block, rps = goodput.goodput(rows, 0, None, crit)
    assert block["fraction"] is None and rps is None
    assert goodput.rate(3, 0.0) is None and goodput.rate(3, -1.0) is None


# --- a document anvil built, and verify -------------------------------------------------


def _slow(i: int, ttft_ms: int) -> Any:
    """A completed request whose content starts `ttft_ms` after it did."""
    start = 1_000 + i * 10_000_000
    first_out = start + (ttft_ms - 1) * 1_000_000
    return completed(i, first_output_ns=first_out, first_content_ns=first_out + 1_000_000,
                     end_ns=first_out + 4_000_000,
                     chunk_deltas_ns=((ttft_ms - 1) * 1_000_000, *[1_000_000] * 4))


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    # requests 0, 1, 4: 2 ms TTFT; 2: 150 ms; 3: a failure; 5: exactly 100 ms
    recs = [completed(0), completed(1), _slow(2, 150), failed(3), completed(4), _slow(5, 100)]
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, "params": {"concurrency": 1, "goodput": ["ttft_ms<=100"]}},
              recs, run_end={"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def test_built_document_counts_goodput_by_hand(doc: dict[str, Any]) -> None:
    ttft = {r["request_index"]: r["ttft_ms"] for r in doc["request_timings"]}
    assert ttft == {0: 2.0, 1: 2.0, 2: 150.0, 4: 2.0, 5: 100.0}
    assert doc["requests"] == 6 and doc["failed"] == 1
    assert doc["goodput"] == {"criteria": ["ttft_ms<=100"], "met": 4, "fraction": 4 / 6}
    assert doc["metrics"]["goodput_rps"] == pytest.approx(4 / (doc["wall_clock_ms"] / 1000),
                                                          rel=1e-12)
    assert verify_benchmark(doc) == []


def _problems(doc: dict[str, Any], change: Any) -> list[str]:
    bad = copy.deepcopy(doc)
    change(bad)
    return verify_benchmark(bad)


def test_verify_catches_a_tampered_met(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["goodput"].update(met=5))
    assert any(p.startswith("goodput.met: file has 5, recomputed 4") for p in probs), probs


def test_verify_catches_a_tampered_fraction(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["goodput"].update(fraction=0.8))
    assert any(p.startswith("goodput.fraction: file has 0.8") for p in probs), probs
    assert not any(p.startswith("goodput.met") for p in probs)


def test_verify_catches_a_tampered_goodput_rps(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["metrics"].update(
        goodput_rps=d["metrics"]["goodput_rps"] * (1 + 1e-9)))
    assert any(p.startswith("metrics.goodput_rps: file has") for p in probs), probs
    assert not any(p.startswith("goodput.") for p in probs)


def test_verify_catches_goodput_rps_without_criteria(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d.pop("goodput"))
    assert "metrics.goodput_rps: set, but the file has no goodput criteria" in probs


def test_verify_catches_criteria_that_do_not_parse(doc: dict[str, Any]) -> None:
    probs = _problems(doc, lambda d: d["goodput"].update(criteria=["ttft_ms=<100"]))
    assert any(p.startswith("goodput.criteria 'ttft_ms=<100' is not allowed")
               for p in probs), probs
    probs = _problems(doc, lambda d: d["goodput"].update(criteria=["warp_ms<=100"]))
    assert any("'warp_ms' is not a numeric field" in p for p in probs), probs
    probs = _problems(doc, lambda d: d["goodput"].update(criteria="ttft_ms<=100"))
    assert any(p.startswith('goodput.criteria: expected a list, file has "ttft_ms<=100"')
               for p in probs), probs


def test_verify_catches_other_criteria_than_counted(doc: dict[str, Any]) -> None:
    # criteria that parse, but are not those the counts were made with
    probs = _problems(doc, lambda d: d["goodput"].update(criteria=["ttft_ms<100"]))
    assert any(p.startswith("goodput.met: file has 4, recomputed 3") for p in probs), probs
