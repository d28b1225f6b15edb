"""How many streams the simulator serves on one core before its own timing slips.

The simulator is the reference clock for anvil's latency figures, so it must never be the
bottleneck of a load test. This benchmark starts it as a subprocess (``--pin``: on its own CPU,
the client on the others), opens N keep-alive connections from a light raw asyncio client in
this process, and runs N concurrent streams twice:

- ``aligned``: all requests written at once, so every stream's deadlines coincide (worst case:
  N chunks are due in the same instant every interval);
- ``staggered``: request starts spread evenly over ``--ramp-ms`` (default 500), so stream
  phases are spread as random arrivals would spread them.

It prints, per phase: achieved vs requested tokens/s; the simulator's CPU seconds per wall
second (``/proc/<pid>/stat`` utime+stime, user and system), over the whole phase and over the
steady window when all N streams are decoding; how late chunks were written against the plan
(``--stamp-send`` stamps vs ``t0 + prefill + i * interval``, t0 from the ``anvil-t0-ns``
header); how long requests took to reach the server (t0 minus the client's send stamp); the
client-side inter-arrival gaps; and the send-to-receive delay. It prints figures and asserts
nothing.

The default prefill (50 ms) is longer than it takes to parse a burst of 256 requests, so the
figures show decoding capacity; with ``--prefill-ms 0`` each token 0 is due at t0 and the
aligned burst's first tokens are late by the parsing of the requests ahead of them.

    python benchmarks/sim_capacity.py [--streams 256] [--interval-ms 10] [--tokens 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from anvil_metrics.runs.simproc import pinned_apart
from anvil_metrics.sim.rawclient import Capture, parse_capture, request_bytes

MS = 1e6


class StreamClient(asyncio.Protocol):
    """One keep-alive connection: records bytes and receive times of the current response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.capture = Capture()
        self.done: asyncio.Future[None] | None = None
        self.sent_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future[None]:
        self.capture = Capture()
        self.done = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.sent_ns = time.perf_counter_ns()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        self.capture.add(data, time.perf_counter_ns())
        if self.capture.raw.endswith(b"\r\n0\r\n\r\n") and self.done and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))


@dataclass
class Cpu:
    """CPU seconds (user, system) of the simulator over a wall-clock window."""

    wall_s: float
    user_s: float
    sys_s: float

    def per_wall(self) -> str:
        total = (self.user_s + self.sys_s) / self.wall_s
        return (
            f"{total:.3f}  (user {self.user_s / self.wall_s:.3f}, "
            f"system {self.sys_s / self.wall_s:.3f}; over {self.wall_s:.2f} s)"
        )


@dataclass
class PhaseResult:
    name: str
    phase_cpu: Cpu
    steady_cpu: Cpu | None  # while all N streams were decoding, if that window was >= 0.5 s
    client_cpu_s: float
    wall_s: float
    tokens: int
    rate_sum: float  # Σ per-stream (tokens - 1) / (last - first arrival), tokens/s
    lateness_ms: np.ndarray  # stamp_i - (t0 + prefill + i * interval)
    intake_ms: np.ndarray  # server t0 - client send stamp, per request
    gaps_ms: np.ndarray  # client inter-arrival gaps between token chunks
    delay_ms: np.ndarray  # arrival - stamp


