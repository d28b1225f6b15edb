"""Timing bias: how late anvil stamps what the server sent, next to a bare asyncio client.

The simulator (`--stamp-send`) puts `anvil_sent_ns` = `perf_counter_ns()` into every chunk as
it writes it; the client stamps the chunk's arrival on the same host and clock. For 1, 16, 64
and 256 concurrent streams × 100 tok/s (one token every 10 ms) it runs, one after the other
against one simulator:

- anvil: ONE worker process (a single headless Locust process, -u N -r N), whose per-record
  stamps are read from its `requests.jsonl` (arrivals = start_ns + cumsum(chunk_deltas_ns),
  send stamps in `extra.server`);
- the reference: `refclient.py` (plain asyncio streams, orjson), same streams, requests and
  prompt size, its streams' first requests spread over one token interval (`--stagger-ms`):
  Locust's spawning spreads anvil's over tens of ms, and streams whose chunks are all due in
  the same instant would measure queueing inside the client, not its stamping,

and prints p50/p99 of receive − send for the first output chunk, the first content chunk and
every output chunk, and the per-chunk ITL error p50/p99: |client inter-arrival gap − server
inter-send gap| for each chunk after the first. The ratio anvil / reference of each p50 takes
the machine's own wake-up latency out of the comparison. It also prints anvil's `client`
block (saturation verdict, achieved concurrency, start delay, CPU, loop lag) and the time from
starting each client process to its first request, and the targets beside the figures:
first-output bias p50 ≤ 1 ms up to 16 streams, ≤ 1.2× the reference at 64 and 256, per-chunk
ITL error p50 ≤ 0.5 ms up to 64 streams. It asserts nothing.

    .venv/bin/python benchmarks/timing_bias.py [--streams 1,16,64,256] [--rounds 10] [--repeat 3]

Each level runs `--repeat` times (3) with `--rounds` requests per stream (10: the first round
is start-up, where Locust users connect as they spawn and the reference connects all first),
and the targets are judged on the median of the runs. The simulator gets a CPU of its own
(`simproc.pinned_apart`; `--no-pin` to share). Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    ClientRun,
    CpuSampler,
    achieved_concurrency,
    code_state,
    concurrency_figures,
    fmt,
    loadavg,
    pct,
    run_anvil,
    run_reference,
    start_spread_ms,
)

from anvil_metrics.runs.simproc import pinned_apart, start_simulator  # noqa: E402

MS = 1e6


def bias_figures(run: ClientRun) -> dict[str, Any]:
    """Per-run arrays (ms): first output / first content / per-chunk bias, ITL error."""
    first_output, first_content, chunk, itl = [], [], [], []
    mismatched = 0
    for r in run.records:
        if not r["ok"]:
            continue
        if r["first_output_ns"] is not None and r.get("first_output_sent_ns") is not None:
            first_output.append((r["first_output_ns"] - r["first_output_sent_ns"]) / MS)
        if r["first_content_ns"] is not None and r.get("first_content_sent_ns") is not None:
            first_content.append((r["first_content_ns"] - r["first_content_sent_ns"]) / MS)
        arrivals = np.asarray(r["arrivals_ns"], dtype=np.int64)
        sent = np.asarray([s if s is not None else -1 for s in r["sent_ns"]], dtype=np.int64)
        if len(arrivals) != len(sent) or (sent < 0).any():
            mismatched += 1
            continue
        chunk.append((arrivals - sent) / MS)
        itl.append(np.abs(np.diff(arrivals) - np.diff(sent)) / MS)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))  # noqa: E731
    return {"first_output": np.array(first_output), "first_content": np.array(first_content),
            "chunk": cat(chunk), "itl": cat(itl), "mismatched": mismatched}


def row(label: str, run: ClientRun, f: dict[str, Any]) -> str:
    cells = []
    for key in ("first_output", "first_content", "chunk", "itl"):
        cells.append(f"{fmt(pct(f[key], 50)):>8}{fmt(pct(f[key], 99)):>9}")
    ok = sum(1 for r in run.records if r["ok"])
    return f"  {label:<10}{ok:>5}{len(f['chunk']):>8}  " + "  ".join(cells)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def describe(run: ClientRun, streams: int, conc: dict[str, Any]) -> list[str]:
    """`run`'s lines; `conc` its `concurrency_figures`."""
    spread = fmt(start_spread_ms(run, streams), ".1f")
    held = (f"    {run.label}: at most {fmt(conc['peak'], 'd')} in flight at once; held "
            f"{fmt(conc['held'], '.2f')} from start #{streams} to end #{streams} counted "
            f"from the last; the last {streams} requests ended over "
            f"{fmt(conc['drain_ms'], '.1f')} ms")
    to_first = ((run.first_start_ns - run.popen_ns) / MS
                if run.first_start_ns is not None else None)
    cpu_pct = 100 * run.cpu_s / run.load_s if run.cpu_s is not None and run.load_s else None
    per_cpu = f"{run.events / run.cpu_s:,.0f}" if run.cpu_s else "n/a"
    if run.label == "anvil":
        c = run.client
        lag = (run.run_end.get("loop_lag_ms") or {})
        sd = c.get("start_delay_ms") or {}
        return [
            f"    anvil client: verdict {c.get('verdict')!r} (saturated={c.get('saturated')}); "
            f"achieved concurrency {fmt(c.get('achieved_concurrency'), '.2f')}; "
            f"CPU {fmt(c.get('cpu_pct'), '.0f')} % of one core ({per_cpu} events per "
            f"CPU-second); loop lag p99 {fmt(lag.get('p99'), '.2f')} ms, max "
            f"{fmt(lag.get('max'), '.2f')} ms",
            f"    anvil start delay ms p50/p99/max {fmt(sd.get('p50'))} / {fmt(sd.get('p99'))}"
            f" / {fmt(sd.get('max'))}; process start → first request {fmt(to_first, '.0f')} ms;"
            f" first {streams} requests written over {spread} ms; failed {run.failed}",
            held,
        ]
    return [
        f"    reference: achieved concurrency {fmt(achieved_concurrency(run), '.2f')}; "
        f"CPU {fmt(cpu_pct, '.0f')} % of one core ({per_cpu} events per CPU-second); "
        f"process start → first request {fmt(to_first, '.0f')} ms; first {streams} requests "
        f"written over {spread} ms; failed {run.failed}",
        held,
    ]


