"""A check class under load: the pass rate falls with the load on a server that answers
wrong only when busy, and every verdict is the simulator's own count.

The scripted simulator answers the json suite right, and wrong (`json:wrong_value`) while
more than 4 streams run (`--script-fault-above 4`); `/sim/stats` counts the right and wrong
answers it gave: the truth. A sweep of 1 then 8 users sends a mix of timed chat requests
and the json suite's cases: at 1 user nothing else runs beside a check request (step 0
passes every answer); at 8 users the other users' streams run beside it. The rows'
verdicts, the mix block's and each step's pass rate are those counts exactly; `anvil
verify` recomputes them and refuses one altered; a check suite not judged under load is
one line and exit 2.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, measured, result_path, write_scenario
from simfork import start_simulator

pytestmark = pytest.mark.e2e

SIM = ("--script", "--script-fault", "json:wrong_value", "--script-fault-above", "4",
       "--prefill-ms", "20", "--interval-ms", "4", "--reasoning-tokens", "0",
       "--content-tokens", "16")
SCENARIO = """
measurement_protocol = "judged"
max_tokens = 16
context_tokens = 256
max_context_tokens = 2048
context_seed = 5

[[request_class]]
name = "chat"
weight = 3

[[request_class]]
name = "json"
weight = 1
check = "json"
"""


def test_the_pass_rate_falls_with_the_load(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "judged.toml", SCENARIO)
    with start_simulator(list(SIM)) as sim:
        proc = anvil("run", str(sc), "-H", sim.url, "--steps", "1,8", "--step-duration",
                     "1.5s", "--results-dir", str(tmp_path / "r"), "--no-server-metrics",
                     timeout=60)
        with urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=10) as r:
            truth = orjson.loads(r.read())["script"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = result_path(proc)
    doc = load_json(bench)
    records = [r for r in measured(bench.parent) if r["extra"].get("class_index") == 1]
    verdicts = [r["extra"]["check_passed"] for r in records]
    # every check answer the simulator gave was judged, right ones passed, wrong ones not
    assert verdicts.count(True) == truth["right"] and verdicts.count(False) == truth["wrong"]
    assert all("expected" in r["extra"]["check_reason"] for r in records
               if not r["extra"]["check_passed"])
    klass = doc["mix"]["classes"][1]
    v = klass["verdicts"]
    assert (klass["check"], v["judged"], v["passed"]) == ("json", len(records), truth["right"])
    assert v["pass_rate"] == truth["right"] / len(records)
    assert v["pass_rate_ci95_low"] <= v["pass_rate"] <= v["pass_rate_ci95_high"]
    assert "chat" not in [c["name"] for c in doc["mix"]["classes"] if "check" in c]
    # step 0 (1 user): nothing runs beside a check request; step 1 (8 users): others do
    s0, s1 = (s["checks"]["json"] for s in doc["steps"])
    print(f"\n[judged] truth {truth}; step 0 {s0}; step 1 {s1}")
    assert s0["judged"] > 0 and s0["pass_rate"] == 1.0
    assert s1["judged"] > 0 and s1["pass_rate"] < 1.0
    assert s0["passed"] + s1["passed"] == truth["right"]
    assert s0["judged"] + s1["judged"] == len(records)
    assert "json: passed" in proc.stdout

    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc["steps"][1]["checks"]["json"]["passed"] += 1
    altered = tmp_path / "altered.json"
    altered.write_bytes(orjson.dumps(doc))
    bad = anvil("verify", str(altered))
    assert bad.returncode != 0 and "steps[1].checks" in bad.stdout + bad.stderr


def test_a_suite_not_judged_under_load_is_one_line(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "bad.toml", SCENARIO.replace('check = "json"',
                                                                'check = "coding"'))
    proc = anvil("run", str(sc), "-H", "http://127.0.0.1:9", "--requests", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "request_class[1].check" in err[0] and "'coding'" in err[0]
    assert "json" in err[0] and "Traceback" not in proc.stderr
