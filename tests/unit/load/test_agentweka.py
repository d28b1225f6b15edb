"""AIPerf's Weka format: generated jobs read back as the same model (one trace per JSONL
line, per `.json` file, a folder of them); spawn, join and tool rules on a trace written by
hand; every refusal one line naming file, line, trace (and agent) and field."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from agentgen import agent_jobs, weka_trace, write_weka

from anvil_metrics.load.agentread import read_jobs
from anvil_metrics.load.agentweka import read_weka
from anvil_metrics.load.trace import TraceError, detect_format


def test_generated_jobs_read_back_equal_in_each_layout(tmp_path: Path) -> None:
    jobs = agent_jobs(200, seed=7)
    local = [replace(j, hash_scope="local") for j in jobs]  # the format's only scope
    path = write_weka(tmp_path / "corpus.jsonl", jobs)
    assert detect_format(path) == "weka" and read_weka(path) == local
    folder = tmp_path / "traces"
    folder.mkdir()
    for j in jobs[:5]:  # AIPerf's loader: one trace per .json file, written over lines
        (folder / f"{j.id}.json").write_bytes(orjson.dumps(weka_trace(j),
                                                           option=orjson.OPT_INDENT_2))
    assert detect_format(folder) == "weka" and read_jobs(folder) == local[:5]
    assert read_jobs(folder / "j3.json") == [local[3]]


def _req(t: float, **kw: object) -> dict:
    return {"t": t, "type": "n", "model": "m", "in": 100, "out": 5, **kw}


def _trace(*reqs: dict, **kw: object) -> dict:
    return {"id": "t1", "models": ["m"], "block_size": 64, "hash_id_scope": "local",
            "requests": list(reqs), **kw}


def _sub(t: float, agent: str, duration_ms: float | None, *reqs: dict) -> dict:
    return {"t": t, "type": "subagent", "agent_id": agent, "subagent_type": "Explore",
            "duration_ms": duration_ms, "status": "completed", "requests": list(reqs),
            "models": ["m"]}


def test_spawn_join_background_and_tool_rules(tmp_path: Path) -> None:
    trace = _trace(_req(0, stop="tool_use"),
                   _req(2.0, input_types=["tool_result"], think_time=1.5),
                   _sub(2.5, "a", 1000, _req(0.1), _req(2.8)),  # 0.1: relative to 2.5
                   _sub(2.6, "b", None, _req(2.6)),
                   _req(3.0, think_time=0.25), _req(3.6))
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps(trace) + b"\n")
    (job,) = read_weka(path)
    root, a, b = job.sessions
    assert [t.t_s for t in a.turns] == [2.6, 2.8] and a.depth == 1
    assert (a.spawn_after_turn, a.join_before_turn) == (1, 3)  # 3.0 < 2.5 + 1.0 <= 3.6
    assert (b.spawn_after_turn, b.join_before_turn) == (1, None)  # no duration: background
    assert root.turns[1].tool_wait_ms == 1500.0 and root.turns[1].idle_ms == 0.0
    assert root.turns[2].tool_wait_ms == 0.0 and root.turns[2].idle_ms == 250.0
    assert root.turns[0].idle_ms is None and root.turns[0].streamed is False


@pytest.mark.parametrize(("trace", "says"), [
    (_trace(_req(0), hash_id_scope="global"),
     r"t.jsonl:1 \(trace t1\): hash_id_scope = 'global' .* \"local\""),
    (_trace(_req(0, **{"in": -3})), r"\(trace t1\): requests\[0\].in = -3"),
    (_trace(_req(0), _sub(1, "a1", 5, _req(1), _sub(1, "a2", 5, _req(1)))),
     r"\(trace t1, agent a1\): requests\[1\].requests\[1\].type = 'subagent' .* any depth"),
    (_trace(_req(0, hash_ids=[1, 2, 3])), r"requests\[0\].hash_ids = '3 ids'"),
    (_trace(_req(0, input_types=["image"])), r"requests\[0\].input_types"),
    (_trace(_sub(0, "a", 5, _req(0))), r"requests = '1 sub-agent markers'"),
    (_trace(_req(0, think_time=-1)), r"requests\[0\].think_time = -1"),
])
def test_a_bad_trace_is_one_line(tmp_path: Path, trace: dict, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps(trace) + b"\n")
    with pytest.raises(TraceError, match=says) as e:
        read_weka(path)
    assert "\n" not in str(e.value)
