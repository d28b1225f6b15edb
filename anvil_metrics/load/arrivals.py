"""Open-loop arrivals: one seeded schedule of due times for a run offered at a fixed rate.

Why a schedule, not a sleep per user: in an open-loop run the server is offered `rate`
requests per second whatever it does with them, so when a request is due must not depend on
when an earlier one finished. The whole run follows one sequence of inter-arrival times drawn
from one seeded generator; users are only the pool that executes it (`control.RequestBudget`
hands out arrival k at its due time to whichever user is free). In a distributed run the
master owns the schedule and hands out due times, so the union over workers is exactly the
single-process schedule for the same seed — never an independent process per worker, whose
superposition would be a different (and, for gamma, less bursty) process.

The draw follows vLLM's `benchmark_serving` (`--request-rate`, `--burstiness`): gaps are
gamma-distributed with shape `burstiness` and mean `1 / rate` (scale `1 / (rate ·
burstiness)`); burstiness 1 is the exponential distribution, i.e. Poisson arrivals; `constant`
is a gap of exactly `1 / rate`. The first arrival is due at the schedule's origin (offset 0),
arrival k at the sum of the first k gaps. Gaps are rounded to whole nanoseconds before they
are summed, so every offset is an exact integer and the same for any process that draws the
same seed in the same blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy only once a schedule is drawn: the option table needs ARRIVALS alone
    import numpy as np

ARRIVALS = ("poisson", "gamma", "constant")
BLOCK = 4096  # gaps drawn at a time (always this many: the sequence depends only on the seed)


@dataclass(frozen=True, slots=True)
class ArrivalPlan:
    """What an open-loop run offers: `rate_rps` requests per second, gaps of kind `arrival`
    ("poisson", "gamma" or "constant"), gamma shape `burstiness` (1.0 for poisson; unused for
    constant) and the generator's `seed`."""

    rate_rps: float
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise ValueError(f"rate must be a finite number > 0, got {self.rate_rps!r}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be one of {ARRIVALS}, got {self.arrival!r}")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise ValueError(f"burstiness must be a finite number > 0, got {self.burstiness!r}")
        if self.arrival == "poisson" and self.burstiness != 1.0:
            raise ValueError("poisson arrivals have burstiness 1; use arrival 'gamma' for "
                             f"burstiness {self.burstiness}")

    def to_dict(self) -> dict[str, object]:
        return {"rate_rps": self.rate_rps, "arrival": self.arrival,
                "burstiness": None if self.arrival == "constant" else self.burstiness,
                "seed": self.seed}


def _gaps_s(rng: np.random.Generator, plan: ArrivalPlan) -> np.ndarray:
    """The next `BLOCK` gaps of `plan`, in seconds."""
    import numpy as np

    if plan.arrival == "constant":
        return np.full(BLOCK, 1.0 / plan.rate_rps)
    shape = 1.0 if plan.arrival == "poisson" else plan.burstiness
    return rng.gamma(shape, 1.0 / (plan.rate_rps * shape), BLOCK)


def draw_gaps_s(plan: ArrivalPlan, n: int) -> np.ndarray:
    """The first `n` gaps of `plan`'s schedule as drawn, in seconds (before rounding to
    ns): what a test compares with the distribution."""
    import numpy as np

    rng = np.random.default_rng(plan.seed)
    blocks = [_gaps_s(rng, plan) for _ in range(-(-n // BLOCK))]
    return np.concatenate(blocks)[:n] if blocks else np.zeros(0)


class Schedule:
    """Due offsets of arrivals 0, 1, 2, … in integer nanoseconds from the schedule's origin,
    drawn lazily, `BLOCK` gaps at a time, from `numpy.random.default_rng(plan.seed)`. Only
    the current block is kept: arrivals are asked for in order (a day-long run at a high
    rate must not grow the generator)."""

    def __init__(self, plan: ArrivalPlan) -> None:
        import numpy as np

        self.plan = plan
        self._rng = np.random.default_rng(plan.seed)
        self._block = -1  # index of the block in `_offsets`
        self._offsets = np.zeros(0, dtype=np.int64)
        self._base_ns = 0  # offset of the first arrival of the next block

    def offset_ns(self, k: int) -> int:
        """When arrival `k` (0-based) is due, in ns after the origin (arrival 0: 0)."""
        block = k // BLOCK
        if block < self._block:
            raise ValueError(f"arrival {k} was already handed out (the schedule moves forward)")
        while self._block < block:
            import numpy as np

            gaps = np.rint(_gaps_s(self._rng, self.plan) * 1e9).astype(np.int64)
            self._offsets = self._base_ns + np.concatenate(([0], np.cumsum(gaps[:-1])))
            self._base_ns += int(gaps.sum())
            self._block += 1
        return int(self._offsets[k % BLOCK])
