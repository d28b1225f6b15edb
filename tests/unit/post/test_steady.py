"""The steady-state verdict against loads whose truth is known: a closed loop that holds, one
whose TTFT climbs or steps, one that ramps for most of the run, Poisson and halved open
loops; the row's start offset against its raw stamp; and verify catching a changed
verdict.

Why synthetic rows: the verdict's definitions are about shapes of load and latency, and a
shape drawn here is known exactly, where a live run's is only known roughly.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
from rawbuild import HEADER, completed, write_raw

from anvil_metrics import catalog
from anvil_metrics.post import steady
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark


def rows_of(start: Any, ttft: Any, e2e: Any) -> RowColumns:
    """Completed rows with these start offsets and latencies (ms); the rest plain."""
    base = {name: None for name in catalog.ROW_FIELDS if name != "cached_tokens"}
    out = []
    for i, (s, t, e) in enumerate(zip(start, ttft, e2e, strict=True)):
        out.append({**base, "request_index": i, "prompt_tokens": 100, "output_tokens": 50,
                    "output_token_source": "usage", "reasoning_chunks": 0,
                    "content_chunks": 50, "e2e_ms": float(e), "ttft_ms": float(t),
                    "time_to_first_output_ms": float(t),
                    "mean_inter_token_latency_ms": float((e - t) / 49),
                    "start_offset_ms": float(s)})
    rows = RowColumns.from_rows(out)
    assert rows is not None
    return rows


def closed_loop(users: int = 8, each: int = 40, ttft_at=lambda t: 100.0, spawn_ms: float = 50,
                seed: int = 1) -> RowColumns:
    """`users` users back to back, each `each` requests of TTFT `ttft_at(start ms)` (+ noise
    of 2 ms) and 400 ms of decode; user u starts at u · spawn_ms."""
    rng = np.random.default_rng(seed)
    start, ttft, e2e = [], [], []
    for u in range(users):
        t = u * spawn_ms
        for _ in range(each):
            first = ttft_at(t) + rng.normal(0, 2)
            start.append(t)
            ttft.append(first)
            e2e.append(first + 400)
            t += first + 401
    order = np.argsort(start, kind="stable")
    return rows_of(*(np.array(c)[order] for c in (start, ttft, e2e)))


def test_a_closed_loop_that_holds_is_steady() -> None:
    block = steady.build_steady(closed_loop(), "closed")
    assert block is not None
    assert block["verdict"] == "steady", block["reason"]
    assert block["level_kind"] == "in_flight"
    assert 7.5 <= block["level"] <= 8.0  # 8 users, 1 ms between a user's requests
    assert block["share"] >= 0.85  # the ramp (350 ms) and the drain are outside it
    assert not any(m["moved"] for m in block["metrics"].values())
    assert abs(block["metrics"]["ttft_ms"]["p50"] - 100) < 1
    assert set(block) == set(steady.SteadyState.__struct_fields__)
    assert set(block["metrics"]["e2e_ms"]) == set(steady.SteadyMetric.__struct_fields__)


def test_a_climbing_ttft_is_drifting_and_named() -> None:
    """TTFT from 100 ms to ~140 ms over a ~20 s run: +20 % in the last quarter."""
    block = steady.build_steady(closed_loop(ttft_at=lambda t: 100 + 2 * t / 1000), "closed")
    assert block is not None and block["verdict"] == "drifting"
    assert block["reason"].startswith("ttft_ms: quarter ")
    ttft = block["metrics"]["ttft_ms"]
    assert ttft["moved"] and ttft["p_value"] < steady.P_LIMIT
    q = ttft["quarters_p50"]
    assert q == sorted(q)  # it climbs quarter by quarter
    assert abs(ttft["shift_pct"]) > 100 * steady.DRIFT_LIMIT
    assert not block["metrics"]["e2e_ms"]["moved"]  # +40 ms of ~520 ms: under 10 %


def test_a_level_shift_halfway_is_drifting() -> None:
    block = steady.build_steady(closed_loop(ttft_at=lambda t: 100 if t < 10_000 else 160),
                                "closed")
    assert block is not None and block["verdict"] == "drifting"
    assert block["metrics"]["ttft_ms"]["moved"]


def test_a_small_change_within_the_limit_is_steady() -> None:
    """TTFT +5 %: significant with 320 requests, but under the 10 % a verdict reports."""
    block = steady.build_steady(closed_loop(ttft_at=lambda t: 100 if t < 10_000 else 105),
                                "closed")
    assert block is not None and block["verdict"] == "steady", block["reason"]


def test_a_ramp_over_most_of_the_run_has_no_plateau() -> None:
    """Users spawned 1 s apart, each 20 requests (~10 s): the load climbs to 8 for 7 s and
    drains for as long, of a ~17 s run."""
    block = steady.build_steady(closed_loop(each=20, spawn_ms=1_000), "closed")
    assert block is not None and block["verdict"] == "no_plateau"
    assert block["share"] < steady.MIN_SHARE
    assert "of the run, less than 50%" in block["reason"]


def test_a_load_that_never_reached_its_users_has_no_plateau() -> None:
    """8 users, each 10 requests (~5 s), spawned 2.5 s apart: never more than 2 in flight.
    The rows alone hold 2 steadily; the run asked for 8."""
    rows = closed_loop(each=10, spawn_ms=2_500)
    assert steady.build_steady(rows, "closed")["verdict"] == "steady"  # type: ignore[index]
    block = steady.build_steady(rows, "closed", intended=8)
    assert block is not None and block["verdict"] == "no_plateau"
    assert "below the 8 users" in block["reason"]


def test_too_few_requests_have_no_verdict_but_no_plateau() -> None:
    block = steady.build_steady(closed_loop(users=3, each=10), "closed")
    assert block is not None and block["verdict"] == "no_plateau"
    assert block["reason"] == "too few completed requests to judge: 30 (at least 40)"
    assert block["window_s"] is None and block["metrics"] == {}


def open_loop(gaps_ms: Any) -> RowColumns:
    start = np.cumsum(gaps_ms)
    return rows_of(start, np.full(len(start), 100.0), np.full(len(start), 500.0))


def test_a_poisson_open_loop_is_steady_at_its_rate() -> None:
    rng = np.random.default_rng(3)
    block = steady.build_steady(open_loop(rng.exponential(50, 600)), "poisson")
    assert block is not None and block["verdict"] == "steady", block["reason"]
    assert block["level_kind"] == "arrival_rate_rps"
    assert abs(block["level"] - 20) < 2  # 20 req/s offered


def test_an_open_loop_whose_rate_halves_has_no_plateau() -> None:
    """400 req/s for 10 s, then 200: each bin's count is far outside the other's Poisson
    band. (With 30 requests a bin a halving is within 3 sd of noise: the verdict can only
    see a change of load the counts resolve.)"""
    rng = np.random.default_rng(4)
    gaps = np.concatenate([rng.exponential(2.5, 4000), rng.exponential(5, 2000)])
    block = steady.build_steady(open_loop(gaps), "poisson")
    assert block is not None and block["verdict"] == "no_plateau", block["reason"]
    late = steady.build_steady(open_loop(gaps), "poisson", intended=400)
    assert late is not None and late["verdict"] == "no_plateau"


def test_an_open_loop_behind_its_offered_rate_has_no_plateau() -> None:
    rng = np.random.default_rng(6)
    block = steady.build_steady(open_loop(rng.exponential(50, 600)), "poisson", intended=30)
    assert block is not None and block["verdict"] == "no_plateau"
    assert "below the 30 req/s offered" in block["reason"]


def test_in_flight_time_matches_a_plain_sum() -> None:
    rng = np.random.default_rng(5)
    start = rng.uniform(0, 1000, 300)
    end = start + rng.uniform(0, 200, 300)
    at = np.linspace(-10, 1300, 57)
    plain = np.array([np.clip(np.minimum(t, end) - start, 0, None).sum() for t in at])
    assert np.allclose(steady._in_flight_ms(start, end, at), plain, rtol=1e-12, atol=1e-6)


def test_rows_without_start_offsets_have_no_block() -> None:
    rows = closed_loop()
    old = RowColumns(rows.floats, rows.counts, rows.present, rows.usage_source,
                     frozenset({"start_offset_ms"}))
    assert steady.build_steady(old, "closed") is None


def test_the_start_offset_is_the_start_stamp_after_the_anchor_and_verify_checks_the_block(
        tmp_path: Path) -> None:
    """From a raw file: start_offset_ms = (start_ns − perf_anchor_ns) / 1e6 exactly; the
    block is what build_steady gives; a changed verdict is named by verify."""
    starts = [HEADER["perf_anchor_ns"] + 7_000_000 * i + 333 for i in range(50)]
    path = tmp_path / "requests.jsonl"
    write_raw(path, HEADER, [completed(i, start_ns=s) for i, s in enumerate(starts)])
    doc = build_benchmark(read_raw(path))
    offsets = [r["start_offset_ms"] for r in doc["request_timings"]]
    assert offsets == [(s - HEADER["perf_anchor_ns"]) / 1e6 for s in starts]
    assert doc["steady_state"]["verdict"] in steady.VERDICTS
    assert verify_benchmark(doc) == []
    bad = copy.deepcopy(doc)
    bad["steady_state"]["verdict"] = "steady" if doc["steady_state"]["verdict"] != "steady" \
        else "drifting"
    assert [p.split(":")[0] for p in verify_benchmark(bad)] == ["steady_state"]
    moved = copy.deepcopy(doc)
    moved["request_timings"][0]["start_offset_ms"] += 100.0
    assert any(p.startswith("steady_state") for p in verify_benchmark(moved))
