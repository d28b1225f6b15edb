"""The page of `anvil compare --report DIR`: the runs, every figure's change with its
interval, and the latency CDFs of the runs drawn over each other.

Why these two figures: the interval plot says in one glance which changes matter: each dot
is coloured by its verdict (worse, better, changed, inconclusive, equivalent: beyond noise
*and* beyond the figure's minimum effect, drawn as a grey band, or not), since a change
merely beyond noise may be −0.2 %; and the CDFs show where in the distribution a change
lies (a p95 that moved with an unchanged p50 is a tail, not a shift). The numbers are the
comparison's own (`compare.runs.compare_runs`): nothing is computed here but the drawing.
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
# a dot's fill by its change's verdict (`post.significance.VERDICTS`)
VERDICT_COLOURS = {"worse": "#d62728", "better": "#2ca02c", "changed": "#9467bd",
                   "inconclusive": "#ff7f0e", "equivalent": "#bbbbbb"}
# each later run's interval: the palette's colours that are no verdict's
RUN_COLOURS = tuple(c for c in draw.PALETTE if c not in VERDICT_COLOURS.values())


def has_verdicts(result: dict[str, Any]) -> bool:
    """Whether the comparison holds verdicts: one written before `--min-effect` existed has
    no `verdict` key in its changes, and its figure and table then fall back to marking by
    `beyond_noise` alone, as they did (`anvil compare --report` itself always draws a
    comparison it has just made, with verdicts)."""
    return any("verdict" in v for f in result["figures"] for v in f["vs_baseline"][1:] if v)


def dot_fill(v: dict[str, Any], colour: str, verdicts: bool) -> str:
    """A dot's fill: its verdict's colour (white: no verdict), or, for a comparison
    without verdicts, the run's colour beyond noise and white within it."""
    if verdicts:
        return VERDICT_COLOURS.get(v.get("verdict"), "white")
    return colour if v["beyond_noise"] else "white"


def _relative(runs: list[ComparedRun], out: Path) -> list[str]:
    return [os.path.relpath(r.path.resolve(), out.resolve()) for r in runs]


def changes_figure(result: dict[str, Any], sources: list[str]) -> Figure:
    """Each percentile's change from the baseline, in %, with its interval: one row per
    figure, one colour per later run's interval; the dot filled by its verdict's colour on
    the grey band of ±the margin (without verdicts: filled beyond noise, else hollow)."""
    figs = [f for f in result["figures"] if any(
        v is not None and v["ci"] is not None for v in f["vs_baseline"][1:])]
    verdicts = has_verdicts(result)
    fig, axes = draw.new((10.0, 0.9 + 0.28 * max(len(figs), 1)))
    ax = axes[0][0]
    if not figs:
        draw.no_data(ax, "no figure has an interval (too few rows)")
    colours = RUN_COLOURS if verdicts else draw.PALETTE
    for i in range(1, len(result["runs"])):
        colour = colours[(i - 1) % len(colours)]
        for y, f in enumerate(figs):
            v, base = f["vs_baseline"][i], f["values"][0]
            if v is None or v["ci"] is None or not base:
                continue
            lo, hi = (100.0 * c / base for c in v["ci"])
            off = y + 0.15 * (i - 1)
            if verdicts and v.get("margin_abs") is not None:
                m = 100.0 * v["margin_abs"] / abs(base)
                ax.plot([-m, m], [off, off], color="#dddddd", linewidth=6, zorder=1,
                        solid_capstyle="butt")
            ax.plot([lo, hi], [off, off], color=colour, linewidth=1.5,
                    label=f"{LETTERS[i]} vs A" if y == 0 else None)
            ax.plot([v["delta_pct"]], [off], "o", color="#333333" if verdicts else colour,
                    markerfacecolor=dot_fill(v, colour, verdicts))
    if verdicts and figs:
        for name, c in VERDICT_COLOURS.items():
            ax.plot([], [], "o", color="#444444", markerfacecolor=c, label=name)
    ax.axvline(0.0, color="#444444", linewidth=0.8)
    ax.set_yticks(range(len(figs)), [figure_label(f["name"]) for f in figs])
    ax.invert_yaxis()
    ax.set_xlabel("change from A (%), with its interval")
    if figs:
        ax.legend(loc="lower right")
    marking = ("a dot's fill is its verdict (grey band: ±the figure's minimum effect, "
               "--min-effect): worse or better (the interval wholly beyond the band), "
               "changed (the same for a figure with no better direction), inconclusive "
               "(straddles it), equivalent (the 90 % interval within it); white: no verdict"
               if verdicts else "a filled dot is beyond noise (its interval excludes 0)")
    return draw.finish(fig, "compare-changes.png", "Changes from the baseline",
                       f"{100 * result['confidence']:g} % bootstrap intervals of each change "
                       f"({result['resamples']:,} resamples of each run's rows), as % of A's "
                       f"value; {marking}", sources)


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
    note = "change: Δ, Δ % and the interval of Δ; * beyond noise"
    if has_verdicts(result):
        note += ("; then its verdict at the figure's minimum effect (--min-effect, "
                 "as anvil compare prints it)")
    return Table("Every figure", header, tuple(rows), note=note)


def _cell(v: dict[str, Any] | None) -> str:
    if v is None or v["delta"] is None:
        return "n/a"
    pct = "" if v["delta_pct"] is None else f" ({v['delta_pct']:+.1f} %)"
    ci = "" if v["ci"] is None else f" [{v['ci'][0]:+,.1f}, {v['ci'][1]:+,.1f}]"
    verdict = f" {v['verdict']}" if v.get("verdict") else ""
    return f"{v['delta']:+,.1f}{pct}{ci}{' *' if v['beyond_noise'] else ''}{verdict}"


def compare_page(result: dict[str, Any], runs: list[ComparedRun], out: Path
                 ) -> tuple[str, list[str], list[Section], list[str]]:
    """(title, lines, sections, sources relative to `out`) of the comparison's page."""
    sources = _relative(runs, out)
    title = f"Compare: {len(runs)} runs, {runs[0].doc.get('run_id')} the baseline"
    sections = [Section("Changes", tables=(table(result),),
                        figures=(changes_figure(result, sources), cdf_figure(runs, sources)))]
    return title, compare_lines(result), sections, sources
