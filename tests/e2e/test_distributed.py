"""Distributed runs end to end: a real Locust master and real worker processes on
127.0.0.1 against the simulator, whose own stream counts (`GET /sim/stats`) are the truth
the records are checked against.

Every test but the killed worker's (longer streams) runs against one simulator (`sim`, the
module's): a simulator costs ~0.5 CPU-s and ~0.6 s to start, and a run reads nothing of the
server's but its stream counts and metrics over its own window. The counts are cumulative,
so each test takes them when the simulator is idle (`idle_counts`: no stream of an earlier
test still running or waiting there) and judges the streams served since (`served`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cluster import LOCUSTFILE, Cluster, check_document, requests_of
from conftest import REPO, anvil, raw_lines, result_path, write_scenario
from locust_ui import assert_final_cdf_and_flow
from simfork import start_simulator

from anvil_metrics.runs.simproc import SimProcess, stop_process

pytestmark = pytest.mark.e2e


SCENARIO = """
measurement_protocol = "distributed"
concurrency = 4
max_tokens = 16
context_tokens = 4096
max_context_tokens = 8192
[context_distribution]
4096 = 37
"""

SIM_ARGS = ("--prefill-ms", "40", "--reasoning-tokens", "4", "--content-tokens", "12",
            "--interval-ms", "5", "--max-context", "8192")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_stats(url: str) -> dict:
    base = url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(base + "/sim/stats", timeout=5) as r:
        return json.loads(r.read())


def sim_streams(url: str) -> dict[str, int]:
    return sim_stats(url)["streams"]


def idle_counts(url: str) -> dict[str, int]:
    """The simulator's stream counts once no stream runs or waits there: a stream that an
    earlier test's stop cancelled ends at the server's next write (a prefill at most)."""
    deadline = time.monotonic() + 30
    while True:
        stats = sim_stats(url)
        if stats["metrics"]["running"] == 0 and stats["metrics"]["waiting"] == 0:
            return stats["streams"]
        assert time.monotonic() < deadline, f"the simulator never went idle: {stats}"
        time.sleep(0.05)


def served(url: str, before: dict[str, int]) -> int:
    """Streams the simulator completed since `before` (`idle_counts`) was taken."""
    return sim_streams(url)["completed"] - before["completed"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """The simulator (SIM_ARGS) that every test but the killed worker's runs against."""
    with start_simulator(list(SIM_ARGS)) as started:
        yield started