def proc_cpu(pid: int) -> tuple[int, float, float]:
    """(perf_counter_ns, utime s, stime s) of process `pid`, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return time.perf_counter_ns(), int(fields[11]) / tick, int(fields[12]) / tick


def cpu_between(a: tuple[int, float, float], b: tuple[int, float, float]) -> Cpu:
    return Cpu((b[0] - a[0]) / 1e9, b[1] - a[1], b[2] - a[2])


def busy_cpus(seconds: float = 0.5) -> float:
    """CPUs' worth of non-idle time on the host over `seconds` (others' load skews figures)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    busy_share = 1 - (idle1 - idle0) / max(total1 - total0, 1)
    return busy_share * (os.cpu_count() or 1)


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def start_sim(args: argparse.Namespace) -> tuple[subprocess.Popen[str], int]:
    cmd = [
        sys.executable,
        "-m",
        "anvil_metrics.sim",
        "--port",
        "0",
        "--stamp-send",
        "--prefill-ms",
        str(args.prefill_ms),
        "--interval-ms",
        str(args.interval_ms),
        "--reasoning-tokens",
        "0",
        "--content-tokens",
        str(args.tokens),
        "--max-context",
        "1000000",
        "--timer",
        args.timer,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


def analyse(clients: list[StreamClient], args: argparse.Namespace) -> dict[str, object]:
    """Per-token figures from every stream's capture."""
    lateness, intake, gaps, delay, rates, tokens = [], [], [], [], [], 0
    for client in clients:
        response = parse_capture(client.capture)
        assert response is not None and response.complete, "stream did not complete"
        chunks = [e for e in response.events if e.chunk and e.chunk["choices"]][1:]
        t0 = int(response.headers["anvil-t0-ns"])
        intake.append((t0 - client.sent_ns) / MS)
        stamps = np.array([e.chunk["anvil_sent_ns"] for e in chunks], dtype=np.int64)
        arrivals = np.array([e.arrival_ns for e in chunks], dtype=np.int64)
        plan = t0 + (args.prefill_ms + np.arange(len(stamps)) * args.interval_ms) * MS
        lateness.append((stamps - plan) / MS)
        gaps.append(np.diff(arrivals) / MS)
        delay.append((arrivals - stamps) / MS)
        tokens += len(chunks)
        if len(chunks) > 1:
            rates.append((len(chunks) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9))
    return {
        "lateness_ms": np.concatenate(lateness),
        "intake_ms": np.array(intake),
        "gaps_ms": np.concatenate(gaps),
        "delay_ms": np.concatenate(delay),
        "rate_sum": float(sum(rates)),
        "tokens": tokens,
    }


async def run_phase(
    name: str, clients: list[StreamClient], sim_pid: int, args: argparse.Namespace
) -> PhaseResult:
    payload = {"messages": [{"role": "user", "content": "go"}], "stream": True}
    request = request_bytes("/v1/chat/completions", payload)
    ramp_ns = args.ramp_ms * MS if name == "staggered" else 0.0
    own0, begin = own_cpu_seconds(), proc_cpu(sim_pid)
    futures = []
    for k, client in enumerate(clients):
        start = begin[0] + k * ramp_ns / len(clients)
        wait_s = (start - time.perf_counter_ns()) / 1e9
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # sleeping, not spinning: the client must stay light
        futures.append(client.send(request))
    all_started = proc_cpu(sim_pid)
    pending = set(futures)
    timeout = args.tokens * args.interval_ms / 1000 + args.ramp_ms / 1000 + 60
    _, pending = await asyncio.wait(pending, timeout=timeout, return_when="FIRST_COMPLETED")
    first_done = proc_cpu(sim_pid)
    await asyncio.wait_for(asyncio.gather(*futures), timeout=timeout)
    end = proc_cpu(sim_pid)
    steady = cpu_between(all_started, first_done)
    return PhaseResult(
        name=name,
        phase_cpu=cpu_between(begin, end),
        steady_cpu=steady if steady.wall_s >= 0.5 else None,
        client_cpu_s=own_cpu_seconds() - own0,
        wall_s=(end[0] - begin[0]) / 1e9,
        **analyse(clients, args),
    )


def pct(values: np.ndarray, *qs: float) -> str:
    return " / ".join(f"{np.percentile(values, q, method='inverted_cdf'):.3f}" for q in qs)


def report(result: PhaseResult, args: argparse.Namespace) -> None:
    requested = args.streams * 1000.0 / args.interval_ms
    achieved = f"{result.rate_sum:.0f} ({100 * result.rate_sum / requested:.1f} %)"
    overall = result.tokens / result.wall_s
    lines = [
        f"[{result.name}]",
        f"  tokens/s requested (N x 1000/interval)  {requested:.0f}",
        f"  tokens/s achieved (sum of stream rates) {achieved}",
        f"  tokens/s overall (tokens / phase wall)  {overall:.0f}"
        f"  ({result.tokens} tokens in {result.wall_s:.2f} s, incl. prefill and ramp)",
        f"  sim CPU s per wall s, whole phase       {result.phase_cpu.per_wall()}",
        "  sim CPU s per wall s, all N decoding    "
        + (result.steady_cpu.per_wall() if result.steady_cpu else "n/a (window < 0.5 s)"),
        f"  client CPU s per wall s                 {result.client_cpu_s / result.wall_s:.3f}",
        "  send lateness vs plan ms   p50 / p99 / p99.9 / max  "
        + pct(result.lateness_ms, 50, 99, 99.9, 100),
        "  request send -> server t0 ms p50 / p99 / max          "
        + pct(result.intake_ms, 50, 99, 100),
        "  client inter-arrival gap ms p1 / p50 / p99 / max   "
        + pct(result.gaps_ms, 1, 50, 99, 100)
        + f"   (planned {args.interval_ms:g})",
        "  send-to-receive delay ms   p50 / p99 / max          "
        + pct(result.delay_ms, 50, 99, 100),
    ]
    print("\n".join(lines), flush=True)


async def bench(args: argparse.Namespace, sim_pid: int, port: int) -> None:
    loop = asyncio.get_running_loop()
    clients = []
    for _ in range(args.streams):
        _, client = await loop.create_connection(StreamClient, "127.0.0.1", port)
        clients.append(client)
    warm = request_bytes(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": True},
    )
    # every connection does one short stream first, so all are accepted and warm
    await asyncio.gather(*(client.send(warm) for client in clients))
    for name in args.phases:
        report(await run_phase(name, clients, sim_pid, args), args)
    for client in clients:
        if client.transport is not None:
            client.transport.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, default=256, help="concurrent streams")
    p.add_argument("--interval-ms", type=float, default=10.0, help="per-stream token interval")
    p.add_argument("--tokens", type=int, default=300, help="tokens per stream")
    p.add_argument(
        "--prefill-ms",
        type=float,
        default=50.0,
        help="prefill per request; 0 makes a burst of N requests late by its own parsing time",
    )
    p.add_argument("--ramp-ms", type=float, default=500.0, help="start spread, staggered phase")
    p.add_argument("--timer", choices=("auto", "timerfd", "asyncio"), default="auto")
    p.add_argument(
        "--phases", nargs="+", choices=("aligned", "staggered"), default=["aligned", "staggered"]
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin sim and client to separate CPUs (only on an otherwise idle host)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    background = busy_cpus()
    proc, port = start_sim(args)
    try:
        with pinned_apart(proc.pid) if args.pin else nullcontext("not pinned") as pinning:
            print(
                f"sim capacity: {args.streams} streams x {args.tokens} tokens, interval "
                f"{args.interval_ms:g} ms ({1000 / args.interval_ms:g} tok/s each), prefill "
                f"{args.prefill_ms:g} ms, timer {args.timer}; {pinning}; "
                f"background load before start: {background:.2f} busy CPUs "
                f"of {os.cpu_count()}"
            )
            asyncio.run(bench(args, proc.pid, port))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
