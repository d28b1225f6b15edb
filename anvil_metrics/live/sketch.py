"""A bounded percentile sketch: how the live figures keep every value of a run that lasts
days in memory that does not grow with the number of requests.

Why its own module: the live table, the charts' per-bucket medians and the TTFT CDF all read
percentiles off the same structure, and its error bound is a claim the page states. A value
goes into a log bin (`Sketch`: counts of values within a factor SKETCH_GAMMA = 1.02 of each
other, and the exact min and max), so a nearest-rank percentile read from it is within
SKETCH_REL_ERROR (under 1 %) of the exact one, and its size depends on the spread of the
values (a few hundred bins), never on how many there are.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from anvil_metrics.post import stats

SKETCH_GAMMA = 1.02  # a sketch bin holds values within a factor 1.02 of each other
SKETCH_REL_ERROR = (SKETCH_GAMMA - 1) / (SKETCH_GAMMA + 1)  # < 0.01
SMALL_ARRAY = 32  # `extend` adds arrays this short value by value


class Sketch:
    """Counts of values in log bins of relative width SKETCH_GAMMA (one bin for values
    <= 0), with the exact min and max: a nearest-rank percentile read from it is within
    SKETCH_REL_ERROR of the exact one (the bin's relative middle stands for its values)."""

    __slots__ = ("bins", "n", "lo", "hi")

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.n = 0
        self.lo = math.inf
        self.hi = -math.inf

    def add(self, v: float) -> None:
        self.bins[_bin(v)] += 1
        self.n += 1
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def extend(self, values: Any) -> None:
        """Add a float64 array (no NaN: the caller drops missing values). A short one value
        by value: numpy's fixed cost (~85 µs a call here) is more than `add`'s ~1 µs a
        value below SMALL_ARRAY, and the live figures extend 7 sketches per slice of rows."""
        if len(values) <= SMALL_ARRAY:
            for v in values.tolist():
                self.add(v)
            return
        with np.errstate(divide="ignore"):
            keys = np.where(values > 0, np.ceil(np.log(np.where(values > 0, values, 1.0))
                                                / _LOG_GAMMA), _ZERO_BIN).astype(np.int64)
        uniq, counts = np.unique(keys, return_counts=True)
        self.bins.update(dict(zip(uniq.tolist(), counts.tolist(), strict=True)))
        self.n += len(values)
        self.lo, self.hi = min(self.lo, float(values.min())), max(self.hi, float(values.max()))

    def merge(self, other: Sketch) -> None:
        self.bins.update(other.bins)
        self.n += other.n
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)

    def percentiles(self, ps: tuple[int, ...]) -> dict[str, float | None]:
        """{"p50": …, …, "min": …, "max": …}: nearest rank over the bins (min, max exact, and
        so is a percentile whose rank is the first or the last)."""
        if self.n == 0:
            return {**{f"p{p}": None for p in ps}, "min": None, "max": None}
        wanted = sorted((stats.nearest_rank_index(self.n, p) + 1, p) for p in ps)
        out: dict[str, float | None] = {}
        seen, at = 0, 0
        for key in sorted(self.bins):
            seen += self.bins[key]
            while at < len(wanted) and seen >= wanted[at][0]:
                rank = wanted[at][0]
                value = 0.0 if key == _ZERO_BIN else 2 * SKETCH_GAMMA ** key / (SKETCH_GAMMA + 1)
                # the smallest and the largest value are known exactly
                out[f"p{wanted[at][1]}"] = (self.lo if rank == 1 else self.hi if rank == self.n
                                            else min(max(value, self.lo), self.hi))
                at += 1
        return {**{f"p{p}": out[f"p{p}"] for p in ps}, "min": self.lo, "max": self.hi}

    def median(self) -> float | None:
        return self.percentiles((50,))["p50"]


_LOG_GAMMA = math.log(SKETCH_GAMMA)
_ZERO_BIN = -(1 << 30)


def _bin(v: float) -> int:
    return math.ceil(math.log(v) / _LOG_GAMMA) if v > 0 else _ZERO_BIN
