"""`anvil postprocess`: a run folder's raw records → its `benchmark.json`.

The live run and the command share this one function, so a benchmark rebuilt later from
`requests.jsonl` (after a crash, say) is the same document the run would have written —
marked `partial` when the raw file has no `run_end` line.
"""

from __future__ import annotations

from pathlib import Path

from anvil_metrics.benchmark import build_benchmark
from anvil_metrics.errors import RawFileError
from anvil_metrics.rawfile import atomic_write_json, read_raw

BENCHMARK_FILE = "benchmark.json"
RAW_FILE = "requests.jsonl"


def build_for_run(run_dir: Path) -> dict:
    raw_path = run_dir / RAW_FILE
    if not raw_path.exists():
        raise RawFileError(raw_path, "it does not exist", fix="pass a run folder made by anvil")
    raw = read_raw(raw_path)
    return build_benchmark(raw, (raw.run_end or {}).get("client"))


def postprocess(run_dir: str | Path) -> Path:
    """Build and atomically write `<run_dir>/benchmark.json`; returns its path."""
    run_dir = Path(run_dir)
    doc = build_for_run(run_dir)
    out = run_dir / BENCHMARK_FILE
    atomic_write_json(out, doc)
    return out
