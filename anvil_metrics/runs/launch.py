"""`anvil run`: one headless Locust run of a scenario, ending in a `benchmark.json`.

It is plain Locust underneath — Locust's own `main()` with `-f <anvil's locustfile>
--headless …` in a child process (`locustmain`: `python -m locust`, started sooner), with
anvil's options under the names they have for `locust` itself — so a run made here and one
made by hand are the same run. What `anvil run` adds: the scenario
is validated (one line, exit 2) before any process starts; the run folder is created first
so Locust's CSVs land in it; Locust's own output goes to `<run_dir>/locust.log`, and the
reason a run failed comes back in `<run_dir>/error.json` (`runerror`), not from that log;
and the result is summarised from the exact records, not from Locust's rounded figures.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics import catalog
from anvil_metrics.errors import Terminated, UsageError
from anvil_metrics.headers import ENV_VAR as HEADERS_ENV
from anvil_metrics.live.progress import PROGRESS_FILE, read_progress
from anvil_metrics.live.recorder import create_run_dir
from anvil_metrics.live.runerror import read_error, write_error
from anvil_metrics.load.options import locust_args
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.post.blockkit import Block
from anvil_metrics.post.blocks import BLOCKS
from anvil_metrics.post.postprocess import BENCHMARK_FILE
from anvil_metrics.runs.display import Display
from anvil_metrics.runs.simproc import stop_process
from anvil_metrics.urls import parse_replicas

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


@dataclass(frozen=True, slots=True)
class RunResult:
    run_dir: Path
    benchmark_path: Path | None
    locust_exit_code: int
    log_path: Path
    error: str | None = None  # the first error anvil logged in the run (`runerror`)
    stopped_by_signal: str | None = None  # "SIGINT" or "SIGTERM": this process got one


def locust_argv(sc: Scenario, scenario_path: str, users: int, run_dir: Path, *,
                values: Mapping[str, Any] | None = None, run_time_s: float | None = None,
                processes: int = 1) -> list[str]:
    """The Locust command line of a headless run: anvil's options from `values` (dest ->
    typed value, see `options.OPTIONS`), except the ones the runner decides itself: the
    scenario, its exact request count and the run folder it created."""
    own = {**(values or {}), "scenario": scenario_path, "requests": sc.requests,
           "run_dir": str(run_dir), "results_dir": str(run_dir.parent)}
    argv = [
        sys.executable, "-m", "anvil_metrics.runs.locustmain", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(users), "-r", str(users),
        "--csv", str(run_dir / "locust"), "--only-summary", *locust_args(own),
    ]
    if own.get("exit_code_on_error") is not None:  # Locust's own flag (the plugin's default: 0)
        argv += ["--exit-code-on-error", str(own["exit_code_on_error"])]
    if run_time_s:
        argv += ["--run-time", f"{math.ceil(run_time_s)}s"]
    if processes > 1:  # Locust forks a master and this many workers
        # on a port of this run's own, on 127.0.0.1 (the workers are forks on this host):
        # Locust's default 5557 on every interface makes two such runs on one host collide
        port = free_local_port()
        argv += ["--processes", str(processes), "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(port), "--master-port", str(port)]
    return argv


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_run(host: str, results_dir: str) -> Path:
    """Check the URL (a usage error before anything starts) and create the run folder."""
    parse_replicas(host)
    try:
        return create_run_dir(results_dir)[1]
    except OSError as e:
        raise UsageError(f"--results-dir {results_dir!r} cannot hold run folders: "
                         f"{e.strerror}; pass a writable directory") from None


def run_scenario(sc: Scenario, scenario_path: str, host: str, *, users: int,
                 run_dir: Path, values: Mapping[str, Any] | None = None,
                 api_key: str | None = None, run_time_s: float | None = None,
                 processes: int = 1, headers: Mapping[str, str] | None = None,
                 display: Display | None = None) -> RunResult:
    """Run Locust headless until `sc.requests` measured requests have finished, its duration
    is over, or it is interrupted. `values`: the user's anvil options (`--model`,
    `--run-nonce`, `--recalibrate`, `--duration`, `--rate`, ...). `display`: where the
    run's progress is drawn meanwhile (`display.py`; None: nowhere)."""
    argv = locust_argv(sc, scenario_path, users, run_dir, values=values,
                       run_time_s=run_time_s, processes=processes)
    # The host (it may carry credentials), the key and the --header flags (one may be a
    # credential) go by environment, never on a command line that `ps` shows.
    env = dict(os.environ, LOCUST_HOST=host)
    if api_key:
        env["ANVIL_API_KEY"] = api_key
    if headers:
        env[HEADERS_ENV] = orjson.dumps(dict(headers)).decode()
    log_path = run_dir / "locust.log"
    with open(log_path, "wb") as log:
        # in this process's group: whoever stops the group (a terminal's Ctrl-C, a campaign
        # ending a run) stops Locust too; a signal sent to this process alone is passed on
        # (`wait_passing_signals`; Locust takes a Ctrl-C and its copy as one: `stopsignals`)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL)
        shown = _show_progress(run_dir, display)
        try:
            stopped_by = wait_passing_signals(proc, shown)
        finally:
            stop_process(proc)  # nothing when it has exited; else SIGTERM, then SIGKILL
            if display is not None:
                shown()  # the last reading, then the terminal back
                display.close()
    bench = run_dir / BENCHMARK_FILE
    error = read_error(run_dir)
    if error is None and not bench.exists():
        write_error(run_dir, _left_nothing(proc.returncode, stopped_by, run_dir))
    return RunResult(run_dir, bench if bench.exists() else None, proc.returncode, log_path,
                     error, stopped_by)


