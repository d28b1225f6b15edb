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
held within 1 % of offered with a lag p99 under 1 ms. A rate runs `--seconds`, or longer to
send `--min-requests` (a p99 of 120 requests is its second-worst value: one stall decides it).

The floor: beside each anvil run, a bare Python process (`FLOOR`: no event loop, no HTTP, no
other work) sleeps to a grid of due times at the same rate and records how late it woke. Its
figures over the seconds anvil's measured requests fell due are this machine's own wake-up
lateness in those seconds (a VM whose vCPUs stall shows it there too), and each anvil request
later than 1 ms is checked against it: "at a stall" counts those whose due time falls within
a floor wake-up later than 0.5 ms (from 2 ms before its due time to its start), which the
machine, not the pacing, explains (a lower bound: at 20 req/s the floor wakes only every
50 ms, so it samples a short stall as rarely as the load does). The steal column is the
VM's steal time over the run (/proc/stat), in ms summed over the CPUs.

    .venv/bin/python benchmarks/pacing.py [--rates 20,100,500,1000] [--seconds 6]
        [--min-requests 600]
        [--vllm ~/.cache/anvil-realserver/venv-vllm/bin/python --vllm-tokenizer DIR]

Prints; asserts nothing. Every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench import code_state, loadavg, run_beside_floor, write_scenario  # noqa: E402

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


# the floor: sleep to each due time of a constant grid, record (due, woke) until SIGTERM
FLOOR = """
import signal, sys, time
from array import array
rate, out = float(sys.argv[1]), sys.argv[2]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
step = int(1e9 / rate)
due = time.perf_counter_ns() + step
stamps = array("q")
while not stop:
    now = time.perf_counter_ns()
    if due > now:
        time.sleep((due - now) / 1e9)
    stamps.append(due)
    stamps.append(time.perf_counter_ns())
    due += step
with open(out, "wb") as f:
    stamps.tofile(f)
"""


