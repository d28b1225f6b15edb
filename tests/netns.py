"""Network namespaces as separate hosts on one switch, for tests that need a real network.

Why: processes on 127.0.0.1 share one loopback, where nothing can be cut and no address
names a host. A network namespace has its own interfaces, addresses, routes and ports; each
joined by a veth pair to one bridge, they behave as hosts on one switch, and taking a host's
switch port down is pulling its cable. The bridge lives in a namespace of its own too, so
the machine's own network is never touched, and fixed ports (5557, 8000) are free in every
fresh namespace: no port races.

Everything a `Lab` makes is named with its prefix (`anv<pid>`: two test sessions never
share a name) and removed when it closes, on failure too (a half-built lab included); its
processes are stopped by PID first, since a namespace stays alive while a process is in it.
`leftovers(prefix)` lists what is still there. Needs root and the `ip` command (iproute2);
`unavailable()` says why not when it cannot run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from anvil_metrics.runs.simproc import stop_process

SUBNET = "10.219.0"  # inside the lab's own namespaces only: no clash with the host's routes
IP_TIMEOUT_S = 10.0


class LabError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Host:
    name: str  # short: "master"
    ns: str  # its network namespace
    addr: str  # its address on the bridge
    port_link: str  # its switch port: the bridge-side veth end, in the bridge's namespace


def unavailable() -> str | None:
    """Why a lab cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc


def namespaces(prefix: str) -> list[str]:
    out = ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith(prefix)]


def leftovers(prefix: str) -> list[str]:
    """Namespaces, and links of this (the root) namespace, whose names start with `prefix`."""
    links = [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", ip("-o", "link").stdout,
                                             re.MULTILINE)]
    return [f"netns {n}" for n in namespaces(prefix)] + [f"link {n}" for n in links
                                                          if n.startswith(prefix)]


def netem_works(prefix: str) -> bool:
    """Whether this kernel has `tc qdisc ... netem` (tried in a throwaway namespace)."""
    ns = f"{prefix}-tc"
    ip("netns", "add", ns)
    try:
        ip("link", "set", "lo", "up", ns=ns)
        proc = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo",
                               "root", "netem", "delay", "10ms"], capture_output=True,
                              timeout=IP_TIMEOUT_S, stdin=subprocess.DEVNULL)
        return proc.returncode == 0
    finally:
        ip("netns", "del", ns, check=False)


class Lab:
    """Hosts `names` on one bridge: `with Lab(prefix, ["sim", "master"]) as lab:`."""

    def __init__(self, prefix: str, names: Sequence[str]) -> None:
        if len(prefix) > 12:  # link names (prefix + "br", "p<i>") have at most 15 bytes
            raise LabError(f"prefix {prefix!r}: at most 12 characters")
        self.prefix = prefix
        self.bridge_ns = f"{prefix}-br"
        self.hosts = {n: Host(n, f"{prefix}-{n}", f"{SUBNET}.{10 + i}", f"{prefix}p{i}")
                      for i, n in enumerate(names)}
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Lab:
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def build(self) -> None:
        """Make the bridge and the hosts; on failure, `close()` removes what was made."""
        br, bridge = self.bridge_ns, f"{self.prefix}br"
        ip("netns", "add", br)
        ip("link", "set", "lo", "up", ns=br)
        ip("link", "add", bridge, "type", "bridge", ns=br)
        ip("link", "set", bridge, "up", ns=br)
        for h in self.hosts.values():
            ip("netns", "add", h.ns)
            ip("link", "set", "lo", "up", ns=h.ns)
            ip("link", "add", h.port_link, "type", "veth", "peer", "name", "eth0", "netns",
               h.ns, ns=br)
            ip("link", "set", h.port_link, "master", bridge, ns=br)
            ip("link", "set", h.port_link, "up", ns=br)
            ip("addr", "add", f"{h.addr}/24", "dev", "eth0", ns=h.ns)
            ip("link", "set", "eth0", "up", ns=h.ns)

    def popen(self, host: str, cmd: Sequence[str], log: Path,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """`cmd` on `host` (`ip netns exec` execs it: the PID is the command's own), output
        to `log`; stopped by PID when the lab closes, if not before."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host].ns, *cmd],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def run(self, host: str, cmd: Sequence[str], timeout_s: float = 20.0
            ) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.hosts[host].ns, *cmd],
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)

    def get(self, host: str, url: str) -> str:
        """An HTTP GET made from `host` (a short Python child in its namespace)."""
        proc = self.run(host, [sys.executable, "-c", "import sys, urllib.request; sys.stdout."
                               "write(urllib.request.urlopen(sys.argv[1], timeout=5).read()"
                               ".decode())", url])
        if proc.returncode != 0:
            raise LabError(f"GET {url} from {host}: {proc.stderr.strip()[-500:]}")
        return proc.stdout

    def cut(self, host: str) -> None:
        """Pull the host's cable: its switch port goes down."""
        ip("link", "set", self.hosts[host].port_link, "down", ns=self.bridge_ns)

    def mend(self, host: str) -> None:
        ip("link", "set", self.hosts[host].port_link, "up", ns=self.bridge_ns)

    def stop(self, proc: subprocess.Popen) -> None:
        stop_process(proc)
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        """Every process by PID, then every namespace with the prefix (a half-built lab's
        too). Errors are collected, and raised once everything was tried."""
        problems = []
        for proc in list(self.procs):
            try:
                self.stop(proc)
            except (OSError, subprocess.SubprocessError) as e:
                problems.append(f"pid {proc.pid}: {e}")
        for ns in namespaces(self.prefix):
            r = ip("netns", "del", ns, check=False)
            if r.returncode != 0:
                problems.append(f"netns del {ns}: {r.stderr.strip()}")
        if problems:
            raise LabError("; ".join(problems))


def wait_for_line(proc: subprocess.Popen, log: Path, pattern: str, timeout_s: float
                  ) -> re.Match[str]:
    """The first match of `pattern` in the process's log, polled until it appears; the
    process's exit or the timeout raise, with the log's tail."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        m = rx.search(text)
        if m:
            return m
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
            raise LabError(f"no {pattern!r} from {proc.args}: {why}\n{text[-2000:]}")
        time.sleep(0.05)
