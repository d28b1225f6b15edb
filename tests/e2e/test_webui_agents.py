"""Agent jobs from Locust's web UI: the start form has every agent option (they come from
the scenario's flag table, so a flag added there is in the form too), a run started by
POST /swarm with them replays agent jobs with exactly those values (the raw header's
`params.agent`, the rows' jobs), and the live page's job figures at its end agree with
the jobs' truth from the raw stamps (each job's first start to its last answer's end) and
are the `jobs` block's of benchmark.json, bit for bit.
And a run whose duration ends mid-job, by one process and by `--processes 2`: the live
figures count a job stopped between two turns (all it sent answered) as cut, as the raw
file has it, and every ticket handed out is one row.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import orjson
import pytest
from agentgen import agent_jobs, write_agent_jsonl
from conftest import anvil
from locust_ui import locust_ui
from simfork import start_simulator

from anvil_metrics.live.sketch import SKETCH_REL_ERROR
from anvil_metrics.load.options import LOCUST_OPTIONS
from anvil_metrics.post import stats

pytestmark = pytest.mark.e2e

AGENT_FIELDS = ("trace", "trace_format", "jobs", "tool_speed", "max_tool_wait", "max_idle")


def _job_latencies_ms(raw: list[dict]) -> list[float]:
    """Each job's first request's start to its last answer's end (every job completed)."""
    spans: dict[int, list[int]] = {}
    for r in raw:
        first, last = spans.setdefault(r["extra"]["job"], [r["start_ns"], r["end_ns"]])
        spans[r["extra"]["job"]] = [min(first, r["start_ns"]), max(last, r["end_ns"])]
    return [(b - a) / 1e6 for a, b in spans.values()]


