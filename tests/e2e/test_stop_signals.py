"""Ctrl-C and SIGTERM mid-stream (issue 28): `anvil run`, plain Locust headless, and a master
with two workers, each a real process against the simulator, signalled while every user has a
request in flight.

Each must keep the run: every request issued is in `benchmark.json` exactly once (completed,
or `cancelled` when `--stop-timeout` ran out or a second Ctrl-C cut it short), the file is
marked `partial` with `ended_by: "signal"`, the process exits 130 (SIGINT) or 143 (SIGTERM),
and no log holds a traceback (`runs/stopsignals.py` says how).

The simulator's streams last ~1.5 s (300 ms prefill, 24 tokens 50 ms apart), so a signal sent
once the first requests are recorded finds the users mid-stream; `--stop-timeout 1` is
shorter than what is left of them, so those still open are cancelled: both outcomes occur.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, check_every_record_once, load_json, raw_lines
from conftest import finish_group as finish
from simfork import start_simulator

from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

SLOW = ["--prefill-ms", "300", "--interval-ms", "50", "--reasoning-tokens", "4",
        "--content-tokens", "20"]
LOCUST = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py"]
LOAD = ["--requests", "200", "--stop-timeout", "1"]  # a master's


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(SLOW) as s:
        yield s


def start(argv: list[str], log: Path, sigint_ignored: bool = False) -> subprocess.Popen:
    """Start `argv` in a session of its own; `sigint_ignored`: with SIGINT ignored, as a
    script's background job (`anvil run ... &`) starts, which Python then leaves ignored."""
    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(argv, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=ignore_sigint if sigint_ignored else None)


def wait_for_records(results: Path, count: int, proc: subprocess.Popen,
                     timeout_s: float = 60) -> None:
    """Until `count` requests are recorded (the users are sending), bounded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it was signalled"
        for raw in results.glob("*/requests.jsonl"):
            if raw.read_bytes().count(b'"type":"request"') >= count:
                return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} requests recorded in {timeout_s} s")


def check_kept(results: Path, logs: list[Path], reason: str) -> dict:
    """The run's file keeps every issued request exactly once; marked partial, by signal."""
    (run_dir,) = results.glob("benchmark-*")
    doc = load_json(run_dir / "benchmark.json")
    assert (doc["partial"], doc["ended_by"]) == (True, "signal"), doc["end_reason"]
    assert doc["end_reason"].startswith(reason)
    check_every_record_once(run_dir, doc)  # issued: each recorded once, none missing
    assert {f["kind"] for f in doc["failures"]} <= {"cancelled"}, doc["failures"]
    assert raw_lines(run_dir)[-1]["type"] == "run_end"
    for log in [*logs, run_dir / "locust.log"]:
        if log.exists():
            assert "Traceback" not in log.read_text(errors="replace"), log
    return doc


@pytest.mark.parametrize("sig,code,reason,twice", [
    (signal.SIGINT, 130, "SIGINT", False),
    (signal.SIGINT, 130, "SIGINT", True),
    (signal.SIGTERM, 143, "SIGTERM", False),
])  # fmt: skip
def test_plain_locust_keeps_the_run(sim: SimProcess, tmp_path: Path, sig: int, code: int,
                                    reason: str, twice: bool) -> None:
    """Once: the requests in flight get --stop-timeout (1 s), those still open after it are
    cancelled. Twice (a second Ctrl-C 0.7 s later, past `SAME_CTRL_C_S`; --stop-timeout 30):
    the second cancels what is in flight at once."""
    results, log = tmp_path / "res", tmp_path / "locust.log"
    load = ["--requests", "200", "--stop-timeout", "30" if twice else "1"]
    proc = start([*LOCUST, "--headless", "-H", sim.url, "-u", "4", "-r", "4", *load,
                  "--results-dir", str(results)], log)
    wait_for_records(results, 1, proc)
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C: the whole process group
    if twice:
        time.sleep(0.7)
        os.killpg(proc.pid, sig)
    assert finish(proc) == code, log.read_text()[-3000:]
    doc = check_kept(results, [log], reason)
    text = log.read_text()
    assert "Aggregated" in text  # Locust printed its summary
    if twice:
        assert "Ctrl-C again: cancelling the requests in flight" in text
        assert any(f["kind"] == "cancelled" for f in doc["failures"]), doc["failures"]


