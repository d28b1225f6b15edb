"""The web UI's server gauges (`telemetry/livegauges.py`) from a `server_metrics.jsonl` being
written: its newest good samples read from the tail, and their gauges against hand-worked values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from anvil_metrics.telemetry import livegauges
from anvil_metrics.telemetry.livegauges import live_gauges, newest_samples

LAB = '{engine="0",model_name="m"}'


def vllm(running: float, waiting: float, kv: float, drafts: float, draft_tokens: float,
         accepted: float) -> dict[str, float]:
    return {f"vllm:num_requests_running{LAB}": running,
            f"vllm:num_requests_waiting{LAB}": waiting,
            f"vllm:kv_cache_usage_perc{LAB}": kv,
            f"vllm:spec_decode_num_drafts_total{LAB}": drafts,
            f"vllm:spec_decode_num_draft_tokens_total{LAB}": draft_tokens,
            f"vllm:spec_decode_num_accepted_tokens_total{LAB}": accepted}


def sample(seq: int, series: dict[str, float] | None, done_s: float = 0.0) -> dict[str, Any]:
    base = {"type": "sample", "seq": seq, "t_ns": seq, "done_ns": int(done_s * 1e9),
            "mark": None}
    if series is None:
        return base | {"ok": False, "error": "no answer within 2 s"}
    return base | {"ok": True, "series": series}


def write(path: Path, lines: list[dict[str, Any]], torn: bytes = b"") -> None:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines) + torn)


def test_newest_samples_and_live_gauges_from_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "server_metrics.jsonl"
    lines: list[dict[str, Any]] = [{"type": "scrape", "url": "u"}]
    for seq, (drafts, tokens, accepted) in enumerate([(10, 30, 20), (20, 60, 41), (30, 90, 62)]):
        lines.append(sample(seq, vllm(seq, 1, 0.5, drafts, tokens, accepted), seq + 1))
    lines.append(sample(3, None))  # a failed scrape is skipped
    write(path, lines, b'{"type": "sam')
    newest = newest_samples(path)
    assert [s["seq"] for s in newest] == [1, 2]
    g = live_gauges(newest, now_ns=5_000_000_000)
    # the newest sample's gauges; acceptance over the last two samples' counters: 21 / 30
    assert g == {"engine": "vllm", "requests_running": 2.0, "requests_waiting": 1.0,
                 "kv_cache_usage": 0.5, "acceptance_rate": 21 / 30, "age_s": 2.0}
    assert live_gauges([], 0) is None
    assert newest_samples(tmp_path / "absent.jsonl") == []


def test_only_the_tail_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "server_metrics.jsonl"
    lines = [sample(seq, vllm(seq, 0, 0.0, 0, 0, 0)) for seq in range(50)]
    write(path, lines)
    one = len(orjson.dumps(lines[0])) + 1
    monkeypatch.setattr(livegauges, "TAIL_BYTES", 3 * one + one // 2)  # 3 lines and a half
    assert [s["seq"] for s in newest_samples(path, n=5)] == [47, 48, 49]


def test_sglang_speaks_its_gauge_and_a_single_sample_has_no_counter_rate() -> None:
    sglang = {f"sglang:num_running_reqs{LAB}": 4.0, f"sglang:num_queue_reqs{LAB}": 2.0,
              'sglang:token_usage{tp_rank="0"}': 0.2, 'sglang:token_usage{tp_rank="1"}': 0.4,
              f"sglang:spec_accept_rate{LAB}": 0.75}
    g = live_gauges([sample(0, sglang, 1.0)], now_ns=0)
    assert g is not None
    # two ranks' KV-cache use is a ratio: averaged, not summed; an age is never negative
    assert (g["engine"], g["requests_running"], g["requests_waiting"], g["age_s"]) == (
        "sglang", 4.0, 2.0, 0.0)
    assert g["kv_cache_usage"] == pytest.approx(0.3) and g["acceptance_rate"] == 0.75
    lone = live_gauges([sample(0, vllm(1, 0, 0.1, 10, 30, 20))], now_ns=0)
    assert lone is not None and lone["acceptance_rate"] is None


def test_unknown_names_give_no_gauges() -> None:
    g = live_gauges([sample(0, {"tgi_queue_size": 3.0}, 1.0)], now_ns=3_000_000_000)
    assert g == {"engine": None, "requests_running": None, "requests_waiting": None,
                 "kv_cache_usage": None, "acceptance_rate": None, "age_s": 2.0}
