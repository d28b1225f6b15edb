"""The steady-state verdict of real runs: `anvil run` at 8 users against a simulator whose
prefill is fixed, and against one whose prefill grows 100 ms for every second it is up
(`--prefill-drift-ms-per-s`).

The truth is the simulator's: a fixed prefill gives TTFTs that do not move (the run is
`steady`), a growing one gives TTFTs that climb by ~250 ms over a ~2.5 s run, far beyond the
verdict's 10 % (the run is `drifting`, and the reason names ttft_ms). Latencies of 200 ms
and more keep a busy machine's stalls well under 10 % of a quarter's median. The CLI prints
the verdict and `anvil verify` recomputes the block; `anvil compare` of the two runs finds
the slower server worse, beyond noise.

A machine busy enough can still make the fixed-prefill server itself late for a quarter of
the run (seen beside the whole suite and two more loads: TTFT and mean ITL moved, the client
not saturated). So the simulator stamps its sends (`--stamp-send`) and the steady case is
judged against what a client could have measured from them (`sendstamps.readable_ns`, put
through the verdict's own quarter test): where those moved, the server drifted and
`drifting` is the right verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from conftest import anvil, load_json, measured, result_path
from sendstamps import readable_ns

from anvil_metrics.compare.text import compare_lines
from anvil_metrics.post.steady import _metric
from anvil_metrics.post.verify import verify_benchmark
from anvil_metrics.runs.simproc import start_simulator

pytestmark = pytest.mark.e2e

SIM = ["--prefill-ms", "200", "--interval-ms", "10", "--reasoning-tokens", "0",
       "--content-tokens", "10", "--max-context", "8192", "--stamp-send"]


# the steady run: 20 rounds of 8 users, ~6 s. With 8 rounds (~2.4 s) a client starved for
# CPU beside the suite and a hog kept its 8 streams in flight over only 45 % of the run (no
# plateau, the send stamps steady); the ramp, the drain and such a stall weigh less here
STEADY_REQUESTS = 160


def truth_moved(run_dir) -> dict[str, bool]:
    """Per latency of the verdict: did it move (the verdict's own quarter test, `_metric`)
    as a client could have measured it from the simulator's send stamps, over the measured
    requests in start order?"""
    recs = sorted(measured(run_dir), key=lambda r: r["start_ns"])
    ttft, itl, e2e = [], [], []
    for r in recs:
        ready, sent = readable_ns(r), r["extra"]["server"]["chunks_sent_ns"]
        ttft.append((ready["first_content_ns"] - r["start_ns"]) / 1e6)
        e2e.append((ready["end_ns"] - r["start_ns"]) / 1e6)
        itl.append((sent[-1] - sent[0]) / 1e6 / (len(sent) - 1))
    return {name: bool(_metric(np.array(v))["moved"]) for name, v in (
        ("ttft_ms", ttft), ("mean_inter_token_latency_ms", itl), ("e2e_ms", e2e))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """drift (ms/s) -> the CLI's process of a run against a simulator with that drift."""
    out = {}
    for drift, requests in ((0, STEADY_REQUESTS), (100, 64)):
        tmp = tmp_path_factory.mktemp(f"drift{drift}")
        with start_simulator([*SIM, "--prefill-drift-ms-per-s", str(drift)]) as sim:
            out[drift] = anvil("run", "scenarios/smoke.toml", "-H", sim.url, "-u", "8",
                               "--requests", str(requests), "--results-dir", str(tmp))
    return out


@pytest.mark.parametrize(("drift", "verdict"), [(0, "steady"), (100, "drifting")])
def test_a_steady_simulator_is_steady_and_a_drifting_one_drifts(runs: dict[int, Any],
                                                                 drift: int,
                                                                 verdict: str) -> None:
    proc = runs[drift]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = load_json(result_path(proc))
    block = doc["steady_state"]
    truth = truth_moved(result_path(proc).parent)
    print(f"\n[steady state, drift {drift} ms/s] {block['verdict']}: {block['reason']}; "
          f"client {doc['client']['verdict']}; moved by the send stamps: {truth}")
    assert block["level_kind"] == "in_flight" and block["share"] >= 0.5
    ttft = block["metrics"]["ttft_ms"]
    if drift:
        assert ttft["moved"] and truth["ttft_ms"]  # the prefill grew
        assert block["verdict"] == "drifting", block
        q = ttft["quarters_p50"]
        assert q[-1] - q[0] > 100  # ms: the prefill grew ~250 ms over the run
    else:
        # steady, unless the server was late by its own send stamps, or the client starved
        # for CPU read a quarter's streams in bursts (seen beside the whole suite: a mean ITL
        # quarter at -54 %), which its own verdict then says (saturated)
        moved = [k for k, m in block["metrics"].items() if m and m["moved"]]
        assert not ttft["moved"] or truth["ttft_ms"], (block, truth)
        assert (block["verdict"] == verdict or doc["client"]["saturated"]
                or any(truth[k] for k in moved)), (block, moved, truth)
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
    verdicts = [load_json(result_path(runs[d]))["steady_state"]["verdict"] for d in (0, 100)]
    assert [r["steady_state"] for r in doc["runs"]] == verdicts  # each run's own
    assert verdicts[1] == "drifting"
    assert compare_lines(doc)[-1].startswith("WARNING: run B's steady state is drifting")
