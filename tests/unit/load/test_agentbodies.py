"""An agent turn's body: its blocks namespaced by job ("local") or shared ("global"), sized
exactly, the next turn starting with the one before's blocks, and its headers."""

from __future__ import annotations

import orjson

from anvil_metrics.headers import AGENT_JOB, AGENT_SESSION, AGENT_TURN
from anvil_metrics.load.agentbodies import AgentBodies, block_ids, header_id
from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.prep.traceprompts import TracePrompts


def _job(jid: str, scope: str) -> Job:
    turns = (Turn(0, 128, 5, (1, 2)), Turn(1, 200, 7, (1, 2, 3)))
    return Job(jid, 64, (Session("root", turns),), scope)


def test_local_ids_differ_between_jobs_global_ids_do_not():
    a, b = _job("a", "local"), _job("b", "local")
    assert set(block_ids(a, 0, a.root, 0)).isdisjoint(block_ids(b, 1, b.root, 0))
    g0, g1 = _job("a", "global"), _job("b", "global")
    assert block_ids(g0, 0, g0.root, 0) == block_ids(g1, 1, g1.root, 0) == (1, 2)
    # 200 tokens past 3 blocks of 64: one block of the turn's own
    assert len(block_ids(g0, 0, g0.root, 1)) == 4


def test_sizes_exact_history_is_the_prefix_and_headers_name_the_turn():
    jobs = [_job("a", "local"), _job("job two", "local")]
    bodies = AgentBodies(Scenario(measurement_protocol="p"), "m", jobs, "nonce", overhead_tokens=10)
    first, second = (bodies.text(0, jobs[0].root, k).split(" ") for k in (0, 1))
    assert (len(first), len(second)) == (128 - 10, 200 - 10)  # one word a token
    assert second[:len(first)] == first  # the history, word for word
    body = orjson.loads(bodies.body(0, jobs[0].root, 1))
    assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"]) == (7, 7, True)
    h = bodies.headers(1, jobs[1].root, 1).decode()
    assert h == (f"{AGENT_JOB}: {header_id('job two')}\r\n{AGENT_SESSION}: root\r\n"
                 f"{AGENT_TURN}: 1\r\n")
    assert header_id("job two").startswith("h-")
    # the run's job 2 replays the trace's job 0 again: its own blocks, its own header id
    assert bodies.job(2) is jobs[0] and bodies.headers(2, jobs[0].root, 0).startswith(
        f"{AGENT_JOB}: a.1\r\n".encode())
    assert bodies.text(2, jobs[0].root, 0) != bodies.text(0, jobs[0].root, 0)
    assert bodies.turn_extra(0, jobs[0].root, 1, 0) == {
        "job": 0, "session": 0, "parent_session": None, "turn": 2, "depth": 0,
        "tool_wait_ns": 0, "join_wait_ns": 0}


def test_a_jobs_kept_blocks_give_the_same_text_and_go_with_the_job():
    jobs = [_job("a", "global")]
    kept = AgentBodies(Scenario(measurement_protocol="p"), "m", jobs, "nonce", 10)
    plain = TracePrompts("nonce", 64, 10)
    for k in (0, 1, 1):
        ids = block_ids(jobs[0], 0, jobs[0].root, k)
        assert kept.text(0, jobs[0].root, k) == plain.text(jobs[0].root.turns[k].input_tokens,
                                                           ids)
    kept.job_ended(0)
    assert kept._blocks == {}
