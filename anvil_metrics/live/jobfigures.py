"""An agent replay's running job figures: jobs in flight, completed and cut, and the job
latency of those completed so far, for the live page and the progress line.

Why a job's end is told, not guessed from its records: a record says that one request
ended, never that its job has no more to send (a sampled start skips turns, a failed turn
ends its session and the children it had not spawned, the run's end stops a job between
two turns). The user that ran the job knows, once its last session has ended
(`live/users._agent_job`): it fires `anvil_events.job_end` with the job's number, how many
measured requests it sent and whether every one was answered. On a distributed worker that
event goes to the master as an `anvil_job_end` message (`cluster/`), where it is fired
again, as the workers' records are. A job's figures are final once its end is told and
all the records it names have arrived, in either order (a worker ships its records in
batches beside the message).

Definitions, those of the `jobs` block (`post/jobsblock.py`), so the running figures
become the file's: a job is completed when every request it sent was answered (none
failed), else cut; its latency is its first measured request's start (its due in an open
loop: `start_ns − start_delay_ns`) to its last answer's end. Jobs in flight are the
request budget's starts not yet over (`RequestBudget.starts_going`), which counts a job
from its first ticket, before any of its records. The latency's percentiles come from a
log-binned sketch (within 1 %, `sketch.py`: nothing grows with the run); when the run is
over, `finish` takes the file's `jobs` block, exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.live.sketch import Sketch
from anvil_metrics.records import RequestRecord

JOB_PERCENTILES = (50, 95)


@dataclass(slots=True)
class _Open:
    """A job not yet counted: its records so far, and its end once told."""

    first_ns: int | None = None  # its first measured request's start (or due)
    last_ns: int | None = None  # its last answer's end
    records: int = 0
    failed: bool = False
    told: int | None = None  # the measured requests its end said it sent (None: not told)
    answered: bool = False  # its end said every one was answered

    def add(self, start_ns: int, end_ns: int | None, failed: bool) -> None:
        """One more of its records: its start (or due), its end, whether it failed."""
        self.first_ns = start_ns if self.first_ns is None else min(self.first_ns, start_ns)
        if end_ns is not None:
            self.last_ns = end_ns if self.last_ns is None else max(self.last_ns, end_ns)
        self.records += 1
        self.failed = self.failed or failed

    def tell(self, requests: int, completed: bool) -> None:
        """Its end: how many measured requests it sent, whether all were answered."""
        self.told, self.answered = requests, completed

    def counted(self) -> bool:
        """Its end is told and every record it names is in."""
        return self.told is not None and self.records >= self.told


class JobFigures:
    """The running job figures (module docstring). `planned`: the jobs the budget measures
    (None: no budget of jobs); `from_due`: an open loop (latency from the first due);
    `in_flight`: reads the budget's jobs started and not over."""

    def __init__(self, planned: int | None, *, from_due: bool = False,
                 in_flight: Callable[[], int | None] | None = None) -> None:
        self.planned = planned
        self._from_due = from_due
        self._in_flight = in_flight
        self._open: dict[int, _Open] = {}
        self.completed = 0
        self.cut = 0
        self.latency = Sketch()
        self._final: dict[str, Any] | None = None

    def take(self, record: RequestRecord) -> None:
        """One measured record (warm-ups are no job's); not an agent job's: ignored."""
        extra = record.extra or {}
        n = extra.get("job")
        if not isinstance(n, int) or record.warmup:
            return
        job = self._open.setdefault(n, _Open())
        job.add(record.start_ns - (int(extra.get("start_delay_ns") or 0)
                                   if self._from_due else 0),
                record.end_ns, record.failure is not None)
        self._settle(n, job)

    def ended(self, job: int, requests: int, completed: bool) -> None:
        """Job `job` has ended, having sent `requests` measured requests; `completed`:
        every one was answered and none was left unsent."""
        j = self._open.setdefault(job, _Open())
        j.tell(requests, completed)
        self._settle(job, j)

    def _settle(self, n: int, job: _Open) -> None:
        if not job.counted():
            return  # its end, or some of its records, are still on their way
        del self._open[n]
        if job.told == 0:
            return  # no measured request: never started (the block does not count it)
        if job.answered and not job.failed and job.first_ns is not None \
                and job.last_ns is not None:
            self.completed += 1
            self.latency.add((job.last_ns - job.first_ns) / 1e6)
        else:
            self.cut += 1

    def finish(self, block: dict[str, Any] | None) -> None:
        """The run is over: with the file's `jobs` block, its exact figures from now on."""
        if block is not None:
            self._final = block

    def snapshot(self) -> dict[str, Any]:
        """The live page's and the progress's job figures (missing is None)."""
        if self._final is not None:
            b = self._final
            return {"planned": self.planned, "in_flight": 0, "completed": b.get("completed"),
                    "cut": b.get("cut"), "latency_p50_ms": b.get("latency_p50_ms"),
                    "latency_p95_ms": b.get("latency_p95_ms"), "exact": True}
        ps = self.latency.percentiles(JOB_PERCENTILES)
        return {"planned": self.planned,
                "in_flight": None if self._in_flight is None else self._in_flight(),
                "completed": self.completed, "cut": self.cut,
                "latency_p50_ms": ps["p50"], "latency_p95_ms": ps["p95"], "exact": False}
