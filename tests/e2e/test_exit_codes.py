"""Exit codes from real processes (issue 47, items 6 and 7): what a run's end says to a
script, from `anvil run` and plain `locust --headless` against the simulator, and what a run
stopped before its first measured request leaves behind.

- 4: every measured request failed (the simulator answers both 500: `--fault http500@0,1`),
  or more than `--fail-on-error-rate` of them; the last line says so, `benchmark.json`
  verifies. One failure in four: 0, unless the user asks (`--fail-on-error-rate 0.2`: 4;
  Locust's own `--exit-code-on-error 1`: 1).
- 130 / 143 in the set-up: the "server" is a socket that accepts and never answers, so the
  run sits in model discovery; the signal comes once its request arrived. error.json names
  the signal and the phase.
- 143 in the warm-up: the simulator's prefill (4 s) outlasts the signal's moment (the raw
  file's header is written just before the warm-ups start), so the run is stopped with its
  warm-ups in flight and nothing measured: a `benchmark.json` of zero measured requests,
  partial, that `anvil verify` and `anvil postprocess` accept.
- a Locust killed outright (SIGKILL): `anvil run` writes error.json itself, exits 1.

The runs of one test start together (each its own simulator: fault indices are per server),
so the file's wall time is about its slowest run's, not their sum.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, finish_group, load_json, write_scenario

from anvil_metrics.live.runerror import read_error
from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "exits"
concurrency = 1
warmup_requests = 0
max_tokens = 8
context_tokens = 256
max_context_tokens = 4096
[context_distribution]
256 = 1
"""
FAST = ("--prefill-ms", "5", "--interval-ms", "1", "--reasoning-tokens", "0",
        "--content-tokens", "4")
WAIT_S = 90  # a run's bound here; each takes a few seconds


def anvil_run(sc: Path, url: str, res: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "anvil_metrics", "run", str(sc), "-H", url, "--results-dir",
            str(res), "--no-server-metrics", *extra]


def plain_locust(sc: Path, url: str, res: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless", "-H",
            url, "-u", "1", "-r", "1", "--scenario", str(sc), "--results-dir", str(res),
            "--no-server-metrics", *extra]


