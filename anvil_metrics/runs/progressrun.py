"""A run's live progress inside a Locust process: its watch and, headless, its display.

Why its own module: the plugin (`plugin.py`) starts it when a run's load begins and stops
it before the run is written; which display a headless run gets (in place on a terminal, a
plain line through the `anvil` logger elsewhere: `anvil run`'s child writes its log, and
its parent draws `progress.json` itself) is decided here, once, not among the plugin's
hooks. A web-UI run gets the watch only: `progress.json`, for whoever reads it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from anvil_metrics.live.progresswatch import ProgressWatch
from anvil_metrics.live.session import RunSession
from anvil_metrics.runs.display import Display, LiveTable, PlainLines

log = logging.getLogger("anvil")


@dataclass
class ProgressRun:
    """The run's `ProgressWatch` (`progress.json` each second) and the display it feeds."""

    watch: ProgressWatch
    display: Display | None

    @classmethod
    def start(cls, session: RunSession, *, headless: bool,
              distributed: bool) -> ProgressRun | None:
        """Start the progress of `session`, unless --quiet (None then)."""
        every_s = session.opts.progress_every_s
        if every_s is None:
            return None
        display: Display | None = None
        if headless:
            display = (LiveTable(sys.stderr, f"locust: anvil run {session.run_id}",
                                 route_logs=True) if sys.stderr.isatty()
                       else PlainLines(lambda line: log.info("anvil: %s", line), every_s))
        watch = ProgressWatch(session, distributed=distributed,
                              on_snapshot=display.show if display is not None else None)
        watch.start()
        return cls(watch, display)

    def stop(self) -> None:
        """The run's last reading shown, then no more (the display gives the terminal
        back)."""
        try:
            self.watch.stop()
            self.watch.tick(final=True)
        finally:
            if self.display is not None:
                self.display.close()