def test_agent_options_in_the_form_and_a_form_run_replays_jobs(tmp_path: Path) -> None:
    trace = write_agent_jsonl(tmp_path / "jobs.jsonl", agent_jobs(4, seed=5))
    with start_simulator(["--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--max-context", "32768"]) as sim, locust_ui(
            sim.url, tmp_path, "--scenario", "scenarios/smoke.toml", "--results-dir",
            str(tmp_path / "res"), "--no-server-metrics") as ui:
        page = ui.get("/")
        m = re.search(rb"templateArgs = (\{.*?\});?\s*</script>", page, re.S)
        assert m, "Locust's page has no templateArgs"
        extra = json.loads(m.group(1))["extra_options"]
        for o in LOCUST_OPTIONS:  # every flag of the table, agent ones (and later ones) too
            assert (o.dest in extra) == o.web_ui, o.flag
        assert set(AGENT_FIELDS) <= set(extra)
        # the form's "Number of users" is --agents: that many jobs at once
        assert ui.swarm({"user_count": 3, "spawn_rate": 3, "host": sim.url,
                         "trace": str(trace), "trace_format": "agent-jsonl", "jobs": 6,
                         "tool_speed": 20, "max_tool_wait": 0.05,
                         "max_idle": 0.05})["success"] is True
        readings = []  # the live page's job figures while the run goes
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            live = ui.json("/anvil/live.json")
            if live["run_id"] is not None and live["jobs"] is not None:
                readings.append(live["jobs"])
                if live["finished"]:
                    break
            time.sleep(0.05)
        assert readings and live["finished"], ui.log()[-3000:]
        rows = ui.json("/stats/requests")["extended_stats"][0]["data"]
        page = ui.get("/anvil/")
    (raw_path,) = (tmp_path / "res").glob("benchmark-*/requests.jsonl")
    lines = [orjson.loads(x) for x in raw_path.read_bytes().splitlines()]
    agent = lines[0]["params"]["agent"]
    assert (agent["file"], agent["format"], agent["jobs"]) == ("jobs.jsonl", "agent-jsonl", 6)
    assert (agent["tool_speed"], agent["max_tool_wait_s"], agent["max_idle_s"]) == (
        20.0, 0.05, 0.05)
    raw = [x for x in lines if x.get("type") == "request" and not x["warmup"]]
    assert {r["extra"]["job"] for r in raw} == set(range(6))  # 6 jobs: the trace's 4, again
    assert all(r["failure"] is None for r in raw)
    for j in readings:  # at most the form's 3 at once; done only grows, up to the 6
        assert j["in_flight"] is None or 0 <= j["in_flight"] <= 3, j
        assert j["completed"] + j["cut"] <= 6
    done = [j["completed"] + j["cut"] for j in readings]
    assert done == sorted(done)
    jobs = live["jobs"]
    assert (jobs["planned"], jobs["completed"], jobs["cut"], jobs["in_flight"]) == (6, 6, 0, 0)
    truth = _job_latencies_ms(raw)
    for p in (50, 95):
        (want,) = stats.nearest_rank_columns(sorted(truth), (p,))
        got = jobs[f"latency_p{p}_ms"]
        # within the sketch's 1 % (and 1 ms: the file's block, once built, counts from the
        # first due, which a closed loop's first request follows within a millisecond)
        assert abs(got - want) <= SKETCH_REL_ERROR * want + 1.0, (p, got, want)
    block = orjson.loads(raw_path.with_name("benchmark.json").read_bytes())["jobs"]
    assert jobs["exact"] is True  # the run written: the file's block, bit for bit
    assert [jobs[k] for k in ("completed", "cut", "latency_p50_ms", "latency_p95_ms")] == [
        block[k] for k in ("completed", "cut", "latency_p50_ms", "latency_p95_ms")]
    shown = {r["metric"]: r for r in rows}
    assert shown["agent jobs completed (of 6 planned)"]["count"] == 6
    assert b'id="jobs"' in page


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "processes-2"])
def test_jobs_the_runs_end_stopped_are_cut(tmp_path: Path, processes: int) -> None:
    jobs = agent_jobs(10, seed=3)
    trace = write_agent_jsonl(tmp_path / "jobs.jsonl", jobs)
    # ~5 ms a token: a job takes ~0.6 s (its waits and tokens, not the CPU's speed), 40 of
    # them 4 at once ~6 s, so a 1.5 s run completes some and stops some mid-way
    with start_simulator(["--prefill-ms", "1", "--interval-ms", "5", "--reasoning-tokens",
                          "0", "--max-context", "32768"]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "--agents", "4", "--jobs", "40", "--duration", "1.5s",
                     "--no-server-metrics", "--processes", str(processes),
                     "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (raw_path,) = (tmp_path / "res").glob("benchmark-*/requests.jsonl")
    raw = [x for x in map(orjson.loads, raw_path.read_bytes().splitlines())
           if x.get("type") == "request" and not x["warmup"]]
    sent: dict[int, int] = {}
    failed: set[int] = set()
    for r in raw:
        n = r["extra"]["job"]
        sent[n] = sent.get(n, 0) + 1
        if r["failure"] is not None:
            failed.add(n)
    completed = sum(1 for n, k in sent.items()
                    if k == jobs[n % len(jobs)].requests and n not in failed)
    block = orjson.loads(raw_path.with_name("benchmark.json").read_bytes())["jobs"]
    assert (block["completed"], block["cut"]) == (completed, len(sent) - completed)
    progress = orjson.loads(raw_path.with_name("progress.json").read_bytes())
    # the last reading is taken after benchmark.json: a master's too (its workers' stopped
    # jobs reach it only in the drain)
    assert (progress["jobs_completed"], progress["jobs_cut"],
            progress["jobs_in_flight"]) == (completed, len(sent) - completed, 0)
    assert 0 < completed < len(sent)  # the run did stop jobs mid-way (else: nothing tested)
    # every ticket handed out is one row (on a worker, a follow-up asked for before its
    # wait ends and stopped is recorded never sent: `live/agentahead.py`)
    assert sorted(r["request_index"] for r in raw) == list(range(len(raw)))
