"""The minimum effect of `anvil compare` (`--min-effect`): the margin a change must clear to
be called better or worse, and within which it is equivalent, per figure.

Why: on a few hundred tight rows an interval excludes zero for a −0.2 % change, which no
one would act on; a column of "better" and "worse" for such changes hides the ones that
matter. The rule that reads the margin is `post.significance.effect_verdict`; this module
only says what the margin is for each figure.

The flag's value is comma-separated parts: `2%` (the default for every figure, relative to
the baseline's value; for a time at least 1 ms, `MS_FLOOR`), `NAME=5%` (one figure,
relative), `NAME=10ms` or `NAME=10` (one figure, absolute, in its own unit: the unit, when
written, must be the figure's). A later part wins.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.post.significance import MIN_EFFECT_PERCENT

FLAG = "--min-effect"
PERCENT = "%"
# a time's default margin is never under 1 ms: the generator's own precision (its pacing
# p99 is under 1 ms; a role-only first chunk takes ~0.4 ms), so a smaller difference between
# runs is the client's, not the server's; a margin given for the figure has no floor
MS_FLOOR = 1.0


@dataclass(frozen=True, slots=True)
class Margin:
    """A minimum effect: `value` in percent of the baseline (`unit` "%") or in the figure's
    own unit; a relative one is at least `floor` (in the figure's unit: 0, none)."""

    value: float
    unit: str
    floor: float = 0.0

    def absolute(self, baseline: float | None) -> float | None:
        """The margin in the figure's unit; None for a relative one without a baseline."""
        if self.unit != PERCENT:
            return self.value
        return None if baseline is None else max(abs(baseline) * self.value / 100.0,
                                                 self.floor)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit}
        return {**out, "floor": self.floor} if self.floor else out


@dataclass(frozen=True, slots=True)
class MinEffect:
    """The margin of every figure: `default`, unless `per_figure` names it."""

    default: Margin = Margin(MIN_EFFECT_PERCENT, PERCENT)
    per_figure: Mapping[str, Margin] = field(default_factory=dict)

    def of(self, name: str, unit: str = "") -> Margin:
        """`name`'s margin: its own, else the default, which for a time (`ms`) is at least
        `MS_FLOOR`."""
        mine = self.per_figure.get(name)
        if mine is not None:
            return mine
        if unit == "ms" and self.default.unit == PERCENT:
            return Margin(self.default.value, PERCENT, MS_FLOOR)
        return self.default


DEFAULT = MinEffect()


def _number(part: str, text: str, allowed: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise UsageError(f"{FLAG}: {part!r}: {text!r} is not a number ≥ 0; {allowed}")
    return v


def parse_min_effect(value: str, units: Mapping[str, str]) -> MinEffect:
    """`--min-effect`'s value (module doc) against the figures compare shows (name -> unit);
    UsageError naming the bad part and what is allowed."""
    allowed = ("allowed: PCT% (every figure), NAME=PCT% or NAME=NUMBER[UNIT] in the "
               "figure's own unit, comma-separated, e.g. 2%,ttft_p50_ms=5%,e2e_p50_ms=10ms")
    default, per = DEFAULT.default, {}
    for part in (p.strip() for p in value.split(",")):
        name, eq, amount = part.rpartition("=") if "=" in part else ("", "", part)
        name, amount = name.strip(), amount.strip().replace(" ", "")
        if eq and name not in units:
            raise UsageError(f"{FLAG}: {part!r}: {name!r} is no figure anvil compare shows "
                             f"(e.g. {', '.join(list(units)[:4])}); {allowed}")
        if amount.endswith(PERCENT):
            margin = Margin(_number(part, amount[:-1], allowed), PERCENT)
        elif not eq:
            raise UsageError(f"{FLAG}: {part!r}: a margin for every figure must be in % "
                             f"(figures have different units); {allowed}")
        else:
            unit = units[name]
            digits = amount.removesuffix(unit.replace(" ", "")) if unit else amount
            margin = Margin(_number(part, digits, f"{name}'s unit is {unit or 'none'}; "
                                    f"{allowed}"), unit)
        if eq:
            per[name] = margin
        else:
            default = margin
    return MinEffect(default, per)
