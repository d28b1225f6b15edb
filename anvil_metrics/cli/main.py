"""The `anvil` command — the only module that prints.

    anvil run SCENARIO.toml --host URL [--model M] [--users N] [--requests N]
              [--max-tokens N] [--warmup-requests N] [--results-dir DIR]
              [--duration 5m] [--rate R [--arrival poisson|gamma|constant]] [--goodput ...]
    anvil capacity SCENARIO.toml --host URL --slo "ttft_p95_ms<=2000" [--by users|rate]
    anvil postprocess RUN_DIR         raw records -> benchmark.json
    anvil verify FILE.json            recompute every derived value; exit 1 on a mismatch
                                      (a benchmark, or a summary: from its campaign's runs)
    anvil sim [options]               the built-in OpenAI-compatible simulator
    anvil demo                        simulator + smoke scenario, end to end
    anvil campaign run CAMPAIGN.toml [--results-dir D] [--dry-run] [--before-run-timeout S]
                                      run a campaign's plan, resumably; --dry-run prints it
    anvil summarize CAMPAIGN_DIR [-o summary.json]
                                      a campaign folder -> public-benchmark-summary/v1
                                      (JSON) and summary.md beside it

Library code raises `AnvilError`s; here a `UsageError` becomes one line on stderr and exit
code 2, any other `AnvilError` one line and exit 1. A user mistake never shows a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anvil_metrics.errors import AnvilError, UsageError
from anvil_metrics.load.options import (
    RUN_OPTIONS,
    Parse,
    option,
    positive,
    run_options,
    text,
    timespan,
    tokenizer_file,
    whole,
)
from anvil_metrics.urls import api_key_from_env


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"anvil: {message} (see '{self.prog} --help')\n")


def _argtype(parse: Parse, flag: str) -> Callable[[str], Any]:
    """An argparse type from an option's check: its UsageError becomes argparse's error
    (one line naming the flag, the value and what is allowed)."""
    def conv(v: str) -> Any:
        try:
            return parse(flag, v)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


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


def _add_run_options(r: argparse.ArgumentParser) -> None:
    """`anvil run`'s flags, made from `options.OPTIONS` (the table the plugin uses too)."""
    for o in RUN_OPTIONS:
        names = [o.flag, *([o.short] if o.short else [])]
        if o.switch:
            r.add_argument(*names, action="store_true", default=o.default, help=o.help)
        elif o.parse is text:
            r.add_argument(*names, default=o.default, required=o.required, help=o.help)
        else:
            r.add_argument(*names, type=_argtype(o.parse, o.flag), default=o.default,
                           required=o.required, help=o.help)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="anvil", description="LLM serving benchmarks on Locust, exact numbers.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a scenario headless against an endpoint")
    r.add_argument("scenario", help="scenario TOML file, e.g. scenarios/smoke.toml")
    _add_run_options(r)

    pp = sub.add_parser("postprocess", help="build benchmark.json from a run folder")
    pp.add_argument("run_dir")

    v = sub.add_parser("verify", help="recompute and check every figure of a benchmark "
                       "or summary file")
    v.add_argument("file")

    rp = sub.add_parser("report", help="draw a run, sweep, capacity search or campaign "
                        "folder as report.html and PNGs (needs the [report] extra)")
    rp.add_argument("folder", help="a run folder (requests.jsonl), a capacity search "
                    "(capacity.json) or a campaign folder (campaign.json)")
    rp.add_argument("--out", default=None, help="write report.html and the PNGs here "
                    "(default: into the folder itself)")

    sub.add_parser("sim", help="start the built-in simulator (see 'anvil sim --help')",
                   add_help=False)

    pr = sub.add_parser("prompts", help="build prompts of planned sizes; print planned vs "
                        "the server's count")
    pr.add_argument("--host", "-H", required=True, help="endpoint, e.g. http://127.0.0.1:8000")
    pr.add_argument("--tokens", type=_sizes, default=[4096, 32768],
                    help="planned sizes, comma-separated (default 4096,32768)")
    pr.add_argument("--model", default=None)
    pr.add_argument("--seed", type=_argtype(whole(0), "--seed"), default=0)
    pr.add_argument("--api-key", default=None,
                    help="API key (default: $ANVIL_API_KEY or $OPENAI_API_KEY); never stored")
    pr.add_argument("--tokenizer", type=_argtype(tokenizer_file, "--tokenizer"), default=None,
                    help="count with this tokenizer.json instead of asking the server")

    sub.add_parser("metrics", help="list every figure anvil computes: name, unit, formula")

    ck = sub.add_parser("check", help="functional and multimodal checks: does the server "
                        "still answer correctly? (anvil-serving.checks/v1)")
    ck.add_argument("suites", metavar="SUITE[,SUITE...]",
                    help="suites to run, comma-separated, or 'all' (every suite but "
                    "near_limit): coding, json, tools, streaming_tools, tool_result_recovery, "
                    "responses_subset, reasoning_leakage, retrieval, near_limit, quality, "
                    "multimodal")
    ck.add_argument("--host", "-H", required=True, help="endpoint, e.g. http://127.0.0.1:8000")
    ck.add_argument("--model", default=None, help="model to ask (default: the first the "
                    "server lists)")
    ck.add_argument("--out", default="checks.json", help="where to write the results "
                    "(default checks.json)")
    ck.add_argument("--api-key", default=None,
                    help="API key (default: $ANVIL_API_KEY or $OPENAI_API_KEY); never stored")
    ck.add_argument("--context", type=_argtype(whole(1024), "--context"), default=131072,
                    help="retrieval's prompt size in tokens (default 131072)")
    ck.add_argument("--near-limit", type=_argtype(whole(1024), "--near-limit"), default=None,
                    help="near_limit's prompt size in tokens (default: the server's "
                    "max_model_len minus 4096, rounded down to a thousand)")
    ck.add_argument("--timeout", type=_argtype(timespan, "--timeout"), default=120.0,
                    help="one ordinary request's time limit, e.g. 60s, 2m (default 120 s)")
    ck.add_argument("--long-timeout", type=_argtype(timespan, "--long-timeout"),
                    default=1800.0, help="one long-context request's time limit (default 30m)")
    ck.add_argument("--seed", type=_argtype(whole(0), "--seed"), default=0,
                    help="retrieval's keys, values and depths (default 0)")
    ck.add_argument("--max-tokens", type=_argtype(whole(1), "--max-tokens"), default=None,
                    help="cap every answer's max_tokens (default: each suite's own, up to "
                    "4096, room for a thinking model); a model that never stops costs this "
                    "many tokens per question")
    ck.add_argument("--transport", default=None,
                    help="multimodal: how images reach the model, recorded as given "
                    "(e.g. cpu, gpu)")

    c = sub.add_parser("capacity", help="find the largest load that meets every SLO "
                       "(one run per step: double, then bisect)")
    c.add_argument("scenario", help="scenario TOML file, e.g. scenarios/smoke.toml")
    c.add_argument("--host", "-H", required=True, help="endpoint, e.g. http://127.0.0.1:8000")
    c.add_argument("--slo", required=True, type=_argtype(_slos, "--slo"),
                   help='e.g. "ttft_p95_ms<=2000,e2e_p99_ms<=30000" (metrics keys, any '
                   "percentile of a request field, error_rate)")
    c.add_argument("--by", choices=("users", "rate"), default="users",
                   help="search over users (closed loop) or a rate (open loop)")
    c.add_argument("--start", type=_argtype(positive, "--start"), default=1.0,
                   help="first load tried")
    c.add_argument("--max", type=_argtype(positive, "--max"), default=None,
                   help="largest load tried (default: 256 users, or 1000 requests/s)")
    c.add_argument("--rate-resolution", type=_argtype(positive, "--rate-resolution"),
                   default=1.0, help="by rate: stop bisecting at this many requests/s")
    per = c.add_mutually_exclusive_group()
    per.add_argument("--step-duration", type=_argtype(timespan, "--step-duration"),
                     help="each step runs this long (default 60s)")
    per.add_argument("--step-requests", type=_argtype(whole(1), "--step-requests"),
                     help="each step runs this many requests")
    c.add_argument("--users", "-u", type=_argtype(whole(1), "--users"), default=None,
                   help="by rate: the pool of users (requests in flight at most; default: "
                   "the scenario's concurrency)")
    for flag in ("--model", "--max-tokens", "--warmup-requests", "--api-key", "--goodput",
                 "--processes", "--results-dir"):
        o = option(flag.lstrip("-").replace("-", "_"))
        c.add_argument(flag, type=None if o.parse is text else _argtype(o.parse, flag),
                       default=o.default, help=o.help)

    cp = sub.add_parser("campaign", help="many runs toward one promotion decision")
    csub = cp.add_subparsers(dest="campaign_command", required=True, parser_class=_Parser)
    cr = csub.add_parser("run", help="check a campaign file and run its plan")
    cr.add_argument("campaign", help="campaign TOML file, e.g. "
                    "scenarios/campaigns/fp8-vs-nvfp4.toml")
    cr.add_argument("--results-dir", default="results",
                    help="the campaign's folder is made here, named after it (default results)")
    cr.add_argument("--dry-run", action="store_true",
                    help="check the file and print the plan; run nothing")
    cr.add_argument("--before-run-timeout", type=_argtype(timespan, "--before-run-timeout"),
                    default=600.0, help="how long a variant's before_run may take, e.g. 90s, 10m "
                    "(default 600 s)")

    sm = sub.add_parser("summarize", help="summarize a campaign folder: public-benchmark-"
                        "summary/v1 JSON and summary.md, with the gates' decision")
    sm.add_argument("campaign_dir", help="the folder 'anvil campaign run' made")
    sm.add_argument("-o", "--output", default=None,
                    help="the JSON's path, ending in .json (default CAMPAIGN_DIR/summary.json); "
                    "summary.md is written beside it")

    d = sub.add_parser("demo", help="simulator + smoke scenario, end to end")
    d.add_argument("--results-dir", default="results")
    return p


