"""What a file of agent jobs will ask of a server, before any GPU time is spent: `anvil
trace stats` on an agentic trace, and each job's expected prefix reuse, which the replay's
results compare with the reuse the server reports.

Why one function (`job_figures`) for every per-job figure: the stats print it, and the
replay's `jobs` block will set its measured figures beside these, job by job; two ways of
counting would disagree.

Expected prefix reuse, as a server's prefix cache would see it with a cache that keeps
every block: jobs in the file's order, each job's requests in the order of their `t`
(every session's together); a request's cached tokens are its leading whole blocks whose
whole chain of ids (this block's id after the same ids before it) was sent earlier, at
most its input less one token (a server computes at least one); a partial last block is
never cached, nor blocks past its ids. Ids count per job when the job's `hash_scope` is
"local", across jobs when "global". A job's share is its cached over its input tokens.

A job started at root turn k (`--start-at sampled`, `load/agentstart.py`) is counted the
same way over what it sends (`start_figures`), its prime's blocks sent first and not
counted, on a cache of its own (a "global" trace's sharing between jobs is not counted
then: which job ran before which is the run's, not the trace's).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from anvil_metrics.load.agentjob import Job, Turn
from anvil_metrics.load.agentstart import prime_ids, sent_turns

Chain = dict[tuple[int, object], int]  # (parent node, id) -> node; node 0: the root


@dataclass(frozen=True, slots=True)
class JobFigures:
    """One job's figures (module docstring); tool and idle times sum what was recorded
    (`tool_waits_unrecorded`: tool round trips whose time was not)."""

    job_id: str
    sessions: int
    requests: int
    depth: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    tool_ms: float
    tool_waits: int
    tool_waits_unrecorded: int
    idle_ms: float

    @property
    def reuse(self) -> float:
        """The share of the job's input tokens expected from the prefix cache."""
        return self.cached_tokens / self.input_tokens


def _job_order(job: Job) -> list[Turn]:
    turns = [t for s in job.sessions for t in s.turns]
    return sorted(turns, key=lambda t: t.t_s)  # stable: a tie keeps the job's order


def _cached(t: Turn, job: Job, n: int, chain: Chain) -> int:
    """Turn `t`'s expected cached tokens, its blocks then kept in `chain` (module
    docstring); `n` is its job's place (a "local" id's scope)."""
    full = min(len(t.hash_ids), t.input_tokens // job.block_size)
    node, hit = 0, 0
    for k in range(full):
        key = (node, t.hash_ids[k] if job.hash_scope == "global" else (n, t.hash_ids[k]))
        nxt = chain.get(key)
        if nxt is None:  # a miss: every later block of the request misses too
            nxt = chain[key] = len(chain) + 1
        else:
            hit += job.block_size
        node = nxt
    return min(hit, t.input_tokens - 1)


def start_figures(job: Job, k: int) -> tuple[int, int, int]:
    """(requests, input tokens, expected cached tokens) of `job` started at root turn `k`
    (module docstring): what it sends measured, its prime's blocks cached first."""
    chain: Chain = {}
    ids = prime_ids(job.root, k)
    if ids:
        _cached(Turn(0.0, len(ids) * job.block_size + 1, 1, ids), job, 0, chain)
    turns = sorted(sent_turns(job, k), key=lambda t: t.t_s)
    return (len(turns), sum(t.input_tokens for t in turns),
            sum(_cached(t, job, 0, chain) for t in turns))


def job_figures(jobs: list[Job]) -> list[JobFigures]:
    """Every job's figures, expected reuse included (module docstring)."""
    chain: Chain = {}
    out = []
    for n, job in enumerate(jobs):
        cached = sum(_cached(t, job, n, chain) for t in _job_order(job))
        turns = [t for s in job.sessions for t in s.turns]
        tools = [t for t in turns if t.input_type == "tool_result"]
        out.append(JobFigures(
            job_id=job.id, sessions=len(job.sessions), requests=len(turns),
            depth=max(s.depth for s in job.sessions),
            input_tokens=sum(t.input_tokens for t in turns),
            output_tokens=sum(t.output_tokens for t in turns), cached_tokens=cached,
            tool_ms=sum(t.tool_wait_ms or 0.0 for t in tools), tool_waits=len(tools),
            tool_waits_unrecorded=sum(t.tool_wait_ms is None for t in tools),
            idle_ms=sum(t.idle_ms or 0.0 for t in turns)))
    return out


def rank(values: list[float], p: float) -> float | None:
    """The nearest-rank `p`th percentile (None of no values)."""
    if not values:
        return None
    s = sorted(values)
    return float(s[max(0, math.ceil(p / 100 * len(s)) - 1)])


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": rank(values, 50), "p95": rank(values, 95),
            "max": max(values) if values else None}


@dataclass(frozen=True, slots=True)
class AgentTraceStats:
    """What `anvil trace stats` prints of agent jobs (module docstring)."""

    jobs: int
    sessions: int
    requests: int
    depth_max: int
    sessions_by_depth: dict[int, int]
    spawning_turns: int
    fanout: dict[str, float | None]  # children per spawning turn
    children_joined: int
    children_background: int
    tool_waits: int
    tool_waits_unrecorded: int
    tool_s_total: float
    tool_s_per_job: dict[str, float | None]
    idle_s_total: float
    idle_s_per_job: dict[str, float | None]
    input_tokens_per_job: dict[str, float | None]
    output_tokens_per_job: dict[str, float | None]
    cached_tokens: int
    input_tokens: int
    reuse_per_job: dict[str, float | None]

    @property
    def expected_reuse(self) -> float:
        return self.cached_tokens / self.input_tokens


def agent_stats(jobs: list[Job]) -> AgentTraceStats:
    """The file's figures, from `job_figures` and the jobs' shape."""
    figs = job_figures(jobs)
    sessions = [s for j in jobs for s in j.sessions]
    children = [s for s in sessions if s.parent_id is not None]
    spawns = Counter((j.id, s.parent_id, s.spawn_after_turn) for j in jobs
                     for s in j.sessions if s.parent_id is not None)
    return AgentTraceStats(
        jobs=len(jobs), sessions=len(sessions), requests=sum(f.requests for f in figs),
        depth_max=max(s.depth for s in sessions),
        sessions_by_depth=dict(sorted(Counter(s.depth for s in sessions).items())),
        spawning_turns=len(spawns), fanout=_spread([float(v) for v in spawns.values()]),
        children_joined=sum(s.joined for s in children),
        children_background=sum(not s.joined for s in children),
        tool_waits=sum(f.tool_waits for f in figs),
        tool_waits_unrecorded=sum(f.tool_waits_unrecorded for f in figs),
        tool_s_total=sum(f.tool_ms for f in figs) / 1000,
        tool_s_per_job=_spread([f.tool_ms / 1000 for f in figs]),
        idle_s_total=sum(f.idle_ms for f in figs) / 1000,
        idle_s_per_job=_spread([f.idle_ms / 1000 for f in figs]),
        input_tokens_per_job=_spread([float(f.input_tokens) for f in figs]),
        output_tokens_per_job=_spread([float(f.output_tokens) for f in figs]),
        cached_tokens=sum(f.cached_tokens for f in figs),
        input_tokens=sum(f.input_tokens for f in figs),
        reuse_per_job=_spread([f.reuse for f in figs]))
