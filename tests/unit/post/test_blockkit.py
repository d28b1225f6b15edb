"""blockkit: the helpers every block shares — a figure as the CLI shows it, a mean of the
values present, a group's latency figures — each against values worked by hand."""

from __future__ import annotations

import numpy as np
from rawbuild import completed, rows_of

from anvil_metrics.post.blockkit import ABSENT, latencies, mean_of, num


def test_num_shows_null_for_a_missing_figure() -> None:
    assert num(None, ".3f") == "null"
    assert num(1234.5678, ",.1f") == "1,234.6"
    assert repr(ABSENT) == "ABSENT"


def test_mean_of_leaves_out_the_missing_values() -> None:
    assert mean_of(np.array([1.0, np.nan, 3.0])) == 2.0
    assert mean_of(np.array([np.nan])) is None


def test_latencies_are_nearest_rank_over_the_groups_rows() -> None:
    rows = rows_of([completed(i) for i in range(4)])
    figures = latencies(rows)
    assert list(figures) == ["ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms", "e2e_p95_ms"]
    e2e = sorted(rows.values("e2e_ms").tolist())
    assert figures["e2e_p50_ms"] == e2e[1] and figures["e2e_p95_ms"] == e2e[3]
    empty = latencies(rows.select(np.zeros(len(rows), dtype=bool)))
    assert set(empty.values()) == {None}
