"""`anvil run`, `anvil capacity`, `anvil postprocess` and `anvil prompts`: load on a server
and what the run's records become.

Why its own module: these are the commands that measure (a run, one run per step of a
capacity search), turn a run's raw records into benchmark.json, and size the prompts a
run sends; their flags come from the one option table (`load.options`) the Locust plugin
reads too. Like every `cli/` module, only this prints its commands' lines.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from anvil_metrics.cli.parsing import Commands, argtype
from anvil_metrics.errors import ExitCode, UsageError
from anvil_metrics.load.options import RUN_OPTIONS, Option, option, run_options
from anvil_metrics.load.optionvalues import positive, text, timespan, tokenizer_file, whole
from anvil_metrics.urls import api_key_from_env


def _slos(flag: str, v: str) -> Any:
    from anvil_metrics.runs.capacity import parse_slos

    return parse_slos(v, flag)


def _sizes(v: str) -> list[int]:
    try:
        out = [int(x) for x in v.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"--tokens {v!r} is not allowed; expected token "
                                         "counts >= 1, comma-separated, e.g. 4096,32768")
    return out


def _checked_text(o: Option) -> Any:
    """A scenario flag's argparse type: its text, once its kind accepts it (Locust's
    process reads the same text again: `options.locust_args`)."""
    check = argtype(o.parse, o.flag)

    def conv(v: str) -> str:
        check(v)
        return v
    return conv


def _add_run_options(r: argparse.ArgumentParser) -> None:
    """`anvil run`'s flags, made from `options.OPTIONS` (the table the plugin uses too)."""
    for o in RUN_OPTIONS:
        names = [o.flag, *([o.short] if o.short else [])]
        if o.switch:
            r.add_argument(*names, action="store_true", default=o.default, help=o.help)
        elif o.repeat:
            r.add_argument(*names, action="append", type=argtype(o.parse, o.flag),
                           default=None, help=o.help)
        elif o.parse is text:
            r.add_argument(*names, default=o.default, required=o.required, help=o.help)
        else:
            kind = _checked_text(o) if o.key is not None else argtype(o.parse, o.flag)
            r.add_argument(*names, type=kind, default=o.default, required=o.required,
                           help=o.help)


def add_run(sub: Commands) -> None:
    """`anvil run SCENARIO --host URL [flags]`."""
    r = sub.add_parser("run", help="run a scenario headless against an endpoint")
    r.add_argument("scenario", help="scenario TOML file, e.g. scenarios/smoke.toml")
    _add_run_options(r)


def add_postprocess(sub: Commands) -> None:
    """`anvil postprocess RUN_DIR`."""
    pp = sub.add_parser("postprocess", help="build benchmark.json from a run folder")
    pp.add_argument("run_dir")


def add_prompts(sub: Commands) -> None:
    """`anvil prompts --host URL [--tokens N,N]`."""
    pr = sub.add_parser("prompts", help="build prompts of planned sizes; print planned vs "
                        "the server's count")
    pr.add_argument("--host", "-H", required=True, help="endpoint, e.g. http://127.0.0.1:8000")
    pr.add_argument("--tokens", type=_sizes, default=[4096, 32768],
                    help="planned sizes, comma-separated (default 4096,32768)")
    pr.add_argument("--model", default=None)
    pr.add_argument("--seed", type=argtype(whole(0), "--seed"), default=0)
    pr.add_argument("--api-key", default=None,
                    help="API key (default: $ANVIL_API_KEY or $OPENAI_API_KEY); never stored")
    pr.add_argument("--tokenizer", type=argtype(tokenizer_file, "--tokenizer"), default=None,
                    help="count with this tokenizer.json instead of asking the server")


# `anvil run`'s options every step of `anvil capacity` takes too
_CAPACITY_OPTIONS = tuple(option(dest) for dest in (
    "model", "max_tokens", "warmup_requests", "api_key", "goodput", "processes", "results_dir",
    "stuck_after", "progress_every", "quiet", "reset_prefix_cache", "server_profile",
    "hook_optional", "balance"))


