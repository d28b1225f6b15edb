"""An agent replay's plan as the raw header records it: `params.agent`, and the budget of
job starts.

Why apart from the live session: what the post-processor's `jobs` block needs of the trace
(each trace job's requests and tokens, a sampled start's turn and figures per run job) is
a pure function of the scenario and the jobs read, so it is testable without a run and
the session keeps only the run's wiring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.agentstart import start_turn
from anvil_metrics.load.agentstats import job_figures, start_figures
from anvil_metrics.load.scenario import Scenario


def starts_budget(sc: Scenario, jobs: list[Job] | None) -> int | None:
    """A budget of starts rather than requests (`RequestBudget`'s `conversations`): a
    `[conversation]`'s conversations, or an agent replay's jobs (`--jobs`; none given: each
    job of the trace once). Each start's later requests are its follow-ups."""
    if jobs is not None and sc.trace is not None:
        return sc.trace.jobs or len(jobs)
    return sc.conversation.conversations if sc.conversation is not None else None


def agent_params(sc: Scenario, jobs: list[Job]) -> dict[str, Any]:
    """The raw header's `params.agent`: the file, the trace's job ids (a row's `job_id` n
    is the run's job n, which replays `job_ids[n % len]`) and their requests, the jobs
    measured and the waits; what the `jobs` block needs of the trace: each trace job's
    [input tokens, expected cached tokens] (`agentstats`), and with a sampled start each
    run job's [start turn, requests, input tokens, expected cached tokens] (`agentstart`)."""
    t = sc.trace
    assert t is not None
    budget = starts_budget(sc, jobs)
    assert budget is not None
    out = {"file": Path(t.path).name, "format": t.fmt,
           "job_ids": [j.id for j in jobs], "jobs": budget,
           # each trace job's requests: a run's job with fewer rows and failures was cut
           "job_requests": [j.requests for j in jobs],
           "job_tokens": [[f.input_tokens, f.cached_tokens] for f in job_figures(jobs)],
           "tool_speed": t.tool_speed, "max_tool_wait_s": t.max_tool_wait_s,
           "max_idle_s": t.max_idle_s, "start_at": t.start_at, "start_seed": t.start_seed}
    if t.start_at == "sampled":
        starts = []
        for n in range(budget):
            job = jobs[n % len(jobs)]
            k = start_turn(t.start_seed, n, len(job.root.turns))
            starts.append([k, *start_figures(job, k)])
        out["starts"] = starts
    return out
