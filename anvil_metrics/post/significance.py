"""Is a difference beyond noise? Deltas of means, their bootstrap intervals, and the
Mann–Whitney U test, without scipy.

Why a module of its own, in `post/`: three places ask it. A campaign summary compares a
handful of runs per variant (`summary/decide.py`), `anvil compare` compares two runs' rows
(`compare/`), and the steady-state verdict compares a quarter of a run's requests with the
rest (`post/steady.py`). Each formula is here once, tested against hand-computed cases.
No normality is assumed: the intervals are percentile bootstraps, the test is rank-based.

Definitions:

- `delta_percent(x, ref)`: `100 × (mean(x) / mean(ref) − 1)`, the spec's
  "variant / baseline − 1"; null when a mean is missing or the reference mean is zero.
- `bootstrap_delta_ci(x, ref)`: each variant's run values are resampled independently (with
  replacement, as many as it has), `resamples` times (10,000 by default), and the delta of
  the resampled means is computed each time; the interval is the 2.5th and 97.5th
  percentiles of those deltas (numpy's default linear interpolation between order
  statistics). Every call draws from a fresh `numpy.random.Generator` (PCG64) seeded with
  `seed`, so an interval does not depend on which other intervals were computed, and the same
  inputs and seed give the same bits. It needs two runs in each variant (with one, every
  resample is the same run and the "interval" would be a point that claims certainty).
- `bootstrap_mean_ci(x)`: the same percentile bootstrap of one variant's mean (its run values
  resampled with replacement, `resamples` times, from a generator seeded with `seed`): the
  error bars of a report's bars (`report/campaignfigs.py`); not a member of the summary.
- `mann_whitney(x, y)`: U of `x` is the number of pairs (x_i, y_j) with x_i > y_j, ties
  counting one half, computed as the rank sum of x − n_x(n_x + 1)/2 over the pooled values
  (mid-ranks for ties: halves, so exact in float64 below 2**52 values; O(n log n), so a
  run's thousands of rows cost what sorting them costs). The p-value is two-sided:
  * exact when no value is tied and n_x·n_y ≤ 900: the distribution of U under the null
    hypothesis (every ordering of the pooled values equally likely) is counted in integers,
    and p = min(1, 2 × min(P(U ≤ u), P(U ≥ u))) — 5 runs against 5, completely separated,
    gives 2/252;
  * otherwise the normal approximation with the tie correction and a continuity correction
    of ½: σ² = n_x n_y / 12 × ((n + 1) − Σ(t³ − t) / (n(n − 1))) over the groups of t tied
    values, z = (|U − n_x n_y / 2| − ½) / σ (at least 0), p = erfc(z / √2); when every value
    is tied (σ = 0), p = 1.
- `smallest_p(n_x, n_y)`: the smallest two-sided p the exact test can give at all with
  these run counts, the two groups completely separated: 2 / C(n_x + n_y, n_x), at most 1
  (2 against 2: 1/3; 3 against 3: 1/10; 4 against 4: 1/35). Above 0.05 the runs are too
  few for the test to call any difference significant, however large.
- `effect_verdict(ci, ci_equivalence, margin, better)`: a change that matters, not only one
  beyond noise. `ci` is the `confidence` (95 %) interval of a delta, `ci_equivalence` the
  `equivalence_confidence` (2 × confidence − 1: 90 %) interval from the same draws, `margin`
  the minimum effect (≥ 0, in the delta's unit). `worse`/`better` (by the figure's
  direction; `changed` for a figure without one) when `ci` lies wholly beyond ±margin
  (so it excludes 0 too: beyond noise and beyond the margin); `equivalent` when
  `ci_equivalence` lies wholly within [−margin, +margin] (two one-sided tests at α = 5 %
  each: the textbook 90 % interval); `inconclusive` otherwise (an interval straddles a
  margin). A change beyond noise but inside the margin is `equivalent`, never better/worse.
- `settle_factor(ci, ci_equivalence, margin)`: for an inconclusive verdict, how many times
  more values each side would settle it, on the estimate that an interval's half-width h
  shrinks as 1/√n and its midpoint c stays: (h / d)², d the distance from c to the margin
  it must clear (|c| − margin toward beyond, by `ci`; margin − |c| toward equivalent, by
  `ci_equivalence`, the side `ci`'s midpoint lies on); None when d is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
MIN_EFFECT_PERCENT = 2.0  # the default minimum effect, relative to the baseline
VERDICTS = ("worse", "better", "changed", "inconclusive", "equivalent")  # as text groups them
EXACT_MAX_PAIRS = 900  # n_x · n_y up to which the exact distribution of U is counted


@dataclass(frozen=True, slots=True)
class Interval:
    """A bootstrap interval of a delta, in percent, or why there is none."""

    low_percent: float | None
    high_percent: float | None
    reason: str | None = None

    def as_list(self) -> list[float] | None:
        if self.low_percent is None or self.high_percent is None:
            return None
        return [self.low_percent, self.high_percent]


@dataclass(frozen=True, slots=True)
class MannWhitney:
    """U of the first sample, the two-sided p-value and which method gave it."""

    u: float
    p_two_sided: float
    method: str  # "exact" or "normal approximation, tie- and continuity-corrected"


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean (numpy's pairwise sum over float64), None for no values."""
    return float(np.mean(np.asarray(values, dtype=np.float64))) if len(values) else None