def add_capacity(sub: Commands) -> None:
    """`anvil capacity SCENARIO --host URL --slo ...`."""
    c = sub.add_parser("capacity", help="find the largest load that meets every SLO "
                       "(one run per step: double, then bisect)")
    c.add_argument("scenario", help="scenario TOML file, e.g. scenarios/smoke.toml")
    c.add_argument("--host", "-H", required=True, help="endpoint, e.g. http://127.0.0.1:8000; "
                   "replicas: URL,URL (--balance)")
    c.add_argument("--slo", required=True, type=argtype(_slos, "--slo"),
                   help='e.g. "ttft_p95_ms<=2000,e2e_p99_ms<=30000" (metrics keys, any '
                   "percentile of a request field, error_rate)")
    c.add_argument("--by", choices=("users", "rate"), default="users",
                   help="search over users (closed loop) or a rate (open loop)")
    c.add_argument("--start", type=argtype(positive, "--start"), default=1.0,
                   help="first load tried")
    c.add_argument("--max", type=argtype(positive, "--max"), default=None,
                   help="largest load tried (default: 256 users, or 1000 requests/s)")
    c.add_argument("--rate-resolution", type=argtype(positive, "--rate-resolution"),
                   default=1.0, help="by rate: stop bisecting at this many requests/s")
    per = c.add_mutually_exclusive_group()
    per.add_argument("--step-duration", type=argtype(timespan, "--step-duration"),
                     help="each step runs this long (default 60s)")
    per.add_argument("--step-requests", type=argtype(whole(1), "--step-requests"),
                     help="each step runs this many requests")
    c.add_argument("--users", "-u", type=argtype(whole(1), "--users"), default=None,
                   help="by rate: the pool of users (requests in flight at most; default: "
                   "the scenario's concurrency)")
    for o in _CAPACITY_OPTIONS:
        if o.switch:
            c.add_argument(o.flag, action="store_true", default=o.default, help=o.help)
        else:
            c.add_argument(o.flag, type=None if o.parse is text else argtype(o.parse, o.flag),
                           default=o.default, help=o.help)


