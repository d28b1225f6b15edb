"""Agent jobs' figures: expected prefix reuse by whole chains of block ids (counted by
hand, and across jobs exactly the shared system prefix when ids are global), and the
shape figures `anvil trace stats` prints."""

from __future__ import annotations

from dataclasses import replace

from agentgen import BLOCK, SHARED_BLOCKS, agent_jobs

from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.agentstats import agent_stats, job_figures, rank


def test_reuse_counts_whole_chains_of_blocks_never_a_partial_one() -> None:
    turns = (Turn(0.0, 200, 5, (1, 2, 3, 4)),  # 3 whole blocks, a partial 4th
             Turn(1.0, 300, 5, (1, 2, 9, 3, 4)),  # 1, 2 hit; 9 misses, so 3 and 4 miss
             Turn(2.0, 129, 5, (1, 2, 9)))  # 1, 2, 9 hit but at most 129 - 1 tokens
    job = Job("j", 64, (Session("j", turns),))
    (f,) = job_figures([job])
    assert f.cached_tokens == 128 + 128 and f.input_tokens == 629
    other = Job("k", 64, (Session("k", (Turn(0.0, 200, 5, (1, 2, 3)),)),))
    assert job_figures([job, other])[1].cached_tokens == 0  # local ids: not job j's
    both = [replace(j, hash_scope="global") for j in (job, other)]
    assert job_figures(both)[1].cached_tokens == 192 - 0  # global: job j's 1, 2, 3


def test_global_ids_add_exactly_the_shared_prefix_of_every_later_job() -> None:
    jobs = agent_jobs(40, seed=3)
    local = [replace(j, hash_scope="local") for j in jobs]
    g = sum(f.cached_tokens for f in job_figures(jobs))
    lo = sum(f.cached_tokens for f in job_figures(local))
    assert g - lo == (len(jobs) - 1) * SHARED_BLOCKS * BLOCK


def test_the_shape_figures_of_a_generated_trace() -> None:
    jobs = agent_jobs(200, seed=1)
    st = agent_stats(jobs)
    children = [s for j in jobs for s in j.sessions if s.parent_id]
    assert st.jobs == 200 and st.sessions == 200 + len(children)
    assert st.requests == sum(len(s.turns) for j in jobs for s in j.sessions)
    assert st.depth_max == 1 and st.sessions_by_depth == {0: 200, 1: len(children)}
    assert st.spawning_turns == 200 and st.fanout["p50"] is not None
    assert 3 <= min(len(j.sessions) - 1 for j in jobs) and st.fanout["max"] <= 5
    assert st.children_joined == sum(s.joined for s in children) > 0
    assert st.children_background == len(children) - st.children_joined > 0
    tools = [t for j in jobs for s in j.sessions for t in s.turns
             if t.input_type == "tool_result"]
    assert st.tool_waits == len(tools)
    assert abs(st.tool_s_total - sum(t.tool_wait_ms for t in tools) / 1000) < 1e-9
    assert 0 < st.expected_reuse < 1
    deep = agent_stats(agent_jobs(5, seed=2, deep=True))
    assert deep.depth_max == 2 and deep.sessions_by_depth[2] == 5


def test_rank_is_nearest_rank_and_none_of_nothing() -> None:
    assert rank([], 50) is None
    assert rank([3.0, 1.0, 2.0, 4.0], 50) == 2.0 and rank([1.0, 2.0], 95) == 2.0
