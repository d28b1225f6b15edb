"""Where an agent job starts (`--start-at`): its first turn, or a seeded random turn of its
root session with the history before it primed by one unmeasured request.

Why: a short run of whole jobs from their first turns measures mostly cold starts (empty
contexts, nothing cached), while a serving team's servers live in the steady state of
long-running agents; SemiAnalysis' AgentX starts each job at a sampled point for that
reason. The start must be a pure function of the run's seed, the job's number and its
root's turn count, so the post-processor and `anvil verify` recompute what each job was
meant to send without the trace (`params.agent` carries the figures per job).

- The turn: `start_turn(seed, n, turns)`, uniform over 0 … turns − 1, from
  `PCG64([seed, n])` (run job `n`, not the trace's job: a trace replayed twice starts
  its rounds at different turns). `first`: always 0.
- The prime (`prime_ids`): turn k's blocks that its previous turn also sent, from the
  first, as far as they agree (the history turn k carries); sent as one warm-up request
  whose blocks are exactly those (the chat template's closing after them, so every
  primed block is whole), `max_tokens` 1, never measured nor counted against a budget.
  None at k = 0 or when turn k shares no block with turn k − 1.
- The root sends turns k …; its sub-agents spawned before turn k (with its start, or
  after an earlier turn) are skipped with everything they spawn: their work is in the
  past, and a join on them is satisfied (`skipped`). Those spawned after turn k or later
  run as usual.
"""

from __future__ import annotations

import numpy as np

from anvil_metrics.load.agentjob import Job, Session, Turn

START_AT = ("first", "sampled")


def start_turn(seed: int, n: int, turns: int) -> int:
    """The root turn run job `n` starts at with a sampled start (module docstring)."""
    if turns <= 1:
        return 0
    return int(np.random.Generator(np.random.PCG64([seed, n])).integers(0, turns))


def skipped(job: Job, k: int) -> frozenset[str]:
    """The sessions a job started at root turn `k` never runs (module docstring)."""
    out: set[str] = set()
    for s in job.sessions[1:]:  # every parent before its children
        if s.parent_id in out or (s.parent_id == job.root.id and k > 0 and (
                s.spawn_after_turn is None or s.spawn_after_turn < k)):
            out.add(s.id)
    return frozenset(out)


def prime_ids(root: Session, k: int) -> tuple[int, ...]:
    """The trace ids the prime of a start at root turn `k` sends (module docstring)."""
    if k == 0:
        return ()
    now, before = root.turns[k].hash_ids, root.turns[k - 1].hash_ids
    m = 0
    while m < min(len(now), len(before)) and now[m] == before[m]:
        m += 1
    return now[:m]


def sent_turns(job: Job, k: int) -> list[Turn]:
    """Every turn a job started at root turn `k` sends, measured (the prime aside): the
    root's from k, every session not skipped whole, in the job's order."""
    gone = skipped(job, k)
    return [*job.root.turns[k:], *(t for s in job.sessions[1:] if s.id not in gone
                                   for t in s.turns)]