def start(argv: list[str], out: Path) -> subprocess.Popen:
    """In a session of its own (a group to signal as a terminal does), output to `out`."""
    return subprocess.Popen(argv, cwd=REPO, stdout=out.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def finish(proc: subprocess.Popen) -> int:
    return finish_group(proc, WAIT_S)


def one_run(res: Path) -> Path:
    (run_dir,) = res.glob("benchmark-*")
    return run_dir


def check_document(run_dir: Path) -> dict:
    doc = load_json(run_dir / "benchmark.json")
    assert verify_benchmark(doc) == []
    return doc


# name, command maker, the sim's faults, extra flags, requests, the code, the last line's start
FINISHED = [
    ("all_failed", anvil_run, ("--fault", "http500@0,1"), (), 2, 4,
     "anvil: every one of the 2 measured requests failed (2 http_error); see benchmark.json"),
    ("some_failed", anvil_run, ("--fault", "http500@0",), (), 4, 0, "result: "),
    ("over_the_rate", anvil_run, ("--fault", "http500@0",), ("--fail-on-error-rate", "0.2"), 4,
     4, "anvil: 1 of the 4 measured requests failed (1 http_error): 25.0 %, above "
        "--fail-on-error-rate 0.2"),
    ("locusts_own", anvil_run, ("--fault", "http500@0",), ("--exit-code-on-error", "1"), 4, 1,
     "anvil: a request failed (Locust counts warm-ups too); exit code 1"),
    ("locust_all_failed", plain_locust, ("--fault", "http500@0,1"), (), 2, 4, None),
    ("locust_some_failed", plain_locust, ("--fault", "http500@0",), (), 4, 0, None),
]  # fmt: skip


def test_each_finished_run_exits_as_the_table_says(simulator, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    procs = {}
    for name, command, faults, extra, requests, _, _ in FINISHED:
        sim = simulator(*FAST, *faults)
        argv = command(sc, sim.url, tmp_path / name, "--requests", str(requests), *extra)
        procs[name] = start(argv, tmp_path / f"{name}.out")
    codes = {name: finish(p) for name, p in procs.items()}
    for name, _, _, _, requests, code, last in FINISHED:
        text = (tmp_path / f"{name}.out").read_text(errors="replace")
        assert codes[name] == code, (name, text[-3000:])
        assert "Traceback" not in text, name
        doc = check_document(one_run(tmp_path / name))
        assert doc["requests"] == requests and doc["partial"] is False, name
        if last is not None:  # `anvil run`: the line that says why, last
            assert text.strip().splitlines()[-1].startswith(last), (name, text[-600:])
    locust_log = (tmp_path / "locust_all_failed.out").read_text()
    assert "anvil: every one of the 2 measured requests failed (2 http_error)" in locust_log


@contextmanager
def silent_server() -> Iterator[tuple[socket.socket, str]]:
    """A socket on 127.0.0.1 that accepts and never answers: a run's set-up waits on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.settimeout(WAIT_S)
        yield s, f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("kind,sig,code,reason", [
    ("run", signal.SIGINT, 130, "SIGINT (Ctrl-C)"),  # a terminal's Ctrl-C: to the group
    ("locust", signal.SIGTERM, 143, "SIGTERM"),
])  # fmt: skip
def test_a_signal_in_the_set_up_leaves_error_json_naming_the_phase(
        tmp_path: Path, kind: str, sig: int, code: int, reason: str) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    res, out = tmp_path / "res", tmp_path / "out.txt"
    with silent_server() as (server, url):
        command = anvil_run if kind == "run" else plain_locust
        proc = start(command(sc, url, res), out)
        try:
            conn, _ = server.accept()  # the set-up asks the server which model it serves
            conn.recv(4096)
            os.killpg(proc.pid, sig)
        finally:
            assert finish(proc) == code, out.read_text()[-3000:]
    run_dir = one_run(res)  # plain Locust made it when the signal came
    assert not (run_dir / "benchmark.json").exists()
    assert read_error(run_dir) == (f"anvil: {reason}" + read_error(run_dir).split(reason)[1])
    assert "in the run's set-up (finding the model), before its first request: nothing was " \
           "measured" in read_error(run_dir)
    text = out.read_text(errors="replace")
    assert "Traceback" not in text
    if kind == "run":
        assert text.strip().splitlines()[-1] == f"{read_error(run_dir)}; see {run_dir}/error.json"


def test_sigterm_in_the_warm_up_keeps_a_run_of_nothing_measured(simulator, tmp_path: Path
                                                                ) -> None:
    """`kill PID` of `anvil run` while its 2 warm-ups wait for their first byte: they finish
    within --stop-timeout (30 s), nothing measured; the file is kept, partial, by signal."""
    sim = simulator("--prefill-ms", "4000", "--interval-ms", "1", "--content-tokens", "2")
    sc = write_scenario(tmp_path / "s.toml",
                        SCENARIO.replace("warmup_requests = 0", "warmup_requests = 2"))
    res, out = tmp_path / "res", tmp_path / "out.txt"
    proc = start(anvil_run(sc, sim.url, res, "--requests", "4", "-u", "2"), out)
    deadline = time.monotonic() + WAIT_S
    while not list(res.glob("*/requests.jsonl")) and time.monotonic() < deadline:
        assert proc.poll() is None, out.read_text()[-3000:]
        time.sleep(0.05)
    time.sleep(0.5)  # the warm-ups are sent (their prefill lasts 4 s)
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 143, out.read_text()[-3000:]
    run_dir = one_run(res)
    doc = check_document(run_dir)
    assert (doc["requests"], doc["completed"], doc["partial"], doc["ended_by"]) == (
        0, 0, True, "signal")
    assert doc["wall_clock_ms"] is None  # nothing measured: null, never 0
    again = subprocess.run([sys.executable, "-m", "anvil_metrics", "postprocess", str(run_dir)],
                           cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)
    assert again.returncode == 0, again.stderr
    assert check_document(run_dir)["requests"] == 0
    assert out.read_text().strip().splitlines()[-1].startswith("anvil: run stopped: SIGTERM")


def test_a_locust_killed_outright_gets_error_json_from_anvil_run(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    res, out = tmp_path / "res", tmp_path / "out.txt"
    with silent_server() as (server, url):
        proc = start(anvil_run(sc, url, res), out)
        try:
            server.accept()[0].recv(4096)  # Locust is in the set-up
            (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            os.kill(int(child), signal.SIGKILL)
        finally:
            assert finish(proc) == 1, out.read_text()[-3000:]
    error = read_error(one_run(res))
    assert error is not None and error.startswith(
        "anvil: Locust (killed by signal 9) wrote neither benchmark.json nor error.json: "
        "nothing was measured; its log is ")
