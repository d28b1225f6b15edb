"""What the OTLP push costs the load: the same run with `--otlp-endpoint` and without.

The push (issue 52, item 3) is a child process (`live/otlp.py`) reading `requests.jsonl` as
it grows; the load process only tells it the gauges once an interval (`live/otlppush.py`).
This runs one load (`--streams` users, `--rounds` requests each, against a simulator pinned
to a CPU of its own) in a single headless Locust process with the push (to a local OTLP/HTTP
receiver, `tests/otlpreceiver.py`, every `--otlp-interval`) and without, interleaved in ONE
invocation (slow drift of a shared machine hits both alike), `--repeat` times each, and
prints each run's event-loop lag p50/p99/max and SSE events per CPU-second of the load
process (`progress_cost.figures`), the exports received, then the medians and their ratios.
It also times the in-process alternative the child replaced: recording `--records` raw
records into the SDK's instruments (µs a record, hub time had it run in a greenlet). It
asserts nothing.

    .venv/bin/python benchmarks/otlp_cost.py [--streams 64] [--rounds 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from _bench import code_state, fmt, loadavg, run_anvil  # noqa: E402
from otlpreceiver import receiver, record  # noqa: E402
from progress_cost import figures  # noqa: E402

from anvil_metrics.live.otlp import Instruments  # noqa: E402
from anvil_metrics.records import read_request  # noqa: E402
from anvil_metrics.runs.simproc import pinned_apart, start_simulator  # noqa: E402


def record_us(n: int) -> float:
    """µs a record to count and record `n` completed records into the instruments, in
    slices of 32 (best of 3 passes; an in-memory reader: no export)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    metrics = Instruments({"anvil.run_id": "r"}, MeterProvider(
        metric_readers=[InMemoryMetricReader()]))
    lines = [read_request(record(i % 50).to_json_dict()) for i in range(n)]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for i in range(0, n, 32):
            metrics.record(lines[i:i + 32])
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=40, help="requests per stream")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--otlp-interval", default="1s")
    ap.add_argument("--records", type=int, default=3200)
    a = ap.parse_args(argv)
    print(f"{code_state()}; load average {loadavg()}")
    print(f"{a.streams} streams x {a.rounds} requests, 16 tokens every 5 ms; with the push "
          f"(every {a.otlp_interval}) and without, interleaved, {a.repeat} each")
    sim_args = ["--prefill-ms", "5", "--interval-ms", "5", "--reasoning-tokens", "0",
                "--content-tokens", "16"]
    got: dict[str, list[dict[str, float | None]]] = {"otlp": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp, start_simulator(sim_args) as sim, \
            pinned_apart(sim.pid) as pinning, receiver() as (url, received):
        print(pinning)
        modes = {"otlp": ("--otlp-endpoint", url, "--otlp-interval", a.otlp_interval),
                 "off": ()}
        for i in range(a.repeat):
            for mode, extra in modes.items():
                before = len(received.exports)
                run = run_anvil(sim.url, a.streams, a.streams * a.rounds, 256, 16,
                                Path(tmp) / f"{mode}{i}", 600, label=mode,
                                extra=("--quiet", *extra))
                got[mode].append(f := figures(run))
                shown = ", ".join(f"{k} {fmt(v, ',.2f')}" for k, v in f.items())
                print(f"  {mode:<5} run {i + 1}: {shown}; exports "
                      f"{len(received.exports) - before}", flush=True)
    for key in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "events_per_cpu_s"):
        on, off = (statistics.median(v for r in got[m] if (v := r[key]) is not None)
                   for m in ("otlp", "off"))
        print(f"  median {key:<18} otlp {on:,.3f}  off {off:,.3f}  ratio {on / off:.3f}")
    print(f"in-process alternative: {record_us(a.records):.1f} µs of hub a record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
