"""Matplotlib, set up once for reports: the Agg backend (no display), one style, and how a
figure becomes the PNG of a `page.Figure`.

Why one place: the report modules only say what to draw; how a figure becomes PNG bytes
(size, resolution, fonts that need no network or system font cache beyond matplotlib's
own DejaVu) and the few plot shapes they share (an empirical CDF, a time axis) are said
here once. Importing this module imports matplotlib; `build` does so only when a report
is asked for, and turns its absence into one line naming the extra to install.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, whatever $DISPLAY or MPLBACKEND say

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from anvil_metrics import catalog  # noqa: E402
from anvil_metrics.report.page import Figure  # noqa: E402

DPI = 100
WIDE = (10.0, 4.2)
TALL = (10.0, 6.0)
# one colour per quantity, the same in every figure (matplotlib's tab10): each drawn row
# field's is the catalogue's (`RowField.colour`), then those of what is no row field
COLOURS = {
    **{f.name: f.colour for f in catalog.ROW if f.colour},
    "in_flight": "#1f77b4", "throughput": "#2ca02c", "failure": "#d62728", "slo": "#d62728",
    "capacity": "#2ca02c",
}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")

plt.rcParams.update({
    "figure.dpi": DPI, "savefig.dpi": DPI, "font.size": 9, "axes.titlesize": 10,
    "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "legend.fontsize": 8, "legend.frameon": False,
    "path.simplify": True, "agg.path.chunksize": 20000,
    "svg.hashsalt": "anvil", "pdf.fonttype": 42,
})


def new(size: tuple[float, float] = WIDE, ncols: int = 1, nrows: int = 1,
        **kwargs: Any) -> tuple[Any, Any]:
    """A figure and its axes (`plt.subplots`)."""
    return plt.subplots(nrows, ncols, figsize=size, squeeze=False, **kwargs)


def png(fig: Any) -> bytes:
    """The figure as PNG bytes (no metadata that changes from run to run); closes it."""
    buf = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


def finish(fig: Any, name: str, title: str, caption: str, sources: Sequence[str]) -> Figure:
    return Figure(name, title, caption, tuple(sources), png(fig))


def present(values: Any) -> Any:
    """The finite values of a float column (NaN is a missing value)."""
    values = np.asarray(values, dtype=np.float64)
    return values[np.isfinite(values)]


def cdf(ax: Any, values: Any, label: str, colour: str | None = None) -> None:
    """The empirical CDF of `values` as a step line: at the k-th smallest value (1-based) the
    fraction k/n — so the height at x is the fraction of requests with a value <= x, and the
    nearest-rank p-th percentile is the first x at which the line reaches p/100."""
    v = np.sort(present(values))
    if not len(v):
        return
    frac = np.arange(1, len(v) + 1, dtype=np.float64) / len(v)
    ax.step(np.concatenate(([v[0]], v)), np.concatenate(([0.0], frac)), where="post",
            label=f"{label} (n={len(v)})", color=colour, linewidth=1.2)


def mark_percentiles(ax: Any, values: Sequence[tuple[str, float | None]], colour: str,
                     p: Sequence[float]) -> None:
    """Dots at (value, p/100) for the percentiles the document reports, labelled."""
    for (text, value), q in zip(values, p, strict=True):
        if value is None:
            continue
        ax.plot([value], [q / 100], "o", color=colour, markersize=4)
        ax.annotate(f"{text} {value:,.1f}", (value, q / 100), textcoords="offset points",
                    xytext=(4, -10 if q > 90 else 4), fontsize=7, color=colour)


def segments(ax: Any, y: Any, x0: Any, x1: Any, **kwargs: Any) -> None:
    """Horizontal segments (x0[i], y[i]) → (x1[i], y[i]) as ONE line broken by NaNs: Agg
    draws 100k of them in a fraction of a second, where `hlines` (a collection of 100k
    paths) takes seconds."""
    n = len(y)
    if not n:
        return
    gap = np.full(n, np.nan)
    ax.plot(np.column_stack((x0, x1, gap)).ravel(), np.column_stack((y, y, gap)).ravel(),
            solid_capstyle="butt", **kwargs)


def no_data(ax: Any, text: str, keep_x: bool = False) -> None:
    """An empty panel that says why it is empty (`keep_x`: its x axis is shared)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9,
            color="#666666")
    if not keep_x:
        ax.set_xticks([])
    ax.set_yticks([])
