"""A file of agent jobs read in whichever of the three formats it is (`--trace-format`, or
told by its content: `trace.detect_format`).

Why apart from the readers: `anvil trace stats` and the replay ask for jobs, not for a
format; this is the one place that maps a format's name to its reader.
"""

from __future__ import annotations

from pathlib import Path

from anvil_metrics.errors import UsageError
from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.agentjsonl import read_agent_jsonl
from anvil_metrics.load.agentotel import read_otel
from anvil_metrics.load.agentweka import read_weka
from anvil_metrics.load.trace import AGENT_FORMATS, detect_format

_READERS = {"weka": read_weka, "otel": read_otel, "agent-jsonl": read_agent_jsonl}


def is_agent_trace(path: str | Path, fmt: str | None = None) -> bool:
    """Whether `path` holds agent jobs (`fmt` named, else told by the file)."""
    p = Path(path)
    if fmt is not None:
        return fmt in AGENT_FORMATS
    if not (p.is_file() or p.is_dir()):
        raise UsageError(f"{str(p)!r}: no such file or folder; pass a trace")
    return detect_format(p) in AGENT_FORMATS


def read_jobs(path: str | Path, fmt: str | None = None) -> list[Job]:
    """Every job of the file (or folder of `.json` traces), checked: a bad entry is one
    `trace.TraceError` line. Jobs that all record their start (`Job.start_s`) come in the
    order they started (ties: the file's), the order an open loop of their starts sends
    them and a row's `job_id` counts them; else in the file's order."""
    p = Path(path)
    if not (p.is_file() or p.is_dir()):
        raise UsageError(f"{str(p)!r}: no such file or folder; pass a trace")
    fmt = fmt or detect_format(p)
    if fmt not in _READERS:
        raise UsageError(f"--trace-format {fmt!r}: agent jobs are one of "
                         f"{', '.join(AGENT_FORMATS)}")
    jobs = _READERS[fmt](p)
    ids: set[str] = set()
    for j in jobs:
        if j.id in ids:
            raise UsageError(f"{p}: job id {j.id!r} appears twice; each job needs its own id")
        ids.add(j.id)
    if jobs and all(j.start_s is not None for j in jobs):
        jobs = sorted(jobs, key=lambda j: j.start_s)  # type: ignore[arg-type, return-value]
    return jobs
