"""Soak: one long duration run at N streams; does the load process's memory stay flat?

Runs can last hours now (`--duration`), so anything the load process keeps per request
grows without bound. This script starts the simulator (small, fast answers) and ONE headless
Locust process (anvil's locustfile, `-u N -r N --duration M`, no scenario: no request
budget), and prints, at 10 s and then once a minute while the load runs:

- the Locust process's RSS (`/proc/PID/status` VmRSS, read from outside) and its growth
  since the first minute;
- the raw file's size and how many request records it holds (read incrementally: only the
  bytes appended since the last sample), so RSS growth per request can be given;
- the event-loop lag of that minute (p50, p99, max, wake-ups ≥ 5 ms late).

At the end: RSS growth after the first minute (%, target ≤ 5 %), RSS bytes per request over
that stretch, whether every issued request is in the output exactly once (Locust's count of
requests, the raw file's measured `request_index` values, `benchmark.json`'s
`request_timings` + `failures` indices = 0..requests-1, each once), and `anvil verify` of
the result. It asserts nothing; it prints figures.

Loop lag per minute, and why it is measured this way: anvil's own `LoopLagMonitor`
(`lagmon.py`, on the session's `LoadWindow`) sums the whole load into one histogram and
reports it once, in `run_end` and `benchmark.json`'s `client.loop_lag_ms`; nothing
per-minute is exposed, and a headless run has no web UI to poll. Measuring from outside
would need a second sampling greenlet inside the process (a second 1 ms wake-up costs ~7 %
of a core and would itself move the figures). So this file doubles as a tiny second
locustfile (`-f locustfiles/chat.py,benchmarks/soak.py`, loaded by Locust as module `soak`,
where the driver below does not run): when `ANVIL_SOAK_PROBE` names a file, a greenlet wakes
once a minute, copies the running session's lag histogram (10 µs buckets) and writes the
difference from the previous minute as one JSON line. The percentiles are nearest-rank on
that window's histogram, the upper edge of the bucket (as `lagmon` reports them); the
window's max is the upper edge of its highest bucket (`> 100 ms` when it overflowed). It
reads the monitor's private `_hist`/`_overflow`: a benchmark may, the package must not.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--users 64] [--keep]

Every process it starts is stopped by its PID at the end and on Ctrl-C; the run folder is
deleted unless `--keep`. Run it on an otherwise idle machine: the simulator and the load
share the CPUs.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

PROBE_ENV = "ANVIL_SOAK_PROBE"
TRACE_ENV = "ANVIL_SOAK_TRACE"  # N: tracemalloc on, the N sites that grew most each minute
PROBE_PERIOD_S = 60.0
SIM_ARGS = ("--prefill-ms", "20", "--interval-ms", "5", "--reasoning-tokens", "5",
            "--content-tokens", "40")
BUCKET_MS = 0.01  # lagmon's 10 µs buckets
OVER_5MS_BUCKET = 500  # first bucket at or past 5 ms


# -- the probe, inside the Locust process ---------------------------------------------------


def window_lag(delta: Any, overflow: int) -> dict[str, Any]:
    """Nearest-rank p50/p99, max and ≥ 5 ms count of one window's lag histogram (ms)."""
    import numpy as np

    n = int(delta.sum()) + overflow
    if n == 0:
        return {"samples": 0, "p50_ms": None, "p99_ms": None, "max_ms": None, "over_5ms": 0}
    cum = np.cumsum(delta)

    def pct(p: int) -> float | str:
        k = max(1, (p * n + 99) // 100)
        if k > int(cum[-1]):
            return "> 100"
        return round((int(np.searchsorted(cum, k, side="left")) + 1) * BUCKET_MS, 2)

    top = np.flatnonzero(delta)
    return {"samples": n, "p50_ms": pct(50), "p99_ms": pct(99),
            "max_ms": "> 100" if overflow else round((int(top[-1]) + 1) * BUCKET_MS, 2),
            "over_5ms": int(delta[OVER_5MS_BUCKET:].sum()) + overflow}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_figures() -> dict[str, int]:
    """Where the process's memory sits, to tell growing objects from a growing allocator:
    Python's allocated blocks (objects alive), and glibc's `mallinfo2`: `uordblks` bytes in
    use and `fordblks` bytes free inside the main heap (freed but not returned to the
    system), `hblkhd` bytes in mmapped chunks (pymalloc's arenas, large arrays)."""
    import gc
    import sys

    out = {"py_blocks": sys.getallocatedblocks(), "gc_objects": len(gc.get_objects())}
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        out |= {"malloc_in_use": info.uordblks, "malloc_free": info.fordblks,
                "mmapped": info.hblkhd}
    except (OSError, AttributeError):
        pass
    return out


def _probe(environment: Any, path: str) -> None:
    import gevent
    import numpy as np
    import orjson

    from anvil_metrics.live.runctx import latest_run

    t0 = time.monotonic()
    previous: tuple[Any, Any, int] | None = None  # (monitor, histogram, overflow)
    trace_top = int(os.environ.get(TRACE_ENV) or 0)
    baseline = None
    minute = 0
    while True:
        minute += 1
        gevent.sleep(max(0.0, t0 + minute * PROBE_PERIOD_S - time.monotonic()))
        sess = latest_run(environment)
        if sess is None:
            continue
        mon = sess.load.lag
        hist = np.frombuffer(mon._hist, dtype=np.int64).copy()
        overflow = int(mon._overflow)
        if previous is None or previous[0] is not mon:
            previous = (mon, np.zeros_like(hist), 0)
        line = {"minute": minute, "t_s": round(time.monotonic() - t0, 1),
                "live_completed": sess.live.completed,
                **window_lag(hist - previous[1], overflow - previous[2]),
                "heap": heap_figures(),
                "trims": sess.load.trimmer.trims,
                "trim_ms_max": round(sess.load.trimmer.longest_ns / 1e6, 3)}
        previous = (mon, hist, overflow)
        if trace_top:
            import tracemalloc

            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)])
            if baseline is None:
                baseline = snap
            line["grew_since_minute_1"] = [
                [str(d.traceback[0]), d.size_diff, d.count_diff]
                for d in snap.compare_to(baseline, "lineno")[:trace_top]]
        with open(path, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")


def _install_probe(path: str) -> None:
    from locust import events

    @events.init.add_listener
    def _start(environment: Any, **_: Any) -> None:
        import gevent

        if int(os.environ.get(TRACE_ENV) or 0) > 0:
            import tracemalloc

            tracemalloc.start()

        gevent.spawn(_probe, environment, path)


if __name__ != "__main__" and os.environ.get(PROBE_ENV):
    _install_probe(os.environ[PROBE_ENV])


# -- the driver -----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class RawTail:
    """The raw file's size and its request lines so far, reading only what was appended."""

    def __init__(self, results: Any) -> None:
        self.results = results
        self.path: Any = None
        self.offset = 0
        self.partial = b""
        self.requests = 0

    def sample(self) -> tuple[int, int]:
        if self.path is None:
            found = sorted(self.results.glob("benchmark-*/requests.jsonl"))
            if not found:
                return 0, 0
            self.path = found[-1]
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        self.requests += sum(1 for x in lines if x.startswith(b'{"type":"request"'))
        return self.offset, self.requests


def probe_line(path: Any, minute: int, wait_s: float = 10.0) -> dict[str, Any] | None:
    """The probe's line for `minute`, waiting up to `wait_s` for it (the probe's clock
    starts when Locust has loaded, a second or two after the driver's)."""
    import orjson

    deadline = time.monotonic() + wait_s
    while True:
        try:
            lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
        except OSError:
            lines = []
        found = next((x for x in lines if x["minute"] == minute), None)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e6:7.1f}"


