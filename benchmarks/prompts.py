"""Prompt work: what it costs to build prompts, and whether it ever stalls other streams.

Two parts, each printed (nothing is asserted; the tests keep loose bounds only):

1. Build time per planned size, once calibrated. The simulator is started, the run's
   calibration found once (its `/tokenize`), then each size is rebuilt from the found word
   counts, as a run (or a cached calibration) does: the body text, the request template
   (serialised once per size) and one request's bytes (the per-request work on the hub).
2. Event-loop lag during a 64-stream run against the simulator (`anvil run`, real Locust),
   read from the run's `client.loop_lag_ms`: once with large prompts (prompt work on the
   hub: splicing and sending up to ~1.8 MB per request) and once with small prompts (the
   same streams without the prompt work), so the difference is what prompts add.

    .venv/bin/python benchmarks/prompts.py [--sizes 4096,32768,131072,393216]
        [--streams 64] [--lag-sizes 32768,131072] [--skip-lag]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from anvil_metrics.load.body import BodyBuilder
from anvil_metrics.load.scenario import scenario_from_dict
from anvil_metrics.prep.counting import server_counter
from anvil_metrics.prep.prompts import PromptFactory, calibrate_by_probe
from anvil_metrics.runs.simproc import start_simulator
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient

REPO = Path(__file__).resolve().parent.parent


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def build_times(url: str, sizes: list[int], repeats: int = 5) -> None:
    client = ChatClient(Endpoint.parse(url), None)
    try:
        counter = server_counter(client, {"model": "sim-model"})
        cal = calibrate_by_probe(counter.count, 0, method=counter.method)
        found = PromptFactory(cal, 0, "bench000")
        counted = found.prepare(sizes, counter.count)
    finally:
        client.close()
    sc = scenario_from_dict({"measurement_protocol": "bench", "max_tokens": 16,
                             "max_context_tokens": max(sizes) + 16})
    print(f"calibration: {cal.method} via {counter.source}, "
          f"{cal.tokens_per_word:.4f} tokens/word")
    print(f"{'planned':>9} {'counted':>9} {'words':>8} {'MB':>6} {'text ms':>8} "
          f"{'template ms':>12} {'total ms':>9} {'per-request ms':>15}")
    for size in sizes:
        text_ms, tmpl_ms, req_ms = [], [], []
        body = b""
        for _ in range(repeats):
            pf = PromptFactory(cal, 0, "bench000", words=found.words)
            t0 = time.perf_counter()
            pf.prepare([size])
            text_ms.append(_ms(t0))
            bb = BodyBuilder(sc, "sim-model", pf)
            t0 = time.perf_counter()
            bb.prepare([size])
            tmpl_ms.append(_ms(t0))
            t0 = time.perf_counter()
            for i in range(10):
                body = bb.build(size, i)
            req_ms.append(_ms(t0) / 10)
        text, tmpl = statistics.median(text_ms), statistics.median(tmpl_ms)
        print(f"{size:>9} {counted.get(size) or '-':>9} {found.words[size]:>8} "
              f"{len(body) / 1e6:>6.2f} {text:>8.1f} {tmpl:>12.1f} {text + tmpl:>9.1f} "
              f"{statistics.median(req_ms):>15.3f}")
    print("(medians of 5; 'total' = text + template = building one planned size once "
          "calibrated; per-request = splicing one request's bytes)")


def lag_run(url: str, sizes: list[int], streams: int, requests: int, tmp: Path) -> dict:
    dist = {str(s): max(1, requests // len(sizes)) for s in sizes}
    max_ctx = max(sizes) + 64
    toml = (f'measurement_protocol = "prompt-lag"\nconcurrency = {streams}\n'
            f"requests = {requests}\nmax_tokens = 64\ncontext_tokens = {max_ctx}\n"
            f"max_context_tokens = {max_ctx}\n[context_distribution]\n"
            + "".join(f"{k} = {v}\n" for k, v in dist.items()))
    path = tmp / f"lag-{'-'.join(map(str, sizes))}.toml"
    path.write_text(toml)
    out = subprocess.run(
        [sys.executable, "-m", "anvil_metrics", "run", str(path), "--host", url,
         "--results-dir", str(tmp / "results"), "--run-time", "600"],
        capture_output=True, text=True, timeout=900)
    result = next((ln.split(": ", 1)[1] for ln in out.stdout.splitlines()
                   if ln.startswith("result: ")), None)
    if result is None:
        raise SystemExit(f"run failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    doc = json.loads(Path(result).read_text())
    raw_end = json.loads((Path(result).parent / "requests.jsonl").read_text()
                         .strip().splitlines()[-1])
    doc["_raw_client"] = raw_end.get("client") or {}
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4096,32768,131072,393216")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=192)
    ap.add_argument("--lag-sizes", default="32768,131072")
    ap.add_argument("--skip-lag", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with start_simulator(["--max-context", str(max(sizes) + 1024)]) as sim:
        build_times(sim.url, sizes)
    if a.skip_lag:
        return 0
    lag_sizes = [int(s) for s in a.lag_sizes.split(",")]
    # ~20 ms per token for 64 tokens: streams overlap for the whole run
    sim_args = ["--max-context", str(max(lag_sizes) + 1024), "--interval-ms", "20",
                "--prefill-ms", "50"]
    print(f"\nloop lag during {a.streams} streams, {a.requests} requests, 64 output tokens "
          "each (client.loop_lag_ms of the run):")
    print(f"{'prompts':>22} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'>5 ms':>6} "
          f"{'samples':>8} {'cpu %':>6} {'completed':>10} {'send chunk max ms':>18}")
    with tempfile.TemporaryDirectory() as d, start_simulator(sim_args) as sim:
        for label, sz in (("small 1024", [1024]),
                          ("large " + ",".join(map(str, lag_sizes)), lag_sizes)):
            doc = lag_run(sim.url, sz, a.streams, a.requests, Path(d))
            lag = doc["client"]["loop_lag_ms"]
            send_max = doc["_raw_client"].get("send_chunk_ms_max")
            print(f"{label:>22} {lag['p50']:>7.2f} {lag['p99']:>7.2f} {lag['max']:>7.2f} "
                  f"{lag['over_5ms']:>6} {lag['samples']:>8} {doc['client']['cpu_pct']:>6.1f} "
                  f"{doc['completed']:>10} {send_max:>18.3f}")
            print(f"{'':>22} stalls > 5 ms [s into the load, ms]: {lag.get('stalls')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
