"""`anvil compare A B [C …]`: two or more runs side by side, each figure's change from the
first, and whether the change is beyond noise.

Why: the question after most runs is "is B better than A?", and the answer needs more than
two numbers. A p95 of 200 requests moves by several percent from one run to the next of
the same server; a table of deltas without their noise invites promoting a model on luck.
So each figure that is a percentile of the rows gets a bootstrap interval of its change,
drawn from the rows themselves, and a marker where that interval excludes zero. A campaign
(`anvil campaign`, `anvil summarize`) answers the same question over repeated runs and is
the stronger evidence; compare needs no plan, only two files.

Definitions (`compare_runs`):

- A run is a `benchmark.json` or a folder holding one; the first is the baseline.
- The figures are the `metrics` keys that are percentiles of a row field (the catalogue's
  aggregates, in its order), then the run figures (`RUN_FIGURES`: throughput, goodput,
  tok/s per user, the per-GPU and per-dollar keys, energy.j_per_output_token); a figure null in
  every run is left out. `values` are the documents' own figures.
- `delta` is `value − baseline`, `delta_pct` is `100 × (value / baseline − 1)` (null when
  either is null or the baseline is 0); `change` is "better" or "worse" by the catalogue's
  direction of the figure (null for a size, or no change).
- The interval of a percentile's delta: each run's non-null values of the field are
  resampled with replacement (as many as it has, at most `MAX_VALUES`: a larger run is first
  sampled down to that many, seeded, which widens its interval, never narrows it),
  `resamples` times, independently per run; the nearest-rank percentile of each resample;
  the central `confidence` interval (`significance.percentile_interval`) of the differences
  (run − baseline). Each figure's draws come from a generator seeded with `seed` and the
  figure's position, so an interval does not depend on which other figures were compared.
  `beyond_noise` is true when the interval excludes 0; null without an interval (a run-level
  figure such as throughput has one value per run; a field with fewer than 2 values).
- `verdict` (`post.significance.effect_verdict`): `better`/`worse` only when `ci` lies wholly
  beyond ±the figure's minimum effect (`margin`, from `--min-effect`, 2 % of the baseline by
  default: `compare.effect`), `equivalent` when `ci_equivalence` (the 90 % interval of the
  same draws: two one-sided tests at 5 %) lies within it, else `inconclusive`, with `settle`:
  each run's values of the field (`values_n`, after `MAX_VALUES`) and the estimate of how many
  would settle it (`values_to_settle`: n × (h / d)², `significance.settle_factor`). `change`
  stays the direction of the point delta, whatever its size.
- Each run's `steady_state` verdict is carried beside it: a drifting run's percentiles are
  of no load in particular, and the text says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.compare import RESAMPLES
from anvil_metrics.compare.effect import DEFAULT, MinEffect
from anvil_metrics.errors import UsageError, VerifyError
from anvil_metrics.post.benchmark import load_benchmark
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.significance import (
    CONFIDENCE,
    effect_verdict,
    equivalence_confidence,
    percentile_interval,
    settle_factor,
)
from anvil_metrics.post.stats import nearest_rank_index
from anvil_metrics.summaryfigures import BLOCK_FIGURES, run_figure, unit_and_better

SCHEMA = "anvil-serving.compare/v1"
MAX_VALUES = 10_000
RUN_FIGURES = ("throughput_tok_s", "goodput_rps", "decode_tok_s_mean", "decode_tok_s_weighted",
               *(a.name for a in catalog.PER_GPU_AGGREGATES), *BLOCK_FIGURES)
# (metrics key, row field, percentile) of every percentile aggregate, in the catalogue's order
PERCENTILE_FIGURES: tuple[tuple[str, str, int], ...] = tuple(
    (name, f.name, p) for f in catalog.ROW if f.percentiles
    for name, p in zip(f.percentile_names(), catalog.PERCENTILES, strict=True))


@dataclass(frozen=True, slots=True)
class ComparedRun:
    """One run as compare reads it: where from, its document and its rows as columns."""

    path: Path
    doc: dict[str, Any]
    rows: RowColumns


def read_run(where: str | Path) -> ComparedRun:
    """The run at `where` (a benchmark.json, or a folder holding one); UsageError naming it
    when there is none or it is not a benchmark."""
    p = Path(where)
    path = p / "benchmark.json" if p.is_dir() else p
    if not path.is_file():
        raise UsageError(f"compare: {str(where)!r}: no benchmark.json there; pass a run's "
                         "folder or its benchmark.json")
    try:
        doc = load_benchmark(path)
    except VerifyError as e:
        raise UsageError(f"compare: {path}: not a benchmark file ({e})") from None
    rows = RowColumns.from_rows(doc.get("request_timings"))
    if doc.get("schema") != "anvil-serving.benchmark/v1" or rows is None:
        raise UsageError(f"compare: {path}: not a well-formed benchmark/v1 file; "
                         f"`anvil verify {path}` says what is wrong")
    return ComparedRun(path, doc, rows)


def _resampled(rng: Any, values: Any, p: int, resamples: int) -> Any:
    """The nearest-rank p-th percentile of each of `resamples` resamples of `values`."""
    if len(values) > MAX_VALUES:
        values = rng.choice(values, MAX_VALUES, replace=False)
    k = nearest_rank_index(len(values), p)
    out = np.empty(resamples)
    step = max(1, 4_000_000 // len(values))  # resamples a block: bounded memory
    for lo in range(0, resamples, step):
        draw = values[rng.integers(0, len(values), size=(min(step, resamples - lo),
                                                          len(values)))]
        out[lo:lo + len(draw)] = np.partition(draw, k, axis=1)[:, k]
    return out


def _change(better: str | None, delta: float | None) -> str | None:
    if better is None or not delta:
        return None
    return "better" if (delta > 0) == (better == "higher") else "worse"


@dataclass(frozen=True, slots=True)
class Draws:
    """The intervals of one run's delta from the baseline, and each side's count of values."""

    ci: tuple[float, float]
    ci_equivalence: tuple[float, float]
    sizes: tuple[int, int]


def _settle(draws: Draws, margin: float) -> dict[str, Any]:
    """An inconclusive change's sizes and the estimate of those that would settle it."""
    factor = settle_factor(draws.ci, draws.ci_equivalence, margin)
    return {"values_n": list(draws.sizes), "values_to_settle": None if factor is None else
            [math.ceil(n * factor) for n in draws.sizes]}