def _lag_text(w: dict[str, Any] | None) -> str:
    if w is None or not w.get("samples"):
        return "lag n/a"
    return (f"lag(min {w['minute']}) p50 {w['p50_ms']} p99 {w['p99_ms']} max {w['max_ms']} ms,"
            f" >=5ms {w['over_5ms']}")


def _heap_text(w: dict[str, Any] | None) -> str:
    h = (w or {}).get("heap")
    if not h:
        return ""
    text = (f"  py blocks {h['py_blocks']}  gc objects {h['gc_objects']}  trims {w['trims']}"
            f" (longest {w['trim_ms_max']} ms)")
    if "malloc_in_use" in h:
        text += (f"  malloc in use {_mb(h['malloc_in_use'])} free {_mb(h['malloc_free'])}"
                 f" mmapped {_mb(h['mmapped'])} MB")
    return text


def check_output(run_dir: Any, python: str, repo: Any) -> list[str]:
    """Issued vs recorded vs written, each request once; and `anvil verify`."""
    import subprocess
    from collections import Counter

    import orjson

    out = []
    raw = [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]
    reqs = [r for r in raw if r["type"] == "request"]
    measured = [r["request_index"] for r in reqs if not r["warmup"]]
    dup_raw = sum(n - 1 for n in Counter(measured).values() if n > 1)
    end = next((r for r in raw if r["type"] == "run_end"), {})
    locust = end.get("locust") or {}
    out.append(f"raw file: {len(reqs)} request records ({len(reqs) - len(measured)} warm-up),"
               f" {len(set(measured))} distinct measured request_index, {dup_raw} duplicates;"
               f" Locust counted {locust.get('num_requests', 'n/a')} requests"
               f" ({locust.get('num_failures', 'n/a')} failed)")
    bench = run_dir / "benchmark.json"
    if not bench.exists():
        return [*out, "benchmark.json: MISSING"]
    doc = orjson.loads(bench.read_bytes())
    idx = ([r["request_index"] for r in doc["request_timings"]]
           + [f["request_index"] for f in doc["failures"]])
    once = sorted(idx) == list(range(doc["requests"]))
    issued = locust.get("num_requests")
    out.append(f"benchmark.json: requests {doc['requests']} = {len(doc['request_timings'])} rows"
               f" + {len(doc['failures'])} failures; indices 0..{doc['requests'] - 1} each"
               f" exactly once: {'yes' if once else 'NO'}; = raw measured records:"
               f" {'yes' if doc['requests'] == len(measured) else 'NO'}; = Locust's count:"
               f" {'yes' if issued == len(reqs) else f'NO ({issued} vs {len(reqs)})'}")
    ver = subprocess.run([python, "-m", "anvil_metrics", "verify", str(bench)], cwd=repo,
                         capture_output=True, text=True, timeout=600)
    out.append(f"anvil verify: exit {ver.returncode}: "
               f"{(ver.stdout + ver.stderr).strip().splitlines()[-1:]}")
    client = doc.get("client") or {}
    out.append(f"whole-run client block: loop_lag_ms {client.get('loop_lag_ms', {}).get('p99')}"
               f" p99, cpu_pct {client.get('cpu_pct')}, saturated {client.get('saturated')}")
    return out


