"""The control hooks end to end: `--reset-prefix-cache` against the simulator's prefix cache.

Why real processes: the reset must reach the server once before each sweep step, from the
process that times the steps, and leave the cache cold for the step's first request; only
the simulator's own count of the calls (`/sim/stats`'s "control", stamped on the host's
monotonic clock, the run's clock too) and its own cached-token answers show both. The cache
is warmed first by a run with the same `--run-nonce` (the same prompts), and a control run
without the reset shows it warm: a step's first request that found it cold did so because
of the reset, not because its prompt was never sent.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest
from conftest import anvil, load_json, raw_lines, result_path, write_scenario

from anvil_metrics.post.verify import verify_benchmark

pytestmark = pytest.mark.e2e

# ~45 ms a request: 20 ms prefill, 12 tokens 2 ms apart; the prefix cache on
SIM = ("--prefill-ms", "20", "--interval-ms", "2", "--reasoning-tokens", "2",
       "--content-tokens", "10", "--max-context", "8192", "--prefix-cache")
SCENARIO = """
measurement_protocol = "sweeps"
max_tokens = 64
context_tokens = 256
max_context_tokens = 1024
"""
NONCE = "hooke2e1"


def _cached(line: dict) -> int:
    return line["usage"]["prompt_tokens_details"]["cached_tokens"]


def _control(url: str) -> dict[str, list[int]]:
    with urllib.request.urlopen(url + "/sim/stats", timeout=5) as r:
        return orjson.loads(r.read())["control"]


def test_reset_once_before_each_sweep_step(simulator, tmp_path: Path) -> None:
    sim = simulator(*SIM)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    common = ("--run-nonce", NONCE, "--quiet", "--results-dir", str(tmp_path))
    warm = anvil("run", str(sc), "--host", sim.url, "--requests", "150", "--users", "8",
                 *common, timeout=60)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    control = anvil("run", str(sc), "--host", sim.url, "--requests", "3", "--users", "1",
                    *common, timeout=60)
    assert control.returncode == 0, control.stdout + control.stderr
    warm_hits = [_cached(x) for x in raw_lines(result_path(control).parent)
                 if x["type"] == "request"]
    assert _control(sim.url)["/reset_prefix_cache"] == []
    proc = anvil("run", str(sc), "--host", sim.url, "--steps", "1,2,3", "--step-duration",
                 "0.5s", "--reset-prefix-cache", "auto", *common, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    doc = load_json(path)
    lines = raw_lines(path.parent)
    steps = [x["t_ns"] for x in lines if x["type"] == "step"]
    end = next(x["t_ns"] for x in lines if x["type"] == "step_end")
    resets = _control(sim.url)["/reset_prefix_cache"]
    firsts = []
    for i, t in enumerate(steps):  # a request started before step 0's line is step 0's
        lo, hi = (t if i else 0), (steps[i + 1] if i + 1 < len(steps) else end)
        mine = [x for x in lines if x["type"] == "request" and lo <= x["start_ns"] < hi]
        firsts.append(min(mine, key=lambda x: x["start_ns"]))
    print(f"\n[reset] control run's cached tokens {warm_hits}; resets at "
          f"{[(r - steps[0]) / 1e6 for r in resets]} ms from step 0; each step's first "
          f"request: index {[x['request_index'] for x in firsts]}, cached "
          f"{[_cached(x) for x in firsts]}")
    assert min(warm_hits) > 0  # the nonce's prompts were cached before the sweep
    assert verify_benchmark(doc) == []
    assert len(steps) == 3 and len(resets) == 3  # once per step, no more
    bounds = [0, *steps]
    for i in range(3):  # each reset before its step, after the step before it began
        assert sum(bounds[i] < r < bounds[i + 1] for r in resets) == 1
    assert [_cached(x) for x in firsts] == [0, 0, 0]
    assert all(x["request_index"] < 150 for x in firsts)  # a prompt the warm run cached
    hooks = doc["hooks"]
    assert [(h["name"], h["step"], h["ok"], h["status"]) for h in hooks] == [
        ("reset_prefix_cache", None, True, 200), ("reset_prefix_cache", 1, True, 200),
        ("reset_prefix_cache", 2, True, 200)]
    assert all(h["target"] == sim.url + "/reset_prefix_cache" for h in hooks)


def test_a_failing_hook_stops_the_run_before_load(simulator, tmp_path: Path) -> None:
    sim = simulator(*SIM)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    bad = sim.url.replace("://", "://user:secret@") + "/nothere"
    proc = anvil("run", str(sc), "--host", sim.url, "--requests", "5", "--users", "1",
                 "--reset-prefix-cache", bad, "--quiet", "--results-dir", str(tmp_path),
                 timeout=60)
    print(f"\n[failing hook] exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 2
    assert f"--reset-prefix-cache failed: {sim.url}/nothere answered 404" in proc.stderr
    assert "secret" not in proc.stderr + proc.stdout
    with urllib.request.urlopen(sim.url + "/sim/stats", timeout=5) as r:
        assert orjson.loads(r.read())["metrics"]["requests"] == 0  # nothing was sent
    optional = anvil("run", str(sc), "--host", sim.url, "--requests", "2", "--users", "1",
                     "--reset-prefix-cache", bad + "?", "--quiet", "--results-dir",
                     str(tmp_path), timeout=60)
    assert optional.returncode == 0, optional.stdout + optional.stderr
    hooks = load_json(result_path(optional))["hooks"]
    assert [(h["ok"], h["optional"], h["status"]) for h in hooks] == [(False, True, 404)]
    assert "secret" not in (result_path(optional).parent / "requests.jsonl").read_text()


def test_the_profile_covers_the_measured_load_only(simulator, tmp_path: Path) -> None:
    sim = simulator(*SIM)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--duration", "1s", "--users", "4",
                 "--warmup-requests", "4", "--server-profile", "--quiet", "--results-dir",
                 str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    lines = [x for x in raw_lines(path.parent) if x["type"] == "request"]
    warm = [x for x in lines if x["warmup"]]
    measured = [x for x in lines if not x["warmup"]]
    control = _control(sim.url)
    (start,), (stop,) = control["/start_profile"], control["/stop_profile"]
    drained = [x for x in measured if x["end_ns"] > stop]
    print(f"\n[profile] start {(start - max(x['end_ns'] for x in warm)) / 1e6:.2f} ms after "
          f"the last warm-up ended, {(min(x['start_ns'] for x in measured) - start) / 1e6:.2f}"
          f" ms before the first measured request; stop "
          f"{(stop - max(x['start_ns'] for x in measured)) / 1e6:.2f} ms after the last "
          f"measured start; {len(drained)} of {len(measured)} requests ended after it")
    assert len(warm) == 4 and measured
    assert max(x["end_ns"] for x in warm) <= start <= min(x["start_ns"] for x in measured)
    assert max(x["start_ns"] for x in measured) <= stop  # every measured request inside it
    assert drained  # the drain (requests in flight at the duration's end) is outside it
    doc = load_json(path)
    assert verify_benchmark(doc) == []
    assert [(h["name"], h["ok"], h["status"]) for h in doc["hooks"]] == [
        ("start_profile", True, 200), ("stop_profile", True, 200)]


def test_the_profile_starts_when_enough_requests_run_for_at_most_its_bound(
        simulator, tmp_path: Path) -> None:
    sim = simulator(*SIM)
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    proc = anvil("run", str(sc), "--host", sim.url, "--duration", "1.5s", "--users", "4",
                 "--profile-when-running", "3", "--profile-max-s", "0.4",
                 "--server-metrics-interval", "0.1", "--quiet", "--results-dir",
                 str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = result_path(proc)
    control = _control(sim.url)
    (start,), (stop,) = control["/start_profile"], control["/stop_profile"]
    samples = [orjson.loads(x) for x in (path.parent / "server_metrics.jsonl").read_bytes()
               .splitlines()]
    seen = [x["done_ns"] for x in samples if x.get("ok") and any(
        k.startswith("vllm:num_requests_running") and v >= 3
        for k, v in (x.get("series") or {}).items())]
    print(f"\n[profile when running] {len(seen)} samples with >= 3 running; the first "
          f"{(start - min(seen)) / 1e6:.2f} ms before the start; profile lasted "
          f"{(stop - start) / 1e6:.1f} ms (bound 400 ms)")
    assert seen and min(seen) <= start  # started only after a sample showed 3 running
    assert 0.4e9 <= stop - start < 0.4e9 + 0.5e9  # its bound, not the load's end (1.5 s)
    hooks = load_json(path)["hooks"]
    assert [(h["name"], h["ok"]) for h in hooks] == [("start_profile", True),
                                                     ("stop_profile", True)]