def delta_percent(values: Sequence[float], reference: Sequence[float]) -> float | None:
    """`100 × (mean(values) / mean(reference) − 1)`; None without values or a zero reference."""
    a, b = mean(values), mean(reference)
    if a is None or b is None or b == 0:
        return None
    return 100.0 * (a / b - 1.0)


def bootstrap_delta_ci(values: Sequence[float], reference: Sequence[float], *,
                       seed: int, resamples: int = RESAMPLES,
                       confidence: float = CONFIDENCE) -> Interval:
    """The percentile bootstrap interval of `delta_percent(values, reference)` (module doc)."""
    if len(values) < 2 or len(reference) < 2:
        return Interval(None, None, f"needs at least 2 runs in each variant (has "
                        f"{len(values)} and {len(reference)})")
    rng = np.random.default_rng(seed)
    x_means = _resampled_means(rng, values, resamples)
    r_means = _resampled_means(rng, reference, resamples)
    if np.any(r_means == 0):
        return Interval(None, None, "a resampled reference mean is zero")
    low, high = percentile_interval(100.0 * (x_means / r_means - 1.0), confidence)
    return Interval(low, high)


def bootstrap_mean_ci(values: Sequence[float], *, seed: int, resamples: int = RESAMPLES,
                      confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The percentile bootstrap interval (low, high) of `mean(values)` (module doc), in the
    values' unit; None with fewer than 2 values (no interval, as for a delta)."""
    if len(values) < 2:
        return None
    means = _resampled_means(np.random.default_rng(seed), values, resamples)
    return percentile_interval(means, confidence)


def bootstrap_rows_ci(n: int, statistics: Callable[[Any], Sequence[float | None]], *,
                      seed: int, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
                      ) -> list[tuple[float, float] | None]:
    """The percentile bootstrap interval of each of `statistics(indices)`, a tuple of figures
    of n rows: the rows are resampled with replacement (`indices`, n of them) `resamples`
    times; a figure null in any resample, or fewer than 2 rows, has no interval (None)."""
    rng = np.random.default_rng(seed)
    draws = [statistics(rng.integers(0, n, size=n)) for _ in range(resamples if n >= 2 else 0)]
    out: list[tuple[float, float] | None] = []
    for k in range(len(draws[0]) if draws else 0):
        got = [d[k] for d in draws]
        out.append(None if any(v is None for v in got)
                   else percentile_interval(np.asarray(got, dtype=np.float64), confidence))
    return out


def _resampled_means(rng: Any, values: Sequence[float], resamples: int) -> Any:
    """The means of `resamples` resamples of `values` with replacement (the next draws of
    `rng`)."""
    x = np.asarray(values, dtype=np.float64)
    return x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)


def percentile_interval(samples: Any, confidence: float) -> tuple[float, float]:
    """The central `confidence` interval of `samples` (their percentiles at the tails)."""
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail])
    return float(low), float(high)


