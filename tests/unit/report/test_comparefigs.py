"""`anvil compare --report DIR`: a self-contained page with the comparison's table and its two
figures (changes with intervals, CDFs), naming each run's file relative to DIR with its
SHA-256; each change marked and coloured by its verdict, and a comparison written before
verdicts existed marked by `beyond_noise` as it was."""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from comparebuild import run_of

pytest.importorskip("matplotlib")

from anvil_metrics.compare.runs import compare_runs  # noqa: E402
from anvil_metrics.report import draw  # noqa: E402
from anvil_metrics.report.build import make_compare_report  # noqa: E402
from anvil_metrics.report.comparefigs import (  # noqa: E402
    VERDICT_COLOURS,
    changes_figure,
    dot_fill,
    has_verdicts,
    table,
)


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


def test_each_change_is_marked_by_its_verdict_and_an_old_comparison_by_noise(
        tmp_path: Path) -> None:
    """B is 20 % slower than A (worse), C the same draws (inconclusive:
    80 rows a run leave the p50's interval wider than ±2 %): the dots take their
    verdict's colour and the cells say the verdict; with the `verdict` keys taken away (a
    comparison from before --min-effect) the page marks beyond noise as it did."""
    draws = np.random.default_rng(43).lognormal(np.log(100), 0.2, 80)
    runs = [run_of(tmp_path / x, draws * k) for x, k in (("a", 1), ("b", 1.2), ("c", 1))]
    result = compare_runs(runs, resamples=200)
    ttft = next(f for f in result["figures"] if f["name"] == "ttft_p50_ms")
    b, c = ttft["vs_baseline"][1:]
    assert (b["verdict"], c["verdict"]) == ("worse", "inconclusive")
    assert has_verdicts(result)
    assert dot_fill(b, draw.PALETTE[0], True) == VERDICT_COLOURS["worse"]
    assert dot_fill(c, draw.PALETTE[1], True) == VERDICT_COLOURS["inconclusive"]
    assert dot_fill({**b, "verdict": None}, draw.PALETTE[0], True) == "white"
    cells = table(result)
    row = next(r for r in cells.rows if r[0] == "TTFT (first content) p50 (ms)")
    assert row[4].endswith(" * worse") and row[5].endswith(" inconclusive")
    assert "verdict" in cells.note
    page = make_compare_report(result, runs, tmp_path / "new").html_path.read_text()
    assert "a dot&#x27;s fill is its verdict" in page  # the caption, HTML-escaped

    old = copy.deepcopy(result)
    for f in old["figures"]:
        for v in f["vs_baseline"][1:]:
            if v:
                del v["verdict"]
    assert not has_verdicts(old)
    old_b = next(f for f in old["figures"] if f["name"] == "ttft_p50_ms")["vs_baseline"][1]
    assert old_b["beyond_noise"] and dot_fill(old_b, "#123456", False) == "#123456"
    row = next(r for r in table(old).rows if r[0] == "TTFT (first content) p50 (ms)")
    assert row[4].endswith("] *") and "verdict" not in table(old).note
    assert "a filled dot is beyond noise" in changes_figure(old, []).caption