@contextmanager
def cluster(tmp_path: Path, sim_url: str, *locust_args: str, workers: int = 2,
            users: int = 4, env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A headless master expecting `workers` workers, and the workers; all are killed (by
    PID) at the end whatever happened."""
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    port = _free_port()
    results = tmp_path / "results"
    log = tmp_path / "master.log"
    penv = {**os.environ, **(env or {})}
    with open(log, "wb") as out:
        master = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--master", "--headless",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
             "--expect-workers", str(workers), "-u", str(users), "-r", str(users),
             "-H", sim_url, "--scenario", str(sc), "--results-dir", str(results),
             *locust_args],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=penv)
    procs = []
    try:
        for i in range(workers):
            with open(tmp_path / f"worker{i}.log", "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker",
                     "--master-host", "127.0.0.1", "--master-port", str(port)],
                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=penv))
        yield Cluster(master, procs, results, log)
    finally:
        for p in [master, *procs]:
            stop_process(p)


def test_master_and_two_workers_run_exactly_the_requested_count(sim: SimProcess,
                                                                 tmp_path: Path) -> None:
    before = idle_counts(sim.url)
    secret = "sk-anvil-dist-0123456789abcdef"
    with cluster(tmp_path, sim.url, "--requests", "37", env={"ANVIL_API_KEY": secret}) as c:
        assert c.wait() == 0, c.log.read_text()[-3000:]
        run_dir = c.run_dir()
    for f in tmp_path.rglob("*"):  # master and worker logs, raw file, benchmark, CSVs
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    rows = requests_of(run_dir)
    indices = sorted(r["request_index"] for r in rows)
    assert indices == list(range(37))  # exactly 37, each once
    assert all(r["failure"] is None for r in rows)
    by_worker = Counter(r["worker"] for r in rows)
    assert len(by_worker) == 2 and min(by_worker.values()) > 0, by_worker
    assert served(sim.url, before) == 37  # the server finished exactly these
    lines = raw_lines(run_dir)
    workers = [line for line in lines if line["type"] == "worker"]
    assert {w["worker"] for w in workers} == set(by_worker)
    assert all(w["clock"] == "same_clock" and w["perf_offset_ns"] == 0 for w in workers)
    end = lines[-1]
    assert end["type"] == "run_end"
    for name, w in end["distributed"]["workers"].items():
        assert w["confirmed"] and w["records_sent"] == by_worker[name], (name, w)
    doc = check_document(run_dir)
    assert doc["requests"] == doc["completed"] == 37 and doc["concurrency"] == 4
    assert doc["client"]["loop_lag_ms"]["p50"] is not None  # from the workers' figures


def test_run_time_keeps_every_completed_request_exactly_once(sim: SimProcess,
                                                             tmp_path: Path) -> None:
    """Stopped by Locust's --run-time while streams are in flight: each record once, none
    of the server's finished streams missing; the clock offset measured by ping (forced)
    is within its stated uncertainty of the truth (0: one host)."""
    before = idle_counts(sim.url)
    with cluster(tmp_path, sim.url, "--requests", "100000", "--run-time", "3s",
                 "--exit-code-on-error", "0",
                 env={"ANVIL_CLOCK_SYNC": "ping"}) as c:
        assert c.wait() == 0, c.log.read_text()[-3000:]
        run_dir = c.run_dir()
    rows = requests_of(run_dir)
    indices = sorted(r["request_index"] for r in rows)
    # how many 3 s allow is the machine's speed (seen: 32 beside a busy loop, ~60 calm)
    assert indices == list(range(len(indices))) and len(indices) >= 8
    ok = sum(1 for r in rows if r["failure"] is None)
    cancelled = sum(1 for r in rows if (r["failure"] or {}).get("kind") == "cancelled")
    assert ok + cancelled == len(rows), Counter(str(r["failure"]) for r in rows)
    # the cancelled streams end at the server's next write: then its count is final
    idle_counts(sim.url)
    server_done = served(sim.url, before)
    # a stream the server finished just as the stop cancelled it may be either; none lost
    assert ok <= server_done <= ok + cancelled, (ok, cancelled, server_done)
    assert len(Counter(r["worker"] for r in rows)) == 2
    for w in (line for line in raw_lines(run_dir) if line["type"] == "worker"):
        assert w["clock"] == "ping"
        assert abs(w["perf_offset_ns"]) <= w["offset_uncertainty_ns"] + 1_000_000, w
    check_document(run_dir)


def test_a_killed_worker_is_accounted_for(simulator, tmp_path: Path) -> None:
    """kill -9 of one of two workers mid-run: the master finishes with the other, and the
    lost worker's in-flight requests are failures that name it; totals add up."""
    # ~280 ms streams: each worker always has 3 in flight (~21 requests/s from the two) until
    # the budget is spent. The kill comes at 15 done; the budget runs out ~2.8 s of load
    # later (~59 more done), so the victim has requests in flight when it dies. The survivor
    # alone then does the remaining ~56 (~5 s), while the master misses the victim's
    # heartbeat (Locust: ~3 s); the master ends once both are settled
    sim = simulator("--prefill-ms", "40", "--reasoning-tokens", "4", "--content-tokens",
                    "20", "--interval-ms", "10", "--max-context", "8192")
    with cluster(tmp_path, sim.url, "--requests", "80", "--exit-code-on-error", "0",
                 users=6) as c:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sim_streams(sim.url)["completed"] < 15:
            time.sleep(0.1)
        victim = c.workers[0]
        os.kill(victim.pid, signal.SIGKILL)
        assert c.wait(120) == 0, c.log.read_text()[-3000:]
        run_dir = c.run_dir()
    rows = requests_of(run_dir)
    assert sorted(r["request_index"] for r in rows) == list(range(80))
    lost = [r for r in rows if (r["failure"] or {}).get("kind") == "worker_lost"]
    victim_name = next(line["worker"] for line in raw_lines(run_dir)
                       if line["type"] == "worker" and line["pid"] == victim.pid)
    assert lost, "the killed worker had requests in flight; none was recorded as lost"
    assert all(r["worker"] == victim_name and victim_name in r["failure"]["message"]
               for r in lost)
    doc = check_document(run_dir)
    assert doc["requests"] == 80 and doc["failed"] == len(lost)
    kinds = Counter(f["kind"] for f in doc["failures"])
    assert kinds == {"worker_lost": len(lost)}
    survivors = Counter(r["worker"] for r in rows if r["failure"] is None)
    assert len(survivors) == 2  # the victim's finished requests before the kill are kept
    assert sim_streams(sim.url)["completed"] >= doc["completed"]
    summary = raw_lines(run_dir)[-1]["distributed"]["workers"]
    assert summary[victim_name]["lost"] is True


def test_processes_flag_runs_workers_on_this_host(sim: SimProcess, tmp_path: Path) -> None:
    """`locust --processes 2` (a master with forked workers) gives the same exact result."""
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--processes", "2", "--headless",
         "--master-bind-port", str(port := _free_port()), "--master-port", str(port),
         "-u", "4", "-r", "4", "-H", sim.url, "--scenario", str(sc), "--requests", "23",
         "--results-dir", str(results)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err.decode()[-3000:]
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("benchmark-")]
    rows = requests_of(run_dir)
    assert sorted(r["request_index"] for r in rows) == list(range(23))
    assert len(Counter(r["worker"] for r in rows)) == 2
    assert check_document(run_dir)["completed"] == 23


