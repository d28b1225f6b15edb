"""The live figures' percentile sketch (`live/sketch.py`): within its stated error of the
exact nearest rank, the same fed one value at a time or in arrays, and bounded by the values'
spread, never by how many there are."""

from __future__ import annotations

import random

import numpy as np

from anvil_metrics.live.figures import LIVE_PERCENTILES
from anvil_metrics.live.sketch import SKETCH_REL_ERROR, Sketch
from anvil_metrics.post import stats


def _expected(values: list[float]) -> dict[str, float | None]:
    out = {f"p{p}": stats.nearest_rank(values, p) for p in LIVE_PERCENTILES}
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    return out


def _within(got: float | None, exact: float | None) -> bool:
    if exact is None or got is None:
        return got is exact
    return abs(got - exact) <= SKETCH_REL_ERROR * abs(exact) * (1 + 1e-9)


def test_sketch_percentiles_are_within_the_stated_error_and_bounded() -> None:
    rng = np.random.default_rng(7)
    sketch = Sketch()
    fed: list[float] = []
    assert sketch.percentiles(LIVE_PERCENTILES) == _expected([])
    bins = []
    while len(fed) < 200_000:
        # batches of 1..3000, with ties, zeros and a slow drift, as a long run's TTFTs
        batch = np.round(rng.lognormal(5 + len(fed) / 1e5, 0.5, rng.integers(1, 3000)), 1)
        batch[rng.random(len(batch)) < 0.01] = 0.0
        sketch.extend(batch)
        fed.extend(batch.tolist())
        if rng.random() < 0.1:
            ordered = np.sort(np.array(fed))
            got = sketch.percentiles(LIVE_PERCENTILES)
            for p in LIVE_PERCENTILES:
                exact = float(ordered[stats.nearest_rank_index(len(fed), p)])
                assert _within(got[f"p{p}"], exact), (p, got, exact)
            assert (got["min"], got["max"]) == (ordered[0], ordered[-1])
            bins.append(len(sketch.bins))
    assert sketch.n == len(fed)
    # the bins span the values' spread (a factor ~e^3 here), not their number
    assert max(bins) < 1000 and max(bins) - bins[len(bins) // 2] < 200, bins


def test_one_value_at_a_time_and_whole_arrays_give_the_same_sketch() -> None:
    rng = random.Random(3)
    values = [rng.choice([rng.uniform(0, 100), 5.0, 0.0, 1e-9, 3e5]) for _ in range(3000)]
    one, many = Sketch(), Sketch()
    for v in values:
        one.add(v)
    many.extend(np.array(values[:1000]))
    many.extend(np.array(values[1000:2990]))
    many.extend(np.array(values[2990:]))  # short: value by value (SMALL_ARRAY)
    many.extend(np.array([]))
    assert one.bins == many.bins and one.n == many.n == 3000
    ps = (0, 1, 33, 50, 77, 100)
    assert one.percentiles(ps) == many.percentiles(ps)
    for p in ps:
        assert _within(one.percentiles(ps)[f"p{p}"], stats.nearest_rank(values, p)), p


def test_sketch_median_is_within_the_stated_error() -> None:
    rng = np.random.default_rng(5)
    for scale in (0.003, 1.0, 250.0, 8e6):
        values = (rng.lognormal(0, 1.5, 4001) * scale).tolist() + [0.0]
        sketch = Sketch()
        for v in values:
            sketch.add(v)
        exact = stats.nearest_rank(values, 50)
        assert abs(sketch.median() - exact) <= SKETCH_REL_ERROR * exact * (1 + 1e-9), scale
        assert len(sketch.bins) < 1000  # bounded by the spread, not by the count
    assert Sketch().median() is None
    zeros = Sketch()
    zeros.add(0.0)
    assert zeros.median() == 0.0