def _versus(base: float | None, value: float | None, better: str | None,
            draws: Draws | None, margin: float | None) -> dict[str, Any]:
    delta = None if base is None or value is None else value - base
    pct = None if delta is None or base == 0 else 100.0 * (value / base - 1.0)  # type: ignore
    ci = None if draws is None else draws.ci
    eq = None if draws is None else draws.ci_equivalence
    verdict = effect_verdict(ci, eq, margin, better)
    return {"delta": delta, "delta_pct": pct, "ci": None if ci is None else list(ci),
            "beyond_noise": None if ci is None else not (ci[0] <= 0.0 <= ci[1]),
            "change": _change(better, delta),
            "ci_equivalence": None if eq is None else list(eq),
            "margin_abs": margin, "verdict": verdict,
            "settle": _settle(draws, margin) if verdict == "inconclusive" else None}  # type: ignore[arg-type]


def _interval(runs: list[ComparedRun], field: str, p: int, i: int, seed: int,
              position: int, resamples: int, confidence: float) -> Draws | None:
    """The intervals of run i's delta from the baseline, for the p-th percentile of `field`."""
    cols = [r.rows.values(field) for r in (runs[0], runs[i])]
    cols = [c[~np.isnan(c)] for c in cols]
    if min(len(c) for c in cols) < 2:
        return None
    rng = np.random.default_rng([seed, position, i])
    base, other = (_resampled(rng, c, p, resamples) for c in cols)
    return Draws(percentile_interval(other - base, confidence),
                 percentile_interval(other - base, equivalence_confidence(confidence)),
                 (min(len(cols[0]), MAX_VALUES), min(len(cols[1]), MAX_VALUES)))


def compare_runs(runs: list[ComparedRun], *, seed: int = 0, resamples: int = RESAMPLES,
                 confidence: float = CONFIDENCE, min_effect: MinEffect = DEFAULT
                 ) -> dict[str, Any]:
    """The comparison (module docstring) of two or more runs, the first the baseline, as the
    `anvil-serving.compare/v1` document `--json` writes."""
    if len(runs) < 2:
        raise UsageError(f"compare: {len(runs)} run given; pass two or more (the first is "
                         "the baseline)")
    figures = []
    keys = [(name, field, p) for name, field, p in PERCENTILE_FIGURES] + [
        (name, None, None) for name in RUN_FIGURES]
    for position, (name, field, p) in enumerate(keys):
        values = [run_figure(r.doc, name) for r in runs]
        values = [v if isinstance(v, int | float) and math.isfinite(v) else None
                  for v in values]
        if all(v is None for v in values):
            continue
        unit, better = unit_and_better(name)
        margin = min_effect.of(name, unit)
        versus: list[dict[str, Any] | None] = [None]
        for i in range(1, len(runs)):
            draws = None if field is None or p is None or None in (values[0], values[i]) else (
                _interval(runs, field, p, i, seed, position, resamples, confidence))
            versus.append(_versus(values[0], values[i], better, draws,
                                  margin.absolute(values[0])))
        figures.append({"name": name, "unit": unit, "better": better, "values": values,
                        "margin": margin.to_json(), "vs_baseline": versus})
    return {"schema": SCHEMA, "baseline": 0, "seed": seed, "resamples": resamples,
            "confidence": confidence,
            "equivalence_confidence": equivalence_confidence(confidence),
            "max_values": MAX_VALUES,
            "runs": [_run_entry(r) for r in runs], "figures": figures}


def figure_units() -> dict[str, str]:
    """Every figure compare may show -> its unit (what `--min-effect` may name)."""
    return {name: unit_and_better(name)[0]
            for name in (*(n for n, _, _ in PERCENTILE_FIGURES), *RUN_FIGURES)}


def _run_entry(run: ComparedRun) -> dict[str, Any]:
    doc = run.doc
    steady = doc.get("steady_state")
    return {"path": str(run.path), "run_id": doc.get("run_id"), "model": doc.get("model"),
            "concurrency": doc.get("concurrency"), "requests": doc.get("requests"),
            "completed": doc.get("completed"), "failed": doc.get("failed"),
            "steady_state": steady.get("verdict") if isinstance(steady, dict) else None}
