"""`anvil campaign run` and `anvil summarize`: many runs toward one decision, and the
decision.

Why its own module: a campaign file is checked whole before anything runs (its problems
print one per line), its plan printed (`--dry-run`) or run resumably; its folder, once run,
is summarized into public-benchmark-summary/v1 and summary.md.
"""

from __future__ import annotations

import argparse
import os
import sys

from anvil_metrics.cli.parsing import Commands, Parser, argtype
from anvil_metrics.load.optionvalues import timespan


def add_campaign(sub: Commands) -> None:
    """`anvil campaign run CAMPAIGN.toml [--dry-run]`."""
    cp = sub.add_parser("campaign", help="many runs toward one promotion decision")
    csub = cp.add_subparsers(dest="campaign_command", required=True, parser_class=Parser)
    cr = csub.add_parser("run", help="check a campaign file and run its plan")
    cr.add_argument("campaign", help="campaign TOML file, e.g. "
                    "scenarios/campaigns/fp8-vs-nvfp4.toml")
    cr.add_argument("--results-dir", default="results",
                    help="the campaign's folder is made here, named after it (default results)")
    cr.add_argument("--dry-run", action="store_true",
                    help="check the file and print the plan; run nothing")
    cr.add_argument("--before-run-timeout", type=argtype(timespan, "--before-run-timeout"),
                    default=600.0, help="how long a variant's before_run may take, e.g. 90s, 10m "
                    "(default 600 s)")
    from anvil_metrics.load.options import option

    for o in (option("progress_every"), option("quiet")):  # each run's live progress
        if o.switch:
            cr.add_argument(o.flag, action="store_true", default=o.default, help=o.help)
        else:
            cr.add_argument(o.flag, type=argtype(o.parse, o.flag), default=o.default,
                            help=o.help)


def add_summarize(sub: Commands) -> None:
    """`anvil summarize CAMPAIGN_DIR [-o summary.json]`."""
    sm = sub.add_parser("summarize", help="summarize a campaign folder: public-benchmark-"
                        "summary/v1 JSON and summary.md, with the gates' decision")
    sm.add_argument("campaign_dir", help="the folder 'anvil campaign run' made")
    sm.add_argument("-o", "--output", default=None,
                    help="the JSON's path, ending in .json (default CAMPAIGN_DIR/summary.json); "
                    "summary.md is written beside it")


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
    from anvil_metrics.runs.display import make_display

    every_s = None if a.quiet else a.progress_every
    # on stdout, beside the campaign's own lines of each run (stderr: its failures)
    shown = locust_runner(campaign, os.environ, display=lambda title: make_display(
        sys.stdout, every_s=every_s, title=title))
    outcome = run_campaign(campaign, a.results_dir, runner=shown,
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
