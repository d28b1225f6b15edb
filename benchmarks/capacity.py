"""Client capacity: SSE events parsed and timestamped per CPU-second of ONE anvil worker.

The simulator sends pre-serialised bursts (`anvil sim --burst N`: N token chunks, each its
own SSE event and HTTP chunk, in one socket write every N × interval), so that it is never the
limit; its delivered event rate and its own CPU are printed beside the client's. At 64 and 256
streams, in two regimes (a simulator started for each):

- paced: 50k token events/s offered in all (64 × 781 or 256 × 195 tok/s), 16 chunks per
  write: a load one process keeps up with, each wake-up bringing about one burst;
- flat out: 1M token events/s offered (64 bursts per write), far beyond what one Python
  process parses: the client reads as fast as it can and its events per CPU-second is its
  capacity (anvil then calls itself saturated, as it should),

it runs, one after the other against that simulator:

- anvil: one headless Locust process (-u N -r N). Events are counted from its records (output
  chunks, plus the role chunk, the usage chunk and `[DONE]` of each completed stream) and
  divided by the process's CPU over its load window (`run_end.client.cpu_s`);
- the reference: `refclient.py` (bare asyncio streams + orjson), the same load, its CPU from
  `time.process_time()` over its own load window.

Also printed: events per wall second against the offered rate, the client's CPU share,
requested vs achieved concurrency (anvil's `benchmark.json` `client.achieved_concurrency`;
the same formula for the reference; its streams start spread over one burst period, as
Locust's spawning spreads anvil's), anvil's saturation verdict, and the simulator's CPU
(/proc/<pid>/stat utime + stime, sampled, over each client's load window) and its own count
of completed streams (GET /sim/stats). Target printed beside anvil's figures: ≥ 120k events
per CPU-second (reference peers measured on this machine: SGLang bench_serving 78k, vLLM
benchmark_serving 69k, a bare asyncio client 137-157k). It asserts nothing.

    .venv/bin/python benchmarks/capacity.py [--streams 64,256] [--regimes paced,flat]
        [--baseline DIR]

With `--baseline DIR` (another checkout of anvil, e.g. `git worktree add /tmp/before
<commit>`), that anvil runs too, between this one and the reference against the same
simulator, and the ratio of the two anvils' events per CPU-second is printed.

The simulator gets a CPU of its own (`simproc.pinned_apart`; `--no-pin` to share). Run it on
an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    REPO,
    ClientRun,
    CpuSampler,
    achieved_concurrency,
    code_state,
    fmt,
    loadavg,
    run_anvil,
    run_reference,
    sim_stats,
)

from anvil_metrics.runs.simproc import pinned_apart, start_simulator  # noqa: E402

TARGET = 120_000
PEERS = "SGLang bench_serving 78k, vLLM benchmark_serving 69k, bare asyncio client 137-157k"


def client_row(run: ClientRun, streams: int) -> tuple[str, float | None]:
    per_cpu = run.events / run.cpu_s if run.cpu_s else None
    per_wall = run.events / run.load_s if run.load_s else None
    cpu_pct = 100 * run.cpu_s / run.load_s if run.cpu_s is not None and run.load_s else None
    if run.label != "reference":
        conc = run.client.get("achieved_concurrency")
        verdict = run.client.get("verdict")
    else:
        conc, verdict = achieved_concurrency(run), "(not measured)"
    line = (f"  {run.label:<10}{run.events:>11,}{fmt(run.cpu_s, '.2f'):>8}"
            f"{fmt(run.load_s, '.2f'):>8}{fmt(per_cpu, ',.0f'):>14}{fmt(per_wall, ',.0f'):>11}"
            f"{fmt(cpu_pct, '.0f'):>6}{fmt(conc, '.1f'):>8} / {streams:<4} {verdict}"
            + (f"  failed {run.failed}" if run.failed else ""))
    return line, per_cpu


def sim_line(run: ClientRun, sampler: CpuSampler, completed: int, per_stream: int,
             requested: float) -> str:
    window = run.window_ns
    if window is None:
        return f"    simulator during {run.label}: no load window"
    wall_s = (window[1] - window[0]) / 1e9
    cpu = sampler.cpu_between(*window)
    sent = completed * per_stream
    rate = run.events / wall_s
    return (f"    simulator during {run.label}'s load window ({wall_s:.2f} s): delivered "
            f"{rate:,.0f} events/s (offered {requested:,.0f}); its own count {completed} "
            f"streams × {per_stream} = {sent:,} events; its CPU {fmt(cpu, '.2f')} s = "
            f"{fmt(100 * cpu / wall_s if cpu is not None else None, '.0f')} % of one core"
            f" = {fmt(sent / cpu if cpu else None, ',.0f')} events per sim CPU-second")


REGIMES = ("paced", "flat")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="64,256", help="concurrency levels")
    ap.add_argument("--regimes", default="paced,flat", help="paced, flat or both")
    ap.add_argument("--paced-rate", type=float, default=50_000,
                    help="paced: token events/s offered in all (spread over the streams)")
    ap.add_argument("--paced-burst", type=int, default=16, help="paced: chunks per write")
    ap.add_argument("--flat-rate", type=float, default=1_000_000,
                    help="flat out: token events/s offered in all, far above what one "
                    "process parses")
    ap.add_argument("--flat-burst", type=int, default=64, help="flat out: chunks per write")
    ap.add_argument("--tokens", type=int, default=1024, help="content tokens per answer")
    ap.add_argument("--prefill-ms", type=float, default=10.0)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3, help="requests per stream at each level")
    ap.add_argument("--min-requests", type=int, default=384,
                    help="at least this many requests per run (a flat-out run of 64 streams "
                    "is otherwise over in about a second)")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="per client run")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the simulator on the clients' CPUs (by default it gets a CPU "
                    "of its own, as a server on its own machine: see simproc.pinned_apart)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout of anvil, run beside this one (see above)")
    args = ap.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "locustfiles" / "chat.py").is_file():
        ap.error(f"--baseline {args.baseline}: not a checkout of anvil")
    levels = [int(x) for x in args.streams.split(",") if x.strip()]
    regimes = [r for r in args.regimes.split(",") if r in REGIMES]
    max_tokens = 4096
    per_stream = args.tokens + 3  # output chunks + role chunk, usage chunk, [DONE]
    print(f"capacity: {loadavg()}; {code_state()}")
    print(f"{args.tokens} content tokens per answer ({per_stream} SSE events per stream), "
          f"prefill {args.prefill_ms:g} ms, prompts of {args.prompt_tokens} tokens; anvil = one "
          f"headless Locust process; paced = {args.paced_rate:,.0f} token events/s offered in "
          f"all, {args.paced_burst} chunks per simulator write; flat out = "
          f"{args.flat_rate:,.0f}/s offered, {args.flat_burst} per write", flush=True)
    head = (f"  {'client':<10}{'events':>11}{'CPU s':>8}{'load s':>8}{'events/CPU-s':>14}"
            f"{'events/s':>11}{'CPU%':>6}{'achieved / requested concurrency, verdict':>52}")
    summary = []
    t_begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anvil-capacity-") as d:
        for regime in regimes:
            rate = args.paced_rate if regime == "paced" else args.flat_rate
            burst = args.paced_burst if regime == "paced" else args.flat_burst
            for n in levels:
                interval_ms = n * 1000 / rate
                requests = max(args.min_requests, args.rounds * n)
                sim_args = ["--burst", str(burst), "--prefill-ms", str(args.prefill_ms),
                            "--interval-ms", f"{interval_ms:.6f}", "--reasoning-tokens", "0",
                            "--content-tokens", str(args.tokens), "--max-context",
                            str(args.prompt_tokens + max_tokens + 64)]
                print(f"\n[{regime}: {n} streams × {1000 / interval_ms:,.0f} tok/s = "
                      f"{rate:,.0f} token events/s offered; anvil sim --burst {burst} "
                      f"--interval-ms {interval_ms:g} (one write per "
                      f"{burst * interval_ms:g} ms per stream); {requests} requests]  "
                      f"{loadavg()}", flush=True)
                runs = []
                with start_simulator(sim_args) as sim, \
                        (pinned_apart(sim.pid) if args.pin else nullcontext("not pinned")) \
                        as pinning:
                    print(f"  CPUs: {pinning}", flush=True)
                    kinds = ("anvil", "reference") if args.baseline is None else (
                        "anvil", "baseline", "reference")
                    for kind in kinds:
                        before = sim_stats(sim.url)["completed"]
                        work = Path(d) / f"{regime}-{n}-{kind}"
                        try:
                            with CpuSampler(sim.pid) as sampler:
                                if kind != "reference":
                                    run = run_anvil(sim.url, n, requests, args.prompt_tokens,
                                                    max_tokens, work, args.timeout_s,
                                                    args.baseline if kind == "baseline"
                                                    else REPO, kind)
                                else:
                                    # its streams' bursts spread over one burst period
                                    run = run_reference(sim.url, n, requests,
                                                        args.prompt_tokens, max_tokens, work,
                                                        args.timeout_s, burst * interval_ms)
                        except RuntimeError as e:  # a client that did not run: say so
                            print(f"  ! no figures for {kind}: {e}", flush=True)
                            break
                        completed = sim_stats(sim.url)["completed"] - before
                        runs.append((run, sampler, completed))
                if len(runs) < len(kinds):
                    continue
                print(head)
                rates = {}
                for run, _, _ in runs:
                    line, rates[run.label] = client_row(run, n)
                    print(line)
                r = (rates["anvil"] / rates["reference"]
                     if rates["anvil"] and rates["reference"] else None)
                print(f"  anvil / reference events per CPU-second: {fmt(r, '.2f')}")
                if "baseline" in rates:
                    b = (rates["anvil"] / rates["baseline"]
                         if rates["anvil"] and rates["baseline"] else None)
                    print(f"  anvil / baseline events per CPU-second: {fmt(b, '.3f')}")
                for run, sampler, completed in runs:
                    print(sim_line(run, sampler, completed, per_stream, rate))
                summary.append((regime, n, rates["anvil"], rates["reference"],
                                rates.get("baseline")))
    print(f"\ntarget: anvil >= {TARGET:,} events per CPU-second (peers on this machine: "
          f"{PEERS})  [{time.perf_counter() - t_begin:.0f} s in all]")
    for regime, n, anvil_rate, ref_rate, base_rate in summary:
        mark = "n/a" if anvil_rate is None else ("meets" if anvil_rate >= TARGET else "MISSES")
        base = "" if base_rate is None else (
            f"   baseline {fmt(base_rate, ',.0f'):>9} (anvil / baseline "
            f"{fmt(anvil_rate / base_rate if anvil_rate else None, '.3f')})")
        print(f"  {regime:<6}{n:>4} streams: anvil {fmt(anvil_rate, ',.0f'):>9}   reference "
              f"{fmt(ref_rate, ',.0f'):>9}   {mark}{base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
