"""Post-processing time and peak memory for large runs: `anvil postprocess` on synthetic
`requests.jsonl` files of 100k and 1M request rows.

What it answers: how long the real CLI (`python -m anvil_metrics postprocess RUN_DIR`, a
child process) takes to read the raw records, derive the rows, aggregate, verify and write
`benchmark.json`, and how much memory that child needs at its peak (its own `ru_maxrss`,
from `os.wait4` on that one child). The CLI also starts an interpreter and prints a
summary and the prefix-cache check, both from what `postprocess_run` hands back (nothing is
read back); so the library call alone — `anvil_metrics.post.postprocess.postprocess_run(RUN_DIR)`,
what a finished run calls — is timed too, in a child of its own. Then `anvil verify` checks
the file produced (also timed, also a child of its own).

Beside it, in the same invocation and on the same file, interleaved run by run:
- the floor: a bare `orjson.loads` of every line of the raw file, in one process (reading
  the records is what post-processing cannot avoid);
- with `--baseline DIR`, the same `anvil postprocess` of another checkout of anvil (e.g.
  `git worktree add /tmp/before <commit>`), to say what a change cost or saved;
- `anvil verify` of the `benchmark.json` written, beside its own floor: a bare `orjson.loads`
  of the whole file in one process, the document around the rows once and the rows ~1 MiB
  at a time (each block cut at a row's end; nothing is kept), which is what any reader of
  the file must at least do (parsing it in one call holds ~5 GB of objects and took 12 s:
  no floor).

The raw file is synthesised, seeded and reproducible (`--seed`), in a temporary folder
removed afterwards (`--keep` leaves it): a `"run"` header as `RawWriter.write_header`
writes it (with the params `session.py` puts there), N measured `"request"` lines as
`RequestRecord.to_json_dict` gives them — ~20 reasoning and ~50 content chunks each with
their `chunk_deltas_ns`, `usage` with `completion_tokens_details`, `prompt_tokens_details.
cached_tokens` on some, no usage at all on a few (chunk-counted rows), ~3 % failures of
every kind at the phase they happen in (some with partial output), `extra.start_delay_ns`
— plus a few warm-up records, written in the order they would finish with `--users`
concurrent streams, and a `"run_end"` line with a `client` block like `session.py`'s.

    .venv/bin/python benchmarks/postprocess_scale.py [--rows 100000,1000000] [--users 64]
        [--seed 0] [--repeat 3] [--keep] [--baseline DIR] [--raw FILE]

How it measures, and why:
- the synthesised file is flushed to disk (`os.sync`) before anything is timed. A run's raw
  file was written over the whole run and the kernel writes dirty pages back within ~30 s,
  so a real `anvil postprocess` does not compete with the write-back of its own input; a
  file synthesised a second earlier would make it (measured: 10.7 s against 8.9-9.9 s);
- `anvil postprocess` and `anvil verify` run `--repeat` times (3) each, interleaved with
  their floors, and the medians are the figures judged against the targets (each run is
  printed); the library call runs once;
- `--raw FILE` takes that `requests.jsonl` (of one size, `--rows` ignored) instead of
  synthesising one: a quicker second look at the same file (it is linked, never written);
- a fixed pure-Python loop (`speed_s`, 10M additions) is timed before and after: on a shared
  VM the same code ran 1.5-1.8x slower from one hour to the next, so a figure is quoted with
  the machine's speed at the time. It is a rough guide only: post-processing also waits on
  memory (first-touch page faults) and the disk, which the loop does not (1M rows took
  9.5 s at speed_s 0.33 s and 14.4 s at 0.37 s).

It prints figures and asserts nothing (its exit status is 1 only if a child failed or the
produced file does not verify).
"""

from __future__ import annotations

import argparse
import heapq
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# the environment the children get: as it was before anvil_metrics sets its defaults
# (`anvil_metrics/__init__.py`), so a --baseline checkout runs with its own
ENV = dict(os.environ)

from anvil_metrics.records import RAW_SCHEMA, Failure, RequestRecord  # noqa: E402

SIZES = (1024, 4096, 16384)  # planned prompt sizes, cycled over the request index
WARMUPS = 8
WORKER = "synth-host:4242"
BLOCK = 20_000  # records generated per numpy block
MAX_GAPS = 90  # reasoning ≤ 26 + content ≤ 62 chunks → at most 87 gaps after the first
WALL0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, time.time_ns()
PERF0 = 9_000_000_000_000  # perf_counter_ns at the header

