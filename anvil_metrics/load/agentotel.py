"""OpenTelemetry GenAI span graphs, as inference-perf replays them, read into
`agentjob.Job`s.

Why this graph format and not TensorRT-LLM's (`parallel_start`/`parallel_end` with tool
`duration_ms`): inference-perf documents its OTel replay in full (repo
`kubernetes-sigs/inference-perf`, its page `otel_trace_replay` in `docs` at commit
03e89d4a5badf37093c96dab524801ab420a0b18: the file format, the graph rules, the
loader's options), on the OpenTelemetry GenAI semantic conventions that agent frameworks
already emit; TensorRT-LLM's agentic format has no published description to read.

The file: one trace per `.json` file (a file or a folder of them) or one per JSONL line,
each an object with a `spans` list. A span has `span_id`, `parent_span_id` (or
`parent_id`; absent: a root span), `name`, `start_time` and `end_time` (ISO 8601) and
`attributes`. Its kind is `attributes["gen_ai.operation.name"]` (else the first word of
its name): `chat` (or a span with `gen_ai.input.messages`) is a request, `execute_tool` a
tool call, `invoke_agent` an agent. A request's sizes are `gen_ai.usage.input_tokens`
(or `prompt_tokens`) and `gen_ai.usage.output_tokens` (or `completion_tokens`); its model
`gen_ai.request.model`; its stop `gen_ai.response.finish_reasons[0]` (`tool_calls` read
as `tool_use`, `stop` as `end_turn`).

Where inference-perf infers a request's predecessors from message text and timing, anvil
reads the span tree: a request belongs to the session of its nearest `invoke_agent`
ancestor; an agent nested in another is a sub-agent of it (any depth). The root is the
single outermost agent (or the requests under none). A sub-agent spawns after the parent
request that started last before it and joins the first later parent request that starts
at or after its end (`agentjob`'s rules, on span times). A session's tool spans between
two of its requests are one tool round trip: from the first one's start to the last one's
end; the rest of the gap is idle time. OTel holds no block ids: each request's
`hash_ids` are its session's history (the previous request's whole blocks, as far as the
shorter of the two) and then new ids, in blocks of `BLOCK_TOKENS` (AgentX's 64), ids
counting per trace.

A job's start (`Job.start_s`, what `--trace-speed` replays) is its earliest span's start
(its root's, in a well-formed trace), in seconds since the epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from anvil_metrics.load.agentjob import Job, Session, Turn, kv_where, relate, trace_objects
from anvil_metrics.load.trace import TraceError, count_field

BLOCK_TOKENS = 64
_STOPS = {"tool_calls": "tool_use", "stop": "end_turn"}


def _kind(span: dict) -> str:
    attrs = span["attributes"]
    op = attrs.get("gen_ai.operation.name") or str(span.get("name", "")).split(" ")[0]
    return "chat" if "gen_ai.input.messages" in attrs else op


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _time_s(path: str, where: str, span: dict, key: str, i: int) -> float:
    """A span's time in seconds since the epoch, exact to its microsecond (a naive time is
    UTC): a float of the epoch's seconds would blur milliseconds."""
    v = span.get(key)
    try:
        dt = datetime.fromisoformat(v)  # type: ignore[arg-type]
        return ((dt if dt.tzinfo else dt.replace(tzinfo=UTC)) - _EPOCH) // _US / 1e6
    except (TypeError, ValueError):
        raise TraceError(path, where, f"spans[{i}].{key}", v,
                         "an ISO 8601 time (2024-01-01T00:00:00.125Z)") from None


def _spans(path: str, where: str, obj: dict) -> dict[str, dict[str, Any]]:
    spans = obj.get("spans")
    if not isinstance(spans, list) or not spans:
        raise TraceError(path, where, "spans", spans, "a non-empty list of spans")
    out: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(spans):
        sid = s.get("span_id") if isinstance(s, dict) else None
        if not isinstance(sid, str) or not sid or sid in out:
            raise TraceError(path, where, f"spans[{i}].span_id", sid,
                             "a string new to the trace")
        if not isinstance(s.get("attributes", {}), dict):
            raise TraceError(path, where, f"spans[{i}].attributes", s["attributes"],
                             "an object of attributes")
        s = {**s, "attributes": s.get("attributes", {}), "_i": i,
             "_parent": s.get("parent_span_id", s.get("parent_id"))}
        s["_start"] = _time_s(path, where, s, "start_time", i)
        s["_end"] = _time_s(path, where, s, "end_time", i)
        out[sid] = s
    return out


def _agent_of(spans: dict[str, dict], span: dict) -> str | None:
    """The span id of `span`'s nearest `invoke_agent` ancestor (None: none)."""
    seen = 0
    p = span["_parent"]
    while p in spans and seen < len(spans):
        if _kind(spans[p]) == "invoke_agent":
            return p
        p, seen = spans[p]["_parent"], seen + 1
    return None


