"""`anvil export RUN --parquet FILE --vllm-json FILE --llm-d FILE`: a run's files in the
formats other tools read (`export/`). Computing is `export`'s; this reads the flags and says
what it wrote.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from anvil_metrics.cli.parsing import Commands
from anvil_metrics.errors import UsageError
from anvil_metrics.jsonio import atomic_write_json


def add_export(sub: Commands) -> None:
    """`anvil export RUN [--parquet FILE] [--vllm-json FILE] [--llm-d FILE]`."""
    e = sub.add_parser("export", help="a run as Parquet rows (--parquet), as vllm bench "
                       "serve's result JSON (--vllm-json) or as llm-d's Benchmark Report "
                       "(--llm-d)")
    e.add_argument("run", metavar="RUN", help="a run folder or its benchmark.json")
    e.add_argument("--parquet", metavar="FILE", default=None,
                   help="every request's row as one Parquet table (needs the [parquet] extra)")
    e.add_argument("--vllm-json", metavar="FILE", default=None,
                   help="the run as `vllm bench serve --save-result` writes it, by vLLM's "
                        "definitions")
    e.add_argument("--llm-d", metavar="FILE", default=None,
                   help="the run as llm-d's Benchmark Report v0.2.1 (JSON); a sweep: one "
                        "per step, FILE's stem + _<step>")


def cmd_export(a: argparse.Namespace) -> int:
    if not (a.parquet or a.vllm_json or a.llm_d):
        raise UsageError("export: nothing to write; give --parquet FILE, --vllm-json FILE "
                         "and/or --llm-d FILE")
    from anvil_metrics.compare.runs import read_run  # numpy: only when a run is exported

    run = read_run(a.run)
    if a.parquet:
        from anvil_metrics.export.parquet import write_parquet

        write_parquet(run.doc, run.rows, a.parquet)
        print(f"parquet: {a.parquet} ({len(run.rows)} rows)")
    if a.vllm_json:
        from anvil_metrics.export.vllmjson import vllm_result

        result = vllm_result(run.doc, run.rows, Path(run.path).parent)
        atomic_write_json(a.vllm_json, result)
        print(f"vllm bench serve result: {a.vllm_json} ({result['completed']} completed, "
              f"TTFT from {result['anvil']['ttft_from']})")
    if a.llm_d:
        from anvil_metrics.export.llmd import llmd_reports, report_paths

        reports = llmd_reports(run.doc, run.rows)
        paths = report_paths(a.llm_d, len(reports))
        for path, report in zip(paths, reports, strict=True):
            atomic_write_json(path, report)
        print(f"llm-d benchmark report v0.2.1: {', '.join(map(str, paths))}")
    return 0
