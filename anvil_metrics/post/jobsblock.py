"""An agent replay's `jobs` block: what a job cost, start to end, and whether the run is
valid.

Why a block of its own: an agent job (a root session, its sub-agents, their tool waits)
is the unit a serving team buys hardware for; token-level figures on its requests say
little about it (TensorRT-LLM's perf lanes found job-level Pareto fronts separating
parallel strategies that token-level ones showed as alike). So the block states, from the
rows alone (`anvil verify` recomputes every figure), what a job took and where its time
went, and it carries the validity rule the field uses (SemiAnalysis' AgentX: a run with
over 1 % of its requests overflowing the context is invalid).

Definitions (a job is the rows and failures[] of one `job_id`):
- `plan`: what each run job was to send, by `job_id`: [start turn, requests, prompt
  tokens, expected cached tokens], from the raw header's `params.agent` (the trace's job
  `job_id % its jobs`, its figures `job_requests`/`job_tokens`; with a sampled start,
  `starts`: `load/agentstart.py`, `agentstats.start_figures`). It is copied, as the
  trace block's expected reuse is (the document does not hold the trace), and every
  other figure is recomputed from it, the rows and `failures[]` by `anvil verify`.
- `started`: jobs with at least one measured request; `completed`: those whose every
  request of the plan has a row, none failed; `cut` = started − completed (a failure, a
  request the run's end stopped, a request never sent).
- A completed job's latency: its first measured request's start (its due, in an open
  loop, the load block's arrival not "closed": start − schedule_lag_ms) to its last
  answer's end (start_offset_ms + e2e_ms: the master's clock); p50/p95/p99 are
  nearest-rank over completed jobs.
- `jobs_per_hour`: completed jobs ÷ the measured span (`wall_clock_ms`, the first
  request's start to the last one's end; a budget of jobs asks no duration) × 3600; per
  GPU: ÷ `gpus` (the run field: --gpus).
- The shares split a completed job's latency along its root session (the critical path:
  its sub-agents' time is inside the root's join waits): `model_share` Σ the root's
  rows' e2e, `tool_share` Σ their `tool_wait_ms`, `join_share` Σ their `join_wait_ms`,
  `other_share` the rest (idle gaps replayed, the client's own time), each pooled over
  completed jobs ÷ Σ their latencies.
- Per job: requests, prompt and output tokens, means over completed jobs.
- Prefix reuse: `expected_reuse` the plan's (a cache keeping every block) over the
  completed jobs' prompt tokens (the plan's too), `reported_reuse` Σ cached_tokens ÷
  Σ prompt_tokens over their rows that report cached_tokens (null when none does); the
  per-job p50 of each.
- `context_overflows`: measured requests the server refused for their length (an HTTP
  400/413 whose message names the context: `is_context_overflow`); `overflow_share` ÷
  the jobs' measured requests; `validity` "invalid" when that share is over 1 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import numpy as np
from msgspec import Struct

from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.agentstats import rank
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent, num
from anvil_metrics.post.conversations import reuse_ratio
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import differing, fmt, set_without_block
from anvil_metrics.wire.failures import is_context_overflow

INVALID_OVERFLOW_SHARE = 0.01  # AgentX's rule: over 1 % of requests overflowing → invalid


def _ms(text: str) -> Any:
    return Annotated[float | None, described("ms", text)]


def _share(text: str) -> Any:
    return Annotated[Figure | None, described("", text)]


class Jobs(Struct, forbid_unknown_fields=True, kw_only=True):
    """What the run's agent jobs took, start to end (module docstring)."""

    start_at: Annotated[Literal["first", "sampled"], described(
        "", "where each job started: its first turn, or a seeded random turn of its root "
            "with the history before it primed by one unmeasured request (--start-at)")]
    started: Annotated[Count, described("", "jobs with at least one measured request")]
    completed: Annotated[Count, described(
        "", "jobs whose every request was sent and answered (a sampled start's skipped "
            "turns aside)")]
    cut: Annotated[Count, described("", "started − completed: a request failed, or the "
                                        "run's end stopped the job")]
    latency_p50_ms: _ms("nearest-rank p50 over completed jobs of the first request's start "
                        "(its due in an open loop) to the last answer's end; null: none")
    latency_p95_ms: _ms("the same, p95")
    latency_p99_ms: _ms("the same, p99")
    jobs_per_hour: Annotated[Figure | None, described(
        "jobs/h", "completed jobs ÷ wall_clock_ms × 3 600 000 (the measured span); null "
               "without one")]
    gpus: Annotated[Count | None, described(
        "", "the GPUs serving the run (--gpus, the scenario's gpus); null: not given")]
    jobs_per_hour_per_gpu: Annotated[Figure | None, described(
        "jobs/h", "jobs_per_hour ÷ gpus; null without gpus")]
    model_share: _share("Σ e2e_ms of completed jobs' root-session rows ÷ Σ their "
                        "latencies: the time the root waited on the model")
    tool_share: _share("Σ tool_wait_ms of the same rows ÷ Σ latencies")
    join_share: _share("Σ join_wait_ms of the same rows ÷ Σ latencies: the root waiting "
                       "for its sub-agents")
    other_share: _share("1 − the three above: replayed idle gaps and the client's own "
                        "time (an open loop's schedule lag included)")
    requests_per_job: Annotated[Figure | None, described(
        "", "mean measured requests of a completed job")]
    prompt_tokens_per_job: Annotated[Figure | None, described(
        "tok", "mean Σ prompt_tokens of a completed job's rows")]
    output_tokens_per_job: Annotated[Figure | None, described(
        "tok", "mean Σ output_tokens of a completed job's rows")]
    expected_reuse: _share("the share of completed jobs' prompt tokens a cache keeping "
                           "every block could serve, from the trace's own hash_ids")
    reported_reuse: _share("Σ cached_tokens ÷ Σ prompt_tokens over completed jobs' rows "
                           "reporting cached_tokens; null when none does")
    expected_reuse_p50: _share("nearest-rank p50 over completed jobs of each one's "
                               "expected reuse")
    reported_reuse_p50: _share("nearest-rank p50 over completed jobs of each one's "
                               "reported reuse (jobs with cached_tokens)")
    requests: Annotated[Count, described("", "the jobs' measured requests (rows and "
                                             "failures)")]
    context_overflows: Annotated[Count, described(
        "", "measured requests the server refused for their length (HTTP 400/413 naming "
            "the context)")]
    overflow_share: _share("context_overflows ÷ requests; null without requests")
    validity: Annotated[Literal["valid", "invalid"], described(
        "", "invalid when overflow_share is over 1 % (AgentX's rule), else valid")]
    plan: Annotated[list[tuple[Count, Count, Count, Count]], described(
        "", "each run job's [start turn, requests, prompt tokens, expected cached tokens] "
            "by job_id, from the trace (params.agent): what it was to send")]


