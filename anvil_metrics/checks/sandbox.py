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
  one call: a fork bomb cannot outrun it) touches nothing else. Runs are serialised by a
  lock file, so two anvil processes never share that uid at once;
* after the program ends, or at the wall timeout, the keeper kills what is left and reaps it,
  then reports (exit status, CPU time, timeout, processes reaped, isolation achieved).

Not root: there is no other uid to switch to. The program runs as anvil's user with the
same limits, `user_isolated` is false, and RLIMIT_NPROC counts all of that user's processes
(so the limit is set to the count now plus `processes`); without namespaces the network and
the filesystem are not isolated, and the result says so (`network_isolated`,
`filesystem_isolated`). What the sandbox can still do: read world-readable files, and see
host processes in /proc (there is no PID namespace) — it can send nothing anywhere.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import pwd
import resource
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SANDBOX_UID = 65533  # a uid/gid no account names (checked): `nobody` (65534) is shared
SANDBOX_GID = 65533
OUTPUT_BYTES = 16 << 10  # the tail of stdout/stderr kept
WORKDIR_TMPFS = "size=64m,nr_inodes=4096,mode=0700"
KEEPER_GRACE_S = 5.0  # the keeper's own clean-up time beyond the wall timeout

_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWIPC = 0x00020000, 0x40000000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 36, 38
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: never dlopen in a forked child