# kind, phase, http_status, message, relative weight
FAILURES = (
    ("http_error", "headers", 500, "HTTP 500: Internal Server Error", 3),
    ("rate_limited", "headers", 429, "HTTP 429: Too Many Requests", 3),
    ("connection", "connect", None, "could not connect: ConnectError: [Errno 111]", 2),
    ("timeout", "prefill", 200, "no data within the first-byte timeout (600 s)", 2),
    ("timeout", "decode", 200, "no data within the chunk timeout (60 s)", 2),
    ("truncated", "decode", 200, "connection lost mid-stream: RemoteProtocolError", 3),
    ("malformed_chunk", "decode", 200, "chunk is not valid JSON: b'{\"choi'", 1),
    ("stream_error", "decode", 200, "server error in stream: out of KV cache", 2),
    ("client_error", "prefill", 200, "RuntimeError: synthetic client error", 1),
)
FAILURE_RATE = 0.03
TARGET_RATIO, TARGET_BYTES = 2.0, 2**30  # the issue's targets: the floors' multiple, RSS


def _stamp(wall_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_ns // 1_000_000_000))


def _params(rows: int, users: int) -> dict:
    dist: dict[str, int] = {}
    for i in range(rows):
        key = str(SIZES[i % len(SIZES)])
        dist[key] = dist.get(key, 0) + 1
    return {
        "measurement_protocol": "postprocess-scale",
        "concurrency": users,
        "context_tokens": max(SIZES),
        "max_context_tokens": 32768,
        "context_distribution": dist,
        "context_seed": 0,
        "max_tokens": 4096,
        "model": "synthetic-reasoner",
        "engine": "sglang",
        "gpu": None,
        "tier": None,
        "manifest": None,
        "source_recipe": None,
        "base_url": "http://127.0.0.1:8000/v1",
        "serve_flags": {"no_thinking": False, "reasoning_effort": "low",
                        "shared_prefix_burst": False, "thinking_mode": "default"},
        "run_nonce": "5ca1ab1e",
        "prompt_calibration": {"method": "tokenize"},
        "warmup_requests": WARMUPS,
        "requests_planned": rows,
        "prompt_sizing": {"counter": "/tokenize with messages (vLLM)", "cache": "stored",
                          "cache_key": "0123456789abcdef",
                          "counted": {str(s): s + 1 for s in SIZES},
                          "expected_shared_tokens": 11},
        "nonce_reused": False,
    }


class Synth:
    """Seeded record factory: request i of stream s starts when s is free again."""

    def __init__(self, seed: int, users: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.free = [(PERF0 + 1_000_000 + u * 137_000, u) for u in range(users)]
        heapq.heapify(self.free)
        kinds = np.array([w for *_, w in FAILURES], dtype=float)
        self.failure_p = kinds / kinds.sum()

    def block(self, first: int, n: int, warmup: bool) -> list[RequestRecord]:
        rng = self.rng
        reasoning = rng.integers(15, 27, n)
        reasoning[rng.random(n) < 0.02] = 0  # a few requests that did not reason
        content = rng.integers(40, 63, n)
        tok_s = rng.normal(20_000, 2_000, n).clip(5_000)  # effective prefill rate
        gaps = rng.normal(8_000_000, 400_000, (n, MAX_GAPS)).clip(1_000).astype(np.int64)
        tail = rng.integers(50_000, 900_000, n)  # last chunk → [DONE]
        delay = rng.integers(20_000, 400_000, n)  # start delay (client work)
        prompt_extra = rng.integers(1, 12, n)
        cached = rng.random(n)
        no_usage = rng.random(n) < 0.01
        fail = (rng.random(n) < FAILURE_RATE) & (not warmup)
        fail_kind = rng.choice(len(FAILURES), n, p=self.failure_p)
        fail_frac = rng.random(n)
        length = rng.random(n) < 0.05
        gap_rows = gaps.tolist()
        out = []
        for j in range(n):
            idx = first + j
            planned = SIZES[idx % len(SIZES)]
            due, user = heapq.heappop(self.free)
            start = due + int(delay[j])
            r, c = int(reasoning[j]), int(content[j])
            prefill = int(planned / tok_s[j] * 1e9)
            deltas = [prefill] + gap_rows[j][: r + c - 1]
            channels = "r" * r + "c" * c
            failure = None
            http_status: int | None = 200
            if fail[j]:
                kind, phase, status, message, _ = FAILURES[int(fail_kind[j])]
                http_status = status
                failure = Failure(kind=kind, message=message, http_status=status, phase=phase)
                if phase == "decode":
                    keep = 1 + int(fail_frac[j] * (r + c - 1))
                    deltas, channels = deltas[:keep], channels[:keep]
                else:
                    deltas, channels = [], ""
            arrivals = np.cumsum(deltas).tolist() if deltas else []
            n_r, n_c = channels.count("r"), channels.count("c")
            first_output = start + arrivals[0] if arrivals else None
            first_content = start + arrivals[n_r] if n_c else None
            if failure is None:
                end = start + arrivals[-1] + int(tail[j])
            elif arrivals:
                end = start + arrivals[-1] + (60_000_000_000 if failure.kind == "timeout"
                                              else int(tail[j]))
            elif failure.phase == "prefill":
                end = start + prefill
            else:
                end = start + int(tail[j]) * 10  # refused quickly
            usage = None
            if failure is None and not no_usage[j]:
                prompt = planned + int(prompt_extra[j])
                usage = {"prompt_tokens": prompt, "total_tokens": prompt + r + c + 2,
                         "completion_tokens": r + c + 2,
                         "completion_tokens_details": {"reasoning_tokens": r + 2}}
                if cached[j] < 0.3:
                    usage["prompt_tokens_details"] = {"cached_tokens": 0 if cached[j] < 0.2
                                                      else 8}
            out.append(RequestRecord(
                request_index=idx, start_ns=start, end_ns=end, first_output_ns=first_output,
                first_content_ns=first_content, warmup=warmup, planned_context_tokens=planned,
                reasoning_chunks=n_r, content_chunks=n_c, chunk_deltas_ns=tuple(deltas),
                chunk_channels=channels, usage=usage,
                finish_reason=None if failure else ("length" if length[j] else "stop"),
                http_status=http_status, failure=failure, worker=WORKER,
                extra={"start_delay_ns": int(delay[j])}))
            heapq.heappush(self.free, (end, user))
        return out


def synthesize(path: Path, rows: int, users: int, seed: int) -> dict:
    """Write the raw file; returns counts of what it holds."""
    synth = Synth(seed, users)
    header = {"type": "run", "schema": RAW_SCHEMA, "run_id": "benchmark-20260101T000000Z",
              "started_at": _stamp(WALL0), "wall_anchor_ns": WALL0, "perf_anchor_ns": PERF0,
              "host": "synth-host", "pid": 4242, "params": _params(rows, users)}
    pending: list[tuple[int, int, bytes]] = []  # (end_ns, seq, line): written when they end
    seq = 0
    failed = 0
    last_end = PERF0
    with open(path, "wb") as f:
        f.write(orjson.dumps(header) + b"\n")

        def emit(recs: list[RequestRecord], flush_all: bool) -> None:
            nonlocal seq, last_end
            for rec in recs:
                heapq.heappush(pending, (rec.end_ns, seq, orjson.dumps(rec.to_json_dict())))
                seq += 1
            # every stream's next start is later than the earliest free moment: anything
            # that ended before it is final and can be written in end order
            horizon = float("inf") if flush_all else synth.free[0][0]
            while pending and pending[0][0] <= horizon:
                end, _, line = heapq.heappop(pending)
                last_end = max(last_end, end)
                f.write(line + b"\n")

        emit(synth.block(0, WARMUPS, warmup=True), flush_all=True)
        for first in range(0, rows, BLOCK):
            recs = synth.block(first, min(BLOCK, rows - first), warmup=False)
            failed += sum(1 for r in recs if r.failure is not None)
            emit(recs, flush_all=False)
        emit([], flush_all=True)
        client = {
            "loop_lag_ms": {"p50": 0.16, "p99": 1.12, "max": 9.56, "samples": 48211,
                            "over_5ms": 3, "max_at_s": 12.862, "stalls": [[12.862, 9.56]]},
            "cpu_pct": 41.3, "achieved_concurrency": None, "saturated": False,
            "verdict": "ok", "load_s": (last_end - PERF0) / 1e9, "cpu_s": 123.4,
            "send_chunk_ms_max": 0.887, "send_chunks": rows + WARMUPS,
        }
        end_line = {"type": "run_end", "finished_at": _stamp(WALL0 + last_end - PERF0 + 10**9),
                    "end_perf_ns": last_end + 1_000_000, "client": client,
                    "locust": {"num_requests": rows + WARMUPS, "num_failures": failed}}
        f.write(orjson.dumps(end_line) + b"\n")
    return {"rows": rows, "failed": failed, "warmups": WARMUPS}


TIME = shutil.which("time", path="/usr/bin:/bin")


# postprocess_run's three stages, timed apart in a child (the same calls, in its order)
STAGES = """
import sys, time
from pathlib import Path
from anvil_metrics.post.benchmark import build
from anvil_metrics.post.postprocess import BENCHMARK_FILE, RAW_FILE
from anvil_metrics.post.rawpart import scan_raw
d = Path(sys.argv[1])
t0 = time.perf_counter()
raw = scan_raw(d / RAW_FILE)
t1 = time.perf_counter()
built = build(raw, (raw.run_end or {}).get("client"))
t2 = time.perf_counter()
built.write(d / BENCHMARK_FILE)
t3 = time.perf_counter()
print(f"read and check the records into columns (parallel parts) {t1 - t0:.2f} s, "
      f"derive, aggregate and verify {t2 - t1:.2f} s, write benchmark.json {t3 - t2:.2f} s")
"""


# verify's floor: the file parsed by orjson, the document around the rows once, the rows a
# block at a time (cut at a row's end; the rows hold no `]`, so their close is found by it)
VERIFY_FLOOR = """
import sys, orjson
OPEN, END, CLOSE = b'\\n  "request_timings": [', b"\\n    }", b"\\n  ]"
with open(sys.argv[1], "rb") as f:
    head = b""
    while (at := head.find(OPEN)) < 0:
        head += f.read(1 << 20)
    buf, head = head[at + len(OPEN):], head[:at]
    while True:
        close = buf.find(b"]")
        while close >= 0 and buf[close - 3:close + 1] != CLOSE:
            close = buf.find(b"]", close + 1)
        if close >= 3:
            orjson.loads(b"[" + buf[:close - 3].lstrip(b",") + b"]")
            tail = buf[close + 1:] + f.read()
            break
        cut = buf.rfind(END) + len(END)
        orjson.loads(b"[" + buf[:cut].lstrip(b",") + b"]")
        buf = buf[cut:] + f.read(1 << 20)
    orjson.loads(head + OPEN + b"]" + tail)
"""


def run_child(cmd: list[str], log: Path, cwd: Path = REPO) -> tuple[int, float, int]:
    """Run `cmd`; returns (exit status, wall seconds, peak RSS in bytes) of that one child.

    The peak comes from `/usr/bin/time -v` when there is one. Otherwise it is the child's
    `ru_maxrss` from `os.wait4`, which on Linux also counts the memory this script had when
    it started the child (the child's image before `exec`): a floor for small runs.
    """
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        env = {**ENV, "PYTHONPATH": str(cwd)}  # `-m anvil_metrics` of that checkout
        proc = subprocess.Popen([TIME, "-v", *cmd] if TIME else cmd, cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss * 1024  # Linux: KiB
    if TIME:
        for line in log.read_text(errors="replace").splitlines():
            if "Maximum resident set size (kbytes):" in line:
                rss = int(line.rsplit(":", 1)[1]) * 1024
    return proc.returncode, wall, rss


def speed_s() -> float:
    """Seconds this interpreter takes for 10M additions in a plain loop: the machine's speed
    for Python code at the moment, to quote beside the figures."""
    t0 = time.perf_counter()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.perf_counter() - t0


def _median(runs: list[tuple[int, float, int]]) -> float:
    walls = sorted(r[1] for r in runs)
    return walls[len(walls) // 2]


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="100000,1000000",
                    help="measured request rows per file, comma-separated")
    ap.add_argument("--users", type=int, default=64, help="concurrent streams simulated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of `anvil postprocess` and of `anvil verify` per file, each "
                    "beside its floor; the medians are judged")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run folders")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout of anvil (a git worktree of an earlier commit) "
                    "whose `anvil postprocess` runs beside this one's on the same files")
    ap.add_argument("--raw", type=Path, default=None,
                    help="an existing requests.jsonl to measure instead of synthesising "
                    "one (linked into the run folder, never written)")
    a = ap.parse_args(argv)
    if a.baseline is not None and not (a.baseline / "anvil_metrics").is_dir():
        ap.error(f"--baseline {a.baseline}: not a checkout of anvil (no anvil_metrics/)")
    if a.repeat < 1:
        ap.error(f"--repeat must be 1 or more, got {a.repeat}")
    if a.raw is not None and not a.raw.is_file():
        ap.error(f"--raw {a.raw}: no such file")
    return a


def _raw_file(a: argparse.Namespace, run_dir: Path, rows: int) -> Path:
    """The run folder's requests.jsonl: `--raw`'s, or one synthesised, flushed to disk."""
    raw = run_dir / "requests.jsonl"
    if a.raw is not None:
        try:
            os.link(a.raw, raw)
        except OSError:  # another file system
            raw.symlink_to(a.raw.resolve())
        print(f"{a.raw}: {raw.stat().st_size / 2**20:,.1f} MiB", flush=True)
        return raw
    t0 = time.perf_counter()
    info = synthesize(raw, rows, a.users, a.seed)
    print(f"{rows:,} rows: synthesised {raw.stat().st_size / 2**20:,.1f} MiB in "
          f"{time.perf_counter() - t0:.1f} s ({info['failed']:,} failures, "
          f"{info['warmups']} warm-ups)", flush=True)
    t0 = time.perf_counter()
    os.sync()  # see the module docstring: a run's raw file is on disk by its end
    print(f"  flushed to disk in {time.perf_counter() - t0:.1f} s", flush=True)
    return raw


def _each(runs: list[tuple[int, float, int]]) -> str:
    return ", ".join(f"{r[1]:.2f}" for r in runs)


def _measure(a: argparse.Namespace, run_dir: Path, raw: Path) -> dict | None:
    """Every figure of one file, its lines printed as they come; None if a child failed."""
    py = sys.executable
    bench = run_dir / "benchmark.json"
    lib = [py, "-c", "import sys; from anvil_metrics.post.postprocess import "
           "postprocess_run; postprocess_run(sys.argv[1])", str(run_dir)]
    lcode, lwall, lrss = run_child(lib, run_dir / "library.log")
    run_child([py, "-c", STAGES, str(run_dir)], run_dir / "stages.log")  # where time goes
    cli = [py, "-m", "anvil_metrics", "postprocess", str(run_dir)]
    floor_cmd = [py, "-c", "import sys, orjson; loads = orjson.loads\n"
                 "with open(sys.argv[1], 'rb', buffering=1 << 20) as f:\n"
                 "    for line in f: loads(line)", str(raw)]
    runs, before, floor = [], [], []
    for _ in range(a.repeat):  # interleaved: each compared with its neighbours
        runs.append(run_child(cli, run_dir / "postprocess.log"))
        if a.baseline is not None:
            before.append(run_child(cli, run_dir / "baseline.log", cwd=a.baseline))
        floor.append(run_child(floor_cmd, run_dir / "floor.log"))
    code = max((r[0] for r in runs), key=abs)
    if code != 0 or lcode != 0 or not bench.exists():
        print(f"  postprocess failed (exit {code}, library {lcode}):\n"
              + (run_dir / "postprocess.log").read_text()[-2000:]
              + (run_dir / "library.log").read_text()[-2000:])
        return None
    checks, vfloor = [], []
    for _ in range(a.repeat):
        checks.append(run_child([py, "-m", "anvil_metrics", "verify", str(bench)],
                                run_dir / "verify.log"))
        vfloor.append(run_child([py, "-c", VERIFY_FLOOR, str(bench)], run_dir / "vfloor.log"))
    m = {"raw_b": raw.stat().st_size, "bench_b": bench.stat().st_size,
         "wall": _median(runs), "rss": max(r[2] for r in runs), "floor": _median(floor),
         "lwall": lwall, "lrss": lrss, "vcode": max((r[0] for r in checks), key=abs),
         "vwall": _median(checks), "vrss": max(r[2] for r in checks),
         "vfloor": _median(vfloor)}
    print(f"  anvil postprocess {m['wall']:.2f} s (median of {_each(runs)}), peak RSS "
          f"{m['rss'] / 2**20:,.0f} MiB; postprocess_run() alone {lwall:.2f} s, "
          f"{lrss / 2**20:,.0f} MiB", flush=True)
    print(f"  postprocess_run() by stage: {(run_dir / 'stages.log').read_text().splitlines()[0]}")
    print(f"  floor, orjson.loads of every line in one process: {m['floor']:.2f} s (median of "
          f"{_each(floor)}); anvil postprocess / floor = {m['wall'] / m['floor']:.2f}")
    print(f"  anvil verify (exit {m['vcode']}) {m['vwall']:.2f} s (median of {_each(checks)}), "
          f"peak RSS {m['vrss'] / 2**20:,.0f} MiB; its floor, orjson.loads of the file a "
          f"block of rows at a time: {m['vfloor']:.2f} s (median of {_each(vfloor)}); "
          f"anvil verify / floor = {m['vwall'] / m['vfloor']:.2f}", flush=True)
    if before:
        if any(r[0] != 0 for r in before):
            print("  baseline failed:\n" + (run_dir / "baseline.log").read_text()[-2000:])
            return None
        then = _median(before)
        print(f"  baseline {a.baseline}: anvil postprocess {then:.2f} s (median of "
              f"{_each(before)}), peak RSS {max(r[2] for r in before) / 2**20:,.0f} MiB; "
              f"this / baseline = {m['wall'] / then:.2f}", flush=True)
    return m


def _table(results: list[tuple[int, dict]]) -> None:
    print()
    print(f"{'':>10}{'':>14}{'':>14}{'anvil postprocess':>28}{'anvil verify':>34}")
    print(f"{'rows':>10}{'raw file':>14}{'benchmark':>14}{'wall':>10}{'/ floor':>8}"
          f"{'peak RSS':>10}{'result':>8}{'wall':>8}{'/ floor':>8}{'peak RSS':>10}")
    for rows, m in results:
        print(f"{rows:>10,}{m['raw_b'] / 2**20:>10,.1f} MiB{m['bench_b'] / 2**20:>10,.1f} MiB"
              f"{m['wall']:>8.2f} s{m['wall'] / m['floor']:>8.2f}{m['rss'] / 2**20:>6,.0f} MiB"
              f"{'ok' if m['vcode'] == 0 else 'FAIL':>8}{m['vwall']:>6.2f} s"
              f"{m['vwall'] / m['vfloor']:>8.2f}{m['vrss'] / 2**20:>6,.0f} MiB")
    for rows, m in results:
        if rows == 1_000_000:
            ratio, vratio = m["wall"] / m["floor"], m["vwall"] / m["vfloor"]
            met = ratio <= TARGET_RATIO and vratio <= TARGET_RATIO and m["rss"] <= TARGET_BYTES
            print(f"targets for 1M rows (medians): `anvil postprocess` <= {TARGET_RATIO:g}x its "
                  f"floor and <= 1 GiB, `anvil verify` <= {TARGET_RATIO:g}x its floor: "
                  f"{'met' if met else 'MISSED'} ({ratio:.2f}x, {m['rss'] / 2**20:,.0f} MiB; "
                  f"{vratio:.2f}x)")


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    sizes = [int(x) for x in a.rows.split(",") if x.strip()]
    if a.raw is not None:
        sizes = [sum(1 for line in open(a.raw, "rb") if b'"warmup":false' in line)]
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    speed0 = speed_s()
    root = Path(tempfile.mkdtemp(prefix="anvil-pp-scale-"))
    results: list[tuple[int, dict]] = []
    ok = True
    try:
        for rows in sizes:
            run_dir = root / f"rows-{rows}"
            run_dir.mkdir()
            raw = _raw_file(a, run_dir, rows)
            m = _measure(a, run_dir, raw)
            ok = ok and m is not None and m["vcode"] == 0
            if m is not None:
                results.append((rows, m))
            if not a.keep:
                raw.unlink()
    finally:
        if a.keep:
            print(f"run folders kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    _table(results)
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs; load average "
          f"{load0} before, {' '.join(f'{x:.2f}' for x in os.getloadavg())} after; "
          f"speed_s {speed0:.2f} s before, {speed_s():.2f} s after)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
