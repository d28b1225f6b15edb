"""What a block of `benchmark.json` is made of: one `Block` entry, and what it is built from.

Why: a block (load, steps, conversation, mix, cancel, trace, steady_state, server, goodput,
client, ...) is stated once, in its own module: its typed definition (a msgspec Struct
whose fields carry their type, bounds, unit and words: `fieldtypes`), how it is built from
a run, the rules its type cannot say (a figure recomputed from the rows) and the CLI's
lines about it. `blocks.BLOCKS` lists the entries; the build (`benchmark.py`), `anvil
verify` (`verify.py`), the run's summary (`runs/launch.py`), the JSON Schema and
`docs/fields.md` (`schemas/build.py`) walk that list. Adding a block is one module and
one entry.

    Block(name, model, text, build, verify, summary)

- `model`: the value's type as msgspec reads it (a Struct, `X | None` where null is
  allowed); `anvil verify` checks the file's value against it (`fieldtypes.problems`)
  before `verify` runs, so `verify` sees a value of the right shape, or none.
- `build(inputs)`: the value for a run, or `ABSENT` (the run has no such block);
- `verify(doc, rows, problems)`: what the type cannot say; called for every document,
  with the block absent too (rows that name a mix in a file without one); `rows` is None
  when the rows are not all well typed;
- `summary(doc)`: the CLI's lines (none for a file without the block).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

import numpy as np
from msgspec import Struct

from anvil_metrics.fieldtypes import described
from anvil_metrics.fieldtypes import num as num
from anvil_metrics.jsonio import JsonValue
from anvil_metrics.load.criteria import Criterion
from anvil_metrics.post.derive import Floats, Ints, RowColumns
from anvil_metrics.post.rawcolumns import COL, RawColumns
from anvil_metrics.post.stats import nearest_rank_columns


class _Absent:
    """The block is not in this document (`build`'s answer for a run without it)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """The measured records of a run, in the document's order (`benchmark.measured_order`:
    positions `order` in the raw `table`): each one's raw value (`column(name)`: a column of
    `rawcolumns.RAW_COLUMNS`, `NULL` for a missing value, stamps on their own host's clock;
    taken when asked for: a million rows' whole table is 200 MB) and `start_ns` / `last_ns`
    (the end, or the start without one) placed on the master's clock."""

    table: Ints
    order: Ints
    start_ns: Ints
    last_ns: Ints

    def column(self, name: str) -> Ints:
        return self.table[:, COL[name]][self.order]


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildInputs:
    """What a block is built from: the raw run (`raw`: its header, run_end, step and window
    lines), the header's `params`, the generator's own figures (`client`: the raw
    `run_end`'s, None without), the rows, the measured records (`measured`), the run's
    clock anchor (`anchor_ns`: its header's perf_anchor_ns), the goodput criteria it was
    given (None without), the measured records started outside its window (None without
    one), and the document built so far (`doc`: the run fields, failures and metrics, and
    the blocks before this one in `BLOCKS`)."""

    raw: RawColumns
    params: Mapping[str, JsonValue]
    client: Mapping[str, JsonValue] | None
    rows: RowColumns
    measured: Measured
    anchor_ns: int | None
    criteria: tuple[Criterion, ...] | None
    outside: Mapping[str, int] | None
    doc: MutableMapping[str, JsonValue]


Build = Callable[[BuildInputs], "JsonValue | _Absent"]
Verify = Callable[[Mapping[str, JsonValue], RowColumns | None, list[str]], None]
Summary = Callable[[Mapping[str, JsonValue]], list[str]]


@dataclass(frozen=True, slots=True)
class Block:
    """One block of the document (module docstring): its key, its typed definition, what it
    is in one sentence (its schema's and docs' description), and its three functions."""

    name: str
    model: Any
    text: str
    build: Build
    verify: Verify | None = None
    summary: Summary | None = None


def mean_of(values: Floats) -> float | None:
    """The mean of a float column's values that are present (NaN: missing), or None."""
    v = values[~np.isnan(values)]
    return float(v.mean()) if len(v) else None


def _group_latency(q: str, name: str) -> Any:
    return Annotated[float | None, described(
        "ms", f"nearest-rank {q} of the group's rows' {name}; null when none has it")]


# the four fields `latencies` gives, as a block's Struct declares them
TTFT_P50 = _group_latency("p50", "ttft_ms")
TTFT_P95 = _group_latency("p95", "ttft_ms")
E2E_P50 = _group_latency("p50", "e2e_ms")
E2E_P95 = _group_latency("p95", "e2e_ms")


class GroupLatencies(Struct, kw_only=True):
    """The four fields `latencies` gives, for a group's Struct to inherit (kw_only: after
    the group's own fields)."""

    ttft_p50_ms: TTFT_P50
    ttft_p95_ms: TTFT_P95
    e2e_p50_ms: E2E_P50
    e2e_p95_ms: E2E_P95


def latencies(rows: RowColumns) -> dict[str, float | None]:
    """A group's latency figures (a conversation's turn, a mix's class or model):
    nearest-rank p50 and p95 of its rows' `ttft_ms` and `e2e_ms` that are present."""
    ttft, e2e = rows.values("ttft_ms"), rows.values("e2e_ms")
    t50, t95 = nearest_rank_columns(ttft[~np.isnan(ttft)], (50, 95))
    e50, e95 = nearest_rank_columns(e2e[~np.isnan(e2e)], (50, 95))
    return {"ttft_p50_ms": t50, "ttft_p95_ms": t95, "e2e_p50_ms": e50, "e2e_p95_ms": e95}
