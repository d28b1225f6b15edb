"""`anvil postprocess`: a run folder's raw records → its `benchmark.json`.

The live run and the command share this one function, so a benchmark rebuilt later from
`requests.jsonl` (after a crash, say) is the same document the run would have written —
marked `partial` when the raw file has no `run_end` line.

`postprocess` reads the raw file as columns (a large one in a process per CPU, `rawpart.py`) and
writes the rows a batch at a time (a run of a million requests in about 0.6 GB rather than
several). `postprocess_run` also hands back what a summary needs, so nothing reads the
written file back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anvil_metrics.errors import RawFileError
from anvil_metrics.post import cachecheck
from anvil_metrics.post.benchmark import BuiltBenchmark, build
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.rawcolumns import RawColumns
from anvil_metrics.post.rawpart import scan_raw

BENCHMARK_FILE = "benchmark.json"
RAW_FILE = "requests.jsonl"


@dataclass(frozen=True, slots=True)
class Postprocessed:
    """What `postprocess_run` wrote, and what a summary of it needs without reading it back
    (a million rows' `benchmark.json` takes seconds and gigabytes to load)."""

    path: Path  # the benchmark.json written
    summary: dict[str, Any]  # the document, its `request_timings` left empty
    cache_warning: str | None  # `cachecheck`'s line about unexpected prefix-cache hits
    rows: RowColumns | None = None  # its rows as columns (the live tab's final figures)


def build_run(run_dir: str | Path) -> tuple[RawColumns, BuiltBenchmark]:
    """A run folder's raw records (as columns) and the document they give, unwritten: what
    `postprocess_run` writes, and what `anvil report` draws."""
    raw_path = Path(run_dir) / RAW_FILE
    if not raw_path.exists():
        raise RawFileError(raw_path, "it does not exist", fix="pass a run folder made by anvil")
    raw = scan_raw(raw_path)
    return raw, build(raw, (raw.run_end or {}).get("client"))


def postprocess_run(run_dir: str | Path) -> Postprocessed:
    """Build and atomically write `<run_dir>/benchmark.json`.

    The raw file is read as columns and the rows are written a batch at a time, so a run of
    a million requests needs well under a GiB.
    """
    run_dir = Path(run_dir)
    out = run_dir / BENCHMARK_FILE
    raw, built = build_run(run_dir)
    built.write(out)
    params = raw.header.get("params")
    warning = cachecheck.warning_for_columns(built.rows,
                                             params if isinstance(params, dict) else {})
    return Postprocessed(out, built.doc, warning, built.rows)
