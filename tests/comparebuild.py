"""Run folders for the compare tests: requests with given TTFTs, built by anvil's own
`build` from raw records, so each compared value is the file's own figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rawbuild import HEADER, completed, write_raw

from anvil_metrics.compare.runs import ComparedRun, read_run
from anvil_metrics.jsonio import atomic_write_json
from anvil_metrics.post.benchmark import build_benchmark
from anvil_metrics.post.rawread import read_raw

MS = 1_000_000


def run_of(folder: Path, ttfts_ms: np.ndarray) -> ComparedRun:
    """A run folder whose requests have these TTFTs (and 5 tokens 1 ms apart after)."""
    folder.mkdir(parents=True)
    records = []
    for i, t in enumerate(ttfts_ms.tolist()):
        start = HEADER["perf_anchor_ns"] + i * 50 * MS
        first = start + round(t * MS)
        records.append(completed(i, start_ns=start, first_output_ns=first,
                                 first_content_ns=first, end_ns=first + 4 * MS,
                                 chunk_deltas_ns=(first - start, MS, MS, MS, MS),
                                 reasoning_chunks=0, content_chunks=5, chunk_channels="ccccc"))
    write_raw(folder / "requests.jsonl", HEADER, records)
    atomic_write_json(folder / "benchmark.json",
                      build_benchmark(read_raw(folder / "requests.jsonl")))
    return read_run(folder)
