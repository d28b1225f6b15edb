"""OTel GenAI span graphs: a hand-written trace of a root agent, a joined and a nested
background sub-agent and tool spans, read into the model by the span tree; refusals one
line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from anvil_metrics.load.agentotel import BLOCK_TOKENS, read_otel
from anvil_metrics.load.trace import TraceError, detect_format


def _span(sid: str, parent: str | None, op: str, start_ms: int, end_ms: int,
          **attrs: object) -> dict:
    def at(ms: int) -> str:
        return f"2024-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"

    return {"span_id": sid, "parent_span_id": parent, "trace_id": "T", "name": op,
            "start_time": at(start_ms), "end_time": at(end_ms),
            "attributes": {"gen_ai.operation.name": op, **attrs}}


def _chat(sid: str, parent: str, start_ms: int, end_ms: int, size: int,
          reason: str = "stop") -> dict:
    return _span(sid, parent, "chat", start_ms, end_ms, **{
        "gen_ai.usage.input_tokens": size, "gen_ai.usage.output_tokens": 7,
        "gen_ai.request.model": "m", "gen_ai.response.finish_reasons": [reason]})


SPANS = [_span("A", None, "invoke_agent", 0, 9000),
         _chat("c1", "A", 0, 500, 200, "tool_calls"),
         _span("x1", "A", "execute_tool", 600, 1400),
         _chat("c2", "A", 1500, 2000, 300),
         _span("B", "A", "invoke_agent", 2100, 4000),
         _chat("b1", "B", 2100, 2600, 100),
         _span("C", "B", "invoke_agent", 2700, 8000),
         _chat("d1", "C", 2700, 3000, 100),
         _chat("c3", "A", 4200, 4600, 400)]


def test_the_span_tree_is_the_job(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"spans": SPANS}, option=orjson.OPT_INDENT_2))
    assert detect_format(path) == "otel"
    (job,) = read_otel(path)
    root, b, c = job.sessions
    assert job.id == "T" and [s.depth for s in job.sessions] == [0, 1, 2]
    assert job.start_s == 1704067200.0  # its earliest span's start: 2024-01-01T00:00:00Z
    assert [t.t_s for t in root.turns] == [0.0, 1.5, 4.2]
    assert root.turns[0].stop == "tool_use" and root.turns[1].input_type == "tool_result"
    assert root.turns[1].tool_wait_ms == pytest.approx(800) and root.turns[1].idle_ms == (
        pytest.approx(200))
    assert (b.parent_id, b.spawn_after_turn, b.join_before_turn) == ("T", 1, 2)
    assert (c.parent_id, c.spawn_after_turn, c.join_before_turn) == ("B", 0, None)
    assert b.duration_ms == pytest.approx(1900)
    # history blocks: turn 2 keeps turn 1's whole blocks (200 // 64 = 3), then new ids
    t1, t2 = root.turns[:2]
    assert t2.hash_ids[:200 // BLOCK_TOKENS] == t1.hash_ids[:3]
    assert len(t2.hash_ids) == -(-300 // BLOCK_TOKENS) and len(set(t2.hash_ids[3:])) == 2


@pytest.mark.parametrize(("spans", "says"), [
    ([{**SPANS[1], "start_time": "noon"}], r"spans\[0\].start_time = 'noon'"),
    ([SPANS[0], SPANS[1], {**SPANS[1]}], r"spans\[2\].span_id = 'c1' .* new to the trace"),
    ([_chat("c1", "A", 0, 10, 0)],
     r"spans\[0\].attributes.gen_ai.usage.input_tokens = 0"),
    ([SPANS[0], _span("x", "A", "execute_tool", 0, 1)], r"at least one chat span"),
    ([_span("A", None, "invoke_agent", 0, 9), _span("B", None, "invoke_agent", 0, 9),
      _chat("a", "A", 0, 1, 5), _chat("b", "B", 0, 1, 5)], r"2 outermost invoke_agent"),
])
def test_a_bad_trace_is_one_line(tmp_path: Path, spans: list, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps({"spans": spans}) + b"\n")
    with pytest.raises(TraceError, match=says) as e:
        read_otel(path)
    assert "\n" not in str(e.value)
