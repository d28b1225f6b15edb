"""The tests' simulators, forked from one process per pytest process that has imported the
simulator once (`start_simulator`: the same contract as `anvil_metrics.runs.simproc`'s).

Why: a simulator started as `python -m anvil_metrics.sim` spends ~0.35-0.4 CPU-s before it
listens (the interpreter, numpy, asyncio, the simulator's modules), and the suite starts
~140 of them: ~50 CPU-s of a suite that is CPU-bound on two cores. Here a helper process
(`serve`, this file run as a script) imports `anvil_metrics.sim.server` once and forks a
child per simulator, which runs the simulator's own `main` on the same command line, with
the test's working folder and environment, stdin from /dev/null and stderr to a file, as
`start_simulator` would: ~0.03 CPU-s a start. What a test talks to is the same server, a
process of its own on 127.0.0.1; only how it came to run differs.

Where the start itself is under test, the tests use `anvil_metrics.runs.simproc`'s
(tests/unit/runs/test_simproc.py), as do `anvil demo` and every anvil command.

The child is not the test's child, so a `Forked` stands in for its `Popen`: signals by
pidfd, exit seen on the pidfd, exit status reaped and told by the helper. The helper ends
when its pytest process closes its stdin (or at the session's end: `close_helper`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from anvil_metrics.errors import AnvilError
from anvil_metrics.runs.simproc import SimProcess, stop_process

_helper: subprocess.Popen | None = None


def _ask(request: dict[str, Any]) -> dict[str, Any]:
    """One request to this process's helper (started at the first), its answer."""
    global _helper
    if _helper is None or _helper.poll() is not None:
        _helper = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE)
    assert _helper.stdin is not None and _helper.stdout is not None
    _helper.stdin.write(json.dumps(request).encode() + b"\n")
    _helper.stdin.flush()
    line = _helper.stdout.readline()
    if not line:
        raise AnvilError(f"the simulator helper ended (exit {_helper.wait()})")
    return json.loads(line)


def close_helper() -> None:
    """End this process's helper, by its PID (conftest: at the session's end)."""
    global _helper
    if _helper is not None:
        _helper.stdin.close()
        stop_process(_helper)
        _helper = None


class Forked:
    """The part of `subprocess.Popen` that tests and `stop_process` use, for a forked
    simulator: `pid`, `returncode`, `poll`, `wait`, `send_signal`, `terminate`, `kill`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._fd = os.pidfd_open(pid)

    def _exited(self, timeout_s: float | None) -> bool:
        """Has it ended, within `timeout_s` (None: however long it takes)?"""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(None if timeout_s is None else max(0.0, timeout_s) * 1000))

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0):
            deadline = time.monotonic() + 5  # the helper reaps it at its next request
            while (code := _ask({"reap": self.pid})["code"]) is None:
                assert time.monotonic() < deadline, f"simulator {self.pid} never reaped"
                time.sleep(0.01)
            self.returncode = code
            os.close(self._fd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._exited(timeout):
            raise subprocess.TimeoutExpired(f"simulator {self.pid}", timeout or 0)
        code = self.poll()
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self._fd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@contextmanager
def start_simulator(args: list[str] | None = None, timeout_s: float = 15.0
                    ) -> Iterator[SimProcess]:
    """`simproc.start_simulator`, forked: yields once the simulator listens; stopped (by its
    PID: SIGTERM, then SIGKILL) on exit."""
    argv = ["--host", "127.0.0.1", "--port", "0", *(args or [])]
    fd, errpath = tempfile.mkstemp(prefix="anvil-sim-", suffix=".err")
    os.close(fd)
    try:
        answer = _ask({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                       "stderr": errpath, "timeout_s": timeout_s})
        proc = Forked(answer["pid"])
        try:
            if answer.get("url") is None:
                proc.kill()
                proc.wait(5)
                err = Path(errpath).read_text(errors="replace")
                raise AnvilError(f"the simulator did not start (anvil sim {' '.join(argv)}): "
                                 f"{err.strip()[-500:] or 'no listening line in time'}")
            yield SimProcess(answer["url"], proc.pid, proc)  # type: ignore[arg-type]
        finally:
            stop_process(proc)  # type: ignore[arg-type]
    finally:
        os.unlink(errpath)


# -- the helper: this file run as a script --------------------------------------------------


def _child(request: dict[str, Any], write_fd: int) -> None:
    """In the forked child: the simulator's `main`, as `python -m anvil_metrics.sim` runs
    it (stdin /dev/null, stdout the pipe the helper reads the listening line from)."""
    from anvil_metrics.sim.server import main

    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(write_fd, 1)
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_APPEND), 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["anvil_metrics.sim", *request["argv"]]
        code = main(request["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _fork(request: dict[str, Any]) -> dict[str, Any]:
    """Fork a simulator; its PID and URL once it prints its listening line (no URL if it
    ended or said nothing within `timeout_s`)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(request, write_fd)
    os.close(write_fd)
    url, seen = None, b""
    deadline = time.monotonic() + request["timeout_s"]
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    while url is None and b"\n" not in seen and time.monotonic() < deadline:
        if poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            seen += chunk
            if b"listening on " in seen and b"\n" in seen:
                url = seen.split(b"listening on ", 1)[1].split()[0].decode()
    os.close(read_fd)  # the simulator prints nothing after that line
    return {"pid": pid, "url": url}


def serve() -> None:
    """Answer requests (one JSON line each) until stdin closes: a simulator to fork, or the
    exit status of one (None while it runs or is not reaped yet)."""
    from anvil_metrics.sim import server  # noqa: F401 - imported once, for every fork

    codes: dict[int, int] = {}
    for line in sys.stdin.buffer:
        request = json.loads(line)
        while True:  # reap what has ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            codes[pid] = os.waitstatus_to_exitcode(status)
        if "reap" in request:
            answer: dict[str, Any] = {"code": codes.pop(request["reap"], None)}
        else:
            answer = _fork(request)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
