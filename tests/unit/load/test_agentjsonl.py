"""anvil's agent JSONL: every generated job (any depth) read back equal to the model, and
each mistake one line naming the file, the line, the job and session, and the field."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from agentgen import agent_jobs, write_agent_jsonl

from anvil_metrics.load.agentjsonl import read_agent_jsonl
from anvil_metrics.load.trace import TraceError, detect_format


def test_generated_jobs_read_back_equal(tmp_path: Path) -> None:
    jobs = agent_jobs(200, seed=5, deep=True)
    path = write_agent_jsonl(tmp_path / "jobs.jsonl", jobs)
    assert detect_format(path) == "agent-jsonl"
    back = read_agent_jsonl(path)
    assert back == jobs and max(s.depth for j in back for s in j.sessions) == 2


_JOB = {"type": "job", "job": "j1", "block_size": 64}
_ROOT = {"type": "session", "session": "main"}
_TURN = {"type": "turn", "session": "main", "t": 0, "in": 100, "out": 5}


@pytest.mark.parametrize(("lines", "says"), [
    ([_JOB, _ROOT, {**_TURN, "in": 0}], r"j.jsonl:3 \(job j1, session main\): in = 0 .*"
                                        r">= 1"),
    ([_JOB, _ROOT, {**_TURN, "hash_ids": [1, 2, 3]}], r"hash_ids = '3 ids' .* at most .* "
                                                      r"\(2\)"),
    ([_JOB, _ROOT, _TURN, {**_TURN, "session": "x"}], r":4 \(job j1, session x\): session"),
    ([_JOB, _ROOT, _TURN, {"type": "session", "session": "c", "parent": "main",
                           "spawn_after": 0, "join_before": 0}, {**_TURN, "session": "c"}],
     r":4 \(job j1, session c\): join_before = 0 .* a later turn of parent main \(1 to 0\)"),
    ([{**_JOB, "hash_scope": "galactic"}], r":1 \(job j1\): hash_scope = 'galactic'"),
    ([_JOB, _ROOT, {**_TURN, "tool_wait_ms": 5}], r"tool_wait_ms = 5 .* \"tool_result\""),
    ([_ROOT], r":1: type = 'session' .* \"job\" first"),
    ([_JOB, _ROOT], r":2 \(job j1, session main\): session = 'main' .* at least one turn"),
    ([_JOB, _ROOT, _TURN, _JOB, _ROOT, _TURN], r":4: job = 'j1' .* new to the file"),
])
def test_a_bad_line_is_one_line(tmp_path: Path, lines: list, says: str) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    with pytest.raises(TraceError, match=says) as e:
        read_agent_jsonl(path)
    assert "\n" not in str(e.value) and e.value.exit_code == 2
