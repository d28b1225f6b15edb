"""Sweeps and the capacity search end to end: real simulator, Locust master and worker
processes on 127.0.0.1.

Why real processes: a sweep's steps are timed by the run clock of the process that owns the
run (the master's, in a distributed run) while the requests are stamped by the workers; only
a real run shows that every request lands in the step in force when it started, once, and
that each step's figures are its own rows'. The capacity search is one `anvil run` per step
against a simulator with a fixed number of slots (`--max-running 8`): the answer is known
before the search starts. Each test prints what it measured (`pytest -s` shows it).

The two sweeps share one simulator (`sim`, FAST_SIM: ~0.5 CPU-s and ~0.6 s saved): neither
reads the server's state, only its own run's records and figures; the search runs once and
every capacity test reads it (`capacity_run`).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from report_view import view_report
from simfork import start_simulator
from stepcheck import check_each_request_in_one_step, measured

from anvil_metrics.load.arrivals import ArrivalPlan, Schedule
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.report.build import make_report
from anvil_metrics.report.capacityfigs import capacity_curve
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

# ~45 ms a request: 20 ms prefill, 12 tokens 2 ms apart
FAST_SIM = ("--prefill-ms", "20", "--interval-ms", "2", "--reasoning-tokens", "2",
            "--content-tokens", "10", "--max-context", "8192")

SCENARIO = """
measurement_protocol = "sweeps"
max_tokens = 64
context_tokens = 1024
max_context_tokens = 1024
"""


def nearest_rank(values: list[float], p: int) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(p * len(s) / 100)) - 1]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(list(FAST_SIM)) as started:
        yield started


def test_user_sweep_on_a_master_and_two_workers(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    t0 = time.monotonic()
    proc = anvil("run", str(sc), "--host", sim.url, "--steps", "1,2,4", "--step-duration",
                 "2s", "--processes", "2", "--results-dir", str(tmp_path), timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    steps = doc["steps"]
    workers = Counter(x["worker"] for x in measured(path.parent))
    print(f"\n[user sweep, 2 workers] process {took:.1f} s; workers {dict(workers)}; "
          + "; ".join(f"step {b['step']} ({b['users']} users) {b['started_s']:.3f}-"
                      f"{b['ended_s']:.3f} s: {b['requests']} requests, ttft p50 "
                      f"{b['metrics']['ttft_p50_ms']:.2f} ms" for b in steps))
    assert verify_benchmark(doc) == []
    assert len(workers) == 2 and min(workers.values()) > 0
    lines = raw_lines(path.parent)
    assert [x["users"] for x in lines if x["type"] == "step"] == [1, 2, 4]
    assert sum(x["type"] == "step_end" for x in lines) == 1
    assert [(b["step"], b["users"], "rate" in b) for b in steps] == [
        (0, 1, False), (1, 2, False), (2, 4, False)]
    for a, b in zip(steps, steps[1:], strict=False):
        assert a["ended_s"] == b["started_s"]
    for b in steps:  # each step lasts its --step-duration on the run clock: never less; how
        # late the master's timer fires beyond it is the machine's load (a sanity bound)
        assert 1.95 < b["ended_s"] - b["started_s"] < 2.0 + 1.0, b
        assert b["failed"] == 0 and b["completed"] == b["requests"] > 0
    check_each_request_in_one_step(path.parent, doc)
    # one step's TTFT p50 recomputed here from its rows
    mine = [r["ttft_ms"] for r in doc["request_timings"] if r["step"] == 1]
    assert steps[1]["metrics"]["ttft_p50_ms"] == nearest_rank(mine, 50)
    assert steps[1]["metrics"]["ttft_samples"] == len(mine) == steps[1]["completed"]
    # closed loop on a server far from its limit: each user keeps a request in flight, so
    # more users send more (how many more is the client machine's speed: it was measured
    # 7.5 to 20.6 requests per user-second across the steps of one run on a busy machine)
    assert steps[0]["requests"] < steps[1]["requests"] < steps[2]["requests"], steps


def test_rate_sweep_with_goodput(sim: SimProcess, tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    t0 = time.monotonic()
    proc = anvil("run", str(sc), "--host", sim.url, "--rates", "5,20", "--step-duration", "3s",
                 "-u", "8", "--goodput", "ttft_ms<=1000", "--arrival-seed", "1",
                 "--results-dir", str(tmp_path), timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    b0, b1 = doc["steps"]
    print(f"\n[rate sweep] process {took:.1f} s; step 0 (5/s) {b0['requests']} requests, "
          f"goodput {b0['goodput_rps']:.2f}/s; step 1 (20/s) {b1['requests']} requests, "
          f"goodput {b1['goodput_rps']:.2f}/s; run goodput {doc['goodput']}")
    assert verify_benchmark(doc) == []
    assert [(b["rate"], "users" in b) for b in doc["steps"]] == [(5.0, False), (20.0, False)]
    check_each_request_in_one_step(path.parent, doc)
    # each step follows its own seeded schedule (seed + step) from its start: seed 1 draws
    # 17 arrivals in step 0's 3 s and 68 in step 1's (one may cross a step's edge, late)
    drawn = [sum(1 for k in range(1000)
                 if Schedule(ArrivalPlan(rate, seed=1 + i)).offset_ns(k) < 3e9)
             for i, rate in enumerate((5.0, 20.0))]
    assert drawn == [17, 68]
    assert abs(b0["requests"] - 17) <= 1 and abs(b1["requests"] - 68) <= 1
    assert 3.0 < b1["requests"] / b0["requests"] < 5.0
    for i, b in enumerate(doc["steps"]):
        met = sum(1 for r in doc["request_timings"] if r["step"] == i and r["ttft_ms"] <= 1000)
        assert b["goodput_rps"] == pytest.approx(met / (b["ended_s"] - b["started_s"]),
                                                 rel=1e-9)
        assert b["goodput_rps"] > 0  # 20 ms prefills: met by most even on a busy machine
    assert doc["goodput"]["criteria"] == ["ttft_ms<=1000"]
    assert doc["metrics"]["goodput_rps"] > 0


# 8 slots of ~790 ms streams (40 ms prefill, 30 tokens 25 ms apart): TTFT (the first content,
# after 1 reasoning token) ~65 ms in a slot; a request that waits for one waits a whole
# stream (TTFT ~855 ms). The SLO lies between, with room on both sides for a busy machine:
# a stall only lengthens a TTFT, so a step with a queue fails whatever the machine does,
# and a step within the slots fails only by stalls of over 400 ms in 3 of its 48 requests.
# (With 340 ms streams and 250 ms, once: "users 6: fails (ttft_p95_ms 260.8)" while the
# whole suite ran; stalls of 275-330 ms were seen in other tests.) Tokens 25 ms apart keep
# the client's own work small (it shares a busy machine)
SLO = "ttft_p95_ms<=500"
CAPACITY_SIM = ("--prefill-ms", "40", "--interval-ms", "25", "--reasoning-tokens", "1",
                "--content-tokens", "29", "--max-context", "8192", "--max-running", "8")


@pytest.fixture(scope="module")
def capacity_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, float]:
    """One capacity search (shared by the tests below): the CLI's process and its seconds."""
    tmp_path = tmp_path_factory.mktemp("capacity")
    scenario = tmp_path / "smoke-2-gpus.toml"  # the smoke scenario served by 2 GPUs
    scenario.write_text(Path("scenarios/smoke.toml").read_text() + "\n[meta]\ngpus = 2\n")
    with start_simulator(list(CAPACITY_SIM)) as sim:
        t0 = time.monotonic()
        # 48 requests a step: at 9 users one request in 9 waits for a slot (#9, 17, 25, 33,
        # 41), over the 3 a p95 of 48 can hide. From 7 users up to 9: 7 meets, doubling
        # stops at the maximum, 9, which fails, and bisecting tries 8, which meets: both
        # sides of the slots' edge in three steps (each step is a Locust process, ~3 CPU-s;
        # the search's own rules, over longer paths: tests/unit/runs/test_capacity.py)
        for attempt in (1, 2):
            proc = anvil("capacity", str(scenario), "-H", sim.url, "--slo",
                         SLO, "--start", "7", "--max", "9", "--step-requests",
                         "48", "--results-dir", str(tmp_path / str(attempt)), timeout=120)
            # a step whose client was starved is not trusted and the search says so and stops
            # (tests/unit/runs/test_capacity.py): on a machine busy with other work that is
            # the right answer, and the search's own advice is to rerun — once, here
            if "not trusted: the load generator was saturated" not in proc.stderr:
                break
            print(f"\n[capacity] attempt {attempt}: {proc.stderr.strip()}")
        return proc, time.monotonic() - t0


