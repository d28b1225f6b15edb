"""sandbox: how a program's end is classified from the keeper's report (every outcome and
its one-line reason), and real programs run in the sandbox — one that passes, one whose
assert fails, one that reaches for the network — leaving nothing behind.

Why: the coding suite's verdict is this classification; a timeout read as a wrong answer,
or a sandbox that let a program reach 127.0.0.1, would judge or endanger the wrong thing.
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from anvil_metrics.checks.sandbox import SandboxLimits, classify, interpreter, run_python

LIMITS = SandboxLimits(cpu_s=2, wall_s=3.0, memory_bytes=256 << 20)


def _exited(code: int) -> int:
    return code << 8


@pytest.mark.parametrize(("report", "stdout", "stderr", "outcome", "reason"), [
    ({"status": _exited(0)}, "tok\n", "", "ok", None),
    ({"status": _exited(0)}, "", "", "error",
     "the program ended before its tests ran (exit 0 without them)"),
    ({"status": _exited(1)}, "", "Traceback\nAssertionError: f(1) returned 2, expected 3\n",
     "error", "assert failed: f(1) returned 2, expected 3"),
    ({"status": _exited(1)}, "", "Traceback\nAssertionError\n", "error", "assert failed"),
    ({"status": _exited(1)}, "", '  File "x"\nSyntaxError: invalid syntax\n', "error",
     "syntax error: SyntaxError: invalid syntax"),
    ({"status": _exited(1)}, "", "Traceback\nMemoryError\n", "error",
     "memory limit (256 MiB): MemoryError"),
    ({"status": _exited(1)}, "", "Traceback\nNameError: name 'f' is not defined\n", "error",
     "exit status 1: NameError: name 'f' is not defined"),
    ({"status": signal.SIGXCPU, "cpu_s": 2.0}, "", "", "cpu_limit",
     "killed by the CPU time limit (2 s)"),
    ({"status": signal.SIGKILL, "cpu_s": 3.0}, "", "", "cpu_limit",
     "killed by the CPU time limit (2 s)"),
    ({"status": signal.SIGSEGV, "cpu_s": 0.1}, "", "", "killed", "killed by signal SIGSEGV"),
    ({"status": None, "timed_out": True, "reaped": 15}, "", "", "timeout",
     "timeout: still running after 3 s (wall), killed with 15 processes it had started"),
    ({"status": None, "timed_out": True, "reaped": 0}, "", "", "timeout",
     "timeout: still running after 3 s (wall), killed"),
])
def test_classify(report: dict, stdout: str, stderr: str, outcome: str,
                  reason: str | None) -> None:
    assert classify(report, stdout, stderr, LIMITS, "tok") == (outcome, reason)


ROOT = os.geteuid() == 0
RUN = SandboxLimits(cpu_s=5, wall_s=10.0)


def test_a_program_that_prints_its_token_is_ok() -> None:
    result = run_python("print('tok-7')", RUN, expect_stdout="tok-7")
    assert (result.outcome, result.reason, result.returncode) == ("ok", None, 0)
    assert result.stdout == "tok-7\n" and result.isolation["python"] == interpreter()
    assert result.isolation["user_isolated"] is ROOT


def test_a_failed_assert_is_its_own_line() -> None:
    result = run_python("assert 1 + 1 == 3, 'f(1) returned 2, expected 3'", RUN)
    assert (result.outcome, result.reason, result.returncode) == (
        "error", "assert failed: f(1) returned 2, expected 3", 1)


def test_where_the_network_is_isolated_127_0_0_1_is_unreachable() -> None:
    with socket.socket() as listener:  # a real listener on the host's loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = run_python("import socket\n"
                            f"socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                            "print('reached')", RUN, expect_stdout="reached")
    if not result.isolation.get("network_isolated"):
        pytest.skip("no network namespace here")
    assert result.outcome == "error" and "reached" not in result.stdout
    assert result.reason.startswith("exit status 1: OSError: [Errno 101] Network is unreachable")
