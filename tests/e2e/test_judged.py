"""Check classes under load: the pass rate falls with the load on a server that answers
wrong only when busy, and every verdict is the simulator's own count, suite by suite.

The scripted simulator answers the json, tools and retrieval suites right, and wrong
(`json:wrong_value`, `streaming_tools:wrong_name`: the load streams, `retrieval:wrong_value`)
while more than 4 streams run (`--script-fault-above 4`); `/sim/stats` counts the right and
wrong answers it gave by suite family: the truth. A sweep of 1 then 8 users sends a mix of
timed chat requests and the three suites' cases (retrieval's needles in prompts of 1,500
tokens, sized before the load): at 1 user nothing else runs beside a check request (step 0
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

SIM = ("--script", "--script-fault", "json:wrong_value", "--script-fault",
       "streaming_tools:wrong_name", "--script-fault", "retrieval:wrong_value",
       "--script-fault-above", "4",
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

[[request_class]]
name = "tools"
weight = 1
check = "tools"

[[request_class]]
name = "needle"
weight = 1
check = "retrieval"
context_tokens = 1500
"""
# class index: (its name, its suite: the simulator's family)
SUITES = {1: ("json", "json"), 2: ("tools", "tools"), 3: ("needle", "retrieval")}
REASONS = {"json": "expected", "tools": "called", "retrieval": "another key's value"}


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
    rows = measured(bench.parent)
    for k, (name, suite) in SUITES.items():
        _judged_as_the_simulator_counted(doc, rows, k, name, suite, truth["by_family"][suite])
    assert "chat" not in [c["name"] for c in doc["mix"]["classes"] if "check" in c]
    assert "json: passed" in proc.stdout

    ok = anvil("verify", str(bench))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc["steps"][1]["checks"]["json"]["passed"] += 1
    altered = tmp_path / "altered.json"
    altered.write_bytes(orjson.dumps(doc))
    bad = anvil("verify", str(altered))
    assert bad.returncode != 0 and "steps[1].checks" in bad.stdout + bad.stderr


def _judged_as_the_simulator_counted(doc: dict, rows: list[dict], k: int, name: str,
                                     suite: str, truth: dict) -> None:
    """Class `k` (`name`)'s rows, mix block and steps say what the simulator counted for `suite`:
    every answer it gave was judged, right ones passed, wrong ones not; step 0 (1 user)
    passed all, step 1 (8 users) not."""
    records = [r for r in rows if r["extra"].get("class_index") == k]
    verdicts = [r["extra"]["check_passed"] for r in records]
    assert verdicts.count(True) == truth["right"] and verdicts.count(False) == truth["wrong"]
    assert all(REASONS[suite] in r["extra"]["check_reason"] for r in records
               if not r["extra"]["check_passed"])
    klass = doc["mix"]["classes"][k]
    v = klass["verdicts"]
    assert (klass["check"], v["judged"], v["passed"]) == (suite, len(records), truth["right"])
    assert v["pass_rate"] == truth["right"] / len(records)
    assert v["pass_rate_ci95_low"] <= v["pass_rate"] <= v["pass_rate_ci95_high"]
    s0, s1 = (s["checks"][name] for s in doc["steps"])
    print(f"\n[judged] {suite}: truth {truth}; step 0 {s0}; step 1 {s1}")
    assert s0["judged"] > 0 and s0["pass_rate"] == 1.0
    assert s1["judged"] > 0 and s1["pass_rate"] < 1.0
    assert s0["passed"] + s1["passed"] == truth["right"]
    assert s0["judged"] + s1["judged"] == len(records)


def test_a_suite_not_judged_under_load_is_one_line(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "bad.toml", SCENARIO.replace('check = "json"',
                                                                'check = "coding"'))
    proc = anvil("run", str(sc), "-H", "http://127.0.0.1:9", "--requests", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "request_class[1].check" in err[0] and "'coding'" in err[0]
    assert "['json', 'reasoning_leakage', 'tools', 'retrieval']" in err[0]
    assert "Traceback" not in proc.stderr
