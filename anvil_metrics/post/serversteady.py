"""The `server` block's `steady_state`: did each server (each role of `--server-metrics-url
ROLE=URL`, or the one server) hold its load over the measured window, by its own gauges?

Why per server: the run's verdict (`steady.py`) reads the client's rows only. In a
disaggregated or routed deployment the client can look steady while one server falls
behind (prefill keeps pace, the decode servers' queue grows), or one role drains while
another fills; each server's own running and waiting gauges say whether *it* held.

The rule, one implementation (`judge`), run at build and again by `anvil verify` on the
same samples file (`telemetry/servermetrics.py` hands it the window's gauges: a layer below,
it cannot import the rank test):

1. The series: the running and waiting requests gauges at each successful scrape from the
   `first` mark to the `last`, in order (the block's window).
2. Fewer than `MIN_SAMPLES` scrapes in the window: null, with the reason. 7 against 7 is
   the fewest whose completely separated halves give p < `P_LIMIT` at all
   (`significance.smallest_p`): with fewer, no change could be called beyond noise.
3. Each gauge's values are cut into halves (numpy's `array_split`: the first half takes
   the odd one), the nearest-rank p50 of each. It moved when |second − first| is more than
   `DRIFT_LIMIT` × max(first, 1) (gauges count requests: a change under one request is
   none) and the Mann-Whitney U test of the second half against the first gives p <
   `P_LIMIT` (`significance.mann_whitney`): the client verdict's two limits.
4. `drifting` when a gauge moved (the reason names the one that moved most); `steady` when
   a gauge was judged and none moved; `unknown` when the server reported neither gauge (an
   engine without them, or a gauge with fewer than `MIN_SAMPLES` values).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from anvil_metrics.post.significance import mann_whitney
from anvil_metrics.post.stats import nearest_rank_columns
from anvil_metrics.post.steady import DRIFT_LIMIT, P_LIMIT
from anvil_metrics.telemetry.serverfields import STEADY_GAUGES

MIN_SAMPLES = 14


def halves(values: list[float]) -> dict[str, Any] | None:
    """A gauge's `GaugeHalves` (module docstring, step 3); None with too few values."""
    if len(values) < MIN_SAMPLES:
        return None
    first, second = np.array_split(np.asarray(values, dtype=np.float64), 2)
    a, b = (nearest_rank_columns(h, (50,))[0] for h in (first, second))
    test = mann_whitney(second, first)
    p = 1.0 if test is None else test.p_two_sided
    moved = abs(b - a) > DRIFT_LIMIT * max(a, 1.0) and p < P_LIMIT
    return {"samples": len(values), "first_p50": a, "second_p50": b, "p_value": p,
            "moved": moved}


def judge(series: Mapping[str, list[float]], samples: int) -> tuple[dict[str, Any] | None, str]:
    """`telemetry.servermetrics.Judge`: the verdict of a window of `samples` scrapes and
    its gauges' values, or None and why (module docstring)."""
    if samples < MIN_SAMPLES:
        return None, (f"too few metrics samples in the window to judge: {samples} (at least "
                      f"{MIN_SAMPLES}; --server-metrics-interval sets how often)")
    gauges = {key: halves(list(series.get(key) or ())) for key in STEADY_GAUGES}
    judged = {k: g for k, g in gauges.items() if g is not None}
    moved = [(k, g) for k, g in judged.items() if g["moved"]]
    if moved:
        key, g = max(moved, key=lambda kg: abs(kg[1]["second_p50"] - kg[1]["first_p50"]))
        verdict, reason = "drifting", (
            f"{key}: p50 {g['first_p50']:g} in the window's first half, {g['second_p50']:g} "
            f"in its second (Mann-Whitney p {g['p_value']:.1e}, {g['samples']} samples)")
    elif judged:
        verdict, reason = "steady", (
            f"no gauge's p50 moved between the window's halves beyond ±{DRIFT_LIMIT:.0%} "
            f"(at least one request) with p < {P_LIMIT:g}: " + ", ".join(
                f"{k} {g['first_p50']:g} then {g['second_p50']:g}" for k, g in judged.items()))
    else:
        verdict, reason = "unknown", ("the server reported neither the running nor the "
                                      "waiting requests gauge")
    return {"verdict": verdict, "reason": reason, "samples": samples, "gauges": gauges}, ""
