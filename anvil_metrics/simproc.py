"""Start and stop the built-in simulator as a child process (demo, tests, benchmarks).

The simulator prints `anvil sim listening on http://127.0.0.1:PORT` once bound; with
`--port 0` the kernel picks a free port, so parallel test runs never collide. The child is
always stopped by its PID: SIGTERM, then SIGKILL if it has not exited within 5 s.
"""

from __future__ import annotations

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