def cmd_run(a: argparse.Namespace) -> int:
    from anvil_metrics.urls import strip_credentials

    values = {o.dest: getattr(a, o.dest) for o in RUN_OPTIONS}
    values["scenario"] = a.scenario
    opts = run_options(values, host=a.host, users=a.users, api_key=a.api_key,
                       headers=a.header or ())
    sc = opts.scenario
    # the run's machinery (numpy, gevent, the document builder: ~0.25 s) only once the
    # options hold: a mistake is answered at once
    from anvil_metrics.live.runerror import ERROR_FILE
    from anvil_metrics.post import cachecheck
    from anvil_metrics.post.docscan import scan_benchmark
    from anvil_metrics.runs.launch import plan_text, prepare_run, run_scenario, summary_lines

    if opts.tokenizer_path:  # a bad file is the user's mistake: say so before any run folder
        from anvil_metrics.prep.counting import local_text_counter

        local_text_counter(opts.tokenizer_path)
        values["tokenizer"] = os.path.abspath(opts.tokenizer_path)
    if sc.energy is not None and sc.energy.source == "nvml":  # no NVML: before any load
        from anvil_metrics.telemetry.energy import nvml_problem

        if (problem := nvml_problem()) is not None:
            raise UsageError(problem)
    run_dir = prepare_run(a.host, opts.results_dir)
    print(f"running {plan_text(sc, opts.users)} against {strip_credentials(a.host)}; "
          f"Locust log: {run_dir / 'locust.log'}", flush=True)
    result = run_scenario(sc, a.scenario, a.host, users=opts.users, run_dir=run_dir,
                          values=values, api_key=a.api_key, run_time_s=a.run_time,
                          processes=a.processes, headers=dict(a.header or ()),
                          display=_display(opts.progress_every_s))
    signalled = _signal_exit(result.stopped_by_signal)
    if result.benchmark_path is None:
        if signalled is not None:  # stopped in its set-up: error.json says where
            print(f"\n{result.error or f'anvil: {result.stopped_by_signal}: the run stopped'}"
                  f"; see {result.run_dir / ERROR_FILE}", file=sys.stderr)
            return signalled
        if result.error:  # anvil's own one-line reason (e.g. the server cannot be reached)
            print(result.error, file=sys.stderr)
        else:
            log_lines = result.log_path.read_text(errors="replace").strip().splitlines()
            print("\n".join(log_lines[-15:]), file=sys.stderr)
            print(f"anvil: the run wrote no benchmark.json (Locust exit code "
                  f"{result.locust_exit_code}); its log is {result.log_path}", file=sys.stderr)
        return 2 if result.locust_exit_code == 2 else 1
    # the document without its rows (a million of them would take ~2.6 GB to load)
    params = cachecheck.run_params(result.benchmark_path.parent)
    scanned = scan_benchmark(result.benchmark_path, cachecheck.limit(params))
    aborted = scanned.doc.get("ended_by") == "aborted"
    # the run failed (e.g. no worker could set up); a signal's error.json is no failure
    if result.error and scanned.doc.get("ended_by") not in ("aborted", "signal"):
        print(result.error, file=sys.stderr)
        print(f"anvil: the run failed; what it wrote is in {result.run_dir}", file=sys.stderr)
        return ExitCode.PROBLEM
    for line in summary_lines(scanned.doc):
        print(line)
    _warn(cachecheck.warning_for_scan(scanned, params))
    print(f"result: {result.benchmark_path}")
    if aborted:  # every request so far is in the file; the cause, last, on one line
        print(f"anvil: run aborted: {scanned.doc.get('end_reason')}", file=sys.stderr)
        return ExitCode.ABORTED
    if scanned.doc.get("ended_by") == "signal":  # kept, marked partial: say so, last
        print(f"anvil: run stopped: {scanned.doc.get('end_reason')}; what it measured is "
              f"kept, marked partial", file=sys.stderr)
        # Locust exits 130/143 itself for a run a signal ended (`stopsignals`)
        return signalled if signalled is not None else result.locust_exit_code
    return _failures_exit(scanned.doc, opts.fail_on_error_rate, a.exit_code_on_error,
                          result.locust_exit_code)


def _failures_exit(doc: dict[str, Any], fail_on_error_rate: float | None,
                   exit_code_on_error: int | None, locust_exit_code: int) -> int:
    """A finished run's exit code (the README's table): 4 when its measured requests failed
    (`post.outcome`; its line, last), else Locust's own code when the user gave
    --exit-code-on-error and Locust exited with it (a request Locust counted failed), else 0."""
    from anvil_metrics.post.outcome import failure_verdict

    verdict = failure_verdict(doc, fail_on_error_rate)
    if verdict is not None:
        print(verdict, file=sys.stderr)
        return ExitCode.FAILED
    if exit_code_on_error and locust_exit_code == exit_code_on_error:
        print(f"anvil: a request failed (Locust counts warm-ups too); exit code "
              f"{exit_code_on_error}, as --exit-code-on-error asks", file=sys.stderr)
        return exit_code_on_error
    return ExitCode.OK


def _display(every_s: float | None, title: str | None = None) -> Any:
    """The live progress on stderr (in place on a terminal, else a plain line every
    `every_s`; None: --quiet): stdout keeps the summary (`runs/display.py`)."""
    from anvil_metrics.runs.display import make_display

    return make_display(sys.stderr, every_s=every_s, title=title)


def _signal_exit(name: str | None) -> int | None:
    """The exit code for a run this process was signalled during: 130 (SIGINT), 143."""
    return ExitCode[name] if name in ("SIGINT", "SIGTERM") else None


def _warn(line: str | None) -> None:
    if line:
        print(f"warning: {line}", file=sys.stderr)


