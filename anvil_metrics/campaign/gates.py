"""The promotion gates a campaign file may set (`[gates]`): each one's allowed values and
meaning in words, checked by `campaign/spec.py` before the first run.

Why a module of its own: the table grows with every gate, and the campaign file's loader
should not. The names, and the improvement gates' directions, are
`summaryfigures.KNOWN_GATES` / `IMPROVEMENT_GATES` (where the summary decides them), so the
file's checks and the decision cannot drift apart (the assert below).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.summaryfigures import IMPROVEMENT_GATES, KNOWN_GATES, PASS_RATE_GATE


@dataclass(frozen=True, slots=True)
class Gate:
    """One promotion gate a campaign may set: what its value must be and what it means."""

    name: str
    meaning: str  # what passing means, in words
    expected: str  # the values allowed, in words (for the problem lines)
    accepts: Callable[[Any], bool]
    compares: bool  # needs an incumbent to compare the candidate with


def _number(low: float, high: float = math.inf) -> Callable[[Any], bool]:
    return lambda v: (not isinstance(v, bool) and isinstance(v, int | float)
                      and math.isfinite(v) and low < v < high)


def _improvement_gate(name: str, field: str, higher_is_better: bool) -> Gate:
    if higher_is_better:
        meaning = (f"the candidate's {field} (mean of run medians) is at least this many "
                   "percent above the incumbent's: 100 × (candidate / incumbent − 1) >= value")
        return Gate(name, meaning, "a number of percent above -100", _number(-100.0), True)
    meaning = (f"the candidate's {field} (mean of run medians) is at least this many percent "
               "below the incumbent's: 100 × (1 − candidate / incumbent) >= value")
    return Gate(name, meaning, "a number of percent between -100 and 100 (exclusive)",
                _number(-100.0, 100.0), True)


# The gates a campaign may set: the names and directions are `summaryfigures.IMPROVEMENT_GATES`
# (where they are decided, by their 95 % intervals), so the two cannot drift apart.
GATES: dict[str, Gate] = {g.name: g for g in (
    *(_improvement_gate(name, field, higher)
      for name, (field, higher) in IMPROVEMENT_GATES.items()),
    Gate("functional",
         "every functional check of the candidate passed",
         '"all_pass"', lambda v: v == "all_pass", False),
    Gate("no_saturated_runs",
         "true: no run of the campaign was client-bound (its saturation flag is off); "
         "false: the gate is off",
         "true or false", lambda v: isinstance(v, bool), False),
    Gate(PASS_RATE_GATE,
         "every check class of the candidate's runs ([[request_class]] check = ...) passes "
         "at least this share of its answers under load: passed / judged pooled over its "
         "runs, the 95 % Wilson interval's lower end >= value",
         "a pass rate between 0 and 1, e.g. 0.99",
         lambda v: (not isinstance(v, bool) and isinstance(v, int | float)
                    and math.isfinite(v) and 0 <= v <= 1), False),
)}
assert set(GATES) == set(KNOWN_GATES), "campaign and summary disagree on the gates"
