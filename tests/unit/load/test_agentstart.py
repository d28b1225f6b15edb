"""Where an agent job starts (`load/agentstart.py`): the sampled turn is a pure function of
(seed, job number, turns), uniform over the root's turns; the prime is the blocks turn k
shares with turn k − 1; the sub-agents spawned before k are skipped with their own; and
what a sampled start sends and may find cached (`agentstats.start_figures`), counted by
hand."""

from __future__ import annotations

from collections import Counter

from agentgen import agent_jobs

from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.agentstart import prime_ids, sent_turns, skipped, start_turn
from anvil_metrics.load.agentstats import job_figures, start_figures


def _job() -> Job:
    """Root of 4 turns (each adding one block to the last); a, b spawned after turn 0 (b
    spawning e); c after turn 1; z with the root's start."""
    root = tuple(Turn(float(k), 64 * (k + 1) + 10, 5, tuple(range(1, k + 2)))
                 for k in range(4))
    one = (Turn(0.5, 100, 5, (50,)),)
    return Job("j", 64, (
        Session("root", root),
        Session("z", one, "root", 1),
        Session("a", one, "root", 1, spawn_after_turn=0, join_before_turn=2),
        Session("b", one, "root", 1, spawn_after_turn=0),
        Session("c", one, "root", 1, spawn_after_turn=1),
        Session("e", one, "b", 2, spawn_after_turn=0),
    ))


def test_the_start_turn_is_a_pure_seeded_uniform_draw() -> None:
    assert start_turn(0, 5, 9) == start_turn(0, 5, 9)
    assert start_turn(0, 5, 1) == 0
    draws = Counter(start_turn(7, n, 4) for n in range(4000))
    assert set(draws) == {0, 1, 2, 3} and all(900 < c < 1100 for c in draws.values())
    assert [start_turn(1, n, 50) for n in range(20)] != [start_turn(2, n, 50)
                                                          for n in range(20)]


def test_the_past_sub_agents_are_skipped_with_their_own() -> None:
    job = _job()
    assert skipped(job, 0) == frozenset()
    assert skipped(job, 1) == {"z", "a", "b", "e"}
    assert skipped(job, 2) == {"z", "a", "b", "e", "c"}
    assert [t.t_s for t in sent_turns(job, 1)] == [1.0, 2.0, 3.0, 0.5]  # root 1.. and c


def test_the_prime_is_the_blocks_turn_k_shares_with_turn_k_minus_1() -> None:
    job = _job()
    assert prime_ids(job.root, 0) == ()
    assert prime_ids(job.root, 2) == (1, 2)
    other = Session("r", (Turn(0.0, 200, 5, (1, 2, 3)), Turn(1.0, 200, 5, (1, 9, 3))))
    assert prime_ids(other, 1) == (1,)


def test_start_figures_count_the_prime_as_cached_and_match_a_first_start() -> None:
    job = _job()
    # start at 2: root turns 2, 3 (3 and 4 ids, 202 and 266 tokens); a, b, z, c, e skipped
    # the prime sent ids 1, 2: turn 2 finds 128 cached, turn 3 then 192
    assert start_figures(job, 2) == (2, 202 + 266, 128 + 192)
    for j in agent_jobs(20, seed=4):  # k = 0 is the whole job, as the trace's figures say
        (f,) = job_figures([j])
        assert start_figures(j, 0) == (f.requests, f.input_tokens, f.cached_tokens)
