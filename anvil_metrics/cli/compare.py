"""`anvil compare A B [C …]`: runs side by side, each change from the first with its
bootstrap interval (`compare/`). Computing is `compare.runs`'s, the lines `compare.text`'s,
the page `report.build.make_compare_report`'s; this reads the flags and prints.
"""

from __future__ import annotations

import argparse

import orjson

from anvil_metrics.cli.parsing import Commands, argtype
from anvil_metrics.compare import RESAMPLES
from anvil_metrics.load.optionvalues import whole


def add_compare(sub: Commands) -> None:
    """`anvil compare RUN RUN [RUN …] [--json] [-o FILE] [--report DIR] [--seed N]
    [--resamples N]
    [--min-effect SPEC]`."""
    c = sub.add_parser("compare", help="two or more runs side by side: each figure's change "
                       "from the first, its bootstrap interval, and whether it is beyond noise")
    c.add_argument("runs", nargs="+", metavar="RUN",
                   help="a run folder or its benchmark.json; the first is the baseline")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON "
                   "(anvil-serving.compare/v1) instead of the table")
    c.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="also write the JSON to FILE (atomically)")
    c.add_argument("--report", default=None, metavar="DIR", help="also draw report.html "
                   "and its PNGs into DIR (needs the [report] extra)")
    c.add_argument("--seed", type=argtype(whole(0), "--seed"), default=0,
                   help="seed of the bootstrap draws (default 0)")
    c.add_argument("--min-effect", default=None, metavar="SPEC",
                   help="the smallest change called better or worse, within which a change "
                   "is equivalent: PCT%% for every figure, NAME=PCT%% or NAME=NUMBER[UNIT] "
                   "in the figure's unit, comma-separated (default 2%%; e.g. "
                   "2%%,ttft_p50_ms=5%%,e2e_p50_ms=10ms)")
    c.add_argument("--resamples", type=argtype(whole(100), "--resamples"), default=RESAMPLES,
                   help=f"bootstrap resamples per figure and run (default {RESAMPLES:,})")


def cmd_compare(a: argparse.Namespace) -> int:
    # here, not at the top: numpy and the post-processing modules cost every `anvil`
    # command ~0.2 s to import, and `anvil sim`, `run` or `verify` need none of this
    from anvil_metrics.compare.effect import DEFAULT, parse_min_effect
    from anvil_metrics.compare.runs import compare_runs, figure_units, read_run
    from anvil_metrics.compare.text import compare_lines
    from anvil_metrics.jsonio import atomic_write_json

    effect = DEFAULT if a.min_effect is None else parse_min_effect(a.min_effect,
                                                                   figure_units())
    runs = [read_run(r) for r in a.runs]
    result = compare_runs(runs, seed=a.seed, resamples=a.resamples, min_effect=effect)
    if a.output:
        atomic_write_json(a.output, result)
    if a.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in compare_lines(result):
            print(line)
    if a.report:
        from anvil_metrics.report.build import make_compare_report

        r = make_compare_report(result, runs, a.report)
        print(f"compare report: {r.html_path} ({len(r.png_paths)} figures, "
              f"{r.elapsed_s:.1f} s)")
    return 0