def cmd_run(a: argparse.Namespace) -> int:
    from anvil_metrics.urls import strip_credentials

    values = {o.dest: getattr(a, o.dest) for o in RUN_OPTIONS}
    values["scenario"] = a.scenario
    opts = run_options(values, host=a.host, users=a.users, api_key=a.api_key)
    sc = opts.scenario
    # the run's machinery (numpy, gevent, the document builder: ~0.25 s) only once the
    # options hold: a mistake is answered at once
    from anvil_metrics.post import cachecheck
    from anvil_metrics.post.docscan import scan_benchmark
    from anvil_metrics.runs.launch import plan_text, prepare_run, run_scenario, summary_lines

    if opts.tokenizer_path:  # a bad file is the user's mistake: say so before any run folder
        from anvil_metrics.prep.counting import local_text_counter

        local_text_counter(opts.tokenizer_path)
        values["tokenizer"] = os.path.abspath(opts.tokenizer_path)
    run_dir = prepare_run(a.host, opts.results_dir)
    print(f"running {plan_text(sc, opts.users)} against {strip_credentials(a.host)}; "
          f"Locust log: {run_dir / 'locust.log'}", flush=True)
    result = run_scenario(sc, a.scenario, a.host, users=opts.users, run_dir=run_dir,
                          values=values, api_key=a.api_key, run_time_s=a.run_time,
                          processes=a.processes)
    if result.benchmark_path is None:
        if result.error:  # anvil's own one-line reason (e.g. the server cannot be reached)
            print(result.error, file=sys.stderr)
        else:
            log_lines = result.log_path.read_text(errors="replace").strip().splitlines()
            print("\n".join(log_lines[-15:]), file=sys.stderr)
            print(f"anvil: the run wrote no benchmark.json (Locust exit code "
                  f"{result.locust_exit_code}); its log is {result.log_path}", file=sys.stderr)
        return 2 if result.locust_exit_code == 2 else 1
    if result.error:  # the run failed (e.g. no worker could set up): its file says little
        print(result.error, file=sys.stderr)
        print(f"anvil: the run failed; what it wrote is in {result.run_dir}", file=sys.stderr)
        return 1
    # the document without its rows (a million of them would take ~2.6 GB to load)
    params = cachecheck.run_params(result.benchmark_path.parent)
    scanned = scan_benchmark(result.benchmark_path, cachecheck.limit(params))
    for line in summary_lines(scanned.doc):
        print(line)
    _warn(cachecheck.warning_for_scan(scanned, params))
    print(f"result: {result.benchmark_path}")
    return 0


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
    values.update(scenario=a.scenario, model=a.model, max_tokens=a.max_tokens,
                  warmup_requests=a.warmup_requests, goodput=a.goodput,
                  results_dir=a.results_dir)
    if a.step_requests:
        values["requests"] = a.step_requests
    else:
        values["duration"] = a.step_duration or 60.0
    run_options(values, host=a.host, users=None, api_key=None)  # bad input: one line, now
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
        results_dir=a.results_dir, on_step=show)
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

    done = postprocess_run(Path(a.run_dir))
    for line in summary_lines(done.summary):
        print(line)
    _warn(done.cache_warning)
    print(f"result: {done.path}")
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    from anvil_metrics.post.docscan import verify_file
    from anvil_metrics.post.schema import SCHEMA
    from anvil_metrics.runs.launch import load_benchmark
    from anvil_metrics.schemas.build import check
    from anvil_metrics.summary import verify as summaryverify
    from anvil_metrics.summary.verify import is_summary, read_small_json

    path = Path(a.file)
    if not path.exists():
        raise UsageError(f"verify: {a.file!r} does not exist; pass a benchmark.json or "
                         "summary.json path")
    doc = read_small_json(path)
    if is_summary(doc):
        return _verify_summary(doc, path)
    if isinstance(doc, dict) and doc.get("schema") == "anvil-serving.checks/v1":
        return _verify_checks(doc, path)
    problems = verify_file(path, load=load_benchmark)  # a file that cannot be read: raises
    if doc is not None:  # parsed, and a JSON object (else verify_file has raised)
        said, breaches = check(doc, SCHEMA)
        problems = [*breaches, *problems]
    else:  # too big to hold whole for a schema validator; verify's own checks cover it
        limit = summaryverify.SMALL_BYTES
        size = f"{limit >> 20} MB" if limit >= 1 << 20 else f"{limit >> 10} KB"
        said = (f"schema check skipped: the file is over {size} (anvil verify's own checks "
                "cover every field)")
    if _mismatches(path, said, problems):
        return 1
    print(f"{path}: every per-request value and aggregate recomputes exactly")
    return 0


