"""The lines `anvil compare` prints: a line per run (the first the baseline), a line per
figure with each value and each later run's change, its interval and the marker where it is
beyond noise, the legend, and a warning for a run whose steady state is not steady."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from comparebuild import run_of

from anvil_metrics.compare.runs import compare_runs
from anvil_metrics.compare.text import compare_lines, figure_label


def test_the_lines_of_a_planted_change(tmp_path: Path) -> None:
    draws = np.random.default_rng(21).lognormal(np.log(100), 0.2, 200)
    runs = [run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws * 1.2)]
    result = compare_runs(runs)
    lines = compare_lines(result)
    assert lines[0].startswith(f"A  {runs[0].path}: ") and lines[0].endswith("[baseline]")
    assert lines[1].startswith(f"B  {runs[1].path}: ")
    assert "steady state" in lines[0]
    (ttft,) = [line for line in lines if line.startswith("TTFT (first content) p50 (ms) ")]
    f = next(f for f in result["figures"] if f["name"] == "ttft_p50_ms")
    v = f["vs_baseline"][1]
    assert f"{f['values'][0]:,.1f}" in ttft and f"{f['values'][1]:,.1f}" in ttft
    assert ttft.endswith(f"{v['delta']:+,.1f} {v['delta_pct']:+.1f} % [{v['ci'][0]:+,.1f}, "
                         f"{v['ci'][1]:+,.1f}] * worse")
    (thr,) = [line for line in lines if line.startswith("throughput (tok/s)")]
    assert thr.endswith("(no interval)")
    assert lines[-1].startswith("* beyond noise: the interval of the change excludes 0")


def test_a_run_that_is_not_steady_is_warned_of(tmp_path: Path) -> None:
    draws = np.full(60, 100.0)
    result = compare_runs([run_of(tmp_path / "a", draws), run_of(tmp_path / "b", draws)])
    result["runs"][1]["steady_state"] = "drifting"
    assert compare_lines(result)[-1].startswith("WARNING: run B's steady state is drifting")


def test_labels_name_the_field_its_percentile_and_unit() -> None:
    assert figure_label("ttft_p95_ms") == "TTFT (first content) p95 (ms)"
    assert figure_label("throughput_tok_s") == "throughput (tok/s)"
    assert figure_label("goodput_rps") == "goodput (req/s)"