def cmd_capacity(a: argparse.Namespace) -> int:
    from anvil_metrics.runs.capacity import run_capacity

    by = a.by
    start: float = a.start
    maximum: float = a.max if a.max is not None else (256.0 if by == "users" else 1000.0)
    if by == "users":
        if start != int(start) or maximum != int(maximum):
            raise UsageError(f"--start {start:g} / --max {maximum:g}: by users, whole numbers")
        start, maximum = int(start), int(maximum)  # users are counted, never 4.0
    if start > maximum:
        raise UsageError(f"--start {start:g} is above --max {maximum:g}; start at or below it")
    values: dict[str, Any] = {o.dest: None for o in RUN_OPTIONS}
    values.update({o.dest: getattr(a, o.dest) for o in _CAPACITY_OPTIONS}, scenario=a.scenario)
    if a.step_requests:
        values["requests"] = a.step_requests
    else:
        values["duration"] = a.step_duration or 60.0
    checked = run_options(values, host=a.host, users=None, api_key=None)  # bad input: now
    print(f"capacity search by {by} for {', '.join(s.text() for s in a.slo)}: start "
          f"{start:g}, at most {maximum:g}", flush=True)

    def show(step: Any) -> None:
        values_text = ", ".join(f"{k} {'null' if v is None else f'{v:,.3f}'}"
                                for k, v in step.values.items())
        print(f"  {by} {step.load:g}: {'meets' if step.meets else 'fails'} ({values_text})"
              + ("" if step.trusted else "  NOT TRUSTED"), flush=True)

    doc, folder = run_capacity(
        a.scenario, a.host, by=by, slos=a.slo, start=start, maximum=maximum,
        resolution=1.0 if by == "users" else a.rate_resolution, values=values,
        users=a.users, api_key=a.api_key, processes=a.processes,
        results_dir=a.results_dir, on_step=show,
        display=lambda title: _display(checked.progress_every_s, title))
    if doc["stopped"]:
        print(f"anvil capacity: stopped: {doc['stopped']}", file=sys.stderr)
        print(f"result: {folder}/capacity.json")
        return 1
    cap = doc["capacity"]
    unit = "users" if by == "users" else "requests/s"
    answer = ("no load tried meets the SLO" if cap is None else
              f"capacity: {cap:g} {unit}" + (" (the search's --max: raise it to look further)"
                                             if cap >= maximum else ""))
    print(answer)
    print(f"result: {folder}/capacity.json")
    return 0


def cmd_postprocess(a: argparse.Namespace) -> int:
    from anvil_metrics.post.postprocess import postprocess_run
    from anvil_metrics.runs.launch import summary_lines

    folder = Path(a.run_dir)
    if not (folder / "requests.jsonl").is_file():  # the user's path: a usage error, as
        # `report` and `verify` say it (a damaged file inside is a problem found: exit 1)
        what = "is not a folder" if not folder.is_dir() else "has no requests.jsonl"
        raise UsageError(f"postprocess: {a.run_dir!r} {what}; pass a run folder made by "
                         f"anvil (it holds requests.jsonl)")
    done = postprocess_run(folder)
    for line in summary_lines(done.summary):
        print(line)
    _warn(done.cache_warning)
    print(f"result: {done.path}")
    return 0


def cmd_prompts(a: argparse.Namespace) -> int:
    from anvil_metrics.prep.sizing import measure_sizes

    key = a.api_key or api_key_from_env()
    rep = measure_sizes(a.host, a.tokens, model=a.model, api_key=key, seed=a.seed,
                        tokenizer_path=a.tokenizer)
    print(f"endpoint {rep.base_url}  model {rep.model}  calibration {rep.method} "
          f"({rep.tokens_per_word:.4f} tokens/word; counted by {rep.counter})")
    print(f"{'planned':>10}{'counted':>10}{'error %':>10}{'build ms':>10}")
    for r in rep.results:
        err = "null" if r.error_pct is None else f"{r.error_pct:+.3f}"
        print(f"{r.planned_tokens:>10}{r.counted_tokens or 'null':>10}{err:>10}"
              f"{r.build_ms:>10.1f}")
    return 0
