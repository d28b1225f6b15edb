"""Goodput: the requests that met every per-request criterion, per second of the run.

Why: throughput counts requests the user would not accept (a 30 s time to first token is
still a completed request). vLLM's bench (`--goodput ttft:2000 …`), AIPerf and the
DistServe paper count instead the requests that meet a service-level objective. Here a
criterion is `<row field> <op> <number>` on any numeric field of `request_timings[]`
(`catalog.ROW`), e.g. `ttft_ms<=2000,mean_inter_token_latency_ms<=50`, with ops `<=`, `<`,
`>=`, `>`. A request meets the criteria when it completed and every named field is present
and within its bound (a null field — no content, say — does not meet `ttft_ms<=2000`); a
failed request never meets them.

In the document (when criteria were given): `goodput: {criteria, met, fraction}` — the
criteria as text, how many requests met them, and `met / requests` — and
`metrics.goodput_rps = met / (wall_clock_ms / 1000)`; per step in `steps[]`, with the
step's own window. `anvil verify` recomputes both from the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from msgspec import Struct

from anvil_metrics.errors import UsageError
from anvil_metrics.fieldtypes import Count, Figure, described
from anvil_metrics.jsonio import JsonObject, JsonValue
from anvil_metrics.load.criteria import OPS, Criterion, parse_criteria
from anvil_metrics.post.blockkit import ABSENT, BuildInputs, _Absent
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.schema import fmt, is_ms, same


class Goodput(Struct, forbid_unknown_fields=True):
    """The requests meeting every goodput criterion the run was given (module docstring)."""

    criteria: Annotated[list[str], described(
        "", "the criteria as text, each <row field> <op> <number>, e.g. ttft_ms<=2000")]
    met: Annotated[Count, described("", "measured requests that completed with every named "
                                        "field present and within its bound")]
    fraction: Annotated[Figure | None, described("", "met / requests; null without "
                                                     "requests")]


def meets(rows: RowColumns, criteria: Sequence[Criterion]) -> Any:
    """Per row: True where every criterion holds (a null value never does)."""
    ok = np.ones(len(rows), dtype=bool)
    for c in criteria:
        values = rows.values(c.field)
        with np.errstate(invalid="ignore"):
            ok &= ~np.isnan(values) & OPS[c.op](values, c.limit)
    return ok


def goodput(rows: RowColumns, requests: int, wall_clock_ms: float | None,
            criteria: Sequence[Criterion]) -> tuple[JsonObject, float | None]:
    """(`goodput` block, `goodput_rps`) of rows out of `requests` issued over the window."""
    met = int(np.count_nonzero(meets(rows, criteria)))
    block = {"criteria": [c.text() for c in criteria], "met": met,
             "fraction": met / requests if requests else None}
    return block, rate(met, wall_clock_ms)


def rate(met: int, wall_clock_ms: float | None) -> float | None:
    """`met / (wall_clock_ms / 1000)`; None without a positive window."""
    if wall_clock_ms is None or wall_clock_ms <= 0:
        return None
    return met / (wall_clock_ms / 1000)


def build(inputs: BuildInputs) -> JsonValue | _Absent:
    """The block of a run given criteria, else ABSENT; it sets `metrics.goodput_rps` too
    (the one figure of `metrics` that needs the criteria)."""
    if inputs.criteria is None:
        return ABSENT
    doc = inputs.doc
    block, doc["metrics"]["goodput_rps"] = goodput(inputs.rows, doc["requests"],
                                                   doc["wall_clock_ms"], inputs.criteria)
    return block


def verify(doc: Mapping[str, JsonValue], rows: RowColumns | None, problems: list[str]) -> None:
    """`goodput` and `metrics.goodput_rps`, recomputed from the rows (when well-typed)."""
    block = doc.get("goodput")
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {}
    if block is None:
        if "goodput_rps" in metrics:
            problems.append("metrics.goodput_rps: set, but the file has no goodput criteria")
        return
    try:
        criteria = parse_criteria(block["criteria"], flag="goodput.criteria")
    except UsageError as e:
        problems.append(str(e))
        return
    if rows is None:
        return
    requests = doc.get("requests") if type(doc.get("requests")) is int else len(rows)
    wall = doc.get("wall_clock_ms") if is_ms(doc.get("wall_clock_ms")) else None
    want, want_rps = goodput(rows, requests, wall, criteria)
    for key in ("met", "fraction"):
        if not same(block.get(key), want[key]):
            problems.append(f"goodput.{key}: file has {fmt(block.get(key))}, recomputed "
                            f"{fmt(want[key])} from the rows and {block['criteria']}")
    if not same(metrics.get("goodput_rps"), want_rps):
        problems.append(f"metrics.goodput_rps: file has {fmt(metrics.get('goodput_rps'))}, "
                        f"recomputed {fmt(want_rps)} = met / (wall_clock_ms / 1000)")
