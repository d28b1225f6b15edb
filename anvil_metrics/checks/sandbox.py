"""Run untrusted, model-written Python and say how it ended, leaving the machine as it was.

Why its own module: the `coding` suite runs whatever a model wrote. That code may loop, fork
without end, allocate gigabytes, write outside its folder or reach the network (by mistake
or not), so running it is a job of its own, kept apart from the questions and the judge.

How one program runs (`run_python`):

* a *keeper* process (forked from anvil, still root) becomes a child subreaper, so every
  process the program leaves behind is re-parented to it and reaped (this VM's PID 1 reaps
  no orphans: without the keeper they would stay as zombies, counting against the
  process limit of the next run);
* where the machine allows, the keeper enters new mount, network and IPC namespaces: the
  network has only a loopback that is down (nothing, not even 127.0.0.1, is reachable);
  every mount is re-bound read-only except the program's folder, a fresh 64 MiB tmpfs, so
  /tmp, /var/tmp, /dev/shm and the repository cannot be written; the host sees none of it;
* the program runs as `python -I solution.py` in that folder, in its own process group, with
  limits on CPU time, address space, file size, processes and open files, no new
  privileges, a minimal environment, and — when anvil is root — as `SANDBOX_UID`, a uid no
  account or process uses, so that RLIMIT_NPROC binds (root ignores it) and the sweep at
  the end (`kill(-1)` by a process of that uid, which reaches all of that uid's processes in
  one call: a fork bomb cannot outrun it) touches nothing else. Not `nobody` (65534):
  other services run as nobody, and the sweep would kill them. Runs are serialised by a
  lock file, so two anvil processes never share that uid at once. The interpreter is one
  that uid may run (`interpreter`: here the venv's python lives below /root, 0700);
* after the program ends, or at the wall timeout, the keeper kills what is left and reaps it,
  then reports (exit status, CPU time, timeout, processes reaped, isolation achieved).

Not root: there is no other uid to switch to. The program runs as anvil's user with the
same limits, `user_isolated` is false, and RLIMIT_NPROC counts all of that user's processes
(so the limit is set to the count now plus `processes`); without namespaces the network and
the filesystem are not isolated, and the result says so (`network_isolated`,
`filesystem_isolated`). What the sandbox can still do: read world-readable files and see
host processes in /proc (there is no PID namespace); with the network isolated, what it
learns goes nowhere but its own stdout and stderr, whose tails reach the report.
"""

from __future__ import annotations

import fcntl
import json
import os
import posix
import pwd
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.checks.sandbox_keeper import (
    SANDBOX_GID,
    SANDBOX_UID,
    SandboxLimits,
    keep,
    kill_uid,
    pause,
)

OUTPUT_BYTES = 16 << 10  # the tail of stdout/stderr kept
KEEPER_GRACE_S = 5.0  # the keeper's own clean-up time beyond the wall timeout
__all__ = ["SANDBOX_UID", "SandboxError", "SandboxLimits", "SandboxResult", "classify",
           "describe", "interpreter", "run_python"]


