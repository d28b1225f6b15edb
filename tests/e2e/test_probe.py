"""The head-of-line probe end to end (`--probe-rate`), held to the simulator's own stamps.

Why real processes: what a probe measures is a wait in the server (a queue behind a full
batch), which only a real server with a capacity knee has. The simulator here runs at most
4 streams (`--max-running 4`), so a 3-step user sweep (1, 4, 12 users) is below, at and far
over its capacity; its request log (`--log-requests --log-answers`) stamps each probe's
arrival and first token on the same clock as the client's, so the probe's TTFT is compared
with the server's time from arrival to first token (its queue time plus one prefill) for
the very same request, found by the probe's `x-anvil-probe` header.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario
from simfork import start_simulator

from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

PREFILL_MS = 20.0
SCENARIO = """
measurement_protocol = "probe"
max_tokens = 64
context_tokens = 1024
max_context_tokens = 1024
"""


def _server_ttft_ms(log: Path) -> dict[int, float]:
    """Each probe's time from arrival to first token by the simulator's stamps, by index."""
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    arrivals = {x["t_ns"]: int(x["headers"]["x-anvil-probe"]) for x in lines
                if "t_ns" in x and "x-anvil-probe" in x["headers"]}
    return {arrivals[a["answer_t0_ns"]]: (a["first_sent_ns"] - a["answer_t0_ns"]) / 1e6
            for a in lines if a.get("answer_t0_ns") in arrivals and a["first_sent_ns"]}


def test_probe_ttft_rises_with_load_and_matches_the_servers_queue(tmp_path: Path) -> None:
    log = tmp_path / "sim.jsonl"
    sim_args = ["--prefill-ms", str(PREFILL_MS), "--interval-ms", "2", "--reasoning-tokens",
                "2", "--content-tokens", "10", "--max-context", "8192", "--max-running", "4",
                "--log-requests", str(log), "--log-answers"]
    with start_simulator(sim_args) as sim:
        proc = anvil("run", str(write_scenario(tmp_path / "s.toml", SCENARIO)), "--host",
                     sim.url, "--steps", "1,4,12", "--step-duration", "1.5s", "--probe-rate",
                     "10", "--probe-idle", "5", "--results-dir", str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    checked = anvil("verify", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    block = doc["probe"]
    assert "probe (10.0/s" in proc.stdout and "the load delayed it" in proc.stdout
    probes = [x for x in map(orjson.loads, (path.parent / "probe.jsonl").read_bytes()
                             .splitlines()) if x["type"] == "probe"]
    server = _server_ttft_ms(log)
    # every probe reached the server and none is a row: the run's records are the others
    assert block["sent"] == len(probes) == len(server) == block["answered"]
    sent = [x for x in log.read_bytes().splitlines() if b'"t_ns"' in x]
    records = [x for x in raw_lines(path.parent) if x.get("type") == "request"]
    assert len(sent) - len(probes) == len(records) > 0
    # each probe's TTFT is the server's arrival-to-first-token (queue + prefill) within 2 ms
    diff = {p["probe"]: (p["first_output_ns"] - p["start_ns"]) / 1e6 - server[p["probe"]]
            for p in probes}
    assert statistics.median(abs(d) for d in diff.values()) < 2.0, diff
    by_step: dict[object, list[int]] = {}
    for p in probes:
        by_step.setdefault(p["step"] if p["phase"] == "load" else "idle", []).append(p["probe"])
    truth = {k: statistics.median_low(server[i] for i in v) for k, v in by_step.items()}
    steps = {s["step"]: s for s in block["steps"]}
    print(f"\n[probe] idle p50 {block['idle']['ttft_p50_ms']:.2f} ms (server "
          f"{truth['idle']:.2f}); " + "; ".join(
              f"step {i}: p50 {steps[i]['ttft_p50_ms']:.2f} ms (server {truth[i]:.2f})"
              for i in sorted(steps)))
    # a group's p50 against the server's is 2 ms plus how late this run's own loop woke (its
    # recorded lag p99: a busy machine delays the client's stamps, not the server's)
    lag = (doc["client"]["loop_lag_ms"] or {}).get("p99") or 0.0
    # the idle baseline is one prefill: the simulator's own, and at least --prefill-ms
    assert abs(block["idle"]["ttft_p50_ms"] - truth["idle"]) < 2.0 + lag, lag
    assert PREFILL_MS <= block["idle"]["ttft_p50_ms"]
    assert truth["idle"] - PREFILL_MS < 2.0
    # per step, the probes' p50 is the server's (queue + prefill) within 2 ms ...
    for i, s in steps.items():
        assert abs(s["ttft_p50_ms"] - truth[i]) < 2.0 + lag, (i, s, truth[i], lag)
    # ... and it rises with the load: 12 users over 4 slots queue by the server's stamps
    assert set(steps) == {0, 1, 2}
    assert truth[2] - truth["idle"] > 10.0
    assert steps[2]["ttft_p50_ms"] > steps[0]["ttft_p50_ms"] + 10.0
    assert steps[2]["delay_p50_ms"] > 10.0
