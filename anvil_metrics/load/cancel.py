"""Cancellation under load: a planned fraction of requests closed by the client on purpose.

Why: users close tabs and agents give up. A server must free an aborted request's slot and
KV cache at once, and that is what a cancelled request tests (AIPerf's request
cancellation). `--cancel-rate P --cancel-after POINT` (or the scenario's
`[cancel]` table: `rate = 0.1`, `after = "decode"`) closes that fraction of the measured
requests at that point:

- `prefill`: as soon as the request has been written (the server has it and is queueing or
  prefilling it);
- `decode`: at the stream's first output (the server is decoding);
- a number of milliseconds: that long after the request's start, whatever it is doing then.

Which: request k is cancelled when `mix.uniform(context_seed, 3, k) < rate` (warm-ups
never), so the same requests are cancelled on any number of users or workers. A cancelled
request's record is a failure of kind `aborted` (`records.FAILURE_KINDS`) with the phase it
was in when its connection was closed; it is its own outcome in `benchmark.json`'s `cancel`
block, not a failure of the server: it has no row, does not count toward the run ending
itself (`live/abort.py`) and is left out of Locust's failure table. A request the plan
drew that completed before its point (a short answer under `decode`, or a delay longer
than the request) completed: it has its row, and the block counts it apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import ScenarioError
from anvil_metrics.load.mix import uniform
from anvil_metrics.load.optionvalues import Kind, number

POINTS = ("prefill", "decode")
CANCEL_STREAM = 3  # `mix.uniform`'s stream of the cancellation draw
KIND = "aborted"  # the failure kind of a request cancelled on purpose


@dataclass(frozen=True, slots=True)
class CancelPlan:
    """`rate` of the measured requests closed at `after`: "prefill", "decode" or a delay in
    milliseconds after the start (a float)."""

    rate: float
    after: str | float
    seed: int = 0

    def cancels(self, index: int) -> bool:
        """Whether measured request `index` is one the plan cancels."""
        return uniform(self.seed, CANCEL_STREAM, index) < self.rate

    @property
    def after_ms(self) -> float | None:
        return None if isinstance(self.after, str) else self.after

    def to_table(self) -> dict[str, Any]:
        """The `[cancel]` table `parse_cancel` reads back (`seed` apart: context_seed's);
        also the raw header's `params.cancel` (with the seed)."""
        return {"rate": self.rate, "after": self.after}


def _after(v: Any) -> str | float | None:
    """`v` as a point: "prefill", "decode", or milliseconds > 0 (a number, or its text)."""
    if isinstance(v, str) and v in POINTS:
        return v
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not (
            math.isfinite(v) and v > 0):
        return None
    return float(v)


# the table's two keys, as the file and the flags (`--cancel-rate`, `--cancel-after`) give
# them: what each may be
RATE = number("a fraction > 0 and <= 1", at_most=1.0)
AFTER = Kind("prefill, decode, or a number of milliseconds > 0 after the request's start",
             lambda v: _after(v) is not None)


def parse_cancel(table: Any, seed: int, src: str | None) -> CancelPlan | None:
    """The scenario's `[cancel]` table (None or empty: no cancellation)."""
    if table is None or table == {}:
        return None
    if not isinstance(table, dict):
        raise ScenarioError("cancel", table, "a table", source=src)
    for k in table:
        if k not in ("rate", "after"):
            raise ScenarioError(f"cancel.{k}", table[k], "one of the keys ['after', 'rate']",
                                source=src)
    for key, kind in (("rate", RATE), ("after", AFTER)):
        if not kind.accepts(table.get(key)):
            raise ScenarioError(f"cancel.{key}", table.get(key), f"{kind.allowed} (required)",
                                source=src)
    return CancelPlan(float(table["rate"]), _after(table["after"]), seed)  # type: ignore[arg-type]
