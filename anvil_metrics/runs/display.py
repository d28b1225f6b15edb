"""The live progress on a terminal (redrawn in place) or as plain lines (a pipe, a file, a log).

Why here, and why it may write to a stream although only `cli/` prints: the same display is
drawn by two processes — `anvil run`'s parent (for `run`, each step of `capacity`, each run
of a campaign; `cli/` makes it on its own stderr and hands it down) and, for a plain
`locust --headless` with anvil's plugin, the Locust process itself (`plugin.py`), which no
`cli/` module runs in. So the drawing is one module below both, handed the stream (or the
log function) it writes to by its caller; it decides nothing about where output goes.

On a terminal: `rich`'s `Live`, a multi-line table redrawn in place (rich rather than tqdm:
the display is a table of a dozen figures, not one bar; rich is pure Python and well kept),
refreshed only when a snapshot is shown (`auto_refresh=False`: no thread of its own, which
matters in a gevent process). In Locust's process the log records and Locust's own stats
table would tear the region, so while it is shown the logging handlers writing to the
terminal are pointed at rich's proxies, which print above it (`route_logs`), and put back
after. Not a terminal: one `progress.progress_line` every `every_s` (never a control code).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from anvil_metrics.live.progress import (
    SETTING_UP,
    Progress,
    amount_text,
    client_text,
    failed_text,
    jobs_text,
    progress_line,
    step_text,
    stuck_text,
)
from anvil_metrics.load.options import PROGRESS_EVERY_S


class Display(Protocol):
    def show(self, p: Progress | None) -> None: ...

    def close(self) -> None: ...


class PlainLines:
    """One line every `every_s` (the first at once), through `write`."""

    def __init__(self, write: Callable[[str], None], every_s: float = PROGRESS_EVERY_S,
                 title: str | None = None, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.write, self.every_s, self.title, self.clock = write, every_s, title, clock
        self._last_s: float | None = None
        self._began_s: float | None = None
        self._unshown: Progress | None = None

    def show(self, p: Progress | None) -> None:
        now = self.clock()
        if self._began_s is None:
            self._began_s = now
        if p is None and self._last_s is None and now - self._began_s < self.every_s:
            return  # set-up that ends (or fails, in one line) within the interval: unsaid
        # a reading that comes a little early (snapshots arrive once a second, give or take
        # the loop's jitter) is on time: lines every 2 s, not every 2 or 3
        early_s = min(0.25, self.every_s / 4)
        if self._last_s is not None and now - self._last_s < self.every_s - early_s:
            self._unshown = p
            return
        self._last_s, self._unshown = now, None
        self.write(progress_line(p, self.title))

    def close(self) -> None:
        """The newest reading not yet shown, so the last line is the run's last state."""
        if self._unshown is not None:
            self.write(progress_line(self._unshown, self.title))
            self._unshown = None


def _na(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def table(p: Progress | None, title: str | None) -> Any:
    """The terminal's renderable: a title and one row per group of figures."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    head = Text(title or (f"anvil run {p.run_id}" if p is not None else "anvil run"),
                style="bold")
    if p is None:
        return Group(head, Text(SETTING_UP))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    done, total = ((p.warmup_done, p.warmup_planned) if p.phase == "warm-up" else
                   (p.jobs_done or 0, p.jobs_planned) if p.jobs_planned is not None
                   and p.requests_planned is None else
                   (p.requests_done, p.requests_planned) if p.requests_planned is not None
                   else (p.duration_elapsed_s or 0.0, p.duration_s))
    bar = ProgressBar(total=total or None, completed=done, width=30)
    eta = "-" if p.eta_s is None else f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}"
    row = Table.grid(padding=(0, 1))
    row.add_row(bar, Text(f"{amount_text(p)}  ETA {eta}  ({p.phase}"
                          + (f", {step_text(p)}" if p.step is not None else "") + ")"))
    grid.add_row("progress", row)
    jobs = jobs_text(p)
    if jobs is not None:  # an agent replay
        grid.add_row("jobs", jobs.removeprefix("jobs "))
    grid.add_row("requests", f"in flight {_na(p.in_flight_requests, 'd')}  completed "
                 f"{p.completed_requests}  failed {failed_text(p)}  cancelled "
                 f"{p.cancelled_requests}")
    grid.add_row(f"last {_na(p.rate_window_s, '.0f')} s",
                 f"{_na(p.requests_per_s)} req/s  {_na(p.output_tok_s)} output tok/s")
    grid.add_row("latency", f"TTFT p50 {_na(p.ttft_p50_ms)} ms  p95 {_na(p.ttft_p95_ms)} ms"
                 f"  decode p50 {_na(p.decode_tok_s_p50)} tok/s")
    grid.add_row("client", Text(
        f"{client_text(p)}  (loop lag p99 {_na(p.loop_lag_p99_ms, '.2f')} ms, CPU "
        f"{_na(p.cpu_pct, '.0f')} %)", style="bold red" if p.saturated else ""))
    stuck = stuck_text(p.stuck)
    grid.add_row("stuck", Text(stuck or "none", style="bold red" if stuck else ""))
    return Group(head, grid)


class LiveTable:
    """The terminal display: `table` redrawn in place on `stream` (module docstring)."""

    def __init__(self, stream: IO[str], title: str | None = None,
                 route_logs: bool = False) -> None:
        from rich.console import Console
        from rich.live import Live

        self.title = title
        self.console = Console(file=stream, force_terminal=True)
        self.live = Live(console=self.console, auto_refresh=False,
                         redirect_stdout=route_logs and sys.stdout.isatty(),
                         redirect_stderr=route_logs)
        self._moved: list[tuple[logging.StreamHandler, Any]] = []
        self._route = route_logs
        self._started = False

    def show(self, p: Progress | None) -> None:
        if not self._started:
            self._started = True
            self.live.start()
            if self._route:
                self._route_logs()
        self.live.update(table(p, self.title), refresh=True)

    def _route_logs(self) -> None:
        """Point the handlers that write to the terminal at rich's proxies (now
        `sys.stdout`/`sys.stderr`): their lines print above the live region."""
        proxies = {id(sys.__stdout__): sys.stdout, id(sys.__stderr__): sys.stderr}
        loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                          if isinstance(v, logging.Logger))]
        for logger in loggers:
            for h in logger.handlers:
                proxy = proxies.get(id(getattr(h, "stream", None)))
                if isinstance(h, logging.StreamHandler) and proxy is not None and \
                        proxy is not h.stream:
                    self._moved.append((h, h.setStream(proxy)))

    def close(self) -> None:
        for h, stream in self._moved:
            h.setStream(stream)
        self._moved.clear()
        if self._started:
            self.live.stop()
            self._started = False


def make_display(stream: IO[str], *, every_s: float | None = PROGRESS_EVERY_S,
                 title: str | None = None, route_logs: bool = False) -> Display | None:
    """The display for `stream`: in place on a terminal, plain lines otherwise; None for
    `every_s` None (--quiet)."""
    if every_s is None:
        return None
    if stream.isatty():
        return LiveTable(stream, title, route_logs)

    def write(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()
    return PlainLines(write, every_s, title)
