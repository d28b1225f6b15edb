"""Three repairs to Locust, made in every Locust process that loads anvil's plugin.

1. Defaults computed once.
Locust 2.47's worker, on each spawn message (every start, every change of the user count),
keeps the master's options that are not Locust's own with a comprehension that calls
`locust.argument_parser.default_args_dict()` once per option
(`WorkerRunner.handle_message`, `locust/runners.py`); each call builds and parses Locust's whole
argument parser (3.8 ms of CPU here). With anvil's options a spawn message carries ~150, so
a worker spent ~0.5 CPU-s before starting its users, seconds on a busy machine: users started
late, a sweep's first step could get no requests at all, and past 3 s the master counted the
worker's heartbeats as missed (seen: a stalled `WorkerRunner.handle_message` under py-spy;
with the repair the first request came 0.3-0.45 s after the start instead of 1.7-4.7 s).

The defaults do not change within a process, so they are computed once: `default_args_dict`
is replaced by a cached version that returns a fresh copy each call (a caller may change the
dict it gets).

2. A CSV writer that outlives its files. With `--csv`, Locust's `main` spawns
`StatsCSVFileWriter.stats_writer` (a loop that rewrites the files every second) and never
stops it: at shutdown it closes the files and exits, and if the loop wakes in between (the
`quit` listeners yield, e.g. while anvil writes benchmark.json) it seeks a closed file and
Locust logs "Unhandled exception in greenlet ... ValueError: I/O operation on closed file"
(seen when a run was aborted because its server died). The repaired loop ends quietly when
its files are closed; any other error is raised as before. What it would have written then
was already in the files (the final stats are written before they are closed).

3. A stop that reads no source. `Runner.stop` logs its caller at debug level, found with
`inspect.getframeinfo(inspect.stack()[1][0])`: `inspect.stack()` reads the source lines of
every frame of the stack, and a frame whose file is not on disk (gevent's compiled greenlet,
`<frozen runpy>`) makes `inspect.getmodule` map every loaded module's file (~800 with Locust
and anvil). That held the event loop 0.13 CPU-s at each run's stop (measured here, once per
process), with the requests still in flight at a duration's end being read, and stamped, after
it. `locust.runners` now sees an `inspect` that has only the two functions `stop` calls: the
caller's frame, and its file and line from the frame itself; the debug line is the same.

Nothing else of Locust is touched; `install` is idempotent.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import FrameType, SimpleNamespace

from locust import argument_parser, runners
from locust.stats import StatsCSVFileWriter

_ORIGINAL = "_anvil_uncached"


def install() -> None:
    """Make the three repairs (once)."""
    _cache_defaults()
    _quiet_writer_after_close()
    runners.inspect = CallerOnly  # type: ignore[attr-defined]


class CallerOnly:
    """What `Runner.stop` uses of `inspect`: `stack()[1][0]` is the frame that called it,
    `getframeinfo(frame)` its `filename` and `lineno`. No source file is read."""

    @staticmethod
    def stack() -> list[tuple[FrameType | None]]:
        # frame 1 is `Runner.stop`, which called this; frame 2 is what called `stop`
        return [(None,), (sys._getframe(2),)]

    @staticmethod
    def getframeinfo(frame: FrameType) -> SimpleNamespace:
        return SimpleNamespace(filename=frame.f_code.co_filename, lineno=frame.f_lineno)


def _quiet_writer_after_close() -> None:
    """`StatsCSVFileWriter.stats_writer` ends quietly once its files are closed."""
    current = StatsCSVFileWriter.stats_writer
    if getattr(current, _ORIGINAL, None) is not None:
        return

    @functools.wraps(current)
    def stats_writer(self: StatsCSVFileWriter) -> None:
        try:
            current(self)
        except ValueError:
            if not self.requests_csv_filehandle.closed:
                raise

    setattr(stats_writer, _ORIGINAL, current)
    StatsCSVFileWriter.stats_writer = stats_writer


def _cache_defaults() -> None:
    """Replace `locust.argument_parser.default_args_dict` by a cached one (once)."""
    current = argument_parser.default_args_dict
    if getattr(current, _ORIGINAL, None) is not None:
        return
    computed = functools.cache(current)

    def default_args_dict() -> dict:
        return dict(computed())

    setattr(default_args_dict, _ORIGINAL, current)
    default_args_dict.__doc__ = current.__doc__
    argument_parser.default_args_dict = default_args_dict


def uncached() -> Callable[[], dict]:
    """Locust's own function, as it was before `install` (for tests)."""
    current = argument_parser.default_args_dict
    return getattr(current, _ORIGINAL, current)


def original_csv_writer() -> Callable[[StatsCSVFileWriter], None]:
    """Locust's own `stats_writer`, as it was before `install` (for tests)."""
    current = StatsCSVFileWriter.stats_writer
    return getattr(current, _ORIGINAL, current)