def _left_nothing(returncode: int, stopped_by: str | None, run_dir: Path) -> str:
    """error.json's line, written here when Locust exited without writing benchmark.json or
    error.json (killed, or stopped before anvil's plugin was loaded): a run folder is never
    left with nothing that says why."""
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    cause = f"{stopped_by} stopped it; " if stopped_by else ""
    kept = (f"what it recorded is in requests.jsonl (`anvil postprocess {run_dir}` builds "
            "benchmark.json from it)" if (run_dir / "requests.jsonl").exists()
            else "nothing was measured")
    return (f"anvil: {cause}Locust ({how}) wrote neither benchmark.json nor error.json: "
            f"{kept}; its log is {run_dir / 'locust.log'}")


# after a signal was passed on: how long Locust may take to stop (its --stop-timeout for the
# requests in flight, then writing the run) before it is ended by force
SIGNAL_GRACE_S = 180.0


PROGRESS_POLL_S = 0.5  # how often the parent reads progress.json (written once a second)


def _show_progress(run_dir: Path, display: Display | None) -> Callable[[], None] | None:
    """Read the run's `progress.json` and show it (None before it exists: setting up)."""
    if display is None:
        return None
    path = run_dir / PROGRESS_FILE
    return lambda: display.show(read_progress(path))


def wait_passing_signals(proc: subprocess.Popen,
                         tick: Callable[[], None] | None = None) -> str | None:
    """Wait for Locust to exit, calling `tick` every PROGRESS_POLL_S meanwhile (the
    progress display). A Ctrl-C or SIGTERM of this process is passed on to it, as
    SIGINT or SIGTERM (Locust then stops the run and writes it: `runs/stopsignals.py`), and
    it is waited for again, at most `SIGNAL_GRACE_S`; a second Ctrl-C is passed on too (it
    cancels the requests still in flight). Returns the first signal's name, or None."""
    first: str | None = None
    deadline: float | None = None
    while True:
        try:
            if _waited(proc, deadline, tick):
                return first
        except subprocess.TimeoutExpired:
            return first  # the caller ends it
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (`errors.Terminated`)
            sig = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
            if proc.poll() is not None:
                return first or sig.name
            proc.send_signal(sig)
            if first is None:
                first, deadline = sig.name, time.monotonic() + SIGNAL_GRACE_S