@pytest.mark.parametrize("sig,code,reason,to_group", [
    (signal.SIGINT, 130, "SIGINT", True),  # a terminal's Ctrl-C: anvil and its Locust
    (signal.SIGINT, 130, "SIGINT", False),  # to anvil alone: it passes it on
    (signal.SIGTERM, 143, "SIGTERM", False),  # `kill PID` of anvil: passed on
])  # fmt: skip
def test_anvil_run_keeps_the_run_and_says_so(sim: SimProcess, tmp_path: Path, sig: int,
                                             code: int, reason: str, to_group: bool) -> None:
    results, out = tmp_path / "res", tmp_path / "anvil.out"
    # `anvil run` has no --stop-timeout: anvil's default (`options.STOP_TIMEOUT_S`) lets
    # the requests in flight finish
    # sent to anvil alone, as to a script's background job (SIGINT inherited ignored: anvil
    # takes it all the same); a terminal's Ctrl-C reaches a foreground group
    proc = start([sys.executable, "-m", "anvil_metrics", "run", "scenarios/smoke.toml", "-H",
                  sim.url, "-u", "4", "--requests", "200", "--results-dir", str(results)], out,
                 sigint_ignored=not to_group)
    wait_for_records(results, 1, proc)
    if to_group:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    assert finish(proc) == code, out.read_text()[-3000:]
    check_kept(results, [out], reason)
    text = out.read_text()
    assert "result: " in text and f"anvil: run stopped: {reason}" in text
    assert "what it measured is kept, marked partial" in text.splitlines()[-1]
    locust_log = (next(results.glob("benchmark-*")) / "locust.log").read_text()
    assert "Ctrl-C again: cancelling" not in locust_log  # one Ctrl-C, though Locust got two
    assert "did not finish within" not in locust_log  # the last scrape was answered


def start_cluster(sim: SimProcess, tmp_path: Path, load: list[str]
                  ) -> tuple[subprocess.Popen, list[subprocess.Popen], list[Path], Path]:
    """A headless master expecting two workers, 4 users, and the two workers, on a free
    port: (master, workers, their logs: master first, the results folder)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = tmp_path / "res"
    logs = [tmp_path / f"{name}.log" for name in ("master", "w0", "w1")]
    master = start([*LOCUST, "--headless", "--master", "--master-bind-host", "127.0.0.1",
                    "--master-bind-port", str(port), "--expect-workers", "2", "-H", sim.url,
                    "-u", "4", "-r", "4", *load, "--results-dir", str(results)], logs[0])
    workers = [start([*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port",
                      str(port)], log) for log in logs[1:]]
    return master, workers, logs, results


@pytest.mark.parametrize("sig,code,reason,to_all", [
    (signal.SIGINT, 130, "SIGINT", True),  # a terminal's Ctrl-C reaches every process
    (signal.SIGTERM, 143, "SIGTERM", False),  # the master alone is asked to stop
])  # fmt: skip
def test_a_master_with_two_workers_keeps_the_run(sim: SimProcess, tmp_path: Path, sig: int,
                                                 code: int, reason: str, to_all: bool) -> None:
    master, workers, logs, results = start_cluster(sim, tmp_path, LOAD)
    try:
        wait_for_records(results, 1, master)
        for p in [master, *workers] if to_all else [master]:
            os.killpg(p.pid, sig)
        assert finish(master) == code, logs[0].read_text()[-3000:]
        for w in workers:
            assert finish(w, 30) == 0, w.args
    finally:
        for p in [master, *workers]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    check_kept(results, logs, reason)
    (run_dir,) = results.glob("benchmark-*")
    senders = {x["worker"] for x in raw_lines(run_dir) if x["type"] == "request"}
    assert len(senders) == 2, senders  # both workers' requests are in it


def test_sigterm_to_one_worker_drains_it_and_the_run_goes_on(sim: SimProcess,
                                                              tmp_path: Path) -> None:
    """`kill PID` of one worker mid-stream: it stops its users (its requests in flight get
    --stop-timeout, then are cancelled), sends its records, quits with 143; the master counts
    each of its requests once, none `worker_lost`, and ends the run with the other worker."""
    master, workers, logs, results = start_cluster(sim, tmp_path,
                                                   ["--requests", "16", "--stop-timeout", "1"])
    try:
        wait_for_records(results, 1, master)
        os.kill(workers[0].pid, signal.SIGTERM)
        assert finish(workers[0], 30) == 143, logs[1].read_text()[-3000:]
        assert finish(master) == 0, logs[0].read_text()[-3000:]
        assert finish(workers[1], 30) == 0, logs[2].read_text()[-3000:]
    finally:
        for p in [master, *workers]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    (run_dir,) = results.glob("benchmark-*")
    doc = load_json(run_dir / "benchmark.json")
    assert doc["partial"] is False and doc["requests"] == 16, (doc["partial"], doc["requests"])
    check_every_record_once(run_dir, doc)
    assert {f["kind"] for f in doc["failures"]} <= {"cancelled"}, doc["failures"]
    assert "worker_lost" not in logs[0].read_text()
    assert "this worker stops its users" in logs[1].read_text()
    for log in [*logs, run_dir / "locust.log"]:
        if log.exists():
            assert "Traceback" not in log.read_text(errors="replace"), log
    senders = {x["worker"] for x in raw_lines(run_dir) if x["type"] == "request"}
    assert len(senders) == 2, senders  # the drained worker's requests are in it
