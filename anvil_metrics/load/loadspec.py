"""The load a scenario asks for, parsed and checked: a duration, an open-loop plan, a sweep.

Kept apart from `scenario.py` (the rest of a scenario's fields) so that each stays short:
these keys — `duration`, `rate`, `arrival`, `burstiness`, `arrival_seed`, `steps`, `rates`,
`step_duration` (and the windows' `warmup`/`cooldown`, durations too) — are what the load
models of `arrivals.py`, `control.py`, `steps.py` and `loadblock.py` run on. Each bad value
raises `ScenarioError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.arrivals import ARRIVALS, ArrivalPlan


def _err(field_name: str, value: Any, allowed: str, source: str | None) -> ScenarioError:
    return ScenarioError(field_name, value, allowed, source=source)


def parse_duration(text: str) -> float | None:
    """Seconds of a Locust-style timespan ("90", "90s", "5m", "1h30m", "1.5h"), or None if
    it is not one (or not > 0)."""
    m = _TIMESPAN.fullmatch(text.strip().lower())
    if not m or not any(m.groups()):
        return None
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + sec
    return total if math.isfinite(total) and total > 0 else None


_TIMESPAN = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def duration_of(v: Any, source: str | None, name: str = "duration") -> float:
    seconds = None
    if isinstance(v, int | float) and not isinstance(v, bool):
        seconds = float(v) if math.isfinite(v) and v > 0 else None
    elif isinstance(v, str):
        seconds = parse_duration(v)
    if seconds is None:
        raise _err(name, v, 'a time > 0: seconds, or text such as "90s", "5m", "1h30m"',
                   source)
    return seconds


def steps_of(data: dict[str, Any], source: str | None
           ) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None, float | None]:
    """(users per step, rates per step, step duration) of a sweep, or Nones."""
    users, rates = data.get("steps"), data.get("rates")
    if users is None and rates is None:
        if "step_duration" in data:
            raise _err("step_duration", data["step_duration"], "only with steps or rates",
                       source)
        return None, None, None
    if users is not None and rates is not None:
        raise _err("rates", rates, "not with steps: a sweep changes users or a rate", source)
    if "step_duration" not in data:
        raise _err("step_duration", None, 'how long each step lasts, e.g. "60s"', source)
    step_s = duration_of(data["step_duration"], source, "step_duration")
    if users is not None:
        if not (isinstance(users, list) and users and all(
                type(u) is int and u >= 1 for u in users)):
            raise _err("steps", users, "a list of user counts >= 1, e.g. [1, 4, 16]", source)
        return tuple(users), None, step_s
    if not (isinstance(rates, list) and rates and all(
            type(r) in (int, float) and math.isfinite(r) and r > 0 for r in rates)):
        raise _err("rates", rates, "a list of rates > 0 (requests/s), e.g. [1, 2, 4]", source)
    if "rate" in data:
        raise _err("rate", data["rate"], "not with rates (each step has its own)", source)
    return None, tuple(float(r) for r in rates), step_s


def arrivals_of(data: dict[str, Any], source: str | None) -> ArrivalPlan | None:
    """The open-loop plan of `rate`, `arrival`, `burstiness`, `arrival_seed` (None without a
    rate; the others need one)."""
    rate = data.get("rate")
    if rate is None:
        for k in ("arrival", "burstiness", "arrival_seed"):
            if k in data:
                raise _err(k, data[k], "only with a rate (requests/s) for an open-loop run",
                           source)
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not (
            math.isfinite(rate) and rate > 0):
        raise _err("rate", rate, "a number of requests per second > 0", source)
    arrival = data.get("arrival", "poisson")
    if arrival not in ARRIVALS:
        raise _err("arrival", arrival, f"one of {list(ARRIVALS)}", source)
    burst = data.get("burstiness", 1.0)
    if isinstance(burst, bool) or not isinstance(burst, int | float) or not (
            math.isfinite(burst) and burst > 0):
        raise _err("burstiness", burst, "a number > 0 (gamma shape; 1 = Poisson)", source)
    if arrival == "poisson" and burst != 1:
        raise _err("burstiness", burst, '1 with arrival = "poisson" (use arrival = "gamma" '
                   "for other shapes)", source)
    seed = data.get("arrival_seed", 0)
    if type(seed) is not int or seed < 0:
        raise _err("arrival_seed", seed, "a whole number >= 0", source)
    return ArrivalPlan(float(rate), arrival, float(burst), seed)
