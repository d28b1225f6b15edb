"""Open-loop pacing: how late anvil sends each request after its due time, at rising rates,
in one process and with `--processes 2`, against a fast simulator; and, with `--vllm PY`,
the rate `vllm bench serve --request-rate` achieves against the same simulator.

Why: an open loop is only an open loop if requests leave when they fall due. A timer that
rounds sub-millisecond sleeps up, or a loop busy with streams, sends late and quietly
under-delivers the rate (AIPerf #1185). Each anvil row records `schedule_lag_ms` (start −
due, on the sending process's clock), so the figures here are the run's own: p50/p99/p99.9
and max of the lag, the achieved rate against the offered (constant arrivals, so the drawn
schedule is exactly the offered rate), how many fell due with every user busy, and the
load process's CPU and verdict. For each configuration the last line gives the highest rate
held within 1 % of offered with a lag p99 under 1 ms.

    .venv/bin/python benchmarks/pacing.py [--rates 20,100,500,1000] [--seconds 6]
        [--vllm ~/.cache/anvil-realserver/venv-vllm/bin/python --vllm-tokenizer DIR]

Prints; asserts nothing. Every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench import code_state, loadavg, write_scenario  # noqa: E402

from anvil_metrics.runs.simproc import start_simulator, stop_process  # noqa: E402

SIM = ["--prefill-ms", "2", "--interval-ms", "1", "--reasoning-tokens", "0",
       "--content-tokens", "4", "--max-context", "8192", "--model", "tiny-qwen3"]
CONFIGS = {"1 process": [], "--processes 2": ["--processes", "2"]}
# `vllm bench serve` by its module (the CPU build's distribution is not named "vllm", which
# the `vllm` command's version lookup needs)
VLLM_BENCH = (
              "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "from vllm.benchmarks.serve import add_cli_args, main\n"
              "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args())")


def run_anvil(url: str, rate: float, seconds: float, extra: list[str], work: Path
              ) -> dict[str, Any]:
    """One `anvil run` at `rate` (constant arrivals) for `seconds`; the figures of its
    benchmark.json."""
    work.mkdir(parents=True, exist_ok=True)
    sc = write_scenario(work / "pacing.toml", 1, 64, 4)
    cmd = [sys.executable, "-m", "anvil_metrics", "run", str(sc), "-H", url, "--rate",
           f"{rate:g}", "--arrival", "constant", "--duration", f"{seconds:g}s", "-u", "128",
           "--results-dir", str(work / "r"), *extra]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(timeout=seconds + 120)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise
    took = time.monotonic() - t0
    found = sorted((work / "r").glob("benchmark-*/benchmark.json"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"anvil run exited {proc.returncode}:\n{out.decode()[-2000:]}")
    doc = orjson.loads(found[-1].read_bytes())
    lag = np.array([r["schedule_lag_ms"] for r in doc["request_timings"]
                    if r.get("schedule_lag_ms") is not None])
    load, client = doc["load"], doc.get("client") or {}
    return {"requests": doc["requests"], "failed": doc["failed"],
            "achieved": load["achieved_rate_rps"], "waited": load["waited_for_user"],
            "p50": np.percentile(lag, 50), "p99": np.percentile(lag, 99),
            "p999": np.percentile(lag, 99.9), "max": lag.max(),
            "cpu": client.get("cpu_pct"), "verdict": client.get("verdict"), "took": took}


def run_vllm(python: str, tokenizer: str, url: str, rate: float, n: int, work: Path
             ) -> dict[str, Any]:
    """`vllm bench serve --request-rate` (its Poisson default made constant with
    burstiness = 1e9) for `n` prompts; its achieved rate from its own start times."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-c", VLLM_BENCH, "--backend",
           "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", url,
           "--model", "tiny-qwen3", "--tokenizer", tokenizer, "--dataset-name", "random",
           "--random-input-len", "64", "--random-output-len", "4", "--num-prompts", str(n),
           "--request-rate", f"{rate:g}", "--burstiness", "1e9", "--ignore-eos",
           "--save-result", "--save-detailed", "--result-dir", str(work),
           "--result-filename", "v.json",
           "--disable-tqdm"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={"HF_HUB_OFFLINE": "1",
                                                           "PATH": "/usr/bin:/bin"})
    try:
        out, _ = proc.communicate(timeout=n / rate + 300)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise
    path = work / "v.json"
    if proc.returncode != 0 or not path.exists():
        return {"error": out.decode(errors="replace")[-600:]}
    doc = orjson.loads(path.read_bytes())
    starts = np.sort([t for t in doc.get("start_times") or [] if t])
    achieved = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else None
    # its schedule is not saved; with burstiness 1e9 it is a grid of 1/rate from its first
    # request (gaps within 1/sqrt(1e9) of it), so the lag is each start's distance past that
    lag = (starts - starts[0] - np.arange(len(starts)) / rate) * 1000 if len(starts) else starts
    return {"requests": doc["completed"] + doc.get("failed", 0), "achieved": achieved,
            "duration": doc["duration"], "p50": np.percentile(lag, 50) if len(lag) else None,
            "p99": np.percentile(lag, 99) if len(lag) else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="20,100,500,1000")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--vllm", default=None, metavar="PY", help="a Python with vllm installed")
    ap.add_argument("--vllm-tokenizer", default=str(Path.home() / ".cache"
                                                    / "anvil-realserver" / "tiny-qwen3"))
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    print(f"pacing: {code_state()}; load average {loadavg()}; {a.seconds:g} s a run, "
          "constant arrivals, 64-token prompts, 4 output tokens, 128 users")
    held: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory(prefix="anvil-pacing-") as tmp, \
            start_simulator(SIM) as sim:
        for name in a.configs.split(","):
            held[name] = None
            print(f"\n{name}\n{'rate':>7} {'sent':>6} {'achieved':>9} {'Δ %':>7} "
                  f"{'lag p50':>8} {'p99':>7} {'p99.9':>7} {'max':>7} {'waited':>6} "
                  f"{'CPU %':>6}  verdict")
            for rate in rates:
                r = run_anvil(sim.url, rate, a.seconds, CONFIGS[name],
                              Path(tmp) / f"{name}-{rate:g}".replace(" ", ""))
                off = 100 * (r["achieved"] / rate - 1)
                print(f"{rate:7g} {r['requests']:6d} {r['achieved']:9.2f} {off:+7.2f} "
                      f"{r['p50']:8.3f} {r['p99']:7.3f} {r['p999']:7.3f} {r['max']:7.2f} "
                      f"{r['waited']:6d} {r['cpu'] or 0:6.1f}  {r['verdict']}")
                if abs(off) <= 1 and r["p99"] < 1.0:
                    held[name] = rate
        if a.vllm:
            print("\nvllm bench serve --request-rate (same simulator)")
            for rate in rates:
                v = run_vllm(a.vllm, a.vllm_tokenizer, sim.url, rate,
                             int(rate * a.seconds), Path(tmp) / f"vllm-{rate:g}")
                if "error" in v:
                    print(f"{rate:7g} failed: {v['error']}")
                    continue
                if v["achieved"] is None:
                    print(f"{rate:7g} {v['requests']:6d} no start times saved")
                    continue
                print(f"{rate:7g} {v['requests']:6d} achieved {v['achieved']:9.2f} req/s "
                      f"({100 * (v['achieved'] / rate - 1):+.2f} %); start − its grid p50 "
                      f"{v['p50']:.3f} ms, p99 {v['p99']:.3f} ms")
    for name, rate in held.items():
        print(f"highest rate held within 1 % with lag p99 < 1 ms, {name}: "
              f"{'none of those tried' if rate is None else f'{rate:g} req/s'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
