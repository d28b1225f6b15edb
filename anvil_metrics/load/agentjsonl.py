"""anvil's agent-job JSONL: every field of `agentjob.Job`, one line per job, session or
turn, so a user can write a job by hand and diff two traces line by line.

Why lines of three kinds rather than one job per line: a job of sub-agents nested in JSON
is one unreadable line; here each line is one thing, and a line's place says what it
belongs to. Sub-agents nest to any depth (Weka's format holds one level).

- `{"type": "job", "job": ID, "block_size": 64, "hash_scope": "local"}` opens a job
  (`hash_scope` "global": ids mean the same blocks in every job of the file; default
  "local"; optional `start_s`: when the job started, seconds on the file's own clock, what
  `--trace-speed` replays). Every line after it, up to the next job line, is the job's.
- `{"type": "session", "session": ID, ...}`: the job's first session line is its root
  (no `parent`); a sub-agent names its `parent` (declared before it), `spawn_after` (the
  parent turn, from 0, after whose answer it starts; absent: with the parent's start) and
  `join_before` (the parent turn that waits for it; absent: background). Optional:
  `tool_tokens`, `system_tokens` (default 0), `t` (its recorded start, s), `duration_ms`,
  `agent_type`.
- `{"type": "turn", "session": ID, "t": S, "in": N, "out": N, ...}`: a turn of a session
  declared before it, in the session's order; `t` in seconds from the job's start.
  Optional: `hash_ids` (default none), `input` ("text" default, or "tool_result"),
  `tool_wait_ms` (a tool_result turn's tool round trip; absent: not recorded), `stop`,
  `stream` (true/false), `model`, `idle_ms`, `api_ms` (absent: not recorded).

Detected by its first line (`"type": "job"`). A bad line is one `TraceError` naming the
file, line (job and session) and field.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from anvil_metrics.jsonio import object_lines
from anvil_metrics.load.agentjob import (
    HASH_SCOPES,
    INPUT_TYPES,
    Job,
    Session,
    Turn,
    hash_id_list,
    kv_where,
    optional_count,
    optional_ms,
    text_field,
)
from anvil_metrics.load.trace import TraceError, count_field, number_field

_KINDS = ("job", "session", "turn")


class _Open:
    """The job being read: its sessions so far and the line each was declared on."""

    def __init__(self, path: str, line: int, obj: dict) -> None:
        self.id = text_field(path, line, obj, "job")
        where = kv_where(line, job=self.id)
        self.block = count_field(path, where, obj, "block_size", 1)
        self.start_s = (None if obj.get("start_s") is None
                        else number_field(path, where, obj, "start_s"))
        self.scope = obj.get("hash_scope", "local")
        if self.scope not in HASH_SCOPES:
            raise TraceError(path, where, "hash_scope", self.scope,
                             " or ".join(f'"{s}"' for s in HASH_SCOPES))
        self.sessions: dict[str, Session] = {}
        self.lines: dict[str, int] = {}
        self.turns: dict[str, list[Turn]] = {}

    def session(self, path: str, line: int, obj: dict) -> None:
        sid = text_field(path, kv_where(line, job=self.id), obj, "session")
        where = kv_where(line, job=self.id, session=sid)
        if sid in self.sessions:
            raise TraceError(path, where, "session", sid, "a session id new to its job")
        parent = text_field(path, where, obj, "parent", required=False)
        if (parent is None) != (not self.sessions):
            raise TraceError(path, where, "parent", parent, "a session declared before it"
                             if self.sessions else "none on the job's first session (its root)")
        if parent is not None and parent not in self.sessions:
            raise TraceError(path, where, "parent", parent,
                             f"a session of job {self.id} declared before it")
        rel = {k: None if obj.get(k) is None else count_field(path, where, obj, k, 0)
               for k in ("spawn_after", "join_before")}
        if parent is None and any(v is not None for v in rel.values()):
            raise TraceError(path, where, "spawn_after", rel["spawn_after"],
                             "none on the root session")
        self.sessions[sid] = Session(
            id=sid, turns=(), parent_id=parent,
            depth=0 if parent is None else self.sessions[parent].depth + 1,
            spawn_after_turn=rel["spawn_after"], join_before_turn=rel["join_before"],
            start_t_s=None if obj.get("t") is None else number_field(path, where, obj, "t"),
            duration_ms=optional_ms(path, where, obj, "duration_ms", 1.0),
            agent_type=text_field(path, where, obj, "agent_type", required=False),
            tool_tokens=optional_count(path, where, obj, "tool_tokens"),
            system_tokens=optional_count(path, where, obj, "system_tokens"))
        self.lines[sid] = line
        self.turns[sid] = []

    def turn(self, path: str, line: int, obj: dict) -> None:
        sid = obj.get("session")
        where = kv_where(line, job=self.id, session=sid)
        if sid not in self.sessions:
            raise TraceError(path, where, "session", sid,
                             f"a session of job {self.id} declared on a line before")
        size = count_field(path, where, obj, "in", 1)
        kind = obj.get("input", "text")
        if kind not in INPUT_TYPES:
            raise TraceError(path, where, "input", kind, '"text" or "tool_result"')
        if kind == "text" and obj.get("tool_wait_ms") is not None:
            raise TraceError(path, where, "tool_wait_ms", obj["tool_wait_ms"],
                             'none on a turn whose input is "text" (a tool\'s result '
                             'comes in a "tool_result" turn)')
        stream = obj.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise TraceError(path, where, "stream", stream, "true or false")
        self.turns[sid].append(Turn(
            t_s=number_field(path, where, obj, "t"), input_tokens=size,
            output_tokens=count_field(path, where, obj, "out", 0),
            hash_ids=hash_id_list(path, where, obj, "hash_ids", size, self.block),
            streamed=stream, model=text_field(path, where, obj, "model", required=False),
            input_type=kind, stop=text_field(path, where, obj, "stop", required=False),
            tool_wait_ms=optional_ms(path, where, obj, "tool_wait_ms", 1.0)
            if kind == "tool_result" else 0.0,
            idle_ms=optional_ms(path, where, obj, "idle_ms", 1.0),
            api_ms=optional_ms(path, where, obj, "api_ms", 1.0)))

    def close(self, path: str) -> Job:
        """The job, its sessions' relations checked against their parents' turns."""
        done: dict[str, Session] = {}
        for sid, s in self.sessions.items():
            where = kv_where(self.lines[sid], job=self.id, session=sid)
            if not self.turns[sid]:
                raise TraceError(path, where, "session", sid, "a session with at least one "
                                 "turn line after it")
            if s.parent_id is not None:
                _check_relation(path, where, s, len(self.turns[s.parent_id]))
            done[sid] = replace(s, turns=tuple(self.turns[sid]))
        return Job(id=self.id, block_size=self.block, sessions=tuple(done.values()),
                   hash_scope=self.scope, start_s=self.start_s)


def _check_relation(path: str, where: str, s: Session, parent_turns: int) -> None:
    after, join = s.spawn_after_turn, s.join_before_turn
    if after is not None and after >= parent_turns:
        raise TraceError(path, where, "spawn_after", after,
                         f"a turn of parent {s.parent_id} (0 to {parent_turns - 1})")
    first = 0 if after is None else after + 1
    if join is not None and not first <= join < parent_turns:
        raise TraceError(path, where, "join_before", join,
                         f"a later turn of parent {s.parent_id} ({first} to "
                         f"{parent_turns - 1}) or none (background)")


def read_agent_jsonl(path: Path) -> list[Job]:
    """Every job of the file, checked (module docstring)."""
    p = str(path)
    jobs: list[Job] = []
    ids: set[str] = set()
    job: _Open | None = None
    for n, obj in object_lines(path, TraceError):
        kind = obj.get("type")
        if kind not in _KINDS:
            raise TraceError(p, n, "type", kind, '"job", "session" or "turn"')
        if kind == "job":
            if job is not None:
                jobs.append(job.close(p))
            job = _Open(p, n, obj)
            if job.id in ids:
                raise TraceError(p, n, "job", job.id, "a job id new to the file")
            ids.add(job.id)
        elif job is None:
            raise TraceError(p, n, "type", kind, '"job" first: a job line opens its lines')
        else:
            getattr(job, kind)(p, n, obj)
    if job is None:
        raise TraceError(p, 1, "type", None, 'a "job" line first')
    jobs.append(job.close(p))
    return jobs


def job_lines(job: Job) -> list[dict[str, Any]]:
    """The job as this format's lines (what `read_agent_jsonl` reads back): the fields
    that are recorded, none that are not."""
    head = {"type": "job", "job": job.id, "block_size": job.block_size,
            "hash_scope": job.hash_scope, "start_s": job.start_s}
    out: list[dict[str, Any]] = [{k: v for k, v in head.items() if v is not None}]
    for s in job.sessions:
        line: dict[str, Any] = {"type": "session", "session": s.id, "parent": s.parent_id,
                                "spawn_after": s.spawn_after_turn,
                                "join_before": s.join_before_turn, "t": s.start_t_s,
                                "duration_ms": s.duration_ms, "agent_type": s.agent_type,
                                "tool_tokens": s.tool_tokens or None,
                                "system_tokens": s.system_tokens or None}
        out.append({k: v for k, v in line.items() if v is not None})
        for t in s.turns:
            turn: dict[str, Any] = {
                "type": "turn", "session": s.id, "t": t.t_s, "in": t.input_tokens,
                "out": t.output_tokens, "hash_ids": list(t.hash_ids) or None,
                "input": t.input_type, "tool_wait_ms": t.tool_wait_ms
                if t.input_type == "tool_result" else None, "stop": t.stop,
                "stream": t.streamed, "model": t.model, "idle_ms": t.idle_ms,
                "api_ms": t.api_ms}
            out.append({k: v for k, v in turn.items() if v is not None})
    return out
