"""Generator capacity with Locust's master and workers: SSE events per CPU-second per
load process, single process vs one worker vs two workers.

What it answers: does the distributed machinery (tickets from the master, records shipped
back in batches) cost the workers anything, and does the total grow with workers? Each
configuration runs the same per-process load (users × streams of `--tokens` tokens at
`--interval-ms`) against one simulator on 127.0.0.1. The figures come from the run's own
raw file: each load process measures its CPU time and wall time over its load window
(`process_time`, `perf_counter`), and events are counted from its records (output chunks,
plus the role chunk, the usage chunk and `[DONE]` of each completed stream).

    .venv/bin/python benchmarks/dist_capacity.py [--users 32] [--requests-per-process 400]

The machine's cores are shared by the simulator, the master and the workers: read the
per-CPU-second figures (cost per event), and the totals only where cores are free.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anvil_metrics.runs.simproc import start_simulator, stop_process  # noqa: E402

LOCUSTFILE = str(REPO / "locustfiles" / "chat.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scenario(path: Path, requests: int) -> Path:
    path.write_text(f"""
measurement_protocol = "dist-capacity"
max_tokens = 4096
context_tokens = 4096
max_context_tokens = 16384
requests = {requests}
[context_distribution]
4096 = 1
""")
    return path


def _run(cmds: list[list[str]], timeout_s: float) -> None:
    procs = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
             for c in cmds]
    try:
        procs[0].wait(timeout_s)
    finally:
        for p in procs:
            stop_process(p)


def _read(results: Path) -> dict:
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("benchmark-")]
    lines = [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]
    events: dict[str, int] = defaultdict(int)
    for r in lines:
        if r["type"] == "request":
            events[r["worker"]] += r["reasoning_chunks"] + r["content_chunks"]
            if r["failure"] is None:
                events[r["worker"]] += 3  # role chunk, usage chunk, [DONE]
    end = lines[-1]
    procs = []
    if "distributed" in end:
        for name, w in end["distributed"]["workers"].items():
            h = w["health"] or {}
            procs.append((f"worker {name}", events[name], h.get("cpu_s"), h.get("load_s")))
        m = end["distributed"]["master"]
        procs.append(("master", 0, m.get("cpu_s"), m.get("load_s")))
    else:
        (name,) = events
        c = end["client"]
        procs.append((f"single {name}", events[name], c.get("cpu_s"), c.get("load_s")))
    failed = sum(1 for r in lines if r["type"] == "request" and r["failure"] is not None)
    return {"procs": procs, "failed": failed}


def run_config(label: str, sim_url: str, workers: int, users: int, requests: int,
               tmp: Path) -> dict:
    results = tmp / label
    sc = _scenario(tmp / f"{label}.toml", requests)
    common = ["-H", sim_url, "--headless", "-u", str(users), "-r", str(users),
              "--scenario", str(sc), "--results-dir", str(results), "--only-summary"]
    if workers == 0:
        cmds = [[sys.executable, "-m", "locust", "-f", LOCUSTFILE, *common]]
    else:
        port = _free_port()
        cmds = [[sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--master",
                 "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                 "--expect-workers", str(workers), *common]]
        cmds += [[sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker",
                  "--master-host", "127.0.0.1", "--master-port", str(port)]
                 for _ in range(workers)]
    t0 = time.perf_counter()
    _run(cmds, timeout_s=600)
    out = _read(results)
    out["wall_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=32, help="streams per load process")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per response")
    ap.add_argument("--interval-ms", type=float, default=2.0, help="gap between tokens")
    ap.add_argument("--requests-per-process", type=int, default=400)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; per load process: {args.users} streams × "
          f"{args.tokens} tokens every {args.interval_ms} ms "
          f"(offered {args.users * 1000 / args.interval_ms:,.0f} events/s)")
    sim_args = ["--prefill-ms", "10", "--reasoning-tokens", "0", "--content-tokens",
                str(args.tokens), "--interval-ms", str(args.interval_ms),
                "--max-context", "16384"]
    rows = []
    with tempfile.TemporaryDirectory() as d, start_simulator(sim_args) as sim:
        tmp = Path(d)
        for label, workers in (("single process", 0), ("1 worker", 1), ("2 workers", 2)):
            n = max(1, workers)
            out = run_config(label.replace(" ", "-"), sim.url, workers, args.users * n,
                             args.requests_per_process * n, tmp)
            rows.append((label, out))
    print(f"\n{'configuration':<16}{'process':<28}{'events':>10}{'CPU s':>8}{'load s':>8}"
          f"{'events/CPU-s':>14}{'CPU %':>7}")
    single = None
    for label, out in rows:
        total_events = 0
        for name, events, cpu_s, load_s in out["procs"]:
            rate = events / cpu_s if cpu_s and events else None
            total_events += events
            if label == "single process":
                single = rate
            pct = 100 * cpu_s / load_s if cpu_s and load_s else None
            print(f"{label:<16}{name[:27]:<28}{events:>10,}{cpu_s or 0:>8.2f}{load_s or 0:>8.2f}"
                  f"{'' if rate is None else f'{rate:,.0f}':>14}"
                  f"{'' if pct is None else f'{pct:.0f}':>7}"
                  + (f"   {rate / single:.2f}× single" if rate and single and
                     label != "single process" else ""))
        loads = [p[3] for p in out["procs"] if p[3] and p[1]]
        if loads:
            print(f"{'':<16}{'total':<28}{total_events:>10,}   → {total_events / max(loads):,.0f}"
                  f" events/s over the longest load window; failed requests {out['failed']}")


if __name__ == "__main__":
    main()
