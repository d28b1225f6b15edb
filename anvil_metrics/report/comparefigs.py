"""The page of `anvil compare --report DIR`: the runs, every figure's change with its
interval, and the latency CDFs of the runs drawn over each other.

Why these two figures: the interval plot says in one glance which changes are beyond noise
(and which way), and the CDFs show where in the distribution a change lies (a p95 that
moved with an unchanged p50 is a tail, not a shift). The numbers are the comparison's own
(`compare.runs.compare_runs`): nothing is computed here but the drawing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anvil_metrics.compare.runs import ComparedRun
from anvil_metrics.compare.text import LETTERS, compare_lines, figure_label
from anvil_metrics.report import draw
from anvil_metrics.report.page import Figure, Section, Table

CDF_FIELDS = ("ttft_ms", "e2e_ms", "mean_inter_token_latency_ms")


def _relative(runs: list[ComparedRun], out: Path) -> list[str]:
    return [os.path.relpath(r.path.resolve(), out.resolve()) for r in runs]


def changes_figure(result: dict[str, Any], sources: list[str]) -> Figure:
    """Each percentile's change from the baseline, in %, with its interval: one row per
    figure, one colour per later run; a filled dot is beyond noise, a hollow one is not."""
    figs = [f for f in result["figures"] if any(
        v is not None and v["ci"] is not None for v in f["vs_baseline"][1:])]
    fig, axes = draw.new((10.0, 0.9 + 0.28 * max(len(figs), 1)))
    ax = axes[0][0]
    if not figs:
        draw.no_data(ax, "no figure has an interval (too few rows)")
    for i in range(1, len(result["runs"])):
        colour = draw.PALETTE[(i - 1) % len(draw.PALETTE)]
        for y, f in enumerate(figs):
            v, base = f["vs_baseline"][i], f["values"][0]
            if v is None or v["ci"] is None or not base:
                continue
            lo, hi = (100.0 * c / base for c in v["ci"])
            off = y + 0.15 * (i - 1)
            ax.plot([lo, hi], [off, off], color=colour, linewidth=1.5)
            ax.plot([v["delta_pct"]], [off], "o", color=colour,
                    markerfacecolor=colour if v["beyond_noise"] else "white",
                    label=f"{LETTERS[i]} vs A" if y == 0 else None)
    ax.axvline(0.0, color="#444444", linewidth=0.8)
    ax.set_yticks(range(len(figs)), [figure_label(f["name"]) for f in figs])
    ax.invert_yaxis()
    ax.set_xlabel("change from A (%), with its interval")
    if figs:
        ax.legend(loc="lower right")
    return draw.finish(fig, "compare-changes.png", "Changes from the baseline",
                       f"{100 * result['confidence']:g} % bootstrap intervals of each change "
                       f"({result['resamples']:,} resamples of each run's rows), as % of A's "
                       "value; a filled dot is beyond noise (its interval excludes 0)",
                       sources)


def cdf_figure(runs: list[ComparedRun], sources: list[str]) -> Figure:
    fig, axes = draw.new((10.0, 3.6), ncols=len(CDF_FIELDS))
    for ax, field in zip(axes[0], CDF_FIELDS, strict=True):
        for i, r in enumerate(runs):
            draw.cdf(ax, r.rows.values(field), LETTERS[i], draw.PALETTE[i % 10])
        ax.set_xlabel(figure_label(f"{field.removesuffix('_ms')}_p50_ms"
                                   if field != "mean_inter_token_latency_ms"
                                   else "mean_inter_token_latency_ms_p50").replace(" p50", ""))
        ax.set_ylabel("fraction of requests")
        ax.legend(loc="lower right")
    return draw.finish(fig, "compare-cdf.png", "Latency CDFs, run over run",
                       "each run's empirical CDF over its rows", sources)


def table(result: dict[str, Any]) -> Table:
    n = len(result["runs"])
    header = ("figure", *LETTERS[:n], *(f"change {x}" for x in LETTERS[1:n]))
    rows = []
    for f in result["figures"]:
        values = tuple("null" if v is None else f"{v:,.1f}" for v in f["values"])
        changes = tuple(_cell(v) for v in f["vs_baseline"][1:])
        rows.append((figure_label(f["name"]), *values, *changes))
    return Table("Every figure", header, tuple(rows),
                 note="change: Δ, Δ % and the interval of Δ; * beyond noise")


def _cell(v: dict[str, Any] | None) -> str:
    if v is None or v["delta"] is None:
        return "n/a"
    pct = "" if v["delta_pct"] is None else f" ({v['delta_pct']:+.1f} %)"
    ci = "" if v["ci"] is None else f" [{v['ci'][0]:+,.1f}, {v['ci'][1]:+,.1f}]"
    return f"{v['delta']:+,.1f}{pct}{ci}{' *' if v['beyond_noise'] else ''}"


def compare_page(result: dict[str, Any], runs: list[ComparedRun], out: Path
                 ) -> tuple[str, list[str], list[Section], list[str]]:
    """(title, lines, sections, sources relative to `out`) of the comparison's page."""
    sources = _relative(runs, out)
    title = f"Compare: {len(runs)} runs, {runs[0].doc.get('run_id')} the baseline"
    sections = [Section("Changes", tables=(table(result),),
                        figures=(changes_figure(result, sources), cdf_figure(runs, sources)))]
    return title, compare_lines(result), sections, sources
