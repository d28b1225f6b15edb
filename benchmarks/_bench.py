"""Shared plumbing of `timing_bias.py` and `capacity.py`: start one anvil worker process (a
single headless Locust process) or the asyncio reference client (`refclient.py`) against a
simulator on 127.0.0.1, wait for it, stop it by PID, and read back what it recorded.

Every process started here is stopped by its PID (`simproc.stop_process`), also on timeout or
error. All stamps are `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux): one clock shared
by this script, the simulator and the clients on the host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anvil_metrics.runs.simproc import stop_process  # noqa: E402

LOCUSTFILE = str(REPO / "locustfiles" / "chat.py")
REFCLIENT = str(REPO / "benchmarks" / "refclient.py")
HOT_PATH = ("client.py", "sse.py", "observe.py", "users.py", "session.py", "lagmon.py")
_TICK = os.sysconf("SC_CLK_TCK")


# -- the machine ---------------------------------------------------------------------------


def loadavg() -> str:
    """`uptime`'s load averages (1, 5, 15 min) and the CPU count."""
    with open("/proc/loadavg") as f:
        one, five, fifteen = f.read().split()[:3]
    return f"load average {one}, {five}, {fifteen} on {os.cpu_count()} CPUs"


def code_state() -> str:
    """The commit and which hot-path files differ from it (others edit them concurrently)."""
    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                 timeout=10)
            return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("diff", "--name-only", "HEAD", "--", *(f"anvil_metrics/{f}" for f in HOT_PATH))
    names = [Path(p).name for p in changed.splitlines()]
    return f"commit {head}; hot-path files modified in the working tree: " + (
        ", ".join(names) if names else "none")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` so far, seconds (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuSampler:
    """Samples a process's CPU time every `period_s` on a thread, so its CPU over any window
    (e.g. a client's load window, known only afterwards) can be read by interpolation."""

    def __init__(self, pid: int, period_s: float = 0.05) -> None:
        self.pid, self.period_s = pid, period_s
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                self.samples.append((time.perf_counter_ns(), proc_cpu_s(self.pid)))
            except OSError:
                return
            if self._stop.wait(self.period_s):
                self.samples.append((time.perf_counter_ns(), proc_cpu_s(self.pid)))
                return

    def cpu_between(self, t0_ns: int, t1_ns: int) -> float | None:
        if len(self.samples) < 2:
            return None
        ts = np.array([s[0] for s in self.samples], dtype=np.float64)
        cpu = np.array([s[1] for s in self.samples])
        return float(np.interp(t1_ns, ts, cpu) - np.interp(t0_ns, ts, cpu))


def sim_stats(url: str) -> dict[str, int]:
    """The simulator's own stream counts (GET /sim/stats)."""
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        return orjson.loads(resp.read())["streams"]


# -- runs ----------------------------------------------------------------------------------


@dataclass
class ClientRun:
    """One client process's run: its records, its own figures and when it started."""

    label: str
    records: list[dict[str, Any]]  # per request: start_ns, arrivals_ns, sent_ns, ...
    popen_ns: int  # just before the process was started
    exit_ns: int
    returncode: int | None
    cpu_s: float | None  # CPU of the process over its load window
    load_s: float | None
    events: int  # SSE data events parsed (role, output, usage, [DONE])
    client: dict[str, Any] = field(default_factory=dict)  # anvil: benchmark.json `client`
    run_end: dict[str, Any] = field(default_factory=dict)  # anvil: run_end.client
    failed: int = 0
    log: str = ""

    @property
    def first_start_ns(self) -> int | None:
        return min((r["start_ns"] for r in self.records), default=None)

    @property
    def window_ns(self) -> tuple[int, int] | None:
        """First request written .. last request ended."""
        ends = [r["end_ns"] for r in self.records if r.get("end_ns") is not None]
        if not self.records or not ends:
            return None
        return self.first_start_ns, max(ends)  # type: ignore[return-value]


def _wait(proc: subprocess.Popen, timeout_s: float, what: str) -> int | None:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        print(f"  ! {what} still running after {timeout_s:.0f} s: stopped", flush=True)
        return None
    finally:
        stop_process(proc)


def run_beside_floor(cmd: list[str], floor: subprocess.Popen, timeout_s: float,
                     **popen: Any) -> tuple[bytes, int, float]:
    """Run `cmd` (its stdout and stderr together) while `floor`, a bare process measuring
    the machine's own lateness in the same seconds, runs beside it; then stop the floor
    (SIGTERM: it writes what it measured; by PID if it does not end). (output, exit code,
    seconds taken); a run past `timeout_s` is stopped and raises."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, **popen)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise
    finally:
        floor.send_signal(signal.SIGTERM)
        try:
            floor.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_process(floor)
    return out, proc.returncode, time.monotonic() - t0


def write_scenario(path: Path, requests: int, prompt_tokens: int, max_tokens: int) -> Path:
    path.write_text(f"""
measurement_protocol = "{path.stem}"
requests = {requests}
warmup_requests = 0
max_tokens = {max_tokens}
context_tokens = {prompt_tokens + max_tokens}
max_context_tokens = {prompt_tokens + max_tokens}
context_seed = 0
[context_distribution]
{prompt_tokens} = 1
[request]
include_usage = true
""")
    return path


def run_anvil(url: str, users: int, requests: int, prompt_tokens: int, max_tokens: int,
              work: Path, timeout_s: float, repo: Path = REPO,
              label: str = "anvil", extra: tuple[str, ...] = ()) -> ClientRun:
    """One headless Locust process (anvil's locustfile), -u N -r N, until `requests` end;
    anvil as checked out in `repo` (another checkout: a baseline to compare with); `extra`:
    more of its flags (e.g. --quiet)."""
    work.mkdir(parents=True, exist_ok=True)
    scenario = write_scenario(work / "scenario.toml", requests, prompt_tokens, max_tokens)
    results = work / "results"
    locustfile = str(repo / "locustfiles" / "chat.py")
    cmd = [sys.executable, "-m", "locust", "-f", locustfile, "--headless", "-H", url,
           "-u", str(users), "-r", str(users), "--scenario", str(scenario),
           "--requests", str(requests), "--results-dir", str(results), "--only-summary",
           *extra]
    log_path = work / "locust.log"
    with open(log_path, "wb") as log:
        popen_ns = time.perf_counter_ns()
        proc = subprocess.Popen(cmd, cwd=repo, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(repo)})
        code = _wait(proc, timeout_s, f"{label} ({users} users)")
        exit_ns = time.perf_counter_ns()
    run_dirs = sorted(results.glob("benchmark-*")) if results.exists() else []
    if not run_dirs or not (run_dirs[-1] / "requests.jsonl").exists():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"anvil wrote no run (exit {code}); its log ends:\n{tail}")
    lines = [orjson.loads(x) for x in (run_dirs[-1] / "requests.jsonl").read_bytes().splitlines()]
    records, run_end = [], {}
    for line in lines:
        if line["type"] == "request":
            server = (line.get("extra") or {}).get("server") or {}
            arrivals = (line["start_ns"] + np.cumsum(line["chunk_deltas_ns"], dtype=np.int64)
                        ).tolist()
            records.append({
                "start_ns": line["start_ns"], "end_ns": line["end_ns"],
                "ok": line["failure"] is None, "warmup": line["warmup"],
                "first_output_ns": line["first_output_ns"],
                "first_content_ns": line["first_content_ns"],
                "first_output_sent_ns": server.get("first_output_sent_ns"),
                "first_content_sent_ns": server.get("first_content_sent_ns"),
                "arrivals_ns": arrivals, "sent_ns": server.get("chunks_sent_ns") or [],
                # output chunks + role chunk, usage chunk and [DONE] of a completed stream
                "events": line["reasoning_chunks"] + line["content_chunks"]
                + (3 if line["failure"] is None else 0),
            })
        elif line["type"] == "run_end":
            run_end = line.get("client") or {}
    bench_path = run_dirs[-1] / "benchmark.json"
    client = ((orjson.loads(bench_path.read_bytes()).get("client") or {})
              if bench_path.exists() else {})
    return ClientRun(
        label=label, records=records, popen_ns=popen_ns, exit_ns=exit_ns, returncode=code,
        cpu_s=run_end.get("cpu_s"), load_s=run_end.get("load_s"),
        events=sum(r["events"] for r in records), client=client, run_end=run_end,
        failed=sum(1 for r in records if not r["ok"]), log=str(log_path))


def run_reference(url: str, streams: int, requests: int, prompt_tokens: int, max_tokens: int,
                  work: Path, timeout_s: float, stagger_ms: float = 0.0) -> ClientRun:
    """`refclient.py` with the same load: `streams` connections, `requests` in all, the
    first requests spread over `stagger_ms`."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "refclient.jsonl"
    cmd = [sys.executable, REFCLIENT, "--url", url, "--streams", str(streams),
           "--requests", str(requests), "--prompt-tokens", str(prompt_tokens),
           "--max-tokens", str(max_tokens), "--stagger-ms", str(stagger_ms), "--out", str(out)]
    log_path = work / "refclient.log"
    with open(log_path, "wb") as log:
        popen_ns = time.perf_counter_ns()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        code = _wait(proc, timeout_s, f"reference client ({streams} streams)")
        exit_ns = time.perf_counter_ns()
    text = log_path.read_text(errors="replace")
    summary_lines = [x for x in text.splitlines() if x.startswith("{")]
    if not summary_lines or not out.exists():
        raise RuntimeError(f"the reference client failed (exit {code}):\n{text[-2000:]}")
    summary = orjson.loads(summary_lines[-1])
    records = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    for r in records:
        r["first_output_sent_ns"] = r["sent_ns"][0] if r["sent_ns"] else None
    return ClientRun(
        label="reference", records=records, popen_ns=popen_ns, exit_ns=exit_ns,
        returncode=code, cpu_s=summary["cpu_s"], load_s=summary["load_s"],
        events=summary["events"], failed=summary["failed"], log=str(log_path))


# -- figures -------------------------------------------------------------------------------


def pct(values: Any, q: float) -> float | None:
    """Nearest-rank percentile (numpy's inverted_cdf), None for no values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method="inverted_cdf"))


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def start_spread_ms(run: ClientRun, streams: int) -> float | None:
    """How far apart the first `streams` requests were written (their token phases)."""
    starts = sorted(r["start_ns"] for r in run.records)[:streams]
    return (starts[-1] - starts[0]) / 1e6 if starts else None


def _spans(run: ClientRun) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of every request that has an end."""
    return [(r["start_ns"], r["end_ns"]) for r in run.records if r.get("end_ns") is not None]


def concurrency_figures(run: ClientRun, streams: int) -> dict[str, Any]:
    """How `run` held `streams` streams, beside `achieved_concurrency`:
    - `peak`: the most requests in flight at once (an end and a start at the same
      nanosecond count as one after the other);
    - `held`: the mean in flight between the `streams`-th start and the `streams`-th last
      end, the stretch where every stream has begun and none has had its last request end:
      the ramp and the drain of a fixed-count run are left out, and what is missing is the
      time each stream spent between its requests (None when there is no such stretch);
    - `drain_ms`: how far apart the last `streams` requests ended."""
    spans = _spans(run)
    if not spans:
        return {"peak": None, "held": None, "drain_ms": None}
    starts, ends = sorted(s for s, _ in spans), sorted(e for _, e in spans)
    steps = sorted([(e, -1) for e in ends] + [(s, 1) for s in starts])
    held = None
    if len(spans) >= streams and ends[-streams] > starts[streams - 1]:
        lo, hi = starts[streams - 1], ends[-streams]
        held = sum(max(0, min(e, hi) - max(s, lo)) for s, e in spans) / (hi - lo)
    last = ends[-streams:]
    return {"peak": int(np.max(np.cumsum([d for _, d in steps]))), "held": held,
            "drain_ms": (last[-1] - last[0]) / 1e6}


def achieved_concurrency(run: ClientRun) -> float | None:
    """Σ request durations / the load window (Little's law), as anvil's `client` block."""
    window = run.window_ns
    if window is None or window[1] <= window[0]:
        return None
    return sum(e - s for s, e in _spans(run)) / (window[1] - window[0])
