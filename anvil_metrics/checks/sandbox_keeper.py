"""The sandbox's process-level mechanics: the keeper, the namespaces, the limits, the sweep.

Why apart from `sandbox.py`: that module says what a run is and how it ended; this one is
the part that runs in forked children (never returning into anvil's stack) and talks to the
kernel (unshare, mount, prctl, setrlimit, setuid, kill). `sandbox.py`'s docstring says why
each step is there; the steps, in order:

    keep()           the keeper: setsid, child subreaper, namespaces, the program's file,
                     fork the program, wait (wall timeout), sweep, report a JSON object
    _isolate()       new network + IPC namespaces; a new mount namespace in which every
                     mount is re-bound read-only and the folder becomes a fresh tmpfs
    _exec_program()  rlimits, setgroups/setgid/setuid, no new privileges, exec python -I
    _sweep()         kill(-1) as the sandbox uid (root) or the keeper's children, then reap
"""

from __future__ import annotations

import _signal
import ctypes
import os
import posix
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

SANDBOX_UID = 65533  # a uid/gid no account names (checked): `nobody` (65534) is shared
SANDBOX_GID = 65533
WORKDIR_TMPFS = "size=64m,nr_inodes=4096,mode=0700"

_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWIPC = 0x00020000, 0x40000000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 36, 38
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: never dlopen in a forked child


def pause(seconds: float) -> None:
    """`time.sleep` as it was before gevent (imported with locust) patched it.

    Under gevent's monkey-patching `os.fork`, `os.waitpid` and `os.close` are gevent's (a
    close is deferred to the hub's loop: a pipe's write end stays open, its reader never
    sees the end), so the sandbox calls them from `posix`, which gevent leaves alone, and
    never yields to a hub, whose SIGCHLD handler would reap its children."""
    monkey = sys.modules.get("gevent.monkey")
    sleep = monkey.get_original("time", "sleep") if monkey is not None else time.sleep
    sleep(seconds)


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    cpu_s: int = 10  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL a second later)
    wall_s: float = 20.0  # the whole run, then every process of the run is killed
    memory_bytes: int = 512 << 20  # RLIMIT_AS
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE (stdout and stderr included)
    processes: int = 16  # RLIMIT_NPROC
    open_files: int = 64  # RLIMIT_NOFILE


def keep(code: str, python: str, workdir: str, limits: SandboxLimits, out_fd: int,
         err_fd: int, root: bool) -> dict[str, Any]:
    """The keeper's whole job, in the forked keeper process; its report (JSON-able)."""
    _signal.set_wakeup_fd(-1)  # the parent's (gevent's) wake-up pipe is not the keeper's
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # no inherited reaper but the keeper
    os.setsid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    isolation = _isolate(workdir, root)
    path = os.path.join(workdir, "solution.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)
    os.chmod(path, 0o644)
    if root:
        kill_uid()  # what a killed anvil may have left would count against RLIMIT_NPROC
    nproc = limits.processes if root else _own_processes() + limits.processes
    child = posix.fork()
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
            pause(0.005)
    reaped += _sweep(child, root)
    return {"status": status, "cpu_s": cpu_s, "timed_out": timed_out, "reaped": reaped,
            "isolation": isolation}


def _isolate(workdir: str, root: bool) -> dict[str, Any]:
    """Enter new namespaces where allowed; make everything but `workdir` read-only."""
    out: dict[str, Any] = {"network_isolated": False, "ipc_isolated": False,
                           "filesystem_isolated": False}
    if not root:
        return out
    out["network_isolated"] = _LIBC.unshare(_CLONE_NEWNET) == 0
    out["ipc_isolated"] = _LIBC.unshare(_CLONE_NEWIPC) == 0
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
            kill_uid()
        else:  # the program's process group at once (its descendants unless they left it)
            _kill(-child)
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
        pause(0.005)
    return reaped


def kill_uid() -> None:
    """kill(-1, SIGKILL) from a process of the sandbox uid: every process of that uid, in
    one call the kernel makes with the task list locked (no fork slips through)."""
    pid = posix.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(SANDBOX_GID)
            os.setuid(SANDBOX_UID)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    posix.waitpid(pid, 0)


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
