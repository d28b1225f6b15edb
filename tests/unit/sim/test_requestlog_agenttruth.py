"""The truth checks of item 6 (`tests/agenttruth.py`) on a small hand-made log: a correct
log passes every check, and each planted violation is named by its check."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from agentgen import agent_jobs
from agenttruth import (
    block_prompt,
    check_job_latency,
    check_joins,
    check_prompt_sizes,
    check_reuse,
    check_spawns,
    check_tool_waits,
    fit_job,
    job_latency_truth,
    logged_turns,
    reported_job_latency,
    row_key,
)

from anvil_metrics.load.agentjob import Job, Session, Turn

# blocks of 4 tokens; the root's turns share their history, the children nothing
ROOT = Session("j", (
    Turn(0.0, 8, 4, (1, 2), stop="tool_use"),
    Turn(0.015, 11, 4, (1, 2, 3), input_type="tool_result", stop="end_turn",
         tool_wait_ms=10.0),
    Turn(0.021, 16, 4, (1, 2, 3, 4), stop="end_turn")))
JOINED = Session("j-a", (Turn(0.006, 3, 4, (10,)),), parent_id="j", depth=1,
                 spawn_after_turn=0, join_before_turn=2)
BACKGROUND = Session("j-b", (Turn(0.006, 4, 4, (20,)),), parent_id="j", depth=1,
                     spawn_after_turn=0)
JOB = Job("j", 4, (ROOT, JOINED, BACKGROUND))
# (session, turn): arrival, first byte, last byte (ms), prompt and cached tokens: the
# expected reuse is 0 + 8 + 8 of 42 tokens (turn 1's block 3 is partial: never cached)
TRUE = {("j", 0): (0.0, 1.0, 5.0, 8, 0), ("j-a", 0): (6.0, 7.0, 10.0, 3, 0),
        ("j-b", 0): (6.1, 7.0, 9.0, 4, 0), ("j", 1): (15.0, 16.0, 20.0, 11, 8),
        ("j", 2): (21.0, 22.0, 25.0, 16, 8)}


def _lines(plant: dict | None = None, drop: tuple = ()) -> list[dict]:
    """The simulator's log of `TRUE`, with `plant`'s entries replacing some."""
    rows = {**TRUE, **(plant or {})}
    lines: list[dict] = []
    for (session, turn), (arrive, first, last, prompt, cached) in rows.items():
        if (session, turn) in drop:
            continue
        t0 = round(arrive * 1e6)
        lines.append({"t_ns": t0, "anvil_job": "j", "anvil_session": session,
                      "anvil_turn": turn, "session": None})
        lines.append({"answer_t0_ns": t0, "first_sent_ns": round(first * 1e6),
                      "last_sent_ns": round(last * 1e6), "prompt_tokens": prompt,
                      "cached_tokens": cached, "completed": True})
    lines.append({"t_ns": 1, "anvil_job": None, "session": None})  # not an agent's
    return lines


CHECKS = (check_spawns, check_joins, check_tool_waits, check_prompt_sizes, check_reuse)


def test_a_true_log_passes_every_check() -> None:
    log = logged_turns(_lines())
    assert log.problems == () and len(log.turns) == 5
    for check in CHECKS:
        assert check([JOB], log) == [], check.__name__
    truth, missing = job_latency_truth([JOB], log)
    assert missing == [] and truth == {"j": 25.0}
    assert check_job_latency(truth, {"j": 25.6}) == []


@pytest.mark.parametrize(("check", "plant", "named"), [
    (check_spawns, {("j-a", 0): (4.0, 7.0, 10.0, 3, 0)},
     "spawn: job j session j-a turn 0 arrived 1.000 ms before the answer of its spawn "
     "turn 0 of session j ended"),
    (check_joins, {("j", 2): (9.5, 22.0, 25.0, 16, 8)},
     "join: job j session j turn 2 arrived 0.500 ms before child session j-a's last "
     "answer ended"),
    (check_tool_waits, {("j", 1): (17.5, 18.0, 20.0, 11, 8)},
     "tool wait: job j session j turn 1 waited 12.500 ms, not 10.000 ms (± 2.0 ms)"),
    (check_prompt_sizes, {("j", 1): (15.0, 16.0, 20.0, 12, 8)},
     "prompt size: job j session j turn 1 was 12 tokens, not 11"),
    (check_reuse, {("j", 2): (21.0, 22.0, 25.0, 16, 0)},
     "reuse: job j hit 19.05 % of its prompt tokens in the cache, expected 38.10 % "
     "(± 2.0 points)"),
])
def test_each_check_names_a_planted_violation(check, plant: dict, named: str) -> None:
    out = check([JOB], logged_turns(_lines(plant)))
    assert named in out


def test_tool_waits_follow_speed_and_the_cap() -> None:
    log = logged_turns(_lines({("j", 1): (10.0, 16.0, 20.0, 11, 8)}))  # waited 5 ms
    assert check_tool_waits([JOB], log, speed=2.0) == []
    assert check_tool_waits([JOB], log, max_wait_ms=5.0) == []
    assert check_tool_waits([JOB], log, max_wait_ms=2.0) == [
        "tool wait: job j session j turn 1 waited 5.000 ms, not 2.000 ms (± 2.0 ms)"]


def test_reuse_overall_only_and_per_job() -> None:
    log = logged_turns(_lines({("j", 2): (21.0, 22.0, 25.0, 16, 7)}))  # 2.4 points under
    assert len(check_reuse([JOB], log)) == 2  # the job and all jobs
    assert check_reuse([JOB], log, tol_points=2.5) == []


def test_missing_and_unanswered_turns_are_named_never_passed() -> None:
    lines = [x for x in _lines() if x.get("answer_t0_ns") != round(6.1e6)]
    log = logged_turns(_lines(drop=(("j-a", 0),)))
    assert "job j session j-a turn 0: not in the log" in check_spawns([JOB], log)
    assert "job j session j-a turn 0: not in the log" in check_joins([JOB], log)
    assert "reuse: job j has no cache figure for every turn" in check_reuse([JOB], log)
    truth, missing = job_latency_truth([JOB], logged_turns(lines))
    assert truth == {} and missing == [
        "job j session j-b turn 0: its answer did not complete"]
    assert check_job_latency({"j": 25.0}, {}) == ["job latency: job j is not reported"]


def test_a_request_logged_twice_is_a_problem() -> None:
    lines = _lines()
    again = {**lines[0], "t_ns": 99}
    assert logged_turns([*lines, again]).problems == ("job j session j turn 0: received twice",)


def test_job_latency_against_the_runs_rows() -> None:
    """A row names the run's job number, the session's place and the turn from 1; the
    log the trace's ids and the turn from 0 (`row_key`)."""
    rows = [{"job_id": 0, "session_id": 0, "turn": 1, "start_offset_ms": 100.2,
             "e2e_ms": 4.9},
            {"job_id": 0, "session_id": 1, "turn": 1, "start_offset_ms": 121.3,
             "e2e_ms": 4.2},
            {"job_id": 0, "session_id": 0, "turn": 2, "start_offset_ms": None,
             "e2e_ms": 3.0},
            {"job_id": None, "start_offset_ms": 0.0, "e2e_ms": 900.0}]
    assert [row_key(r, [JOB]) for r in rows[:3]] == [
        ("j", JOB.sessions[0].id, 0), ("j", JOB.sessions[1].id, 0),
        ("j", JOB.sessions[0].id, 1)]
    reported = reported_job_latency(rows, [JOB])
    assert reported == {"j": pytest.approx(25.3)}
    assert check_job_latency({"j": 25.0}, reported) == []
    assert check_job_latency({"j": 24.0}, reported) == [
        "job latency: job j reported 25.300 ms, the log's truth is 24.000 ms (± 1.0 ms)"]