def test_anvil_run_processes(sim: SimProcess, tmp_path: Path) -> None:
    """`anvil run --processes 2` hands the load to Locust's master and two workers."""
    before = idle_counts(sim.url)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--processes", "2", "--requests", "19",
                 "--users", "4", "--results-dir", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = result_path(proc).parent
    rows = requests_of(run_dir)
    assert sorted(r["request_index"] for r in rows) == list(range(19))
    assert len(Counter(r["worker"] for r in rows)) == 2
    doc = check_document(run_dir)
    assert doc["completed"] == served(sim.url, before) == 19
    # the master owns the run, so it scrapes the server's metrics: the window holds exactly
    # the measured requests, whichever worker sent them
    server = doc["server"]
    assert (run_dir / "server_metrics.jsonl").is_file()
    assert server["requests"] == 19 and server["engine"] == "vllm", server


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def test_a_run_started_in_the_masters_web_ui(sim: SimProcess, tmp_path: Path) -> None:
    """The web UI on a master: a run started from its form stops by itself after exactly
    `requests` and writes the same files as a headless run, with both workers' records."""
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    port, web = _free_port(), _free_port()
    results = tmp_path / "results"
    ui = f"http://127.0.0.1:{web}"
    with open(tmp_path / "master.log", "wb") as out:
        master = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--master",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
             "--web-host", "127.0.0.1", "--web-port", str(web), "-H", sim.url,
             "--scenario", str(sc), "--results-dir", str(results)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    workers = [subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker", "--master-host",
         "127.0.0.1", "--master-port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if json.loads(_get(ui + "/stats/requests")).get("worker_count") == 2:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        form = urllib.parse.urlencode({"user_count": 4, "spawn_rate": 4, "host": sim.url,
                                       "requests": 21}).encode()
        with urllib.request.urlopen(ui + "/swarm", data=form, timeout=60) as r:
            assert json.loads(r.read())["success"] is True
        runs: list[Path] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not runs:
            runs = [p for p in results.iterdir() if (p / "benchmark.json").exists()] \
                if results.exists() else []
            time.sleep(0.2)
        assert len(runs) == 1, (tmp_path / "master.log").read_text()[-3000:]
        live = json.loads(_get(ui + "/anvil/live.json"))  # the master's LLM view, exact
    finally:
        for p in [master, *workers]:
            stop_process(p)
    rows = requests_of(runs[0])
    assert sorted(r["request_index"] for r in rows) == list(range(21))
    assert len(Counter(r["worker"] for r in rows)) == 2
    doc = check_document(runs[0])
    assert doc["completed"] == 21 and doc["concurrency"] == 4
    assert live["completed"] == 21 and live["finished"] is True
    ttft = next(m for m in live["metrics"] if m["field"] == "ttft_ms")
    assert ttft["p50"] == doc["metrics"]["ttft_p50_ms"]
    # the live page's CDF and flow on the master: in flight = tickets granted to the workers
    # and not yet back as records, never more than the 4 users
    assert_final_cdf_and_flow(live, doc)
    assert 1 <= max(live["flow"]["in_flight_max"]) <= 4
