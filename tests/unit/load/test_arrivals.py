"""arrivals: the gaps follow the distribution they claim, and the schedule is exact integers.

Why a goodness-of-fit test and not a fixed sample: an open-loop run is only comparable to
vLLM's bench (and to itself under another seed) if its gaps really are exponential /
gamma with mean 1/rate. A hard-coded expected draw would only restate numpy; the
Kolmogorov–Smirnov test checks the distribution, and a second test shows that the same
check rejects gaps that are not exponential, so it can fail. No scipy: the statistic and the
asymptotic Kolmogorov p-value are computed here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from anvil_metrics.load.arrivals import BLOCK, ArrivalPlan, Schedule, draw_gaps_s


def ks_exponential(gaps: np.ndarray, mean: float) -> tuple[float, float]:
    """(D, p): the one-sample KS statistic of `gaps` against Exp(mean), and the asymptotic
    Kolmogorov p-value 2·Σ_{k≥1} (−1)^{k−1} exp(−2k²nD²)."""
    x = np.sort(np.asarray(gaps, dtype=float))
    n = len(x)
    cdf = 1.0 - np.exp(-x / mean)
    i = np.arange(1, n + 1)
    d = float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))
    return d, kolmogorov_p(n, d)


def kolmogorov_p(n: int, d: float) -> float:
    t = 2.0 * n * d * d
    if t < 1e-3:  # the series converges slowly near 0, where the p-value is 1
        return 1.0
    p = 2.0 * sum((-1) ** (k - 1) * math.exp(-k * k * t) for k in range(1, 101))
    return min(1.0, max(0.0, p))


def test_kolmogorov_p_matches_known_critical_values() -> None:
    # the asymptotic critical values: sqrt(n)·D = 1.3581 at 5 %, 1.6276 at 1 %
    n = 10_000
    assert kolmogorov_p(n, 1.3581 / math.sqrt(n)) == pytest.approx(0.05, abs=5e-4)
    assert kolmogorov_p(n, 1.6276 / math.sqrt(n)) == pytest.approx(0.01, abs=2e-4)


@pytest.mark.parametrize("n", [400, 4096])
@pytest.mark.parametrize("seed", [0, 7, 12345])
@pytest.mark.parametrize("rate", [2.5, 60.0])
def test_poisson_gaps_are_exponential_with_mean_one_over_rate(n: int, seed: int,
                                                               rate: float) -> None:
    gaps = draw_gaps_s(ArrivalPlan(rate, "poisson", seed=seed), n)
    assert len(gaps) == n
    d, p = ks_exponential(gaps, 1.0 / rate)
    assert p > 0.01, f"KS rejects Exp(1/{rate}) for seed {seed}, n {n}: D {d:.4f}, p {p:.2e}"


@pytest.mark.parametrize("plan", [ArrivalPlan(10.0, "gamma", burstiness=0.3, seed=1),
                                  ArrivalPlan(10.0, "gamma", burstiness=4.0, seed=1),
                                  ArrivalPlan(10.0, "constant"),
                                  ArrivalPlan(20.0, "poisson", seed=1)])  # the wrong mean
def test_the_ks_check_rejects_gaps_that_are_not_exponential_with_that_mean(
        plan: ArrivalPlan) -> None:
    gaps = draw_gaps_s(plan, 400)
    d, p = ks_exponential(gaps, 1.0 / 10.0)
    assert p < 1e-4, f"{plan}: D {d:.4f}, p {p:.2e} (the check cannot tell)"


@pytest.mark.parametrize("burstiness", [0.3, 0.5, 2.0, 4.0])
def test_gamma_mean_and_squared_cv(burstiness: float) -> None:
    rate = 8.0
    gaps = draw_gaps_s(ArrivalPlan(rate, "gamma", burstiness=burstiness, seed=3), 20_000)
    mean = float(gaps.mean())
    cv2 = float(gaps.var()) / mean**2
    assert mean == pytest.approx(1.0 / rate, rel=0.10)
    assert cv2 == pytest.approx(1.0 / burstiness, rel=0.10)
    assert (gaps > 0).all()


def test_gamma_with_burstiness_one_is_the_poisson_draw() -> None:
    # vLLM's bench: burstiness 1 is the exponential distribution, from the same generator
    a = draw_gaps_s(ArrivalPlan(5.0, "gamma", burstiness=1.0, seed=4), 5000)
    b = draw_gaps_s(ArrivalPlan(5.0, "poisson", seed=4), 5000)
    assert np.array_equal(a, b)


def test_constant_gaps_are_exactly_one_over_rate() -> None:
    rate = 3.0
    gaps = draw_gaps_s(ArrivalPlan(rate, "constant"), BLOCK + 10)
    assert (gaps == 1.0 / rate).all()
    sched = Schedule(ArrivalPlan(rate, "constant"))
    step = round(1e9 / rate)  # 333_333_333 ns
    assert [sched.offset_ns(k) for k in range(2 * BLOCK + 3)] == [
        k * step for k in range(2 * BLOCK + 3)]


@pytest.mark.parametrize("plan", [ArrivalPlan(20.0, "poisson", seed=11),
                                  ArrivalPlan(20.0, "gamma", burstiness=0.4, seed=11),
                                  ArrivalPlan(1e6, "poisson", seed=2)])
def test_offsets_are_the_running_sum_of_the_rounded_gaps(plan: ArrivalPlan) -> None:
    n = 2 * BLOCK + 50  # across two block boundaries
    gaps_ns = [int(round(g * 1e9)) for g in draw_gaps_s(plan, n).tolist()]
    sched = Schedule(plan)
    offsets = [sched.offset_ns(k) for k in range(n)]
    want, total = [], 0
    for g in gaps_ns:
        want.append(total)
        total += g
    assert offsets[0] == 0
    assert offsets == want
    assert all(type(x) is int for x in offsets)
    assert offsets[BLOCK] - offsets[BLOCK - 1] == gaps_ns[BLOCK - 1]
    # non-decreasing (a gamma gap of shape < 1 can round to 0 ns: two arrivals at once)
    assert all(b >= a for a, b in zip(offsets, offsets[1:], strict=False))


def test_jumping_ahead_gives_the_same_offsets_as_walking() -> None:
    plan = ArrivalPlan(50.0, seed=9)
    walked = Schedule(plan)
    by_step = {k: walked.offset_ns(k) for k in range(3 * BLOCK)}
    jumped = Schedule(plan)
    for k in (5, BLOCK + 1, BLOCK, 3 * BLOCK - 1):  # earlier arrivals of the current block
        assert jumped.offset_ns(k) == by_step[k]


def test_same_seed_same_schedule_other_seed_another() -> None:
    def first(seed: int, n: int = 100) -> list[int]:
        s = Schedule(ArrivalPlan(10.0, "gamma", burstiness=0.5, seed=seed))
        return [s.offset_ns(k) for k in range(n)]

    assert first(5) == first(5)
    assert first(5) != first(6)
    other = first(6)
    assert sum(a == b for a, b in zip(first(5)[1:], other[1:], strict=True)) == 0


def test_asking_for_an_earlier_block_raises() -> None:
    sched = Schedule(ArrivalPlan(10.0, seed=1))
    sched.offset_ns(BLOCK + 3)
    assert sched.offset_ns(BLOCK) >= 0  # the current block is still there
    with pytest.raises(ValueError, match="already handed out"):
        sched.offset_ns(BLOCK - 1)


@pytest.mark.parametrize("kw,needle", [
    ({"rate_rps": 0.0}, "rate"),
    ({"rate_rps": -1.0}, "rate"),
    ({"rate_rps": math.nan}, "rate"),
    ({"rate_rps": math.inf}, "rate"),
    ({"rate_rps": 1.0, "arrival": "uniform"}, "arrival"),
    ({"rate_rps": 1.0, "arrival": "gamma", "burstiness": 0.0}, "burstiness"),
    ({"rate_rps": 1.0, "arrival": "gamma", "burstiness": -2.0}, "burstiness"),
    ({"rate_rps": 1.0, "arrival": "gamma", "burstiness": math.inf}, "burstiness"),
    ({"rate_rps": 1.0, "arrival": "poisson", "burstiness": 2.0}, "burstiness"),
])
def test_bad_plans_raise(kw: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ArrivalPlan(**kw)


def test_plan_to_dict() -> None:
    assert ArrivalPlan(2.0, "gamma", 0.5, 3).to_dict() == {
        "rate_rps": 2.0, "arrival": "gamma", "burstiness": 0.5, "seed": 3}
    assert ArrivalPlan(2.0, "constant").to_dict()["burstiness"] is None
