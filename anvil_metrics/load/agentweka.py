"""AIPerf's Weka/AgentX agentic trace format read into `agentjob.Job`s.

Why this format: SemiAnalysis' AgentX replays Weka's Claude-Code captures through AIPerf,
so the published corpora are in it. The field list is read (never copied) from AIPerf's
loader in repo `ai-dynamo/aiperf`, folder `src/aiperf/dataset/loader`: its modules
`weka_trace_models` (at commit 90f31d18c57a572640729b1070a01b1bf2c7c7e4) and `weka_trace`
(at commit 0cea22b0afbec0218a2973bf76b4c3afb428a969):

- a trace (one job): `id`, `models`, `block_size` (> 0; 64 in the published captures),
  `hash_id_scope` (only "local": ids count per trace; anything else is refused, as
  AIPerf's schema does), `tool_tokens`, `system_tokens` (default 0), `requests` (in order),
  `totals` (opaque, ignored);
- a request: `t` (s from the trace's start), `type` ("s" streamed, "n" not), `model`,
  `in`, `out`, `hash_ids`, `input_types` (`["text"]`, `["tool_result"]`), `output_types`,
  `stop` ("", `tool_use`, `end_turn`), `api_time` and `think_time` (s; null: not
  recorded), `ttft` (streamed only; not kept);
- a sub-agent marker: `t` (its spawn), `type: "subagent"`, `agent_id`, `subagent_type`,
  `duration_ms` (null when `status` is `async_launched`), `total_tokens`,
  `tool_use_count`, `status`, `requests` (its own, "s" or "n" only), `models`,
  `tool_tokens`, `system_tokens`.

A sub-agent's request `t` earlier than its marker's is relative to the marker (older
captures), as AIPerf reads it. The format holds one level of sub-agents: a marker inside
a sub-agent's requests is refused (anvil's JSONL holds any depth). Spawn, join and tool
rules: `agentjob`'s docstring. AIPerf also splits a sub-agent's requests into several
chains by hash-id heuristics; anvil keeps one marker one session, as recorded.

Accepted: one trace per `.json` file (a file, or a folder of them: AIPerf's loader) and
one trace per JSONL line (the published corpora).

No job start: every time of the format is relative to its trace's start, and neither a
trace nor AIPerf's loader holds a wall-clock or file-wide time (`Job.start_s` is None), so
these jobs replay closed (`--agents`) or at `--rate`; `--trace-speed` is refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from anvil_metrics.load.agentjob import (
    Job,
    Session,
    Turn,
    hash_id_list,
    kv_where,
    optional_count,
    optional_ms,
    relate,
    text_field,
    tool_turn,
    trace_objects,
)
from anvil_metrics.load.trace import TraceError, count_field, number_field

_REQUEST_TYPES = ("s", "n")
_EPSILON_S = 1e-6  # AIPerf's: a child's t this far before its marker is still absolute


def _turn(path: str, where: str, r: dict, name: str, block: int, before: Turn | None,
          base_s: float | None = None) -> Turn:
    """One "s"/"n" request; `base_s`: the sub-agent marker's t (relative times)."""
    t_s = number_field(path, where, r, "t", name=f"{name}.t")
    if base_s is not None and t_s + _EPSILON_S < base_s:
        t_s += base_s
    size = count_field(path, where, r, "in", 1, f"{name}.in")
    types = r.get("input_types", [])
    if not isinstance(types, list) or any(x not in ("text", "tool_result") for x in types):
        raise TraceError(path, where, f"{name}.input_types", types,
                         'a list of "text" and "tool_result"')
    input_type = "tool_result" if "tool_result" in types else "text"
    stop = r.get("stop") or None
    if stop is not None and not isinstance(stop, str):
        raise TraceError(path, where, f"{name}.stop", stop, "a string (tool_use, end_turn)")
    tool_ms, idle_ms = tool_turn(before, input_type, optional_ms(
        path, where, r, "think_time", 1000.0, f"{name}.think_time"))
    return Turn(t_s=t_s, input_tokens=size,
                output_tokens=count_field(path, where, r, "out", 0, f"{name}.out"),
                hash_ids=hash_id_list(path, where, r, "hash_ids", size, block,
                                      f"{name}.hash_ids"),
                streamed=r["type"] == "s",
                model=text_field(path, where, r, "model", f"{name}.model", required=False),
                input_type=input_type, stop=stop, tool_wait_ms=tool_ms, idle_ms=idle_ms,
                api_ms=optional_ms(path, where, r, "api_time", 1000.0, f"{name}.api_time"))


