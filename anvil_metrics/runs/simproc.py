"""Start and stop the built-in simulator as a child process (demo, tests, benchmarks).

The simulator prints `anvil sim listening on http://127.0.0.1:PORT` once bound; with
`--port 0` the kernel picks a free port, so parallel test runs never collide. The child is
always stopped by its PID: SIGTERM, then SIGKILL if it has not exited within 5 s.

When the simulator and a client share a small machine, `pinned_apart` gives the simulator a
CPU of its own. Without it, on a 2-vCPU VM, the kernel woke the simulator on the CPU of the
client that had just written to it (loopback wake-ups are "affine"), where it waited until
the client blocked. Over 8 runs of 16 streams each (tests/e2e/test_truth.py's spread16): a
request reached the simulator up to 2.7 ms after it was sent (p90 per run 0.87-2.07 ms),
and a stream's last event was stamped up to 4.2 ms after it was written (p90 0.67-2.67 ms);
pinned apart, p90 0.55-0.86 ms and 0.17-0.98 ms. A server on its own machine, as in any real
benchmark, has no such coupling.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from anvil_metrics.errors import AnvilError

_LISTENING = re.compile(rb"listening on (http://\S+)")


@dataclass(frozen=True, slots=True)
class SimProcess:
    url: str
    pid: int
    proc: subprocess.Popen


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 5 s: every process anvil starts is ended by its PID."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def start_simulator(args: list[str] | None = None, timeout_s: float = 15.0
                    ) -> Iterator[SimProcess]:
    cmd = [sys.executable, "-m", "anvil_metrics.sim", "--host", "127.0.0.1", "--port", "0",
           *(args or [])]
    # stderr goes to a file, never an unread pipe a chatty simulator could fill and block on
    errfile = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errfile,
                            stdin=subprocess.DEVNULL)
    # poll, not select: select() refuses descriptors numbered 1024 or more, which a long
    # test session can reach
    poller = select.poll()
    poller.register(proc.stdout, select.POLLIN)
    try:
        deadline = time.monotonic() + timeout_s
        url = None
        while url is None:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                errfile.seek(0)
                err = errfile.read().decode(errors="replace")
                raise AnvilError(f"the simulator did not start ({' '.join(cmd)}): "
                                 f"{err.strip()[-500:] or 'no listening line in time'}")
            if poller.poll(left * 1000):
                chunk = proc.stdout.readline()
                m = _LISTENING.search(chunk)
                if m:
                    url = m.group(1).decode()
        yield SimProcess(url, proc.pid, proc)
    finally:
        stop_process(proc)
        errfile.close()


@contextmanager
def pinned_apart(sim_pid: int) -> Iterator[str]:
    """Run the simulator on the first CPU this process may use and this process, with the
    processes it starts from now on, on the others; restore this process's CPUs on exit.
    Yields what was done (for a printout). With one CPU, or without CPU affinity on this
    platform, nothing changes."""
    if not hasattr(os, "sched_setaffinity"):
        yield "not pinned (no CPU affinity here)"
        return
    mine = os.sched_getaffinity(0)
    cpus = sorted(mine)
    if len(cpus) < 2:
        yield "not pinned (one CPU)"
        return
    os.sched_setaffinity(sim_pid, {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))
    try:
        yield f"simulator on CPU {cpus[0]}, client on CPU {','.join(map(str, cpus[1:]))}"
    finally:
        os.sched_setaffinity(0, mine)
