"""Agent jobs started at the trace's own times (issue 48 item 3): a file of 12 generated
jobs whose job lines record `start_s` (written out of order: the replay sends them in start
order), replayed by `anvil run --trace F --trace-speed 2` against the simulator: each job's
first request is due at the first job's due plus its recorded start's offset ÷ 2 (the
client's own schedule, exactly), and the simulator's request log shows it never arrived
before that (the client's clock and the server's are one: `agenttruth`); how late it
arrived after the client's start is the machine's, held to a sanity bound (`LATE_MS`);
the run records the trace's arrivals and its schedule lag.

Why the first job's due time from the client's raw record (its start less its
`start_delay_ns`): the schedule's origin is the run's first measured take, which only the
client knows; every later start is due a fixed offset after it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest
from agentgen import agent_jobs, write_agent_jsonl
from conftest import anvil
from simfork import start_simulator

from anvil_metrics.load.agentjob import Job

pytestmark = pytest.mark.e2e

JOBS, SPEED, GAP_S = 12, 2.0, 0.2
LATE_MS = 1000.0  # sanity only: how late a start arrives is the machine's as much as anvil's


def _timed_jobs() -> list[Job]:
    """12 jobs about GAP_S apart on a clock of their own (from 1000 s), in shuffled order."""
    rng = random.Random(3)
    jobs = [replace(j, start_s=1000 + GAP_S * k + rng.randint(0, 50) / 1000)
            for k, j in enumerate(agent_jobs(JOBS, seed=5))]
    rng.shuffle(jobs)
    return jobs


def test_jobs_start_at_their_recorded_times_over_the_speed(tmp_path) -> None:
    jobs = _timed_jobs()
    trace = write_agent_jsonl(tmp_path / "jobs.jsonl", jobs)
    log = tmp_path / "sim.jsonl"
    with start_simulator(["--prefill-ms", "2", "--interval-ms", "2", "--reasoning-tokens",
                          "0", "--log-requests", str(log)]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "--trace-speed", str(SPEED), "--tool-speed", "4", "--max-idle", "0",
                     "--no-server-metrics", "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "res").glob("benchmark-*")
    ordered = sorted(jobs, key=lambda j: j.start_s or 0.0)
    first = {}  # each job's root's first request's arrival (the server's monotonic ns)
    for line in log.read_bytes().splitlines():
        d = orjson.loads(line)
        if d.get("anvil_job") is not None and d["anvil_turn"] == 0 \
                and d["anvil_session"] == d["anvil_job"]:
            first[d["anvil_job"]] = d["t_ns"]
    assert sorted(first) == sorted(j.id for j in jobs)
    # each job's first request: its due and start on the client's clock (one clock with
    # the server's log), by the trace's job it replays (job n replays ordered[n])
    due, start = {}, {}
    for line in (run_dir / "requests.jsonl").read_bytes().splitlines():
        d = orjson.loads(line)
        x = d.get("extra") or {}
        if d.get("type") == "request" and x.get("session") == 0 and x.get("turn") == 1:
            job_id = ordered[x["job"] % len(ordered)].id
            due[job_id] = d["start_ns"] - x["start_delay_ns"]
            start[job_id] = d["start_ns"]
    assert sorted(due) == sorted(first)
    # the schedule is the trace's: each job due its recorded start ÷ the speed after the
    # first, exactly (the client's own arithmetic, not the machine's speed)
    due0 = due[ordered[0].id]
    for j in ordered:
        want_ms = (j.start_s - ordered[0].start_s) * 1000 / SPEED
        assert (due[j.id] - due0) / 1e6 == pytest.approx(want_ms, abs=0.01), j.id
    # never early at the server; how late is the machine's (judged from the client's own
    # start, against a sanity bound only)
    assert all(first[k] >= due[k] - 500_000 for k in first), "a job arrived before its due"
    assert all(first[k] - start[k] <= LATE_MS * 1e6 for k in first)
    doc = orjson.loads((run_dir / "benchmark.json").read_bytes())
    load = doc["load"]
    assert load["arrival"] == "trace" and load["schedule_lag_ms"]["p50"] is not None
    span_s = (ordered[-1].start_s - ordered[0].start_s) / SPEED
    assert load["offered_rate_rps"] == pytest.approx((JOBS - 1) / span_s)