def _mismatches(path: Path, said: str, problems: list[str]) -> bool:
    """Print what the file was checked against and each problem; True when there were any."""
    print(said)
    for msg in problems:
        print(f"MISMATCH {msg}")
    if problems:
        print(f"{path}: {len(problems)} mismatch(es)")
    return bool(problems)


def _verify_checks(doc: dict[str, Any], path: Path) -> int:
    from anvil_metrics.checks.docverify import SCHEMA, verify_checks
    from anvil_metrics.schemas.build import check

    said, breaches = check(doc, SCHEMA)
    if _mismatches(path, said, [*breaches, *verify_checks(doc)]):
        return 1
    print(f"{path}: every suite's result, passed and total follow from its cases")
    return 0


def _verify_summary(doc: dict[str, Any], path: Path) -> int:
    from anvil_metrics.schemas.build import check
    from anvil_metrics.summary.folder import SCHEMA
    from anvil_metrics.summary.verify import verify_summary

    said, breaches = check(doc, SCHEMA)
    check_ = verify_summary(doc, path)
    if _mismatches(path, said, [*breaches, *check_.problems]):
        return 1
    if check_.folder is None:
        print(f"{path}: shape checked only, figures not recomputed: {check_.why_shape_only}")
        return 0
    print(f"{path}: every figure recomputes from {check_.runs} runs in {check_.folder}")
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


