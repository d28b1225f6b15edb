"""A run's progress as one small typed snapshot: what the live display and its plain line show.

Why its own module, without gevent: the load process writes the snapshot
(`<run_dir>/progress.json`, about once a second, by `progresswatch.ProgressWatch`) and
`anvil run`'s parent, which never imports gevent, reads it and draws it
(`runs/display.py`). Both sides need the one definition and the one plain rendering, so they
live here, with the few pure rules the figures follow (the last-10-s rates, the ETA) so they
are tested on known truth without a process.

The figures are the ones the load process already keeps live (`figures.LiveStats`: counts,
failures by kind, the sketches' percentiles; the request budget's in flight; the loop-lag
monitor and CPU share judged by `post.saturation.verdict`, the one rule of the `client`
block); none is computed a second way. Missing is None, shown as "-" in the plain line, never
as 0. An agent replay counts jobs too (`jobfigures.JobFigures`: done of the budget's jobs,
in flight, completed, cut, the job latency p50), and its amount is jobs, not requests;
any other run has no job figures (None) and its line is unchanged.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

import msgspec

from anvil_metrics.live.stuck import StuckReport

PROGRESS_FILE = "progress.json"
RATE_WINDOW_S = 10.0  # req/s and output tok/s are over the last this many seconds
CANCELLED_KINDS = ("cancelled", "aborted")  # stopped by the run or closed on purpose
SETTING_UP = "setting up (model, prompt sizing) …"


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    """One reading of a run in progress (module docstring). Counts are of measured
    requests unless named warm-up; `failed_by_kind` leaves out the cancelled ones
    (`cancelled_requests`: the run's stop, or closed on purpose)."""

    run_id: str
    phase: str  # "warm-up" | "running" | "finishing"
    elapsed_s: float  # since the load began (warm-ups included)
    duration_s: float | None = None  # the measured duration, when the run has one
    duration_elapsed_s: float | None = None  # of it, so far (None: not begun)
    requests_planned: int | None = None
    requests_done: int = 0  # completed + failed + cancelled
    warmup_planned: int = 0
    warmup_done: int = 0
    in_flight_requests: int | None = None  # warm-ups included
    completed_requests: int = 0
    failed_by_kind: dict[str, int] = msgspec.field(default_factory=dict)
    cancelled_requests: int = 0
    requests_per_s: float | None = None  # over the last `rate_window_s`
    output_tok_s: float | None = None
    rate_window_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    decode_tok_s_p50: float | None = None
    eta_s: float | None = None
    loop_lag_p99_ms: float | None = None  # this process's; None on a distributed master
    cpu_pct: float | None = None
    saturated: bool | None = None  # `post.saturation.verdict` of the two above
    verdict: str = "not measured"
    step: int | None = None  # a sweep's step, from 0
    steps: int | None = None
    step_load: str | None = None  # e.g. "8 users", "20 requests/s"
    stuck: StuckReport | None = None
    # an agent replay's jobs (`jobfigures.py`); None for any other run
    jobs_planned: int | None = None
    jobs_completed: int | None = None
    jobs_cut: int | None = None
    jobs_in_flight: int | None = None
    job_latency_p50_ms: float | None = None

    @property
    def jobs_done(self) -> int | None:
        """Jobs over: completed + cut (None: not an agent replay)."""
        if self.jobs_completed is None or self.jobs_cut is None:
            return None
        return self.jobs_completed + self.jobs_cut

    @property
    def failed_requests(self) -> int:
        return sum(self.failed_by_kind.values())


def eta_s(p: Progress) -> float | None:
    """Seconds left: the duration's rest when the run has one; else the requests left at the
    last 10 s's rate (None before any rate, or for a run that ends only when stopped)."""
    if p.duration_s is not None:
        if p.steps is not None or p.requests_planned is None:
            return None if p.duration_elapsed_s is None else max(
                0.0, p.duration_s - p.duration_elapsed_s)
    if p.requests_planned is None or not p.requests_per_s:
        return None
    left = max(0, p.requests_planned - p.requests_done)
    by_rate = left / p.requests_per_s
    if p.duration_s is not None and p.duration_elapsed_s is not None:  # a budget with a limit
        by_rate = min(by_rate, max(0.0, p.duration_s - p.duration_elapsed_s))
    return by_rate


class RateWindow:
    """Rates over the last `window_s`: cumulative counts read once a tick, the rate being the
    difference between now and the oldest reading still inside the window."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._readings: deque[tuple[float, int, int]] = deque()

    def add(self, t_s: float, completed: int, output_tokens: int
            ) -> tuple[float | None, float | None, float | None]:
        """Read the cumulative counts at `t_s`; returns (requests/s, output tok/s, over how
        many seconds), None before two readings."""
        self._readings.append((t_s, completed, output_tokens))
        # (a tick wakes a little late: a reading within 5 % of the window's start is in it)
        while len(self._readings) > 2 and t_s - self._readings[1][0] >= 0.95 * self.window_s:
            self._readings.popleft()
        t0, c0, o0 = self._readings[0]
        span = t_s - t0
        if span <= 0:
            return None, None, None
        return (completed - c0) / span, (output_tokens - o0) / span, span


def write_progress(path: Path, p: Progress) -> None:
    """Replace `path` with `p` atomically (a temp file renamed over it: a reader sees the
    old snapshot or the new, never half of one). Not fsynced: it is rewritten each second
    and nothing depends on it surviving a crash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(msgspec.json.encode(p))
    os.replace(tmp, path)


def read_progress(path: Path) -> Progress | None:
    """The latest snapshot, or None when there is none (yet) or it cannot be read."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=Progress)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return None


def _n(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def _clock(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"


def amount_text(p: Progress) -> str:
    """How far: requests done of planned, or time of the duration, or time so far."""
    if p.phase == "warm-up":
        return f"{p.warmup_done}/{p.warmup_planned}"
    if p.jobs_planned is not None and p.requests_planned is None:
        return f"{p.jobs_done}/{p.jobs_planned} jobs"
    if p.requests_planned is not None:
        return f"{p.requests_done}/{p.requests_planned} requests"
    if p.duration_s is not None:
        return f"{_clock(p.duration_elapsed_s)}/{_clock(p.duration_s)}"
    return f"{_clock(p.elapsed_s)} elapsed"


def failed_text(p: Progress) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(p.failed_by_kind.items()))
    return f"{p.failed_requests}" + (f" ({kinds})" if kinds else "")


def client_text(p: Progress) -> str:
    if p.saturated:
        return f"SATURATED ({p.verdict.removeprefix('saturated: ')})"
    return p.verdict


def stuck_text(s: StuckReport | None) -> str | None:
    """The stuck requests in the words the log uses (`StuckReport.text`), or None when none
    is stuck."""
    if s is None or s.stuck_requests == 0:
        return None
    return s.text()


def jobs_text(p: Progress) -> str | None:
    """An agent replay's jobs in one phrase; None for any other run."""
    if p.jobs_completed is None:
        return None
    return (f"jobs in flight {_n(p.jobs_in_flight, 'd')}, completed {p.jobs_completed}, "
            f"cut {p.jobs_cut}, job latency p50 {_n(p.job_latency_p50_ms)} ms")


def step_text(p: Progress) -> str | None:
    if p.step is None:
        return None
    return f"step {p.step + 1}/{_n(p.steps, 'd') if p.steps else '-'}" + (
        f": {p.step_load}" if p.step_load else "")


def progress_line(p: Progress | None, title: str | None = None) -> str:
    """The plain line (a pipe, a file, a log): every figure, no control code."""
    head = f"{title}: " if title else ""
    if p is None:
        return f"{head}{SETTING_UP}"
    parts = [f"{head}{p.phase} {amount_text(p)}", step_text(p), jobs_text(p),
             f"in flight {_n(p.in_flight_requests, 'd')}",
             f"completed {p.completed_requests}", f"failed {failed_text(p)}",
             f"cancelled {p.cancelled_requests}",
             f"{_n(p.requests_per_s)} req/s, {_n(p.output_tok_s)} output tok/s "
             f"(last {_n(p.rate_window_s, '.0f')} s)",
             f"TTFT p50 {_n(p.ttft_p50_ms)} p95 {_n(p.ttft_p95_ms)} ms",
             f"decode p50 {_n(p.decode_tok_s_p50)} tok/s", f"ETA {_clock(p.eta_s)}",
             f"client {client_text(p)}", stuck_text(p.stuck)]
    return " | ".join(x for x in parts if x)
