"""The `anvil` command — the only module that prints.

    anvil run SCENARIO.toml --host URL [--model M] [--users N] [--requests N]
              [--max-tokens N] [--warmup-requests N] [--results-dir DIR]
              [--duration 5m] [--rate R [--arrival poisson|gamma|constant]] [--goodput ...]
    anvil capacity SCENARIO.toml --host URL --slo "ttft_p95_ms<=2000" [--by users|rate]
    anvil postprocess RUN_DIR         raw records -> benchmark.json
    anvil verify FILE.json            recompute every derived value; exit 1 on a mismatch
                                      (a benchmark, or a summary: from its campaign's runs)
    anvil compare A B [C ...]         runs side by side: each change from A, its bootstrap
                                      interval, beyond noise or not [--json] [--report DIR]
    anvil export RUN [--parquet F] [--vllm-json F]
                                      the rows as Parquet; the run as vllm bench's JSON
    anvil sim [options]               the built-in OpenAI-compatible simulator
    anvil demo                        simulator + smoke scenario, end to end
    anvil campaign run CAMPAIGN.toml [--results-dir D] [--dry-run] [--before-run-timeout S]
                                      run a campaign's plan, resumably; --dry-run prints it
    anvil summarize CAMPAIGN_DIR [-o summary.json]
                                      a campaign folder -> public-benchmark-summary/v1
                                      (JSON) and summary.md beside it

Library code raises `AnvilError`s; here a `UsageError` becomes one line on stderr and exit
code 2, any other `AnvilError` one line and exit 1. A user mistake never shows a traceback.
Each command group's flags and lines are a module of its own beside this one (`run`,
`verify`, `compare`, `export`, `campaign`, `check`, `demo`, `trace`); here they are put together and
dispatched.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections.abc import Callable

from anvil_metrics.cli import campaign, check, compare, demo, export, run, trace, verify
from anvil_metrics.cli.parsing import Commands, Parser
from anvil_metrics.errors import AnvilError, ExitCode, Terminated

# every command's parser, in the order `anvil --help` lists them
_PARSERS: tuple[Callable[[Commands], None], ...] = (
    run.add_run, run.add_postprocess, verify.add_verify, compare.add_compare,
    export.add_export, verify.add_report, demo.add_sim,
    run.add_prompts, trace.add_trace, verify.add_metrics, check.add_check, run.add_capacity,
    campaign.add_campaign, campaign.add_summarize, demo.add_demo)
# what runs each (`sim` is handed its command line before parsing: `main`)
HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.cmd_run, "capacity": run.cmd_capacity, "postprocess": run.cmd_postprocess,
    "verify": verify.cmd_verify, "demo": demo.cmd_demo, "prompts": run.cmd_prompts,
    "metrics": verify.cmd_metrics, "campaign": campaign.cmd_campaign,
    "summarize": campaign.cmd_summarize, "check": check.cmd_check, "report": verify.cmd_report,
    "trace": trace.cmd_trace, "compare": compare.cmd_compare,
    "export": export.cmd_export}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="anvil", description="LLM serving benchmarks on Locust, exact numbers.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in _PARSERS:
        add(sub)
    return p


def _sigterm(signum: int, frame: object) -> None:
    raise Terminated  # unwinds like Ctrl-C: children are stopped, files finished


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _sigterm)
    # Ctrl-C even where it was inherited ignored (a background job of a script: POSIX shells
    # start those with SIGINT ignored, and Python then leaves it so): `kill -INT` of anvil
    # stops it as it stops the run's Locust, which installs its own handler either way
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv[:1] == ["sim"]:
        from anvil_metrics.sim.server import main as sim_main

        return sim_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return HANDLERS[args.command](args)
    except AnvilError as e:  # one line per problem (a campaign file may have several)
        for line in str(e).splitlines() or [""]:
            print(f"anvil: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # the terminal echoed "^C" without a newline
        terminated = isinstance(e, Terminated)
        print(f"\nanvil: {'terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'}",
              file=sys.stderr)
        return ExitCode.SIGTERM if terminated else ExitCode.SIGINT
    except subprocess.SubprocessError as e:
        print(f"anvil: {e}", file=sys.stderr)
        return 1
    finally:
        sys.stdout.flush()
