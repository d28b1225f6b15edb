"""The steady-state verdict of real runs: `anvil run` at 8 users against a simulator whose
prefill is fixed, and against one whose prefill grows 100 ms for every second it is up
(`--prefill-drift-ms-per-s`).

The truth is the simulator's: a fixed prefill gives TTFTs that do not move (the run is
`steady`), a growing one gives TTFTs that climb by ~250 ms over a ~2.5 s run, far beyond the
verdict's 10 % (the run is `drifting`, and the reason names ttft_ms). Latencies of 200 ms
and more keep a busy machine's stalls well under 10 % of a quarter's median. The CLI prints
the verdict and `anvil verify` recomputes the block; `anvil compare` of the two runs finds
the slower server worse, beyond noise.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from conftest import anvil, load_json, result_path

from anvil_metrics.compare.text import compare_lines
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import start_simulator

pytestmark = pytest.mark.e2e

SIM = ["--prefill-ms", "200", "--interval-ms", "10", "--reasoning-tokens", "0",
       "--content-tokens", "10", "--max-context", "8192"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """drift (ms/s) -> the CLI's process of a run against a simulator with that drift."""
    out = {}
    for drift in (0, 100):
        tmp = tmp_path_factory.mktemp(f"drift{drift}")
        with start_simulator([*SIM, "--prefill-drift-ms-per-s", str(drift)]) as sim:
            out[drift] = anvil("run", "scenarios/smoke.toml", "-H", sim.url, "-u", "8",
                               "--requests", "64", "--results-dir", str(tmp))
    return out


@pytest.mark.parametrize(("drift", "verdict"), [(0, "steady"), (100, "drifting")])
def test_a_steady_simulator_is_steady_and_a_drifting_one_drifts(runs: dict[int, Any],
                                                                 drift: int,
                                                                 verdict: str) -> None:
    proc = runs[drift]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = load_json(result_path(proc))
    block = doc["steady_state"]
    print(f"\n[steady state, drift {drift} ms/s] {block['verdict']}: {block['reason']}; "
          f"client {doc['client']['verdict']}")
    assert block["level_kind"] == "in_flight" and block["share"] >= 0.5
    ttft = block["metrics"]["ttft_ms"]
    assert ttft["moved"] is (drift > 0)  # the simulator's truth: its prefill grew or not
    if drift:
        assert block["verdict"] == "drifting", block
        q = ttft["quarters_p50"]
        assert q[-1] - q[0] > 100  # ms: the prefill grew ~250 ms over the run
    else:
        # a client starved for CPU for a quarter of the run reads that quarter's streams in
        # bursts (seen beside the whole suite: a mean ITL quarter at -54 %), which is a
        # drift of the measurement and named so; then the run's own verdict says saturated
        moved = [k for k, m in block["metrics"].items() if m and m["moved"]]
        assert block["verdict"] == verdict or doc["client"]["saturated"], (block, moved)
    assert f"steady state: {block['verdict']} (plateau " in proc.stdout
    assert verify_benchmark(doc) == []


def test_compare_finds_the_slower_server_beyond_noise(runs: dict[int, Any], tmp_path) -> None:
    """`anvil compare` of the two runs as a user runs it: the drifting server's TTFT p50 is
    worse beyond noise (its prefill is 200 ms plus the drift, ~+50 % and more), and it is
    named as drifting."""
    steady, drifting = (result_path(runs[d]).parent for d in (0, 100))
    proc = anvil("compare", str(steady), str(drifting), "--json", "-o",
                 str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    (ttft,) = [f for f in doc["figures"] if f["name"] == "ttft_p50_ms"]
    v = ttft["vs_baseline"][1]
    assert v["beyond_noise"] is True and v["change"] == "worse" and v["delta_pct"] > 40
    assert [r["steady_state"] for r in doc["runs"]] == ["steady", "drifting"]
    assert compare_lines(doc)[-1].startswith("WARNING: run B's steady state is drifting")