def verdict_line(text: str, value: float | None, ok: bool | None, runs: str = "") -> str:
    mark = "n/a" if ok is None else ("meets" if ok else "MISSES")
    return f"  {text:<62}{fmt(value):>9}   {mark}{runs}"


def _median_verdict(values: list[float | None], limit: float
                    ) -> tuple[float | None, bool | None, str]:
    """The median of the runs' values, whether it is within `limit`, and the runs."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None, ""
    mid = float(np.median(known))
    runs = f"   [{', '.join(fmt(v) for v in values)}]" if len(values) > 1 else ""
    return mid, mid <= limit, runs


def measure_level(sim: Any, n: int, rep: int, args: argparse.Namespace, work_root: Path,
                  head: str, stagger: float, max_tokens: int) -> dict[str, Any] | None:
    """One run of each client at `n` streams; prints its figures, returns them (None if a
    client did not run)."""
    requests = max(args.min_requests, args.rounds * n)
    work = work_root / f"n{n}-{rep}"
    tokens = args.reasoning_tokens + args.content_tokens
    again = f", run {rep + 1} of {args.repeat}" if args.repeat > 1 else ""
    print(f"\n[{n} streams × {1000 / args.interval_ms:g} tok/s, {requests} requests of "
          f"{tokens} tokens{again}]  {loadavg()}", flush=True)
    try:
        with CpuSampler(sim.pid) as sim_during_anvil:
            anvil = run_anvil(sim.url, n, requests, args.prompt_tokens, max_tokens,
                              work / "anvil", args.timeout_s)
        with CpuSampler(sim.pid) as sim_during_ref:
            ref = run_reference(sim.url, n, requests, args.prompt_tokens, max_tokens,
                                work / "ref", args.timeout_s, stagger)
    except RuntimeError as e:  # a client that did not run: say so, go on
        print(f"  ! no figures at {n} streams: {e}", flush=True)
        return None
    fa, fr = bias_figures(anvil), bias_figures(ref)
    print(head)
    print(row("anvil", anvil, fa))
    print(row("reference", ref, fr))
    cells = []
    for key in ("first_output", "first_content", "chunk", "itl"):
        cells.append(f"{fmt(ratio(pct(fa[key], 50), pct(fr[key], 50)), '.2f'):>8}"
                     f"{fmt(ratio(pct(fa[key], 99), pct(fr[key], 99)), '.2f'):>9}")
    print(f"  {'ratio':<10}{'':>13}  " + "  ".join(cells) + "   (anvil / reference)")
    ca, cr = concurrency_figures(anvil, n), concurrency_figures(ref, n)
    for line in describe(anvil, n, ca) + describe(ref, n, cr):
        print(line)
    shares = []
    for run, sampler in ((anvil, sim_during_anvil), (ref, sim_during_ref)):
        window = run.window_ns
        cpu = sampler.cpu_between(*window) if window else None
        share = 100 * cpu / ((window[1] - window[0]) / 1e9) if cpu is not None else None
        shares.append(f"{fmt(share, '.0f')} % during {run.label}'s")
    print(f"    simulator CPU (of one core): {shares[0]}, {shares[1]} load window")
    if fa["mismatched"] or fr["mismatched"]:
        print(f"    ! records without one send stamp per chunk: anvil "
              f"{fa['mismatched']}, reference {fr['mismatched']}")
    return {"anvil": fa, "ref": fr, "client": anvil.client,
            "concurrency": (ca, cr), "ref_concurrency": achieved_concurrency(ref)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,16,64,256", help="concurrency levels")
    ap.add_argument("--interval-ms", type=float, default=10.0, help="gap between tokens")
    ap.add_argument("--reasoning-tokens", type=int, default=16)
    ap.add_argument("--content-tokens", type=int, default=48)
    ap.add_argument("--prefill-ms", type=float, default=20.0)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=10,
                    help="requests per stream at each level (the first round is start-up: "
                    "Locust users connect as they spawn, the reference connects all first)")
    ap.add_argument("--min-requests", type=int, default=24, help="at least this many per level")
    ap.add_argument("--ref-stagger-ms", type=float, default=None,
                    help="spread the reference's first requests over this window (default: "
                    "one token interval, so its streams' phases are spread as anvil's are by "
                    "Locust's spawning; 0 aligns them all)")
    ap.add_argument("--timeout-s", type=float, default=180.0, help="per client run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="run each level this many times; the targets take the median (the "
                    "ratios at 64 and 256 streams swing between runs on a small machine)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the simulator on the clients' CPUs (by default it gets a CPU "
                    "of its own, as a server on its own machine: see simproc.pinned_apart)")
    args = ap.parse_args(argv)
    stagger = args.interval_ms if args.ref_stagger_ms is None else args.ref_stagger_ms
    levels = [int(x) for x in args.streams.split(",") if x.strip()]
    max_tokens = 4096
    print(f"timing bias: {loadavg()}; {code_state()}")
    print(f"simulator --stamp-send: prefill {args.prefill_ms:g} ms, {args.reasoning_tokens} "
          f"reasoning + {args.content_tokens} content tokens every {args.interval_ms:g} ms "
          f"({1000 / args.interval_ms:g} tok/s per stream); prompts of {args.prompt_tokens} "
          f"tokens; anvil = one headless Locust process; reference = benchmarks/refclient.py "
          f"--stagger-ms {stagger:g}",
          flush=True)
    sim_args = ["--stamp-send", "--prefill-ms", str(args.prefill_ms), "--interval-ms",
                str(args.interval_ms), "--reasoning-tokens", str(args.reasoning_tokens),
                "--content-tokens", str(args.content_tokens), "--max-context",
                str(args.prompt_tokens + max_tokens + 64)]
    head = (f"  {'client':<10}{'reqs':>5}{'chunks':>8}  "
            f"{'first output':>17}  {'first content':>17}  {'every chunk':>17}  "
            f"{'ITL error':>17}\n  {'':<23}  " + "  ".join([f"{'p50':>8}{'p99':>9}"] * 4)
            + "   (ms: receive - send)")
    results: dict[int, list[dict[str, Any]]] = {}
    t_begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anvil-timing-bias-") as d, \
            start_simulator(sim_args) as sim, \
            (pinned_apart(sim.pid) if args.pin else nullcontext("not pinned")) as pinning:
        print(f"CPUs: {pinning}", flush=True)
        for n in levels:
            for rep in range(args.repeat):
                got = measure_level(sim, n, rep, args, Path(d), head, stagger, max_tokens)
                if got is not None:
                    results.setdefault(n, []).append(got)
    print(f"\ntargets (anvil)  [{time.perf_counter() - t_begin:.0f} s in all]"
          + (f"; each the median of the {args.repeat} runs (all of them in brackets)"
             if args.repeat > 1 else ""))
    levels = [n for n in levels if n in results]
    for n in levels:
        p50s = [pct(r["anvil"]["first_output"], 50) for r in results[n]]
        if n <= 16:
            text, limit = f"{n} streams: first-output bias p50 <= 1 ms", 1.0
            values = p50s
        else:
            text, limit = f"{n} streams: first-output bias p50 <= 1.2x reference", 1.2
            values = [ratio(a, pct(r["ref"]["first_output"], 50))
                      for a, r in zip(p50s, results[n], strict=True)]
        print(verdict_line(text, *_median_verdict(values, limit)))
    for n in levels:
        if n <= 64:
            itls = [pct(r["anvil"]["itl"], 50) for r in results[n]]
            print(verdict_line(f"{n} streams: per-chunk ITL error p50 <= 0.5 ms",
                               *_median_verdict(itls, 0.5)))
    for n in levels:
        for r in results[n]:
            c = r["client"]
            ca, cr = r["concurrency"]
            print(f"  {n} streams: client verdict {c.get('verdict')!r}, achieved concurrency "
                  f"{fmt(c.get('achieved_concurrency'), '.2f')} of {n} (peak "
                  f"{fmt(ca['peak'], 'd')}, held {fmt(ca['held'], '.2f')}); reference "
                  f"{fmt(r['ref_concurrency'], '.2f')} (peak {fmt(cr['peak'], 'd')}, held "
                  f"{fmt(cr['held'], '.2f')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
