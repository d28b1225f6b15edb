"""Agent-job traces for the tests, generated from a seed, with what a replay must find known
in advance: the jobs themselves (`agentjob.Job`), which each reader must read back.

`agent_jobs` draws jobs of a root session whose turns wait on tools, and spawning turns
that fan out to 3 to 5 sub-agents each (some joined by a later parent turn, some in the
background), one level deep (so AIPerf's format can hold them) or, with `deep=True`, a
sub-agent of a sub-agent too. Each turn's `hash_ids` are its session's history blocks and
then new blocks; every job's root opens with the same `SHARED_BLOCKS` ids (a common system
prefix shared across jobs when the scope is "global"). `write_agent_jsonl` and
`write_weka` write them in anvil's and AIPerf's formats; times are whole milliseconds, so
both formats carry them exactly.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import orjson

from anvil_metrics.load.agentjob import Job, Session, Turn
from anvil_metrics.load.agentjsonl import job_lines

BLOCK = 64
SHARED_BLOCKS = 4  # ids 0..3: the system prefix every job's root opens with
_JOB_IDS = 1000  # job k's own ids start at (k + 1) * _JOB_IDS


class _Ids:
    def __init__(self, first: int) -> None:
        self.next = first

    def take(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def _session_turns(rng: random.Random, ids: _Ids, start_s: float, n: int,
                   prefix: list[int]) -> list[Turn]:
    """`n` turns from `start_s`: each turn's prompt is the history so far (whole blocks)
    and new blocks; a turn after a `tool_use` answer carries its result after a tool
    wait. Times are whole ms."""
    turns: list[Turn] = []
    history = list(prefix)
    t_ms = round(start_s * 1000)
    for k in range(n):
        new = rng.randint(1, 3)
        blocks = history + ids.take(new)
        # a partial last block, long enough to hold the chat template's closing and a word
        # (every prompt sized exactly): at least 6 tokens in the last block, 9 in all
        size = max(len(blocks) * BLOCK - rng.randint(0, BLOCK - 1),
                   BLOCK * (len(blocks) - 1) + 6, 9)
        tool = k > 0 and turns[-1].stop == "tool_use"
        wait = float(rng.randint(5, 60)) if tool else 0.0
        idle = 0.0 if tool else float(rng.randint(0, 20))
        t_ms += round(wait + idle) + (rng.randint(30, 80) if k else 0)
        last = k == n - 1
        turns.append(Turn(t_s=t_ms / 1000, input_tokens=size,
                          output_tokens=rng.randint(4, 24), hash_ids=tuple(blocks),
                          streamed=True, model="sim", input_type="tool_result" if tool
                          else "text", stop="end_turn" if last or rng.random() < 0.3
                          else "tool_use", tool_wait_ms=wait, idle_ms=idle if k else None,
                          api_ms=None))
        history = blocks[:-1]  # the partial last block is not history
    return turns


def _job(rng: random.Random, k: int, scope: str, deep: bool) -> Job:
    ids = _Ids((k + 1) * _JOB_IDS)
    root_turns = _session_turns(rng, ids, 0.0, rng.randint(4, 6), list(range(SHARED_BLOCKS)))
    sessions: list[Session] = []
    spawn_at = rng.randint(0, 1)
    after_ms = round(root_turns[spawn_at + 1].t_s * 1000)  # the turn a joined child outlasts
    for c in range(rng.randint(3, 5)):
        start_ms = round(root_turns[spawn_at].t_s * 1000) + 1
        child = _session_turns(rng, ids, start_ms / 1000, rng.randint(1, 3), [])
        joined = c % 2 == 0
        end_ms = max(round(child[-1].t_s * 1000) + 100, after_ms + 1)
        sessions.append(Session(
            id=f"j{k}-a{c}", turns=tuple(child), parent_id=f"j{k}", depth=1,
            spawn_after_turn=spawn_at, join_before_turn=spawn_at + 2 if joined else None,
            start_t_s=start_ms / 1000,
            duration_ms=float(end_ms - start_ms) if joined else None, agent_type="Explore"))
    latest_ms = max(round(s.start_t_s * 1000 + s.duration_ms) for s in sessions if s.joined)
    shift_ms = max(0, latest_ms + 10 - round(root_turns[spawn_at + 2].t_s * 1000))
    root_turns = [t if i < spawn_at + 2 else replace(
        t, t_s=(round(t.t_s * 1000) + shift_ms) / 1000) for i, t in enumerate(root_turns)]
    if deep:
        sub = sessions[0]
        grand = _session_turns(rng, ids, sub.turns[0].t_s + 0.001, 1, [])
        sessions.insert(1, Session(id=f"{sub.id}-b0", turns=tuple(grand), parent_id=sub.id,
                                   depth=2, spawn_after_turn=0, start_t_s=grand[0].t_s))
    root = Session(id=f"j{k}", turns=tuple(root_turns), tool_tokens=BLOCK,
                   system_tokens=BLOCK * (SHARED_BLOCKS - 1))
    return Job(id=f"j{k}", block_size=BLOCK, sessions=(root, *sessions), hash_scope=scope)


def agent_jobs(n: int, seed: int = 0, *, scope: str = "global", deep: bool = False
               ) -> list[Job]:
    """`n` jobs drawn from `seed` (module docstring)."""
    rng = random.Random(seed)
    return [_job(rng, k, scope, deep) for k in range(n)]


def write_agent_jsonl(path: Path, jobs: list[Job]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for j in jobs for x in job_lines(j)))
    return path


def _weka_request(t: Turn) -> dict:
    return {"t": t.t_s, "type": "s" if t.streamed else "n", "model": t.model,
            "in": t.input_tokens, "out": t.output_tokens, "hash_ids": list(t.hash_ids),
            "input_types": [t.input_type], "output_types": ["text"], "stop": t.stop or "",
            "api_time": None, "think_time": None if (t.tool_wait_ms or t.idle_ms) is None
            else ((t.tool_wait_ms or 0.0) + (t.idle_ms or 0.0)) / 1000}


def weka_trace(job: Job) -> dict:
    """The job as one AIPerf Weka trace object (depth 1 only: its format's limit)."""
    root = job.root
    reqs: list[dict] = []
    for k, t in enumerate(root.turns):
        reqs.append(_weka_request(t))
        for s in job.children(root.id):
            if s.spawn_after_turn == k:
                reqs.append({"t": s.start_t_s, "type": "subagent", "agent_id": s.id,
                             "subagent_type": s.agent_type, "duration_ms": s.duration_ms,
                             "status": "completed" if s.joined else "async_launched",
                             "requests": [_weka_request(x) for x in s.turns],
                             "models": ["sim"], "tool_tokens": 0, "system_tokens": 0})
    return {"id": job.id, "models": ["sim"], "block_size": job.block_size,
            "hash_id_scope": "local", "tool_tokens": root.tool_tokens,
            "system_tokens": root.system_tokens, "requests": reqs, "totals": None}


def write_weka(path: Path, jobs: list[Job]) -> Path:
    """One trace per JSONL line (the published corpora's layout)."""
    path.write_bytes(b"".join(orjson.dumps(weka_trace(j)) + b"\n" for j in jobs))
    return path
