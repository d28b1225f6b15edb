"""An agent job: the one typed model every agent-trace reader builds and the replay, the
`jobs` block and `anvil trace stats` read.

Why a model of its own: a coding agent's traffic is not a list of requests. A job is a
root session of turns that waits on tools between turns and fans out to sub-agents, which
are sessions of their own that run beside it and may hold it back. Three formats describe
that (AIPerf's Weka/AgentX traces, `load/agentweka.py`; inference-perf's OTel span graphs,
`load/agentotel.py`; anvil's own JSONL, `load/agentjsonl.py`); each reader turns its file
into `Job`s, so what follows is defined once, here.

- A `Job` is one trace: its id, the tokens of one `hash_ids` block (`block_size`), whether
  its ids count per job (`hash_scope` "local": id 7 of one job is not id 7 of another) or
  across the file ("global": a system prompt shared by every job is the same ids), its
  sessions, the root first and every parent before its children, and its recorded start
  (`start_s`, seconds on the trace's own clock: an open loop of job starts replays them,
  `replay.JobSchedule`; None: not recorded, as in AIPerf's Weka traces, whose times are
  all relative to their job's start).
- A `Session` is one agent: its turns in order, its parent session (None: the root), its
  depth (root 0, its sub-agents 1, theirs 2), and how it relates to its parent:
  `spawn_after_turn` (it starts when that parent turn's answer ends; None: with the
  parent's start), `join_before_turn` (that parent turn waits for this session's last
  answer; None: it runs in the background, blocking nothing). Its own tool and system
  prefix tokens are the recorded sizes of those parts of its first prompt.
- A `Turn` is one request: its recorded start `t_s` (seconds from the job's start), input
  and output tokens, `hash_ids` (one id per `block_size` tokens of input; equal ids in
  equal positions after equal ids are an equal prefix: the session's history is its
  earlier blocks, its new blocks follow), streamed or not, model, input type (`text` or
  `tool_result`), stop reason, `tool_wait_ms` (the tool round trip whose result it
  carries: 0.0 when it carries none, None when it does but the time was not recorded),
  `idle_ms` (the client's think/idle time before it that is not a tool's; None: not
  recorded) and `api_ms` (the recorded server time; None: not recorded).

Semantics the readers share (AIPerf's loader reads Weka traces the same way):

- spawn: a sub-agent starts from the last parent request before its marker (in the
  trace's order; a marker before any parent request starts with the parent);
- join: the first later parent request whose `t` is at or after the sub-agent's end
  (its start `t` + `duration_ms`) waits for it; if there is none, or its duration was not
  recorded (AIPerf's `async_launched`), it runs in the background;
- tool: a `tool_use` answer followed by a `tool_result` request is one tool round trip,
  whose duration is that request's recorded `think_time`.

A bad entry is a `trace.TraceError`: one line naming the file, the line (and the trace
and agent id) and the field, the bad value and what is allowed (exit 2, before any load).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.jsonio import object_lines
from anvil_metrics.load.trace import TraceError, count_field, number_field

INPUT_TYPES = ("text", "tool_result")
HASH_SCOPES = ("local", "global")
TOOL_USE = "tool_use"


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a session (module docstring)."""

    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    streamed: bool | None = None
    model: str | None = None
    input_type: str = "text"
    stop: str | None = None
    tool_wait_ms: float | None = 0.0
    idle_ms: float | None = None
    api_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """One agent of a job: its turns and how it relates to its parent (module docstring)."""

    id: str
    turns: tuple[Turn, ...]
    parent_id: str | None = None
    depth: int = 0
    spawn_after_turn: int | None = None
    join_before_turn: int | None = None
    start_t_s: float | None = None  # the sub-agent's recorded start (its marker's t)
    duration_ms: float | None = None  # its recorded run time; None: not recorded
    agent_type: str | None = None
    tool_tokens: int = 0
    system_tokens: int = 0

    @property
    def joined(self) -> bool:
        """A child its parent waits for (the root: False)."""
        return self.join_before_turn is not None


