"""sampler: the load process's handle on the scrape child — `first` and `last` each asked
once and waited for, the child stopped by its PID at the end, and a child that does not
answer waited for no longer than its bound, with a warning.

Why: the sampler must never hold the measurement; a mark that waited forever for a dead
child would stall the first measured request, and a child left running would scrape the
server after the run.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import gevent.subprocess
import orjson
import pytest
from localhttp import serving

from anvil_metrics.telemetry import sampler
from anvil_metrics.telemetry.sampler import ServerTelemetry
from anvil_metrics.telemetry.servermetrics import SAMPLES_FILE

TEXT = b"# TYPE up gauge\nup 1\n"


def test_first_and_last_are_written_and_the_child_ends(tmp_path: Path) -> None:
    with serving({"/metrics": (200, {}, TEXT)}) as url:
        telemetry = ServerTelemetry.start(url + "/metrics", tmp_path, 3600.0, 5.0)
        try:
            assert telemetry.mark("first") is True
            assert telemetry.mark("first") is True  # asked once: the answer kept
        finally:
            telemetry.finish()
    assert telemetry.proc.poll() is not None and telemetry.marked == {"first": True,
                                                                      "last": True}
    lines = [orjson.loads(x) for x in (tmp_path / SAMPLES_FILE).read_bytes().splitlines()]
    assert lines[0]["type"] == "scrape"
    assert [x["mark"] for x in lines[1:] if x["mark"]] == ["first", "last"]
    assert telemetry.wait_s == 2 * 5.0 + sampler.MARK_WAIT_S


def test_a_child_that_does_not_answer_is_not_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # a child that reads its marks and never answers; its pipes cooperative, as in the
    # gevent-patched Locust process the sampler runs in
    proc = gevent.subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    telemetry = ServerTelemetry(proc, tmp_path / SAMPLES_FILE, timeout_s=0.0)
    monkeypatch.setattr(telemetry, "wait_s", 0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="anvil"):
            assert telemetry.mark("first") is False
    finally:
        telemetry.finish()
    assert proc.poll() is not None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2  # first, then last at finish: each said once
    assert "scrape before the first measured request did not finish within 0.05 s" in warnings[0]
    assert "after the last request" in warnings[1]


def test_finish_without_a_first_mark_asks_for_no_last(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    telemetry = ServerTelemetry(proc, tmp_path / SAMPLES_FILE, timeout_s=1.0)
    telemetry.finish()
    assert telemetry.marked == {} and proc.poll() is not None
    assert telemetry.mark("first") is False  # the child is gone: no waiting at all
