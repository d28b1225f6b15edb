"""simproc: the simulator started as a child on a free 127.0.0.1 port and always stopped by
its PID; a child that ignores SIGTERM killed; one that cannot start named with its error;
CPUs pinned apart and given back.

Why: tests and demos start hundreds of simulators; one left running holds a port and a
CPU for the rest of the machine's day.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from anvil_metrics.errors import AnvilError
from anvil_metrics.runs.simproc import pinned_apart, start_simulator, stop_process
from anvil_metrics.wire.plainhttp import OPENER, read_body


def test_the_simulator_answers_on_127_0_0_1_and_is_stopped_after() -> None:
    with start_simulator(["--model", "m-test"]) as sim:
        assert sim.url.startswith("http://127.0.0.1:") and sim.proc.pid == sim.pid
        with OPENER.open(sim.url + "/v1/models", timeout=5) as response:
            body = orjson.loads(read_body(response, "GET /v1/models", 5))
        assert body["data"][0]["id"] == "m-test"
    assert sim.proc.poll() is not None


def test_one_that_cannot_start_is_named_with_its_error() -> None:
    with pytest.raises(AnvilError, match=r"the simulator did not start .*--no-such-flag"), \
            start_simulator(["--no-such-flag"]):
        pass


def test_stop_process_kills_what_ignores_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-c",
                             "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                             " print('ready', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.terminate = proc.kill  # what SIGTERM would not do, in a test that takes no 5 s
        stop_process(proc)
        assert proc.returncode is not None
        stop_process(proc)  # a second stop of an ended process is harmless
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity")
def test_pinned_apart_gives_this_process_its_cpus_back() -> None:
    mine = os.sched_getaffinity(0)
    with start_simulator() as sim, pinned_apart(sim.pid) as said:
        if len(mine) >= 2:
            first = min(mine)
            assert os.sched_getaffinity(sim.pid) == {first}
            assert os.sched_getaffinity(0) == mine - {first}
            assert said.startswith(f"simulator on CPU {first}")
        else:
            assert said == "not pinned (one CPU)"
    assert os.sched_getaffinity(0) == mine
