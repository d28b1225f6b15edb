"""A run's progress in Locust's process: none with --quiet; the watch alone for a web-UI
run; headless off a terminal, plain lines through the `anvil` logger; stopped, the last
reading is in `progress.json` and shown."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import LiveStats
from anvil_metrics.live.progress import read_progress
from anvil_metrics.runs.display import PlainLines
from anvil_metrics.runs.progressrun import ProgressRun


class Load:
    def so_far(self) -> tuple[float | None, float | None]:
        return (0.5, 20.0)


def _session(tmp_path: Path, every_s: float | None) -> Any:
    return SimpleNamespace(
        run_id="r1", run_dir=tmp_path, live=LiveStats("r1", 10),
        budget=RequestBudget(10, 0, [512]), opts=SimpleNamespace(progress_every_s=every_s),
        scenario=SimpleNamespace(duration_s=None, requests=10), load=Load(),
        clock=SimpleNamespace(duration_began_ns=None, step=None), ended_by=None)


def test_quiet_starts_nothing(tmp_path: Path) -> None:
    assert ProgressRun.start(_session(tmp_path, None), headless=True,
                             distributed=False) is None
    assert not (tmp_path / "progress.json").exists()


def test_a_web_ui_run_gets_the_file_only(tmp_path: Path) -> None:
    run = ProgressRun.start(_session(tmp_path, 10.0), headless=False, distributed=False)
    assert run is not None and run.display is None
    run.stop()
    assert read_progress(tmp_path / "progress.json").requests_planned == 10


def test_headless_off_a_terminal_logs_plain_lines(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    run = ProgressRun.start(_session(tmp_path, 10.0), headless=True, distributed=False)
    assert run is not None and isinstance(run.display, PlainLines)
    with caplog.at_level(logging.INFO, logger="anvil"):
        run.stop()  # the last reading, shown as the closing line
    lines = [r.getMessage() for r in caplog.records if r.name == "anvil"]
    assert lines and lines[-1].startswith("anvil: running 0/10 requests")
    assert "\x1b" not in "".join(lines)
