"""`load/agentparams`: the raw header's `params.agent` is what the jobs block is rebuilt
from: each trace job's requests and tokens from `agentstats`, and with a sampled start each
run job's start turn (the same pure draw the replay makes) and its figures."""

from __future__ import annotations

from pathlib import Path

from agentgen import agent_jobs, write_agent_jsonl

from anvil_metrics.load.agentparams import agent_params, starts_budget
from anvil_metrics.load.agentread import read_jobs
from anvil_metrics.load.agentstart import start_turn
from anvil_metrics.load.agentstats import job_figures, start_figures
from anvil_metrics.load.scenario import scenario_from_dict


def _scenario(path: Path, **trace: object):
    return scenario_from_dict({"measurement_protocol": "p", "concurrency": 4,
                               "trace": {"path": str(path), **trace}})


def test_a_first_start_records_each_trace_jobs_requests_and_tokens(tmp_path: Path) -> None:
    path = write_agent_jsonl(tmp_path / "jobs.jsonl", agent_jobs(6, seed=3))
    jobs = read_jobs(str(path), None)
    sc = _scenario(path)
    assert starts_budget(sc, jobs) == 6  # each job of the trace once
    got = agent_params(sc, jobs)
    assert got["job_ids"] == [j.id for j in jobs]
    assert got["job_requests"] == [j.requests for j in jobs]
    assert got["job_tokens"] == [[f.input_tokens, f.cached_tokens] for f in job_figures(jobs)]
    assert (got["start_at"], got["file"]) == ("first", "jobs.jsonl")
    assert "starts" not in got


def test_a_sampled_start_records_each_run_jobs_turn_and_figures(tmp_path: Path) -> None:
    path = write_agent_jsonl(tmp_path / "jobs.jsonl", agent_jobs(4, seed=5))
    jobs = read_jobs(str(path), None)
    sc = _scenario(path, jobs=9, start_at="sampled", start_seed=7)
    got = agent_params(sc, jobs)
    assert got["jobs"] == starts_budget(sc, jobs) == 9  # past the trace: round again
    assert len(got["starts"]) == 9
    for n, (k, *figures) in enumerate(got["starts"]):
        job = jobs[n % 4]
        assert k == start_turn(7, n, len(job.root.turns))
        assert figures == list(start_figures(job, k))
