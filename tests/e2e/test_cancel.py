"""Cancellation under load against the simulator: the planned fraction is closed, at the
planned point, and the server counts each abort where it happened.

The simulator's truth: `/sim/stats` counts the streams whose client went away before the
first token (`aborted_prefill`) or after it (`aborted_decode`), and `--log-requests` every
request it received. The run's records say which requests were closed and in which phase;
each is the plan's draw for its index (`CancelPlan.cancels`), within the binomial bound of
the rate; the rest completed. Aborted requests are the `cancel` block's, not failures:
Locust's table has none, and `anvil verify` recomputes the block.
"""

from __future__ import annotations

import csv
import json
import math
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.load.cancel import CancelPlan
from anvil_metrics.runs.simproc import SimProcess

pytestmark = pytest.mark.e2e

RATE = 0.25
SCENARIO = """
measurement_protocol = "cancel"
requests = {n}
warmup_requests = 2
concurrency = 32
max_tokens = 24
context_tokens = 512
max_context_tokens = 1024
context_seed = 5

[cancel]
rate = 0.25
after = "decode"
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProcess, Path]]:
    log = tmp_path_factory.mktemp("sim") / "requests.log"
    # streams of 5 + 23 x 20 ms: a planned point is never raced by the stream's own end,
    # however late a busy machine reads it
    with start_simulator(["--prefill-ms", "5", "--interval-ms", "20", "--reasoning-tokens",
                          "0", "--log-requests", str(log)]) as s:
        yield s, log


def sim_stats(sim: SimProcess) -> dict:
    with urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=10) as r:
        return json.loads(r.read())["metrics"]


def received(log: Path) -> int:
    return len(log.read_bytes().splitlines()) if log.exists() else 0


def run(sim: SimProcess, tmp_path: Path, n: int, *flags: str) -> tuple[Path, str]:
    scenario = write_scenario(tmp_path / "c.toml", SCENARIO.format(n=n))
    proc = anvil("run", str(scenario), "-H", sim.url, "--results-dir", str(tmp_path / "r"),
                 *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return result_path(proc), proc.stdout


def aborted_records(bench: Path) -> dict[int, dict]:
    return {r["request_index"]: r for r in raw_lines(bench.parent)
            if r.get("type") == "request" and not r["warmup"] and r["failure"] is not None}


def test_decode_cancels_the_planned_fraction_at_the_first_output(
        sim: tuple[SimProcess, Path], tmp_path: Path) -> None:
    server, _ = sim
    before = sim_stats(server)
    bench, out = run(server, tmp_path, 400)  # its /metrics scraped
    after = sim_stats(server)
    plan = CancelPlan(RATE, "decode", 5)
    closed = aborted_records(bench)
    assert set(closed) == {k for k in range(400) if plan.cancels(k)}  # the plan's draw
    assert abs(len(closed) - 400 * RATE) <= 3.29 * math.sqrt(400 * RATE * (1 - RATE))
    for r in closed.values():
        f = r["failure"]
        assert (f["kind"], f["phase"]) == ("aborted", "decode")
        assert r["first_output_ns"] is not None  # closed at its first output, stamped
    # the server saw each abort after its first token, and finished the rest
    assert after["aborted_decode"] - before["aborted_decode"] == len(closed)
    assert after["aborted_prefill"] == before["aborted_prefill"]
    assert after["requests"] - before["requests"] == 402 - len(closed)

    doc = load_json(bench)
    assert doc["cancel"] == {"plan": {"rate": RATE, "after": "decode", "seed": 5},
                             "aborted": len(closed), "share": len(closed) / 400,
                             "phases": {"headers": 0, "prefill": 0, "decode": len(closed)}}
    assert len(doc["request_timings"]) == 400 - len(closed)
    assert f"cancelled on purpose: {len(closed)} requests" in out
    # the server's own count over the window (its e2e histogram, as vLLM's): it finished
    # only the requests the client completed, none of those closed on purpose
    assert doc["server"]["requests"] == doc["completed"] == 400 - len(closed)
    assert f"cancelled on purpose {len(closed)}  failed 0  " in out  # their own outcome
    assert "failure #" not in out  # listed as the cancel block's, not as failures
    with open(bench.parent / "locust_stats.csv") as f:
        total = [row for row in csv.DictReader(f) if row["Name"] == "Aggregated"][0]
    assert total["Failure Count"] == "0"  # not the server's failures
    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("after", ["prefill", "30"])
def test_prefill_and_a_delay_close_where_they_say(sim: tuple[SimProcess, Path],
                                                  tmp_path: Path, after: str) -> None:
    """`prefill`: closed once written, so every request the server read it either finished
    or saw aborted (one closed before the server read it never reached it). A delay of
    30 ms closes a request in whatever phase it is then: decode, after its 5 ms prefill, on
    an idle machine; on a busy one, what its own stamps say."""
    server, log = sim
    before, got_before = sim_stats(server), received(log)
    bench, _ = run(server, tmp_path, 120, "--cancel-after", after, "--no-server-metrics")
    after_stats, reached = sim_stats(server), received(log) - got_before
    plan = CancelPlan(RATE, "prefill" if after == "prefill" else float(after), 5)
    closed = aborted_records(bench)
    assert set(closed) == {k for k in range(120) if plan.cancels(k)}
    phases = {r["failure"]["phase"] for r in closed.values()}
    finished = after_stats["requests"] - before["requests"]
    prefill = after_stats["aborted_prefill"] - before["aborted_prefill"]
    decode = after_stats["aborted_decode"] - before["aborted_decode"]
    assert finished == 122 - len(closed)  # the others, warm-ups included, completed
    assert prefill + decode <= len(closed)
    assert reached == finished + prefill + decode  # each one it read: done or aborted
    if after == "prefill":
        assert phases == {"prefill"}
        assert all(r["first_output_ns"] is None for r in closed.values())
    else:  # 30 ms after the start, whatever had arrived by then: its phase says which
        for r in closed.values():
            assert r["end_ns"] - r["start_ns"] >= 30e6  # never before its delay
            want = ("decode" if r["first_output_ns"] is not None else
                    "headers" if r["http_status"] is None else "prefill")
            assert r["failure"]["phase"] == want, r