def _turn(path: str, where: str, s: dict, t0: float, ids: list[int], before: Turn | None,
          gap: tuple[float | None, float | None], next_id: list[int]) -> Turn:
    a, name = s["attributes"], f"spans[{s['_i']}].attributes"
    size_key = next((k for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
                     if k in a), "gen_ai.usage.input_tokens")
    out_key = next((k for k in ("gen_ai.usage.output_tokens",
                                "gen_ai.usage.completion_tokens") if k in a),
                   "gen_ai.usage.output_tokens")
    size = count_field(path, where, a, size_key, 1, f"{name}.{size_key}")
    keep = 0 if before is None else min(before.input_tokens, size) // BLOCK_TOKENS
    blocks = ids[:keep]
    while len(blocks) < -(-size // BLOCK_TOKENS):
        blocks.append(next_id[0])
        next_id[0] += 1
    reasons = a.get("gen_ai.response.finish_reasons")
    stop = reasons[0] if isinstance(reasons, list) and reasons else None
    model = a.get("gen_ai.request.model")
    tool_ms, idle_ms = gap
    return Turn(t_s=round(s["_start"] - t0, 6), input_tokens=size,
                output_tokens=count_field(path, where, a, out_key, 0, f"{name}.{out_key}"),
                hash_ids=tuple(blocks), model=model if isinstance(model, str) else None,
                input_type="text" if tool_ms == 0.0 else "tool_result",
                stop=_STOPS.get(stop, stop) if isinstance(stop, str) else None,
                tool_wait_ms=tool_ms, idle_ms=idle_ms,
                api_ms=round(max(0.0, s["_end"] - s["_start"]) * 1000, 3))


def _gap(before: dict | None, s: dict, tools: list[dict]) -> tuple[float | None, float | None]:
    """(tool_wait_ms, idle_ms) before request `s` (module docstring)."""
    if before is None:
        return 0.0, None
    inside = [x for x in tools if x["_start"] >= before["_end"] and x["_end"] <= s["_start"]]
    gap_ms = max(0.0, s["_start"] - before["_end"]) * 1000
    if not inside:
        return 0.0, round(gap_ms, 3)
    tool_ms = round((max(x["_end"] for x in inside) - min(x["_start"] for x in inside)) * 1000,
                    3)
    return tool_ms, round(max(0.0, gap_ms - tool_ms), 3)


def otel_job(path: str, line: int, obj: dict) -> Job:
    """One trace of spans as a job (module docstring)."""
    where = str(line)
    spans = _spans(path, where, obj)
    first = next(iter(spans.values()))
    tid = str(first.get("trace_id") or Path(path).stem)
    where = kv_where(line, trace=tid)
    agents = {k for k, s in spans.items() if _kind(s) == "invoke_agent"}
    owner = {k: _agent_of(spans, s) for k, s in spans.items()}
    tops = [a for a in agents if owner[a] is None]
    chats = sorted((s for s in spans.values() if _kind(s) == "chat"),
                   key=lambda s: s["_start"])
    if not chats:
        raise TraceError(path, where, "spans", f"{len(spans)} spans",
                         "at least one chat span (gen_ai.operation.name chat)")
    orphans = any(owner[c["span_id"]] is None for c in chats)
    if len(tops) > 1 and not orphans:
        raise TraceError(path, where, "spans", f"{len(tops)} outermost invoke_agent spans",
                         "one root agent, or chat spans outside every agent")
    root = tops[0] if len(tops) == 1 and not orphans else None
    t0 = min(s["_start"] for s in spans.values())

    def session_of(agent: str | None) -> str | None:
        return None if agent == root else agent

    order = [None, *sorted((a for a in agents if a != root),
                           key=lambda a: (spans[a]["_start"], a))]
    turns: dict[str | None, list[Turn]] = {k: [] for k in order}
    next_id = [0]
    for key in order:
        mine = [c for c in chats if session_of(owner[c["span_id"]]) == key]
        tools = [s for s in spans.values() if _kind(s) == "execute_tool"
                 and session_of(owner[s["span_id"]]) == key]
        for k, c in enumerate(mine):
            before = turns[key][-1] if turns[key] else None
            turns[key].append(_turn(path, where, c, t0, list(before.hash_ids) if before
                                    else [], before, _gap(mine[k - 1] if k else None, c, tools),
                                    next_id))
    return Job(id=tid, block_size=BLOCK_TOKENS, hash_scope="local", start_s=t0,
               sessions=tuple(_sessions(path, where, tid, spans, order, turns, owner,
                                        session_of, t0)))


def _sessions(path: str, where: str, tid: str, spans: dict, order: list, turns: dict,
              owner: dict, session_of: Any, t0: float) -> list[Session]:
    out: list[Session] = []
    depth: dict[str | None, int] = {None: 0}
    for key in order:
        if not turns[key]:
            raise TraceError(path, where, f"spans[{spans[key]['_i'] if key else 0}]",
                             key or tid, "an agent with at least one chat span of its own")
        if key is None:
            out.append(Session(id=tid, turns=tuple(turns[key])))
            continue
        a, parent = spans[key], session_of(owner[key])
        depth[key] = depth[parent] + 1
        start_s = round(a["_start"] - t0, 6)
        after = max((k for k, t in enumerate(turns[parent]) if t.t_s < start_s), default=None)
        dur = round((a["_end"] - a["_start"]) * 1000, 3)
        name = a["attributes"].get("gen_ai.agent.name")
        out.append(Session(id=key, turns=tuple(turns[key]),
                           parent_id=tid if parent is None else parent, depth=depth[key],
                           spawn_after_turn=after,
                           join_before_turn=relate(turns[parent], after, start_s, dur),
                           start_t_s=start_s, duration_ms=dur,
                           agent_type=name if isinstance(name, str) else None))
    return out


def read_otel(path: Path) -> list[Job]:
    """Every trace of `path` (a `.json` file, a folder of them, or JSONL), checked."""
    return [otel_job(f, n, obj) for f, n, obj in trace_objects(path)]
