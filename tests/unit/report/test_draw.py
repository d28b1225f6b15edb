"""draw: matplotlib set up headless; a figure's PNG the same bytes each time it is drawn;
the empirical CDF's steps at k/n; NaN left out as a missing value; many segments drawn as
one line broken by NaNs.

Why: a report redrawn from the same files must be byte-identical (a PNG that carries a
timestamp would differ every time), and a CDF off by one step misplaces every percentile
a reader takes from it.
"""

from __future__ import annotations

import matplotlib
import numpy as np

from anvil_metrics.report import draw


def test_the_backend_is_headless() -> None:
    assert matplotlib.get_backend().lower() == "agg"


def _figure() -> bytes:
    fig, axes = draw.new()
    axes[0][0].plot([0, 1, 2], [1, 0, 2])
    return draw.png(fig)


def test_the_same_figure_is_the_same_bytes() -> None:
    first = _figure()
    assert first.startswith(b"\x89PNG\r\n\x1a\n") and first == _figure()
    assert b"Software" not in first and b"Creation" not in first
    made = draw.finish(draw.new()[0], "a.png", "A", "caption", ["benchmark.json"])
    assert (made.name, made.sources) == ("a.png", ("benchmark.json",))


def test_the_cdf_steps_to_k_over_n() -> None:
    fig, axes = draw.new()
    ax = axes[0][0]
    draw.cdf(ax, [3.0, np.nan, 1.0, 2.0, 2.0], "ttft")
    (line,) = ax.get_lines()
    assert line.get_xdata().tolist() == [1.0, 1.0, 2.0, 2.0, 3.0]
    assert line.get_ydata().tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert line.get_label() == "ttft (n=4)" and line.get_drawstyle() == "steps-post"
    draw.cdf(ax, [np.nan], "none")  # nothing to draw: no line
    assert len(ax.get_lines()) == 1
    draw.png(fig)


def test_present_and_segments() -> None:
    assert draw.present([1.0, np.nan, np.inf, 2.0]).tolist() == [1.0, 2.0]
    fig, axes = draw.new()
    ax = axes[0][0]
    draw.segments(ax, np.array([1.0, 2.0]), np.array([0.0, 5.0]), np.array([3.0, 6.0]))
    (line,) = ax.get_lines()
    x, y = line.get_xdata(), line.get_ydata()
    assert np.array_equal(x, [0.0, 3.0, np.nan, 5.0, 6.0, np.nan], equal_nan=True)
    assert np.array_equal(y, [1.0, 1.0, np.nan, 2.0, 2.0, np.nan], equal_nan=True)
    draw.segments(ax, np.array([]), np.array([]), np.array([]))
    draw.no_data(ax, "no requests")
    assert len(ax.get_lines()) == 1 and ax.texts[-1].get_text() == "no requests"
    draw.png(fig)