def steal_ms() -> float:
    """The VM's steal time so far, ms summed over its CPUs (/proc/stat's `cpu` line)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) * 1000 / os.sysconf("SC_CLK_TCK")


def against_floor(run_dir: Path, floor_file: Path) -> dict[str, Any]:
    """The floor's wake-up lateness over the seconds anvil's measured requests fell due, and
    how many of anvil's requests later than 1 ms fell due in a floor wake-up later than
    0.5 ms (from 2 ms before their due time to their start)."""
    due, start = [], []
    with open(run_dir / "requests.jsonl", "rb") as f:
        for line in f:
            d = orjson.loads(line)
            delay = (d.get("extra") or {}).get("start_delay_ns")
            if d.get("type") == "request" and not d.get("warmup") and delay is not None:
                start.append(d["start_ns"])
                due.append(d["start_ns"] - delay)
    a_due, a_start = np.array(due), np.array(start)
    fl = np.fromfile(floor_file, dtype=np.int64).reshape(-1, 2)
    fl = fl[(fl[:, 0] >= a_due.min()) & (fl[:, 0] <= a_due.max())]
    late_ms = (fl[:, 1] - fl[:, 0]) / 1e6
    stalls = fl[late_ms > 0.5]
    late = (a_start - a_due) > 1_000_000
    explained = sum(bool(np.any((stalls[:, 1] >= d - 2_000_000) & (stalls[:, 0] <= s)))
                    for d, s in zip(a_due[late], a_start[late], strict=True))
    return {"floor_p99": float(np.percentile(late_ms, 99)) if len(late_ms) else None,
            "floor_max": float(late_ms.max()) if len(late_ms) else None,
            "late": int(late.sum()), "at_stall": explained}


def run_anvil(url: str, rate: float, seconds: float, extra: list[str], work: Path
              ) -> dict[str, Any]:
    """One `anvil run` at `rate` (constant arrivals) for `seconds`, with the floor beside it;
    the figures of its benchmark.json and of the floor."""
    work.mkdir(parents=True, exist_ok=True)
    floor_file = work / "floor.bin"
    floor = subprocess.Popen([sys.executable, "-c", FLOOR, f"{rate:g}", str(floor_file)],
                             stdin=subprocess.DEVNULL)
    steal0 = steal_ms()
    sc = write_scenario(work / "pacing.toml", 1, 64, 4)
    cmd = [sys.executable, "-m", "anvil_metrics", "run", str(sc), "-H", url, "--rate",
           f"{rate:g}", "--arrival", "constant", "--duration", f"{seconds:g}s", "-u", "128",
           "--results-dir", str(work / "r"), *extra]
    out, rc, took = run_beside_floor(cmd, floor, seconds + 120, cwd=REPO)
    steal = steal_ms() - steal0
    found = sorted((work / "r").glob("benchmark-*/benchmark.json"))
    if rc != 0 or not found:
        raise RuntimeError(f"anvil run exited {rc}:\n{out.decode()[-2000:]}")
    doc = orjson.loads(found[-1].read_bytes())
    lag = np.array([r["schedule_lag_ms"] for r in doc["request_timings"]
                    if r.get("schedule_lag_ms") is not None])
    load, client = doc["load"], doc.get("client") or {}
    return {"requests": doc["requests"], "failed": doc["failed"],
            "achieved": load["achieved_rate_rps"], "waited": load["waited_for_user"],
            "p50": np.percentile(lag, 50), "p99": np.percentile(lag, 99),
            "p999": np.percentile(lag, 99.9), "max": lag.max(),
            "cpu": client.get("cpu_pct"), "verdict": client.get("verdict"), "took": took,
            "steal": steal, **against_floor(found[-1].parent, floor_file)}


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


def fmt(v: float | None, places: int = 3) -> str:
    return "-" if v is None else f"{v:.{places}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="20,100,500,1000")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--min-requests", type=int, default=600)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--vllm", default=None, metavar="PY", help="a Python with vllm installed")
    ap.add_argument("--vllm-tokenizer", default=str(Path.home() / ".cache"
                                                    / "anvil-realserver" / "tiny-qwen3"))
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    print(f"pacing: {code_state()}; {loadavg()}; {a.seconds:g} s a run or "
          f"{a.min_requests} requests, constant arrivals, 64-token prompts, 4 output tokens, "
          "128 users")
    held: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory(prefix="anvil-pacing-") as tmp, \
            start_simulator(SIM) as sim:
        for name in a.configs.split(","):
            held[name] = None
            print(f"\n{name}\n{'rate':>7} {'sent':>6} {'achieved':>9} {'Δ %':>7} "
                  f"{'lag p50':>8} {'p99':>7} {'p99.9':>7} {'max':>7} {'waited':>6} "
                  f"{'CPU %':>6} {'floor p99':>9} {'max':>7} {'>1 ms':>5} {'at stall':>8} "
                  f"{'steal':>5}  verdict")
            for rate in rates:
                r = run_anvil(sim.url, rate, max(a.seconds, a.min_requests / rate), CONFIGS[name],
                              Path(tmp) / f"{name}-{rate:g}".replace(" ", ""))
                off = 100 * (r["achieved"] / rate - 1)
                print(f"{rate:7g} {r['requests']:6d} {r['achieved']:9.2f} {off:+7.2f} "
                      f"{r['p50']:8.3f} {r['p99']:7.3f} {r['p999']:7.3f} {r['max']:7.2f} "
                      f"{r['waited']:6d} {r['cpu'] or 0:6.1f} {fmt(r['floor_p99']):>9} "
                      f"{fmt(r['floor_max'], 2):>7} {r['late']:5d} {r['at_stall']:8d} "
                      f"{r['steal']:5.0f}  {r['verdict']}")
                if abs(off) <= 1 and r["p99"] < 1.0:
                    held[name] = rate
        if a.vllm:
            print("\nvllm bench serve --request-rate (same simulator)")
            for rate in rates:
                v = run_vllm(a.vllm, a.vllm_tokenizer, sim.url, rate,
                             max(int(rate * a.seconds), a.min_requests),
                             Path(tmp) / f"vllm-{rate:g}")
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
