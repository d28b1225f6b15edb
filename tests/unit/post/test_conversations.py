"""A conversation run after the run: the `conversation` block worked out by hand from a raw
file of turns, verify naming each tampering, and a record's conversation fields checked.

Why by hand: the block's point is its per-turn figures and its counts of cut conversations;
a row counted in the wrong turn, or a conversation called complete that lost its last turn,
still adds up. The expected values below are the records' own numbers in plain Python.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from rawbuild import HEADER, completed, failed, write_raw

from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.records import RequestRecord, record_problem

MS = 1_000_000
PLAN = {"turns": 2, "turn_tokens": 100, "system_prompt_tokens": 0, "prefix_tokens": 0,
        "think_time": 0, "history": "server", "session_header": "X-Session-ID", "seed": 0}


def turn(i: int, conversation: int, k: int, prompt: int, cached: int | None,
         history: int | None, ttft_ms: int) -> RequestRecord:
    """Request `i`: turn `k` of `conversation`, `prompt` tokens, `cached` of them cached."""
    start = 1_000 + i * 10_000_000
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 6}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return completed(i, first_output_ns=start + (ttft_ms - 1) * MS,
                     first_content_ns=start + ttft_ms * MS, end_ns=start + (ttft_ms + 3) * MS,
                     chunk_deltas_ns=((ttft_ms - 1) * MS, MS, MS, MS, MS), usage=usage,
                     planned_context_tokens=None,
                     extra={"conversation": conversation, "turn": k, "turns": 2,
                            "history_tokens": history})


def records() -> list[RequestRecord]:
    """Conversation 0: two turns (complete). Conversation 2: its first turn, then its second
    fails (cut). Conversation 4: its first turn only (cut by the run's end)."""
    return [turn(0, 0, 1, 200, 16, None, 10), turn(1, 0, 2, 400, 192, 200, 30),
            turn(2, 2, 1, 210, None, None, 12),
            failed(3, extra={"conversation": 2, "turn": 2, "turns": 2, "history_tokens": 210}),
            turn(4, 4, 1, 190, 0, None, 14)]


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "requests.jsonl"
    write_raw(path, {**HEADER, "params": {"concurrency": 2, "conversation": PLAN}}, records(),
              {"finished_at": "2026-08-01T16:00:45Z"})
    return build_benchmark(read_raw(path))


def test_the_block_by_hand(doc: dict[str, Any]) -> None:
    block = doc["conversation"]
    assert block["plan"] == PLAN
    assert (block["conversations"], block["completed"], block["cut"]) == (3, 1, 2)
    # history: a first turn's is 0; only turn 2 of conversation 0 has one (200 of 400)
    assert block["expected_reuse"] == 200 / (200 + 400 + 210 + 190)
    # cached: reported by the rows of requests 0, 1 and 4 (request 2's usage has none)
    assert block["reported_reuse"] == (16 + 192 + 0) / (200 + 400 + 190)
    t1, t2 = block["turns"]
    assert (t1["turn"], t1["requests"], t2["turn"], t2["requests"]) == (1, 3, 2, 1)
    assert (t1["ttft_p50_ms"], t1["ttft_p95_ms"]) == (12.0, 14.0)
    assert (t2["ttft_p50_ms"], t2["e2e_p95_ms"]) == (30.0, 33.0)
    assert t1["prompt_tokens_mean"] == 200.0 and t1["history_tokens_mean"] is None
    assert t1["cached_tokens_mean"] == 8.0 and t1["expected_reuse"] == 0.0
    assert (t2["history_tokens_mean"], t2["reported_reuse"]) == (200.0, 192 / 400)
    rows = {r["request_index"]: r for r in doc["request_timings"]}
    assert (rows[1]["conversation_id"], rows[1]["turn"], rows[1]["history_tokens"]) == (0, 2, 200)
    assert verify_benchmark(doc) == []


def test_a_run_without_conversations_has_null_row_fields_and_no_block(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    write_raw(path, HEADER, [completed(0)], {"finished_at": "2026-08-01T16:00:45Z"})
    doc = build_benchmark(read_raw(path))
    assert "conversation" not in doc
    row = doc["request_timings"][0]
    assert (row["conversation_id"], row["turn"], row["history_tokens"]) == (None, None, None)


@pytest.mark.parametrize("where,change,named", [
    ("turns", lambda b: b["turns"][1].update(ttft_p50_ms=31.0),
     "conversation.turns[1].ttft_p50_ms"),
    ("completed", lambda b: b.update(completed=2), "conversation.completed"),
    ("reuse", lambda b: b.update(reported_reuse=0.5), "conversation.reported_reuse"),
    ("extra turn", lambda b: b["turns"].append(dict(b["turns"][0], turn=3)),
     "conversation.turns: expected 2 turns"),
    ("plan", lambda b: b["plan"].update(turns=0), "conversation.plan"),
])  # fmt: skip
def test_verify_names_each_tampering(doc: dict[str, Any], where: str, change: Any,
                                     named: str) -> None:
    bad = copy.deepcopy(doc)
    change(bad["conversation"])
    problems = verify_benchmark(bad)
    assert any(p.startswith(named) for p in problems), (where, problems)


def test_rows_naming_a_conversation_need_the_block(doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    del bad["conversation"]
    assert any("conversation_id: set, but the file has no conversation block" in p
               for p in verify_benchmark(bad))


@pytest.mark.parametrize("extra,named", [
    ({"conversation": -1, "turn": 1}, "extra.conversation"),
    ({"conversation": 3, "turn": 0}, "extra.turn"),
    ({"conversation": 3, "turn": 2, "history_tokens": "12"}, "extra.history_tokens"),
])  # fmt: skip
def test_a_record_with_a_bad_turn_is_refused(extra: dict[str, Any], named: str) -> None:
    d = completed(0, extra=extra).to_json_dict()
    problem = record_problem(d)
    assert problem is not None and problem.startswith(named), problem
