"""The `jobs` block against the simulator: a sampled start (`--start-at sampled`) and a run
the server refuses too often for length (the validity verdict).

Sampled start, held to the simulator's request log (`--log-requests --log-answers`): each
job started past its first turn sends exactly one primed request before its measured ones
(`max_tokens` 1, the blocks its start turn shares with the turn before it, whole, plus the
chat template's closing), and the first measured request then finds exactly those blocks
in the prefix cache; the rows start at the turn `agentstart.start_turn` draws; every job
completes and `anvil verify` passes; by one process and by `--processes 2` (the master
records each worker's primes as warm-ups though it granted them no ticket). The verdict:
a trace with a few turns over the simulator's `--max-context` is refused for them (vLLM's
400), so over 1 % of the requests overflow the context: the block says `invalid` and the
run's summary says so in capitals.
Each run is a dozen small jobs, a few seconds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from agentgen import BLOCK, agent_jobs, write_agent_jsonl
from agenttruth import template_tokens
from conftest import anvil
from simfork import start_simulator

from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.agentstart import prime_ids, start_turn

pytestmark = pytest.mark.e2e

JOBS, SEED = 12, 5


def _run(tmp: Path, jobs: list[Job], sim_args: list[str], *flags: str) -> dict:
    trace = write_agent_jsonl(tmp / "jobs.jsonl", jobs)
    log = tmp / "sim.jsonl"
    with start_simulator(["--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens",
                          "0", "--prefix-cache", "--prefix-cache-block", str(BLOCK),
                          "--log-requests", str(log), "--log-answers", *sim_args]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "--agents", "4", "--tool-speed", "8", "--max-idle", "0",
                     "--no-server-metrics", "--results-dir", str(tmp / "res"), *flags)
    (bench,) = (tmp / "res").glob("benchmark-*/benchmark.json")
    lines = list(map(orjson.loads, log.read_bytes().splitlines()))
    return {"proc": proc, "bench": bench, "doc": orjson.loads(bench.read_bytes()),
            "requests": sorted((x for x in lines if "t_ns" in x), key=lambda x: x["t_ns"]),
            "answers": {x["answer_t0_ns"]: x for x in lines if "answer_t0_ns" in x}}


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "processes-2"])
def test_a_sampled_start_primes_each_job_once_and_its_first_turn_finds_it(
        tmp_path: Path, processes: int) -> None:
    jobs = agent_jobs(JOBS, seed=SEED)
    run = _run(tmp_path, jobs, ["--max-context", "32768"], "--start-at", "sampled",
               "--start-seed", "3", "--processes", str(processes))
    proc, doc = run["proc"], run["doc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    b = doc["jobs"]
    assert (b["start_at"], b["started"], b["completed"], b["cut"]) == ("sampled", JOBS,
                                                                        JOBS, 0)
    assert b["requests"] == len(doc["request_timings"]) and doc["failures"] == []
    closing = template_tokens()[1]
    primed = 0
    for n, job in enumerate(jobs):
        k = start_turn(3, n, len(job.root.turns))
        assert b["plan"][n][0] == k
        mine = [r for r in run["requests"] if r["anvil_job"] == job.id]
        ids = prime_ids(job.root, k)
        first_rows = [r for r in doc["request_timings"] if r["job_id"] == n
                      and r["session_id"] == 0]
        assert min(r["turn"] for r in first_rows) == k + 1  # the rows start at turn k
        if not ids:  # started at its first turn: nothing primed
            assert len(mine) == b["plan"][n][1]
            continue
        primed += 1
        prime, first = mine[0], mine[1]
        assert prime["max_tokens"] == 1 and (prime["anvil_session"], prime["anvil_turn"]) == (
            job.root.id, k)
        assert sum(1 for r in mine if r["max_tokens"] == 1 and r["anvil_turn"] == k) == 1
        assert len(mine) == b["plan"][n][1] + 1  # one primed, then the measured ones
        assert run["answers"][prime["t_ns"]]["prompt_tokens"] == len(ids) * BLOCK + closing
        assert (first["anvil_session"], first["anvil_turn"]) == (job.root.id, k)
        assert run["answers"][first["t_ns"]]["cached_tokens"] == len(ids) * BLOCK
    assert primed >= JOBS // 2  # most jobs started past their first turn
    assert doc["warmup_requests"] == primed  # the primes: warm-ups, never rows
    verify = anvil("verify", str(run["bench"]), timeout=60)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


def test_over_one_percent_refused_for_length_is_an_invalid_run(tmp_path: Path) -> None:
    jobs = agent_jobs(JOBS, seed=SEED)
    # the last root turn of three jobs outgrows the simulator's 8192-token context
    over = [replace(j, sessions=(replace(j.root, turns=(*j.root.turns[:-1], replace(
        j.root.turns[-1], input_tokens=9000))), *j.sessions[1:])) if n % 4 == 0 else j
            for n, j in enumerate(jobs)]
    run = _run(tmp_path, over, ["--max-context", "8192"])
    doc, out = run["doc"], run["proc"].stdout
    assert run["proc"].returncode == 0, out[-3000:] + run["proc"].stderr[-3000:]
    b = doc["jobs"]
    refused = [f for f in doc["failures"] if f["http_status"] == 400]
    assert len(refused) == b["context_overflows"] == 3
    assert (b["requests"], b["completed"], b["cut"]) == (
        len(doc["request_timings"]) + 3, JOBS - 3, 3)
    assert b["overflow_share"] == 3 / b["requests"] > 0.01 and b["validity"] == "invalid"
    assert "INVALID RUN: 3 of" in out and "overflowed the context" in out
    verify = anvil("verify", str(run["bench"]), timeout=60)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
