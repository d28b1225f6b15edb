"""Issue 50 item 2's proof: `-H URL,URL` against two simulators as replicas with no router.

The simulators' truth: each one's `/sim/stats` counts the streams it started. Request i goes
to replica i % 2 (recorded in the row's and the failure's `replica`), so each simulator's
count equals its replica's rows (warm-ups off: none is sent outside the rows). Killing one
simulator (by PID) mid-run leaves the other's requests answered and the dead one's as
failures, while the run goes on to its budget.

Why these settings: 40 requests of 4 tokens at 4 users end in about a second; in the kill
run a 20 ms token interval keeps the run going long enough to kill replica 1 after its
10th started stream, with requests still to send.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from conftest import anvil
from simfork import SimProcess, start_simulator

pytestmark = pytest.mark.e2e

N = 40


def started(sim: SimProcess) -> int:
    with urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=10) as r:
        return json.loads(r.read())["streams"]["started"]


def run(tmp: Path, a: SimProcess, b: SimProcess, *flags: str, metrics: bool = False) -> dict:
    proc = anvil("run", "scenarios/smoke.toml", "-H", f"{a.url},{b.url}", "-u", "4",
                 "--requests", str(N), "--warmup-requests", "0", "--max-tokens", "4",
                 *(() if metrics else ("--no-server-metrics",)), "--results-dir",
                 str(tmp / "res"), *flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = Path(tmp / "res").glob("benchmark-*/benchmark.json")
    checked = anvil("verify", str(bench))
    assert checked.returncode == 0, checked.stdout + checked.stderr  # the block recomputed
    return orjson.loads(bench.read_bytes())


def test_each_replica_serves_its_round_robin_share(tmp_path: Path) -> None:
    with start_simulator(["--interval-ms", "1"]) as a, start_simulator(
            ["--interval-ms", "1"]) as b:
        doc = run(tmp_path, a, b)
        truth = (started(a), started(b))
    rows = doc["request_timings"]
    assert len(rows) == N and not doc.get("failures")
    assert all(r["replica"] == r["request_index"] % 2 for r in rows)
    by_replica = tuple(sum(r["replica"] == k for r in rows) for k in (0, 1))
    assert by_replica == truth == (N // 2, N // 2)
    block = doc["replicas"]
    assert [e["url"] for e in block["endpoints"]] == [f"{a.url}/v1", f"{b.url}/v1"]
    assert [e["completed"] for e in block["endpoints"]] == list(truth)
    assert block["balance"] == 1.0
    # verify recomputes the block: a figure changed in the file is named
    block["endpoints"][0]["completed"] += 1
    block["balance"] = 2.0
    bad = tmp_path / "tampered.json"
    bad.write_bytes(orjson.dumps(doc))
    checked = anvil("verify", str(bad))
    out = checked.stdout + checked.stderr
    assert checked.returncode != 0
    assert "replicas.endpoints[0].completed" in out and "replicas.balance" in out


def test_least_in_flight_sends_more_to_the_fast_replica(tmp_path: Path) -> None:
    # replica 0's prefill takes 20× longer: its requests stay in flight, so the balancer's
    # picks go to replica 1 most of the time (round-robin's would be 20 / 20)
    with start_simulator(["--interval-ms", "1", "--prefill-ms", "200"]) as a, start_simulator(
            ["--interval-ms", "1", "--prefill-ms", "10"]) as b:
        doc = run(tmp_path, a, b, "--balance", "least-in-flight", metrics=True)
        truth = (started(a), started(b))
    block = doc["replicas"]
    assert block["policy"] == "least-in-flight" and not doc.get("failures")
    assert [e["completed"] for e in block["endpoints"]] == list(truth)
    assert sum(truth) == N and truth[1] >= 2 * truth[0]  # clearly more to the fast one
    assert all(e["stopped_answering_at_s"] is None for e in block["endpoints"])
    # the default /metrics is replica 0's: its client-minus-server pairs only replica 0's rows
    # (all rows' mean would put the fast replica's ~200 ms shorter requests against it)
    server = doc["server"]
    mine = [r["e2e_ms"] for r in doc["request_timings"] if r["replica"] == 0]
    assert server["requests"] == truth[0] == len(mine)
    assert server["client_minus_server_ms"]["e2e"] == pytest.approx(
        sum(mine) / len(mine) - server["e2e_ms_mean"], abs=1e-9)


def test_a_bad_balance_is_one_line_naming_it(tmp_path: Path) -> None:
    proc = anvil("run", "scenarios/smoke.toml", "-H", "http://127.0.0.1:9,http://127.0.0.1:10",
                 "--balance", "random", "--results-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "--balance" in proc.stderr and "'random'" in proc.stderr
    assert "least-in-flight" in proc.stderr and "Traceback" not in proc.stderr


def test_a_dead_replica_fails_alone_and_the_run_goes_on(tmp_path: Path) -> None:
    with start_simulator(["--interval-ms", "20"]) as a, start_simulator(
            ["--interval-ms", "20"]) as b:
        seen_b: list[int] = []

        def kill_b() -> None:  # after its 10th stream, by PID (bounded: 30 s)
            deadline = time.monotonic() + 30
            while started(b) < 10 and time.monotonic() < deadline:
                time.sleep(0.01)
            seen_b.append(started(b))
            b.proc.kill()

        killer = threading.Thread(target=kill_b)
        killer.start()
        # 1 × 4 users: the dead replica's 4th unanswered request in a row counts it dead
        # (its own streak: replica 0's answers between them do not reset it)
        doc = run(tmp_path, a, b, "--abort-after-failures", "1")
        killer.join(timeout=35)
        served_a = started(a)
    rows, failures = doc["request_timings"], doc.get("failures") or []
    # replica 0's requests all answered, and its simulator saw exactly those
    assert sum(r["replica"] == 0 for r in rows) == served_a == N // 2
    assert all(r["replica"] == r["request_index"] % 2 for r in rows)
    # the dead replica's later requests are failures, each named by its replica
    assert failures and all(f["replica"] == 1 for f in failures)
    assert all(f["request_index"] % 2 == 1 for f in failures)
    # replica 1 answered at most the streams it had started, and lost only those in
    # flight when it died (at most one per user)
    assert seen_b[0] - 4 <= sum(r["replica"] == 1 for r in rows) <= seen_b[0] < N // 2
    assert len(rows) + len(failures) == N
    dead = doc["replicas"]["endpoints"][1]
    assert dead["failed"] == len(failures) and dead["requests"] == N // 2
    # counted dead by its own streak, and the run went on: replica 0 never was
    assert doc["ended_by"] != "aborted" and doc["replicas"]["policy"] == "round-robin"
    assert dead["stopped_answering_at_s"] is not None and len(failures) >= 4
    assert doc["replicas"]["endpoints"][0]["stopped_answering_at_s"] is None


def test_a_capacity_search_spreads_every_step_over_the_replicas(tmp_path: Path) -> None:
    # each step is a run over both replicas: the simulators' counts are the steps' blocks
    with start_simulator(["--interval-ms", "1", "--prefill-ms", "20"]) as a, start_simulator(
            ["--interval-ms", "1", "--prefill-ms", "20"]) as b:
        proc = anvil("capacity", "scenarios/smoke.toml", "-H", f"{a.url},{b.url}", "--slo",
                     "e2e_p99_ms<=60000", "--start", "1", "--max", "2", "--step-requests",
                     "8", "--warmup-requests", "0", "--max-tokens", "4", "--balance",
                     "least-in-flight", "--results-dir", str(tmp_path), timeout=120)
        truth = (started(a), started(b))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (search,) = tmp_path.glob("capacity-*/capacity.json")
    steps = orjson.loads(search.read_bytes())["steps"]
    assert [s["users"] for s in steps] == [1, 2]
    blocks = [orjson.loads(Path(s["benchmark"]).read_bytes())["replicas"] for s in steps]
    assert all(b["policy"] == "least-in-flight" for b in blocks)
    served = tuple(sum(b["endpoints"][k]["completed"] for b in blocks) for k in (0, 1))
    assert served == truth and sum(truth) == 16


def test_the_run_aborts_only_when_every_replica_stopped_answering(tmp_path: Path) -> None:
    # replica 1 is dead from the start (its simulator stopped: a refused port), replica 0
    # is killed after its 6th stream: the run goes on past replica 1's death and aborts
    # (exit 3) at replica 0's, the reason naming both URLs
    with start_simulator(["--interval-ms", "1", "--prefill-ms", "20"]) as b:
        dead_url = b.url
    with start_simulator(["--interval-ms", "20", "--prefill-ms", "20"]) as a:
        def kill_a() -> None:  # bounded: 30 s
            deadline = time.monotonic() + 30
            while started(a) < 6 and time.monotonic() < deadline:
                time.sleep(0.01)
            a.proc.kill()

        killer = threading.Thread(target=kill_a)
        killer.start()
        proc = anvil("run", "scenarios/smoke.toml", "-H", f"{a.url},{dead_url}", "-u", "2",
                     "--requests", "400", "--warmup-requests", "0", "--max-tokens", "4",
                     "--abort-after-failures", "2", "--no-server-metrics",
                     "--results-dir", str(tmp_path))
        killer.join(timeout=35)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = tmp_path.glob("benchmark-*/benchmark.json")
    doc = orjson.loads(bench.read_bytes())
    checked = anvil("verify", str(bench))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert doc["ended_by"] == "aborted"
    assert doc["end_reason"].startswith("every replica stopped answering: the server at "
                                        f"{a.url}")
    assert f"the server at {dead_url} stopped answering" in doc["end_reason"]
    ends = doc["replicas"]["endpoints"]
    # replica 1 was counted dead first, and replica 0 answered meanwhile
    assert ends[0]["completed"] >= 1 and ends[1]["completed"] == 0
    assert 0 <= ends[1]["stopped_answering_at_s"] <= ends[0]["stopped_answering_at_s"]
