"""An agent job's request bodies: each turn's prompt from its `hash_ids`, its exact output,
and the headers that name its job, session and turn.

Why: the server's prefix cache must see exactly the sharing the trace records. A turn's
`hash_ids` are its session's history blocks and then its new ones, so its prompt is those
blocks' texts in order (`prep/traceprompts.TracePrompts`: each id one text of
`block_size` one-token words, the same id the same text everywhere), sized to the turn's
`in` tokens with the chat template's own tokens inside the blocks: the first block less
the template's opening (`opening_tokens`, where the server's `/tokenize` shows it), the
last block its remainder less the closing, so every id is one exact block of the prompt
as the server counts it and the server's prefix-cache blocks fall on the trace's (with the
opening unknown, 0, the server's blocks are shifted by it and the first hit is a block
late); the next turn of the session begins with the same blocks, which is its
history. The answer is not sent back: the trace's ids already say what the next prompt
shares, and the server's answer text would make the sizes inexact.

Ids are namespaced by the job's `hash_scope`: "local" ids count per job, so job k's id 7
is the block `(k + 1) << 40 | 7` (two jobs' "local" ids differ); "global" ids are the
file's own (a system prompt every job shares). Input past the ids is the turn's own block
(an id of its job, session and turn). Output is exactly `out` (`max_tokens`, `ignore_eos`,
`min_tokens`, as `body.TraceBodies`). A body is built when its turn is sent, off nothing
the load shares: one turn is a few kB of text (block texts are cached by
`traceprompts.block_text`), so a trace of thousands of jobs is never held as bodies.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from anvil_metrics.headers import AGENT_JOB, AGENT_SESSION, AGENT_TURN
from anvil_metrics.load.agentjob import Job, Session
from anvil_metrics.load.agentstart import prime_ids
from anvil_metrics.load.body import SAFE_SESSION, RequestBodies, body_fields
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.prep.traceprompts import TracePrompts

_JOB_SHIFT = 40  # a local id's job: (job index + 1) << 40
_OWN_IDS = 1 << 60  # a turn's own block, past the trace's ids
MAX_SPARES = 8  # sub-agent connections opened per agent slot before the load


def scoped(job: Job, n: int, ids: tuple[int, ...]) -> tuple[int, ...]:
    """Trace ids as run job `n`'s blocks (module docstring: a "local" id is its job's)."""
    base = (n + 1) << _JOB_SHIFT if job.hash_scope == "local" else 0
    return tuple(base | h for h in ids)


def block_ids(job: Job, n: int, session: Session, k: int) -> tuple[int, ...]:
    """The blocks of turn `k` of `session` in the run's job `n` (module docstring): its
    ids, namespaced, and an own block when its input reaches past them."""
    turn = session.turns[k]
    ids = scoped(job, n, turn.hash_ids)
    if len(ids) * job.block_size < turn.input_tokens:
        own = zlib.crc32(f"{session.id}/{k}".encode())
        ids += (_OWN_IDS + (n << 32) + own,)
    return ids


def header_id(name: str) -> str:
    """A job's or session's id as its header sends it (`AgentBodies.headers`)."""
    return name if SAFE_SESSION.fullmatch(name) else f"h-{zlib.crc32(name.encode()):08x}"


class AgentBodies(RequestBodies):
    """Bodies and headers of every agent turn (module docstring). The run's jobs are
    numbered in the order they start (the budget's `Ticket.start`, a master's on every
    worker): job `n` replays the trace's job
    `n % len(jobs)` (a run of more jobs than the trace holds goes round again), and `n` is
    what its records carry (`extra.job`, the row's `job_id`); its blocks are its own."""

    def __init__(self, sc: Scenario, model: str, jobs: list[Job], run_nonce: str,
                 overhead_tokens: int, opening_tokens: int = 0) -> None:
        self.jobs = jobs
        self.opening_tokens = opening_tokens  # a master's workers get it (`WorkerSetup`)
        self._fields = {k: v for k, v in body_fields(sc, model).items()
                        if k not in ("max_tokens", "ignore_eos", "min_tokens")}
        self._prompts = {b: TracePrompts(run_nonce, b, overhead_tokens, opening_tokens)
                         for b in {j.block_size for j in jobs}}
        # each job's blocks, kept while it runs: a job's context (30k tokens: 470 blocks)
        # outgrows `block_text`'s cache when many run at once, and making one block again
        # costs ~12 µs (a 30k-token prompt: 6 ms of the event loop, against 0.1 ms kept)
        self._blocks: dict[int, dict[tuple[int, int], str]] = {}

    @property
    def spare_connections(self) -> int:
        """How many sub-agent connections an agent slot opens before the load: the most
        sub-agents of one job, at most `MAX_SPARES` (more are opened when needed)."""
        return min(MAX_SPARES, max((len(j.sessions) - 1 for j in self.jobs), default=0))

    def job(self, n: int) -> Job:
        return self.jobs[n % len(self.jobs)]

    def text(self, n: int, session: Session, k: int) -> str:
        job = self.job(n)
        turn = session.turns[k]
        return self._prompts[job.block_size].text(
            turn.input_tokens, block_ids(job, n, session, k),
            memo=self._blocks.setdefault(n, {}))

    def job_ended(self, n: int) -> None:
        """Job `n` has ended: its blocks are let go."""
        self._blocks.pop(n, None)

    def prime(self, n: int, k: int) -> tuple[bytes, int] | None:
        """The warm-up request priming run job `n` started at root turn `k`
        (`load/agentstart.py`) and its prompt's size as the server counts it: the blocks
        of `prime_ids`, each whole (the template's closing after the last), `max_tokens`
        1; None when there is nothing to prime."""
        job = self.job(n)
        ids = prime_ids(job.root, k)
        if not ids:
            return None
        prompts = self._prompts[job.block_size]
        size = len(ids) * job.block_size + prompts.overhead_tokens - prompts.opening_tokens
        text = prompts.text(size, scoped(job, n, ids), memo=self._blocks.setdefault(n, {}))
        return orjson.dumps({**self._fields, "max_tokens": 1, "messages": [
            {"role": "user", "content": text}]}), size

    def body(self, n: int, session: Session, k: int) -> bytes:
        out = session.turns[k].output_tokens
        return orjson.dumps({**self._fields, "max_tokens": out, "ignore_eos": True,
                             "min_tokens": out, "messages": [
                                 {"role": "user", "content": self.text(n, session, k)}]})

    def build_parts(self, size: int, index: int, warmup: bool = False) -> tuple[bytes, ...]:
        raise NotImplementedError("an agent turn's body is `body(job, session, turn)`")

    def planned(self, index: int, size: int) -> int | None:
        return None  # each turn's own `in` (the user passes it with the turn)

    def headers(self, n: int, session: Session, k: int) -> bytes:
        """The three header lines naming the request (`headers.AGENT_JOB` and the two
        after it): an id as it is when it is plain (`body.SAFE_SESSION`), else "h-" and its
        CRC-32; a job replayed again (`n` past the trace's jobs) is "<id>.<round>"."""
        job = header_id(self.job(n).id)
        if n >= len(self.jobs):
            job = f"{job}.{n // len(self.jobs)}"
        return (f"{AGENT_JOB}: {job}\r\n{AGENT_SESSION}: {header_id(session.id)}\r\n"
                f"{AGENT_TURN}: {k}\r\n").encode()

    def turn_extra(self, n: int, session: Session, k: int, tool_wait_ns: int,
                   join_wait_ns: int = 0) -> dict[str, Any]:
        """The record's `extra` of the turn: the run's job number, the session as its
        position in the job (the header lists the ids: `params.agent`), its parent's, its
        turn from 1, its depth, the tool wait slept before it and its wait for its
        sub-agents' joins."""
        job = self.job(n)
        place = {s.id: i for i, s in enumerate(job.sessions)}
        return {"job": n, "session": place[session.id],
                "parent_session": None if session.parent_id is None
                else place[session.parent_id],
                "turn": k + 1, "depth": session.depth, "tool_wait_ns": tool_wait_ns,
                "join_wait_ns": join_wait_ns}