class SandboxError(Exception):
    """The sandbox itself could not run the program (not the program's fault)."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    cpu_s: int = 10  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL a second later)
    wall_s: float = 20.0  # the whole run, then every process of the run is killed
    memory_bytes: int = 512 << 20  # RLIMIT_AS
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE (stdout and stderr included)
    processes: int = 16  # RLIMIT_NPROC
    open_files: int = 64  # RLIMIT_NOFILE


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


def run_python(code: str, limits: SandboxLimits = SandboxLimits(),
               expect_stdout: str | None = None) -> SandboxResult:
    """Run `code` as a program in the sandbox and say how it ended. `expect_stdout`: a line
    the program must print for an exit 0 to count as "ok" (proof it ran to its end)."""
    root = os.geteuid() == 0
    if root:
        _check_uid_unused()
    python = interpreter()
    with _lock(), tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
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
    if "MemoryError" in last or last == "MemoryError":
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
    """One sandbox run at a time on this machine (they share `SANDBOX_UID`)."""

    def __enter__(self) -> None:
        path = os.path.join(tempfile.gettempdir(), f"anvil-sandbox-{SANDBOX_UID}.lock")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def _run_keeper(code: str, python: str, workdir: str, limits: SandboxLimits, out_fd: int,
                err_fd: int, root: bool) -> dict[str, Any]:
    """Fork the keeper, wait for its report (a JSON object through a pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper: never returns into the caller's stack
        try:
            os.close(r)
            report = _keeper(code, python, workdir, limits, out_fd, err_fd, root)
        except BaseException as e:  # noqa: BLE001 - reported, the parent decides
            report = {"failed": f"{type(e).__name__}: {e}"}
        try:
            os.write(w, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + limits.wall_s + KEEPER_GRACE_S
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:  # the keeper hung: end it and its uid's processes
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if root:
                _kill_uid()
            os.close(r)
            raise SandboxError("the sandbox's keeper did not finish in time")
        time.sleep(0.005)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except ValueError:
        raise SandboxError(f"the sandbox's keeper said nothing readable: {raw[:200]!r}"
                           ) from None


def _keeper(code: str, python: str, workdir: str, limits: SandboxLimits, out_fd: int,
            err_fd: int, root: bool) -> dict[str, Any]:
    os.setsid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    isolation = _isolate(workdir, root)
    path = os.path.join(workdir, "solution.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)
    os.chmod(path, 0o644)
    nproc = limits.processes if root else _own_processes() + limits.processes
    child = os.fork()
    if child == 0:
        _exec_program(python, workdir, limits, nproc, out_fd, err_fd, root)
    deadline = time.monotonic() + limits.wall_s
    status, cpu_s, reaped, timed_out = None, None, 0, False
    while status is None:
        pid, st, usage = os.wait4(-1, os.WNOHANG)
        if pid == child:
            status, cpu_s = st, usage.ru_utime + usage.ru_stime
        elif pid:
            reaped += 1
        elif time.monotonic() > deadline:
            timed_out = True
            break
        else:
            time.sleep(0.005)
    reaped += _sweep(child, root)
    return {"status": status, "cpu_s": cpu_s, "timed_out": timed_out, "reaped": reaped,
            "isolation": isolation}


def _isolate(workdir: str, root: bool) -> dict[str, Any]:
    """Enter new namespaces where allowed; make everything but `workdir` read-only."""
    out: dict[str, Any] = {"network_isolated": False, "filesystem_isolated": False}
    if not root:
        return out
    if _LIBC.unshare(_CLONE_NEWNET | _CLONE_NEWIPC) == 0:
        out["network_isolated"] = True
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        return out
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    failed = []
    for point, options in _mounts():
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for option in options.split(","):
            flags |= _MOUNT_FLAGS.get(option, 0)
        try:
            _mount(None, point, None, flags)
        except OSError:
            failed.append(point)
    _mount("tmpfs", workdir, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"{WORKDIR_TMPFS},uid={SANDBOX_UID},gid={SANDBOX_GID}")
    out["filesystem_isolated"] = not failed
    if failed:
        out["writable_mounts"] = failed
    return out


def _mounts() -> list[tuple[str, str]]:
    """(mount point, per-mount options) of this mount namespace."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # "\040" is a space
            out.append((point, fields[5]))
    return out


def _exec_program(python: str, workdir: str, limits: SandboxLimits, nproc: int, out_fd: int,
                  err_fd: int, root: bool) -> None:
    """In the program's process: limits, no privileges, then exec. Never returns."""
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 1 << 16)
        for kind, value in ((resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1)),
                            (resource.RLIMIT_AS, (limits.memory_bytes,) * 2),
                            (resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2),
                            (resource.RLIMIT_NPROC, (nproc,) * 2),
                            (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
                            (resource.RLIMIT_CORE, (0, 0))):
            resource.setrlimit(kind, value)
        if root:
            os.setgroups([])
            os.setgid(SANDBOX_GID)
            os.setuid(SANDBOX_UID)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        os.chdir(workdir)
        os.umask(0o077)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir}
        os.execve(python, [python, "-I", "solution.py"], env)
    except BaseException as e:  # noqa: BLE001 - the program could not start
        os.write(2, f"sandbox: could not start the program: {e}\n".encode())
    finally:
        os._exit(126)


def _sweep(child: int, root: bool) -> int:
    """Kill every process the run left (all of the uid's when root; else the keeper's
    children, which orphans become) and reap them; how many were reaped."""
    reaped = 0
    for _ in range(400):  # 2 s at most: SIGKILL is not refused, so it ends long before
        if root:
            _kill_uid()
        else:
            for pid in _children(os.getpid()):
                _kill(pid)
        try:
            while True:
                pid, _, _ = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    break
                reaped += pid != child
        except ChildProcessError:
            return reaped
        time.sleep(0.005)
    return reaped


def _kill_uid() -> None:
    """kill(-1, SIGKILL) from a process of the sandbox uid: every process of that uid, in
    one call the kernel makes with the task list locked (no fork slips through)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(SANDBOX_GID)
            os.setuid(SANDBOX_UID)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == parent:
                out.append(int(entry))
    return out


def _own_processes() -> int:
    uid = os.getuid()
    return sum(1 for e in os.listdir("/proc") if e.isdigit() and _uid_of(int(e)) == uid)


def processes_of(uid: int) -> list[int]:
    """The pids of the processes whose real uid is `uid` (zombies included)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and _uid_of(int(e)) == uid]


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _prctl(option: int, value: int) -> None:
    if _LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    if _LIBC.mount(_c(source), _c(target), _c(fstype), ctypes.c_ulong(flags), _c(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def _c(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None