def _waited(proc: subprocess.Popen, deadline: float | None,
            tick: Callable[[], None] | None) -> bool:
    """Wait for `proc` at most PROGRESS_POLL_S (with a `tick`) or until `deadline`: True
    when it has exited; TimeoutExpired past the deadline."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if tick is None:
        proc.wait(left)
        return True
    try:
        proc.wait(PROGRESS_POLL_S if left is None else min(left, PROGRESS_POLL_S))
        return True
    except subprocess.TimeoutExpired:
        if left is not None and left <= PROGRESS_POLL_S:
            raise
    tick()
    return False


def plan_text(sc: Scenario, users: int) -> str:
    """What a run will do, in words: its end and its load."""
    mode = sc.load_mode
    talks = sc.conversation.conversations if sc.conversation is not None else None
    end = (f"{sc.trace.jobs} jobs" if sc.trace is not None and sc.trace.agent else
           f"{talks} conversations" if talks is not None else
           f"{sc.requests} requests" if mode == "budget" else
           f"for {sc.duration_s:g} s" if mode == "duration" else "until stopped (Ctrl-C)")
    if mode == "budget" and sc.duration_s is not None:
        end += f" (at most {sc.duration_s:g} s)"
    if sc.step_users is not None:
        load = (f"steps of {', '.join(map(str, sc.step_users))} users back to back, "
                f"{sc.step_duration_s:g} s each")
    elif sc.step_rates is not None and sc.arrivals is not None:
        load = (f"{sc.arrivals.arrival} arrivals in steps of "
                f"{', '.join(f'{r:g}' for r in sc.step_rates)} requests/s, "
                f"{sc.step_duration_s:g} s each, at most {users} in flight")
    elif sc.trace is not None and sc.trace.agent:
        starts = (f"{sc.arrivals.arrival} job arrivals at {sc.arrivals.rate_rps:g}/s, at most "
                  f"{users} at once" if sc.arrivals is not None else f"{users} at once")
        load = f"agent jobs of {Path(sc.trace.path).name}, {starts}"
        if sc.trace.start_at == "sampled":  # each job's prime is a warm-up of its own
            return f"{end} (each at a sampled turn, primed by one warm-up), {load},"
    elif sc.trace is not None:
        load = (f"the trace {Path(sc.trace.path).name} at {sc.trace.speed:g}x, at most "
                f"{users} in flight")
    elif sc.arrivals is not None:
        what = "conversation starts" if sc.conversation is not None else "requests"
        load = (f"{sc.arrivals.arrival} arrivals at {sc.arrivals.rate_rps:g} {what}/s, at "
                f"most {users} in flight")
    else:
        load = f"{users} users back to back"
    return f"{end} ({sc.warmup_requests} warm-up), {load},"


# (label, p50 key, p95 key, unit) of each figure the summary shows: the catalogue's
SUMMARY_ROWS = tuple((f.label, *f.percentile_names(), f.unit) for f in catalog.SUMMARY_FIELDS)


def summary_lines(doc: dict, blocks: tuple[Block, ...] = BLOCKS) -> list[str]:
    """A short human summary of a benchmark document (the CLI prints it): the run, its
    figures, then each of `blocks`' own lines."""
    m = doc.get("metrics") or {}

    def fmt(v: object) -> str:
        return "null" if v is None else f"{v:,.1f}" if isinstance(v, float) else str(v)

    # closed on purpose: their own outcome, not the server's failures (`failed` counts all)
    aborted = (doc.get("cancel") or {}).get("aborted") or 0
    failed = doc.get("failed")
    lines = [
        f"run {doc.get('run_id')}  model {doc.get('model')}  "
        f"protocol {doc.get('measurement_protocol')}  concurrency {doc.get('concurrency')}",
        f"requests {doc.get('requests')}  completed {doc.get('completed')}  "
        + (f"cancelled on purpose {aborted}  " if aborted else "")
        + f"failed {failed - aborted if isinstance(failed, int) else failed}"
        + f"  wall clock {fmt(doc.get('wall_clock_ms'))} ms  "
        f"throughput {fmt(m.get('throughput_tok_s'))} tok/s out, "
        f"{fmt(m.get('input_throughput_tok_s'))} tok/s in"
        + ("  [PARTIAL]" if doc.get("partial") else ""),
        f"{'metric':<22}{'p50':>12}{'p95':>12}  unit",
    ]
    for label, k50, k95, unit in SUMMARY_ROWS:
        lines.append(f"{label:<22}{fmt(m.get(k50)):>12}{fmt(m.get(k95)):>12}  {unit}")
    calib = doc.get("prompt_calibration") or {}
    err = calib.get("planned_vs_counted_error_pct_max")
    lines.append(
        f"prompt sizing: {calib.get('method')}, planned vs counted error max "
        f"{'null' if err is None else f'{err:.2f} %'}; output tokens from "
        f"{m.get('output_token_sources')}"
    )
    hit = m.get("prefix_cache_hit_avg")
    shared = doc.get("shared_prefix")
    if hit is not None or shared:
        lines.append(
            f"prefix cache: hit avg {'null' if hit is None else f'{hit:.3f}'}"
            + (f"; shared prefix {shared.get('prefix_tokens')} tokens in groups of "
               f"{shared.get('group_size')}" if shared else "")
            + f"; run nonce {doc.get('run_nonce')}")
    for block in blocks:  # each block's own lines, in the registry's order
        if block.summary is not None:
            lines += block.summary(doc)
    for f in [f for f in doc.get("failures") or [] if f.get("kind") != "aborted"][:5]:
        lines.append(f"failure #{f.get('request_index')}: {f.get('kind')} "
                     f"{f.get('http_status') or ''} {f.get('message')}")
    return lines