def cmd_demo(a: argparse.Namespace) -> int:
    from anvil_metrics.load.scenario import load_scenario
    from anvil_metrics.post.verify import verify_benchmark
    from anvil_metrics.runs.launch import load_benchmark, prepare_run, run_scenario, summary_lines
    from anvil_metrics.runs.simproc import pinned_apart, start_simulator

    scenario_path = Path(__file__).resolve().parents[2] / "scenarios" / "smoke.toml"
    if not scenario_path.exists():
        raise UsageError(f"demo: {scenario_path} is missing; run from an anvil checkout")
    sc = load_scenario(scenario_path)
    # the role chunk with the first token, as vLLM sends it: the server's TTFT and the
    # client's first chunk then compare like with like (the summary's server lines)
    with start_simulator(["--max-context", str(sc.max_context_tokens),
                          "--role-chunk", "with-first-token"]) as sim, \
            pinned_apart(sim.pid) as cpus:  # a server on its own CPU, as on its own machine
        print(f"simulator: {sim.url} (pid {sim.pid}; {cpus})")
        run_dir = prepare_run(sim.url, a.results_dir)
        print(f"running {scenario_path.name}: {sc.requests} requests, {sc.concurrency} users; "
              f"Locust log: {run_dir / 'locust.log'}", flush=True)
        result = run_scenario(sc, str(scenario_path), sim.url, users=sc.concurrency,
                              run_dir=run_dir)
    if result.benchmark_path is None:
        print(f"anvil: demo run failed; see {result.log_path}", file=sys.stderr)
        return 1
    doc = load_benchmark(result.benchmark_path)
    for line in summary_lines(doc):
        print(line)
    problems = verify_benchmark(doc)
    print(f"verify: {'OK' if not problems else f'{len(problems)} mismatches'}")
    print(f"result: {result.benchmark_path}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("report: skipped (the pictures need pip install 'anvil-metrics[report]')")
    else:
        from anvil_metrics.report.build import make_report

        print(f"report: {make_report(result.benchmark_path.parent).html_path}")
    return 0 if not problems else 1


def cmd_campaign(a: argparse.Namespace) -> int:
    from anvil_metrics.campaign.plan import plan, plan_lines
    from anvil_metrics.campaign.runner import locust_runner, run_campaign
    from anvil_metrics.campaign.spec import load_campaign

    campaign = load_campaign(a.campaign)  # every problem of the file, before anything runs
    runs = plan(campaign)
    if a.dry_run:
        for line in plan_lines(campaign, runs, a.results_dir):
            print(line)
        return 0
    outcome = run_campaign(campaign, a.results_dir, runner=locust_runner(campaign, os.environ),
                           progress=lambda line: print(line, flush=True),
                           before_run_timeout_s=a.before_run_timeout)
    print(f"campaign {campaign.name}: {outcome.done} of {len(runs)} runs done "
          f"({outcome.ran} run now); state: {outcome.folder / 'campaign.json'}")
    for folder, why in outcome.failed:
        print(f"anvil: run {folder} failed: {why}", file=sys.stderr)
    for variant, why in outcome.checks_failed:
        print(f"anvil: the checks of {variant} did not run: {why}", file=sys.stderr)
    return outcome.exit_code


def cmd_summarize(a: argparse.Namespace) -> int:
    from anvil_metrics.summary.folder import (
        output_paths,
        read_campaign_folder,
        summary_document,
        write_summary,
    )
    from anvil_metrics.summary.markdown import markdown

    json_path, md_path = output_paths(a.campaign_dir, a.output)  # bad -o: before any work
    folder = read_campaign_folder(a.campaign_dir)
    doc = summary_document(folder)
    write_summary(doc, markdown(doc), json_path, md_path)
    kept = doc["campaign"]["summarized_runs"]
    print(f"campaign {doc['campaign']['name']}: {kept} of {doc['campaign']['planned_runs']} "
          f"runs summarized, {len(doc['retained_failures'])} retained failure(s)")
    print(f"decision: {doc['decision'] or 'none'}")
    for reason in doc["decision_reasons"]:
        print(f"  {reason}")
    print(f"result: {json_path}")
    print(f"report: {md_path}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from anvil_metrics.report.build import make_report

    r = make_report(a.folder, a.out)
    print(f"{r.kind} report: {r.html_path} ({len(r.png_paths)} figures, "
          f"{r.elapsed_s:.1f} s)")
    for png in r.png_paths:
        print(f"  {png}")
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from anvil_metrics.checks.runner import parse_suites, run_checks, write_checks
    from anvil_metrics.checks.suite import CheckOptions

    suites = parse_suites(a.suites)  # a bad name: one line, before anything is asked
    if not a.out.endswith(".json"):
        raise UsageError(f"--out {a.out!r} must end in .json")
    options = CheckOptions(context_tokens=a.context, near_limit_tokens=a.near_limit,
                           timeout_s=a.timeout, long_timeout_s=a.long_timeout, seed=a.seed,
                           transport=a.transport, max_tokens=a.max_tokens)

    def show(result: Any) -> None:
        why = f"  ({result.error})" if result.error else ""
        print(f"{result.suite:<22} {result.result:<5} {result.passed}/{result.total} "
              f"in {result.elapsed_s:.1f} s{why}", flush=True)

    doc = run_checks(a.host, suites, model=a.model, api_key=a.api_key or api_key_from_env(),
                     options=options, on_suite=show)
    write_checks(a.out, doc)
    results = [c["result"] for c in doc["checks"].values()]
    print(f"model {doc['model']}: {results.count('pass')} passed, {results.count('fail')} "
          f"failed, {results.count('error')} errors; result: {a.out}")
    return 0 if all(r == "pass" for r in results) else 1


def cmd_metrics(a: argparse.Namespace) -> int:
    from anvil_metrics.catalog import describe

    rows = describe()
    width = max(len(name) for _, name, _, _ in rows)
    block = None
    for where, name, unit, definition in rows:
        if where != block:
            block = where
            print(f"{where}:")
        print(f"  {name:<{width}}  {unit:<8}  {definition}")
    return 0


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds like Ctrl-C: children are stopped, files finished


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _sigterm)
    if argv[:1] == ["sim"]:
        from anvil_metrics.sim.server import main as sim_main

        return sim_main(argv[1:])
    args = build_parser().parse_args(argv)
    handlers = {"run": cmd_run, "capacity": cmd_capacity, "postprocess": cmd_postprocess,
                "verify": cmd_verify,
                "demo": cmd_demo, "prompts": cmd_prompts, "metrics": cmd_metrics,
                "campaign": cmd_campaign, "summarize": cmd_summarize,
                "check": cmd_check, "report": cmd_report}
    try:
        return handlers[args.command](args)
    except AnvilError as e:  # one line per problem (a campaign file may have several)
        for line in str(e).splitlines() or [""]:
            print(f"anvil: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("anvil: interrupted", file=sys.stderr)
        return 130
    except subprocess.SubprocessError as e:
        print(f"anvil: {e}", file=sys.stderr)
        return 1
    finally:
        sys.stdout.flush()