def plan_of(agent: Mapping[str, Any]) -> list[list[int]]:
    """Each run job's [start turn, requests, prompt tokens, expected cached tokens] from
    the raw header's `params.agent` (module docstring)."""
    if agent.get("start_at") == "sampled":
        return [list(x) for x in agent["starts"]]
    reqs, tokens = agent["job_requests"], agent["job_tokens"]
    return [[0, reqs[n % len(reqs)], *tokens[n % len(tokens)]] for n in range(agent["jobs"])]


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _by_job(rows: RowColumns) -> dict[int, np.ndarray]:
    """Each job's row positions, by job_id (rows outside a job left out)."""
    has = rows.present["job_id"]
    ids = rows.counts["job_id"]
    out: dict[int, np.ndarray] = {}
    for n in np.unique(ids[has]).tolist():
        out[int(n)] = np.flatnonzero(has & (ids == n))
    return out


def _latency(rows: RowColumns, at: np.ndarray, open_loop: bool) -> float:
    """A job's latency from its rows (module docstring)."""
    start = rows.floats["start_offset_ms"][at]
    first = int(np.argmin(start))
    end = float(np.max(start + rows.floats["e2e_ms"][at]))
    due = start[first] - (rows.floats["schedule_lag_ms"][at][first] if open_loop else 0.0)
    return end - float(due)


def build_jobs(*, start_at: str, plan: list[list[int]], rows: RowColumns,
               failures: list[Any], wall_clock_ms: float | None, gpus: int | None,
               open_loop: bool) -> JsonObject:
    """The block (module docstring) from the plan, the rows and failures[]."""
    failed: dict[int, int] = {}
    for f in failures:
        if isinstance(f, dict) and f.get("job_id") is not None:
            failed[f["job_id"]] = failed.get(f["job_id"], 0) + 1
    groups = _by_job(rows)
    started = set(groups) | set(failed)
    done = sorted(n for n, at in groups.items() if n not in failed and n < len(plan)
                  and len(at) == plan[n][1])
    lat = [_latency(rows, groups[n], open_loop) for n in done]
    mine = np.isin(rows.counts["job_id"], done) & rows.present["job_id"]
    root = rows.select(mine & (rows.counts["session_id"] == 0))
    total = sum(lat)
    shares = [_ratio(float(np.nansum(root.values(k))), total)
              for k in ("e2e_ms", "tool_wait_ms", "join_wait_ms")]
    # (at least 0: the three are parts of the latency; a sum of floats may pass 1 by ulps)
    other = None if None in shares else max(0.0, 1.0 - sum(s for s in shares if s is not None))
    reported = [r for r in (reuse_ratio(_rows_at(rows, groups[n]), "cached_tokens")
                            for n in done) if r is not None]
    requests = sum(len(groups[n]) for n in started if n in groups) + sum(failed.values())
    overflows = sum(1 for f in failures if isinstance(f, dict) and f.get("job_id") is not None
                    and is_context_overflow(f.get("http_status"), f.get("message")))
    per_hour = (len(done) / (wall_clock_ms / 3_600_000) if wall_clock_ms else None)
    share = overflows / requests if requests else None
    return {
        "start_at": start_at, "started": len(started), "completed": len(done),
        "cut": len(started) - len(done),
        "latency_p50_ms": rank(lat, 50), "latency_p95_ms": rank(lat, 95),
        "latency_p99_ms": rank(lat, 99), "jobs_per_hour": per_hour, "gpus": gpus,
        "jobs_per_hour_per_gpu": per_hour / gpus if per_hour is not None and gpus else None,
        "model_share": shares[0], "tool_share": shares[1], "join_share": shares[2],
        "other_share": other,
        "requests_per_job": int(mine.sum()) / len(done) if done else None,
        "prompt_tokens_per_job": _per_job(rows, mine, "prompt_tokens", len(done)),
        "output_tokens_per_job": _per_job(rows, mine, "output_tokens", len(done)),
        "expected_reuse": _ratio(sum(plan[n][3] for n in done),
                                 sum(plan[n][2] for n in done)),
        "reported_reuse": reuse_ratio(rows.select(mine), "cached_tokens") if done else None,
        "expected_reuse_p50": rank([plan[n][3] / plan[n][2] for n in done if plan[n][2]], 50),
        "reported_reuse_p50": rank(reported, 50), "requests": requests,
        "context_overflows": overflows, "overflow_share": share,
        "validity": "invalid" if share is not None and share > INVALID_OVERFLOW_SHARE
        else "valid",
        "plan": plan}