def equivalence_confidence(confidence: float) -> float:
    """The level of the interval the two one-sided tests read: 1 − 2α for α = 1 − confidence
    (0.95 → 0.90)."""
    return 2.0 * confidence - 1.0


Pair = tuple[float, float]


def effect_verdict(ci: Pair | None, ci_equivalence: Pair | None, margin: float | None,
                   better: str | None) -> str | None:
    """better / worse / changed / equivalent / inconclusive (module doc); None without an
    interval or a margin."""
    if ci is None or ci_equivalence is None or margin is None:
        return None
    if ci[0] > margin or ci[1] < -margin:
        if better is None:
            return "changed"
        return "better" if (ci[0] > 0) == (better == "higher") else "worse"
    if -margin <= ci_equivalence[0] and ci_equivalence[1] <= margin:
        return "equivalent"
    return "inconclusive"


def settle_factor(ci: Pair, ci_equivalence: Pair, margin: float) -> float | None:
    """(h / d)² for an inconclusive verdict (module doc)."""
    mid = (ci[0] + ci[1]) / 2.0
    if abs(mid) > margin:
        half, distance = (ci[1] - ci[0]) / 2.0, abs(mid) - margin
    else:
        eq_mid = (ci_equivalence[0] + ci_equivalence[1]) / 2.0
        half, distance = (ci_equivalence[1] - ci_equivalence[0]) / 2.0, margin - abs(eq_mid)
    if distance <= 0.0:
        return None
    return (half / distance) ** 2


def _u_counts(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) orderings give each U = 0 … m·n (no ties)."""
    # counts[j][u]: orderings of i x-values and j y-values with U = u; adding an x-value
    # that is larger than every y-value so far adds j to U, so rows are built i by i.
    prev = [[1] for _ in range(n + 1)]  # i = 0: U is 0
    for i in range(1, m + 1):
        row: list[list[int]] = [[1]]  # j = 0: U is 0
        for j in range(1, n + 1):
            # the largest pooled value is an x (U grows by j) or a y (U unchanged)
            with_x, with_y = prev[j], row[j - 1]
            size = i * j + 1
            c = [0] * size
            for u, k in enumerate(with_x):
                c[u + j] += k
            for u, k in enumerate(with_y):
                c[u] += k
            row.append(c)
        prev = row
    return prev[n]


def smallest_p(n_x: int, n_y: int) -> float | None:
    """The smallest two-sided exact Mann–Whitney p with these run counts (module doc);
    None when a group is empty."""
    if n_x < 1 or n_y < 1:
        return None
    return min(1.0, 2 / math.comb(n_x + n_y, n_x))


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> MannWhitney | None:
    """The two-sided Mann–Whitney U test of `x` against `y` (module doc); None if one is empty."""
    m, n = len(x), len(y)
    if not m or not n:
        return None
    pooled = np.concatenate([np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)])
    order = np.argsort(pooled, kind="stable")
    _, first, inverse, tie_sizes = np.unique(pooled[order], return_index=True,
                                             return_inverse=True, return_counts=True)
    ranks = np.empty(len(pooled))
    ranks[order] = (first + (tie_sizes + 1) / 2.0)[inverse]  # from 1, mid-ranks for ties
    u = float(ranks[:m].sum()) - m * (m + 1) / 2.0
    tied = bool(np.any(tie_sizes > 1))
    if not tied and m * n <= EXACT_MAX_PAIRS:
        counts = _u_counts(m, n)
        total = sum(counts)
        k = int(u)
        low, high = Fraction(sum(counts[: k + 1]), total), Fraction(sum(counts[k:]), total)
        return MannWhitney(u, float(min(Fraction(1), 2 * min(low, high))), "exact")
    size = m + n
    ties = float(np.sum(tie_sizes.astype(np.float64) ** 3 - tie_sizes))
    variance = m * n / 12.0 * ((size + 1) - ties / (size * (size - 1)))
    method = "normal approximation, tie- and continuity-corrected"
    if variance <= 0:
        return MannWhitney(u, 1.0, method)
    z = max(0.0, abs(u - m * n / 2.0) - 0.5) / math.sqrt(variance)
    return MannWhitney(u, min(1.0, math.erfc(z / math.sqrt(2.0))), method)