def test_capacity_search_answers_the_servers_slots(capacity_run: tuple[Any, float]) -> None:
    proc, took = capacity_run
    print(f"\n[capacity] process {took:.1f} s\n{proc.stdout}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "capacity: 8 users" in proc.stdout.splitlines()
    folder = result_path(proc).parent
    doc = load_json(folder / "capacity.json")
    assert (doc["by"], doc["capacity"], doc["slo"], doc["stopped"]) == (
        "users", 8, [SLO], None)
    loads = [s["users"] for s in doc["steps"]]
    assert loads == [7, 9, 8]
    for s in doc["steps"]:
        bench = Path(s["benchmark"])
        assert bench.is_file() and bench.parent.parent == folder
        step_doc = load_json(bench)
        assert verify_benchmark(step_doc) == []
        assert step_doc["concurrency"] == s["users"] and step_doc["requests"] == 48
        assert s["values"]["ttft_p95_ms"] == step_doc["metrics"]["ttft_p95_ms"]
        assert s["meets"] is (s["users"] <= 8) and s["trusted"] is True
        # each step's line in the CLI's output
        assert re.search(rf"^  users {s['users']:g}: {'meets' if s['meets'] else 'fails'} ",
                         proc.stdout, re.M), s


def test_capacity_json_by_users_counts_users_in_whole_numbers(
        capacity_run: tuple[Any, float]) -> None:
    proc, _ = capacity_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_json(result_path(proc).parent / "capacity.json")
    assert type(doc["capacity"]) is int
    assert all(type(s["users"]) is int for s in doc["steps"])


@pytest.mark.browser
def test_capacity_report_of_the_real_search(capacity_run: tuple[Any, float],
                                            tmp_path: Path) -> None:
    """`anvil report` of the search above: its steps' files verify and back capacity.json,
    so it is drawn (4 PNGs), says the capacity, names each file with its SHA-256, and opens
    in headless Chromium fetching nothing (screenshot: report-capacity-search.png)."""
    proc, _ = capacity_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = result_path(proc).parent
    t0 = time.monotonic()
    report = make_report(folder, tmp_path)
    print(f"\n[capacity report] {time.monotonic() - t0:.1f} s")
    page = report.html_path.read_text()
    assert report.kind == "capacity" and len(report.png_paths) == 5  # and the frontier
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in report.png_paths)
    doc = load_json(folder / "capacity.json")
    assert f"capacity 8 users; {len(doc['steps'])} steps" in page
    for relative in ["capacity.json", *(f"{Path(s['benchmark']).parent.name}/benchmark.json"
                                        for s in doc["steps"])]:
        data = (folder / relative).read_bytes()
        assert (f"<tr><td>{relative}</td><td>{len(data)}</td>"
                f'<td class="src">{hashlib.sha256(data).hexdigest()}</td></tr>') in page
    # the frontier's points are the steps' own figures (each step a run, --gpus 2)
    curve = capacity_curve(folder, doc, [f"{Path(s['benchmark']).parent.name}/benchmark.json"
                                         for s in doc["steps"]])
    for p, s in zip(curve.points, doc["steps"], strict=True):
        m = load_json(Path(s["benchmark"]))["metrics"]
        assert (p.load, p.x, p.y) == (s["users"], m["decode_tok_s_p50"],
                                      m["output_tok_s_per_gpu"])
        assert m["output_tok_s_per_gpu"] == m["throughput_tok_s"] / 2
    # as its reader opens it: headless Chromium, offline, every figure shown
    view_report(report.html_path, tmp_path, "report-capacity-search.png")