def snapshot_cost(sizes: list[int]) -> None:
    """In this process, no load: per live metric, a sketch (`live.sketch.Sketch`) of N values,
    then a snapshot's percentiles of all 7 metrics: its bins (what its memory grows with)
    and ms per snapshot (median of 40)."""
    import numpy as np

    from anvil_metrics.live.figures import LIVE_METRICS, LIVE_PERCENTILES
    from anvil_metrics.live.sketch import Sketch

    rng = np.random.default_rng(0)
    for n in sizes:
        sketches = [Sketch() for _ in LIVE_METRICS]
        for sketch in sketches:
            for chunk in range(0, n, 1 << 16):
                sketch.extend(rng.lognormal(5, 0.5, min(1 << 16, n - chunk)))
        times = []
        for _ in range(40):
            t = time.perf_counter()
            for sketch in sketches:
                sketch.percentiles(LIVE_PERCENTILES)
            times.append(time.perf_counter() - t)
        times.sort()
        print(f"{n:>9d} values x {len(sketches)} metrics: {len(sketches[0].bins)} bins each; "
              f"a snapshot: median {times[20] * 1e3:.2f} ms, max {times[-1] * 1e3:.1f} ms",
              flush=True)


def main() -> int:
    import argparse
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from anvil_metrics.runs.simproc import start_simulator, stop_process

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="duration of the load")
    ap.add_argument("--users", type=int, default=64, help="streams (-u and -r)")
    ap.add_argument("--keep", action="store_true", help="keep the run folder")
    ap.add_argument("--trace-malloc", type=int, default=0, metavar="N",
                    help="diagnosis only (slows the load process): tracemalloc in the load "
                         "process, and each minute the N source lines whose memory grew most "
                         "since minute 1")
    ap.add_argument("--snapshot-cost", metavar="N,N", default="",
                    help="only print the live figures' bytes per value and snapshot time at "
                         "these counts of values, in this process, and exit")
    a = ap.parse_args()
    if a.snapshot_cost:
        snapshot_cost([int(x) for x in a.snapshot_cost.split(",")])
        return 0

    work = Path(tempfile.mkdtemp(prefix="anvil-soak-"))
    results, probe, log_path = work / "results", work / "lag.jsonl", work / "locust.log"
    duration_s = round(a.minutes * 60)
    with open("/proc/loadavg") as f:
        print(f"soak: {a.users} streams for {duration_s} s; load average "
              f"{' '.join(f.read().split()[:3])} on {os.cpu_count()} CPUs; work {work}",
              flush=True)
    proc = None
    samples: list[tuple[float, int | None, int]] = []  # (t_s, rss, requests)
    try:
        with start_simulator(list(SIM_ARGS)) as sim:
            cmd = [sys.executable, "-m", "locust", "-f",
                   f"{repo / 'locustfiles' / 'chat.py'},{Path(__file__).resolve()}",
                   "--headless", "-H", sim.url, "-u", str(a.users), "-r", str(a.users),
                   "--duration", f"{duration_s}s", "--results-dir", str(results),
                   "--only-summary"]
            env = {**os.environ, "PYTHONPATH": str(repo), PROBE_ENV: str(probe)}
            env.pop(TRACE_ENV, None)
            if a.trace_malloc > 0:
                env[TRACE_ENV] = str(a.trace_malloc)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(cmd, cwd=repo, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env)
            print(f"simulator pid {sim.pid} at {sim.url} {' '.join(SIM_ARGS)}; "
                  f"locust pid {proc.pid}", flush=True)
            t0 = time.monotonic()
            tail = RawTail(results)
            ticks = [10.0, *(60.0 * m for m in range(1, int(duration_s // 60) + 1))]
            for tick in ticks:
                while proc.poll() is None and time.monotonic() - t0 < tick:
                    time.sleep(min(1.0, tick - (time.monotonic() - t0)))
                if proc.poll() is not None:
                    break
                rss = rss_bytes(proc.pid)
                size, n = tail.sample()
                prev = samples[-1] if samples else None
                samples.append((tick, rss, n))
                lag = probe_line(probe, round(tick / 60)) if tick >= 60 else None
                base = next((s for s in samples if s[0] >= 60.0), None)
                growth = (f"{(rss - base[1]) / base[1] * 100:+5.1f}%"
                          if base and rss and base[1] else "   n/a")
                per_min = n - prev[2] if prev else n
                print(f"t {tick:6.0f} s  RSS {_mb(rss)} MB ({growth} vs 1 min)  raw {_mb(size)}"
                      f" MB  {n:7d} requests (+{per_min})  "
                      f"{_lag_text(lag)}{_heap_text(lag)}", flush=True)
                for where, size_diff, count_diff in (lag or {}).get("grew_since_minute_1", []):
                    print(f"    grew {size_diff / 1e3:+9.1f} kB {count_diff:+8d} blocks  {where}",
                          flush=True)
            code = proc.wait(duration_s + 600)
            print(f"locust exited {code} after {time.monotonic() - t0:.0f} s", flush=True)
    except KeyboardInterrupt:
        print("interrupted: stopping what was started", flush=True)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 130
    finally:
        if proc is not None:
            stop_process(proc)
    during = [s for s in samples if s[0] >= 60.0 and s[1]]
    if len(during) >= 2:
        (_, r0, n0), (_, r1, n1) = during[0], during[-1]
        per_req = (r1 - r0) / (n1 - n0) if n1 > n0 else float("nan")
        print(f"RSS after the first minute: {r0 / 1e6:.1f} -> {r1 / 1e6:.1f} MB, "
              f"{(r1 - r0) / r0 * 100:+.2f}% (target <= 5%); {per_req:.0f} bytes per request "
              f"over {n1 - n0} requests", flush=True)
    run_dirs = sorted(results.glob("benchmark-*"))
    if run_dirs:
        for line in check_output(run_dirs[-1], sys.executable, repo):
            print(line, flush=True)
    else:
        print(f"no run folder; locust log ends:\n{log_path.read_text(errors='replace')[-2000:]}")
    if a.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
