"""The frontier: output tok/s per GPU against tok/s per user, one curve per configuration,
its Pareto-optimal points marked; and joules per output token against the load.

Why: a serving configuration is bought by the GPU-hour and used at some speed per user;
raising the load buys throughput per GPU with each user's speed. InferenceX and vLLM's
sweep plots draw that trade as a curve, and the configuration to promote is the one whose
curve lies outside the others where the users' speed is what the product needs. So:

- a point is one load of one configuration: a sweep's step, a capacity search's step, a
  campaign's run (a variant is a configuration); its figures are that step's or run's own
  `metrics`, never recomputed here: y = `output_tok_s_per_gpu` (needs --gpus), x =
  `decode_tok_s_p50` (tok/s per user: each request's output tokens after the first over its
  generation time, 1 / TPOT, InferenceX's "interactivity"; nearest-rank p50);
- its band: the 95 % percentile-bootstrap interval of both figures from the point's own
  rows (requests resampled with replacement, `BAND_RESAMPLES` times, at most `MAX_ROWS`
  rows, sampled down seeded first: a wider band, never a narrower one), the window and gpus
  held: x = the resample's p50 of decode_tok_s, y = its Σ output_tokens / window / gpus;
- Pareto-optimal (`pareto`): no other point, of any curve, is at least as high on tok/s
  per GPU and on tok/s per user and higher on one (a point with a higher tok/s per GPU at
  the same tok/s per user takes its place);
- J/token against the load (offered rate, else users / concurrency) from each run's
  `energy` block (`ENERGY_FIGURE`), drawn only where one is there (a sweep's one energy
  block is the run's, not a step's: no curve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.significance import bootstrap_rows_ci
from anvil_metrics.post.stats import nearest_rank_columns
from anvil_metrics.report import draw
from anvil_metrics.report.page import Figure, Section, Table, cell

X_KEY, Y_KEY = "decode_tok_s_p50", "output_tok_s_per_gpu"
X_LABEL = "tok/s per user (p50 of decode_tok_s: 1 / TPOT)"
Y_LABEL = "output tok/s per GPU"
ENERGY_FIGURE = ("energy", "j_per_output_token")  # the energy block's (issue 49 item 2)
BAND_RESAMPLES, MAX_ROWS, SEED = 200, 10_000, 49

Band = tuple[float, float] | None


@dataclass(frozen=True, slots=True)
class Point:
    """One load of one configuration, as its document gives it (module docstring)."""

    label: str
    load: float | None
    x: float | None
    y: float | None
    x_band: Band = None
    y_band: Band = None
    j_per_token: float | None = None


@dataclass(frozen=True, slots=True)
class Curve:
    name: str
    points: tuple[Point, ...]


def pareto(xy: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Per point: True when it has both figures and no other point dominates it: is at
    least as high on both and higher on one (a point tied on one figure and lower on the
    other is not on the frontier; two equal points both are)."""
    whole = [(x, y) for x, y in xy if x is not None and y is not None]
    return [x is not None and y is not None
            and not any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in whole)
            for x, y in xy]


def bands(rows: RowColumns, window_s: float | None, gpus: int | None,
          seed: int = SEED) -> tuple[Band, Band]:
    """(x band, y band) of a point from its rows (module docstring)."""
    if not gpus or not window_s or window_s <= 0:
        return None, None
    decode = rows.floats["decode_tok_s"]
    tokens = rows.counts["output_tokens"].astype(np.float64)
    if len(decode) > MAX_ROWS:
        keep = np.random.default_rng(seed).choice(len(decode), MAX_ROWS, replace=False)
        decode, tokens = decode[keep], tokens[keep]
        window_s = window_s * MAX_ROWS / len(rows)  # the same rate from fewer rows

    def figures(at: Any) -> tuple[float | None, float | None]:
        d = decode[at]
        x = nearest_rank_columns(np.sort(d[~np.isnan(d)]), (50,))[0]
        return x, float(tokens[at].sum()) / window_s / gpus

    got = bootstrap_rows_ci(len(decode), figures, seed=seed, resamples=BAND_RESAMPLES)
    return (got[0], got[1]) if got else (None, None)


def _energy(doc: dict[str, Any]) -> float | None:
    block = doc.get(ENERGY_FIGURE[0])
    value = block.get(ENERGY_FIGURE[1]) if isinstance(block, dict) else None
    return float(value) if isinstance(value, int | float) else None


def run_load(doc: dict[str, Any]) -> float | None:
    """A run's load: its offered open-loop rate, else its concurrency (users)."""
    rate = (doc.get("load") or {}).get("offered_rate_rps")
    load = rate if rate is not None else doc.get("concurrency")
    return float(load) if isinstance(load, int | float) else None


def run_point(doc: dict[str, Any], rows: RowColumns | None, label: str,
              load: float | None) -> Point:
    """A whole run as one point: its own metrics, its rows' bands, its energy."""
    m = doc.get("metrics") or {}
    wall = doc.get("wall_clock_ms")
    x_band, y_band = (None, None) if rows is None else bands(
        rows, None if wall is None else wall / 1000, doc.get("gpus"))
    return Point(label, load, m.get(X_KEY), m.get(Y_KEY), x_band, y_band, _energy(doc))