def test_a_sweep_per_gpu_and_its_frontier(sim: SimProcess, tmp_path: Path) -> None:
    """--gpus and --gpu-hour-price on a real sweep: each step's per-GPU figures are its own
    throughput ÷ gpus, the file verifies, and the report's frontier points are the steps'."""
    from anvil_metrics.report.frontier import sweep_curve
    from anvil_metrics.report.runfigs import load_run

    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--steps", "1,4", "--step-duration", "1s",
                 "--gpus", "2", "--gpu-hour-price", "2.5", "--results-dir", str(tmp_path),
                 timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"per GPU \(2\): [\d,.]+ output tok/s, [\d.]+ req/s; per user: ", proc.stdout)
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    wall_h = doc["wall_clock_ms"] / 3_600_000
    assert doc["metrics"]["usd_per_m_output_tokens"] == (
        2.5 * 2 * wall_h / doc["metrics"]["output_tokens"] * 1e6)
    curve = sweep_curve(doc, load_run(path.parent).rows, "sweep")
    for p, s in zip(curve.points, doc["steps"], strict=True):
        assert s["metrics"]["output_tok_s_per_gpu"] == s["metrics"]["throughput_tok_s"] / 2
        assert (p.x, p.y) == (s["metrics"]["decode_tok_s_p50"],
                              s["metrics"]["output_tok_s_per_gpu"])
    print("\n[per GPU sweep] " + "; ".join(
        f"{s['users']} users: {s['metrics']['output_tok_s_per_gpu']:.1f} tok/s/GPU at "
        f"{s['metrics']['decode_tok_s_p50']:.1f} tok/s/user" for s in doc["steps"]))