def _turns(path: str, where: str, reqs: list, name: str, block: int,
           base_s: float | None = None) -> list[Turn]:
    out: list[Turn] = []
    for i, r in enumerate(reqs):
        kind = r.get("type") if isinstance(r, dict) else None
        if kind not in _REQUEST_TYPES:
            raise TraceError(path, where, f"{name}[{i}].type", kind,
                             '"s" or "n" (a sub-agent holds no sub-agent marker in this '
                             "format; anvil's agent JSONL holds any depth)")
        out.append(_turn(path, where, r, f"{name}[{i}]", block, out[-1] if out else None,
                         base_s))
    return out


def _sub_agent(path: str, line: int, tid: str, r: dict, name: str, block: int
               ) -> tuple[float, Session]:
    aid = text_field(path, kv_where(line, trace=tid), r, "agent_id", f"{name}.agent_id")
    where = kv_where(line, trace=tid, agent=aid)
    start_s = number_field(path, where, r, "t", name=f"{name}.t")
    reqs = r.get("requests")
    if not isinstance(reqs, list) or not reqs:
        raise TraceError(path, where, f"{name}.requests", reqs, "a non-empty list of requests")
    turns = _turns(path, where, reqs, f"{name}.requests", block, start_s)
    session = Session(
        id=aid, turns=tuple(turns), depth=1, start_t_s=start_s,
        duration_ms=None if r.get("duration_ms") is None else number_field(
            path, where, r, "duration_ms", name=f"{name}.duration_ms"),
        agent_type=text_field(path, where, r, "subagent_type", f"{name}.subagent_type",
                              required=False),
        tool_tokens=optional_count(path, where, r, "tool_tokens", f"{name}.tool_tokens"),
        system_tokens=optional_count(path, where, r, "system_tokens",
                                     f"{name}.system_tokens"))
    return start_s, session


def weka_job(path: str, line: int, obj: dict) -> Job:
    """One Weka trace object as a job (module docstring)."""
    tid = obj.get("id")
    tid = text_field(path, line, obj, "id") if not isinstance(tid, int) else str(tid)
    where = kv_where(line, trace=tid)
    if obj.get("hash_id_scope") != "local":
        raise TraceError(path, where, "hash_id_scope", obj.get("hash_id_scope"),
                         '"local" (ids count per trace: the only scope of AIPerf\'s format)')
    block = count_field(path, where, obj, "block_size", 1)
    reqs = obj.get("requests")
    if not isinstance(reqs, list) or not reqs:
        raise TraceError(path, where, "requests", reqs, "a non-empty list of requests")
    parent: list[Turn] = []
    markers: list[tuple[int | None, float, Session]] = []  # (spawn after, start, session)
    for i, r in enumerate(reqs):
        if isinstance(r, dict) and r.get("type") == "subagent":
            start_s, s = _sub_agent(path, line, tid, r, f"requests[{i}]", block)
            markers.append((len(parent) - 1 if parent else None, start_s, s))
        else:
            parent.append(_turn_at(path, where, r, i, block, parent[-1] if parent else None))
    if not parent:
        raise TraceError(path, where, "requests", f"{len(reqs)} sub-agent markers",
                         'at least one "s" or "n" request of the trace\'s own')
    root = Session(id=tid, turns=tuple(parent),
                   tool_tokens=optional_count(path, where, obj, "tool_tokens"),
                   system_tokens=optional_count(path, where, obj, "system_tokens"))
    children = [replace(s, parent_id=tid, spawn_after_turn=after,
                        join_before_turn=relate(parent, after, start_s, s.duration_ms))
                for after, start_s, s in markers]
    return Job(id=tid, block_size=block, sessions=(root, *children), hash_scope="local")


def _turn_at(path: str, where: str, r: object, i: int, block: int, before: Turn | None
             ) -> Turn:
    kind = r.get("type") if isinstance(r, dict) else None
    if kind not in _REQUEST_TYPES:
        raise TraceError(path, where, f"requests[{i}].type", kind, '"s", "n" or "subagent"')
    assert isinstance(r, dict)
    return _turn(path, where, r, f"requests[{i}]", block, before)


def read_weka(path: Path) -> list[Job]:
    """Every trace of `path` (a `.json` file, a folder of them, or JSONL), checked."""
    return [weka_job(f, n, obj) for f, n, obj in trace_objects(path)]
