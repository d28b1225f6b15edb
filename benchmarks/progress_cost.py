"""What the live progress costs the load: a 256-stream run with it and without (--quiet).

The progress (issue 47) is one greenlet a second in the load process (`live/progresswatch`:
the pending records derived, a snapshot of the live figures, `progress.json` written, a
plain line logged every --progress-every), and the live figures it reads
(`live/figures.LiveStats`), which a headless run fed only with a web UI before. This runs
the same 256-stream load against one simulator (pinned to a CPU of its own:
`simproc.pinned_apart`), a single headless Locust process each time, with the progress
(`--progress-every 1s`: its heaviest setting, a line every second) and with `--quiet`,
interleaved (with, quiet, with, quiet, ...: slow drift of a shared machine hits both alike)
in ONE invocation, `--repeat` times each, and prints each run's event-loop lag p50/p99/max
over its load (the benchmark's `client` block) and its SSE events per CPU-second of the load
process, then the medians and their ratios (with / quiet). It also times the terminal
display's one redraw (`runs/display.LiveTable.show` of a full snapshot), what a plain
`locust --headless` on a terminal spends on the hub once a second. It asserts nothing.

    .venv/bin/python benchmarks/progress_cost.py [--streams 256] [--rounds 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import ClientRun, code_state, fmt, loadavg, run_anvil  # noqa: E402

from anvil_metrics.live.progress import Progress  # noqa: E402
from anvil_metrics.live.stuck import StuckReport  # noqa: E402
from anvil_metrics.runs.display import LiveTable  # noqa: E402
from anvil_metrics.runs.simproc import pinned_apart, start_simulator  # noqa: E402

MODES = {"progress": ("--progress-every", "1s"), "quiet": ("--quiet",)}


def figures(run: ClientRun) -> dict[str, float | None]:
    lag = run.client.get("loop_lag_ms") or {}
    per_cpu = run.events / run.cpu_s if run.cpu_s else None
    return {"lag_p50_ms": lag.get("p50"), "lag_p99_ms": lag.get("p99"),
            "lag_max_ms": lag.get("max"), "events_per_cpu_s": per_cpu,
            "failed": float(run.failed)}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def redraw_ms(times: int = 200) -> float:
    """The median time of one redraw of the terminal table (a full snapshot)."""
    p = Progress(run_id="r", phase="running", elapsed_s=61.0, requests_planned=2048,
                 requests_done=1000, in_flight_requests=256, completed_requests=990,
                 failed_by_kind={"http_error": 7, "timeout": 3}, cancelled_requests=2,
                 requests_per_s=95.2, output_tok_s=12190.0, rate_window_s=10.0,
                 ttft_p50_ms=40.1, ttft_p95_ms=80.7, decode_tok_s_p50=99.9, eta_s=11.0,
                 loop_lag_p99_ms=1.2, cpu_pct=71.0, saturated=False, verdict="ok",
                 stuck=StuckReport(30.0, 256, 1, 2, 44.0))
    table = LiveTable(Tty(), "locust: anvil run r")
    spent = []
    for _ in range(times):
        t = time.perf_counter()
        table.show(p)
        spent.append((time.perf_counter() - t) * 1e3)
    table.close()
    return statistics.median(spent)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=8, help="requests per stream")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--interval-ms", type=float, default=10.0, help="gap between tokens")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens a request")
    args = ap.parse_args(argv)
    print(f"{code_state()}; load average {loadavg()}")
    print(f"{args.streams} streams x {args.rounds} requests, {args.tokens} tokens every "
          f"{args.interval_ms:g} ms; with the progress (--progress-every 1s) and --quiet, "
          f"interleaved, {args.repeat} each")
    sim_args = ["--prefill-ms", "20", "--interval-ms", str(args.interval_ms),
                "--reasoning-tokens", "0", "--content-tokens", str(args.tokens),
                "--max-context", "8192"]
    got: dict[str, list[dict[str, float | None]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp, start_simulator(sim_args) as sim, \
            pinned_apart(sim.pid) as pinning:
        print(pinning)
        for i in range(args.repeat):
            for mode, extra in MODES.items():
                run = run_anvil(sim.url, args.streams, args.streams * args.rounds, 256,
                                args.tokens, Path(tmp) / f"{mode}{i}", 600, label=mode,
                                extra=extra)
                f = figures(run)
                got[mode].append(f)
                print(f"  {mode:<8} run {i + 1}: lag p50 {fmt(f['lag_p50_ms'], '.2f')} p99 "
                      f"{fmt(f['lag_p99_ms'], '.2f')} max {fmt(f['lag_max_ms'], '.1f')} ms; "
                      f"{fmt(f['events_per_cpu_s'], ',.0f')} events/CPU-s; failed "
                      f"{f['failed']:.0f}", flush=True)
    print("medians:")
    med = {m: {k: statistics.median(v for r in rows if (v := r[k]) is not None)
               for k in rows[0]} for m, rows in got.items()}
    for key in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "events_per_cpu_s"):
        a, b = med["progress"][key], med["quiet"][key]
        print(f"  {key:<18} progress {a:,.3f}  quiet {b:,.3f}  ratio {a / b:.3f}")
    print(f"terminal display: one redraw {redraw_ms():.2f} ms (once a second on the hub)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
