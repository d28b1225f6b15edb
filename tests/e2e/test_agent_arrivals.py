"""Agent jobs started at the trace's own times (issue 48 item 3): a file of 12 generated
jobs whose job lines record `start_s` (written out of order: the replay sends them in start
order), replayed by `anvil run --trace F --trace-speed 2` against the simulator, and held
to the simulator's request log: each job's first request arrives at the first job's due
time plus its recorded start's offset ÷ 2, never before it (the client's clock and the
server's are one: `agenttruth`), late by at most a loose bound (a busy machine's, not
the schedule's: `LATE_MS`); the run records the trace's arrivals and its schedule lag.

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
LATE_MS = 250.0  # sanity only: how late a start runs is the machine's as much as anvil's


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
    due0 = None  # the run's job 0 (the earliest start): its root's first request's due
    for line in (run_dir / "requests.jsonl").read_bytes().splitlines():
        d = orjson.loads(line)
        x = d.get("extra") or {}
        if d.get("type") == "request" and x.get("job") == 0 and x.get("session") == 0 \
                and x.get("turn") == 1:
            due0 = d["start_ns"] - x["start_delay_ns"]
    assert due0 is not None
    late_ms = [(first[j.id] - due0) / 1e6 - (j.start_s - ordered[0].start_s) * 1000 / SPEED
               for j in ordered]
    assert all(-0.5 <= x <= LATE_MS for x in late_ms), late_ms  # never early
    # the starts keep the trace's order (each ~100 ms apart at speed 2)
    assert [first[j.id] for j in ordered] == sorted(first.values())
    doc = orjson.loads((run_dir / "benchmark.json").read_bytes())
    load = doc["load"]
    assert load["arrival"] == "trace" and load["schedule_lag_ms"]["p50"] is not None
    span_s = (ordered[-1].start_s - ordered[0].start_s) / SPEED
    assert load["offered_rate_rps"] == pytest.approx((JOBS - 1) / span_s)
