"""Per-request criteria, `NAME OP NUMBER`: goodput's (`--goodput "ttft_ms<=2000"`) and,
written alike, the capacity search's SLOs (`--slo "ttft_p95_ms<=2000"`).

Why apart from `post/goodput.py`, which counts the requests that meet them: a scenario and
the options check criteria when a run is asked for, long before any row exists, and the
layer that reads a scenario sits below the one that reads rows (ARCHITECTURE.md). The text
is parsed here once; what a criterion means for a row is `goodput.meets`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.errors import UsageError

OPS = {"<=": np.less_equal, "<": np.less, ">=": np.greater_equal, ">": np.greater}
NUMERIC = tuple(f.name for f in catalog.ROW if f.kind in ("count", "duration", "float")
                and f.name != "request_index")
_BOUND = re.compile(r"\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*")


def parse_bounds(text: str | Sequence[str], flag: str, example: str
                 ) -> list[tuple[str, str, float, str]]:
    """`(name, op, limit, part)` of each `NAME OP NUMBER` in a comma-separated text (or a
    list of such texts): goodput criteria and capacity SLOs are written alike. UsageError
    naming `flag` and the bad part; `example` shows a good one."""
    parts = [p for t in ([text] if isinstance(text, str) else text) for p in t.split(",")]
    out = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        m = _BOUND.fullmatch(part)
        if m is None:
            raise UsageError(f"{flag} {part!r} is not allowed; expected NAME<=NUMBER (or <, "
                             f">=, >), e.g. {example}")
        name, op, number = m.groups()
        try:
            limit = float(number)
        except ValueError:
            raise UsageError(f"{flag} {part!r}: {number!r} is not a number") from None
        out.append((name, op, limit, part))
    if not out:
        raise UsageError(f"{flag} {text!r} has nothing to check; expected e.g. {example}")
    return out


@dataclass(frozen=True, slots=True)
class Criterion:
    """`field op limit`, e.g. ttft_ms <= 2000."""

    field: str
    op: str
    limit: float

    def text(self) -> str:
        return f"{self.field}{self.op}{self.limit:g}"


def parse_criteria(text: str | Sequence[str], flag: str = "--goodput") -> tuple[Criterion, ...]:
    """Criteria from `"a<=1,b>2"` (or a list of such texts); UsageError naming `flag`, the
    bad part and what is allowed."""
    out = []
    for name, op, limit, part in parse_bounds(text, flag, "ttft_ms<=2000"):
        if name not in NUMERIC:
            raise UsageError(f"{flag} {part!r}: {name!r} is not a numeric field of "
                             f"request_timings; one of {', '.join(NUMERIC)}")
        out.append(Criterion(name, op, limit))
    return tuple(out)
