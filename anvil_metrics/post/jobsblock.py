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
- `started`: jobs with at least one measured request; `completed`: those whose every
  request of the trace's job (`params.agent.job_requests`, less those skipped by a
  sampled start) has a row, none failed; `cut` = started − completed (a failure, a
  request the run's end stopped, a request never sent).
- A completed job's latency: its first measured request's start (its due, in an open
  loop: start − schedule_lag) to its last answer's end, on the master's clock;
  p50/p95/p99 are nearest-rank over completed jobs.
- `jobs_per_hour`: completed jobs ÷ the run's `duration_s` × 3600; per GPU: ÷ `gpus`.
- The shares split a completed job's latency along its root session (the critical path:
  its sub-agents' time is inside the root's join waits): `model_share` Σ the root's
  rows' e2e, `tool_share` Σ their `tool_wait_ms`, `join_share` Σ their `join_wait_ms`,
  `other_share` the rest (idle gaps replayed, the client's own time), each pooled over
  completed jobs ÷ Σ their latencies.
- Per job: requests, prompt and output tokens, means over completed jobs.
- Prefix reuse: `expected_reuse` the trace's (a cache keeping every block) over the
  completed jobs' prompt tokens, `reported_reuse` Σ cached_tokens ÷ Σ prompt_tokens over
  their rows that report cached_tokens (null when none does); the per-job p50 of each.
- `context_overflows`: measured requests the server refused for their length (an HTTP
  400/413 whose message names the context: `is_context_overflow`); `overflow_share` ÷
  the jobs' measured requests; `validity` "invalid" when that share is over 1 %.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Struct

from anvil_metrics.fieldtypes import Count, Figure, described

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
        "1/h", "completed jobs ÷ duration_s × 3600; null without a duration")]
    gpus: Annotated[Count | None, described(
        "", "the GPUs serving the run (--gpus, the scenario's gpus); null: not given")]
    jobs_per_hour_per_gpu: Annotated[Figure | None, described(
        "1/h", "jobs_per_hour ÷ gpus; null without gpus")]
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
