"""A file of jobs read in its format, told or named; request traces are not jobs, and a
replay of agent jobs is refused in one line until it is built."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentgen import agent_jobs, write_agent_jsonl, write_weka
from tracebuild import mooncake_trace

from anvil_metrics.errors import UsageError
from anvil_metrics.load.agentread import is_agent_trace, read_jobs
from anvil_metrics.load.trace import read_trace


def test_formats_told_named_and_refused(tmp_path: Path) -> None:
    jobs = agent_jobs(3, seed=1)
    native = write_agent_jsonl(tmp_path / "a.jsonl", jobs)
    weka = write_weka(tmp_path / "w.jsonl", jobs)
    mooncake_trace(tmp_path / "m.jsonl", 5)
    assert is_agent_trace(native) and is_agent_trace(weka)
    assert not is_agent_trace(tmp_path / "m.jsonl")
    assert read_jobs(native, "agent-jsonl") == jobs
    with pytest.raises(UsageError, match=r"--trace-format 'mooncake': agent jobs are one"):
        read_jobs(tmp_path / "m.jsonl")
    with pytest.raises(UsageError, match=r"holds agent jobs .* replay as a run's own --trace"):
        read_trace(weka)
    with pytest.raises(UsageError, match="no such file or folder"):
        read_jobs(tmp_path / "none.jsonl")
    write_weka(tmp_path / "twice.jsonl", [jobs[0], jobs[0]])
    with pytest.raises(UsageError, match="job id 'j0' appears twice"):
        read_jobs(tmp_path / "twice.jsonl")


def test_recorded_starts_are_read_and_order_the_jobs(tmp_path: Path) -> None:
    """agent-jsonl's `start_s` and an OTel trace's earliest span are a job's start; jobs
    that all have one come in start order (an open loop sends them so), else file order."""
    from dataclasses import replace

    from anvil_metrics.load.trace import TraceError

    jobs = agent_jobs(3, seed=2)
    timed = [replace(j, start_s=s) for j, s in zip(jobs, (5.0, 1.5, 3.25), strict=True)]
    path = write_agent_jsonl(tmp_path / "t.jsonl", timed)
    assert [j.start_s for j in read_jobs(path)] == [1.5, 3.25, 5.0]
    assert [j.id for j in read_jobs(path)] == ["j1", "j2", "j0"]
    mixed = write_agent_jsonl(tmp_path / "m.jsonl", [timed[0], jobs[1], timed[2]])
    assert [j.id for j in read_jobs(mixed)] == ["j0", "j1", "j2"]
    assert all(j.start_s is None for j in read_jobs(write_weka(tmp_path / "w.jsonl", jobs)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"start_s":5.0', '"start_s":"soon"', 1))
    with pytest.raises(TraceError, match=r"bad.jsonl:1 \(job j0\): start_s = 'soon'"):
        read_jobs(bad)
