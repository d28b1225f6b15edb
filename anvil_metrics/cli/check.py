"""`anvil check`: does the server still answer correctly? The functional and multimodal
suites, one request at a time, into an anvil-serving.checks/v1 file.

Why its own module: a check measures nothing; it asks questions and judges the answers
(`checks/`), so its flags (suites, time limits, the retrieval's sizes) are its own, and
each suite's line is printed as it ends.
"""

from __future__ import annotations

import argparse
from typing import Any

from anvil_metrics.cli.parsing import Commands, argtype
from anvil_metrics.errors import UsageError
from anvil_metrics.load.optionvalues import timespan, whole
from anvil_metrics.urls import api_key_from_env


def add_check(sub: Commands) -> None:
    """`anvil check SUITE[,SUITE...] --host URL [flags]`."""
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
    ck.add_argument("--context", type=argtype(whole(1024), "--context"), default=131072,
                    help="retrieval's prompt size in tokens (default 131072)")
    ck.add_argument("--near-limit", type=argtype(whole(1024), "--near-limit"), default=None,
                    help="near_limit's prompt size in tokens (default: the server's "
                    "max_model_len minus 4096, rounded down to a thousand)")
    ck.add_argument("--timeout", type=argtype(timespan, "--timeout"), default=120.0,
                    help="one ordinary request's time limit, e.g. 60s, 2m (default 120 s)")
    ck.add_argument("--long-timeout", type=argtype(timespan, "--long-timeout"),
                    default=1800.0, help="one long-context request's time limit (default 30m)")
    ck.add_argument("--seed", type=argtype(whole(0), "--seed"), default=0,
                    help="retrieval's keys, values and depths (default 0)")
    ck.add_argument("--max-tokens", type=argtype(whole(1), "--max-tokens"), default=None,
                    help="cap every answer's max_tokens (default: each suite's own, up to "
                    "4096, room for a thinking model); a model that never stops costs this "
                    "many tokens per question")
    ck.add_argument("--transport", default=None,
                    help="multimodal: how images reach the model, recorded as given "
                    "(e.g. cpu, gpu)")


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
