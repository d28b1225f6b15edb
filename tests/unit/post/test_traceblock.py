"""traceblock: a replay's `trace` block from the header and the rows, verify naming a
tampered `reported_reuse`, and the CLI's line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rawbuild import HEADER, completed, write_raw

from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.traceblock import Trace, summary_lines
from anvil_metrics.post.verify import verify_benchmark

PARAMS = {"file": "t.jsonl", "format": "mooncake", "speed": 2.0, "limit": None,
          "block_tokens": 512, "model": None, "requests": 3, "expected_reuse": 0.4}


def _doc(tmp_path: Path) -> dict[str, Any]:
    recs = [completed(0, usage={"prompt_tokens": 1000, "completion_tokens": 6}),
            completed(1, usage={"prompt_tokens": 1000, "completion_tokens": 6,
                                "prompt_tokens_details": {"cached_tokens": 512}}),
            completed(2, usage={"prompt_tokens": 600, "completion_tokens": 6,
                                "prompt_tokens_details": {"cached_tokens": 0}})]
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, "params": {"concurrency": 1, "trace": PARAMS}}, recs,
              {"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def test_the_block_is_the_plan_and_the_rows_reuse(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    block = doc["trace"]
    assert tuple(block) == Trace.__struct_fields__
    assert {k: block[k] for k in PARAMS} == PARAMS
    # only the rows reporting cached_tokens: 512 of 1000 + 600
    assert block["reported_reuse"] == 512 / 1600
    assert verify_benchmark(doc) == []
    assert summary_lines(doc) == ["trace: t.jsonl (mooncake), 3 requests at 2.0x; prefix "
                                  "reuse the trace allows 0.400, reported by the server 0.320"]


def test_verify_names_a_tampered_block(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    bad = copy.deepcopy(doc)
    bad["trace"]["reported_reuse"] = 0.5
    assert any(p.startswith("trace.reported_reuse: file has 0.5") for p in verify_benchmark(bad))
    bad = copy.deepcopy(doc)
    del bad["trace"]["speed"]
    assert "trace.speed: missing" in verify_benchmark(bad)
