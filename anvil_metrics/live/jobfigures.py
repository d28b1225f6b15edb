"""An agent replay's running job figures: jobs in flight, completed and cut, and the job
latency of those completed so far, for the live page and the progress line.

Why a job's end is told, not guessed from its records: a record says that one request
ended, never that its job has no more to send (a sampled start skips turns, a failed turn
ends its session and the children it had not spawned, the run's end stops a job between
two turns). The user that ran the job knows, once its last session has ended
(`live/users._agent_job`): it fires `anvil_events.job_end` with the job's number, how many
of its measured requests were answered and whether all were (none failed, none left
unsent, the job not stopped). On a distributed worker that event goes to the master as an
`anvil_job_end` message (`cluster/`), where it is fired again, as the workers' records are.
Records and ends arrive in either order (a worker ships its records in batches beside the
message; a single process derives its records when its loop is idle): a completed job is
counted once its end is told and its answered requests' records are all in (its latency
needs the last); a cut job when either its end is told or, if no record of it was seen by
then, its first record (a failed first request) arrives — its later records are ignored.

Definitions, those of the `jobs` block (`post/jobsblock.py`), so the running figures
become the file's: a job is completed when every request it sent was answered (none
failed), else cut; its latency is its first measured request's start (its due in an open
loop: `start_ns − start_delay_ns`) to its last answer's end. Jobs in flight are the
request budget's starts not yet over (`RequestBudget.starts_going`), which counts a job
from its first ticket, before any of its records. The latency's percentiles come from a
log-binned sketch (within 1 %, `sketch.py`: nothing grows with the run); when the run is
over, `finish` takes the file's `jobs` block, exact. What grows with the run: the numbers
of the cut jobs (a set of small integers, to ignore their late records).
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
    told: int | None = None  # its answered requests, as its end said (None: not told)

    def add(self, start_ns: int, end_ns: int | None, failed: bool) -> None:
        """One more of its records: its start (or due), its end, whether it failed."""
        self.first_ns = start_ns if self.first_ns is None else min(self.first_ns, start_ns)
        if end_ns is not None:
            self.last_ns = end_ns if self.last_ns is None else max(self.last_ns, end_ns)
        self.records += 1
        self.failed = self.failed or failed

    def tell(self, answered: int) -> None:
        """Its end, completed: how many of its measured requests were answered."""
        self.told = answered

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
        self._cut: set[int] = set()  # cut jobs counted (their late records are ignored)
        self._cut_unseen: set[int] = set()  # cut with no record seen yet (maybe none)
        self.completed = 0
        self.cut = 0
        self.latency = Sketch()
        self._final: dict[str, Any] | None = None

    def take(self, record: RequestRecord) -> None:
        """One measured record (warm-ups are no job's); not an agent job's: ignored."""
        extra = record.extra or {}
        n = extra.get("job")
        if not isinstance(n, int) or record.warmup or n in self._cut:
            return
        if n in self._cut_unseen:  # a job told cut before any record: it had one
            self._cut_unseen.discard(n)
            self._count_cut(n)
            return
        job = self._open.setdefault(n, _Open())
        job.add(record.start_ns - (int(extra.get("start_delay_ns") or 0)
                                   if self._from_due else 0),
                record.end_ns, record.failure is not None)
        self._settle(n, job)

    def ended(self, job: int, answered: int, completed: bool) -> None:
        """Job `job` has ended with `answered` of its measured requests answered;
        `completed`: all were, none was left unsent, it was not stopped."""
        if completed and answered > 0:
            j = self._open.setdefault(job, _Open())
            j.tell(answered)
            self._settle(job, j)
        elif job in self._open or answered > 0:
            self._open.pop(job, None)
            self._count_cut(job)
        else:  # no record of it seen: a failed first request's may still come, or none
            self._cut_unseen.add(job)

    def _count_cut(self, n: int) -> None:
        self._cut.add(n)
        self.cut += 1

    def _settle(self, n: int, job: _Open) -> None:
        if not job.counted():
            return  # some of its records are still on their way
        del self._open[n]
        if job.failed or job.first_ns is None or job.last_ns is None:
            self._count_cut(n)  # (a record failed though its end said all were answered)
            return
        self.completed += 1
        self.latency.add((job.last_ns - job.first_ns) / 1e6)

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
