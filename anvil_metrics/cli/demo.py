"""`anvil sim` and `anvil demo`: the built-in simulator, and a run against it end to end.

Why its own module: neither needs a server of the user's; `sim` is only named here (its
own parser, `sim.server`, reads its flags: `main` hands it the command line before anvil's
parser sees it), and `demo` starts the simulator, runs the smoke scenario against it,
verifies the result and draws it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anvil_metrics.cli.parsing import Commands
from anvil_metrics.errors import ExitCode, UsageError


def add_sim(sub: Commands) -> None:
    """`anvil sim [options]`: listed here, parsed by the simulator."""
    sub.add_parser("sim", help="start the built-in simulator (see 'anvil sim --help')",
                   add_help=False)


def add_demo(sub: Commands) -> None:
    """`anvil demo [--results-dir DIR]`."""
    d = sub.add_parser("demo", help="simulator + smoke scenario, end to end")
    d.add_argument("--results-dir", default="results")


def cmd_demo(a: argparse.Namespace) -> int:
    from anvil_metrics.jsonio import read_json
    from anvil_metrics.load.scenario import load_scenario
    from anvil_metrics.post.outcome import failure_verdict
    from anvil_metrics.post.verify import verify_benchmark
    from anvil_metrics.runs.launch import prepare_run, run_scenario, summary_lines
    from anvil_metrics.runs.simproc import pinned_apart, start_simulator

    # the package ships scenarios/ (anvil_metrics/scenarios links to it in a checkout)
    scenario_path = Path(__file__).parents[1] / "scenarios" / "smoke.toml"
    if not scenario_path.exists():
        raise UsageError(f"demo: {scenario_path} is missing; reinstall anvil-metrics")
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
    doc = read_json(result.benchmark_path, "the benchmark.json of the demo's run")
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
    verdict = failure_verdict(doc)  # every request failed: the demo did not work
    if verdict is not None:
        print(verdict, file=sys.stderr)
        return ExitCode.FAILED
    return 0 if not problems else 1