@dataclass(frozen=True, slots=True)
class Job:
    """One agent job: the root session and its sub-agents (module docstring)."""

    id: str
    block_size: int
    sessions: tuple[Session, ...]
    hash_scope: str = "local"
    start_s: float | None = None

    @property
    def root(self) -> Session:
        return self.sessions[0]

    @property
    def tool_tokens(self) -> int:
        return self.root.tool_tokens

    @property
    def system_tokens(self) -> int:
        return self.root.system_tokens

    def children(self, session_id: str) -> list[Session]:
        """The sessions `session_id` spawns, in the job's order."""
        return [s for s in self.sessions if s.parent_id == session_id]

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def text_field(path: str, where: int | str, obj: dict, key: str, name: str | None = None,
               required: bool = True) -> str | None:
    """`obj[key]`, a non-empty string (or, not `required`, absent: None), else a
    `TraceError` naming the field."""
    v = obj.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise TraceError(path, where, name or key, v, "a non-empty string")
    return v


def optional_ms(path: str, where: int | str, obj: dict, key: str, scale: float,
                name: str | None = None) -> float | None:
    """`obj[key]` times `scale` (seconds to ms: 1000), a number >= 0 to the nanosecond
    (a recorded 0.037 s is 37.0 ms, not 36.99999999999999); absent or null: None (not
    recorded)."""
    if obj.get(key) is None:
        return None
    return round(number_field(path, where, obj, key, scale, name), 6)


def optional_count(path: str, where: int | str, obj: dict, key: str,
                   name: str | None = None) -> int:
    """`obj[key]`, a whole number >= 0; absent or null: 0 (a prefix of no tokens)."""
    return 0 if obj.get(key) is None else count_field(path, where, obj, key, 0, name)


def hash_id_list(path: str, where: int | str, obj: dict, key: str, input_tokens: int,
                 block_size: int, name: str | None = None) -> tuple[int, ...]:
    """`obj[key]` (absent: no ids), whole numbers, at most one per `block_size` tokens of
    `input_tokens` (blocks past the ids are the request's own)."""
    ids = obj.get(key, [])
    if not isinstance(ids, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in ids):
        raise TraceError(path, where, name or key, ids, "a list of whole numbers")
    most = -(-input_tokens // block_size)
    if len(ids) > most:
        raise TraceError(path, where, name or key, f"{len(ids)} ids",
                         f"at most one id per {block_size}-token block of {input_tokens} "
                         f"input tokens ({most})")
    return tuple(ids)


def tool_turn(before: Turn | None, input_type: str, wait_ms: float | None
              ) -> tuple[float | None, float | None]:
    """(tool_wait_ms, idle_ms) of a turn whose recorded client delay before it is
    `wait_ms`: a tool round trip after a `tool_use` answer carrying a `tool_result` (module
    docstring), else idle time."""
    if before is not None and before.stop == TOOL_USE and input_type == "tool_result":
        return wait_ms, 0.0
    return 0.0, wait_ms


def relate(parent_turns: list[Turn], after: int | None, start_s: float,
           duration_ms: float | None) -> int | None:
    """The parent turn a sub-agent joins before (module docstring): the first parent turn
    after `after` (None: from the first) whose `t_s` is at or after the sub-agent's end;
    None (background) if there is none or the duration was not recorded."""
    if duration_ms is None:
        return None
    end_s = start_s + duration_ms / 1000
    for k in range(0 if after is None else after + 1, len(parent_turns)):
        if parent_turns[k].t_s >= end_s:
            return k
    return None


def kv_where(line: int | str, **ids: Any) -> str:
    """A place in a file for a `TraceError`: the line and the ids that are known,
    `3 (trace t1, agent a2)`."""
    known = ", ".join(f"{k} {v}" for k, v in ids.items() if v is not None)
    return f"{line} ({known})" if known else str(line)


def trace_objects(path: Path) -> Iterator[tuple[str, int, dict]]:
    """Each trace object of `path`, as (file, line, object): a folder's `.json` files in
    name order, one trace each (line 1); a `.json` file that is one JSON object (over any
    number of lines); else one trace per JSONL line (the published corpora)."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    for f in files:
        if f.suffix == ".json":
            try:
                obj = orjson.loads(f.read_bytes())
            except orjson.JSONDecodeError as e:
                if path.is_dir():
                    raise TraceError(str(f), 1, "file", f.name, f"one JSON object ({e})"
                                     ) from None
                obj = None  # perhaps JSONL named .json: read it by lines below
            if isinstance(obj, dict):
                yield str(f), 1, obj
                continue
        for n, obj in object_lines(f, TraceError):
            yield str(f), n, obj