class SandboxError(Exception):
    """The sandbox itself could not run the program (not the program's fault)."""


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How a program ended. `outcome`: "ok" (exit 0), "error" (a non-zero exit),
    "cpu_limit", "timeout" or "killed" (another signal); `reason` is one short line."""

    outcome: str
    reason: str | None
    returncode: int | None  # None when killed by a signal
    signal: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    cpu_s: float | None
    processes_reaped: int  # processes other than the program itself, killed and reaped
    isolation: dict[str, Any]


def interpreter() -> str:
    """A Python the sandbox uid can run: anvil's own, or the base one behind its venv, or
    the system's (this VM's venv python lives below /root, which is 0700)."""
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3",
                  "/usr/local/bin/python3"]
    for path in candidates:
        if path and (os.geteuid() != 0 or _others_can_run(path)):
            return os.path.realpath(path)
    raise SandboxError("no Python interpreter the sandbox uid may run (tried "
                       + ", ".join(p for p in candidates if p) + ")")


def _others_can_run(path: str) -> bool:
    real = Path(os.path.realpath(path))
    try:
        if real.stat().st_mode & 0o005 != 0o005:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def run_python(code: str, limits: SandboxLimits | None = None,
               expect_stdout: str | None = None) -> SandboxResult:
    """Run `code` as a program in the sandbox and say how it ended. `expect_stdout`: a line
    the program must print for an exit 0 to count as "ok" (proof it ran to its end)."""
    limits = limits or SandboxLimits()
    root = os.geteuid() == 0
    if root:
        _check_uid_unused()
    python = interpreter()
    with (_lock() if root else nullcontext()), tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        workdir = tempfile.mkdtemp(prefix="anvil-sandbox-")
        try:
            if root:
                os.chown(workdir, SANDBOX_UID, SANDBOX_GID)
            t0 = time.monotonic()
            report = _run_keeper(code, python, workdir, limits, out.fileno(), err.fileno(),
                                 root)
            elapsed_s = time.monotonic() - t0
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        stdout, stderr = _tail(out), _tail(err)
    outcome, reason = classify(report, stdout, stderr, limits, expect_stdout)
    status = report.get("status")
    return SandboxResult(
        outcome, reason,
        os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
        os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        stdout, stderr, elapsed_s, report.get("cpu_s"), report.get("reaped", 0),
        {**report.get("isolation", {}), "user_isolated": root,
         "uid": SANDBOX_UID if root else os.geteuid(), "python": python})


def describe(limits: SandboxLimits) -> dict[str, Any]:
    """The sandbox as it is on this machine (a trivial program is run once to find out)."""
    nonce = secrets.token_hex(8)
    found = run_python(f"print({nonce!r})", limits, expect_stdout=nonce)
    out = {**found.isolation, "works": found.outcome == "ok", "limits": asdict(limits)}
    if found.reason is not None:
        out["reason"] = found.reason
    return out


def classify(report: dict[str, Any], stdout: str, stderr: str, limits: SandboxLimits,
             expect_stdout: str | None) -> tuple[str, str | None]:
    """(outcome, reason) from the keeper's report and the program's output."""
    if report.get("failed"):
        raise SandboxError(f"the sandbox could not run the program: {report['failed']}")
    status = report.get("status")
    if report.get("timed_out") or status is None:
        others = report.get("reaped") or 0
        tail = f" with {others} processes it had started" if others else ""
        return "timeout", f"timeout: still running after {limits.wall_s:g} s (wall), killed{tail}"
    last = _last_line(stderr)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        cpu = report.get("cpu_s") or 0.0
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_s):
            return "cpu_limit", f"killed by the CPU time limit ({limits.cpu_s} s)"
        return "killed", f"killed by signal {signal.Signals(sig).name}"
    code = os.WEXITSTATUS(status)
    if code == 0:
        if expect_stdout is not None and expect_stdout not in stdout.split():
            return "error", "the program ended before its tests ran (exit 0 without them)"
        return "ok", None
    if "MemoryError" in last:
        return "error", f"memory limit ({limits.memory_bytes >> 20} MiB): {last}"
    if last.startswith("AssertionError"):
        said = last.removeprefix("AssertionError").lstrip(": ")
        return "error", f"assert failed: {said}" if said else "assert failed"
    if last.startswith(("SyntaxError", "IndentationError", "TabError")):
        return "error", f"syntax error: {last}"
    return "error", f"exit status {code}: {last or 'no message'}"


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def _tail(f: Any) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - OUTPUT_BYTES))
    return f.read().decode("utf-8", "replace")


def _check_uid_unused() -> None:
    try:
        name = pwd.getpwuid(SANDBOX_UID).pw_name
    except KeyError:
        return
    raise SandboxError(f"uid {SANDBOX_UID} is the account {name!r}: the sandbox needs a uid "
                       "no account uses (its processes are all killed after each run)")


class _lock:
    """One sandbox run at a time on this machine (as root they share `SANDBOX_UID`)."""

    def __enter__(self) -> None:
        path = os.path.join(tempfile.gettempdir(), f"anvil-sandbox-{SANDBOX_UID}.lock")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        posix.close(self._fd)


def _run_keeper(code: str, python: str, workdir: str, limits: SandboxLimits, out_fd: int,
                err_fd: int, root: bool) -> dict[str, Any]:
    """Fork the keeper, wait for its report (a JSON object through a pipe)."""
    r, w = os.pipe()
    pid = posix.fork()
    if pid == 0:  # the keeper: never returns into the caller's stack
        try:
            posix.close(r)
            report = keep(code, python, workdir, limits, out_fd, err_fd, root)
        except BaseException as e:  # noqa: BLE001 - reported, the parent decides
            report = {"failed": f"{type(e).__name__}: {e}"}
        try:
            os.write(w, json.dumps(report).encode())
        finally:
            os._exit(0)
    posix.close(w)
    deadline = time.monotonic() + limits.wall_s + KEEPER_GRACE_S
    try:
        while posix.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                raise SandboxError("the sandbox's keeper did not finish in time")
            pause(0.005)
    except BaseException:  # a hung keeper, or anvil interrupted: end the keeper and the run
        try:
            os.kill(pid, signal.SIGKILL)
            posix.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        if root:
            kill_uid()
        posix.close(r)
        raise
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except ValueError:
        raise SandboxError(f"the sandbox's keeper said nothing readable: {raw[:200]!r}"
                           ) from None
