"""Trace files: each format read and checked line by line (one line naming the file, the
line and the field for anything wrong), and the trace's own figures — its expected prefix
reuse against the generator's account, its sizes' nearest-rank percentiles, its rates."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from tracebuild import mooncake_trace

from anvil_metrics.errors import UsageError
from anvil_metrics.load.trace import (
    TraceError,
    detect_format,
    expected_reuse,
    read_trace,
    trace_stats,
)


def test_a_generated_mooncake_trace_reuses_what_its_generator_says(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    cached, total = mooncake_trace(path, 1000, seed=4)
    reqs = read_trace(path)
    assert detect_format(path) == "mooncake" and len(reqs) == 1000
    assert expected_reuse(reqs) == (cached, total)
    assert 0.2 < cached / total < 0.9  # the generator shares a real part of the input
    stats = trace_stats(reqs)
    assert stats.expected_hit_ratio == cached / total
    sizes = np.array([r.input_tokens for r in reqs])
    exact = {f"p{p}": int(np.percentile(sizes, p, method="inverted_cdf")) for p in (50, 90, 99)}
    assert stats.input_tokens == {**exact, "max": int(sizes.max())}
    t = np.array([r.timestamp_ms for r in reqs]) / 1000
    assert stats.duration_s == t[-1] - t[0]
    assert stats.mean_rate_rps == pytest.approx(999 / (t[-1] - t[0]))
    assert stats.peak_rate_rps == max(int(((t >= x) & (t < x + 1)).sum()) for x in t)
    assert read_trace(path, limit=10) == reqs[:10]


def test_burstgpt_rows_in_seconds_filtered_by_model(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n"
                    "45,GPT-4,1087,0,1087,Conversation log\n"
                    "46.5,ChatGPT,1127,295,1422,Conversation log\n", encoding="utf-8")
    assert detect_format(path) == "burstgpt"
    reqs = read_trace(path, model="ChatGPT")
    assert [(r.timestamp_ms, r.input_tokens, r.output_tokens) for r in reqs] == [
        (5000.0, 472, 18), (46500.0, 1127, 295)]
    assert [r.line for r in read_trace(path)] == [2, 4]  # a failed request (0 out) is no load
    with pytest.raises(UsageError, match="no request to replay for model 'Claude'"):
        read_trace(path, model="Claude")


def test_plain_jsonl_sessions_and_shared_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_tokens": 1000, "output_tokens": 10, "session_id": "a",
             "prefix_id": "p", "prefix_tokens": 600},
            {"timestamp": 10, "input_tokens": 800, "output_tokens": 10, "session_id": 7,
             "prefix_id": "p", "prefix_tokens": 600},
            {"timestamp": 10, "input_tokens": 50, "output_tokens": 5}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    reqs = read_trace(path)
    assert detect_format(path) == "jsonl"
    assert [r.session_id for r in reqs] == ["a", "7", None]
    assert expected_reuse(reqs) == (600, 1850)
    assert trace_stats(reqs).sessions == 2


def _lines(path: Path, *objs: object) -> Path:
    path.write_bytes(b"".join((o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n"
                              for o in objs))
    return path


GOOD = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
BAD = [
    ((GOOD, b"{not json"), None, ":2: line = '{not json'", "one JSON object a line"),
    ((GOOD, {**GOOD, "input_length": "600"}), None, ":2: input_length = '600'",
     "a whole number >= 1"),
    ((GOOD, {**GOOD, "hash_ids": [1]}), None, ":2: hash_ids = '1 ids'",
     "one id per 512-token block of input_length 600 (2 ids"),
    ((GOOD, {**GOOD, "hash_ids": [1, True]}), None, ":2: hash_ids = [1, True]",
     "a list of whole numbers"),
    ((GOOD, {**GOOD, "timestamp": -1}), None, ":2: timestamp = -1", "a number >= 0"),
    (({**GOOD, "timestamp": 9}, GOOD), None, ":2: timestamp = 0.0", "a time at or after"),
    ((GOOD, {**GOOD, "output_length": 0}), None, ":2: output_length = 0", ">= 1"),
    # a field missing is named as missing (None), in the line's order: output_length first
    ((GOOD, {k: v for k, v in GOOD.items() if k not in ("hash_ids", "output_length")}),
     None, ":2: output_length = None", ">= 1"),
    ((GOOD, {k: v for k, v in GOOD.items() if k != "hash_ids"}), None,
     ":2: hash_ids = None", "a list of whole numbers"),
    (({"timestamp": 0, "input_tokens": 9, "output_tokens": 1, "prefix_id": "x"},), "jsonl",
     ":1: prefix_tokens = None", "a whole number >= 1"),
    (({"timestamp": 0, "input_tokens": 9, "output_tokens": 1, "prefix_id": "x",
       "prefix_tokens": 9},), "jsonl", ":1: prefix_tokens = 9", "fewer than input_tokens"),
    (({"timestamp": 0, "input_tokens": 9, "output_tokens": 1, "session_id": [1]},), "jsonl",
     ":1: session_id = [1]", "a string or a whole number"),
]


@pytest.mark.parametrize("lines,fmt,where,allowed", BAD)
def test_a_bad_line_is_one_line_naming_it(tmp_path: Path, lines: tuple, fmt: str | None,
                                          where: str, allowed: str) -> None:
    path = _lines(tmp_path / "t.jsonl", *lines)
    with pytest.raises(TraceError) as e:
        read_trace(path, fmt)
    text = str(e.value)
    assert text.startswith(f"{path}{where} is not allowed; use "), text
    assert allowed in text and "\n" not in text and e.value.exit_code == 2


def test_bad_burstgpt_rows_and_unknown_files(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n1,m,ten,5\n")
    with pytest.raises(TraceError, match=r"b.csv:2: Request tokens = 'ten' .* a number"):
        read_trace(path, "burstgpt")
    path.write_text("Time,Model\n1,m\n")
    with pytest.raises(UsageError, match="cannot tell the trace's format"):
        read_trace(path)
    with pytest.raises(TraceError, match=r"b.csv:1: header = 'Time,Model' .* \(missing: "
                                         r"Timestamp, Request tokens, Response tokens"):
        read_trace(path, "burstgpt")
    with pytest.raises(UsageError, match="--trace-format 'csv': use one of"):
        read_trace(path, "csv")
    with pytest.raises(UsageError, match="no such file"):
        read_trace(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UsageError, match="the trace is empty"):
        read_trace(tmp_path / "empty.jsonl")


def test_a_partial_last_block_is_never_counted_cached(tmp_path: Path) -> None:
    same = {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}
    reqs = read_trace(_lines(tmp_path / "t.jsonl", same, same))
    assert expected_reuse(reqs) == (512, 2000)  # block 2 holds 488 tokens: not cached
    whole = {**same, "input_length": 1024}
    reqs = read_trace(_lines(tmp_path / "w.jsonl", whole, whole))
    assert expected_reuse(reqs) == (1023, 2048)  # at least one token is computed
    assert math.isclose(trace_stats(reqs).expected_hit_ratio, 1023 / 2048)


def test_a_time_window_replays_the_requests_inside_it(tmp_path: Path) -> None:
    """`--trace-window START:END`: the requests at [START, END) seconds after the trace's
    first, then `--trace-limit` of those; a window with none is one clear line."""
    path = tmp_path / "mooncake.jsonl"
    mooncake_trace(path, 400, seed=2)
    reqs = read_trace(path)
    at_s = [(r.timestamp_ms - reqs[0].timestamp_ms) / 1000 for r in reqs]
    mid = at_s[len(at_s) // 2]
    inside = [r for r, t in zip(reqs, at_s, strict=True) if 1.0 <= t < mid]
    assert 0 < len(inside) < len(reqs)
    assert read_trace(path, window_s=(1.0, mid)) == inside
    assert read_trace(path, window_s=(mid, None)) == [
        r for r, t in zip(reqs, at_s, strict=True) if t >= mid]
    assert read_trace(path, window_s=(1.0, mid), limit=3) == inside[:3]
    with pytest.raises(UsageError, match=r"holds no request to replay in --trace-window 9e\+06"):
        read_trace(path, window_s=(9e6, None))


def test_a_sessions_requests_share_the_one_before_in_the_expected_reuse() -> None:
    from anvil_metrics.load.trace import TraceRequest

    reqs = [TraceRequest(1, 0, 100, 1, session_id="a"), TraceRequest(2, 1, 300, 1,
                                                                    session_id="a"),
            TraceRequest(3, 2, 200, 1, session_id="a"), TraceRequest(4, 3, 50, 1)]
    # turn 2 shares turn 1's 100, turn 3 the first 199 of turn 2's 300 (at most input - 1)
    assert expected_reuse(reqs) == (100 + 199, 650)
