"""summary.stats: the mean, the delta of means, a variant's own bootstrap interval and the
Mann–Whitney test on the smallest samples, each against values worked out by hand.
(The delta's interval and larger exact cases: `test_decide.py`.)

Why by hand: a campaign has a handful of runs per variant, so an off-by-one in the U
distribution or a percentile taken at the wrong tail changes a promotion decision.
"""

from __future__ import annotations

import numpy as np
import pytest

from anvil_metrics.post.significance import (
    EXACT_MAX_PAIRS,
    Interval,
    bootstrap_mean_ci,
    delta_percent,
    mann_whitney,
    mean,
)


def test_mean_and_delta_by_hand() -> None:
    assert mean([]) is None and mean([1.0, 2.0, 6.0]) == 3.0
    assert delta_percent([120.0, 130.0], [100.0, 100.0]) == 25.0
    assert delta_percent([50.0], [100.0]) == -50.0
    assert delta_percent([], [1.0]) is None
    assert delta_percent([1.0], [0.0, 0.0]) is None  # a zero reference has no ratio


def test_an_interval_without_both_ends_is_no_list() -> None:
    assert Interval(-1.5, 2.0).as_list() == [-1.5, 2.0]
    assert Interval(None, None, "why").as_list() is None


def test_the_mean_interval_by_hand_and_its_seed() -> None:
    # three runs at 90, 100, 110: a resample's mean is 90 with probability 1/27 (3.7 %),
    # more than each 2.5 % tail, so the 95 % interval is exactly [90, 110]
    values = [90.0, 100.0, 110.0]
    assert bootstrap_mean_ci(values, seed=1) == (90.0, 110.0)
    narrow = bootstrap_mean_ci(values, seed=1, confidence=0.5)
    assert narrow is not None and 90.0 < narrow[0] < 100.0 < narrow[1] < 110.0


def test_bootstrap_mean_interval_by_hand() -> None:
    # two runs 1 and 3: a resampled mean is 1, 2 or 3 (1/4, 1/2, 1/4), so with 10,000
    # resamples the 2.5th and 97.5th percentiles are 1 and 3
    assert bootstrap_mean_ci([1.0, 3.0], seed=0) == (1.0, 3.0)
    assert bootstrap_mean_ci([5.0, 5.0, 5.0], seed=3) == (5.0, 5.0)
    assert bootstrap_mean_ci([5.0], seed=0) is None
    values = [10.0, 11.0, 12.5, 9.0, 10.5]
    low, high = bootstrap_mean_ci(values, seed=7)
    assert low < float(np.mean(values)) < high and (low, high) == bootstrap_mean_ci(values,
                                                                                     seed=7)
    assert 9.0 <= low and high <= 12.5


@pytest.mark.parametrize(("x", "y", "u", "p"), [
    # 1 against 2: the 3 orderings give U = 0, 1, 2 once each
    ([3.0], [1.0, 2.0], 2.0, 2 * 1 / 3),  # P(U ≥ 2) = 1/3
    ([1.5], [1.0, 2.0], 1.0, 1.0),  # P(U ≤ 1) = P(U ≥ 1) = 2/3, doubled and capped
    ([0.0], [1.0], 0.0, 1.0),  # 1 against 1: either order, p = 2 × 1/2
])
def test_mann_whitney_on_the_smallest_samples(x: list[float], y: list[float], u: float,
                                              p: float) -> None:
    got = mann_whitney(x, y)
    assert got is not None and got.method == "exact"
    assert (got.u, got.p_two_sided) == (u, p)


def test_many_pairs_take_the_normal_approximation() -> None:
    x = [float(i) for i in range(31)]
    y = [100.0 + i for i in range(30)]  # 31 × 30 = 930 pairs, none tied, all x below
    assert len(x) * len(y) > EXACT_MAX_PAIRS
    got = mann_whitney(x, y)
    assert got is not None and got.method.startswith("normal approximation")
    # σ² = 930/12 × 62 = 4805, z = (465 − ½)/√4805 = 6.70: p ≈ 2e-11
    assert got.u == 0.0 and 1e-11 < got.p_two_sided < 3e-11
    assert mann_whitney([1.0], []) is None


def test_the_smallest_p_is_that_of_two_separated_groups() -> None:
    from anvil_metrics.post.significance import mann_whitney, smallest_p

    for m, n in ((1, 1), (2, 2), (3, 3), (4, 4), (2, 5), (5, 5)):
        separated = mann_whitney([float(i) for i in range(m)],
                                 [100.0 + i for i in range(n)])
        assert separated is not None and separated.p_two_sided == smallest_p(m, n)
    assert (smallest_p(2, 2), smallest_p(3, 3)) == (1 / 3, 0.1)
    assert smallest_p(0, 3) is None


def test_u_by_ranks_is_the_count_of_pairs_ties_one_half() -> None:
    """U is computed from mid-ranks; it must be the definition's count of pairs, bit for bit,
    with many ties (values on a 1 ms grid) and sizes past the exact test's."""
    from anvil_metrics.post.significance import mann_whitney

    rng = np.random.default_rng(7)
    for m, n in ((3, 4), (40, 25), (300, 500)):
        x = np.round(rng.normal(100, 5, m))
        y = np.round(rng.normal(101, 5, n))
        pairs = float(np.sum(x[:, None] > y[None, :]) + 0.5 * np.sum(x[:, None] == y[None, :]))
        got = mann_whitney(list(x), list(y))
        assert got is not None and got.u == pairs


def test_a_quarter_of_a_large_run_is_tested_by_ranks_not_by_pairs() -> None:
    """The steady-state verdict tests 25,000 rows against 75,000: by ranks, not by a
    25,000 x 75,000 table of pairs."""
    from anvil_metrics.post.significance import mann_whitney

    rng = np.random.default_rng(8)
    got = mann_whitney(rng.normal(0, 1, 25_000), rng.normal(0.05, 1, 75_000))
    assert got is not None and got.p_two_sided < 1e-6  # 0.05 sd apart, 100,000 values