def sweep_curve(doc: dict[str, Any], rows: RowColumns, name: str) -> Curve:
    """A sweep's steps, each a point from its own `steps[i].metrics` and rows."""
    points = []
    for s in doc.get("steps") or []:
        load = s.get("rate", s.get("users"))
        mine = rows.select(rows.present["step"] & (rows.counts["step"] == s["step"]))
        x_band, y_band = bands(mine, s["ended_s"] - s["started_s"], doc.get("gpus"))
        points.append(Point(f"step {s['step']} ({load:g})" if load is not None
                            else f"step {s['step']}", load, s["metrics"].get(X_KEY),
                            s["metrics"].get(Y_KEY), x_band, y_band))
    return Curve(name, tuple(points))


def _band(ax: Any, p: Point, colour: str) -> None:
    if p.x is None or p.y is None:
        return
    xerr = None if p.x_band is None else [[p.x - p.x_band[0]], [p.x_band[1] - p.x]]
    yerr = None if p.y_band is None else [[p.y - p.y_band[0]], [p.y_band[1] - p.y]]
    ax.errorbar([p.x], [p.y], xerr=xerr, yerr=yerr, color=colour, alpha=0.5, capsize=2,
                linewidth=0.8)


def frontier_figure(curves: Sequence[Curve], sources: Sequence[str]) -> Figure:
    """Tok/s per GPU against tok/s per user, the Pareto-optimal points ringed."""
    fig, axes = draw.new(draw.TALL)
    ax = axes[0][0]
    every = [p for c in curves for p in c.points]
    optimal = pareto([(p.x, p.y) for p in every])
    if not any(p.x is not None and p.y is not None for p in every):
        draw.no_data(ax, "no point has both figures: output_tok_s_per_gpu needs --gpus N")
    else:
        for k, c in enumerate(curves):
            colour = draw.PALETTE[k % len(draw.PALETTE)]
            have = sorted((p for p in c.points if p.x is not None and p.y is not None),
                          key=lambda p: p.x)
            ax.plot([p.x for p in have], [p.y for p in have], "o-", color=colour,
                    label=c.name, markersize=4)
            for p in have:
                _band(ax, p, colour)
        best = [p for p, ok in zip(every, optimal, strict=True) if ok]
        ax.plot([p.x for p in best], [p.y for p in best], "o", markersize=11,
                markerfacecolor="none", markeredgecolor="black", label="Pareto-optimal")
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(Y_LABEL)
        ax.legend(fontsize=7)
    return draw.finish(fig, "frontier.png", "Throughput per GPU against speed per user",
                       "Each point a step's or run's own metrics (output_tok_s_per_gpu, "
                       "decode_tok_s_p50), with 95 % bootstrap bands from its rows; ringed: "
                       "no other point is higher on both.", sources)


def energy_figure(curves: Sequence[Curve], sources: Sequence[str]) -> Figure | None:
    """J per output token against the load, or None where no point has an energy figure."""
    if not any(p.j_per_token is not None for c in curves for p in c.points):
        return None
    fig, axes = draw.new()
    ax = axes[0][0]
    for k, c in enumerate(curves):
        have = sorted((p for p in c.points if p.j_per_token is not None and p.load is not None),
                      key=lambda p: p.load or 0.0)
        ax.plot([p.load for p in have], [p.j_per_token for p in have], "o-",
                color=draw.PALETTE[k % len(draw.PALETTE)], label=c.name, markersize=4)
    ax.set_xlabel("load (offered req/s, else users)")
    ax.set_ylabel("J per output token")
    ax.legend(fontsize=7)
    return draw.finish(fig, "energy-per-token.png", "Joules per output token against the load",
                       "Each run's energy.j_per_output_token (its GPUs' joules over the "
                       "measured window ÷ its output tokens).", sources)


def frontier_section(curves: Sequence[Curve], sources: Sequence[str]) -> Section:
    """The frontier's section: its figure(s) and its points' table."""
    every = [(c.name, p) for c in curves for p in c.points]
    optimal = pareto([(p.x, p.y) for _, p in every])
    table = Table("The frontier's points", ("configuration", "point", "load", Y_LABEL,
                                            X_LABEL, "Pareto-optimal", "J/output token"),
                  tuple((name, p.label, cell(p.load), cell(p.y), cell(p.x),
                         "yes" if ok else "", cell(p.j_per_token))
                        for (name, p), ok in zip(every, optimal, strict=True)))
    energy = energy_figure(curves, sources)
    figures = (frontier_figure(curves, sources), *((energy,) if energy else ()))
    return Section("The frontier", "Output tok/s per GPU against tok/s per user (each "
                   "request's 1 / TPOT, p50); the figures are the steps' or runs' own.",
                   tables=(table,), figures=figures)