def _send(url: str, job: Job, session: str, k: int) -> None:
    """One turn as the replay sends it: its prompt (`block_prompt`), streamed, its ids in
    the three headers."""
    t = next(s for s in job.sessions if s.id == session).turns[k]
    body = orjson.dumps({"model": "sim-model", "messages": block_prompt(t, job.block_size),
                         "max_tokens": t.output_tokens, "stream": True})
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Anvil-Job": job.id, "X-Anvil-Session": session,
                                          "X-Anvil-Turn": str(k)})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def test_a_real_simulators_log_feeds_every_check(simulator, tmp_path: Path) -> None:
    """One generated job sent in an order its rules allow (the root to its spawn turn,
    each child whole, then the root's rest; tool waits slept at speed 10) to a real
    simulator: its log passes every check, and its stamps lie on the client's own
    `perf_counter_ns` clock, inside the span the client saw."""
    log = tmp_path / "requests.jsonl"
    job = fit_job(agent_jobs(1, seed=3)[0])
    sim = simulator("--prefill-ms", "1", "--interval-ms", "0.2", "--max-context", "16384",
                    "--prefix-cache", "--prefix-cache-block", str(job.block_size),
                    "--log-requests", str(log), "--log-answers")
    root, children = job.root, job.children(job.root.id)
    spawn = children[0].spawn_after_turn
    order = [(root.id, k) for k in range(spawn + 1)]
    order += [(c.id, k) for c in children for k in range(len(c.turns))]
    order += [(root.id, k) for k in range(spawn + 1, len(root.turns))]
    sessions = {s.id: s for s in job.sessions}
    begin = time.perf_counter_ns()
    for session, k in order:
        wait = sessions[session].turns[k].tool_wait_ms or 0.0
        time.sleep(wait / 10 / 1000)
        _send(sim.url, job, session, k)
    end = time.perf_counter_ns()
    deadline = time.monotonic() + 10  # the last answer's line follows its last write
    while len(lines := [orjson.loads(x) for x in log.read_bytes().splitlines()]) < 2 * len(
            order):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    truth = logged_turns(lines)
    assert truth.problems == () and len(truth.turns) == job.requests == len(order)
    for check in (check_spawns, check_joins, check_prompt_sizes, check_reuse):
        assert check([job], truth) == [], check.__name__
    # never early; how late is the machine's (urllib, a busy machine): a sanity bound only
    assert check_tool_waits([job], truth, speed=10.0, tol_ms=0.5, late_ms=1000.0) == []
    assert sum(t.cached_tokens or 0 for t in truth.turns.values()) > 0
    latency, missing = job_latency_truth([job], truth)
    assert missing == []
    first = min(t.arrival_ns for t in truth.turns.values())
    assert begin < first and first + latency[job.id] * 1e6 < end  # one clock, inside