def _rows_at(rows: RowColumns, at: np.ndarray) -> RowColumns:
    mask = np.zeros(len(rows), bool)
    mask[at] = True
    return rows.select(mask)


def _per_job(rows: RowColumns, mask: np.ndarray, name: str, jobs: int) -> float | None:
    """Σ `name` over the completed jobs' rows that have it ÷ the jobs (null: none has)."""
    v = rows.values(name)[mask]
    v = v[~np.isnan(v)]
    return float(v.sum()) / jobs if jobs and len(v) else None


def _open_loop(load: Any) -> bool:
    return isinstance(load, dict) and load.get("arrival") not in (None, "closed")


def _inputs_of(doc: Mapping[str, JsonValue]) -> dict[str, Any]:
    gpus = doc.get("gpus")
    return {"failures": doc.get("failures") or [], "wall_clock_ms": doc.get("wall_clock_ms"),
            "gpus": gpus if isinstance(gpus, int) else None,
            "open_loop": _open_loop(doc.get("load"))}


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of an agent replay (`params.agent`), else ABSENT."""
    agent = inputs.params.get("agent")
    if not isinstance(agent, dict):
        return ABSENT
    return build_jobs(start_at=agent.get("start_at") or "first", plan=plan_of(agent),
                      rows=inputs.rows, **_inputs_of(inputs.doc))


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """Every figure recomputed from the block's plan, the rows and failures[] (when the
    rows are well-typed); rows naming a job only in a run that has the block."""
    block = doc.get("jobs")
    if block is None:
        problems += set_without_block(rows, ("job_id",), "jobs")
        return
    if rows is None or not isinstance(block, dict):
        return
    if "job_id" in rows.absent or not rows.present["job_id"].all():
        problems.append("request_timings[]: every row of an agent replay names its job_id")
        return
    want = build_jobs(start_at=block["start_at"], plan=block["plan"], rows=rows,
                      **_inputs_of(doc))
    problems += differing("jobs", block, want, (k for k in want if k != "plan"),
                          "the rows, failures[] and the block's plan")


def summary_lines(doc: Mapping[str, JsonValue]) -> list[str]:
    """The CLI's lines for the block (none without one); an invalid run says so in
    capitals on a line of its own."""
    b = doc.get("jobs")
    if not isinstance(b, dict):
        return []
    per_gpu = (f", {num(b.get('jobs_per_hour_per_gpu'), ',.1f')} per GPU ({b.get('gpus')})"
               if b.get("gpus") else "")

    def pct(k: str) -> str:
        return num(None if b.get(k) is None else 100 * b[k], ".1f") + " %"

    lines = [
        f"jobs: {b.get('completed')} completed, {b.get('cut')} cut of {b.get('started')} "
        f"started (start at {b.get('start_at')}); latency p50 "
        f"{num(b.get('latency_p50_ms'), ',.0f')} / p95 {num(b.get('latency_p95_ms'), ',.0f')}"
        f" / p99 {num(b.get('latency_p99_ms'), ',.0f')} ms; "
        f"{num(b.get('jobs_per_hour'), ',.1f')} jobs/h{per_gpu}",
        f"  time split: model {pct('model_share')}, tools {pct('tool_share')}, joins "
        f"{pct('join_share')}, other {pct('other_share')}; prefix reuse expected "
        f"{num(b.get('expected_reuse'), '.3f')}, reported {num(b.get('reported_reuse'), '.3f')}",
        f"  context overflows: {b.get('context_overflows')} of {b.get('requests')} requests "
        f"({pct('overflow_share')}): {b.get('validity')}"]
    if b.get("validity") == "invalid":
        lines.append(f"INVALID RUN: {fmt(b.get('context_overflows'))} of "
                     f"{fmt(b.get('requests'))} requests ({pct('overflow_share')}) overflowed "
                     f"the context; a run with over {100 * INVALID_OVERFLOW_SHARE:g} % of its "
                     "requests overflowing is invalid (AgentX's rule)")
    return lines
