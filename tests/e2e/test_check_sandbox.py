"""The coding sandbox against hostile programs: each is stopped and reported, and the machine
is left as it was (no file outside the program's folder, no process of the sandbox's uid).

Programs go straight to `sandbox.run_python` (no server needed). The fork bomb ends at a
short wall timeout, so the whole file takes a few seconds; the others end by themselves,
under a roomy one.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil_metrics.checks.sandbox import SANDBOX_UID, SandboxLimits, describe, run_python
from anvil_metrics.checks.sandbox_keeper import processes_of

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(cpu_s=1, wall_s=2.0, processes=16)  # the fork bomb's: ends at 2 s
# every other program ends by itself in well under a second; its outcome is what is judged,
# so its wall limit is roomy: beside the suite and a hog a refused connect was still
# starting up at 2 s (outcome timeout, not error)
ROOMY = SandboxLimits(cpu_s=1, wall_s=30.0, processes=16)


@pytest.fixture(scope="module")
def isolation() -> dict:
    found = describe(LIMITS)
    assert found["works"], found
    return found


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[None]:
    yield
    if os.geteuid() == 0:
        assert processes_of(SANDBOX_UID) == [], "a process of the sandbox uid was left"


def _needs(isolation: dict, what: str) -> None:
    if not isolation[what]:
        pytest.skip(f"this machine does not allow it: {what} is false")


def test_the_sandbox_runs_a_program_that_writes_in_its_own_folder(isolation: dict) -> None:
    code = "open('out.txt', 'w').write('hi')\nprint(open('out.txt').read())"
    ran = run_python(code, ROOMY)
    assert (ran.outcome, ran.reason, ran.stdout.strip()) == ("ok", None, "hi")
    assert ran.isolation["user_isolated"] == (os.geteuid() == 0)


def test_writing_outside_its_folder_is_refused(isolation: dict) -> None:
    _needs(isolation, "filesystem_isolated")
    name = f"anvil-escape-{secrets.token_hex(6)}"
    targets = [f"/tmp/{name}", f"/var/tmp/{name}", f"/dev/shm/{name}", str(REPO / name),
               f"/root/{name}"]
    for target in targets:
        ran = run_python(f"open({target!r}, 'w').write('escaped')\n", ROOMY)
        assert ran.outcome == "error", (target, ran)
        assert ("Read-only file system" in ran.reason or "Permission denied" in ran.reason), \
            ran.reason
        assert not os.path.exists(target), f"{target} was written"


def test_sockets_reach_nothing_not_even_this_machine(isolation: dict) -> None:
    _needs(isolation, "network_isolated")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        for host, p in (("127.0.0.1", port), ("192.0.2.1", 80)):  # 192.0.2.1: TEST-NET-1
            code = f"import socket\nsocket.create_connection(({host!r}, {p}), timeout=1)\n"
            ran = run_python(code, ROOMY)
            assert ran.outcome == "error", (host, ran)
            assert "Network is unreachable" in ran.reason, ran.reason
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected


def test_a_fork_bomb_is_bounded_by_the_process_limit_and_killed(isolation: dict) -> None:
    if os.geteuid() != 0:
        pytest.skip("RLIMIT_NPROC binds only a dedicated uid; anvil is not root here")
    code = """import os
def bomb():
    while True:
        try:
            os.fork()
        except OSError:
            pass
forked = 0
while True:
    try:
        if os.fork() == 0:
            bomb()
        forked += 1
    except OSError as e:
        print("refused after", forked, "forks:", e, flush=True)
        bomb()
"""
    t0 = time.monotonic()
    ran = run_python(code, LIMITS)
    took = time.monotonic() - t0
    # the kill is judged by the outcome and the reaped processes below; the time is only a
    # sanity bound (killed, not left to run): 4.0 s was seen for the 2 s limit beside the
    # whole suite and a CPU hog, where 2 s of slack failed
    assert took < LIMITS.wall_s + 20.0, took
    assert ran.outcome == "timeout", ran
    assert "refused after" in ran.stdout and "Resource temporarily unavailable" in ran.stdout
    assert 1 <= ran.processes_reaped <= LIMITS.processes, ran.processes_reaped
    assert "killed with" in ran.reason


def test_allocating_4_gb_is_refused_by_the_memory_limit(isolation: dict) -> None:
    ran = run_python("data = bytearray(4 << 30)\nprint(len(data))\n", ROOMY)
    assert ran.outcome == "error", ran
    assert ran.reason.startswith("memory limit") and "MemoryError" in ran.reason
    assert ran.stdout == ""
