"""sandbox_keeper: the keeper reaps what a program leaves behind — a child still running
when the program exits is killed and counted, and no process of the sandbox uid remains —
and its small tools (`processes_of`, `pause`) say what they promise.

Why: this VM's PID 1 reaps no orphans; a process the keeper missed would stay as a zombie
counting against the next run's process limit, or keep running someone else's code.
"""

from __future__ import annotations

import os
import time

import pytest

from anvil_metrics.checks.sandbox import run_python
from anvil_metrics.checks.sandbox_keeper import (
    SANDBOX_UID,
    SandboxLimits,
    pause,
    processes_of,
)

LEAVES_A_CHILD = ("import subprocess, sys\n"
                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                  "print('left')")


def test_a_child_left_running_is_killed_and_counted() -> None:
    t0 = time.monotonic()
    result = run_python(LEAVES_A_CHILD, SandboxLimits(cpu_s=5, wall_s=10.0),
                        expect_stdout="left")
    assert result.outcome == "ok" and result.processes_reaped >= 1
    assert time.monotonic() - t0 < 10.0  # it did not wait for the child's minute
    if os.geteuid() == 0:
        assert processes_of(SANDBOX_UID) == []


def test_processes_of_finds_this_process() -> None:
    assert os.getpid() in processes_of(os.getuid())
    assert processes_of(2**31 - 2) == []  # a uid nothing runs as


def test_pause_sleeps_even_under_gevents_patching(monkeypatch: pytest.MonkeyPatch) -> None:
    import gevent.monkey

    slept: list[float] = []
    monkeypatch.setattr(gevent.monkey, "get_original",
                        lambda module, name: (lambda s: slept.append(s)))
    pause(0.25)
    assert slept == [0.25]  # the original sleep, not whatever `time.sleep` is now


def test_the_default_limits() -> None:
    limits = SandboxLimits()
    assert (limits.cpu_s, limits.wall_s, limits.memory_bytes >> 20, limits.processes) == (
        10, 20.0, 512, 16)
