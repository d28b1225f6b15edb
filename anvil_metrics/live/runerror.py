"""Why a run failed, told to `anvil run` through one small file instead of its log.

`anvil run` starts Locust as a child process and learns that the run failed when no
`benchmark.json` appears. The reason is the first error anvil logged in that process (e.g.
"anvil: cannot reach ... is the server running? check --host"): `ErrorFile`, a logging
handler the plugin attaches to the `anvil` logger when it is given a run folder, writes
that line to `<run_dir>/error.json` as `{"message": ...}`, and `read_error` gives it back.
Only the first error is kept, also across the processes of one run (`--processes`): the
file is created whole and linked into place, never overwritten, so a reader never sees a
half-written one. Nothing is written when nothing goes wrong.

A signal that stops a run in its set-up (before its first request: model discovery, prompt
sizing, the bodies) leaves an `error.json` too, naming the signal and the phase: the set-up
(`RunSession.start`) says each phase as it begins to a `SetUp` the plugin keeps on Locust's
`Environment` (as `runctx` keeps the run), and the signal's handler (`runs/stopsignals.py`)
writes it, in the run folder (plain Locust makes its folder late in the set-up: one is made
then, so a stopped run never leaves nothing).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.live.recorder import create_run_dir

ERROR_FILE = "error.json"


class ErrorFile(logging.Handler):
    """Writes the first ERROR-or-worse record's message to `<run_dir>/error.json`."""

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__(logging.ERROR)
        self.path = Path(run_dir) / ERROR_FILE
        self.written = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.written:
            return
        self.written = True
        try:
            write_error(self.path.parent, record.getMessage())
        except Exception:  # noqa: BLE001 - a logging handler must never raise
            self.handleError(record)


def write_error(run_dir: Path, message: str) -> bool:
    """Create `<run_dir>/error.json` holding `message` unless it exists; True if written."""
    final = run_dir / ERROR_FILE
    tmp = run_dir / f".{ERROR_FILE}.{os.getpid()}.tmp"
    tmp.write_bytes(orjson.dumps({"message": message}))
    try:
        os.link(tmp, final)  # atomic, and refuses to replace an earlier error
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def read_error(run_dir: Path) -> str | None:
    """The first error logged in `run_dir`'s run, or None (none, or no readable file)."""
    try:
        doc = orjson.loads((run_dir / ERROR_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    message = doc.get("message") if isinstance(doc, dict) else None
    return message if isinstance(message, str) and message else None


SETUP_ATTR = "anvil_setup"  # the set-up in progress, on Locust's Environment


@dataclass
class SetUp:
    """A run's set-up in progress: the phase it is in, and its run folder once there is one
    (given: `anvil run`'s; else made by the set-up, or when a signal stops it first)."""

    results_dir: str
    run_dir: Path | None = None
    phase: str = "reading the options"
    stopped: str | None = None  # the signal's reason, once one stopped it

    def enter(self, phase: str) -> None:
        self.phase = phase

    def made(self, run_dir: Path) -> None:
        """The set-up made (or took) the run's folder: error.json goes there."""
        self.run_dir = run_dir

    def stop(self, reason: str) -> str:
        """A signal stops the set-up: write error.json (the first error stays) and return
        its line."""
        message = (f"anvil: {reason} in the run's set-up ({self.phase}), before its first "
                   "request: nothing was measured")
        if self.stopped is None:
            self.stopped = reason
            if self.run_dir is None:
                self.run_dir = create_run_dir(self.results_dir)[1]
            write_error(self.run_dir, message)
        return message


def set_up_in_progress(environment: Any) -> SetUp | None:
    return getattr(environment, SETUP_ATTR, None)


def set_set_up(environment: Any, setup: SetUp | None) -> None:
    setattr(environment, SETUP_ATTR, setup)
