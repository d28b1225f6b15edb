"""`anvil compare --report DIR`: a self-contained page with the comparison's table and its two
figures (changes with intervals, CDFs), naming each run's file relative to DIR with its
SHA-256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from comparebuild import run_of

pytest.importorskip("matplotlib")

from anvil_metrics.compare.runs import compare_runs  # noqa: E402
from anvil_metrics.report.build import make_compare_report  # noqa: E402


def test_the_page_holds_the_table_both_figures_and_its_sources(tmp_path: Path) -> None:
    draws = np.random.default_rng(41).lognormal(np.log(100), 0.2, 80)
    runs = [run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.2)]
    result = compare_runs(runs, resamples=200)
    out = tmp_path / "page"
    r = make_compare_report(result, runs, out)
    assert r.kind == "compare" and r.html_path == out / "report.html"
    assert [p.name for p in r.png_paths] == ["compare-changes.png", "compare-cdf.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in r.png_paths)
    page = r.html_path.read_text()
    assert "TTFT (first content) p50 (ms)" in page and "* beyond noise" in page
    for run in runs:
        rel = os.path.relpath(run.path, out)
        digest = hashlib.sha256(run.path.read_bytes()).hexdigest()
        assert f"<tr><td>{rel}</td>" in page and digest in page
