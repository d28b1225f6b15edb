"""An agent replay's section of a run's report: its `jobs` block as tables and one bar.

Why from the block and nothing else: the block is what `anvil verify` recomputes from the
rows (`post/jobsblock.py` defines every figure), and the report is drawn from the run
rebuilt from its raw file exactly as the post-processor builds it (`runfigs.load_run`), so
the page shows the verified figures and computes none a second way. The block is read
through its typed definition (`Jobs`): a document whose block does not decode is refused
in one line, never drawn half.

What it shows: jobs completed and cut, the job latency p50/p95/p99, jobs per hour (and
per GPU), where a completed job's time went along its root session (model, tool waits,
joins, the rest) as figures and as one stacked bar, requests and tokens per job, the
expected against the reported prefix reuse, the context overflows and the verdict —
`invalid` said plainly, in the section's first words and the row's class. A run without
the block has no such section.
"""

from __future__ import annotations

from typing import Any

import msgspec

from anvil_metrics.errors import UsageError
from anvil_metrics.post.jobsblock import INVALID_OVERFLOW_SHARE, Jobs
from anvil_metrics.post.postprocess import BENCHMARK_FILE
from anvil_metrics.report import draw
from anvil_metrics.report.page import Figure, Section, Table, cell

# the time split's parts: (the block's share, its label, its colour)
SPLIT = (("model_share", "model (e2e)", "#1f77b4"), ("tool_share", "tool waits", "#ff7f0e"),
         ("join_share", "waiting for sub-agents", "#9467bd"),
         ("other_share", "other (idle gaps, client)", "#7f7f7f"))


def _pct(share: float | None) -> str:
    return "null" if share is None else f"{share * 100:.1f} %"


def read_jobs(block: Any) -> Jobs | None:
    """The document's `jobs` block, typed; None when the run has none."""
    if block is None:
        return None
    try:
        return msgspec.convert(block, Jobs)
    except msgspec.ValidationError as e:
        raise UsageError(f"{BENCHMARK_FILE}: its jobs block is not allowed as written: {e}; "
                         "run `anvil verify` on it") from None


def verdict_text(j: Jobs) -> str:
    """The validity verdict in words (AgentX's rule)."""
    limit = f"{INVALID_OVERFLOW_SHARE:.0%}"
    if j.validity == "invalid":
        return (f"INVALID: {j.context_overflows} of {j.requests} requests "
                f"({_pct(j.overflow_share)}) overflowed the server's context, over the "
                f"{limit} allowed")
    return (f"valid: {j.context_overflows} of {j.requests} requests overflowed the "
            f"context (at most {limit} allowed)")


def jobs_tables(j: Jobs) -> tuple[Table, ...]:
    """The block's figures as four tables."""
    latency = Table("Jobs", (
        "started", "completed", "cut", "latency p50 (ms)", "p95 (ms)", "p99 (ms)",
        "jobs/h", "GPUs", "jobs/h per GPU"), ((
            str(j.started), str(j.completed), str(j.cut), cell(j.latency_p50_ms),
            cell(j.latency_p95_ms), cell(j.latency_p99_ms), cell(j.jobs_per_hour),
            cell(j.gpus), cell(j.jobs_per_hour_per_gpu)),),
        note=f"start: {j.start_at} turn; a job's latency is its first request's start (its "
             "due in an open loop) to its last answer's end, nearest rank over completed "
             "jobs")
    split = Table("Where a completed job's time went (along its root session)",
                  tuple(label for _, label, _ in SPLIT),
                  (tuple(_pct(getattr(j, key)) for key, _, _ in SPLIT),))
    per_job = Table("Per completed job", (
        "requests", "prompt tokens", "output tokens", "expected reuse", "reported reuse",
        "expected reuse p50", "reported reuse p50"), ((
            cell(j.requests_per_job), cell(j.prompt_tokens_per_job),
            cell(j.output_tokens_per_job), _pct(j.expected_reuse), _pct(j.reported_reuse),
            _pct(j.expected_reuse_p50), _pct(j.reported_reuse_p50)),),
        note="reuse: the share of prompt tokens a prefix cache keeping every block could "
             "serve (the trace's hash ids) against the server's reported cached tokens")
    validity = Table("Validity", ("requests", "context overflows", "overflow share",
                                  "verdict"),
                     ((str(j.requests), str(j.context_overflows), _pct(j.overflow_share),
                       j.validity),), classes=("fail" if j.validity == "invalid"
                                               else "pass",),
                     note=verdict_text(j))
    return latency, split, per_job, validity


def split_figure(j: Jobs) -> Figure | None:
    """The time split as one stacked bar (none without completed jobs' shares)."""
    shares = [getattr(j, key) for key, _, _ in SPLIT]
    if any(s is None for s in shares):
        return None
    fig, axes = draw.new((10.0, 1.6))
    ax, left = axes[0][0], 0.0
    for (_, label, colour), share in zip(SPLIT, shares, strict=True):
        width = max(0.0, share * 100)  # `other` may be a hair below 0 by rounding
        ax.barh([0], [width], left=left, color=colour, label=f"{label} {share * 100:.1f} %")
        left += width
    ax.set_xlim(0, max(100.0, left))
    ax.set_yticks([])
    ax.set_xlabel("% of completed jobs' latency")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=4)
    return draw.finish(fig, "job-time-split.png", "Where a job's time went",
                       "The jobs block's shares: the root session's model time, tool "
                       "waits and joins, pooled over completed jobs.", (BENCHMARK_FILE,))


def jobs_section(block: Any) -> Section | None:
    """The report's agent-jobs section, or None for a run without a `jobs` block."""
    j = read_jobs(block)
    if j is None:
        return None
    figure = split_figure(j)
    return Section("Agent jobs", verdict_text(j) + f"; {j.completed} of {j.started} jobs "
                   "completed.", tables=jobs_tables(j),
                   figures=() if figure is None else (figure,))
